//! The rules of RFC 9111 over a response's head: whether a shared cache may store it (§3,
//! §3.5), how long it stays fresh (§4.2.1, the heuristic of §4.2.2), its age (§4.2.3), and
//! how a 304 freshens it (§3.2, §4.3.4). Times are seconds since the epoch; nothing here
//! reads the clock.

use super::control::{RequestControl, ResponseControl};
use bytes::Bytes;

/// Status codes a cache may give a heuristic lifetime (RFC 9110 §15.1).
const HEURISTIC: &[u16] = &[200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// Status codes this cache understands, for `must-understand` (§5.2.2.3).
const UNDERSTOOD: &[u16] = &[
    200, 203, 204, 300, 301, 302, 303, 307, 308, 400, 403, 404, 405, 410, 414, 500, 501, 502, 503,
    504,
];

/// The heuristic lifetime is this share of the time since Last-Modified (§4.2.2 suggests
/// 10%), at most a week.
const HEURISTIC_PERCENT: u64 = 10;
const HEURISTIC_MAX: u64 = 7 * 24 * 3600;

/// The first field of that name.
pub fn field<'a>(headers: &'a [(Bytes, Bytes)], name: &[u8]) -> Option<&'a Bytes> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// Every line of that name.
pub fn fields<'a>(
    headers: &'a [(Bytes, Bytes)],
    name: &'a [u8],
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| &v[..])
}

/// An HTTP-date as seconds since the epoch; `None` when it is not one.
pub fn http_date(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?.trim();
    match httpdate::parse_http_date(s) {
        Ok(t) => Some(
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        ),
        Err(_) => lenient_date(s),
    }
}

/// A date read a little leniently, as caches do, but never guessed at: the names of the
/// three forms of RFC 9110 §5.6.7 in any case, and asctime's weekday not checked against
/// the date. Other spacing, zones or punctuation stay invalid.
fn lenient_date(s: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let canon = canonical_case(s);
    if canon != s {
        if let Ok(t) = httpdate::parse_http_date(&canon) {
            return t
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs());
        }
    }
    // asctime: `Www Mmm dd hh:mm:ss yyyy`, the day padded with a space.
    let b = s.as_bytes();
    let shape = b.len() == 24
        && b[..3].iter().all(u8::is_ascii_alphabetic)
        && [3, 7, 10, 19].iter().all(|&i| b[i] == b' ')
        && b[13] == b':'
        && b[16] == b':';
    if !shape {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let t = s.get(r)?.trim_start();
        (!t.is_empty() && t.bytes().all(|c| c.is_ascii_digit())).then(|| t.parse().ok())?
    };
    let month = MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(s.get(4..7).unwrap_or_default()))?
        as u64
        + 1;
    let (day, h, m, sec, year) = (
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
        num(20..24)?,
    );
    if !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 || year < 1970 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86400 + h * 3600 + m * 60 + sec)
}

/// Weekday and month names capitalized (`THU` -> `Thu`), `GMT` upper case.
fn canonical_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word_start = true;
    for c in s.chars() {
        if c.is_ascii_alphabetic() {
            out.push(if word_start {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            });
            word_start = false;
        } else {
            out.push(c);
            word_start = true;
        }
    }
    out.replace("Gmt", "GMT")
}

/// Days since 1970-01-01 of a date in the Gregorian calendar (from 1970 on).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146097 + doe).saturating_sub(719468)
}

/// The directives this cache follows: `CDN-Cache-Control` (RFC 9213) when it has any,
/// in place of `Cache-Control` and `Expires`; else `Cache-Control`.
pub fn response_control(headers: &[(Bytes, Bytes)]) -> ResponseControl {
    let cdn = ResponseControl::parse(fields(headers, b"cdn-cache-control"));
    if cdn.present && fields(headers, b"cdn-cache-control").all(valid_dictionary) {
        return ResponseControl {
            targeted: true,
            ..cdn
        };
    }
    ResponseControl::parse(fields(headers, b"cache-control"))
}

