//! Whether a datagram carries a 0-RTT packet: a client's early data, which quinn takes or
//! drops without telling, counted as accepted or refused when the handshake ends
//! (`metrics::quic_admission`). Only long-header packets (a handshake's) are looked into.

/// QUIC version 1 (RFC 9000) and version 2 (RFC 9369), which number the long types apart.
const V1: u32 = 1;
const V2: u32 = 0x6b33_43cf;

/// The long packet types we tell apart.
#[derive(Debug, PartialEq, Eq)]
enum Long {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
}

fn long_type(version: u32, bits: u8) -> Option<Long> {
    let t = match (version, bits) {
        (V1, 0) | (V2, 1) => Long::Initial,
        (V1, 1) | (V2, 2) => Long::ZeroRtt,
        (V1, 2) | (V2, 3) => Long::Handshake,
        (V1, 3) | (V2, 0) => Long::Retry,
        _ => return None,
    };
    Some(t)
}

/// Whether one of the packets coalesced in `d` is a 0-RTT packet.
pub(super) fn carries_0rtt(mut d: &[u8]) -> bool {
    // A datagram holds a handful of coalesced packets at most.
    for _ in 0..4 {
        let Some(&first) = d.first() else {
            return false;
        };
        if first & 0x80 == 0 {
            // A short header runs to the end of the datagram.
            return false;
        }
        let Some(rest) = d.get(5..) else {
            return false;
        };
        let version = u32::from_be_bytes([d[1], d[2], d[3], d[4]]);
        let Some(kind) = long_type(version, (first >> 4) & 3) else {
            return false;
        };
        if kind == Long::ZeroRtt {
            return true;
        }
        if kind == Long::Retry {
            return false;
        }
        let Some(rest) = skip_cid(rest).and_then(skip_cid) else {
            return false;
        };
        let rest = if kind == Long::Initial {
            match varint(rest) {
                Some((token, r)) => match usize::try_from(token).ok().and_then(|t| r.get(t..)) {
                    Some(r) => r,
                    None => return false,
                },
                None => return false,
            }
        } else {
            rest
        };
        let Some((len, rest)) = varint(rest) else {
            return false;
        };
        match usize::try_from(len).ok().and_then(|l| rest.get(l..)) {
            Some(next) => d = next,
            None => return false,
        }
    }
    false
}

/// Skips a length-prefixed connection ID.
fn skip_cid(d: &[u8]) -> Option<&[u8]> {
    let (&len, rest) = d.split_first()?;
    rest.get(usize::from(len)..)
}

/// A QUIC variable-length integer and what follows it.
pub(super) fn varint(d: &[u8]) -> Option<(u64, &[u8])> {
    let (&first, _) = d.split_first()?;
    let len = 1usize << (first >> 6);
    let bytes = d.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    Some((v, &d[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long-header packet of version `v`, type bits `t`, with a payload of `n` bytes.
    fn long(v: u32, t: u8, n: usize) -> Vec<u8> {
        let mut p = vec![0xc0 | (t << 4)];
        p.extend_from_slice(&v.to_be_bytes());
        p.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
        let initial = (v == V1 && t == 0) || (v == V2 && t == 1);
        if initial {
            p.push(2);
            p.extend_from_slice(b"tk");
        }
        // A two-byte varint length.
        p.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
        p.resize(p.len() + n, 0xaa);
        p
    }

    #[test]
    fn a_0rtt_packet_is_found_behind_an_initial() {
        let mut d = long(V1, 0, 1100);
        assert!(!carries_0rtt(&d));
        d.extend(long(V1, 1, 60));
        assert!(carries_0rtt(&d));
        let mut v2 = long(V2, 1, 300);
        v2.extend(long(V2, 2, 40));
        assert!(carries_0rtt(&v2));
        // Version 2's type 1 is Initial, version 1's type 1 is 0-RTT.
        assert!(!carries_0rtt(&long(V2, 1, 30)));
    }

    #[test]
    fn short_headers_handshakes_and_junk_carry_none() {
        assert!(!carries_0rtt(&[0x40, 1, 2, 3]));
        assert!(!carries_0rtt(&long(V1, 2, 50)));
        assert!(!carries_0rtt(&[]));
        assert!(!carries_0rtt(&[0xd0, 0, 0]));
        let mut cut = long(V1, 0, 100);
        cut.truncate(40);
        assert!(!carries_0rtt(&cut));
        // An unknown version is not looked into.
        assert!(!carries_0rtt(&long(0x1234_5678, 1, 10)));
    }
}
