//! A `limit-req` zone shared by a fleet through Redis (`redis:` in the zone).
//!
//! Design: each instance counts locally and exchanges counts every `sync-interval`, rather
//! than taking a share of the rate in batches. A request is judged by the local bucket, as in
//! a local zone (no round trip, the same nginx semantics); a background thread adds, for every
//! key seen lately, this instance's passed requests to a Redis counter (`INCRBY`, one
//! pipelined round trip for all keys) and learns from the counter's new total what the other
//! instances passed, which it pours into the local bucket. Every instance's bucket thus holds
//! the fleet's arrivals, its own at once and the others' at most one interval (plus a round
//! trip) late. A share scheme would refuse requests on an instance whose share ran out while
//! another's idles; this one shares the whole rate and burst wherever the traffic lands.
//!
//! Error bound: an instance's view lags the fleet by the others' passes in the last interval,
//! so over any run the fleet passes at most `rate × time + burst + (N − 1) × (rate ×
//! (interval + round trip) + burst + 1)` for N instances: with 100 r/s, 100 ms and no burst,
//! about 10 requests per other instance, once, not per second.
//!
//! Idle: a zone with no request since its last sync does not sync (nothing to report, and
//! the others' counts matter only to a request); see `run` for why the buckets stay right.
//!
//! Redis down or slow (a 1 s bound on each step): the zone limits locally, each instance at
//! the full rate, with one log line; when Redis answers again the counters are taken up anew
//! (what was counted meanwhile is not replayed) and one line says so.

use super::{now_ms, Zone};
use crate::config::FleetZone;
use crate::fleet::redis::{unexpected, Redis, Reply};
use crate::fleet::{timed, Op, Store};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// Bound on each Redis step of a sync.
const TIMEOUT: Duration = Duration::from_secs(1);
/// A key not seen for this long is no longer synced.
const IDLE_MS: u64 = 10_000;
/// Keys synced in one round at most (the most recently passed first are kept).
const MAX_KEYS: usize = 4096;
/// Seconds a Redis counter outlives its last update.
const COUNTER_TTL: &str = "120";

/// The fleet side of a zone: this instance's passes not yet reported, shared with the sync
/// thread, which sleeps on `wake` while the zone has no request.
pub struct Fleet(Arc<Shared>);

struct Shared {
    pending: Mutex<Pending>,
    /// Signalled by the first request after an idle spell, and when the zone is dropped.
    wake: Condvar,
}

#[derive(Default)]
struct Pending {
    passed: HashMap<Box<[u8]>, u64>,
    /// The zone is gone: the sync thread ends.
    closed: bool,
}

