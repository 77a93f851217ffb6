//! The PROXY protocol header (versions 1 and 2, as HAProxy specifies them) that a load balancer
//! sends before anything else on a connection of a `listen` with `proxy-protocol: ON`: it
//! names the client the balancer accepted, which then stands for the connection's peer (access
//! logs, `X-Forwarded-For`).
//!
//! The header is read before TLS or HTTP: peeked until it is whole, then consumed to its last
//! byte, so what follows it is left in the socket for the protocol. A connection that does not
//! start with a whole, valid header within `handshake-timeout` is closed with one log line.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Version 1 allows 107 bytes, CRLF included.
const V1_MAX: usize = 107;
/// Version 2's fixed part: the signature, version and command, family, and length.
const V2_FIXED: usize = 16;
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest version 2 header taken: the addresses and TLVs a balancer adds (AWS's VPC
/// endpoint ID, Azure's link ID, SSL details) fit well within this.
pub const V2_MAX: usize = 1024;
/// How long to wait between looks at a header that came in parts (rare: balancers send it in
/// one write, usually with the first request).
const PART_WAIT: Duration = Duration::from_millis(2);

/// What the bytes at the start of a connection are.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    /// Not all of it yet.
    Partial,
    /// A header of `len` bytes naming `source`, or `None` (a v1 `UNKNOWN`, a v2 `LOCAL`
    /// command or a family other than TCP over IPv4 or IPv6: the connection's own peer stands).
    Whole {
        len: usize,
        source: Option<SocketAddr>,
    },
    Invalid(&'static str),
}

/// Parses the header at the start of `buf`.
pub fn parse(buf: &[u8]) -> Header {
    if buf.is_empty() {
        return Header::Partial;
    }
    if buf[0] == V2_SIGNATURE[0] {
        return parse_v2(buf);
    }
    parse_v1(buf)
}

/// `PROXY TCP4 SRC DST SPORT DPORT\r\n`, `PROXY TCP6 ...` or `PROXY UNKNOWN ...\r\n`.
fn parse_v1(buf: &[u8]) -> Header {
    let start = &buf[..buf.len().min(6)];
    if !b"PROXY ".starts_with(start) {
        return Header::Invalid("no PROXY header");
    }
    let Some(end) = buf.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return if buf.len() >= V1_MAX {
            Header::Invalid("a version 1 header longer than 107 bytes")
        } else {
            Header::Partial
        };
    };
    let len = end + 2;
    let Ok(line) = std::str::from_utf8(&buf[6..end]) else {
        return Header::Invalid("a version 1 header that is not text");
    };
    let mut words = line.split(' ');
    let family = words.next();
    if family == Some("UNKNOWN") {
        return Header::Whole { len, source: None };
    }
    let (Some(src), Some(_dst), Some(sport), Some(_dport), None) = (
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
    ) else {
        return Header::Invalid("a version 1 header without 4 addresses and ports");
    };
    let ip: Option<IpAddr> = match family {
        Some("TCP4") => src.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        Some("TCP6") => src.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        _ => return Header::Invalid("a version 1 header of an unknown family"),
    };
    let port = port(sport);
    match (ip, port) {
        (Some(ip), Some(port)) => Header::Whole {
            len,
            source: Some(SocketAddr::new(ip, port)),
        },
        _ => Header::Invalid("a version 1 header with a bad source address or port"),
    }
}

/// A decimal port without sign or leading zero, as version 1 writes them.
fn port(text: &str) -> Option<u16> {
    let plain = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    plain.then(|| text.parse().ok()).flatten()
}

/// The binary form: signature, version 2 and command, family and protocol, length, addresses.
fn parse_v2(buf: &[u8]) -> Header {
    let seen = buf.len().min(V2_SIGNATURE.len());
    if buf[..seen] != V2_SIGNATURE[..seen] {
        return Header::Invalid("no PROXY header");
    }
    if buf.len() < V2_FIXED {
        return Header::Partial;
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return Header::Invalid("a binary header of a version other than 2");
    }
    let len = V2_FIXED + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > V2_MAX {
        return Header::Invalid("a version 2 header longer than 1024 bytes");
    }
    if buf.len() < len {
        return Header::Partial;
    }
    let body = &buf[V2_FIXED..len];
    let source = match (command, buf[13]) {
        // LOCAL: the balancer's own connection (a health check); its address stands.
        (0, _) => None,
        // PROXY over TCP/IPv4: 4 + 4 address bytes, 2 + 2 port bytes.
        (1, 0x11) if body.len() >= 12 => Some(SocketAddr::new(
            IpAddr::from([body[0], body[1], body[2], body[3]]),
            u16::from_be_bytes([body[8], body[9]]),
        )),
        // PROXY over TCP/IPv6: 16 + 16 address bytes, 2 + 2 port bytes.
        (1, 0x21) if body.len() >= 36 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&body[..16]);
            Some(SocketAddr::new(
                IpAddr::from(a),
                u16::from_be_bytes([body[32], body[33]]),
            ))
        }
        (1, 0x11 | 0x21) => {
            return Header::Invalid("a version 2 header too short for its addresses")
        }
        // UDP, unix sockets or an unspecified family: nothing to stand for a TCP peer.
        (1, _) => None,
        _ => return Header::Invalid("a version 2 header with an unknown command"),
    };
    Header::Whole { len, source }
}

