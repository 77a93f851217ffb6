//! The worker's clock: the readings of the time that answers and their bookkeeping use.
//!
//! - the wall clock's second and the Date field for it ([`Date`], [`with_date`]), formatted
//!   at most once a second per thread;
//! - the coarse monotonic clock ([`coarse_ns`]): the open-file cache's, the lane's, the
//!   HTTP/1.1 answer memo's and the proxy's back-off after failures;
//! - the precise monotonic clock ([`monotonic_ns`]): the metrics' durations;
//! - [`BatchClock`]: the coarse clocks read once for a batch of work.
//!
//! The coarse clocks are the kernel's tick, read without the time-stamp counter, which
//! under a hypervisor costs more than the rest of a repeated answer. Timers and deadlines
//! stay on `Instant` (tokio's), and the access log's received time on `SystemTime`: they
//! need no more than one reading per request, and the log wants sub-second precision.

use std::cell::{Cell, RefCell};
use std::time::{Duration, UNIX_EPOCH};

/// The length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const DATE_LEN: usize = 29;

/// The Date field of one wall-clock second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Date {
    /// Whole seconds since the epoch.
    pub second: u64,
    /// `second` as an IMF-fixdate.
    pub text: [u8; DATE_LEN],
}

impl Date {
    /// The Date of `second` (since the epoch), formatted anew.
    pub fn at(second: u64) -> Date {
        let mut date = UNSET;
        date.set(second);
        date
    }

    fn set(&mut self, second: u64) {
        let s = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
        // httpdate always yields 29 ASCII bytes for dates after 1970.
        if s.len() == DATE_LEN {
            self.text.copy_from_slice(s.as_bytes());
        }
        self.second = second;
    }
}

/// No second yet: the first reading formats one.
const UNSET: Date = Date {
    second: u64::MAX,
    text: [b' '; DATE_LEN],
};

thread_local! {
    // Per worker thread: the Date of the last second an answer was dated in.
    static DATE: RefCell<Date> = const { RefCell::new(UNSET) };
}

/// Calls `f` with the Date of now. `f` must not read the Date again.
#[inline]
pub fn with_date<R>(f: impl FnOnce(&Date) -> R) -> R {
    with_date_at(wall_second(), f)
}

/// Calls `f` with the Date of `second` (since the epoch), formatted once per second.
/// `f` must not read the Date again.
#[inline]
pub fn with_date_at<R>(second: u64, f: impl FnOnce(&Date) -> R) -> R {
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.second != second {
            d.set(second);
        }
        f(&d)
    })
}

/// Calls `f` with the current date as an IMF-fixdate.
pub fn with_now<R>(f: impl FnOnce(&[u8; DATE_LEN]) -> R) -> R {
    with_date(|d| f(&d.text))
}

/// Calls `f` with the IMF-fixdate of `second` (since the epoch), formatted once per second.
pub fn with_second<R>(second: u64, f: impl FnOnce(&[u8; DATE_LEN]) -> R) -> R {
    with_date_at(second, |d| f(&d.text))
}

/// The coarse clocks as one batch of work sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coarse {
    /// [`coarse_ns`].
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
            monotonic_ns: coarse_ns(),
            unix_second: wall_second(),
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
pub fn wall_second() -> u64 {
    let ts = read_clock(libc::CLOCK_REALTIME_COARSE);
    // A clock before 1970 says 1970, as `SystemTime` minus the epoch did.
    u64::try_from(ts.tv_sec).unwrap_or(0)
}

/// [`wall_second`], and when (on [`coarse_ns`]) that second ends: what is counted in whole
/// seconds of it holds until then.
#[inline]
pub fn wall_second_and_end() -> (u64, u64) {
    let wall = read_clock(libc::CLOCK_REALTIME_COARSE);
    let second = u64::try_from(wall.tv_sec).unwrap_or(0);
    let left = 1_000_000_000u64.saturating_sub(u64::try_from(wall.tv_nsec).unwrap_or(0));
    (second, coarse_ns().saturating_add(left))
}

/// The coarse monotonic clock in nanoseconds: the open-file cache's clock (the kernel's tick,
/// read without the time-stamp counter).
#[inline]
pub fn coarse_ns() -> u64 {
    let ts = read_clock(libc::CLOCK_MONOTONIC_COARSE);
    // The monotonic clock starts at boot: never negative.
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Nanoseconds on the precise monotonic clock. `Instant` would do, but its subtraction
/// normalises a `Duration` (about 40 instructions, as much as the rest of a request's
/// counting): a plain integer is subtracted in one.
#[inline]
pub fn monotonic_ns() -> u64 {
    let ts = read_clock(libc::CLOCK_MONOTONIC);
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// One of the clocks every Linux has (CLOCK_REALTIME, CLOCK_MONOTONIC and their coarse
/// forms), read without the `Duration` normalisation of `SystemTime` and `Instant`.
#[inline]
fn read_clock(clock: libc::clockid_t) -> libc::timespec {
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
    fn a_date_is_its_second() {
        let d = super::Date::at(784_111_777);
        assert_eq!(&d.text, b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(d.second, 784_111_777);
        assert_eq!(super::with_date_at(784_111_777, |c| *c), d);
        let next = super::with_date_at(784_111_778, |c| *c);
        assert_eq!(&next.text, b"Sun, 06 Nov 1994 08:49:38 GMT");
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
