//! Tells a client's first Initial packets from its later ones. Both are long-header Initial
//! packets, but the first flight is addressed to a connection ID the client chose (any bytes,
//! so it may look like one of another endpoint's tags), the later ones to the ID our endpoint
//! issued. Initial keys come from the connection ID of the client's first Initial (RFC 9001
//! section 5.2), so a packet that opens with the keys of its own destination ID is a first
//! flight (or a first Initial after a Retry, whose ID the client took from the Retry): it
//! stays with the endpoint that read it. One that does not is a later Initial of a connection
//! whose owner its tag names (`route.rs`): a handshake under way when a reload or a binary
//! upgrade handed the socket to other endpoints.
//!
//! This costs a key derivation and one packet's decryption, and only for an Initial whose
//! destination ID carries a tag another live endpoint holds: never for a packet of our own,
//! and for a client's random ID only when it happens to match such a tag.

use super::early::varint;
use bytes::BytesMut;
use quinn_proto::crypto::ServerConfig;
use quinn_proto::ConnectionId;

/// Whether `datagram`'s first packet, an Initial, opens with the Initial keys of its own
/// destination connection ID (a client's first flight). False when it does not, or cannot be
/// read as an Initial of a version the server speaks.
pub fn opens_as_first_flight(crypto: &dyn ServerConfig, datagram: &[u8]) -> bool {
    let Some(p) = parse(datagram) else {
        return false;
    };
    let Ok(keys) = crypto.initial_keys(p.version, &ConnectionId::new(p.dcid(datagram))) else {
        return false;
    };
    // Header protection samples 16 bytes from 4 bytes past the packet number's start.
    if p.pn_offset + 4 + keys.header.remote.sample_size() > p.end {
        return false;
    }
    let mut packet = BytesMut::from(&datagram[..p.end]);
    keys.header.remote.decrypt(p.pn_offset, &mut packet);
    let pn_len = usize::from(packet[0] & 0x03) + 1;
    let header_len = p.pn_offset + pn_len;
    let pn = packet[p.pn_offset..header_len]
        .iter()
        .fold(0u64, |n, b| n << 8 | u64::from(*b));
    let mut payload = packet.split_off(header_len);
    keys.packet
        .remote
        .decrypt(pn, &packet, &mut payload)
        .is_ok()
}

/// Where an Initial packet's fields are (RFC 9000 section 17.2.2).
struct Parsed {
    version: u32,
    dcid_at: usize,
    dcid_len: usize,
    pn_offset: usize,
    /// The end of the packet (a datagram may coalesce more after it).
    end: usize,
}

impl Parsed {
    fn dcid<'d>(&self, d: &'d [u8]) -> &'d [u8] {
        &d[self.dcid_at..self.dcid_at + self.dcid_len]
    }
}

fn parse(d: &[u8]) -> Option<Parsed> {
    let first = *d.first()?;
    if first & 0x80 == 0 || (first >> 4) & 0x03 != 0 {
        return None;
    }
    let version = u32::from_be_bytes(d.get(1..5)?.try_into().ok()?);
    let dcid_len = usize::from(*d.get(5)?);
    if dcid_len > 20 {
        return None;
    }
    let dcid_at = 6;
    let mut at = dcid_at + dcid_len;
    let scid_len = usize::from(*d.get(at)?);
    at += 1 + scid_len;
    let tail = d.get(at..)?;
    let (token_len, after) = varint(tail)?;
    at = at
        .checked_add(tail.len() - after.len())?
        .checked_add(usize::try_from(token_len).ok()?)?;
    let tail = d.get(at..)?;
    let (length, after) = varint(tail)?;
    let pn_offset = at + (tail.len() - after.len());
    let end = pn_offset.checked_add(usize::try_from(length).ok()?)?;
    (end <= d.len()).then_some(Parsed {
        version,
        dcid_at,
        dcid_len,
        pn_offset,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// A client's first Initial, made by quinn-proto's client.
    fn first_initial() -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut endpoint = quinn_proto::Endpoint::new(
            Arc::new(quinn_proto::EndpointConfig::default()),
            None,
            true,
            None,
        );
        let now = Instant::now();
        let (_, mut conn) = endpoint
            .connect(
                now,
                quinn_proto::ClientConfig::new(Arc::new(crypto)),
                "127.0.0.1:4433".parse().unwrap(),
                "localhost",
            )
            .unwrap();
        let mut buf = Vec::new();
        let t = conn.poll_transmit(now, 1, &mut buf).unwrap();
        buf.truncate(t.size);
        buf
    }

    fn server_crypto() -> Arc<dyn ServerConfig> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = rustls_pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der.into())
            .unwrap();
        Arc::new(quinn_proto::crypto::rustls::QuicServerConfig::try_from(tls).unwrap())
    }

    #[test]
    fn a_first_initial_opens_with_its_own_ids_keys_and_another_does_not() {
        let crypto = server_crypto();
        let d = first_initial();
        assert!(opens_as_first_flight(&*crypto, &d));
        // The same packet addressed to another ID (as a later Initial is, to ours) does not
        // open with that ID's keys.
        let mut other = d.clone();
        let dcid_len = usize::from(other[5]);
        for b in &mut other[6..6 + dcid_len] {
            *b ^= 0x5a;
        }
        assert!(!opens_as_first_flight(&*crypto, &other));
        // Cut short, garbage, or not an Initial: false, no panic.
        for cut in [0, 1, 5, 6, 30, 60, d.len() / 2] {
            assert!(!opens_as_first_flight(&*crypto, &d[..cut]));
        }
        let mut handshake = d.clone();
        handshake[0] = (handshake[0] & !0x30) | 0x20;
        assert!(!opens_as_first_flight(&*crypto, &handshake));
        assert!(!opens_as_first_flight(&*crypto, &[0xc0; 1200]));
    }
}
