//! The WebSocket opening handshake's key and accept values (RFC 6455 section 4), which the
//! proxy makes itself when an HTTP/2 extended CONNECT (RFC 8441) becomes an HTTP/1.1
//! upgrade: HTTP/2 clients send no key, HTTP/1.1 backends require one.

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

/// Standard base64 with padding.
fn base64(data: &[u8]) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

/// SHA-1 (FIPS 180-4), which the accept value is defined with. Not used for security here.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&(data.len() as u64 * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, word) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
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
