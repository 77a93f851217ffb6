//! Listening sockets: one per worker and address, bound with SO_REUSEPORT so the kernel
//! spreads connections over the workers.
//!
//! SO_REUSEPORT would also let a second spate (a stale one, or a copy started twice) share a
//! port with us silently, each getting part of the traffic. So before binding, a probe socket
//! without SO_REUSEPORT claims the address: if anyone listens there, the probe fails and so
//! does the start. Reload and binary upgrade share sockets by inheriting them, never by
//! binding again.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener};

/// The accept queue length; the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 4096;

/// Binds `count` sockets on `addr`, which nobody else may be listening on. A port of 0 is
/// resolved once and shared by all of them.
pub fn bind_fresh(addr: SocketAddr, count: usize) -> Result<Vec<TcpListener>, BindError> {
    let addr = probe(addr)?;
    let mut socks = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        socks.push(bind(addr).map_err(|e| BindError::Other(addr, e))?);
    }
    Ok(socks)
}

/// Binds one more socket to an address this process already listens on (more workers after
/// a reload): it joins the same SO_REUSEPORT group.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = new_socket(addr)?;
    sock.set_reuse_port(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
    Ok(sock.into())
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

    #[test]
    fn a_port_taken_by_a_plain_listener_is_refused() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap();
        assert!(matches!(bind_fresh(addr, 2), Err(BindError::InUse(_))));
    }

    #[test]
    fn a_port_taken_by_reuseport_listeners_is_refused() {
        let mine = bind_fresh("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = mine[0].local_addr().unwrap();
        assert_eq!(mine[1].local_addr().unwrap(), addr);
        let err = bind_fresh(addr, 2).unwrap_err();
        assert!(err.to_string().contains("already in use"), "{err}");
        // Joining our own group stays possible (more workers after a reload).
        assert!(bind(addr).is_ok());
    }
}
