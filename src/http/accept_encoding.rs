//! `Accept-Encoding` (RFC 9110 section 12.5.3): the codings a client takes and their weights.

/// Each coding named in `values`, as written, with its weight in thousandths (`q=0.5` is 500,
/// no `q` is 1000). `*` comes out as a coding named `*`.
pub fn codings<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> impl Iterator<Item = (&'a [u8], u16)> {
    values
        .flat_map(|v| v.split(|&b| b == b','))
        .filter_map(|item| {
            let mut parts = item.split(|&b| b == b';');
            let name = parts.next()?.trim_ascii();
            if name.is_empty() {
                return None;
            }
            let q = parts.find_map(|p| qvalue(p.trim_ascii())).unwrap_or(1000);
            Some((name, q))
        })
}

/// The weight of a `q=` parameter; `None` for another parameter. Anything that does not start
/// with `0` weighs 1 (`q=1`, `q=1.000`, and leniently a malformed value).
fn qvalue(param: &[u8]) -> Option<u16> {
    let (k, v) = param.split_at_checked(2)?;
    if !k.eq_ignore_ascii_case(b"q=") {
        return None;
    }
    let Some(fraction) = v.trim_ascii().strip_prefix(b"0") else {
        return Some(1000);
    };
    let digits = fraction.strip_prefix(b".").unwrap_or_default();
    let mut q = 0u16;
    let mut scale = 100u16;
    for &d in digits.iter().take(3).take_while(|d| d.is_ascii_digit()) {
        q += u16::from(d - b'0') * scale;
        scale /= 10;
    }
    Some(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &str) -> Vec<(String, u16)> {
        codings(std::iter::once(v.as_bytes()))
            .map(|(n, q)| (String::from_utf8_lossy(n).into_owned(), q))
            .collect()
    }

    #[test]
    fn names_and_weights() {
        let owned = |v: &[(&str, u16)]| -> Vec<(String, u16)> {
            v.iter().map(|(n, q)| (n.to_string(), *q)).collect()
        };
        assert_eq!(
            list("gzip, deflate, br, zstd"),
            owned(&[
                ("gzip", 1000),
                ("deflate", 1000),
                ("br", 1000),
                ("zstd", 1000)
            ])
        );
        assert_eq!(
            list(" br;q=0.8 , gzip; Q=0.25,*;q=0, zstd;level=3;q=1.0"),
            owned(&[("br", 800), ("gzip", 250), ("*", 0), ("zstd", 1000)])
        );
        assert_eq!(
            list("a;q=0, b;q=0.000, c;q=0.001, d;q=0.5x, e;q=junk, ,;q=1"),
            owned(&[("a", 0), ("b", 0), ("c", 1), ("d", 500), ("e", 1000)])
        );
        assert_eq!(list(""), owned(&[]));
        let two = [&b"br"[..], &b"gzip;q=0"[..]];
        assert_eq!(codings(two.into_iter()).count(), 2);
    }
}
