//! TLS 1.3 early data (0-RTT) over TCP (`listen.ssl.early-data`): handshakes whose early
//! data was accepted, and those that offered it and were refused (a ticket used already or
//! not this instance's, a full handshake). Process-wide atomics, bumped once per handshake
//! on a listener with early data on, never on a request's path. HTTP/3's are in
//! `quic_admission`.

use std::sync::atomic::{AtomicU64, Ordering};

static ACCEPTED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static HELD: AtomicU64 = AtomicU64::new(0);
static TOO_EARLY_RETRIED: AtomicU64 = AtomicU64::new(0);

/// A snapshot of the counters, for the status and metrics pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsEarlyData {
    /// TLS handshakes whose early data was accepted.
    pub accepted: u64,
    /// TLS handshakes that offered early data we did not accept: the client sends it again
    /// once the handshake completes.
    pub refused: u64,
    /// Requests that came in early data with a method not safe to answer early, held until
    /// the handshake completed.
    pub held: u64,
    /// Early requests answered `425 Too Early` and routed again after the handshake.
    pub too_early_retried: u64,
}

/// The counters now.
pub fn snapshot() -> TlsEarlyData {
    TlsEarlyData {
        accepted: ACCEPTED.load(Ordering::Relaxed),
        refused: REFUSED.load(Ordering::Relaxed),
        held: HELD.load(Ordering::Relaxed),
        too_early_retried: TOO_EARLY_RETRIED.load(Ordering::Relaxed),
    }
}

/// A handshake completed: whether the client offered early data and whether we took it.
pub fn handshake(offered: bool, accepted: bool) {
    if accepted {
        ACCEPTED.fetch_add(1, Ordering::Relaxed);
    } else if offered {
        REFUSED.fetch_add(1, Ordering::Relaxed);
    }
}

/// An early request waits for the handshake.
pub fn request_held() {
    HELD.fetch_add(1, Ordering::Relaxed);
}

/// An early request answered 425 is routed again.
pub fn too_early_retried() {
    TOO_EARLY_RETRIED.fetch_add(1, Ordering::Relaxed);
}
