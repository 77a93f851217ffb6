//! Listening sockets: one per worker and address, bound with SO_REUSEPORT so the kernel
//! spreads connections over the workers.

use socket2::{Domain, Protocol, Socket, Type};
use std::net::{SocketAddr, TcpListener};

/// The accept queue length; the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 4096;

pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        // `[::]:80` and `0.0.0.0:80` may both be configured.
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
    Ok(sock.into())
}
