//! Binary upgrade, the nginx way: on SIGUSR2 spate starts the executable it was started from
//! (a new build put in its place) with the same arguments, and hands it the listening sockets
//! themselves, so no connection waiting in an accept queue is lost and no port is ever closed.
//!
//! The sockets travel as inherited descriptors named in `SPATE_INHERIT`
//! (`CONFIGURED|BOUND|FD,FD;...`, one entry per listen address; `|udp` after the
//! descriptors of a QUIC listener's UDP sockets). The new process writes one
//! byte to the pipe named in `SPATE_READY_FD` once its workers serve; only then does the old
//! one drain and exit. With a QUIC listener, `SPATE_QUIC_LINK` (`FD,BIT`) names the new
//! process's end of the link over which each process passes the other the datagrams of its
//! QUIC connections, and the tag bit its connection IDs carry (`quic/peer.rs`; see
//! `quic/LIFECYCLE.md`); `SPATE_QUIC_SECRET_FD` a pipe holding the process's QUIC secret
//! (`quic/secret.rs`), which the new process keeps. If the new one fails (a bad configuration, a crash, no answer within
//! `UPGRADE_TIMEOUT`), the old one logs why and keeps serving.

use super::quic::upgrade_link;
use super::Bound;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::Duration;

const INHERIT_ENV: &str = "SPATE_INHERIT";
const READY_ENV: &str = "SPATE_READY_FD";
const QUIC_LINK_ENV: &str = "SPATE_QUIC_LINK";

/// How long the new process may take to report ready.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts `exe` with our arguments and `listeners`' sockets; returns its pid once it serves.
pub(super) fn start(exe: &Path, listeners: &[Bound]) -> Result<u32, String> {
    let quic = listeners.iter().any(|b| !b.udp.is_empty());
    if quic && upgrade_link::linked() {
        // Its connection IDs carry the tag bit the next process would take.
        return Err(
            "the process this one replaced still drains its QUIC connections (their datagrams \
             pass through this one): upgrade again once it has exited"
                .into(),
        );
    }
    let link = match quic {
        true => Some(upgrade_link::pair().map_err(|e| format!("cannot make the QUIC link: {e}"))?),
        false => None,
    };
    let mut fds = Vec::new();
    let mut spec = Vec::with_capacity(listeners.len());
    for b in listeners {
        if b.unix.is_some() {
            // The new process binds the file afresh (replacing the socket file).
            continue;
        }
        let mut these: Vec<RawFd> = b.socks.iter().map(|s| s.as_raw_fd()).collect();
        these.extend(b.udp.iter().map(|s| s.as_raw_fd()));
        let list: Vec<String> = these.iter().map(|f| f.to_string()).collect();
        let kind = if b.udp.is_empty() { "" } else { "|udp" };
        spec.push(format!(
            "{}|{}|{}{kind}",
            b.configured,
            b.addr,
            list.join(",")
        ));
        fds.extend(these);
    }
    let (read_end, write_end) = pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
    fds.push(write_end.as_raw_fd());
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .env(INHERIT_ENV, spec.join(";"))
        .env(READY_ENV, write_end.as_raw_fd().to_string());
    // The QUIC secret goes through a pipe of its own, never the environment (readable in
    // /proc): the new process keeps our stateless reset and Retry token keys.
    let secret = match quic {
        true => Some(
            upgrade_link::hand_over_secret()
                .map_err(|e| format!("cannot hand over the QUIC secret: {e}"))?,
        ),
        false => None,
    };
    match (&link, &secret) {
        (Some((_, theirs)), Some(secret)) => {
            fds.push(theirs.as_raw_fd());
            let bit = upgrade_link::process_bit() ^ upgrade_link::PROCESS_BIT;
            cmd.env(QUIC_LINK_ENV, format!("{},{bit}", theirs.as_raw_fd()));
            fds.push(secret.as_raw_fd());
            cmd.env(upgrade_link::SECRET_FD_ENV, secret.as_raw_fd().to_string());
        }
        _ => {
            cmd.env_remove(QUIC_LINK_ENV);
            cmd.env_remove(upgrade_link::SECRET_FD_ENV);
        }
    }
    crate::sys::process::keep_open_across_exec(&mut cmd, fds);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    // Our copy closed, the pipe ends when the child exits: a crash reads as end of file.
    drop(write_end);
    drop(secret);
    // The same for the link: our end reads its end when the new process exits.
    let ours = link.map(|(ours, _)| ours);
    match wait_ready(&read_end) {
        Ok(()) => {
            if let Some(ours) = ours {
                if let Err(e) = upgrade_link::install(ours) {
                    tracing::warn!("binary upgrade: no QUIC link to the new process: {e}");
                }
            }
            Ok(child.id())
        }
        Err(why) => {
            let _ = child.kill();
            let status = child
                .wait()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            Err(format!("{why} (new process {}: {status})", child.id()))
        }
    }
}

