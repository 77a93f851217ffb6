//! The per-worker pool of idle backend connections: per backend address, newest reused
//! first, each closed after its `proxy.timeout.keepalive`, at most `max_idle` per backend.

use super::cap::{Gate, Slot};
use super::conn::Conn;
use super::h2_conn::H2Conn;
use super::timer::Timer;
use crate::config::UpstreamAddr;
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// Keyed by backends of the configuration (not by anything a peer sends), so a fast hash
/// will do: a request looks its backend up twice (take and put back).
pub struct Pool {
    /// Oldest first: they expire in that order.
    idle: RefCell<FxHashMap<PoolKey, VecDeque<Idle>>>,
    /// HTTP/2 connections, shared by the requests on them (each closes itself when idle).
    h2: RefCell<FxHashMap<PoolKey, Vec<Rc<H2Conn>>>>,
    /// TLS backends that did not choose h2 in ALPN.
    no_h2: RefCell<FxHashSet<PoolKey>>,
    /// Caps on connections per backend (`proxy.max-connections`), made at the first new
    /// connection to each.
    gates: RefCell<FxHashMap<PoolKey, Rc<Gate>>>,
    /// Whether the task that closes expired connections is running.
    sweeping: Cell<bool>,
    me: Weak<Pool>,
}

/// What a pooled connection can be reused for: the same address in the same scheme.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    addr: UpstreamAddr,
    tls: bool,
}

impl PoolKey {
    pub fn new(addr: &UpstreamAddr, tls: bool) -> PoolKey {
        PoolKey {
            addr: addr.clone(),
            tls,
        }
    }
}

struct Idle {
    conn: Conn,
    /// The timer of the connection's exchanges, reused by the next one (parked: it wakes no
    /// one while idle).
    timer: Timer,
    /// Its place under the backend's cap.
    slot: Option<Slot>,
    expires: Instant,
}

impl Pool {
    pub fn new() -> Rc<Pool> {
        Rc::new_cyclic(|me| Pool {
            idle: RefCell::new(FxHashMap::default()),
            h2: RefCell::new(FxHashMap::default()),
            no_h2: RefCell::new(FxHashSet::default()),
            gates: RefCell::new(FxHashMap::default()),
            sweeping: Cell::new(false),
            me: me.clone(),
        })
    }

