//! `Accept-Encoding` for `file.send-compressed`: which precompressed sibling a client takes.

use crate::http::accept_encoding::codings;

/// A precompressed sibling of a file, in order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Br,
    Gzip,
}

impl Coding {
    pub const ALL: [Coding; 2] = [Coding::Br, Coding::Gzip];

    /// The `Content-Encoding` value.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// The file name suffix of the sibling.
    pub fn suffix(self) -> &'static [u8] {
        match self {
            Coding::Br => b".br",
            Coding::Gzip => b".gz",
        }
    }

    /// Index into per-coding arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Whether the `Accept-Encoding` values accept `coding`: named with a non-zero q, or covered by
/// `*` with a non-zero q and not named.
pub fn accepts<'a>(values: impl Iterator<Item = &'a [u8]>, coding: Coding) -> bool {
    let mut named = None;
    let mut star = false;
    for (name, q) in codings(values) {
        let matches = name.eq_ignore_ascii_case(coding.name().as_bytes())
            || (coding == Coding::Gzip && name.eq_ignore_ascii_case(b"x-gzip"));
        if matches {
            named = Some(named.unwrap_or(false) || q > 0);
        } else if name == b"*" {
            star = q > 0;
        }
    }
    named.unwrap_or(star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(v: &str, c: Coding) -> bool {
        accepts(std::iter::once(v.as_bytes()), c)
    }

    #[test]
    fn accept_encoding() {
        assert!(acc("gzip, deflate, br", Coding::Br));
        assert!(acc("gzip, deflate, br", Coding::Gzip));
        assert!(!acc("gzip", Coding::Br));
        assert!(acc("GZIP;q=0.5", Coding::Gzip));
        assert!(acc("x-gzip", Coding::Gzip));
        assert!(!acc("br;q=0", Coding::Br));
        assert!(!acc("br; q=0.000", Coding::Br));
        assert!(acc("br;q=0.001", Coding::Br));
        assert!(acc("*", Coding::Br));
        assert!(!acc("*;q=0", Coding::Gzip));
        assert!(!acc("*, br;q=0", Coding::Br));
        assert!(!acc("identity", Coding::Gzip));
        assert!(!acc("", Coding::Gzip));
        assert!(accepts(
            [&b"deflate"[..], &b"br"[..]].into_iter(),
            Coding::Br
        ));
    }
}
