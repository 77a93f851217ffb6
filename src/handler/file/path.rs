//! Request path -> filesystem path below `file.dir`: percent-decoding and dot-segment removal.
//!
//! Decisions (each has a test below):
//! - A malformed escape (`%zz`, `%4`) is a bad request: 400.
//! - A NUL byte (`%00`) can be in no file name: 404, as h2o (whose file handler passes such a
//!   request on, and the last answer is 404). It never reaches a system call.
//! - `%2F` decodes to a slash inside one segment. A file name cannot contain a slash, so no such
//!   file can exist: 404, and the slash is never used as a separator.
//! - `.` segments are dropped and `..` removes the previous segment, after decoding, so `%2e%2e`
//!   is `..` too. A `..` that would climb above `file.dir` is a bad request: 400, as nginx does,
//!   rather than silently clamping to the root.
//! - Empty segments (`//`) are merged, as nginx does.
//! - A backslash is an ordinary byte; only `/` separates segments.

use crate::http::hex_value;

/// Why a request path cannot name a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Malformed escape, not starting with `/`, or escaping the root: 400.
    BadRequest,
    /// Can name no file (an encoded slash in a segment, a NUL byte): 404.
    NotFound,
}

/// Decodes and normalises `raw` (the request path below the handler's prefix, starting with
/// `/`) and appends it to `out` as `/seg/seg`. Nothing is appended for the root itself.
///
/// Returns whether the request names a directory: the path ends with `/`, or its last segment
/// is `.` or `..`.
pub fn append_normalized(raw: &[u8], out: &mut Vec<u8>) -> Result<bool, PathError> {
    let Some(rest) = raw.strip_prefix(b"/") else {
        return Err(PathError::BadRequest);
    };
    if is_normal(raw) {
        // Most paths are already in normal form: one scan and one copy, not a pass per segment.
        out.extend_from_slice(raw);
        return Ok(false);
    }
    append_segments(rest, out)
}

/// [`append_normalized`] one segment at a time: `rest` is the path after its first `/`.
fn append_segments(rest: &[u8], out: &mut Vec<u8>) -> Result<bool, PathError> {
    let base = out.len();
    let mut dir_like = false;
    for seg in rest.split(|&b| b == b'/') {
        let start = out.len();
        out.push(b'/');
        let kind = decode_segment(seg, out)?;
        let decoded = &out[start + 1..];
        dir_like = seg.is_empty();
        match decoded {
            b"" => out.truncate(start),
            b"." => {
                out.truncate(start);
                dir_like = true;
            }
            b".." => {
                out.truncate(start);
                // Drop the previous segment; with none left, `..` would leave the root.
                match memchr::memrchr(b'/', &out[base..]) {
                    Some(i) => out.truncate(base + i),
                    None => return Err(PathError::BadRequest),
                }
                dir_like = true;
            }
            _ if kind == SegmentKind::HasSlash => return Err(PathError::NotFound),
            _ => {}
        }
    }
    Ok(dir_like)
}

/// Whether `raw` (starting with `/`) is its own normal form, which [`append_normalized`]
/// would copy unchanged: nothing percent-encoded, no NUL, no empty segment (`//`, a trailing
/// `/`) and no segment starting with a dot (so no `.` or `..`).
fn is_normal(raw: &[u8]) -> bool {
    let mut prev = 0u8;
    for &b in raw {
        if b == b'%' || b == 0 || (prev == b'/' && (b == b'/' || b == b'.')) {
            return false;
        }
        prev = b;
    }
    prev != b'/'
}