/// Reads the header that opens `stream`, leaving what follows it unread. Returns the client it
/// names (`None`: the connection's own peer stands), or an error saying what was wrong.
pub async fn read(stream: &mut TcpStream, timeout: Duration) -> io::Result<Option<SocketAddr>> {
    use tokio::io::AsyncReadExt;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; V2_MAX];
    let mut seen = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = match tokio::time::timeout(left, stream.peek(&mut buf)).await {
            Ok(r) => r?,
            Err(_) => return Err(invalid("no whole PROXY header within handshake-timeout")),
        };
        if n == 0 {
            return Err(invalid(
                "the connection closed before its PROXY header ended",
            ));
        }
        match parse(&buf[..n]) {
            Header::Whole { len, source } => {
                stream.read_exact(&mut buf[..len]).await?;
                return Ok(source);
            }
            Header::Invalid(why) => return Err(invalid(why)),
            Header::Partial if n == buf.len() => return Err(invalid("PROXY header too long")),
            Header::Partial => {
                // A peek returns at once while any byte waits: look again once more came.
                if n == seen {
                    if Instant::now() >= deadline {
                        return Err(invalid("no whole PROXY header within handshake-timeout"));
                    }
                    tokio::time::sleep(PART_WAIT.min(left)).await;
                }
                seen = n;
            }
        }
    }
}

fn invalid(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    #[test]
    fn version_1_names_the_client() {
        let line = b"PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(line),
            Header::Whole {
                len: 44,
                source: Some("203.0.113.7:56324".parse().unwrap())
            }
        );
        let line = b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 80\r\n";
        assert_eq!(
            parse(line),
            Header::Whole {
                len: line.len(),
                source: Some("[2001:db8::7]:4000".parse().unwrap())
            }
        );
        let line = b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n";
        assert_eq!(
            parse(line),
            Header::Whole {
                len: line.len(),
                source: None
            }
        );
    }

    #[test]
    fn version_1_in_parts_and_wrong() {
        let whole = b"PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\n";
        for cut in 1..whole.len() {
            assert_eq!(parse(&whole[..cut]), Header::Partial, "{cut}");
        }
        for bad in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXY TCP4 203.0.113.7 192.0.2.1 56324\r\n",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 56324 443 9\r\n",
            b"PROXY TCP4 2001:db8::7 192.0.2.1 56324 443\r\n",
            b"PROXY TCP5 203.0.113.7 192.0.2.1 56324 443\r\n",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 65536 443\r\n",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 +1 443\r\n",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 0056 443\r\n",
            b"PROXY TCP4  203.0.113.7 192.0.2.1 56324 443\r\n",
            b"\x16\x03\x01\x02\x00\x01",
        ] {
            assert!(
                matches!(parse(bad), Header::Invalid(_)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"PROXY ".to_vec(), vec![b'x'; 200]].concat();
        assert!(matches!(parse(&long), Header::Invalid(_)));
    }

    #[test]
    fn version_2_names_the_client() {
        let mut body = vec![203, 0, 113, 7, 192, 0, 2, 1];
        body.extend_from_slice(&56324u16.to_be_bytes());
        body.extend_from_slice(&443u16.to_be_bytes());
        // A TLV after the addresses is skipped.
        body.extend_from_slice(&[0x05, 0x00, 0x02, 0xaa, 0xbb]);
        let h = v2(1, 0x11, &body);
        let mut with_request = h.clone();
        with_request.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            parse(&with_request),
            Header::Whole {
                len: h.len(),
                source: Some("203.0.113.7:56324".parse().unwrap())
            }
        );
        for cut in 1..h.len() {
            assert_eq!(parse(&h[..cut]), Header::Partial, "{cut}");
        }
        let mut body6 = vec![0u8; 36];
        body6[0] = 0x20;
        body6[1] = 0x01;
        body6[15] = 7;
        body6[32..34].copy_from_slice(&4000u16.to_be_bytes());
        assert_eq!(
            parse(&v2(1, 0x21, &body6)),
            Header::Whole {
                len: 16 + 36,
                source: Some("[2001::7]:4000".parse().unwrap())
            }
        );
        // LOCAL, and a unix socket family: the connection's own peer stands.
        for h in [v2(0, 0x00, &[]), v2(1, 0x31, &[0u8; 216])] {
            assert_eq!(
                parse(&h),
                Header::Whole {
                    len: h.len(),
                    source: None
                }
            );
        }
    }

    #[test]
    fn version_2_wrong() {
        let mut bad_version = v2(1, 0x11, &[0u8; 12]);
        bad_version[12] = 0x11;
        let mut bad_signature = v2(1, 0x11, &[0u8; 12]);
        bad_signature[5] = b'x';
        for bad in [
            bad_version,
            bad_signature,
            v2(2, 0x11, &[0u8; 12]),
            v2(1, 0x11, &[0u8; 8]),
            v2(1, 0x21, &[0u8; 20]),
            v2(1, 0x11, &[0u8; V2_MAX]),
        ] {
            assert!(matches!(parse(&bad), Header::Invalid(_)), "{bad:?}");
        }
    }
}
