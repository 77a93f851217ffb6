//! Flood budgets: resets and control frames per second, small WINDOW_UPDATEs per DATA frame.

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

    /// A small WINDOW_UPDATE (data dribble, CVE-2019-9511). A client that returns credit as
    /// it reads sends about one per DATA frame it got (stream and connection), however fast
    /// the transfer, so these are not counted per second: a client whose small increments
    /// outnumber our DATA frames many times over is making us cut frames to its increments.
    pub(super) fn spend_tiny_window_update(&mut self) -> Res {
        let d = &mut self.dribble;
        d.tiny_updates = d.tiny_updates.saturating_add(1);
        let allowed = u64::from(d.data_frames)
            .saturating_add(1)
            .saturating_mul(TINY_UPDATES_PER_DATA_FRAME);
        if u64::from(d.tiny_updates) > allowed {
            return Err(Fail::Connection {
                code: Reason::ENHANCE_YOUR_CALM,
                why: "too many small WINDOW_UPDATEs",
            });
        }
        Ok(())
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

/// Small WINDOW_UPDATEs allowed per DATA frame sent (and before the first): a reading client
/// sends two (stream and connection), a dribbling one sends many before we write again.
const TINY_UPDATES_PER_DATA_FRAME: u64 = 10;

/// Small WINDOW_UPDATEs received and DATA frames sent.
#[derive(Default)]
pub(super) struct Dribble {
    tiny_updates: u32,
    data_frames: u32,
}

impl Dribble {
    /// Counts `n` DATA frames written.
    #[inline(always)]
    pub(super) fn sent(&mut self, n: u32) {
        self.data_frames = self.data_frames.saturating_add(n);
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
