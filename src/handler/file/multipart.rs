//! `multipart/byteranges` answers to a Range header with several ranges (RFC 9110 section 14.6).
//!
//! The layout is h2o's, so clients and tests written against h2o parse it the same way: a
//! boundary of [`BOUNDARY_LEN`] letters and digits, the first part opening with `--boundary`
//! (no preamble), each part's `Content-Type` then `Content-Range`, and `\r\n--boundary--\r\n`
//! at the end. The parts' data is sent from the file as any range is, and the answer's
//! Content-Length is the sum of the parts. How many ranges are taken and when overlapping
//! ranges get the whole file instead is decided in `range`.

use crate::http::response::BodyPart;
use bytes::Bytes;
use std::hash::{BuildHasher, RandomState};
use std::time::Instant;

/// The boundary's length, as h2o's.
pub const BOUNDARY_LEN: usize = 20;

/// A boundary of [`BOUNDARY_LEN`] letters and digits, random per handler: a file whose bytes
/// contain it could confuse a client, and a guessed one is no worse than a fixed one.
pub fn boundary() -> String {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let state = RandomState::new();
    let mut bits = state.hash_one(Instant::now());
    let mut more = state.hash_one(bits);
    (0..BOUNDARY_LEN)
        .map(|i| {
            if i == 10 {
                bits = more;
                more = 0;
            }
            let c = ALPHABET[(bits % 62) as usize];
            bits /= 62;
            char::from(c)
        })
        .collect()
}

/// The `Content-Type` of a multipart answer.
pub fn content_type(boundary: &str) -> Bytes {
    format!("multipart/byteranges; boundary={boundary}").into()
}

/// The body: for each `(offset, len)` of `ranges`, its part header then `file(offset, len)`,
/// and the closing boundary. `content_type` is the file's own type.
pub fn parts(
    boundary: &str,
    content_type: &[u8],
    ranges: &[(u64, u64)],
    size: u64,
    mut file: impl FnMut(u64, u64) -> BodyPart,
) -> Vec<BodyPart> {
    let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
    for (i, &(offset, len)) in ranges.iter().enumerate() {
        let mut head = Vec::with_capacity(80 + content_type.len());
        if i > 0 {
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"--");
        head.extend_from_slice(boundary.as_bytes());
        head.extend_from_slice(b"\r\nContent-Type: ");
        head.extend_from_slice(content_type);
        let last = (offset + len).saturating_sub(1);
        head.extend_from_slice(
            format!("\r\nContent-Range: bytes {offset}-{last}/{size}\r\n\r\n").as_bytes(),
        );
        parts.push(BodyPart::Bytes(head.into()));
        parts.push(file(offset, len));
    }
    parts.push(BodyPart::Bytes(format!("\r\n--{boundary}--\r\n").into()));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_is_twenty_letters_and_digits_like_h2o() {
        let b = boundary();
        assert_eq!(b.len(), BOUNDARY_LEN);
        assert!(b.bytes().all(|c| c.is_ascii_alphanumeric()), "{b}");
        assert_ne!(b, boundary());
    }

    #[test]
    fn parts_open_without_preamble_and_close_the_last_boundary() {
        let parts = parts("B", b"text/plain", &[(0, 2), (5, 1)], 10, |o, l| {
            BodyPart::Bytes(format!("<{o}+{l}>").into())
        });
        let mut all = Vec::new();
        for p in &parts {
            match p {
                BodyPart::Bytes(b) => all.extend_from_slice(b),
                _ => unreachable!(),
            }
        }
        assert_eq!(
            String::from_utf8(all).unwrap_or_default(),
            "--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n<0+2>\
             \r\n--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 5-5/10\r\n\r\n<5+1>\
             \r\n--B--\r\n"
        );
    }
}
