//! Listening sockets: one per worker and address, bound with SO_REUSEPORT so the kernel
//! spreads connections over the workers.
//!
//! SO_REUSEPORT would also let a second spate (a stale one, or a copy started twice) share a
//! port with us silently, each getting part of the traffic. So before binding, a probe socket
//! without SO_REUSEPORT claims the address: if anyone listens there, the probe fails and so
//! does the start (unless the listener's `reuseport` asks to share). Reload and binary
//! upgrade share sockets by inheriting them, never by binding again.

use crate::config::SocketOptions;
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;

/// The accept queue length; the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 4096;

/// What a listening socket is set up with: its `listen` options and the global
/// `tcp-fastopen` queue.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub socket: SocketOptions,
    pub fastopen: u32,
}

impl Tuning {
    /// Sets the options on a listening socket (new, or kept from before a reload or binary
    /// upgrade: the connections it accepts from then on have them).
    pub fn apply(&self, sock: SockRef<'_>) -> io::Result<()> {
        if let Some(n) = self.socket.sndbuf {
            sock.set_send_buffer_size(n)?;
        }
        if let Some(n) = self.socket.rcvbuf {
            sock.set_recv_buffer_size(n)?;
        }
        set_fastopen(sock.as_raw_fd(), self.fastopen)
    }
}

/// TCP_FASTOPEN on a listening socket: the queue of connections whose first data came with
/// the SYN (socket2 has no setter for it).
fn set_fastopen(fd: std::os::fd::RawFd, queue: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(queue).unwrap_or(libc::c_int::MAX);
    crate::sys::socket::set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, value)
}

/// Binds `count` sockets on `addr`, which nobody else may be listening on (unless
/// `reuseport` lets other SO_REUSEPORT listeners share it). A port of 0 is resolved once and
/// shared by all of them.
pub fn bind_fresh(
    addr: SocketAddr,
    count: usize,
    tuning: &Tuning,
) -> Result<Vec<TcpListener>, BindError> {
    let addr = match probe(addr) {
        Err(BindError::InUse(_)) if tuning.socket.reuseport && addr.port() != 0 => addr,
        other => other?,
    };
    let mut socks = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        let sock = bind(addr, tuning).map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => BindError::InUse(addr),
            _ => BindError::Other(addr, e),
        })?;
        socks.push(sock);
    }
    Ok(socks)
}

/// Binds one more socket to an address this process already listens on (more workers after
/// a reload): it joins the same SO_REUSEPORT group.
pub fn bind(addr: SocketAddr, tuning: &Tuning) -> io::Result<TcpListener> {
    let sock = new_socket(addr)?;
    sock.set_reuse_port(true)?;
    sock.set_nonblocking(true)?;
    tuning.apply(SockRef::from(&sock))?;
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
    Ok(sock.into())
}

/// Binds the socket file of a `type: unix` listener, non-blocking, with its `permission`.
/// A socket file left by an earlier run is replaced; any other file there is an error.
pub fn bind_unix(conf: &crate::config::UnixListen) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(&conf.path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            ));
        }
        std::fs::remove_file(&conf.path)?;
    }
    let sock = std::os::unix::net::UnixListener::bind(&conf.path)?;
    sock.set_nonblocking(true)?;
    if let Some(mode) = conf.permission {
        std::fs::set_permissions(&conf.path, std::fs::Permissions::from_mode(mode))?;
    }
    if let Some(name) = &conf.owner {
        let owner = super::account::Account::find(name).map_err(io::Error::other)?;
        std::os::unix::fs::chown(&conf.path, Some(owner.uid), Some(owner.gid))?;
    }
    Ok(sock)
}

/// Why an address could not be bound.
#[derive(Debug)]
pub enum BindError {
    /// Another process (maybe another spate) listens there.
    InUse(SocketAddr),
    Other(SocketAddr, io::Error),
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindError::InUse(a) => write!(
                f,
                "cannot listen on {a}: the address is already in use (another spate, or another \
                 program, listens there; stop it or choose another port)"
            ),
            BindError::Other(a, e) => write!(f, "cannot listen on {a}: {e}"),
        }
    }
}

