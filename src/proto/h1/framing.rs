//! The header fields that decide where a message body ends and whether the connection stays
//! open (RFC 9112 6 and 9.3), as seen while scanning a head. The same rules serve requests
//! (`parse.rs`) and backend responses (`client.rs`); each maps the errors to its own answer.

use crate::http::Version;
use std::ops::Range;

/// Content-Length, Transfer-Encoding and Connection of one head.
#[derive(Default)]
pub(super) struct MessageFraming {
    pub content_length: Option<u64>,
    pub chunked: bool,
    pub transfer_encoding: bool,
    pub close: bool,
    pub keep_alive: bool,
    /// `Connection: upgrade`: the client asks to switch protocols (RFC 9110 7.8).
    pub upgrade: bool,
}

/// A framing field that cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FramingError {
    InvalidLength,
    /// `5, 6` or two fields that disagree: a smuggling attempt.
    ConflictingLength,
    /// A coding after chunked: the body's end would be unknowable.
    ChunkedNotLast,
    /// A transfer coding other than chunked.
    UnsupportedCoding,
}

impl MessageFraming {
    /// Records `name: value` if it is a framing field; returns whether it was one.
    pub fn observe(&mut self, name: &[u8], value: &[u8]) -> Result<bool, FramingError> {
        if name.eq_ignore_ascii_case(b"content-length") {
            // `5, 5` is a list of equal values.
            for item in value.split(|&b| b == b',') {
                let n = parse_length(item.trim_ascii()).ok_or(FramingError::InvalidLength)?;
                if self.content_length.is_some_and(|old| old != n) {
                    return Err(FramingError::ConflictingLength);
                }
                self.content_length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.transfer_encoding = true;
            for coding in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if coding.is_empty() {
                    continue;
                }
                if self.chunked {
                    return Err(FramingError::ChunkedNotLast);
                }
                if !coding.eq_ignore_ascii_case(b"chunked") {
                    return Err(FramingError::UnsupportedCoding);
                }
                self.chunked = true;
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    self.upgrade = true;
                }
            }
        } else {
            return Ok(false);
        }
        Ok(true)
    }
}

/// A Content-Length value: ASCII digits that fit in a u64.
fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')),
    )
}

/// The version of a status or request line from httparse's minor number.
pub(super) fn version(minor: u8) -> Version {
    if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    }
}

/// Where `part`, a slice httparse handed out, lies in `buf`.
pub(super) fn span(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}
