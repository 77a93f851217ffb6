//! A TLS session cache shared by a fleet (`cache-store: memcached` or `redis`): TLS 1.2
//! session IDs (and TLS 1.3 stateful tickets) made on one instance resume on another.
//!
//! A local cache sits in front. A new session goes to the local cache at once and to the
//! store from a background thread (the handshake never waits for a write). A session the
//! local cache lacks is looked up in the store during the handshake: one round trip, each
//! step bounded by `cache-store-timeout`; after a failure the store is skipped for `RETRY_AFTER` (handshakes
//! fall back to full ones), so a dead store costs one timeout per `RETRY_AFTER`, not one per
//! handshake. One log line when the store fails, one when it is back.
//!
//! Keys and values are h2o's layout: the prefix (`h2o:ssl-session-cache:` by default)
//! followed by the base64url of the session ID, the session base64url-encoded. The values
//! themselves are rustls' session encoding, so h2o and spate do not resume each other's.

use crate::config::CacheStore;
use crate::fleet::item::ItemConn;
use crate::fleet::{base64url, unbase64, Store};
use rustls::server::{ServerSessionMemoryCache, StoresServerSessions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Bound on each step of the background writes.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a failed store is left alone by lookups.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Writes waiting for the background thread; beyond, new sessions stay local.
const QUEUE: usize = 1024;
/// Idle lookup connections kept.
const POOL: usize = 16;

enum Write {
    Set(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

pub struct SharedCache {
    local: Arc<ServerSessionMemoryCache>,
    remote: Arc<Remote>,
    writes: SyncSender<Write>,
}

struct Remote {
    store: Store,
    host: String,
    port: u16,
    prefix: String,
    /// Seconds a session is kept in the store.
    lifetime: u32,
    /// Bound on each step of a lookup.
    lookup_timeout: Duration,
    idle: Mutex<Vec<ItemConn>>,
    /// Milliseconds (of `clock`) before which lookups skip the store.
    skip_until: AtomicU64,
    failing: AtomicBool,
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("store", &self.remote.store)
            .field("host", &self.remote.host)
            .field("port", &self.remote.port)
            .finish_non_exhaustive()
    }
}

/// The shared cache of `store`, or `None` for the internal one.
pub fn shared(
    store: &CacheStore,
    size: usize,
    lifetime: Duration,
    lookup_timeout: Duration,
) -> Result<Option<Arc<SharedCache>>, String> {
    let (kind, server, prefix) = match store {
        CacheStore::Internal => return Ok(None),
        CacheStore::Memcached { server, prefix } => (Store::Memcached, server, prefix),
        CacheStore::Redis { server, prefix } => (Store::Redis, server, prefix),
    };
    // memcached reads an expiry beyond 30 days as a point in time.
    let lifetime = u32::try_from(lifetime.as_secs())
        .unwrap_or(u32::MAX)
        .clamp(1, 30 * 86_400);
    let remote = Arc::new(Remote {
        store: kind,
        host: server.host.clone(),
        port: server.port,
        prefix: prefix.clone(),
        lifetime,
        lookup_timeout,
        idle: Mutex::new(Vec::new()),
        skip_until: AtomicU64::new(0),
        failing: AtomicBool::new(false),
    });
    let (writes, queue) = sync_channel(QUEUE);
    let writer = remote.clone();
    std::thread::Builder::new()
        .name("session-cache".into())
        .spawn(move || writer.write_loop(queue))
        .map_err(|e| format!("cannot start the session cache thread: {e}"))?;
    Ok(Some(Arc::new(SharedCache {
        local: ServerSessionMemoryCache::new(size),
        remote,
        writes,
    })))
}

impl SharedCache {
    fn queue(&self, w: Write) {
        match self.writes.try_send(w) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            // The store is slower than handshakes come: this session stays local.
            Err(TrySendError::Full(_)) => {}
        }
    }
}

impl StoresServerSessions for SharedCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.local.put(key.clone(), value.clone());
        self.queue(Write::Set(key, value));
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(v) = self.local.get(key) {
            return Some(v);
        }
        let v = self.remote.lookup(key)?;
        self.local.put(key.to_vec(), v.clone());
        Some(v)
    }

    /// TLS 1.3 stateful tickets are single-use: taken here and from the store.
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let v = match self.local.take(key) {
            Some(v) => Some(v),
            None => self.remote.lookup(key),
        };
        if v.is_some() {
            self.queue(Write::Delete(key.to_vec()));
        }
        v
    }

    fn can_cache(&self) -> bool {
        true
    }
}

