//! `Range: bytes=...` parsing (RFC 9110 section 14).
//!
//! Policy: a header we cannot parse, in another unit, with more than [`MAX_RANGES`] ranges, or
//! whose satisfiable ranges add up to more than the file (overlaps, repeats) is ignored and the
//! whole file is served with 200. That bounds a multipart answer to one file's worth of data.

/// The most ranges one request may ask for before the header is ignored.
pub const MAX_RANGES: usize = 16;

/// What a Range header asks of a file of a given size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// Serve the whole file (no usable Range header).
    Whole,
    /// No range overlaps the file: 416.
    Unsatisfiable,
    /// One range: `(offset, len)`.
    Single(u64, u64),
    /// Several ranges, in the order asked: multipart/byteranges.
    Multi(Vec<(u64, u64)>),
}

/// Interprets the Range header value `header` for a representation of `size` bytes.
pub fn parse(header: &[u8], size: u64) -> Ranges {
    let Some(set) = strip_unit(header) else {
        return Ranges::Whole;
    };
    let mut first = None;
    let mut more = Vec::new();
    let mut count = 0;
    let mut total: u64 = 0;
    for item in set.split(|&b| b == b',') {
        let item = trim(item);
        if item.is_empty() {
            continue; // RFC 9110 list syntax allows empty elements.
        }
        count += 1;
        if count > MAX_RANGES {
            return Ranges::Whole;
        }
        let Some(spec) = parse_spec(item) else {
            return Ranges::Whole;
        };
        let Some((offset, len)) = spec.resolve(size) else {
            continue;
        };
        // Ranges that add up to more than the file (overlaps) get the whole file. Checked, not
        // saturating: a sum that saturates at u64::MAX would pass for a file that large.
        match total.checked_add(len) {
            Some(sum) if sum <= size => total = sum,
            _ => return Ranges::Whole,
        }
        match first {
            None => first = Some((offset, len)),
            Some(_) => more.push((offset, len)),
        }
    }
    match first {
        None if count == 0 => Ranges::Whole,
        None => Ranges::Unsatisfiable,
        Some((o, l)) if more.is_empty() => Ranges::Single(o, l),
        Some(f) => {
            more.insert(0, f);
            Ranges::Multi(more)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `a-b` or `a-` (last = None).
    FromTo(u64, Option<u64>),
    /// `-n`
    Suffix(u64),
}

impl Spec {
    /// `(offset, len)` within a file of `size` bytes, or `None` when unsatisfiable.
    fn resolve(self, size: u64) -> Option<(u64, u64)> {
        match self {
            Spec::FromTo(first, last) => {
                if first >= size {
                    return None;
                }
                let last = last.map_or(size - 1, |l| l.min(size - 1));
                Some((first, last - first + 1))
            }
            Spec::Suffix(n) => {
                if n == 0 || size == 0 {
                    return None;
                }
                let len = n.min(size);
                Some((size - len, len))
            }
        }
    }
}

fn strip_unit(header: &[u8]) -> Option<&[u8]> {
    let header = trim(header);
    let (unit, set) = header.split_at_checked(6)?;
    unit.eq_ignore_ascii_case(b"bytes=").then_some(set)
}

fn parse_spec(item: &[u8]) -> Option<Spec> {
    let dash = memchr::memchr(b'-', item)?;
    let (first, last) = (&item[..dash], &item[dash + 1..]);
    if first.is_empty() {
        return Some(Spec::Suffix(number(last)?));
    }
    let first = number(first)?;
    if last.is_empty() {
        return Some(Spec::FromTo(first, None));
    }
    let last = number(last)?;
    (last >= first).then_some(Spec::FromTo(first, Some(last)))
}

/// Decimal digits; values past `u64::MAX` saturate (they are past any file's end anyway).
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(h: &str) -> Ranges {
        parse(h.as_bytes(), 1000)
    }

    #[test]
    fn single_ranges() {
        assert_eq!(p("bytes=0-99"), Ranges::Single(0, 100));
        assert_eq!(p("bytes=100-"), Ranges::Single(100, 900));
        assert_eq!(p("bytes=-100"), Ranges::Single(900, 100));
        assert_eq!(p("bytes=-5000"), Ranges::Single(0, 1000));
        assert_eq!(p("bytes=990-5000"), Ranges::Single(990, 10));
        assert_eq!(p("BYTES= 5-5 "), Ranges::Single(5, 1));
        assert_eq!(
            p("bytes=999-99999999999999999999999"),
            Ranges::Single(999, 1)
        );
    }

    #[test]
    fn multiple_ranges() {
        assert_eq!(p("bytes=0-0, -1"), Ranges::Multi(vec![(0, 1), (999, 1)]));
        // An unsatisfiable member is dropped; one left is a single range.
        assert_eq!(p("bytes=0-9,2000-"), Ranges::Single(0, 10));
        assert_eq!(
            p("bytes=0-9,,20-29"),
            Ranges::Multi(vec![(0, 10), (20, 10)])
        );
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(p("bytes=1000-"), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=-0"), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=5000-6000,2000-"), Ranges::Unsatisfiable);
        assert_eq!(parse(b"bytes=0-", 0), Ranges::Unsatisfiable);
        assert_eq!(parse(b"bytes=-1", 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn malformed_is_ignored() {
        for h in [
            "",
            "bytes=",
            "bytes=,",
            "items=0-1",
            "bytes 0-1",
            "bytes=a-b",
            "bytes=5-1",
            "bytes=-",
            "bytes=1-2-3",
            "bytes=+1-2",
            "bytes=0-1,x",
            "bytes=--1",
        ] {
            assert_eq!(p(h), Ranges::Whole, "{h}");
        }
    }

    #[test]
    fn too_many_or_too_much_is_whole() {
        let many: Vec<String> = (0..17).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
        assert_eq!(p(&format!("bytes={}", many.join(","))), Ranges::Whole);
        let ok: Vec<String> = (0..16).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
        assert!(matches!(p(&format!("bytes={}", ok.join(","))), Ranges::Multi(v) if v.len() == 16));
        assert_eq!(p("bytes=0-599,400-999"), Ranges::Whole);
        assert_eq!(p("bytes=0-,0-"), Ranges::Whole);
        // The sum may not overflow past the guard, whatever the size (found by fuzzing).
        assert_eq!(parse(b"bytes=2-,5-", u64::MAX), Ranges::Whole);
        assert_eq!(
            parse(b"bytes=0-9,-10", u64::MAX),
            Ranges::Multi(vec![(0, 10), (u64::MAX - 10, 10)])
        );
    }
}
