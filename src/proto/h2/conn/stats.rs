//! What the connection counts for the metrics. The core reads no global: it adds up here
//! and the driver takes the counts after its turn ([`Connection::take_stats`]) and forwards
//! them (plain integers, no allocation but for a GOAWAY).

use super::Connection;
use crate::proto::h2::frame::Reason;

/// Slots of the reset counts: one per error code of RFC 9113 section 7 (0 to 0xd) and one
/// for any other code.
pub const RESET_CODES: usize = 15;

/// Counts since the driver last took them.
#[derive(Debug, Default)]
pub struct Stats {
    /// RST_STREAM frames we sent, by error code (`RESET_CODES - 1` for any code above).
    pub resets_sent: [u32; RESET_CODES],
    /// RST_STREAM frames the client sent, by error code.
    pub resets_received: [u32; RESET_CODES],
    /// GOAWAY frames sent or received, in order.
    pub goaways: Vec<GoAway>,
    /// Something was counted.
    any: bool,
}

/// One GOAWAY frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoAway {
    /// We sent it (else the client did).
    pub sent: bool,
    pub code: u32,
    /// Why, for a GOAWAY we sent; `"client"` for a received one.
    pub cause: &'static str,
}

impl Stats {
    /// Nothing was counted.
    pub fn is_empty(&self) -> bool {
        !self.any
    }

    pub(super) fn reset(&mut self, sent: bool, reason: Reason) {
        let code = (reason.0 as usize).min(RESET_CODES - 1);
        let counts = match sent {
            true => &mut self.resets_sent,
            false => &mut self.resets_received,
        };
        counts[code] += 1;
        self.any = true;
    }

    pub(super) fn goaway(&mut self, sent: bool, reason: Reason, cause: &'static str) {
        self.goaways.push(GoAway {
            sent,
            code: reason.0,
            cause,
        });
        self.any = true;
    }
}

impl Connection {
    /// The counts since the last call, for the driver to forward to the metrics; `None` when
    /// nothing was counted (the usual turn). Call after each turn and before parking.
    pub fn take_stats(&mut self) -> Option<Stats> {
        match self.stats.is_empty() {
            true => None,
            false => Some(std::mem::take(&mut self.stats)),
        }
    }
}
