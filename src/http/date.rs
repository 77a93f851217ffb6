//! A per-thread cached `Date` header value, formatted at most once a second.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// The length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const DATE_LEN: usize = 29;

struct Cached {
    second: u64,
    text: [u8; DATE_LEN],
}

thread_local! {
    static CACHE: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, text: [b' '; DATE_LEN] }) };
}

/// Calls `f` with the current date as an IMF-fixdate.
pub fn with_now<R>(f: impl FnOnce(&[u8; DATE_LEN]) -> R) -> R {
    with_now_second(|_, text| f(text))
}

/// Calls `f` with the current second since the epoch and the date as an IMF-fixdate: a copy
/// of the text is current as long as the second is the same.
pub fn with_now_second<R>(f: impl FnOnce(u64, &[u8; DATE_LEN]) -> R) -> R {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.second != second {
            let s = httpdate::fmt_http_date(now);
            // httpdate always yields 29 ASCII bytes for dates after 1970.
            if s.len() == DATE_LEN {
                c.text.copy_from_slice(s.as_bytes());
            }
            c.second = second;
        }
        f(second, &c.text)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_an_imf_fixdate() {
        let d = super::with_now(|d| String::from_utf8(d.to_vec()).unwrap());
        assert!(d.ends_with(" GMT"), "{d}");
        assert!(httpdate::parse_http_date(&d).is_ok());
    }
}
