//! The WebSocket opening handshake's key and accept values (RFC 6455 section 4), which the
//! proxy makes itself when an HTTP/2 extended CONNECT (RFC 8441) becomes an HTTP/1.1
//! upgrade: HTTP/2 clients send no key, HTTP/1.1 backends require one.

use base64::Engine;

/// The GUID RFC 6455 appends to the key before hashing.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A fresh `Sec-WebSocket-Key`: 16 random bytes, base64.
pub fn new_key() -> Vec<u8> {
    let mut nonce = [0u8; 16];
    fill_random(&mut nonce);
    base64(&nonce)
}

/// The `Sec-WebSocket-Accept` a backend must answer `key` with.
pub fn accept_for(key: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(key.len() + GUID.len());
    input.extend_from_slice(key);
    input.extend_from_slice(GUID);
    base64(&sha1(&input))
}

/// The kernel's random bytes. The key only has to differ between handshakes (it guards
/// against caches, not attackers), so a failing `getrandom` falls back to the clock.
fn fill_random(buf: &mut [u8]) {
    let n = crate::sys::random::fill(buf);
    if n.ok() != Some(buf.len()) {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes();
        for (b, t) in buf.iter_mut().zip(t.iter().cycle()) {
            *b ^= t;
        }
    }
}

/// Standard base64 with padding (RFC 6455's key and accept values).
fn base64(data: &[u8]) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .encode(data)
        .into_bytes()
}

/// SHA-1, which RFC 6455 fixes for the accept value (not a security use).
fn sha1(data: &[u8]) -> Vec<u8> {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, data)
        .as_ref()
        .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_matches_rfc6455_example() {
        assert_eq!(
            accept_for(b"dGhlIHNhbXBsZSBub25jZQ=="),
            b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn sha1_and_base64_known_values() {
        assert_eq!(base64(b""), b"");
        assert_eq!(base64(b"f"), b"Zg==");
        assert_eq!(base64(b"fo"), b"Zm8=");
        assert_eq!(base64(b"foo"), b"Zm9v");
        // Two blocks: the padding crosses a block boundary.
        let long = [b'a'; 100];
        assert_eq!(base64(&sha1(&long)), b"f5AAJXpJGNcHJlXqRoVAzcvULgw=");
        assert_eq!(base64(&sha1(b"abc")), b"qZk+NkcGgWq6PiVxeFDCbJzQ2J0=");
    }

    #[test]
    fn keys_are_24_chars_and_differ() {
        let (a, b) = (new_key(), new_key());
        assert_eq!(a.len(), 24);
        assert_ne!(a, b);
    }
}
