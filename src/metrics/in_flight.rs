//! The requests in flight, for the `status` handler's `requests` section (h2o's
//! `/json?show=requests`).
//!
//! A request is listed while it is not over in the turn it was asked in: its answer still to
//! come (a proxied one, a FastCGI one: the driver's `LaterAnswer` holds an [`InFlight`] from
//! routing, on every protocol alike), and after that while its response body streams out or
//! its request body is still arriving, where the driver keeps the entry on
//! ([`InFlight::set_phase`]). An answer written whole in its turn is never listed: no status
//! request could see it.
//!
//! Listing is on only on workers whose configuration has a `status` path ([`enable`]); off,
//! an answer still to come pays one thread-local flag test and an answer ready now nothing.
//! On, each worker keeps its entries in its own slab behind its own mutex (uncontended but
//! for a status request reading it), reusing the entries' strings so that a steady worker
//! allocates nothing to list.

use crate::http::Request;
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

/// The longest value kept of a field (a path, a User-Agent): enough to recognise it.
const MAX_FIELD: usize = 1024;

/// One request in flight, as the status handler shows it.
#[derive(Clone, Debug)]
pub struct Listed {
    pub peer: SocketAddr,
    pub at: SystemTime,
    /// As in an access log's `%H`: `HTTP/1.1`, `HTTP/2`, `HTTP/3`.
    pub protocol: &'static str,
    pub method: String,
    pub path: String,
    /// Without its `?`; empty when the target has none.
    pub query: String,
    pub authority: String,
    pub referer: String,
    pub user_agent: String,
    pub phase: Phase,
}

/// Where a listed request stands (the `status` handler's `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The answer is still to come (the request body may be streaming to the handler).
    Handling,
    /// Answered; the request body is still arriving (read past, or to the handler).
    Receiving,
    /// The response body is being sent.
    Sending,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Handling => "handling",
            Phase::Receiving => "receiving",
            Phase::Sending => "sending",
        }
    }
}

/// A worker's entries: a slab whose free slots keep their strings' capacity.
#[derive(Default)]
struct Worker {
    entries: Vec<(bool, Listed)>,
    free: Vec<u32>,
}

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static MINE: Arc<Mutex<Worker>> = register();
}

/// Every worker's slab, for the status handler to read; a dead worker's is skipped.
static ALL: Mutex<Vec<Weak<Mutex<Worker>>>> = Mutex::new(Vec::new());

fn register() -> Arc<Mutex<Worker>> {
    let mine = Arc::new(Mutex::new(Worker::default()));
    if let Ok(mut all) = ALL.lock() {
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&mine));
    }
    mine
}

/// Turns listing on or off for this worker thread (on when its configuration has a
/// `status` path).
pub fn enable(on: bool) {
    ON.with(|o| o.set(on));
}

/// A listed request: removed from its worker's list when dropped.
pub struct InFlight {
    slot: u32,
}

impl InFlight {
    /// Lists `req` on this worker, when listing is on.
    #[inline]
    pub fn enter(req: &Request) -> Option<InFlight> {
        Self::enter_in(req, Phase::Handling)
    }

    /// [`InFlight::enter`] for a request already answered, in `phase`.
    #[inline]
    pub fn enter_in(req: &Request, phase: Phase) -> Option<InFlight> {
        if !ON.with(Cell::get) {
            return None;
        }
        Self::list(req, phase)
    }

    /// Moves the entry on to `phase` (a driver's call when a listed request changes phase;
    /// `None`, listing off, costs the test).
    #[inline]
    pub fn set_phase(listed: &Option<InFlight>, phase: Phase) {
        if let Some(l) = listed {
            l.set(phase);
        }
    }

    #[inline(never)]
    fn set(&self, phase: Phase) {
        let Ok(mine) = MINE.try_with(Arc::clone) else {
            return;
        };
        let Ok(mut w) = mine.lock() else {
            return;
        };
        if let Some((true, e)) = w.entries.get_mut(self.slot as usize) {
            e.phase = phase;
        }
    }

    #[inline(never)]
    fn list(req: &Request, phase: Phase) -> Option<InFlight> {
        let mine = MINE.try_with(Arc::clone).ok()?;
        let mut w = mine.lock().ok()?;
        let slot = match w.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(w.entries.len()).ok()?;
                w.entries.push((false, empty()));
                slot
            }
        };
        let (live, e) = w.entries.get_mut(slot as usize)?;
        *live = true;
        fill(e, req);
        e.phase = phase;
        Some(InFlight { slot })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // A worker thread being torn down has no list left to leave.
        let Ok(mine) = MINE.try_with(Arc::clone) else {
            return;
        };
        let Ok(mut w) = mine.lock() else {
            return;
        };
        if let Some((live, _)) = w.entries.get_mut(self.slot as usize) {
            *live = false;
            w.free.push(self.slot);
        }
    }
}

/// The requests in flight on every worker, oldest first.
pub fn all() -> Vec<Listed> {
    let workers: Vec<Arc<Mutex<Worker>>> = match ALL.lock() {
        Ok(all) => all.iter().filter_map(Weak::upgrade).collect(),
        Err(_) => return Vec::new(),
    };
    let mut out = Vec::new();
    for w in workers {
        if let Ok(w) = w.lock() {
            out.extend(w.entries.iter().filter(|(l, _)| *l).map(|(_, e)| e.clone()));
        }
    }
    out.sort_by_key(|e| e.at);
    out
}

/// The entry of a request (for the status request itself, which is not in flight yet).
pub fn describe(req: &Request) -> Listed {
    let mut e = empty();
    fill(&mut e, req);
    e
}

fn fill(e: &mut Listed, req: &Request) {
    e.peer = req.peer;
    e.at = SystemTime::now();
    e.protocol = req.version.as_str();
    set(&mut e.method, req.method.as_bytes());
    set(&mut e.path, req.path());
    set(&mut e.query, req.query().unwrap_or_default());
    set(&mut e.authority, req.authority().unwrap_or_default());
    set(&mut e.referer, req.header(b"referer").unwrap_or_default());
    set(
        &mut e.user_agent,
        req.header(b"user-agent").unwrap_or_default(),
    );
}

fn empty() -> Listed {
    Listed {
        peer: SocketAddr::from(([0, 0, 0, 0], 0)),
        at: SystemTime::now(),
        protocol: "",
        method: String::new(),
        path: String::new(),
        query: String::new(),
        authority: String::new(),
        referer: String::new(),
        user_agent: String::new(),
        phase: Phase::Handling,
    }
}

/// Replaces `s` with `b` (invalid UTF-8 replaced, cut at [`MAX_FIELD`] bytes), keeping its
/// capacity.
fn set(s: &mut String, b: &[u8]) {
    s.clear();
    let b = &b[..b.len().min(MAX_FIELD)];
    s.push_str(&String::from_utf8_lossy(b));
}

#[cfg(test)]
mod tests;
