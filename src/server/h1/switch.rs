//! What switches an HTTP/1 connection to HTTP/2: the client preface (prior knowledge) or a
//! request with `Upgrade: h2c`; and a first line that is neither HTTP/1 nor the preface.

use crate::http::Request;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;

/// The HTTP/2 client preface, which switches a new connection to HTTP/2 (prior knowledge).
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `buf` is a (possibly partial) HTTP/2 preface; empty is not.
pub(super) fn is_preface_prefix(buf: &[u8]) -> bool {
    let n = buf.len().min(PREFACE.len());
    n > 0 && buf[..n] == PREFACE[..n]
}

/// Whether the first line of `buf` is complete and names no HTTP version.
pub(super) fn not_http(buf: &[u8]) -> bool {
    match memchr::memchr(b'\n', buf) {
        Some(end) => !buf[..end].windows(6).any(|w| w == b" HTTP/"),
        None => false,
    }
}

/// The decoded HTTP2-Settings of an HTTP/1.1 request asking `Upgrade: h2c` (RFC 7540
/// section 3.2), or `None` when this is not such a request.
pub(super) fn h2c_upgrade(req: &Request) -> Option<Vec<u8>> {
    if req.version != crate::http::Version::Http11 {
        return None;
    }
    let upgrade = req.header(b"upgrade")?;
    let wants_h2c = upgrade
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"));
    if !wants_h2c {
        return None;
    }
    let mut settings = req.header_all(b"http2-settings");
    let value = settings.next()?;
    if settings.next().is_some() {
        return None;
    }
    base64url_decode(value.trim_ascii())
}

/// Decodes base64url, padded or not (RFC 9113 section 3.2.1 asks for it unpadded; a padded
/// value and loose trailing bits are taken, as before).
fn base64url_decode(s: &[u8]) -> Option<Vec<u8>> {
    SETTINGS_BASE64.decode(s).ok()
}

const SETTINGS_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url() {
        assert_eq!(
            base64url_decode(b"AAMAAABkAAQAoAAAAAIAAAAA").unwrap().len(),
            18
        );
        assert_eq!(base64url_decode(b"aGk").unwrap(), b"hi");
        assert_eq!(base64url_decode(b"aGk=").unwrap(), b"hi");
        assert!(base64url_decode(b"a*").is_none());
    }

    #[test]
    fn preface_prefixes() {
        assert!(is_preface_prefix(b"PRI * HT"));
        assert!(is_preface_prefix(PREFACE));
        assert!(!is_preface_prefix(b""));
        assert!(!is_preface_prefix(b"GET / HTTP/1.1"));
        assert!(not_http(b"INVALID CONNECTION PREFACE\r\n\r\n"));
        assert!(!not_http(b"GET / HTTP/1.1\r\n"));
        assert!(!not_http(b"GET /very-long-target"));
    }
}
