//! Request heads from a decoded HPACK or QPACK field list: the checks HTTP/2 and HTTP/3
//! share (RFC 9113 section 8.3, RFC 9114 section 4.3) — pseudo-header fields first, once
//! each, none unknown; lowercase valid names and values; no connection-specific fields; `te`
//! only as `trailers`; one consistent `content-length`; the CONNECT forms.
//!
//! Names and values stay ranges into the buffer the decoder filled, so a request costs one
//! `Vec` of field ranges, whichever protocol carried it.

use std::ops::Range;

use crate::http::Method;

/// One decoded header field: byte ranges into the buffer the HPACK or QPACK decoder filled.
/// Defined here, below both decoders, which hand out lists of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderField {
    pub name: Range<usize>,
    pub value: Range<usize>,
    /// Sent as "never indexed" (RFC 7541 section 6.2.3): an intermediary forwarding this
    /// field must encode it the same way.
    pub never_indexed: bool,
    /// The HPACK static-table index the decoder took the name from, 0 when it came from
    /// elsewhere (the dynamic table, a literal, QPACK): [`parse`] need not look at it then.
    pub static_name: u8,
}

/// A validated request head: ranges into the decoder's buffer.
#[derive(Debug)]
pub struct RequestHead {
    pub method: Method,
    /// `:path` (empty for CONNECT).
    pub target: Range<usize>,
    pub authority: Option<Range<usize>>,
    /// `:protocol` (extended CONNECT, RFC 8441 / RFC 9220). The caller refuses it unless it
    /// announced SETTINGS_ENABLE_CONNECT_PROTOCOL.
    pub protocol: Option<Range<usize>>,
    /// Regular fields, in order.
    pub fields: Vec<(Range<usize>, Range<usize>)>,
    pub content_length: Option<u64>,
    /// The last `priority` field (RFC 9218).
    pub priority: Option<Range<usize>>,
    /// `expect: 100-continue`.
    pub expect_continue: bool,
}

/// The head breaks a rule of section 8.3 / 4.3: a malformed request (stream error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Validates `fields` (ranges into `buf`) and sorts them into a [`RequestHead`].
pub fn parse(buf: &[u8], fields: &[HeaderField]) -> Result<RequestHead, Malformed> {
    let mut method = None;
    let mut scheme = false;
    let mut path: Option<Range<usize>> = None;
    let mut authority = None;
    let mut protocol = None;
    let mut regular = crate::http::recycle::field_list(fields.len());
    let mut content_length = None;
    let mut priority = None;
    let mut expect_continue = false;
    for f in fields {
        let value = &buf[f.value.clone()];
        let (n, v) = (f.name.clone(), f.value.clone());
        // A name from the static table needs no reading: what it is and that it is a
        // valid lowercase token are known.
        match NAME_HINTS.get(usize::from(f.static_name)) {
            Some(Hint::Method) if regular.is_empty() && method.is_none() => {
                method = Some(v);
                continue;
            }
            Some(Hint::Path) if regular.is_empty() && path.is_none() => {
                path = Some(v);
                continue;
            }
            Some(Hint::Scheme) if regular.is_empty() && !scheme && !value.is_empty() => {
                scheme = true;
                continue;
            }
            Some(Hint::Plain) => {
                if !valid_value(value) {
                    return Err(Malformed);
                }
                regular.push((n, v));
                continue;
            }
            // Everything else, including the malformed uses of the names above, as before.
            _ => {}
        }
        let name = &buf[f.name.clone()];
        if let Some(pseudo) = name.strip_prefix(b":") {
            if !regular.is_empty() {
                return Err(Malformed);
            }
            let slot = match pseudo {
                b"method" => &mut method,
                b"path" => &mut path,
                b"authority" => &mut authority,
                b"protocol" => &mut protocol,
                b"scheme" => {
                    if scheme || value.is_empty() {
                        return Err(Malformed);
                    }
                    scheme = true;
                    continue;
                }
                _ => return Err(Malformed),
            };
            if slot.replace(v).is_some() {
                return Err(Malformed);
            }
            continue;
        }
        if !valid_field(name, value) {
            return Err(Malformed);
        }
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => return Err(Malformed),
            b"te" if value != b"trailers" => return Err(Malformed),
            b"content-length" => {
                let len = parse_u64(value).ok_or(Malformed)?;
                if content_length.is_some_and(|l| l != len) {
                    return Err(Malformed);
                }
                content_length = Some(len);
            }
            b"priority" => priority = Some(v.clone()),
            b"expect" => expect_continue = value.eq_ignore_ascii_case(b"100-continue"),
            _ => {}
        }
        regular.push((n, v));
    }
    let method = Method::from_bytes(&buf[method.ok_or(Malformed)?]);
    let is_connect = method == Method::Connect;
    let has_path = path.as_ref().is_some_and(|p| !p.is_empty());
    if protocol.is_some() {
        // Extended CONNECT carries all four (RFC 8441 section 4).
        if !is_connect || !scheme || !has_path || authority.is_none() {
            return Err(Malformed);
        }
    } else if is_connect {
        if authority.is_none() || scheme || path.is_some() {
            return Err(Malformed);
        }
    } else if !scheme || !has_path {
        return Err(Malformed);
    }
    Ok(RequestHead {
        method,
        target: path.unwrap_or(0..0),
        authority,
        protocol,
        fields: regular,
        content_length,
        priority,
        expect_continue,
    })
}

