//! The QPACK static table (RFC 9204 Appendix A): 99 entries, 0-based.

use std::sync::OnceLock;

/// Entries of names whose values differ from one resource to the next (the encoder refers
/// to them without looking the name up).
pub const CONTENT_LENGTH: usize = 4;
pub const ETAG: usize = 7;
pub const LAST_MODIFIED: usize = 10;

/// Entry `index`.
#[inline]
pub fn get(index: usize) -> Option<(&'static [u8], &'static [u8])> {
    STATIC.get(index).copied()
}

/// Looks `name`/`value` up: `(index, true)` for an exact match, `(index, false)` for an entry
/// with that name. Names are expected lowercase.
pub fn find(name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
    let first = name_index(name)?;
    // Entries sharing a name are mostly adjacent; `:status` and a few others come back later
    // in the table, so look at every later entry up to the last with the same name.
    let last = last_of_name(first);
    for (i, &(n, v)) in STATIC.iter().enumerate().take(last + 1).skip(first) {
        if n == name && v == value {
            return Some((i, true));
        }
    }
    Some((first, false))
}

/// The last entry with the name of entry `first` (computed once: a lookup of a field whose
/// value is not in the table then stops there rather than at the end of the table).
fn last_of_name(first: usize) -> usize {
    static LAST: OnceLock<[usize; LEN]> = OnceLock::new();
    let last = LAST.get_or_init(|| {
        let mut last = [0; LEN];
        for (i, slot) in last.iter_mut().enumerate() {
            let name = STATIC[i].0;
            *slot = STATIC.iter().rposition(|(n, _)| *n == name).unwrap_or(i);
        }
        last
    });
    last.get(first).copied().unwrap_or(LEN - 1)
}

/// The first entry whose name is `name`.
fn name_index(name: &[u8]) -> Option<usize> {
    let i = match name {
        b":authority" => 0,
        b":path" => 1,
        b"age" => 2,
        b"content-disposition" => 3,
        b"content-length" => 4,
        b"cookie" => 5,
        b"date" => 6,
        b"etag" => 7,
        b"if-modified-since" => 8,
        b"if-none-match" => 9,
        b"last-modified" => 10,
        b"link" => 11,
        b"location" => 12,
        b"referer" => 13,
        b"set-cookie" => 14,
        b":method" => 15,
        b":scheme" => 22,
        b":status" => 24,
        b"accept" => 29,
        b"accept-encoding" => 31,
        b"accept-ranges" => 32,
        b"access-control-allow-headers" => 33,
        b"access-control-allow-origin" => 35,
        b"cache-control" => 36,
        b"content-encoding" => 42,
        b"content-type" => 44,
        b"range" => 55,
        b"strict-transport-security" => 56,
        b"vary" => 59,
        b"x-content-type-options" => 61,
        b"x-xss-protection" => 62,
        b"accept-language" => 72,
        b"access-control-allow-credentials" => 73,
        b"access-control-allow-methods" => 76,
        b"access-control-expose-headers" => 79,
        b"access-control-request-headers" => 80,
        b"access-control-request-method" => 81,
        b"alt-svc" => 83,
        b"authorization" => 84,
        b"content-security-policy" => 85,
        b"early-data" => 86,
        b"expect-ct" => 87,
        b"forwarded" => 88,
        b"if-range" => 89,
        b"origin" => 90,
        b"purpose" => 91,
        b"server" => 92,
        b"timing-allow-origin" => 93,
        b"upgrade-insecure-requests" => 94,
        b"user-agent" => 95,
        b"x-forwarded-for" => 96,
        b"x-frame-options" => 97,
        _ => return None,
    };
    Some(i)
}

pub const LEN: usize = 99;

