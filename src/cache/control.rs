//! `Cache-Control` (RFC 9111 §5.2) as a shared cache reads it: the response's directives and
//! the request's. Names are case-insensitive; a quoted value is taken unquoted; when a
//! directive is repeated the first occurrence counts (§4.2.1), and a `max-age` or `s-maxage`
//! that is not a number makes the response stale.

/// The response directives a shared cache acts on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponseControl {
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub no_store: bool,
    /// Unqualified or with field names: either way every use is revalidated.
    pub no_cache: bool,
    /// Unqualified or with field names: a shared cache stores neither.
    pub private: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub public: bool,
    pub immutable: bool,
    pub must_understand: bool,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
    /// Any directive was present.
    pub present: bool,
    /// Read from `CDN-Cache-Control`: `Expires` does not count.
    pub targeted: bool,
}

impl ResponseControl {
    pub fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> ResponseControl {
        let mut c = ResponseControl::default();
        for (name, value) in directives(values) {
            c.present = true;
            match &name.to_ascii_lowercase()[..] {
                b"max-age" => first(&mut c.max_age, seconds(value)),
                b"s-maxage" => first(&mut c.s_maxage, seconds(value)),
                b"no-store" => c.no_store = true,
                b"no-cache" => c.no_cache = true,
                b"private" => c.private = true,
                b"must-revalidate" => c.must_revalidate = true,
                b"proxy-revalidate" => c.proxy_revalidate = true,
                b"public" => c.public = true,
                b"immutable" => c.immutable = true,
                b"must-understand" => c.must_understand = true,
                b"stale-while-revalidate" => first(&mut c.stale_while_revalidate, seconds(value)),
                b"stale-if-error" => first(&mut c.stale_if_error, seconds(value)),
                _ => {}
            }
        }
        c
    }
}

/// The request directives a cache acts on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestControl {
    pub max_age: Option<u64>,
    /// `Some(None)`: `max-stale` without a value, any staleness.
    pub max_stale: Option<Option<u64>>,
    pub min_fresh: Option<u64>,
    pub no_cache: bool,
    pub no_store: bool,
    pub only_if_cached: bool,
}

impl RequestControl {
    /// From the request's `Cache-Control` lines; `Pragma: no-cache` counts as `no-cache`
    /// when there is no `Cache-Control` (§5.4).
    pub fn parse<'a>(
        values: impl Iterator<Item = &'a [u8]>,
        pragma: impl Iterator<Item = &'a [u8]>,
    ) -> RequestControl {
        let mut c = RequestControl::default();
        let mut present = false;
        for (name, value) in directives(values) {
            present = true;
            match &name.to_ascii_lowercase()[..] {
                b"max-age" => first(&mut c.max_age, seconds(value)),
                b"max-stale" if c.max_stale.is_none() => {
                    c.max_stale = Some(value.map(|_| seconds(value).unwrap_or(0)));
                }
                b"min-fresh" => first(&mut c.min_fresh, seconds(value)),
                b"no-cache" => c.no_cache = true,
                b"no-store" => c.no_store = true,
                b"only-if-cached" => c.only_if_cached = true,
                _ => {}
            }
        }
        if !present {
            c.no_cache = pragma
                .flat_map(|v| v.split(|&b| b == b','))
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"no-cache"));
        }
        c
    }

    /// Whether the request has anything for the cache to heed.
    pub fn is_plain(&self) -> bool {
        *self == RequestControl::default()
    }
}

fn first(slot: &mut Option<u64>, v: Option<u64>) {
    if slot.is_none() {
        *slot = v;
    }
}

/// The largest delta-seconds kept: 2^31, as §1.2.2 says for larger values.
const MAX_DELTA: u64 = 1 << 31;

/// A delta-seconds value; a missing or malformed one is 0 (stale), as a cache must not
/// trust it.
fn seconds(value: Option<&[u8]>) -> Option<u64> {
    let v = value.unwrap_or_default();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Some(0);
    }
    // Digits only: a parse failure is an overflow.
    Some(
        std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(MAX_DELTA, |n| n.min(MAX_DELTA)),
    )
}

/// The `name[=value]` pairs of every line, the value unquoted. Commas inside quotes do not
/// split.
fn directives<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> {
    values.flat_map(Split).filter_map(|item| {
        let item = item.trim_ascii();
        if item.is_empty() {
            return None;
        }
        match memchr::memchr(b'=', item) {
            None => Some((item, None)),
            Some(eq) => {
                let name = item[..eq].trim_ascii();
                let mut value = item[eq + 1..].trim_ascii();
                if value.len() >= 2 && value[0] == b'"' && value[value.len() - 1] == b'"' {
                    value = &value[1..value.len() - 1];
                }
                Some((name, Some(value)))
            }
        }
    })
}

/// Splits one field line at the commas outside quoted strings.
struct Split<'a>(&'a [u8]);

impl<'a> Iterator for Split<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.0.is_empty() {
            return None;
        }
        let mut quoted = false;
        let mut i = 0;
        while i < self.0.len() {
            match self.0[i] {
                b'"' => quoted = !quoted,
                b'\\' if quoted => i += 1,
                b',' if !quoted => break,
                _ => {}
            }
            i += 1;
        }
        let end = i.min(self.0.len());
        let item = &self.0[..end];
        self.0 = self.0.get(end + 1..).unwrap_or_default();
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(v: &str) -> ResponseControl {
        ResponseControl::parse(std::iter::once(v.as_bytes()))
    }

    #[test]
    fn response_directives() {
        let c = resp("public, Max-Age=60, s-maxage=\"30\", must-revalidate");
        assert_eq!(c.max_age, Some(60));
        assert_eq!(c.s_maxage, Some(30));
        assert!(c.public && c.must_revalidate && !c.no_store);
        // First occurrence counts; junk is stale.
        assert_eq!(resp("max-age=10, max-age=20").max_age, Some(10));
        assert_eq!(resp("max-age=ten").max_age, Some(0));
        assert_eq!(resp("max-age=-1").max_age, Some(0));
        assert_eq!(resp("max-age=99999999999999999999").max_age, Some(1 << 31));
        // A comma inside quotes is not a separator.
        let c = resp("private=\"a, b\", no-store");
        assert!(c.private && c.no_store);
        assert!(!resp("").present);
    }

    #[test]
    fn request_directives_and_pragma() {
        let c = RequestControl::parse(
            std::iter::once(&b"max-stale, min-fresh=5"[..]),
            std::iter::empty(),
        );
        assert_eq!(c.max_stale, Some(None));
        assert_eq!(c.min_fresh, Some(5));
        let p = RequestControl::parse(std::iter::empty(), std::iter::once(&b"no-cache"[..]));
        assert!(p.no_cache);
        let both = RequestControl::parse(
            std::iter::once(&b"max-age=5"[..]),
            std::iter::once(&b"no-cache"[..]),
        );
        assert!(!both.no_cache);
        assert!(RequestControl::default().is_plain());
    }
}