/// What [`parse`] knows of a field by [`HeaderField::static_name`].
#[derive(Clone, Copy)]
enum Hint {
    /// Not from the static table, or a name with more to check (`:authority` is rarely
    /// static-only, `content-length`, `expect`, `transfer-encoding`, `:status`): read it.
    Read,
    Method,
    Path,
    Scheme,
    /// A regular name with nothing special about it.
    Plain,
}

/// [`Hint`] by HPACK static index (RFC 7541 Appendix A; 0 is "none").
static NAME_HINTS: [Hint; 62] = {
    let mut t = [Hint::Plain; 62];
    let mut i = 0;
    while i <= 14 {
        t[i] = Hint::Read;
        i += 1;
    }
    t[2] = Hint::Method;
    t[3] = Hint::Method;
    t[4] = Hint::Path;
    t[5] = Hint::Path;
    t[6] = Hint::Scheme;
    t[7] = Hint::Scheme;
    t[28] = Hint::Read; // content-length
    t[35] = Hint::Read; // expect
    t[57] = Hint::Read; // transfer-encoding
    t
};

/// Trailer fields: no pseudo-header fields, valid names and values.
pub fn valid_trailers(buf: &[u8], fields: &[HeaderField]) -> bool {
    fields.iter().all(|f| {
        let name = &buf[f.name.clone()];
        !name.starts_with(b":") && valid_field(name, &buf[f.value.clone()])
    })
}

/// Fields HTTP/2 and HTTP/3 forbid (RFC 9113 section 8.2.2, RFC 9114 section 4.2), in any
/// case: what a response writer drops from a handler's or a backend's headers.
pub fn is_connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// Field names must be lowercase tokens; values must not contain NUL, CR, LF or start or end
/// with whitespace (RFC 9113 section 8.2.1, RFC 9114 section 4.2).
pub fn valid_field(name: &[u8], value: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| BYTE_CLASS[b as usize] & LOWER_TCHAR != 0)
        && valid_value(value)
}

/// The value half of [`valid_field`].
#[inline]
fn valid_value(value: &[u8]) -> bool {
    value_bytes_allowed(value)
        && !matches!(value.first(), Some(b' ' | b'\t'))
        && !matches!(value.last(), Some(b' ' | b'\t'))
}

