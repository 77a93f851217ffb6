//! What the QUIC endpoints decided about new connections and early data: 0-RTT accepted or
//! refused, requests that waited for the handshake or were retried after a backend's
//! `425 Too Early`, Retry packets sent and the handshakes under way (what `retry: auto`
//! watches). Process-wide atomics, counted whether or not metrics are on: each is bumped
//! once per connection or per early request, never on a request's ordinary path.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

static ZERO_RTT_ACCEPTED: AtomicU64 = AtomicU64::new(0);
static ZERO_RTT_REFUSED: AtomicU64 = AtomicU64::new(0);
static EARLY_HELD: AtomicU64 = AtomicU64::new(0);
static TOO_EARLY_RETRIED: AtomicU64 = AtomicU64::new(0);
static RETRIES_SENT: AtomicU64 = AtomicU64::new(0);
static HANDSHAKING: AtomicUsize = AtomicUsize::new(0);

/// A snapshot of the counters, for the status and metrics pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuicAdmission {
    /// Connections whose 0-RTT data was accepted.
    pub zero_rtt_accepted: u64,
    /// Connections that sent 0-RTT packets we did not accept (early data off, a ticket not
    /// ours or used already, a full handshake): the client sends them again in 1-RTT.
    pub zero_rtt_refused: u64,
    /// Requests that came in early data with a method not in `http3-0rtt-methods`, held
    /// until the handshake completed.
    pub early_requests_held: u64,
    /// Early requests a handler answered `425 Too Early`, routed again after the handshake.
    pub too_early_retried: u64,
    /// Retry packets sent to validate a client's address.
    pub retries_sent: u64,
    /// QUIC handshakes under way now (connections whose address is not validated yet).
    pub handshaking: u64,
}

/// The counters now.
pub fn snapshot() -> QuicAdmission {
    QuicAdmission {
        zero_rtt_accepted: ZERO_RTT_ACCEPTED.load(Ordering::Relaxed),
        zero_rtt_refused: ZERO_RTT_REFUSED.load(Ordering::Relaxed),
        early_requests_held: EARLY_HELD.load(Ordering::Relaxed),
        too_early_retried: TOO_EARLY_RETRIED.load(Ordering::Relaxed),
        retries_sent: RETRIES_SENT.load(Ordering::Relaxed),
        handshaking: HANDSHAKING.load(Ordering::Relaxed) as u64,
    }
}

/// A handshake completed: whether the client sent 0-RTT packets and whether we took them.
pub fn zero_rtt(sent: bool, accepted: bool) {
    if accepted {
        ZERO_RTT_ACCEPTED.fetch_add(1, Ordering::Relaxed);
    } else if sent {
        ZERO_RTT_REFUSED.fetch_add(1, Ordering::Relaxed);
    }
}

/// An early request waits for the handshake.
pub fn early_request_held() {
    EARLY_HELD.fetch_add(1, Ordering::Relaxed);
}

/// An early request answered 425 is routed again.
pub fn too_early_retried() {
    TOO_EARLY_RETRIED.fetch_add(1, Ordering::Relaxed);
}

/// A Retry packet went out.
pub fn retry_sent() {
    RETRIES_SENT.fetch_add(1, Ordering::Relaxed);
}

/// A handshake started (`true`) or ended, completed or not (`false`).
pub fn handshaking(started: bool) {
    if started {
        HANDSHAKING.fetch_add(1, Ordering::Relaxed);
    } else {
        HANDSHAKING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Handshakes under way now, across every QUIC listener of the process.
pub fn handshakes_under_way() -> usize {
    HANDSHAKING.load(Ordering::Relaxed)
}