impl Fleet {
    pub fn new() -> Fleet {
        Fleet(Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
        }))
    }

    /// Counts one passed request of `key` (a fleet zone's only extra work on a request; the
    /// first one since the last sync also wakes the sync thread, at most once an interval).
    pub fn passed(&self, key: &[u8]) {
        let mut p = self.0.lock();
        let first = p.passed.is_empty();
        match p.passed.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                if p.passed.len() < MAX_KEYS {
                    p.passed.insert(key.into(), 1);
                }
            }
        }
        if first {
            self.0.wake.notify_one();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.wake.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks while nothing passed since the last sync; false once the zone is gone.
    fn wait_for_request(&self) -> bool {
        let mut p = self.lock();
        while p.passed.is_empty() && !p.closed {
            p = self.wake.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        !p.closed
    }

    /// The passes since the last sync, leaving none.
    fn take(&self) -> HashMap<Box<[u8]>, u64> {
        std::mem::take(&mut self.lock().passed)
    }
}

/// What the sync thread knows of one key.
struct Known {
    /// The Redis counter's total after our last report.
    total: i64,
    last_active: u64,
}

/// Runs until the zone is gone. Syncs only in intervals the zone had a request in: an idle
/// zone's thread sleeps until the next request and sends Redis nothing. That request wakes it
/// and it syncs at once, learning what the others passed meanwhile; `pour` adds that to the
/// buckets as of their last request here, so the drain over the idle spell is accounted as if
/// it had been learned every interval (the buckets end the same). Only the requests that arrive
/// within that first round trip are judged without it.
pub fn run(zone: Weak<Zone>, conf: FleetZone, name: String) {
    let Some(shared) = zone
        .upgrade()
        .and_then(|z| z.fleet.as_ref().map(|f| f.0.clone()))
    else {
        return;
    };
    let where_ = format!("{}:{}", conf.redis.host, conf.redis.port);
    let prefix = format!("{}limit:{}:", conf.redis.prefix, name);
    let mut conn: Option<Redis> = None;
    let mut known: HashMap<Box<[u8]>, Known> = HashMap::new();
    let mut failing = false;
    while shared.wait_for_request() {
        // Busy: a sync now, then one every interval while requests keep coming.
        loop {
            let pending = shared.take();
            if pending.is_empty() {
                break;
            }
            let Some(zone) = zone.upgrade() else {
                return;
            };
            let now = now_ms();
            known.retain(|k, v| {
                pending.contains_key(k) || now.saturating_sub(v.last_active) < IDLE_MS
            });
            // Every key passed here lately: ours to add, the others' to learn (INCRBY 0).
            let mut keys: Vec<(Box<[u8]>, u64)> = pending.into_iter().collect();
            for k in known.keys() {
                if keys.len() >= MAX_KEYS {
                    break;
                }
                if !keys.iter().any(|(p, _)| p == k) {
                    keys.push((k.clone(), 0));
                }
            }
            match sync(&mut conn, &conf, &prefix, &keys) {
                Ok(totals) => {
                    if failing {
                        failing = false;
                        tracing::info!(zone = %name, "limit-req: redis {where_} is back, the zone counts across the fleet again");
                    }
                    let mut remote = Vec::new();
                    for ((key, ours), total) in keys.into_iter().zip(totals) {
                        let ours = i64::try_from(ours).unwrap_or(i64::MAX);
                        let k = known.entry(key.clone()).or_insert(Known {
                            // First sight: what came before is history, not news.
                            total: total - ours,
                            last_active: now,
                        });
                        // A counter below what we knew was reset (expired, Redis restarted).
                        let others = (total - ours - k.total).max(0);
                        k.total = total;
                        if ours > 0 {
                            k.last_active = now;
                        }
                        if others > 0 {
                            remote.push((key, u64::try_from(others).unwrap_or(0)));
                        }
                    }
                    zone.pour(&remote);
                }
                Err(e) => {
                    conn = None;
                    known.clear();
                    if !failing {
                        failing = true;
                        tracing::warn!(zone = %name, "limit-req: redis {where_} failed, the zone limits this instance alone until it is back: {e}");
                    }
                }
            }
            drop(zone);
            std::thread::sleep(Duration::from_millis(conf.sync_ms));
        }
    }
}

/// One round trip: `INCRBY` and `EXPIRE` per key; the new totals.
fn sync(
    conn: &mut Option<Redis>,
    conf: &FleetZone,
    prefix: &str,
    keys: &[(Box<[u8]>, u64)],
) -> Result<Vec<i64>, String> {
    let c = match conn {
        Some(c) => c,
        None => conn.insert(timed(Store::Redis, Op::Get, || {
            Redis::connect(&conf.redis.host, conf.redis.port, TIMEOUT)
        })?),
    };
    let names: Vec<(String, String)> = keys
        .iter()
        .map(|(k, n)| (counter_name(prefix, k), n.to_string()))
        .collect();
    let mut commands: Vec<Vec<&[u8]>> = Vec::with_capacity(names.len() * 2);
    for (name, n) in &names {
        commands.push(vec![b"INCRBY", name.as_bytes(), n.as_bytes()]);
        commands.push(vec![b"EXPIRE", name.as_bytes(), COUNTER_TTL.as_bytes()]);
    }
    let replies = timed(Store::Redis, Op::Set, || c.pipeline(&commands))?;
    replies
        .chunks(2)
        .map(|pair| match pair {
            [Reply::Int(total), Reply::Int(_)] => Ok(*total),
            [other, ..] => Err(unexpected("INCRBY", other)),
            [] => Err("no answer".into()),
        })
        .collect()
}

/// The Redis key of a zone key: the prefix and the key in hex (keys are bytes).
fn counter_name(prefix: &str, key: &[u8]) -> String {
    let mut s = String::with_capacity(prefix.len() + key.len() * 2);
    s.push_str(prefix);
    for b in key {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_names_are_text() {
        assert_eq!(
            counter_name("h2o:limit:api:", &[4, 127, 0, 0, 1]),
            "h2o:limit:api:047f000001"
        );
    }
}