/// No NUL, CR or LF in `value`: eight bytes at a time (values are the long part of a head),
/// the last word overlapping the one before; a value under eight bytes by the table.
fn value_bytes_allowed(value: &[u8]) -> bool {
    let len = value.len();
    if len < 8 {
        return value
            .iter()
            .all(|&b| BYTE_CLASS[b as usize] & BAD_IN_VALUE == 0);
    }
    let word = |at: usize| {
        value
            .get(at..)
            .and_then(|t| t.first_chunk::<8>())
            .map_or(0, |w| u64::from_le_bytes(*w))
    };
    let mut at = 0;
    while at + 8 < len {
        if !word_allowed(word(at)) {
            return false;
        }
        at += 8;
    }
    word_allowed(word(len - 8))
}

/// Whether none of the eight bytes of `x` is NUL, CR or LF. All three are below 0x0e, and
/// most words have no byte that low: one test for those, three for the others.
#[inline]
fn word_allowed(x: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // The classic "some byte is below n" test, exact as to whether any is (n <= 0x80).
    let low = x.wrapping_sub(ONES * 0x0e) & !x & (ONES * 0x80) != 0;
    !low || !(has_zero_byte(x) || has_zero_byte(x ^ SPLAT_CR) || has_zero_byte(x ^ SPLAT_LF))
}

const SPLAT_CR: u64 = 0x0d0d_0d0d_0d0d_0d0d;
const SPLAT_LF: u64 = 0x0a0a_0a0a_0a0a_0a0a;

/// Whether a byte of `x` is zero (the classic bit trick: exact, no false positives when
/// asked only whether any byte is zero).
fn has_zero_byte(x: u64) -> bool {
    x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080 != 0
}

/// `BYTE_CLASS` bits: one table lookup per header byte instead of a chain of comparisons.
const LOWER_TCHAR: u8 = 1;
const BAD_IN_VALUE: u8 = 2;

static BYTE_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
        {
            t[b] |= LOWER_TCHAR;
        }
        if matches!(c, 0 | b'\r' | b'\n') {
            t[b] |= BAD_IN_VALUE;
        }
        b += 1;
    }
    t
};

