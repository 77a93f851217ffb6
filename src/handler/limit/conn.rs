//! `limit-conn`: nginx's `limit_conn`. A zone counts, per key, the requests in progress (an
//! HTTP/2 or HTTP/3 stream is one request); a request over the zone's `conn` for its key is
//! refused. The place is held by a [`Held`] that travels with the answer (its pending future,
//! then its streamed body) and is given back when the answer is done or dropped. A zone is
//! shared by every worker and holds at most `size` keys: a request of a new key that finds it
//! full is refused, as nginx's.

use crate::config::{LimitConnConf, LimitConnZone, LimitKey};
use crate::http::{Request, Response};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

/// One `limit-conn` of a path.
pub struct ConnLimit {
    zone: Arc<ConnZone>,
    conf: LimitConnConf,
}

/// A place a request holds in a zone, given back on drop.
pub struct Held {
    zone: Arc<ConnZone>,
    key: Box<[u8]>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut counts = self.zone.lock();
        if let Some(n) = counts.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

impl ConnLimit {
    pub fn new(conf: &LimitConnConf) -> ConnLimit {
        ConnLimit {
            zone: ConnZone::shared(&conf.zone),
            conf: conf.clone(),
        }
    }

    /// Takes a place for `req`: `Ok(None)` when it is not counted (no key, or dry-run over
    /// the limit), the refusal when the key is at its limit or the zone is full.
    pub fn acquire(&self, req: &Request, client: IpAddr) -> Result<Option<Held>, Response> {
        let mut buf = [0u8; 17];
        let key: &[u8] = match &self.conf.zone.key {
            LimitKey::Client => super::ip_key(client, &mut buf),
            LimitKey::Header(name) => match req.header(name.as_bytes()) {
                Some(v) if !v.is_empty() => &v[..v.len().min(super::MAX_KEY)],
                // nginx does not count an empty key.
                _ => return Ok(None),
            },
        };
        let zone = &self.conf.zone.name;
        let mut counts = self.zone.lock();
        let full = !counts.contains_key(key) && counts.len() >= self.conf.zone.size;
        let n = counts.get(key).copied().unwrap_or(0);
        if full || n >= self.conf.conn {
            drop(counts);
            let why = if full {
                "zone full"
            } else {
                "too many requests in progress"
            };
            if self.conf.dry_run {
                tracing::info!(client = %client, zone = %zone, "limit-conn: would refuse (dry-run): {why}");
                return Ok(None);
            }
            tracing::info!(client = %client, zone = %zone, status = self.conf.status, "limit-conn: refused: {why}");
            return Err(Response::error(self.conf.status));
        }
        *counts.entry(key.into()).or_insert(0) += 1;
        Ok(Some(Held {
            zone: self.zone.clone(),
            key: key.into(),
        }))
    }
}

/// A zone's counts, shared by the workers.
struct ConnZone {
    conf: LimitConnZone,
    counts: Mutex<HashMap<Box<[u8]>, u32>>,
}

impl ConnZone {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<[u8]>, u32>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The zone of this name and settings, the one still alive if there is one (a reload
    /// that keeps it keeps the requests in progress counted).
    fn shared(conf: &LimitConnZone) -> Arc<ConnZone> {
        static ZONES: Mutex<Vec<Weak<ConnZone>>> = Mutex::new(Vec::new());
        let mut zones = ZONES.lock().unwrap_or_else(|e| e.into_inner());
        zones.retain(|z| z.strong_count() > 0);
        let same = |z: &ConnZone| {
            z.conf.name == conf.name && z.conf.key == conf.key && z.conf.size == conf.size
        };
        if let Some(z) = zones.iter().filter_map(Weak::upgrade).find(|z| same(z)) {
            return z;
        }
        let z = Arc::new(ConnZone {
            conf: conf.clone(),
            counts: Mutex::new(HashMap::new()),
        });
        zones.push(Arc::downgrade(&z));
        z
    }
}

/// Keeps `held` with a streamed body until the body ends or is dropped.
pub struct HeldStream {
    pub inner: Box<dyn crate::http::BodyStream>,
    pub held: Vec<Held>,
}

impl crate::http::BodyStream for HeldStream {
    fn poll_frame(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<crate::http::body::Next> {
        let next = self.inner.poll_frame(cx);
        if let std::task::Poll::Ready(None | Some(Err(_))) = &next {
            self.held.clear();
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Location;

    fn limit(conn: u32, size: usize, name: &str) -> ConnLimit {
        ConnLimit::new(&LimitConnConf {
            zone: LimitConnZone {
                name: name.into(),
                key: LimitKey::Client,
                size,
                at: Location {
                    file: "t".into(),
                    line: 1,
                },
            },
            conn,
            status: 503,
            dry_run: false,
        })
    }

    #[test]
    fn places_are_counted_per_key_and_given_back() {
        let l = limit(2, 10, "conn-test-a");
        let req = Request::for_test(crate::http::Method::Get, "/", &[]);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let one = l.acquire(&req, a).unwrap();
        let two = l.acquire(&req, a).unwrap();
        assert_eq!(l.acquire(&req, a).err().map(|r| r.status), Some(503));
        // Another key has its own count.
        assert!(l.acquire(&req, b).unwrap().is_some());
        drop(one);
        let three = l.acquire(&req, a).unwrap();
        drop((two, three));
        // The key left the zone with its last request.
        assert!(l.zone.lock().is_empty());
    }

    #[test]
    fn a_full_zone_refuses_new_keys() {
        let l = limit(5, 1, "conn-test-b");
        let req = Request::for_test(crate::http::Method::Get, "/", &[]);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let held = l.acquire(&req, a).unwrap();
        let other = l.acquire(&req, "192.0.2.9".parse().unwrap());
        assert_eq!(other.err().map(|r| r.status), Some(503));
        assert!(l.acquire(&req, a).unwrap().is_some());
        drop(held);
        assert!(l.acquire(&req, "192.0.2.9".parse().unwrap()).is_ok());
    }
}
