//! A per-thread cached `Date` header value, formatted at most once a second.

use std::cell::{Cell, RefCell};
use std::time::{Duration, UNIX_EPOCH};

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
    let second = unix_second();
    with_second(second, |text| f(second, text))
}

/// Calls `f` with the IMF-fixdate of `second` (since the epoch), formatted once per second.
pub fn with_second<R>(second: u64, f: impl FnOnce(&[u8; DATE_LEN]) -> R) -> R {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.second != second {
            let s = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
            // httpdate always yields 29 ASCII bytes for dates after 1970.
            if s.len() == DATE_LEN {
                c.text.copy_from_slice(s.as_bytes());
            }
            c.second = second;
        }
        f(&c.text)
    })
}

/// The coarse clocks as one batch of work sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coarse {
    /// [`crate::http::response::coarse_clock_ns`].
    pub monotonic_ns: u64,
    /// Whole seconds since the epoch, as the Date field says them.
    pub unix_second: u64,
}

/// The coarse clocks, read at most once for a batch of work much shorter than their tick
/// (the lane's answers to one readiness batch): each read touches the kernel's time page,
/// which the batch's system calls have pushed out of the cache, and a batch is dated no
/// later than a coarse clock would date it anyway.
#[derive(Debug, Default)]
pub struct BatchClock(Cell<Option<Coarse>>);

impl BatchClock {
    /// A batch that sees the clocks at `now`.
    #[cfg(test)]
    pub fn at(now: Coarse) -> BatchClock {
        BatchClock(Cell::new(Some(now)))
    }

    /// The clocks as read at this batch's first call.
    #[inline]
    pub fn now(&self) -> Coarse {
        if let Some(c) = self.0.get() {
            return c;
        }
        let c = Coarse {
            monotonic_ns: crate::http::response::coarse_clock_ns(),
            unix_second: unix_second(),
        };
        self.0.set(Some(c));
        c
    }
}

/// Whole seconds since the epoch. Read directly: `SystemTime` minus the epoch normalises a
/// `Duration` first, which costs as much as the rest of the Date field. The coarse clock (the
/// kernel's tick, as file times are stamped) is read without the time-stamp counter, which
/// under a hypervisor costs more than the rest of a repeated answer; a second seen a tick
/// late is still the second of the answer.
#[inline]
fn unix_second() -> u64 {
    let ts = read_clock(libc::CLOCK_REALTIME_COARSE);
    // A clock before 1970 says 1970, as `SystemTime` minus the epoch did.
    u64::try_from(ts.tv_sec).unwrap_or(0)
}

/// One of the clocks every Linux has (CLOCK_REALTIME, CLOCK_MONOTONIC and their coarse
/// forms), read without the `Duration` normalisation of `SystemTime` and `Instant`.
#[inline]
pub(crate) fn read_clock(clock: libc::clockid_t) -> libc::timespec {
    crate::sys::time::clock(clock)
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_an_imf_fixdate() {
        let d = super::with_now(|d| String::from_utf8(d.to_vec()).unwrap());
        assert!(d.ends_with(" GMT"), "{d}");
        let parsed = httpdate::parse_http_date(&d).unwrap();
        let off = std::time::SystemTime::now()
            .duration_since(parsed)
            .unwrap_or_default();
        assert!(off < std::time::Duration::from_secs(2), "{d}");
    }

    #[test]
    fn a_batch_reads_the_clocks_once() {
        let clock = super::BatchClock::default();
        let first = clock.now();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(clock.now(), first);
        let later = super::BatchClock::default().now();
        assert!(
            later.monotonic_ns > first.monotonic_ns,
            "{later:?} {first:?}"
        );
        let text = super::with_second(first.unix_second, |t| *t);
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&text).unwrap()).unwrap();
        let back = parsed
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(back, first.unix_second);
    }
}
