//! `limit-req`: nginx's `limit_req` leaky bucket. Each zone remembers, per key, the excess
//! over the rate (in thousandths of a request) and when it was last updated; a request adds
//! one, the rate drains it. Over `burst` the request is refused; over `delay` it waits until
//! the excess it adds has drained. A zone is shared by every worker (one process-wide zone per
//! name and settings, found again by a reload that keeps them) and holds at most `size` keys:
//! beyond them the least recently seen key is forgotten. A zone with `redis:` also learns
//! what the other instances of a fleet passed (`fleet.rs`).

pub mod conn;
mod fleet;

use crate::config::{LimitKey, LimitReqConf, LimitZone};
use crate::http::{Request, Response};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The longest key taken from a header: longer values count under their first bytes.
const MAX_KEY: usize = 256;
/// How often at most a zone that evicts says so.
const FULL_LOG_INTERVAL_MS: u64 = 60_000;

/// What one zone says of a request.
pub enum Verdict {
    Pass,
    Delay(Duration),
    Refuse(Response),
}

/// One `limit-req` of a path.
pub struct Limit {
    zone: Arc<Zone>,
    conf: LimitReqConf,
}

impl Limit {
    pub fn new(conf: &LimitReqConf) -> Limit {
        Limit {
            zone: Zone::shared(&conf.zone),
            conf: conf.clone(),
        }
    }

    /// Whether a request may be told to wait: only over `delay` and within `burst`, so never
    /// with `delay` at `burst` or more (`nodelay`) or in dry-run.
    pub fn may_delay(&self) -> bool {
        !self.conf.dry_run && self.conf.delay < self.conf.burst
    }

    pub fn check(&self, req: &Request, client: IpAddr) -> Verdict {
        let mut buf = [0u8; 17];
        let key: &[u8] = match &self.conf.zone.key {
            LimitKey::Client => ip_key(client, &mut buf),
            LimitKey::Header(name) => match req.header(name.as_bytes()) {
                Some(v) if !v.is_empty() => &v[..v.len().min(MAX_KEY)],
                // nginx does not count an empty key.
                _ => return Verdict::Pass,
            },
        };
        let burst = self.conf.burst * 1000;
        let delay = self.conf.delay * 1000;
        let rate = self.conf.zone.rate;
        let outcome = self.zone.account(key, burst, now_ms());
        if let (Ok(_), Some(fleet)) = (&outcome, &self.zone.fleet) {
            fleet.passed(key);
        }
        match outcome {
            Err(excess) => {
                let zone = &self.conf.zone.name;
                if self.conf.dry_run {
                    tracing::info!(client = %client, zone = %zone, "limit-req: would refuse (dry-run)");
                    return Verdict::Pass;
                }
                tracing::info!(client = %client, zone = %zone, status = self.conf.status, "limit-req: refused over the rate");
                // When one more request fits again.
                let wait_ms = (excess - burst) * 1000 / rate;
                let retry = wait_ms.div_ceil(1000).max(1);
                let resp =
                    Response::error(self.conf.status).with_header("retry-after", retry.to_string());
                Verdict::Refuse(resp)
            }
            Ok(excess) if excess > delay && !self.conf.dry_run => {
                Verdict::Delay(Duration::from_millis((excess - delay) * 1000 / rate))
            }
            Ok(_) => Verdict::Pass,
        }
    }
}

fn ip_key(ip: IpAddr, buf: &mut [u8; 17]) -> &[u8] {
    match ip.to_canonical() {
        IpAddr::V4(a) => {
            buf[0] = 4;
            buf[1..5].copy_from_slice(&a.octets());
            &buf[..5]
        }
        IpAddr::V6(a) => {
            buf[0] = 6;
            buf[1..17].copy_from_slice(&a.octets());
            &buf[..]
        }
    }
}

/// Milliseconds since the first call: the zones' clock.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A zone's state, shared by the workers.
pub struct Zone {
    conf: LimitZone,
    state: Mutex<Lru>,
    /// `redis:`: the counts a fleet shares.
    fleet: Option<fleet::Fleet>,
}

impl Zone {
    /// The zone of this name and settings, the one still alive if there is one.
    fn shared(conf: &LimitZone) -> Arc<Zone> {
        static ZONES: Mutex<Vec<Weak<Zone>>> = Mutex::new(Vec::new());
        let mut zones = ZONES.lock().unwrap_or_else(|e| e.into_inner());
        zones.retain(|z| z.strong_count() > 0);
        let same = |z: &Zone| {
            z.conf.name == conf.name
                && z.conf.key == conf.key
                && z.conf.rate == conf.rate
                && z.conf.size == conf.size
                && z.conf.fleet == conf.fleet
        };
        if let Some(z) = zones.iter().filter_map(Weak::upgrade).find(|z| same(z)) {
            return z;
        }
        let z = Arc::new(Zone {
            conf: conf.clone(),
            state: Mutex::new(Lru::new(conf.size)),
            fleet: conf.fleet.as_ref().map(|_| fleet::Fleet::new()),
        });
        if let Some(f) = &conf.fleet {
            let (weak, f, name) = (Arc::downgrade(&z), f.clone(), conf.name.clone());
            let spawned = std::thread::Builder::new()
                .name("limit-fleet".into())
                .spawn(move || fleet::run(weak, f, name));
            if let Err(e) = spawned {
                tracing::warn!(zone = %conf.name, "limit-req: cannot start the fleet sync, limiting locally: {e}");
            }
        }
        zones.push(Arc::downgrade(&z));
        z
    }