impl Remote {
    fn key(&self, id: &[u8]) -> String {
        format!("{}{}", self.prefix, base64url(id))
    }

    /// The session `id` from the store, if it is there and the store answers in time.
    fn lookup(&self, id: &[u8]) -> Option<Vec<u8>> {
        if clock_ms() < self.skip_until.load(Ordering::Relaxed) {
            return None;
        }
        let key = self.key(id);
        let pooled = self.idle.lock().ok().and_then(|mut p| p.pop());
        let r = match pooled {
            Some(c) => Ok(c),
            None => ItemConn::connect(self.store, &self.host, self.port, self.lookup_timeout),
        }
        .and_then(|mut c| c.get(&key).map(|v| (c, v)));
        match r {
            Ok((c, v)) => {
                self.up();
                if let Ok(mut p) = self.idle.lock() {
                    if p.len() < POOL {
                        p.push(c);
                    }
                }
                unbase64(&v?)
            }
            Err(e) => {
                self.down(&e);
                None
            }
        }
    }

    fn write_loop(&self, queue: Receiver<Write>) {
        let mut conn: Option<ItemConn> = None;
        while let Ok(w) = queue.recv() {
            if clock_ms() < self.skip_until.load(Ordering::Relaxed) {
                continue;
            }
            let c = match conn.take() {
                Some(c) => Ok(c),
                None => ItemConn::connect(self.store, &self.host, self.port, WRITE_TIMEOUT),
            };
            let r = c.and_then(|mut c| {
                match &w {
                    Write::Set(id, v) => {
                        c.set(&self.key(id), base64url(v).as_bytes(), self.lifetime)
                    }
                    Write::Delete(id) => c.delete(&self.key(id)),
                }
                .map(|()| c)
            });
            match r {
                Ok(c) => {
                    self.up();
                    conn = Some(c);
                }
                Err(e) => self.down(&e),
            }
        }
    }

    fn up(&self) {
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(
                "session cache: {} {}:{} is back",
                self.store.name(),
                self.host,
                self.port
            );
        }
    }

    fn down(&self, e: &str) {
        let ms = u64::try_from(RETRY_AFTER.as_millis()).unwrap_or(u64::MAX);
        self.skip_until.store(clock_ms() + ms, Ordering::Relaxed);
        if let Ok(mut p) = self.idle.lock() {
            p.clear();
        }
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "session cache: {} {}:{} failed, sessions stay local for now: {e}",
                self.store.name(),
                self.host,
                self.port
            );
        }
    }
}

/// Milliseconds since the first call (from 1, so that 0 means "never").
fn clock_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    1 + u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StoreServer;
    use std::io::{Read, Write as _};
    use std::net::TcpListener;
    use std::sync::atomic::AtomicUsize;

    /// A "store" that answers every connection's first command with garbage, counting them.
    fn garbage_store() -> (u16, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                count.fetch_add(1, Ordering::Relaxed);
                let mut buf = [0; 512];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HELLO THERE\r\n");
            }
        });
        (port, accepted)
    }

    #[test]
    fn a_store_answering_garbage_is_a_miss_then_left_alone() {
        for (kind, store) in [("memcached", Store::Memcached), ("redis", Store::Redis)] {
            let (port, accepted) = garbage_store();
            let server = StoreServer {
                host: "127.0.0.1".into(),
                port,
                prefix: "p:".into(),
            };
            let conf = match store {
                Store::Memcached => CacheStore::Memcached {
                    server,
                    prefix: "p:".into(),
                },
                Store::Redis => CacheStore::Redis {
                    server,
                    prefix: "p:".into(),
                },
            };
            let cache = shared(&conf, 16, Duration::from_secs(60), Duration::from_secs(1))
                .expect("cache")
                .expect("shared");
            assert_eq!(cache.get(b"unknown"), None, "{kind}");
            assert_eq!(accepted.load(Ordering::Relaxed), 1, "{kind}");
            // Within RETRY_AFTER the store is not asked again; local sessions still work.
            assert_eq!(cache.get(b"other"), None, "{kind}");
            assert_eq!(accepted.load(Ordering::Relaxed), 1, "{kind}");
            assert!(cache.put(b"id".to_vec(), b"session".to_vec()));
            assert_eq!(cache.get(b"id").as_deref(), Some(&b"session"[..]), "{kind}");
            assert_eq!(
                cache.take(b"id").as_deref(),
                Some(&b"session"[..]),
                "{kind}"
            );
        }
    }
}