static STATIC: [(&[u8], &[u8]); LEN] = [
    (b":authority", b""),
    (b":path", b"/"),
    (b"age", b"0"),
    (b"content-disposition", b""),
    (b"content-length", b"0"),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"referer", b""),
    (b"set-cookie", b""),
    (b":method", b"CONNECT"),
    (b":method", b"DELETE"),
    (b":method", b"GET"),
    (b":method", b"HEAD"),
    (b":method", b"OPTIONS"),
    (b":method", b"POST"),
    (b":method", b"PUT"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"103"),
    (b":status", b"200"),
    (b":status", b"304"),
    (b":status", b"404"),
    (b":status", b"503"),
    (b"accept", b"*/*"),
    (b"accept", b"application/dns-message"),
    (b"accept-encoding", b"gzip, deflate, br"),
    (b"accept-ranges", b"bytes"),
    (b"access-control-allow-headers", b"cache-control"),
    (b"access-control-allow-headers", b"content-type"),
    (b"access-control-allow-origin", b"*"),
    (b"cache-control", b"max-age=0"),
    (b"cache-control", b"max-age=2592000"),
    (b"cache-control", b"max-age=604800"),
    (b"cache-control", b"no-cache"),
    (b"cache-control", b"no-store"),
    (b"cache-control", b"public, max-age=31536000"),
    (b"content-encoding", b"br"),
    (b"content-encoding", b"gzip"),
    (b"content-type", b"application/dns-message"),
    (b"content-type", b"application/javascript"),
    (b"content-type", b"application/json"),
    (b"content-type", b"application/x-www-form-urlencoded"),
    (b"content-type", b"image/gif"),
    (b"content-type", b"image/jpeg"),
    (b"content-type", b"image/png"),
    (b"content-type", b"text/css"),
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-type", b"text/plain"),
    (b"content-type", b"text/plain;charset=utf-8"),
    (b"range", b"bytes=0-"),
    (b"strict-transport-security", b"max-age=31536000"),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains",
    ),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains; preload",
    ),
    (b"vary", b"accept-encoding"),
    (b"vary", b"origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-xss-protection", b"1; mode=block"),
    (b":status", b"100"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"302"),
    (b":status", b"400"),
    (b":status", b"403"),
    (b":status", b"421"),
    (b":status", b"425"),
    (b":status", b"500"),
    (b"accept-language", b""),
    (b"access-control-allow-credentials", b"FALSE"),
    (b"access-control-allow-credentials", b"TRUE"),
    (b"access-control-allow-headers", b"*"),
    (b"access-control-allow-methods", b"get"),
    (b"access-control-allow-methods", b"get, post, options"),
    (b"access-control-allow-methods", b"options"),
    (b"access-control-expose-headers", b"content-length"),
    (b"access-control-request-headers", b"content-type"),
    (b"access-control-request-method", b"get"),
    (b"access-control-request-method", b"post"),
    (b"alt-svc", b"clear"),
    (b"authorization", b""),
    (
        b"content-security-policy",
        b"script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    (b"early-data", b"1"),
    (b"expect-ct", b""),
    (b"forwarded", b""),
    (b"if-range", b""),
    (b"origin", b""),
    (b"purpose", b"prefetch"),
    (b"server", b""),
    (b"timing-allow-origin", b"*"),
    (b"upgrade-insecure-requests", b"1"),
    (b"user-agent", b""),
    (b"x-forwarded-for", b""),
    (b"x-frame-options", b"deny"),
    (b"x-frame-options", b"sameorigin"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_index_is_the_first_entry_of_each_name() {
        for (i, &(name, _)) in STATIC.iter().enumerate() {
            let first = STATIC.iter().position(|&(n, _)| n == name).unwrap();
            assert_eq!(name_index(name), Some(first), "entry {i}");
            assert_eq!(find(name, STATIC[i].1), Some((i, true)));
        }
        assert_eq!(find(b":status", b"200"), Some((25, true)));
        assert_eq!(find(b":status", b"418"), Some((24, false)));
        assert_eq!(find(b"x-unknown", b""), None);
        assert_eq!(get(17), Some((&b":method"[..], &b"GET"[..])));
        assert_eq!(get(LEN), None);
        assert_eq!(find(b"content-length", b"1"), Some((CONTENT_LENGTH, false)));
        assert_eq!(find(b"etag", b"\"x\""), Some((ETAG, false)));
        assert_eq!(find(b"last-modified", b"x"), Some((LAST_MODIFIED, false)));
    }
}
