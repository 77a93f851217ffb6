//! What a fleet of spates shares through memcached or Redis: the clients of those two stores
//! and their counters (gets, sets, errors, time spent, up or down), which the `metrics`
//! handler renders as `spate_fleet_*`.
//!
//! The stores are only touched from background threads (ticket keys, cache writes, limit
//! syncs) and from a TLS handshake's session-cache lookup, never on a request's path, so the
//! counters are plain atomics.

pub mod item;
pub mod memcached;
pub mod redis;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which store a counter is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Memcached = 0,
    Redis = 1,
}

impl Store {
    pub const ALL: [Store; 2] = [Store::Memcached, Store::Redis];

    pub fn name(self) -> &'static str {
        match self {
            Store::Memcached => "memcached",
            Store::Redis => "redis",
        }
    }
}

/// What was asked of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get = 0,
    Set = 1,
}

/// One store's counters.
struct Counters {
    gets: AtomicU64,
    sets: AtomicU64,
    errors: AtomicU64,
    micros: AtomicU64,
    /// 1 while the last operation succeeded, 0 after a failure, 2 before any operation.
    state: AtomicU64,
}

const fn counters() -> Counters {
    Counters {
        gets: AtomicU64::new(0),
        sets: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        micros: AtomicU64::new(0),
        state: AtomicU64::new(2),
    }
}

static COUNTERS: [Counters; 2] = [counters(), counters()];

/// A snapshot of one store's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub gets: u64,
    pub sets: u64,
    pub errors: u64,
    /// Time spent in operations, microseconds.
    pub micros: u64,
    /// Whether the last operation succeeded (`None` before the first).
    pub up: Option<bool>,
}

/// A connection to a store at `host:port` (each of its addresses in turn), with `timeout` on
/// connecting, reading and writing: a store that hangs holds its caller no longer than that.
fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}:{port}: {e}"))?;
    let mut last = format!("{host}:{port} has no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                s.set_read_timeout(Some(timeout))
                    .map_err(|e| e.to_string())?;
                s.set_write_timeout(Some(timeout))
                    .map_err(|e| e.to_string())?;
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = format!("cannot connect to {addr}: {e}"),
        }
    }
    Err(last)
}

pub fn stats(store: Store) -> Stats {
    let c = &COUNTERS[store as usize];
    Stats {
        gets: c.gets.load(Ordering::Relaxed),
        sets: c.sets.load(Ordering::Relaxed),
        errors: c.errors.load(Ordering::Relaxed),
        micros: c.micros.load(Ordering::Relaxed),
        up: match c.state.load(Ordering::Relaxed) {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        },
    }
}

/// Runs `f` as one operation of `store` and counts it.
pub fn timed<T>(store: Store, op: Op, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let start = Instant::now();
    let r = f();
    record(store, op, start.elapsed(), r.is_ok());
    r
}

fn record(store: Store, op: Op, took: Duration, ok: bool) {
    let c = &COUNTERS[store as usize];
    match op {
        Op::Get => c.gets.fetch_add(1, Ordering::Relaxed),
        Op::Set => c.sets.fetch_add(1, Ordering::Relaxed),
    };
    if !ok {
        c.errors.fetch_add(1, Ordering::Relaxed);
    }
    let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    c.micros.fetch_add(us, Ordering::Relaxed);
    c.state.store(u64::from(ok), Ordering::Relaxed);
}

/// The first 80 characters of a store's answer, for a log line.
fn clip(s: &str) -> &str {
    match s.char_indices().nth(80) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Standard base64url without padding (h2o's memcached key encoding).
pub fn base64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url (padding and the standard alphabet's `+/` accepted too).
pub fn unbase64(text: &[u8]) -> Option<Vec<u8>> {
    let end = text.iter().position(|&c| c == b'=').unwrap_or(text.len());
    let url: Vec<u8> = text[..end]
        .iter()
        .map(|&c| match c {
            b'+' => b'-',
            b'/' => b'_',
            c => c,
        })
        .collect();
    LENIENT.decode(url).ok()
}

/// base64url that takes trailing bits as they come, as the stores' other writers may leave them.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips() {
        for n in 0..40u8 {
            let bytes: Vec<u8> = (0..n)
                .map(|i| i.wrapping_mul(37).wrapping_add(250))
                .collect();
            let text = base64url(&bytes);
            assert!(!text.contains(['+', '/', '=']), "{text}");
            assert_eq!(unbase64(text.as_bytes()), Some(bytes));
        }
        assert_eq!(base64url(b"\xfb\xff"), "-_8");
        assert_eq!(unbase64(b"aGk="), Some(b"hi".to_vec()));
        assert_eq!(unbase64(b"a b"), None);
    }
}