/// A decimal `content-length` (at most 19 digits, so it cannot overflow).
pub fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `pairs` as an HPACK decoder hands them over (names from the static table
    /// marked with their index), checking that the result is the one of reading every name.
    fn head(pairs: &[(&str, &str)]) -> Result<RequestHead, Malformed> {
        let (buf, mut fields) = decoded(pairs);
        let read = parse(&buf, &fields);
        for f in &mut fields {
            let name = &buf[f.name.clone()];
            if !name.iter().any(u8::is_ascii_uppercase) {
                let index = crate::proto::h2::hpack::table::static_name_nocase(name);
                f.static_name = index.unwrap_or(0) as u8;
            }
        }
        let hinted = parse(&buf, &fields);
        assert_eq!(format!("{hinted:?}"), format!("{read:?}"), "{pairs:?}");
        hinted
    }

    fn decoded(pairs: &[(&str, &str)]) -> (Vec<u8>, Vec<HeaderField>) {
        let mut buf = Vec::new();
        let mut fields = Vec::new();
        for (n, v) in pairs {
            let ns = buf.len();
            buf.extend_from_slice(n.as_bytes());
            let vs = buf.len();
            buf.extend_from_slice(v.as_bytes());
            fields.push(HeaderField {
                name: ns..vs,
                value: vs..buf.len(),
                never_indexed: false,
                static_name: 0,
            });
        }
        (buf, fields)
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/x"),
    ];

    #[test]
    fn value_bytes_checked_word_by_word_and_in_the_tail() {
        for len in 0..40 {
            let ok = vec![b'a'; len];
            assert!(value_bytes_allowed(&ok));
            for at in 0..len {
                for bad in [0u8, b'\r', b'\n'] {
                    let mut v = ok.clone();
                    v[at] = bad;
                    assert!(!value_bytes_allowed(&v), "{len} {at} {bad}");
                }
                // Every other byte passes, in a word or in the tail.
                for fine in (0..=255u8).filter(|b| ![0, b'\r', b'\n'].contains(b)) {
                    let mut v = ok.clone();
                    v[at] = fine;
                    assert!(value_bytes_allowed(&v), "{len} {at} {fine}");
                }
            }
        }
    }

    #[test]
    fn a_plain_request() {
        let mut pairs = GET.to_vec();
        pairs.extend([
            ("content-length", "5"),
            ("te", "trailers"),
            ("expect", "100-Continue"),
        ]);
        let h = head(&pairs).unwrap();
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.content_length, Some(5));
        assert!(h.expect_continue);
        assert_eq!(h.fields.len(), 3);
        assert!(h.protocol.is_none());
    }

    #[test]
    fn malformed_heads() {
        let bad: &[&[(&str, &str)]] = &[
            &[(":scheme", "https"), (":path", "/")],
            &[(":method", "GET"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "https")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "")],
            &[
                (":method", "GET"),
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
            ],
            &[(":method", "GET"), (":scheme", ""), (":path", "/")],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                (":status", "200"),
            ],
            &[
                (":method", "GET"),
                ("a", "b"),
                (":scheme", "https"),
                (":path", "/"),
            ],
            &[
                (":method", "CONNECT"),
                (":authority", "a:1"),
                (":path", "/"),
            ],
            &[(":method", "CONNECT"), (":path", "/")],
            &[
                (":method", "GET"),
                (":protocol", "websocket"),
                (":scheme", "https"),
                (":path", "/"),
                (":authority", "a"),
            ],
            &[
                (":method", "CONNECT"),
                (":protocol", "websocket"),
                (":authority", "a"),
            ],
        ];
        // The names the decoder marks as static, used wrongly.
        let twice_path = [GET.as_slice(), &[(":path", "/y")]].concat();
        let twice_scheme = [GET.as_slice(), &[(":scheme", "http")]].concat();
        let twice_method = [GET.as_slice(), &[(":method", "POST")]].concat();
        let late_path = [&GET[..3], &[("accept", "*/*"), (":path", "/")]].concat();
        let late_scheme = [&GET[1..], &[("accept", "*/*"), (":method", "GET")]].concat();
        let spaced = [GET.as_slice(), &[("accept", " */*")]].concat();
        let status = [GET.as_slice(), &[(":status", "200")]].concat();
        let chunked = [GET.as_slice(), &[("transfer-encoding", "chunked")]].concat();
        for pairs in bad.iter().copied().chain([
            &twice_path[..],
            &twice_scheme,
            &twice_method,
            &late_path,
            &late_scheme,
            &spaced,
            &status,
            &chunked,
        ]) {
            assert!(head(pairs).is_err(), "{pairs:?}");
        }
        for (n, v) in [
            ("connection", "close"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("keep-alive", "1"),
            ("proxy-connection", "x"),
            ("te", "gzip"),
            ("content-length", "x"),
            ("Accept", "x"),
            ("x", "a\nb"),
        ] {
            let mut pairs = GET.to_vec();
            pairs.push((n, v));
            assert!(head(&pairs).is_err(), "{n}: {v}");
        }
        let mut pairs = GET.to_vec();
        pairs.extend([("content-length", "1"), ("content-length", "2")]);
        assert!(head(&pairs).is_err());
    }

    #[test]
    fn connect_forms() {
        let h = head(&[(":method", "CONNECT"), (":authority", "a:443")]).unwrap();
        assert_eq!(h.method, Method::Connect);
        assert_eq!(h.target, 0..0);
        let h = head(&[
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":path", "/chat"),
            (":authority", "a"),
        ])
        .unwrap();
        assert!(h.protocol.is_some());
    }
}