/// Whether a `CDN-Cache-Control` line is a structured dictionary (RFC 8941) as RFC 9213
/// wants, with integer ages: keys are lowercase tokens, values integers or tokens. An
/// invalid one is ignored as a whole.
fn valid_dictionary(line: &[u8]) -> bool {
    line.split(|&b| b == b',').all(|member| {
        let member = member.trim_ascii();
        let (key, value) = match memchr::memchr(b'=', member) {
            Some(i) => (&member[..i], Some(&member[i + 1..])),
            None => (member, None),
        };
        let key_ok = key
            .first()
            .is_some_and(|c| c.is_ascii_lowercase() || *c == b'*')
            && key
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(c));
        let age = matches!(
            key,
            b"max-age" | b"s-maxage" | b"stale-while-revalidate" | b"stale-if-error"
        );
        let value_ok = match value {
            None => true,
            Some(v) if age => !v.is_empty() && v.iter().all(u8::is_ascii_digit),
            Some(v) => !v.is_empty() && !v.contains(&b' '),
        };
        key_ok && value_ok
    })
}

/// Why a response is not stored, for `Cache-Status`' `detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    NoStore,
    Private,
    Authorization,
    Status,
    VaryStar,
    NoLifetime,
    RequestNoStore,
}

impl NotStored {
    pub fn detail(self) -> &'static str {
        match self {
            NotStored::NoStore => "no-store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::Status => "status",
            NotStored::VaryStar => "vary-star",
            NotStored::NoLifetime => "no-lifetime",
            NotStored::RequestNoStore => "request-no-store",
        }
    }
}

/// Whether a shared cache may store the final response `status` with `headers` (`cc` their
/// Cache-Control) to a GET whose request carried `authorization` and `req` (§3).
pub fn storable(
    status: u16,
    headers: &[(Bytes, Bytes)],
    cc: &ResponseControl,
    req: &RequestControl,
    authorization: bool,
) -> Result<(), NotStored> {
    if req.no_store {
        return Err(NotStored::RequestNoStore);
    }
    // Partial content and 304 are not stored whole; 1xx never reach here.
    if status == 206 || status == 304 || status < 200 {
        return Err(NotStored::Status);
    }
    if cc.must_understand {
        if !UNDERSTOOD.contains(&status) {
            return Err(NotStored::Status);
        }
    } else if cc.no_store {
        return Err(NotStored::NoStore);
    }
    if cc.private {
        return Err(NotStored::Private);
    }
    if authorization && !(cc.public || cc.must_revalidate || cc.s_maxage.is_some()) {
        return Err(NotStored::Authorization);
    }
    if fields(headers, b"vary")
        .flat_map(|v| v.split(|&b| b == b','))
        .any(|t| t.trim_ascii() == b"*")
    {
        return Err(NotStored::VaryStar);
    }
    let explicit =
        cc.max_age.is_some() || cc.s_maxage.is_some() || field(headers, b"expires").is_some();
    let validators =
        field(headers, b"etag").is_some() || field(headers, b"last-modified").is_some();
    // Stored but never fresh is still worth it with a validator to revalidate with.
    let may = explicit || cc.public || HEURISTIC.contains(&status) || cc.no_cache;
    if may && (explicit || validators || heuristic_lifetime(headers, 0) > 0) {
        return Ok(());
    }
    Err(NotStored::NoLifetime)
}

/// The freshness lifetime (§4.2.1): `s-maxage`, `max-age`, `Expires` minus `Date` (an
/// invalid Expires is already expired), else the heuristic. `response_time` stands in for a
/// missing Date.
pub fn lifetime(
    status: u16,
    headers: &[(Bytes, Bytes)],
    cc: &ResponseControl,
    response_time: u64,
) -> u64 {
    if let Some(s) = cc.s_maxage {
        return s;
    }
    if let Some(m) = cc.max_age {
        return m;
    }
    if let Some(expires) = field(headers, b"expires").filter(|_| !cc.targeted) {
        if fields(headers, b"expires").nth(1).is_some() {
            // Two Expires lines: which one holds is not known, so neither does.
            return 0;
        }
        let date = field(headers, b"date")
            .and_then(|d| http_date(d))
            .unwrap_or(response_time);
        return http_date(expires).map_or(0, |e| e.saturating_sub(date));
    }
    if cc.no_cache || !(cc.public || HEURISTIC.contains(&status)) {
        return 0;
    }
    heuristic_lifetime(headers, response_time)
}

