//! Validators: `If-None-Match`, `If-Modified-Since` and `If-Range` against a file's strong ETag
//! and modification time (RFC 9110 section 13).

use std::time::{SystemTime, UNIX_EPOCH};

/// Whether any `If-None-Match` value matches `etag` by weak comparison (`*` matches anything).
/// A match means 304 for GET and HEAD.
pub fn none_match<'a>(values: impl Iterator<Item = &'a [u8]>, etag: &[u8]) -> bool {
    let ours = opaque(etag);
    values.into_iter().any(|v| {
        if v.trim_ascii() == b"*" {
            return true;
        }
        EntityTags(v).any(|t| opaque(t) == ours)
    })
}

/// Whether `If-Match` values allow the request: `*`, or a strong match with `etag` (`None` when
/// ETags are off, so only `*` passes). Failing means 412.
pub fn match_allows<'a>(values: impl Iterator<Item = &'a [u8]>, etag: Option<&[u8]>) -> bool {
    values.into_iter().any(|v| {
        v.trim_ascii() == b"*"
            || etag.is_some_and(|e| EntityTags(v).any(|t| !t.starts_with(b"W/") && t == e))
    })
}

/// Whether the file was not modified after the `If-Modified-Since` date. An unparsable date is
/// ignored (false). Compared at one-second precision, as Last-Modified carries.
pub fn not_modified_since(value: &[u8], modified: SystemTime) -> bool {
    match parse_date(value) {
        Some(since) => unix_secs(modified) <= since,
        None => false,
    }
}

/// Whether the file was modified after the `If-Unmodified-Since` date (then 412). An
/// unparsable date is ignored (false), as RFC 9110 section 13.1.4 requires.
pub fn modified_after(value: &[u8], modified: SystemTime) -> bool {
    parse_date(value).is_some_and(|since| unix_secs(modified) > since)
}

/// Whether an `If-Range` value still describes the file, so the Range header applies: an
/// entity tag must match strongly (a weak one never does); a date must equal Last-Modified.
pub fn if_range_matches(value: &[u8], etag: Option<&[u8]>, modified: SystemTime) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return match etag {
            Some(etag) => !value.starts_with(b"W/") && value == etag,
            None => false,
        };
    }
    parse_date(value) == Some(unix_secs(modified))
}

/// Seconds since the epoch, clamped at zero for times before it.
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn parse_date(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?.trim();
    httpdate::parse_http_date(s).ok().map(unix_secs)
}

/// The opaque part of an entity tag: `W/"x"` and `"x"` both give `"x"`.
fn opaque(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// Iterates the entity tags of a comma-separated list. Commas may appear inside the quotes, so
/// this scans quote to quote; anything malformed ends the list.
struct EntityTags<'a>(&'a [u8]);

impl<'a> Iterator for EntityTags<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.0;
        let start = s.iter().position(|&b| !matches!(b, b' ' | b'\t' | b','))?;
        let weak = s[start..].starts_with(b"W/");
        let quote = start + if weak { 2 } else { 0 };
        if s.get(quote) != Some(&b'"') {
            self.0 = &[];
            return None;
        }
        let Some(close) = memchr::memchr(b'"', &s[quote + 1..]) else {
            self.0 = &[];
            return None;
        };
        let end = quote + 1 + close + 1;
        self.0 = &s[end..];
        Some(&s[start..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const TAG: &[u8] = b"\"5f-10\"";

    fn inm(v: &str) -> bool {
        none_match(std::iter::once(v.as_bytes()), TAG)
    }

    #[test]
    fn if_none_match_lists_and_weak_comparison() {
        assert!(inm("\"5f-10\""));
        assert!(inm("W/\"5f-10\""));
        assert!(inm("*"));
        assert!(inm(" \"a\", \"5f-10\""));
        assert!(inm("\"a,b\",W/\"5f-10\""));
        assert!(!inm("\"5f-11\""));
        assert!(!inm("5f-10"));
        assert!(!inm(""));
        assert!(!inm("\"a\", junk, \"5f-10\""));
        // A second header line counts too.
        assert!(none_match(
            [&b"\"x\""[..], &b"\"5f-10\""[..]].into_iter(),
            TAG
        ));
    }

    #[test]
    fn if_match_is_strong() {
        let m = |v: &str, e: Option<&[u8]>| match_allows(std::iter::once(v.as_bytes()), e);
        assert!(m("\"5f-10\"", Some(TAG)));
        assert!(m("\"a\", \"5f-10\"", Some(TAG)));
        assert!(m("*", Some(TAG)));
        assert!(m("*", None));
        assert!(!m("W/\"5f-10\"", Some(TAG)));
        assert!(!m("\"5f-10\"", None));
        assert!(!m("\"x\"", Some(TAG)));
    }

    #[test]
    fn if_modified_since() {
        let t = UNIX_EPOCH + Duration::new(784_111_777, 500);
        assert!(not_modified_since(b"Sun, 06 Nov 1994 08:49:37 GMT", t));
        assert!(not_modified_since(b"Sun, 06 Nov 1994 08:49:38 GMT", t));
        assert!(!not_modified_since(b"Sun, 06 Nov 1994 08:49:36 GMT", t));
        assert!(!not_modified_since(b"yesterday", t));
        assert!(modified_after(b"Sun, 06 Nov 1994 08:49:36 GMT", t));
        assert!(!modified_after(b"Sun, 06 Nov 1994 08:49:37 GMT", t));
        assert!(!modified_after(b"yesterday", t));
    }

    #[test]
    fn if_range() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert!(if_range_matches(b"\"5f-10\"", Some(TAG), t));
        assert!(!if_range_matches(b"W/\"5f-10\"", Some(TAG), t));
        assert!(!if_range_matches(b"\"other\"", Some(TAG), t));
        assert!(!if_range_matches(b"\"5f-10\"", None, t));
        assert!(if_range_matches(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            Some(TAG),
            t
        ));
        assert!(!if_range_matches(
            b"Sun, 06 Nov 1994 08:49:38 GMT",
            Some(TAG),
            t
        ));
        assert!(!if_range_matches(b"garbage", Some(TAG), t));
    }
}
