//! The PROXY protocol version 1 line (`proxy.proxy-protocol`): the client's address and the
//! address it connected to, sent before anything else on a new backend connection, so the
//! backend sees the real client behind the proxy.

use std::net::{IpAddr, SocketAddr};

/// `PROXY TCP4 <client> <server> <client port> <server port>\r\n` (TCP6 for IPv6; an IPv4
/// address mapped into IPv6 is written as IPv4). A pair of mixed families, which a listener
/// cannot produce, is `PROXY UNKNOWN`.
pub fn v1(client: SocketAddr, server: SocketAddr) -> Vec<u8> {
    let (from, to) = (plain(client.ip()), plain(server.ip()));
    let family = match (from, to) {
        (IpAddr::V4(_), IpAddr::V4(_)) => "TCP4",
        (IpAddr::V6(_), IpAddr::V6(_)) => "TCP6",
        _ => return UNKNOWN.to_vec(),
    };
    format!(
        "PROXY {family} {from} {to} {} {}\r\n",
        client.port(),
        server.port()
    )
    .into_bytes()
}

/// What a connection that carries no client (a health probe) sends.
pub const UNKNOWN: &[u8] = b"PROXY UNKNOWN\r\n";

fn plain(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(client: &str, server: &str) -> String {
        let (c, s) = (client.parse().unwrap(), server.parse().unwrap());
        String::from_utf8(v1(c, s)).unwrap()
    }

    #[test]
    fn lines() {
        assert_eq!(
            line("192.0.2.1:56324", "198.51.100.7:443"),
            "PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n"
        );
        assert_eq!(
            line("[2001:db8::1]:4000", "[::1]:80"),
            "PROXY TCP6 2001:db8::1 ::1 4000 80\r\n"
        );
        // A dual-stack listener sees IPv4 clients as mapped addresses.
        assert_eq!(
            line("[::ffff:10.0.0.1]:5", "[::ffff:10.0.0.2]:6"),
            "PROXY TCP4 10.0.0.1 10.0.0.2 5 6\r\n"
        );
        assert_eq!(line("10.0.0.1:5", "[2001:db8::2]:6"), "PROXY UNKNOWN\r\n");
        // The longest line fits the 107 bytes the protocol allows.
        let long = line(
            "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535",
            "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535",
        );
        assert!(long.len() <= 107, "{}", long.len());
    }
}