fn heuristic_lifetime(headers: &[(Bytes, Bytes)], response_time: u64) -> u64 {
    let Some(modified) = field(headers, b"last-modified").and_then(|v| http_date(v)) else {
        return 0;
    };
    let date = field(headers, b"date")
        .and_then(|d| http_date(d))
        .unwrap_or(response_time);
    let since = if date == 0 {
        u64::MAX
    } else {
        date.saturating_sub(modified)
    };
    (since / 100 * HEURISTIC_PERCENT).min(HEURISTIC_MAX)
}

/// When a response was received and what it said of its age: what its current age is
/// computed from (§4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub request_time: u64,
    pub response_time: u64,
    /// `corrected_initial_age`.
    pub initial_age: u64,
}

impl Timing {
    pub fn new(headers: &[(Bytes, Bytes)], request_time: u64, response_time: u64) -> Timing {
        // A list (`7200, 0`) counts its first member, as a recipient of a repeated singleton
        // field takes the first.
        let age_value = field(headers, b"age")
            .and_then(|v| v.split(|&b| b == b',').next())
            .and_then(|v| {
                std::str::from_utf8(v.trim_ascii())
                    .ok()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        let date = field(headers, b"date").and_then(|d| http_date(d));
        let apparent_age = date.map_or(0, |d| response_time.saturating_sub(d));
        let response_delay = response_time.saturating_sub(request_time);
        Timing {
            request_time,
            response_time,
            initial_age: apparent_age.max(age_value + response_delay),
        }
    }

    /// `current_age` at `now`.
    pub fn age(&self, now: u64) -> u64 {
        self.initial_age + now.saturating_sub(self.response_time)
    }
}

/// What the request's directives allow of a stored response whose age is `age` and
/// lifetime `lifetime` (§5.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Fresh enough: answer from the store.
    Fresh,
    /// Stale (or the request wants it checked): revalidate before use.
    Revalidate,
}

pub fn usable(age: u64, lifetime: u64, cc: &ResponseControl, req: &RequestControl) -> Use {
    if cc.no_cache || req.no_cache {
        return Use::Revalidate;
    }
    if req.max_age.is_some_and(|m| age > m) {
        return Use::Revalidate;
    }
    let remaining = lifetime.saturating_sub(age);
    if lifetime > age && req.min_fresh.is_none_or(|m| remaining >= m) {
        return Use::Fresh;
    }
    // Stale: only a request that accepts it, and never against must-revalidate (§4.2.4).
    let stale_by = age.saturating_sub(lifetime);
    let strict = cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some();
    match req.max_stale {
        Some(limit) if !strict && lifetime <= age && limit.is_none_or(|l| stale_by <= l) => {
            Use::Fresh
        }
        _ => Use::Revalidate,
    }
}

/// Whether a stale entry may be answered while it is refreshed behind the answer: within
/// its `stale-while-revalidate` window and without `must-revalidate` and the like (§4.2.4).
pub fn stale_while_revalidate(age: u64, lifetime: u64, cc: &ResponseControl) -> bool {
    let strict = cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some() || cc.no_cache;
    !strict
        && cc
            .stale_while_revalidate
            .is_some_and(|w| age.saturating_sub(lifetime) <= w)
}

/// Whether a stale entry may be answered because the backend failed: within its
/// `stale-if-error` window, without `must-revalidate` and the like.
pub fn stale_if_error(age: u64, lifetime: u64, cc: &ResponseControl) -> bool {
    let strict = cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some() || cc.no_cache;
    !strict
        && cc
            .stale_if_error
            .is_some_and(|w| age.saturating_sub(lifetime) <= w)
}

/// Fields a 304 does not replace in the stored head (§3.2): the framing and those only the
/// stored body can say.
fn kept_on_update(name: &[u8]) -> bool {
    [
        &b"content-length"[..],
        b"content-encoding",
        b"content-range",
        b"transfer-encoding",
        b"content-type",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// The stored fields freshened by a 304's (§3.2, §4.3.4): each field the 304 carries
/// replaces every stored line of its name.
pub fn freshen(stored: &[(Bytes, Bytes)], update: &[(Bytes, Bytes)]) -> Vec<(Bytes, Bytes)> {
    let replaced = |name: &Bytes| {
        !kept_on_update(name) && update.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    let mut out: Vec<(Bytes, Bytes)> = stored
        .iter()
        .filter(|(n, _)| !replaced(n))
        .cloned()
        .collect();
    out.extend(update.iter().filter(|(n, _)| !kept_on_update(n)).cloned());
    out
}

/// Whether a 304's validators say it is about the stored response (§4.3.4): its strong
/// ETag is the stored one, or, without ETags, Last-Modified does not contradict.
pub fn validates(stored: &[(Bytes, Bytes)], update: &[(Bytes, Bytes)]) -> bool {
    match (field(update, b"etag"), field(stored, b"etag")) {
        (Some(new), Some(old)) => weak_eq(new, old),
        (Some(_), None) => false,
        _ => match (
            field(update, b"last-modified"),
            field(stored, b"last-modified"),
        ) {
            (Some(new), Some(old)) => new == old,
            _ => true,
        },
    }
}

/// Entity tags compared weakly (`W/"x"` equals `"x"`).
pub fn weak_eq(a: &[u8], b: &[u8]) -> bool {
    let strip = |t: &[u8]| -> Vec<u8> {
        t.trim_ascii()
            .strip_prefix(b"W/")
            .unwrap_or(t.trim_ascii())
            .to_vec()
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(list: &[(&str, &str)]) -> Vec<(Bytes, Bytes)> {
        list.iter()
            .map(|(n, v)| {
                (
                    Bytes::copy_from_slice(n.as_bytes()),
                    Bytes::copy_from_slice(v.as_bytes()),
                )
            })
            .collect()
    }

    fn cc(v: &str) -> ResponseControl {
        ResponseControl::parse(std::iter::once(v.as_bytes()))
    }

    const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const DATE_S: u64 = 784111777;

    #[test]
    fn dates_read_leniently() {
        assert_eq!(http_date(DATE.as_bytes()), Some(DATE_S));
        assert_eq!(http_date(b"SUN, 06 NOV 1994 08:49:37 gmt"), Some(DATE_S));
        assert_eq!(http_date(b"Sun Nov  6 08:49:37 1994"), Some(DATE_S));
        assert_eq!(http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(DATE_S));
        assert_eq!(http_date(b"Sun, 06 Nov 1994 08:49:37 UTC"), None);
        assert_eq!(http_date(b"Sun, 06-Nov-1994 08:49:37 GMT"), None);
        assert_eq!(http_date(b"Sun, 06 Nov 1994 8:49:37 GMT"), None);
        assert_eq!(http_date(b"Sun 06 Nov 1994 08:49:37 GMT"), None);
        assert_eq!(http_date(b"Thu Aug  8 02:01:18 2050"), Some(2543536878));
        assert_eq!(http_date(b"0"), None);
        assert_eq!(http_date(b"tomorrow"), None);
    }

    #[test]
    fn cdn_cache_control_takes_over() {
        let both = h(&[
            ("Cache-Control", "no-store"),
            ("CDN-Cache-Control", "max-age=60"),
        ]);
        let c = response_control(&both);
        assert!(c.targeted && !c.no_store);
        for bad in ["max-age=60, &&&", "max-age=\"60\""] {
            let h = h(&[("Cache-Control", "no-store"), ("CDN-Cache-Control", bad)]);
            assert!(!response_control(&h).targeted, "{bad}");
        }
        assert_eq!(c.max_age, Some(60));
        let expires = h(&[
            ("Date", DATE),
            ("Expires", "Sun, 06 Nov 1994 09:49:37 GMT"),
            ("CDN-Cache-Control", "max-age=0"),
        ]);
        assert_eq!(lifetime(200, &expires, &response_control(&expires), 0), 0);
    }

    #[test]
    fn what_is_stored() {
        let none = RequestControl::default();
        let plain = h(&[("Date", DATE)]);
        assert_eq!(
            storable(200, &plain, &cc("max-age=5"), &none, false),
            Ok(())
        );
        assert_eq!(
            storable(200, &plain, &cc("no-store"), &none, false),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            storable(200, &plain, &cc("private, max-age=5"), &none, false),
            Err(NotStored::Private)
        );
        assert_eq!(
            storable(200, &plain, &cc("max-age=5"), &none, true),
            Err(NotStored::Authorization)
        );
        assert_eq!(
            storable(200, &plain, &cc("max-age=5, public"), &none, true),
            Ok(())
        );
        assert_eq!(
            storable(200, &plain, &cc(""), &none, false),
            Err(NotStored::NoLifetime)
        );
        assert_eq!(
            storable(500, &plain, &cc(""), &none, false),
            Err(NotStored::NoLifetime)
        );
        let star = h(&[("Vary", "a, *")]);
        assert_eq!(
            storable(200, &star, &cc("max-age=5"), &none, false),
            Err(NotStored::VaryStar)
        );
        // must-understand on an understood status overrides no-store.
        assert_eq!(
            storable(
                200,
                &plain,
                &cc("no-store, must-understand, max-age=5"),
                &none,
                false
            ),
            Ok(())
        );
    }

    #[test]
    fn lifetimes_and_age() {
        let with_expires = h(&[("Date", DATE), ("Expires", "Sun, 06 Nov 1994 08:50:37 GMT")]);
        assert_eq!(lifetime(200, &with_expires, &cc(""), 0), 60);
        assert_eq!(lifetime(200, &with_expires, &cc("max-age=5"), 0), 5);
        assert_eq!(
            lifetime(200, &with_expires, &cc("max-age=5, s-maxage=7"), 0),
            7
        );
        let bad = h(&[("Date", DATE), ("Expires", "0")]);
        assert_eq!(lifetime(200, &bad, &cc(""), 0), 0);
        let lm = h(&[
            ("Date", DATE),
            ("Last-Modified", "Sun, 06 Nov 1994 06:49:37 GMT"),
        ]);
        assert_eq!(lifetime(200, &lm, &cc(""), 0), 720);
        assert_eq!(lifetime(500, &lm, &cc(""), 0), 0);
        let t = Timing::new(&h(&[("Date", DATE), ("Age", "30")]), DATE_S + 2, DATE_S + 3);
        assert_eq!(t.initial_age, 31);
        assert_eq!(t.age(DATE_S + 13), 41);
    }

    #[test]
    fn request_directives_decide_use() {
        let none = RequestControl::default();
        assert_eq!(usable(5, 10, &cc(""), &none), Use::Fresh);
        assert_eq!(usable(10, 10, &cc(""), &none), Use::Revalidate);
        let stale_ok = RequestControl {
            max_stale: Some(None),
            ..none
        };
        assert_eq!(usable(20, 10, &cc(""), &stale_ok), Use::Fresh);
        assert_eq!(
            usable(20, 10, &cc("must-revalidate"), &stale_ok),
            Use::Revalidate
        );
        let min_fresh = RequestControl {
            min_fresh: Some(6),
            ..none
        };
        assert_eq!(usable(5, 10, &cc(""), &min_fresh), Use::Revalidate);
        assert_eq!(usable(1, 10, &cc("no-cache"), &none), Use::Revalidate);
    }

    #[test]
    fn a_304_freshens_the_stored_head() {
        let stored = h(&[("ETag", "\"a\""), ("X-A", "1"), ("Content-Length", "3")]);
        let update = h(&[("ETag", "W/\"a\""), ("X-A", "2"), ("Content-Length", "0")]);
        assert!(validates(&stored, &update));
        let fresh = freshen(&stored, &update);
        assert_eq!(field(&fresh, b"x-a").map(|v| &v[..]), Some(&b"2"[..]));
        assert_eq!(
            field(&fresh, b"content-length").map(|v| &v[..]),
            Some(&b"3"[..])
        );
        assert!(!validates(&stored, &h(&[("ETag", "\"b\"")])));
    }
}
