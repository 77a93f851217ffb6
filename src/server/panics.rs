//! Panic containment for connections. A panic while handling one connection (a bug: peer input
//! never panics by design) must not end the worker and its other connections: the connection's
//! future is polled inside `catch_unwind`, a panic closes that connection only (its future is
//! dropped, which closes the socket and frees its slot), is logged once with the peer's address
//! and counted in `spate_connection_panics_total`.
//!
//! The release profile unwinds (no `panic = "abort"` in Cargo.toml); this relies on it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::Poll;

thread_local! {
    /// Set while a connection's future is being polled: its panics are reported by `contain`.
    static IN_CONNECTION: Cell<bool> = const { Cell::new(false) };
    /// Where the last contained panic happened and what it said, from the panic hook.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the process's panic hook (once): panics inside a contained connection are recorded
/// for `contain` to log with the peer's address; any other panic is reported as before.
pub(crate) fn install_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CONNECTION.with(Cell::get) {
                let at = info
                    .location()
                    .map_or_else(String::new, |l| format!(" at {l}"));
                let what = message(info.payload());
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{what}{at}")));
            } else {
                default(info);
            }
        }));
    });
}

/// Runs a connection's future; a panic inside it ends only this connection (and gives `None`).
/// Takes the future pinned by the caller so that it is stored once, in the caller's task.
pub(crate) async fn contain<T, F: Future<Output = T>>(
    mut conn: Pin<&mut F>,
    peer: &SocketAddr,
) -> Option<T> {
    let outcome = std::future::poll_fn(|cx| {
        let was = IN_CONNECTION.with(|c| c.replace(true));
        let polled = catch_unwind(AssertUnwindSafe(|| conn.as_mut().poll(cx)));
        IN_CONNECTION.with(|c| c.set(was));
        match polled {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    })
    .await;
    match outcome {
        Ok(out) => Some(out),
        Err(payload) => {
            report(payload, peer);
            None
        }
    }
}

/// Runs one step of a connection's handling that is not a future of its own (an HTTP/3
/// connection's work, done inside the QUIC endpoint's task for all of them); a panic inside it
/// is logged and counted as in `contain`, and `None` tells the caller to close that connection.
pub(crate) fn contain_step<T>(peer: &SocketAddr, step: impl FnOnce() -> T) -> Option<T> {
    let was = IN_CONNECTION.with(|c| c.replace(true));
    let out = catch_unwind(AssertUnwindSafe(step));
    IN_CONNECTION.with(|c| c.set(was));
    match out {
        Ok(v) => Some(v),
        Err(payload) => {
            report(payload, peer);
            None
        }
    }
}

/// Logs and counts a contained panic.
fn report(payload: Box<dyn std::any::Any + Send>, peer: &SocketAddr) {
    let what = LAST_PANIC
        .with(|p| p.borrow_mut().take())
        .unwrap_or_else(|| message(&*payload));
    tracing::error!(%peer, "connection handling panicked: {what}; connection closed");
    crate::metrics::connection_panicked();
}

fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// Test-only trigger, debug builds only: with `SPATE_DEBUG_PANIC_DATAGRAM` set to a length, a
/// QUIC datagram of exactly that many bytes panics inside quinn-proto's contained step, so
/// the integration tests can show that the worker's other QUIC connections live on.
#[cfg(debug_assertions)]
pub(crate) fn debug_panic_on_datagram(len: usize) {
    static LEN: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let armed = LEN.get_or_init(|| {
        std::env::var("SPATE_DEBUG_PANIC_DATAGRAM")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if *armed == Some(len) {
        panic!("SPATE_DEBUG_PANIC_DATAGRAM requested");
    }
}
