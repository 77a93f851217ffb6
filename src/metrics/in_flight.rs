//! The requests in flight, for the `status` handler's `requests` section (h2o's
//! `/json?show=requests`).
//!
//! Only a request whose answer comes later is listed (a proxied one, a FastCGI one, any
//! answer still pending): an answer ready now is written in the same turn it was asked for,
//! so no status request could ever see it. The driver's `LaterAnswer` holds an [`InFlight`]
//! from routing until it is dropped, on every protocol alike.
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
        if !ON.with(Cell::get) {
            return None;
        }
        Self::list(req)
    }

    #[inline(never)]
    fn list(req: &Request) -> Option<InFlight> {
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