/// Percent-encodes a decoded path (as built by [`append_normalized`]) for a `Location` header,
/// keeping `/` as the separator and the characters RFC 3986 allows unescaped in a path.
pub fn encode_path(path: &[u8], out: &mut Vec<u8>) {
    for &b in path {
        if is_path_char(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum SegmentKind {
    Plain,
    /// Contained `%2F`.
    HasSlash,
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn decode_segment(seg: &[u8], out: &mut Vec<u8>) -> Result<SegmentKind, PathError> {
    // Most segments have nothing to decode: copied whole rather than byte by byte.
    if !seg.iter().any(|&b| b == b'%' || b == 0) {
        out.extend_from_slice(seg);
        return Ok(SegmentKind::Plain);
    }
    let mut kind = SegmentKind::Plain;
    let mut i = 0;
    while i < seg.len() {
        let mut b = seg[i];
        if b == b'%' {
            let hi = seg.get(i + 1).and_then(|&h| hex_value(h));
            let lo = seg.get(i + 2).and_then(|&l| hex_value(l));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(PathError::BadRequest);
            };
            b = hi << 4 | lo;
            i += 2;
            if b == b'/' {
                kind = SegmentKind::HasSlash;
            }
        }
        if b == 0 {
            return Err(PathError::NotFound);
        }
        out.push(b);
        i += 1;
    }
    Ok(kind)
}

fn is_path_char(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'/' | b'-'
                | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(raw: &str) -> Result<(String, bool), PathError> {
        let mut out = b"/root".to_vec();
        let dir = append_normalized(raw.as_bytes(), &mut out)?;
        Ok((String::from_utf8_lossy(&out).into_owned(), dir))
    }

    fn ok(raw: &str, want: &str, dir: bool) {
        assert_eq!(norm(raw), Ok((want.to_string(), dir)), "{raw}");
    }

    #[test]
    fn plain_paths() {
        ok("/", "/root", true);
        ok("/a.txt", "/root/a.txt", false);
        ok("/a/b/", "/root/a/b", true);
        ok("//a///b", "/root/a/b", false);
        ok("/a%20b", "/root/a b", false);
        ok("/%E2%82%AC", "/root/\u{20ac}", false);
        ok("/a\\..\\b", "/root/a\\..\\b", false);
    }

    /// The one-copy path for paths in normal form gives what the per-segment one gives, and
    /// what it copies is the path unchanged.
    #[test]
    fn normal_form_is_copied_as_the_segments_would_be() {
        let paths = [
            "/",
            "/a",
            "/a.txt",
            "/v1/d50/0043.txt",
            "/a/b/",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/.well-known/x",
            "/a/.hidden",
            "/a/b.",
            "/a%20b",
            "/a/..",
            "/a/.",
            "/a.b/c..d",
            "/x\\..\\y",
            "//",
            "/a/",
            "/a\0b",
            "/a%2Fb",
        ];
        for raw in paths {
            let bytes = raw.as_bytes();
            let mut fast = Vec::new();
            let fast_dir = append_normalized(bytes, &mut fast);
            let mut slow = Vec::new();
            let slow_dir = append_segments(&bytes[1..], &mut slow);
            assert_eq!((fast_dir, &fast), (slow_dir, &slow), "{raw}");
            if is_normal(bytes) {
                assert_eq!(fast, bytes, "{raw}");
            }
        }
        assert!(is_normal(b"/v1/d50/0043.txt"));
        for raw in ["/", "/a/", "//a", "/a/.b", "/a%41", "/a\0b"] {
            assert!(!is_normal(raw.as_bytes()), "{raw}");
        }
    }

    #[test]
    fn dot_segments_stay_inside() {
        ok("/a/./b", "/root/a/b", false);
        ok("/a/../b", "/root/b", false);
        ok("/a/b/..", "/root/a", true);
        ok("/a/.", "/root/a", true);
        ok("/a/%2e%2E/b", "/root/b", false);
        ok("/a/%2e", "/root/a", true);
        ok("/..a/...", "/root/..a/...", false);
    }

    #[test]
    fn escapes_are_rejected() {
        for raw in [
            "/..",
            "/../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/%2E%2E",
            "/a/../../x",
            "/a/./../..",
            "/./..",
            "/.%2e/x",
        ] {
            assert_eq!(norm(raw), Err(PathError::BadRequest), "{raw}");
        }
    }

    #[test]
    fn bad_encodings() {
        for raw in ["/%zz", "/%4", "/%", "a/b", "", "*"] {
            assert_eq!(norm(raw), Err(PathError::BadRequest), "{raw}");
        }
    }

    /// As h2o: no file name holds a NUL, so none is found.
    #[test]
    fn a_nul_byte_is_not_found() {
        for raw in ["/%00", "/a%00.txt", "/%00/../x"] {
            assert_eq!(norm(raw), Err(PathError::NotFound), "{raw}");
        }
    }

    #[test]
    fn encoded_slash_is_not_found() {
        assert_eq!(norm("/a%2fb"), Err(PathError::NotFound));
        assert_eq!(norm("/..%2f..%2fetc%2fpasswd"), Err(PathError::NotFound));
        assert_eq!(norm("/%2F"), Err(PathError::NotFound));
    }

    #[test]
    fn encodes_for_location() {
        let mut out = Vec::new();
        encode_path("/a b/é?#%/x".as_bytes(), &mut out);
        assert_eq!(out, b"/a%20b/%C3%A9%3F%23%25/x");
    }
}
