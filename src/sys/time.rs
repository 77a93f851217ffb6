//! Clocks, read without the `Duration` normalisation of `SystemTime` and `Instant`.

/// The time of `clock` (clock_gettime(2)): one of the clocks every Linux has
/// (CLOCK_REALTIME, CLOCK_MONOTONIC and their coarse forms), read on every request. Zero for
/// a clock the kernel does not know.
#[inline]
pub fn clock(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; an unknown clock is an error that leaves
    // it as it is.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_reads_the_clocks() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let real = clock(libc::CLOCK_REALTIME);
        assert!(
            real.tv_sec.abs_diff(now as libc::time_t) < 2,
            "{}",
            real.tv_sec
        );
        let coarse = clock(libc::CLOCK_REALTIME_COARSE);
        assert!(
            coarse.tv_sec.abs_diff(now as libc::time_t) < 2,
            "{}",
            coarse.tv_sec
        );
        let a = clock(libc::CLOCK_MONOTONIC);
        let b = clock(libc::CLOCK_MONOTONIC);
        assert!((b.tv_sec, b.tv_nsec) >= (a.tv_sec, a.tv_nsec));
        assert!(a.tv_sec > 0 || a.tv_nsec > 0);
        let unknown = clock(-1000);
        assert_eq!((unknown.tv_sec, unknown.tv_nsec), (0, 0));
    }
}
