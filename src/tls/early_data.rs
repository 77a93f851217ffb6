//! Whether a ClientHello offers TLS 1.3 early data: rustls tells only whether it accepted
//! some, so a refusal (counted by `metrics::tls_early_data`) is told from the client's first
//! record, peeked before the handshake on a listener with `early-data` on.

/// TLS record type of a handshake message, and the ClientHello's handshake type.
const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
/// The `early_data` extension (RFC 8446 section 4.2.10).
const EARLY_DATA: u16 = 42;

/// Whether the ClientHello at the start of `d` (its first record, as far as it goes) carries
/// the `early_data` extension. Anything else, cut short or malformed, is `false`.
pub fn offered(d: &[u8]) -> bool {
    offered_in(d).unwrap_or(false)
}

fn offered_in(d: &[u8]) -> Option<bool> {
    let mut r = Reader(d);
    if r.u8()? != HANDSHAKE {
        return Some(false);
    }
    r.take(4)?; // legacy version, record length
    if r.u8()? != CLIENT_HELLO {
        return Some(false);
    }
    r.take(3 + 2 + 32)?; // length, legacy version, random
    let session_id = r.u8()?;
    r.take(usize::from(session_id))?;
    let suites = r.u16()?;
    r.take(usize::from(suites))?;
    let compression = r.u8()?;
    r.take(usize::from(compression))?;
    let len = usize::from(r.u16()?);
    // The extensions as far as this record goes.
    let mut extensions = Reader(r.take(len).unwrap_or(r.0));
    while let (Some(kind), Some(len)) = (extensions.u16(), extensions.u16()) {
        if kind == EARLY_DATA {
            return Some(true);
        }
        extensions.take(usize::from(len))?;
    }
    Some(false)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record with `extensions` (type, body).
    fn hello(extensions: &[(u16, &[u8])]) -> Vec<u8> {
        let mut ext = Vec::new();
        for (kind, body) in extensions {
            ext.extend_from_slice(&kind.to_be_bytes());
            ext.extend_from_slice(&(body.len() as u16).to_be_bytes());
            ext.extend_from_slice(body);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(32);
        body.extend_from_slice(&[9; 32]);
        body.extend_from_slice(&[0, 4, 0x13, 1, 0x13, 2]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![CLIENT_HELLO, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![HANDSHAKE, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn the_early_data_extension_is_found_among_others() {
        let with = hello(&[
            (0, b"\x00\x00"),
            (43, b"\x02\x03\x04"),
            (42, b""),
            (41, b"psk"),
        ]);
        assert!(offered(&with));
        let without = hello(&[(0, b"\x00\x00"), (43, b"\x02\x03\x04"), (41, b"psk")]);
        assert!(!offered(&without));
    }

    #[test]
    fn cut_short_or_not_a_client_hello_is_no_offer() {
        let with = hello(&[(43, b"\x02\x03\x04"), (42, b"")]);
        // The extension after the cut is not seen; nothing panics at any length.
        for n in 0..with.len() {
            assert!(!offered(&with[..n]), "{n}");
        }
        assert!(!offered(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(!offered(&[HANDSHAKE, 3, 1, 0, 4, 2, 0, 0, 0]));
    }
}
