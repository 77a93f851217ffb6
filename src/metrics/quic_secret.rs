//! Whether this process failed to take the QUIC secret handed over by the process that
//! started it (a binary upgrade, `server/quic/secret.rs`): then it made a fresh one, and the
//! old process's clients get stateless resets they do not recognise. Once per process.

use std::sync::atomic::{AtomicU64, Ordering};

static FAILED: AtomicU64 = AtomicU64::new(0);

/// Counts a failed hand-over.
pub fn handover_failed() {
    FAILED.fetch_add(1, Ordering::Relaxed);
}

/// Failed hand-overs in this process (0 or 1).
pub fn handover_failures() -> u64 {
    FAILED.load(Ordering::Relaxed)
}
