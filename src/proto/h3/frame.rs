//! HTTP/3 frames (RFC 9114 section 7): a varint type, a varint payload length, the payload.
//!
//! Parsing is incremental: [`parse_header`] reads a frame header from the bytes so far and
//! says how long the payload is; the session decides whether to wait for the whole payload
//! (HEADERS, SETTINGS, GOAWAY...) or to pass it on piecewise (DATA, skipped frames).

use bytes::BufMut;

use super::varint;

pub const DATA: u64 = 0x00;
pub const HEADERS: u64 = 0x01;
pub const CANCEL_PUSH: u64 = 0x03;
pub const SETTINGS: u64 = 0x04;
pub const PUSH_PROMISE: u64 = 0x05;
pub const GOAWAY: u64 = 0x07;
pub const MAX_PUSH_ID: u64 = 0x0d;

/// Setting identifiers (RFC 9114 section 7.2.4.1, RFC 9204 section 5, RFC 9220).
pub mod setting {
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
    pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
    pub const H3_DATAGRAM: u64 = 0x33;
}

/// Unidirectional stream types (RFC 9114 section 6.2, RFC 9204 section 4.2).
pub mod stream_type {
    pub const CONTROL: u64 = 0x00;
    pub const PUSH: u64 = 0x01;
    pub const QPACK_ENCODER: u64 = 0x02;
    pub const QPACK_DECODER: u64 = 0x03;
}

/// Frame types HTTP/2 had and HTTP/3 reserves (PRIORITY, PING, WINDOW_UPDATE, CONTINUATION):
/// receiving one is H3_FRAME_UNEXPECTED (section 7.2.8).
pub fn is_http2_only(ty: u64) -> bool {
    matches!(ty, 0x02 | 0x06 | 0x08 | 0x09)
}

/// Setting identifiers HTTP/2 had without an HTTP/3 counterpart: receiving one is
/// H3_SETTINGS_ERROR (section 7.2.4.1).
pub fn is_http2_setting(id: u64) -> bool {
    matches!(id, 0x00 | 0x02..=0x05)
}

/// The frame header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub ty: u64,
    /// Payload length.
    pub len: u64,
    /// Bytes the type and length took.
    pub size: usize,
}

/// Reads a frame header from the start of `buf`; `None` until both varints are complete.
#[inline]
pub fn parse_header(buf: &[u8]) -> Option<Header> {
    let (ty, a) = varint::decode(buf)?;
    let (len, b) = varint::decode(&buf[a..])?;
    Some(Header {
        ty,
        len,
        size: a + b,
    })
}

/// Appends a frame header.
pub fn put_header(ty: u64, len: u64, out: &mut impl BufMut) {
    varint::encode(ty, out);
    varint::encode(len, out);
}

/// Appends a SETTINGS frame with `pairs` (identifier, value).
pub fn put_settings(pairs: &[(u64, u64)], out: &mut impl BufMut) {
    let len: usize = pairs
        .iter()
        .map(|&(id, v)| varint::len(id) + varint::len(v))
        .sum();
    put_header(SETTINGS, len as u64, out);
    for &(id, v) in pairs {
        varint::encode(id, out);
        varint::encode(v, out);
    }
}

/// Appends a GOAWAY frame carrying `id` (a request stream id, from a server).
pub fn put_goaway(id: u64, out: &mut impl BufMut) {
    put_header(GOAWAY, varint::len(id) as u64, out);
    varint::encode(id, out);
}

/// Reads a payload that must be exactly one varint (GOAWAY, MAX_PUSH_ID, CANCEL_PUSH).
pub fn single_varint(payload: &[u8]) -> Option<u64> {
    match varint::decode(payload) {
        Some((v, n)) if n == payload.len() => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_and_http2_types() {
        assert!(is_http2_only(0x02) && is_http2_only(0x09));
        assert!(!is_http2_only(0x07) && !is_http2_only(0x21));
        assert!(is_http2_setting(0x00) && is_http2_setting(0x05));
        assert!(!is_http2_setting(0x06) && !is_http2_setting(0x01));
    }

    #[test]
    fn settings_and_goaway_round_trip() {
        let mut out = Vec::new();
        put_settings(
            &[(setting::MAX_FIELD_SECTION_SIZE, 65536), (0x21, 0)],
            &mut out,
        );
        let h = parse_header(&out).unwrap();
        assert_eq!(h.ty, SETTINGS);
        assert_eq!(h.size + h.len as usize, out.len());
        let mut out = Vec::new();
        put_goaway(400, &mut out);
        assert_eq!(out, [0x07, 0x02, 0x41, 0x90]);
        let h = parse_header(&out).unwrap();
        assert_eq!(single_varint(&out[h.size..]), Some(400));
        assert_eq!(single_varint(&[0x41]), None);
        assert_eq!(single_varint(&[0x01, 0x00]), None);
    }
}
