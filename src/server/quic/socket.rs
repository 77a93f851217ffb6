//! UDP sockets of a QUIC listener: one per worker, in one SO_REUSEPORT group, read and
//! written through quinn-udp (GRO on receive, GSO on send, ECN, the local address of each
//! datagram).
//!
//! As for TCP (`server/listen.rs`), a probe without SO_REUSEPORT first claims the address, so
//! that a second spate on the same port fails to start instead of silently taking part of the
//! traffic.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Receive and send buffer size asked of the kernel: a burst of a few hundred packets.
const SOCKET_BUFFER: usize = 4 << 20;

/// Binds `count` sockets on `addr`, which nobody else may use. A port of 0 is resolved once
/// and shared by all of them.
pub fn bind_fresh(addr: SocketAddr, count: usize) -> io::Result<Vec<UdpSocket>> {
    let addr = probe(addr)?;
    let mut socks = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        socks.push(bind(addr)?);
    }
    Ok(socks)
}

/// Binds one more socket to an address this process already uses (more workers after a
/// reload): it joins the same SO_REUSEPORT group.
pub fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    let sock = new_socket(addr)?;
    sock.set_reuse_port(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
    Ok(sock.into())
}

fn probe(addr: SocketAddr) -> io::Result<SocketAddr> {
    let sock = new_socket(addr)?;
    match sock.bind(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "the UDP port is already in use (another spate, or another program, uses it)",
            ))
        }
        Err(e) => return Err(e),
    }
    sock.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("no local address"))
}

fn new_socket(addr: SocketAddr) -> io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_refused_and_our_group_can_grow() {
        let mine = bind_fresh("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = mine[0].local_addr().unwrap();
        assert_eq!(mine[1].local_addr().unwrap(), addr);
        let err = bind_fresh(addr, 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(bind(addr).is_ok());
    }
}