    /// Adds what other instances passed (`n` requests of a key) to the keys' buckets; keys
    /// this instance does not hold are left alone (their first request here starts afresh).
    fn pour(&self, arrivals: &[(Box<[u8]>, u64)]) {
        let mut lru = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (key, n) in arrivals {
            if let Some(i) = lru.find(key) {
                let e = &mut lru.nodes[i];
                e.excess = e.excess.saturating_add(n.saturating_mul(1000));
            }
        }
    }

    /// nginx's step: the excess drained since the key's last request, plus this one.
    /// `Ok(excess)` stored, or `Err(excess)` over `burst` (nothing stored).
    fn account(&self, key: &[u8], burst: u64, now: u64) -> Result<u64, u64> {
        let mut lru = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let rate = self.conf.rate;
        let Some(i) = lru.find(key) else {
            if lru.insert(key, now) {
                let since = now.saturating_sub(lru.full_logged.unwrap_or(0));
                if lru.full_logged.is_none() || since >= FULL_LOG_INTERVAL_MS {
                    lru.full_logged = Some(now);
                    tracing::warn!(
                        zone = %self.conf.name,
                        "limit-req: zone full ({} keys): forgetting the least recently seen",
                        self.conf.size
                    );
                }
            }
            return Ok(0);
        };
        let e = &mut lru.nodes[i];
        let ms = now.saturating_sub(e.last);
        let drained = rate.saturating_mul(ms) / 1000;
        let excess = (e.excess + 1000).saturating_sub(drained);
        if excess > burst {
            return Err(excess);
        }
        e.excess = excess;
        e.last = now;
        lru.touch(i);
        Ok(excess)
    }
}

struct Node {
    key: Box<[u8]>,
    excess: u64,
    last: u64,
    prev: usize,
    next: usize,
}

/// At most `cap` keys, most recently seen first (a list threaded through `nodes`).
struct Lru {
    cap: usize,
    map: HashMap<Box<[u8]>, usize>,
    nodes: Vec<Node>,
    head: usize,
    tail: usize,
    /// When the zone last said it is full.
    full_logged: Option<u64>,
}

const NONE: usize = usize::MAX;

impl Lru {
    fn new(cap: usize) -> Lru {
        Lru {
            cap,
            map: HashMap::new(),
            nodes: Vec::new(),
            head: NONE,
            tail: NONE,
            full_logged: None,
        }
    }

    fn find(&self, key: &[u8]) -> Option<usize> {
        self.map.get(key).copied()
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.nodes[i].prev, self.nodes[i].next);
        match prev {
            NONE => self.head = next,
            p => self.nodes[p].next = next,
        }
        match next {
            NONE => self.tail = prev,
            n => self.nodes[n].prev = prev,
        }
    }

    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NONE;
        self.nodes[i].next = self.head;
        if self.head != NONE {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NONE {
            self.tail = i;
        }
    }

    fn touch(&mut self, i: usize) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// Adds `key` with no excess; returns true when the least recently seen key made room.
    fn insert(&mut self, key: &[u8], now: u64) -> bool {
        let key: Box<[u8]> = key.into();
        if self.nodes.len() < self.cap {
            let i = self.nodes.len();
            self.nodes.push(Node {
                key: key.clone(),
                excess: 0,
                last: now,
                prev: NONE,
                next: NONE,
            });
            self.map.insert(key, i);
            self.push_front(i);
            return false;
        }
        let i = self.tail;
        self.unlink(i);
        let old = std::mem::replace(&mut self.nodes[i].key, key.clone());
        self.map.remove(&old);
        self.nodes[i].excess = 0;
        self.nodes[i].last = now;
        self.map.insert(key, i);
        self.push_front(i);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Location;

    fn zone(rate: u64, size: usize) -> Zone {
        Zone {
            conf: LimitZone {
                name: "t".into(),
                key: LimitKey::Client,
                rate,
                size,
                fleet: None,
                at: Location {
                    file: "t".into(),
                    line: 1,
                },
            },
            state: Mutex::new(Lru::new(size)),
            fleet: None,
        }
    }

    #[test]
    fn the_bucket_drains_at_the_rate() {
        // 10 r/s, burst 2: three at once pass (0, 1000, 2000), the fourth is over.
        let z = zone(10_000, 10);
        assert_eq!(z.account(b"a", 2000, 0), Ok(0));
        assert_eq!(z.account(b"a", 2000, 0), Ok(1000));
        assert_eq!(z.account(b"a", 2000, 0), Ok(2000));
        assert_eq!(z.account(b"a", 2000, 0), Err(3000));
        // 100 ms drains one.
        assert_eq!(z.account(b"a", 2000, 100), Ok(2000));
        // Another key has its own bucket.
        assert_eq!(z.account(b"b", 0, 100), Ok(0));
        assert_eq!(z.account(b"b", 0, 150), Err(500));
        assert_eq!(z.account(b"b", 0, 200), Ok(0));
    }

    #[test]
    fn a_full_zone_forgets_the_least_recently_seen() {
        let z = zone(1000, 2);
        assert_eq!(z.account(b"a", 0, 0), Ok(0));
        assert_eq!(z.account(b"b", 0, 0), Ok(0));
        // A refusal does not touch a: it stays the least recently seen, and c takes its place.
        assert_eq!(z.account(b"a", 0, 10), Err(990));
        assert_eq!(z.account(b"c", 0, 20), Ok(0));
        let lru = z.state.lock().unwrap();
        assert_eq!(lru.map.len(), 2);
        assert!(lru.find(b"a").is_none() && lru.find(b"b").is_some());
    }
}
