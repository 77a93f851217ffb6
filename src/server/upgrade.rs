//! Binary upgrade, the nginx way: on SIGUSR2 spate starts the executable it was started from
//! (a new build put in its place) with the same arguments, and hands it the listening sockets
//! themselves, so no connection waiting in an accept queue is lost and no port is ever closed.
//!
//! The sockets travel as inherited descriptors named in `SPATE_INHERIT`
//! (`CONFIGURED|BOUND|FD,FD;...`, one entry per listen address; `|udp` after the
//! descriptors of a QUIC listener's UDP sockets). The new process writes one
//! byte to the pipe named in `SPATE_READY_FD` once its workers serve; only then does the old
//! one drain and exit. If the new one fails (a bad configuration, a crash, no answer within
//! `UPGRADE_TIMEOUT`), the old one logs why and keeps serving.

use super::Bound;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

const INHERIT_ENV: &str = "SPATE_INHERIT";
const READY_ENV: &str = "SPATE_READY_FD";

/// How long the new process may take to report ready.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts `exe` with our arguments and `listeners`' sockets; returns its pid once it serves.
pub(super) fn start(exe: &Path, listeners: &[Bound]) -> Result<u32, String> {
    let mut fds = Vec::new();
    let mut spec = Vec::with_capacity(listeners.len());
    for b in listeners {
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
    // SAFETY: between fork and exec only fcntl(2), which is async-signal-safe, runs, on
    // descriptors this process owns; `fds` was allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    // Our copy closed, the pipe ends when the child exits: a crash reads as end of file.
    drop(write_end);
    match wait_ready(&read_end) {
        Ok(()) => Ok(child.id()),
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
    let mut pfd = libc::pollfd {
        fd: read_end.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = UPGRADE_TIMEOUT.as_millis() as libc::c_int;
    loop {
        // SAFETY: poll(2) on one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n == 0 {
            return Err(format!("not ready within {UPGRADE_TIMEOUT:?}"));
        }
        break;
    }
    let mut byte = [0u8; 1];
    match io::Read::read(&mut &*read_end, &mut byte) {
        Ok(1) => Ok(()),
        Ok(_) => Err("it exited before it was ready".into()),
        Err(e) => Err(format!("cannot read its answer: {e}")),
    }
}

fn pipe() -> io::Result<(std::fs::File, std::fs::File)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2(2) fills two descriptors that we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    })
}

/// The sockets a previous spate handed us, if we were started by an upgrade.
pub(super) fn inherited() -> Result<Vec<Bound>, String> {
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
                // SAFETY: as below; a bound UDP socket of a QUIC listener.
                let sock = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
                match sock.local_addr() {
                    Ok(a) if a == addr => {}
                    _ => return Err(format!("{INHERIT_ENV}: descriptor {fd} is not {addr}")),
                }
                set_cloexec(fd);
                udp.push(sock);
            }
            out.push(Bound {
                configured,
                addr,
                tls: true,
                quic: true,
                socks,
                udp,
            });
            continue;
        }
        for fd in fds.split(',') {
            let fd: RawFd = fd.parse().map_err(|_| bad())?;
            // SAFETY: the previous process made this descriptor inheritable for us alone;
            // it is a listening TCP socket, and nothing else in this process owns it.
            let sock = unsafe { std::net::TcpListener::from_raw_fd(fd) };
            match sock.local_addr() {
                Ok(a) if a == addr => {}
                _ => return Err(format!("{INHERIT_ENV}: descriptor {fd} is not {addr}")),
            }
            set_cloexec(fd);
            socks.push(sock);
        }
        out.push(Bound {
            configured,
            addr,
            tls: false,
            quic: false,
            socks,
            udp: Vec::new(),
        });
    }
    Ok(out)
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
    // SAFETY: the descriptor was inherited for this purpose; we take it over and close it.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    if let Err(e) = io::Write::write_all(&mut pipe, b"R") {
        tracing::warn!("binary upgrade: cannot tell the old process we are ready: {e}");
    }
}

/// Inherited descriptors are not passed on to anything we start later (a next upgrade passes
/// them explicitly).
fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl(2) on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}