/// Binds (without listening) a socket without SO_REUSEPORT, so that it conflicts with any
/// listener on `addr`, then closes it. Returns the address with its port resolved.
fn probe(addr: SocketAddr) -> Result<SocketAddr, BindError> {
    let sock = new_socket(addr).map_err(|e| BindError::Other(addr, e))?;
    match sock.bind(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(BindError::InUse(addr)),
        Err(e) => return Err(BindError::Other(addr, e)),
    }
    sock.local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .ok_or_else(|| BindError::Other(addr, io::Error::other("no local address")))
}

fn new_socket(addr: SocketAddr) -> io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // Connections of a previous run in TIME_WAIT do not block the address.
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // `[::]:80` and `0.0.0.0:80` may both be configured.
        sock.set_only_v6(true)?;
    }
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Tuning = Tuning {
        socket: SocketOptions {
            sndbuf: None,
            rcvbuf: None,
            reuseport: false,
        },
        fastopen: 0,
    };

    fn any_port() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    #[test]
    fn a_port_taken_by_a_plain_listener_is_refused() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap();
        assert!(matches!(
            bind_fresh(addr, 2, &PLAIN),
            Err(BindError::InUse(_))
        ));
    }

    #[test]
    fn a_port_taken_by_reuseport_listeners_is_refused() {
        let mine = bind_fresh(any_port(), 2, &PLAIN).unwrap();
        let addr = mine[0].local_addr().unwrap();
        assert_eq!(mine[1].local_addr().unwrap(), addr);
        let err = bind_fresh(addr, 2, &PLAIN).unwrap_err();
        assert!(err.to_string().contains("already in use"), "{err}");
        // Joining our own group stays possible (more workers after a reload).
        assert!(bind(addr, &PLAIN).is_ok());
    }

    /// `reuseport: ON` shares the address with another program's SO_REUSEPORT listener, and
    /// still refuses a plain one.
    #[test]
    fn reuseport_on_shares_the_address_with_another_reuseport_listener() {
        let shared = Tuning {
            socket: SocketOptions {
                reuseport: true,
                ..PLAIN.socket
            },
            ..PLAIN
        };
        let other = bind(any_port(), &PLAIN).unwrap();
        let addr = other.local_addr().unwrap();
        assert_eq!(bind_fresh(addr, 2, &shared).unwrap().len(), 2);
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let err = bind_fresh(plain.local_addr().unwrap(), 1, &shared).unwrap_err();
        assert!(matches!(err, BindError::InUse(_)), "{err}");
    }

    #[test]
    fn buffer_sizes_and_fast_open_reach_the_listener_and_its_connections() {
        let tuning = Tuning {
            socket: SocketOptions {
                sndbuf: Some(65536),
                rcvbuf: Some(32768),
                reuseport: false,
            },
            fastopen: 16,
        };
        let l = bind_fresh(any_port(), 1, &tuning).unwrap().remove(0);
        let fastopen = |fd: std::os::fd::RawFd| {
            let v = crate::sys::socket::int_option(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN);
            v.unwrap()
        };
        assert_eq!(fastopen(l.as_raw_fd()), 16);
        // The kernel doubles the sizes asked for (room for its own bookkeeping).
        let sizes = |s: SockRef<'_>| (s.send_buffer_size().unwrap(), s.recv_buffer_size().unwrap());
        assert_eq!(sizes(SockRef::from(&l)), (131072, 65536));
        let _client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        l.set_nonblocking(false).unwrap();
        let (accepted, _) = l.accept().unwrap();
        assert_eq!(sizes(SockRef::from(&accepted)), (131072, 65536));
        // Off again (a reload that dropped the option): 0 is accepted.
        Tuning {
            fastopen: 0,
            ..tuning
        }
        .apply(SockRef::from(&l))
        .unwrap();
        assert_eq!(fastopen(l.as_raw_fd()), 0);
    }
}
