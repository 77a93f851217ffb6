//! Flood budgets: resets and control frames per second.

use super::{Connection, Fail, Res};
use crate::proto::h2::frame::Reason;
use std::time::Instant;

impl Connection {
    pub(super) fn spend_reset(&mut self, now: Instant) -> Res {
        if self.resets.take(now) {
            Ok(())
        } else {
            Err(Fail::Connection {
                code: Reason::ENHANCE_YOUR_CALM,
                why: "too many stream resets",
            })
        }
    }

    pub(super) fn spend_control(&mut self, now: Instant) -> Res {
        if self.control.take(now) {
            Ok(())
        } else {
            Err(Fail::Connection {
                code: Reason::ENHANCE_YOUR_CALM,
                why: "too many control frames",
            })
        }
    }
}

/// A token bucket: `rate` tokens a second, holding at most `rate`. Counted in
/// token-nanoseconds so frequent small refills are not lost to rounding.
pub(super) struct Budget {
    tokens: u64,
    /// Tokens a second; the bucket holds at most `rate * TOKEN`.
    rate: u64,
    last: Instant,
}

pub(super) const TOKEN: u64 = 1_000_000_000;

impl Budget {
    pub(super) fn new(rate: u32, now: Instant) -> Budget {
        let rate = u64::from(rate.max(1));
        Budget {
            tokens: rate * TOKEN,
            rate,
            last: now,
        }
    }

    pub(super) fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_nanos();
        let elapsed = u64::try_from(elapsed).unwrap_or(u64::MAX);
        self.last = now;
        self.tokens = self
            .tokens
            .saturating_add(elapsed.saturating_mul(self.rate))
            .min(self.rate * TOKEN);
        if self.tokens >= TOKEN {
            self.tokens -= TOKEN;
            true
        } else {
            false
        }
    }
}