    /// The newest idle connection to `addr` that has not expired, if there is one. It is
    /// not probed (that would cost a syscall per request): a backend that closed it meanwhile
    /// makes the exchange fail before any byte comes back, and the exchange retries once on
    /// a fresh connection.
    pub(super) fn take(&self, addr: &PoolKey) -> Option<(Conn, Timer, Option<Slot>)> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(addr)?;
        let c = list.pop_back()?;
        if c.expires > Instant::now() {
            return Some((c.conn, c.timer, c.slot));
        }
        // The newest has expired, so have all the others.
        list.clear();
        None
    }

    /// Gives `conn` (and its exchanges' timer) to the first request waiting for a connection
    /// to its backend, else keeps it for reuse for `keepalive`, dropping the oldest beyond
    /// `max_idle`.
    pub(super) fn put(
        &self,
        addr: &PoolKey,
        conn: Conn,
        mut timer: Timer,
        slot: Option<Slot>,
        keepalive: Duration,
        max_idle: usize,
    ) {
        if keepalive.is_zero() || max_idle == 0 {
            return;
        }
        let (conn, slot) = match slot {
            None => (conn, None),
            Some(s) => match s.hand_idle(conn, timer) {
                Ok(()) => return,
                Err((c, t, s)) => {
                    timer = t;
                    (c, Some(s))
                }
            },
        };
        timer.park();
        let now = Instant::now();
        {
            let mut idle = self.idle.borrow_mut();
            let list = match idle.get_mut(addr) {
                Some(l) => l,
                None => idle.entry(addr.clone()).or_default(),
            };
            while list.len() >= max_idle || list.front().is_some_and(|c| c.expires <= now) {
                list.pop_front();
            }
            list.push_back(Idle {
                conn,
                timer,
                slot,
                expires: now + keepalive,
            });
        }
        self.start_sweeping();
    }

    /// An HTTP/2 connection to `key` with room for one more request (or still connecting).
    pub(super) fn h2_conn(&self, key: &PoolKey) -> Option<Rc<H2Conn>> {
        let h2 = self.h2.borrow();
        h2.get(key)?.iter().find(|c| c.usable()).cloned()
    }

    pub(super) fn add_h2(&self, key: &PoolKey, conn: Rc<H2Conn>) {
        self.h2
            .borrow_mut()
            .entry(key.clone())
            .or_default()
            .push(conn);
    }

    /// Called by the connection's driver when it ends.
    pub(super) fn remove_h2(&self, key: &PoolKey, conn: &Rc<H2Conn>) {
        let mut h2 = self.h2.borrow_mut();
        if let Some(list) = h2.get_mut(key) {
            list.retain(|c| !Rc::ptr_eq(c, conn));
            if list.is_empty() {
                h2.remove(key);
            }
        }
    }

    pub(super) fn mark_no_h2(&self, key: &PoolKey) {
        if !self.speaks_no_h2(key) {
            tracing::info!("proxy: {:?} does not offer h2 in ALPN; using HTTP/1.1", key);
            self.no_h2.borrow_mut().insert(key.clone());
        }
    }

    pub(super) fn speaks_no_h2(&self, key: &PoolKey) -> bool {
        let no = self.no_h2.borrow();
        !no.is_empty() && no.contains(key)
    }

    /// The cap on connections to `key` (`None`: uncapped).
    pub(super) fn gate(&self, key: &PoolKey, cap: u32, queue_max: usize) -> Option<Rc<Gate>> {
        if cap == 0 {
            return None;
        }
        let mut gates = self.gates.borrow_mut();
        let gate = match gates.get(key) {
            Some(g) => g,
            None => gates
                .entry(key.clone())
                .or_insert_with(|| Gate::new(cap, queue_max)),
        };
        Some(gate.clone())
    }

    /// Connections open to `addr` under its cap and requests waiting for one (0s when
    /// uncapped).
    pub fn capped_counts(&self, addr: &PoolKey) -> (u32, usize) {
        self.gates
            .borrow()
            .get(addr)
            .map_or((0, 0), |g| (g.open(), g.queued()))
    }

    /// Idle connections kept for `addr`.
    pub fn idle_count(&self, addr: &PoolKey) -> usize {
        self.idle.borrow().get(addr).map_or(0, VecDeque::len)
    }

    /// Closes expired connections even when no request comes to reuse them, so descriptors
    /// return to where they were once traffic stops.
    fn start_sweeping(&self) {
        start_sweeping(&self.sweeping, &self.me, Pool::sweep);
    }

    /// Drops expired connections; returns the next expiry, or `None` (and stops sweeping)
    /// when nothing is idle.
    fn sweep(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut idle = self.idle.borrow_mut();
        idle.retain(|_, list| {
            list.retain(|c| c.expires > now);
            !list.is_empty()
        });
        let next = idle.values().flatten().map(|c| c.expires).min();
        if next.is_none() {
            self.sweeping.set(false);
        }
        next
    }
}

/// Runs `sweep` on the pool behind `me` at each expiry it returns, until it returns `None`
/// (nothing idle) or the pool is gone: one task per worker and pool, only while connections
/// are idle. `sweeping` says that the task runs; `sweep` clears it when it returns `None`.
pub(super) fn start_sweeping<P: 'static>(
    sweeping: &Cell<bool>,
    me: &Weak<P>,
    sweep: fn(&P) -> Option<Instant>,
) {
    if sweeping.replace(true) {
        return;
    }
    let me = me.clone();
    tokio::task::spawn_local(async move {
        loop {
            let Some(next) = me.upgrade().and_then(|p| sweep(&p)) else {
                return;
            };
            tokio::time::sleep_until(next).await;
        }
    });
}
