//! One active health probe (`proxy.health-check`): `GET path` over a new connection (TLS to an
//! `https://` backend, verified as requests are), the status line read and compared, all
//! within the check's timeout. Blocking: probes run on threads of their own, off the workers'
//! event loops.

use super::proxy_line;
use crate::config::{HealthCheck, UpstreamAddr};
use crate::tls::client::ClientTls;
use rustls::{ClientConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The status line must come within this many bytes.
const MAX_STATUS_LINE: usize = 1024;

/// Probes the backend at `addr` (`host` is its URL's authority, sent as Host). `Err` says why
/// it failed.
pub fn run(
    addr: &UpstreamAddr,
    host: &str,
    check: &HealthCheck,
    proxy_protocol: bool,
    tls: Option<&ClientTls>,
) -> Result<(), String> {
    let deadline = Instant::now() + check.timeout;
    let conn = connect(addr, deadline).map_err(|e| format!("cannot connect: {e}"))?;
    let mut conn = match (conn, tls) {
        (Probe::Tcp(s), Some(tls)) => {
            // The PROXY line goes before the handshake, in the clear.
            if proxy_protocol {
                s.set_write_timeout(Some(left(deadline)?))
                    .and_then(|()| (&s).write_all(proxy_line::UNKNOWN))
                    .map_err(|e| format!("cannot send the PROXY line: {e}"))?;
            }
            let c = ClientConnection::new(tls.http1.clone(), tls.server_name.clone())
                .map_err(|e| format!("TLS: {e}"))?;
            Probe::Tls(Box::new(StreamOwned::new(c, s)))
        }
        (conn, _) => conn,
    };
    let mut request = Vec::with_capacity(128);
    if proxy_protocol && tls.is_none() {
        request.extend_from_slice(proxy_line::UNKNOWN);
    }
    request.extend_from_slice(
        format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: spate-health-check\r\nConnection: close\r\n\r\n",
            check.path
        )
        .as_bytes(),
    );
    conn.set_timeout(left(deadline)?)
        .map_err(|e| e.to_string())?;
    conn.write_all(&request)
        .map_err(|e| format!("cannot send the probe: {e}"))?;
    let status = read_status(&mut conn, deadline)?;
    if status == check.status {
        Ok(())
    } else {
        Err(format!("status {status} (expected {})", check.status))
    }
}

enum Probe {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// The handshake runs with the first write.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

fn connect(addr: &UpstreamAddr, deadline: Instant) -> io::Result<Probe> {
    match addr {
        UpstreamAddr::Tcp { host, port } => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
            for a in (host.as_str(), *port).to_socket_addrs()? {
                let timeout = deadline.saturating_duration_since(Instant::now());
                if timeout.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                match TcpStream::connect_timeout(&a, timeout) {
                    Ok(s) => return Ok(Probe::Tcp(s)),
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        UpstreamAddr::Unix(path) => UnixStream::connect(path).map(Probe::Unix),
    }
}

impl Probe {
    fn set_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Probe::Tcp(s) => s
                .set_read_timeout(Some(t))
                .and_then(|()| s.set_write_timeout(Some(t))),
            Probe::Unix(s) => s
                .set_read_timeout(Some(t))
                .and_then(|()| s.set_write_timeout(Some(t))),
            Probe::Tls(s) => s
                .sock
                .set_read_timeout(Some(t))
                .and_then(|()| s.sock.set_write_timeout(Some(t))),
        }
    }

    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Probe::Tcp(s) => s.write_all(b),
            Probe::Unix(s) => s.write_all(b),
            Probe::Tls(s) => s.write_all(b).and_then(|()| s.flush()),
        }
    }

    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Probe::Tcp(s) => s.read(b),
            Probe::Unix(s) => s.read(b),
            Probe::Tls(s) => s.read(b),
        }
    }
}

fn left(deadline: Instant) -> Result<Duration, String> {
    match deadline.saturating_duration_since(Instant::now()) {
        d if d.is_zero() => Err("timed out".into()),
        d => Ok(d),
    }
}

/// Reads up to the end of the status line and returns its code.
fn read_status(conn: &mut Probe, deadline: Instant) -> Result<u16, String> {
    let mut buf = [0u8; MAX_STATUS_LINE];
    let mut len = 0;
    loop {
        if let Some(end) = buf[..len].windows(2).position(|w| w == b"\r\n") {
            return status_code(&buf[..end]).ok_or_else(|| "malformed status line".into());
        }
        if len == buf.len() {
            return Err("status line too long".into());
        }
        conn.set_timeout(left(deadline)?)
            .map_err(|e| e.to_string())?;
        match conn.read(&mut buf[len..]) {
            Ok(0) => return Err("closed before a status line".into()),
            Ok(n) => len += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err("timed out".into())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
}

/// `HTTP/1.x NNN ...` -> NNN
fn status_code(line: &[u8]) -> Option<u16> {
    let rest = line.strip_prefix(b"HTTP/1.")?.get(2..)?;
    match rest {
        [a, b, c, ..] if [a, b, c].iter().all(|d| d.is_ascii_digit()) => {
            let d = |x: &u8| u16::from(x - b'0');
            Some(d(a) * 100 + d(b) * 10 + d(c))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::status_code;

    #[test]
    fn status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK"), Some(200));
        assert_eq!(status_code(b"HTTP/1.0 503"), Some(503));
        assert_eq!(status_code(b"HTTP/1.1 20"), None);
        assert_eq!(status_code(b"HTTP/2 200"), None);
        assert_eq!(status_code(b"SSH-2.0"), None);
    }
}
