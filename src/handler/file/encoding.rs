//! `Accept-Encoding` for `file.send-compressed`: which precompressed sibling a client takes.

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
    for value in values {
        for item in value.split(|&b| b == b',') {
            let mut parts = item.split(|&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            if name.is_empty() {
                continue;
            }
            let q_ok = parts.all(|p| !is_zero_q(p.trim_ascii()));
            let matches = name.eq_ignore_ascii_case(coding.name().as_bytes())
                || (coding == Coding::Gzip && name.eq_ignore_ascii_case(b"x-gzip"));
            if matches {
                named = Some(named.unwrap_or(false) || q_ok);
            } else if name == b"*" {
                star = q_ok;
            }
        }
    }
    named.unwrap_or(star)
}

/// `q=0`, `q=0.0`, `q=0.000`: the coding is refused.
fn is_zero_q(param: &[u8]) -> bool {
    let Some((k, v)) = param.split_at_checked(2) else {
        return false;
    };
    if !k.eq_ignore_ascii_case(b"q=") {
        return false;
    }
    let v = v.trim_ascii();
    match v.split_first() {
        Some((b'0', rest)) => {
            rest.is_empty() || (rest[0] == b'.' && rest[1..].iter().all(|&d| d == b'0'))
        }
        _ => false,
    }
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