/// Waits for the new process's byte.
fn wait_ready(read_end: &std::fs::File) -> Result<(), String> {
    loop {
        match crate::sys::file::wait_readable(read_end.as_raw_fd(), UPGRADE_TIMEOUT) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(false) => return Err(format!("not ready within {UPGRADE_TIMEOUT:?}")),
            _ => break,
        }
    }
    let mut byte = [0u8; 1];
    match io::Read::read(&mut &*read_end, &mut byte) {
        Ok(1) => Ok(()),
        Ok(_) => Err("it exited before it was ready".into()),
        Err(e) => Err(format!("cannot read its answer: {e}")),
    }
}

fn pipe() -> io::Result<(std::fs::File, std::fs::File)> {
    let (read_end, write_end) = crate::sys::file::pipe()?;
    Ok((
        std::fs::File::from(read_end),
        std::fs::File::from(write_end),
    ))
}

/// The sockets a previous spate handed us, if we were started by an upgrade.
pub(super) fn inherited() -> Result<Vec<Bound>, String> {
    adopt_quic_link()?;
    if std::env::var_os(upgrade_link::SECRET_FD_ENV).is_some() {
        upgrade_link::load_secret();
    }
    let Ok(spec) = std::env::var(INHERIT_ENV) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in spec.split(';').filter(|e| !e.is_empty()) {
        let bad = || format!("{INHERIT_ENV}: cannot read {entry:?}");
        let mut parts = entry.split('|');
        let (Some(configured), Some(addr), Some(fds)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let configured: SocketAddr = configured.parse().map_err(|_| bad())?;
        let addr: SocketAddr = addr.parse().map_err(|_| bad())?;
        let mut socks = Vec::new();
        if parts.next() == Some("udp") {
            let mut udp = Vec::new();
            for fd in fds.split(',') {
                let fd: RawFd = fd.parse().map_err(|_| bad())?;
                // As below; a bound UDP socket of a QUIC listener.
                let Ok(sock) = crate::sys::process::adopt_inherited(fd) else {
                    return Err(format!("{INHERIT_ENV}: descriptor {fd} is not {addr}"));
                };
                let sock = std::net::UdpSocket::from(sock);
                match sock.local_addr() {
                    Ok(a) if a == addr => {}
                    _ => return Err(format!("{INHERIT_ENV}: descriptor {fd} is not {addr}")),
                }
                udp.push(sock);
            }
            out.push(Bound {
                configured,
                addr,
                tls: true,
                quic: true,
                socks,
                udp,
                unix: None,
            });
            continue;
        }
        for fd in fds.split(',') {
            let fd: RawFd = fd.parse().map_err(|_| bad())?;
            // The previous process made this descriptor inheritable for us alone: a listening
            // TCP socket. Taken over, it is closed on exec (a next upgrade passes it
            // explicitly).
            let Ok(sock) = crate::sys::process::adopt_inherited(fd) else {
                return Err(format!("{INHERIT_ENV}: descriptor {fd} is not {addr}"));
            };
            let sock = std::net::TcpListener::from(sock);
            match sock.local_addr() {
                Ok(a) if a == addr => {}
                _ => return Err(format!("{INHERIT_ENV}: descriptor {fd} is not {addr}")),
            }
            socks.push(sock);
        }
        out.push(Bound {
            configured,
            addr,
            tls: false,
            quic: false,
            socks,
            udp: Vec::new(),
            unix: None,
        });
    }
    Ok(out)
}

/// Takes the QUIC link to the process that started us and the tag bit we hold, if it passed
/// them.
fn adopt_quic_link() -> Result<(), String> {
    let Ok(spec) = std::env::var(QUIC_LINK_ENV) else {
        return Ok(());
    };
    let bad = || format!("{QUIC_LINK_ENV}: cannot read {spec:?}");
    let (fd, bit) = spec.split_once(',').ok_or_else(bad)?;
    let fd: RawFd = fd.parse().map_err(|_| bad())?;
    let bit: u16 = bit.parse().map_err(|_| bad())?;
    let not_link = || format!("{QUIC_LINK_ENV}: descriptor {fd} is not the QUIC link");
    let sock = crate::sys::process::adopt_inherited(fd).map_err(|_| not_link())?;
    let sock = socket2::Socket::from(sock);
    if !sock.r#type().is_ok_and(|t| t == socket2::Type::SEQPACKET) {
        return Err(not_link());
    }
    upgrade_link::set_process_bit(bit);
    upgrade_link::install(sock).map_err(|e| format!("{QUIC_LINK_ENV}: {e}"))
}

/// Whether a binary upgrade started this process (it reports to the old one when ready).
pub(super) fn started_by_upgrade() -> bool {
    std::env::var_os(READY_ENV).is_some()
}

/// Tells the process that started us that we serve. Called once the workers accept.
pub(super) fn report_ready() {
    let Some(fd) = std::env::var(READY_ENV)
        .ok()
        .and_then(|v| v.parse::<RawFd>().ok())
    else {
        return;
    };
    // The descriptor was inherited for this purpose; we take it over and close it.
    let pipe = crate::sys::process::adopt_inherited(fd).map(std::fs::File::from);
    if let Err(e) = pipe.and_then(|mut pipe| io::Write::write_all(&mut pipe, b"R")) {
        tracing::warn!("binary upgrade: cannot tell the old process we are ready: {e}");
    }
}
