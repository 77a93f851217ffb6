//! Which request and header fields a proxy treats specially, whatever the protocol.

use crate::http::Method;

/// Fields that must not travel as trailers (RFC 9110 6.5.1): framing, routing and
/// connection fields. Dropped from trailers forwarded either way.
pub fn is_forbidden_trailer(name: &[u8]) -> bool {
    [
        &b"content-length"[..],
        b"transfer-encoding",
        b"host",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

/// Whether sending a request twice has the effect of sending it once (RFC 9110 9.2.2).
pub fn is_idempotent(m: &Method) -> bool {
    matches!(
        m,
        Method::Get | Method::Head | Method::Put | Method::Delete | Method::Options | Method::Trace
    )
}

/// Fields not forwarded as they are over HTTP/2: it forbids some, and the client writes
/// framing itself.
pub fn is_connection_specific(name: &[u8]) -> bool {
    crate::proto::request_head::is_connection_specific(name)
        || name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"expect")
}
