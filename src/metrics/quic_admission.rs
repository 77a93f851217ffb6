//! What the QUIC endpoints decided about new connections and early data: 0-RTT accepted or
//! refused, requests that waited for the handshake or were retried after a backend's
//! `425 Too Early`, Retry packets sent, the handshakes under way and begun this second (what
//! `retry: auto` watches), handshakes dropped past `max-initial-handshake-packets`, and the
//! datagrams passed over a binary upgrade's link. Process-wide atomics, counted whether or not
//! metrics are on: each is bumped once per connection or per early request, never on a
//! request's ordinary path (the upgrade link's, per datagram, only while an upgrade drains).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

static ZERO_RTT_ACCEPTED: AtomicU64 = AtomicU64::new(0);
static ZERO_RTT_REFUSED: AtomicU64 = AtomicU64::new(0);
static EARLY_HELD: AtomicU64 = AtomicU64::new(0);
static TOO_EARLY_RETRIED: AtomicU64 = AtomicU64::new(0);
static RETRIES_SENT: AtomicU64 = AtomicU64::new(0);
static HANDSHAKING: AtomicUsize = AtomicUsize::new(0);
static HANDSHAKE_PACKETS_EXCEEDED: AtomicU64 = AtomicU64::new(0);
static UPGRADE_SENT: AtomicU64 = AtomicU64::new(0);
static UPGRADE_RECEIVED: AtomicU64 = AtomicU64::new(0);
/// The second (since `EPOCH`) the handshakes of `BEGUN` began in.
static BEGUN_SECOND: AtomicU64 = AtomicU64::new(0);
static BEGUN: AtomicU32 = AtomicU32::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

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
    /// Connections dropped for sending more than `max-initial-handshake-packets` packets
    /// before their handshake completed.
    pub handshake_packets_exceeded: u64,
    /// Datagrams of the other process's connections passed to it over a binary upgrade's
    /// link, and those it passed to us.
    pub upgrade_sent: u64,
    pub upgrade_received: u64,
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
        handshake_packets_exceeded: HANDSHAKE_PACKETS_EXCEEDED.load(Ordering::Relaxed),
        upgrade_sent: UPGRADE_SENT.load(Ordering::Relaxed),
        upgrade_received: UPGRADE_RECEIVED.load(Ordering::Relaxed),
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

/// A handshake began at `now`: counted in its second (`retry-rate`).
pub fn handshake_begun(now: Instant) {
    let second = second_of(now);
    if BEGUN_SECOND.swap(second, Ordering::Relaxed) != second {
        // The first of a new second (two workers may both see it: one count may be lost).
        BEGUN.store(1, Ordering::Relaxed);
    } else {
        BEGUN.fetch_add(1, Ordering::Relaxed);
    }
}

/// Handshakes begun in the second of `now`, across every QUIC listener of the process.
pub fn handshakes_begun_this_second(now: Instant) -> u32 {
    if BEGUN_SECOND.load(Ordering::Relaxed) == second_of(now) {
        BEGUN.load(Ordering::Relaxed)
    } else {
        0
    }
}

fn second_of(now: Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(|| now);
    now.saturating_duration_since(epoch).as_secs()
}

/// A connection was dropped past `max-initial-handshake-packets`.
pub fn handshake_packets_exceeded() {
    HANDSHAKE_PACKETS_EXCEEDED.fetch_add(1, Ordering::Relaxed);
}

/// A datagram went to the other process over the upgrade's link.
pub fn upgrade_sent() {
    UPGRADE_SENT.fetch_add(1, Ordering::Relaxed);
}

/// A datagram came from the other process over the upgrade's link, for one of our endpoints.
pub fn upgrade_received() {
    UPGRADE_RECEIVED.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn handshakes_are_counted_in_their_second() {
        let t = Instant::now();
        let _ = second_of(t);
        let later = t + Duration::from_secs(5);
        let before = handshakes_begun_this_second(later);
        assert_eq!(before, 0);
        handshake_begun(later);
        handshake_begun(later + Duration::from_millis(10));
        assert_eq!(handshakes_begun_this_second(later), 2);
        assert_eq!(
            handshakes_begun_this_second(later + Duration::from_secs(1)),
            0
        );
        handshake_begun(later + Duration::from_secs(1));
        assert_eq!(
            handshakes_begun_this_second(later + Duration::from_secs(1)),
            1
        );
    }
}
