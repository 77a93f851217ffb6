//! Backend health, shared by every worker of the process: passive (consecutive failures of
//! proxied requests take a backend out for `proxy.fail-timeout`, then one trial request decides)
//! and active (`proxy.health-check` probes, see [`super::probe`]).
//!
//! One [`Board`] per backend list and settings, found again by every worker that builds the
//! same list (and by the next generation after a reload, so health survives it). The hot path
//! only loads atomics: no lock. Each state change is made by one compare-and-swap or by the one
//! probe thread of a backend, so it is logged once per process, not once per worker.
//!
//! Probes run once per process, one thread per probed backend, rather than in every worker:
//! N workers would send N times the probes and each would log the same change. A probe thread
//! sleeps between probes and holds only a weak reference: it ends once no worker uses the board.

use super::backend::{display_name, tls_client};
use super::probe;
use crate::config::{HealthCheck, ProxyConf, UpstreamAddr};
use crate::tls::client::TlsClient;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

pub struct Board {
    key: Key,
    backends: Box<[State]>,
}

/// What makes two boards the same: the backends and the health settings.
#[derive(PartialEq)]
struct Key {
    /// Address, authority, and whether over TLS.
    addrs: Vec<(UpstreamAddr, String, bool)>,
    max_fails: u32,
    fail_timeout: Duration,
    check: Option<HealthCheck>,
    proxy_protocol: bool,
}

struct State {
    addr: UpstreamAddr,
    /// The URL's authority: the metrics label, and the Host of a probe.
    label: String,
    /// `host:port` or `unix:/path`, for logs.
    name: String,
    /// `https://`: probes go over TLS, verified as requests are.
    tls: Option<TlsClient>,
    /// The active check's verdict (true until `fall` probes fail in a row).
    probe_up: AtomicBool,
    /// Proxied requests that failed in a row.
    fails: AtomicU32,
    /// Passive: out of service until this many ms after [`epoch`]; 0 when in service.
    out_until: AtomicU64,
    /// A request is trying the backend after its back-off.
    trial: AtomicBool,
}

/// Whether a request may go to a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Avail {
    In,
    /// Its back-off is over and no trial request is running: one request may try it.
    Trial,
    Out,
}

/// Every board in use, for [`Board::for_conf`] and the metrics. Locked when a worker builds its
/// handlers and when metrics are rendered, never per request.
static BOARDS: Mutex<Vec<Weak<Board>>> = Mutex::new(Vec::new());

impl Board {
    /// The board of `conf`'s backends: the live one with the same backends and settings, or a
    /// new one, whose probes start now.
    pub fn for_conf(conf: &ProxyConf, clients: &[Option<TlsClient>]) -> Arc<Board> {
        let key = Key {
            addrs: conf
                .backends
                .iter()
                .map(|b| (b.url.addr.clone(), b.url.authority.clone(), b.url.tls))
                .collect(),
            max_fails: conf.max_fails,
            fail_timeout: conf.fail_timeout,
            check: conf.health_check.clone(),
            proxy_protocol: conf.proxy_protocol,
        };
        let mut boards = BOARDS.lock().unwrap_or_else(PoisonError::into_inner);
        boards.retain(|b| b.strong_count() > 0);
        if let Some(b) = boards
            .iter()
            .filter_map(Weak::upgrade)
            .find(|b| b.key == key)
        {
            return b;
        }
        let backends = conf
            .backends
            .iter()
            .map(|b| State {
                addr: b.url.addr.clone(),
                label: b.url.authority.clone(),
                name: display_name(&b.url.addr, b.tls.is_some()),
                tls: tls_client(b, clients),
                probe_up: AtomicBool::new(true),
                fails: AtomicU32::new(0),
                out_until: AtomicU64::new(0),
                trial: AtomicBool::new(false),
            })
            .collect();
        let board = Arc::new(Board { key, backends });
        boards.push(Arc::downgrade(&board));
        if let Some(check) = &board.key.check {
            for i in 0..board.backends.len() {
                start_probes(Arc::downgrade(&board), i, check.clone());
            }
        }
        board
    }

    /// Whether backend `i` may get a request now.
    #[inline]
    pub fn avail(&self, i: usize) -> Avail {
        let s = &self.backends[i];
        if !s.probe_up.load(Relaxed) {
            return Avail::Out;
        }
        match s.out_until.load(Relaxed) {
            0 => Avail::In,
            until if now_ms() < until || s.trial.load(Relaxed) => Avail::Out,
            _ => Avail::Trial,
        }
    }

    /// Takes the one trial of backend `i` after its back-off; false when another request has.
    pub fn claim_trial(&self, i: usize) -> bool {
        let s = &self.backends[i];
        s.trial
            .compare_exchange(false, true, Relaxed, Relaxed)
            .is_ok()
    }

    /// A request to backend `i` got its response head.
    #[inline]
    pub fn succeeded(&self, i: usize) {
        let s = &self.backends[i];
        if s.fails.load(Relaxed) != 0 {
            s.fails.store(0, Relaxed);
        }
        if s.out_until.load(Relaxed) != 0 && s.out_until.swap(0, Relaxed) != 0 {
            s.trial.store(false, Relaxed);
            tracing::warn!(backend = %s.name, "proxy: backend answers again; back in service");
        }
    }

    /// A request to backend `i` could not connect, or failed before its response head.
    pub fn failed(&self, i: usize) {
        let max = self.key.max_fails;
        if max == 0 {
            return;
        }
        let s = &self.backends[i];
        let backoff = self.key.fail_timeout;
        let until = now_ms() + backoff.as_millis() as u64;
        if s.trial.load(Relaxed) {
            // The trial failed: another back-off.
            s.out_until.store(until, Relaxed);
            s.trial.store(false, Relaxed);
            tracing::debug!(backend = %s.name, "proxy: trial request failed; out again");
            return;
        }
        let n = s.fails.fetch_add(1, Relaxed) + 1;
        // Exactly one failure reaches the count: one worker takes it out and logs it.
        if n == max && s.out_until.load(Relaxed) == 0 {
            s.out_until.store(until, Relaxed);
            tracing::warn!(
                backend = %s.name,
                "proxy: {n} failures in a row; out of service for {} ms (proxy.fail-timeout)",
                backoff.as_millis()
            );
        }
    }

    /// The active check's verdict on backend `i` changed.
    fn set_probe_up(&self, i: usize, up: bool, why: &str) {
        let s = &self.backends[i];
        s.probe_up.store(up, Relaxed);
        if up {
            // The check passed: whatever passive back-off was running is over too.
            s.fails.store(0, Relaxed);
            s.out_until.store(0, Relaxed);
            s.trial.store(false, Relaxed);
            tracing::warn!(backend = %s.name, "proxy: health check passes again ({why}); back in service");
        } else {
            tracing::warn!(backend = %s.name, "proxy: health check failed ({why}); out of service");
        }
    }

    fn in_service(&self, i: usize) -> bool {
        let s = &self.backends[i];
        s.probe_up.load(Relaxed) && s.out_until.load(Relaxed) == 0
    }
}

/// Every backend of a list in use, by its URL's authority, and whether it is in service; a
/// backend in several lists is listed once (out of service if any list has it out).
pub fn backend_health() -> Vec<(String, bool)> {
    let boards = BOARDS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out: Vec<(String, bool)> = Vec::new();
    for board in boards.iter().filter_map(Weak::upgrade) {
        for (i, s) in board.backends.iter().enumerate() {
            let up = board.in_service(i);
            match out.iter_mut().find(|(l, _)| *l == s.label) {
                Some((_, u)) => *u &= up,
                None => out.push((s.label.clone(), up)),
            }
        }
    }
    out
}

/// Probes backend `i` every `check.interval` on a thread of its own, until the board is gone.
fn start_probes(board: Weak<Board>, i: usize, check: HealthCheck) {
    let spawned = std::thread::Builder::new()
        .name("spate-health".into())
        .spawn(move || {
            let (mut passed, mut failed) = (0u32, 0u32);
            loop {
                let Some(b) = board.upgrade() else { return };
                let s = &b.backends[i];
                let up = s.probe_up.load(Relaxed);
                let tls = s.tls.as_ref().map(|t| &*t.0);
                match probe::run(&s.addr, &s.label, &check, b.key.proxy_protocol, tls) {
                    Ok(()) => {
                        (passed, failed) = (passed.saturating_add(1), 0);
                        if !up && passed >= check.rise {
                            b.set_probe_up(i, true, &format!("{passed} in a row"));
                        }
                    }
                    Err(why) => {
                        (passed, failed) = (0, failed.saturating_add(1));
                        tracing::debug!(backend = %s.name, "proxy: health check failed: {why}");
                        if up && failed >= check.fall {
                            b.set_probe_up(i, false, &format!("{failed} in a row, last: {why}"));
                        }
                    }
                }
                drop(b);
                std::thread::sleep(check.interval);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("proxy: cannot start the health check thread: {e}");
    }
}

/// Milliseconds on the coarse monotonic clock, never 0 (0 means "in service" in
/// `out_until`). The clock is the whole machine's, so every worker reads the same time.
fn now_ms() -> u64 {
    crate::http::clock::coarse_ns() / 1_000_000 + 1
}
