//! The memory store: responses by primary key (method, scheme, authority, target), each key
//! with its variants (`Vary`, §4.1), within a byte budget, least recently used out first.
//! One store serves every worker of the process, behind one lock held only for a lookup or
//! an insertion (never across I/O).
//!
//! It also holds the fills under way (collapsed forwarding): the first miss of a key becomes
//! its [`Leader`]; later misses follow and wait until the leader's guard drops, when the
//! response is stored or known not to be.

use super::disk::Disk;
use super::policy;
pub use super::stored::{vary_matches, Stored, Vary};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

/// A request's lines of one field as one value: joined with ", ", blanks around commas
/// dropped, so `a,b` and `a, b` select the same variant (§4.1). `None` when absent.
pub fn normalized<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<Bytes> {
    let mut out: Option<Vec<u8>> = None;
    for line in lines {
        for item in line.split(|&b| b == b',') {
            let buf = out.get_or_insert_with(Vec::new);
            if !buf.is_empty() {
                buf.extend_from_slice(b", ");
            }
            buf.extend_from_slice(item.trim_ascii());
        }
    }
    out.map(Bytes::from)
}

/// A request's value of the field `name` (lowercase) as variants are told apart by:
/// [`normalized`], and for `Accept-Language` and `Accept-Encoding`, whose members are
/// case-insensitive and equally preferred unless weighted, lowercase with the members sorted
/// (`en, DE` and `de, en` select one variant).
pub fn vary_value<'a>(name: &[u8], lines: impl Iterator<Item = &'a [u8]>) -> Option<Bytes> {
    let value = normalized(lines)?;
    if name != b"accept-language" && name != b"accept-encoding" {
        return Some(value);
    }
    let lower = value.to_ascii_lowercase();
    let mut members: Vec<Vec<u8>> = lower
        .split(|&b| b == b',')
        .map(|m| {
            m.iter()
                .copied()
                .filter(|b| *b != b' ' && *b != b'\t')
                .collect()
        })
        .filter(|m: &Vec<u8>| !m.is_empty())
        .collect();
    members.sort();
    Some(Bytes::from(members.join(&b", "[..])))
}

/// The names a response varies on, lowercase.
pub fn vary_names(headers: &[(Bytes, Bytes)]) -> Vec<Bytes> {
    policy::fields(headers, b"vary")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|n| !n.is_empty())
        .map(|n| Bytes::from(n.to_ascii_lowercase()))
        .collect()
}

/// The outcome of a lookup.
pub enum Found {
    /// A variant for this request.
    Hit(Arc<Stored>),
    /// The key has entries, none for this request's fields.
    VaryMiss,
    Miss,
}

/// Counts the store keeps, for metrics (relaxed atomics: the workers share the store).
#[derive(Debug, Default)]
pub struct Counts {
    /// Answered from the store, fresh (or stale as allowed).
    pub hits: AtomicU64,
    /// Fresh hits given again from a connection's or a worker's memo of the answer, without
    /// a lookup (`http::repeat`'s lease): hits too. Shared with the entries.
    pub repeated: Arc<AtomicU64>,
    /// Went to the backend: no entry, no variant, or not usable.
    pub misses: AtomicU64,
    /// Stale entries revalidated with the backend and found unchanged (304).
    pub revalidated: AtomicU64,
    /// Misses that waited for another request's fetch of the key.
    pub collapsed: AtomicU64,
    /// Stale entries answered (stale-while-revalidate, stale-if-error).
    pub stale: AtomicU64,
    /// Variants dropped by PURGE requests.
    pub purged: AtomicU64,
    pub stored: AtomicU64,
    pub evicted: AtomicU64,
    /// Bytes of the responses stored and evicted.
    pub stored_bytes: AtomicU64,
    pub evicted_bytes: AtomicU64,
}

impl Counts {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

pub struct Store {
    budget: usize,
    max_object: usize,
    inner: Mutex<Inner>,
    pub counts: Counts,
    /// The disk store behind the memory one: every response stored goes to both, and a
    /// memory miss is looked for there (and brought back into memory).
    pub disk: Option<Disk>,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<Bytes, Slot>,
    /// Use order: tick -> key; the smallest tick is the least recently used. A hit only
    /// marks its variant's `used`; the order is brought up to date at eviction, so a hit
    /// costs no reordering.
    lru: BTreeMap<u64, Bytes>,
    tick: u64,
    bytes: usize,
}

#[derive(Default)]
struct Slot {
    variants: Vec<Variant>,
    fill: Option<Arc<Fill>>,
}

struct Variant {
    /// Its place in the use order.
    tick: u64,
    /// When it was last used (at least `tick`).
    used: u64,
    stored: Arc<Stored>,
}

impl Store {
    pub fn new(budget: u64, max_object: u64) -> Store {
        Store {
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            max_object: usize::try_from(max_object).unwrap_or(usize::MAX),
            inner: Mutex::new(Inner::default()),
            counts: Counts::default(),
            disk: None,
        }
    }

    /// The store with `disk` behind its memory.
    pub fn with_disk(mut self, disk: Disk) -> Store {
        self.disk = Some(disk);
        self
    }

    /// The largest body stored.
    pub fn max_object(&self) -> usize {
        self.max_object
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The variant of `key` for a request whose fields `request` gives, marked used.
    /// `request` gives the request's value of a field, [`normalized`].
    pub fn lookup(&self, key: &[u8], request: impl Fn(&[u8]) -> Option<Bytes>) -> Found {
        let found = self.lookup_memory(key, &request);
        if matches!(found, Found::Hit(_)) {
            return found;
        }
        let Some(stored) = self.disk.as_ref().and_then(|d| d.read(key, &request)) else {
            return found;
        };
        let mut stored = stored;
        stored.live.count_in(&self.counts.repeated);
        let stored = Arc::new(stored);
        if !self.put(Bytes::copy_from_slice(key), stored.clone(), false) {
            // Not in memory: nothing would tell a memo of it that the file went.
            stored.live.end();
        }
        Found::Hit(stored)
    }

    fn lookup_memory(&self, key: &[u8], request: &impl Fn(&[u8]) -> Option<Bytes>) -> Found {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(slot) = inner.keys.get_mut(key) else {
            return Found::Miss;
        };
        if slot.variants.is_empty() {
            return Found::Miss;
        }
        let Some(v) = slot.variants.iter_mut().find(|v| v.stored.matches(request)) else {
            return Found::VaryMiss;
        };
        inner.tick += 1;
        v.used = inner.tick;
        Found::Hit(v.stored.clone())
    }

    /// Stores `stored` under `key`, in place of the variant with the same varying values;
    /// the least recently used go until it fits. A response over the object size limit is
    /// not stored. Returns whether it was. With a disk store, it is written there too.
    pub fn insert(&self, key: Bytes, mut stored: Stored) -> bool {
        if stored.body.len() > self.max_object {
            return false;
        }
        stored.live.count_in(&self.counts.repeated);
        let stored = Arc::new(stored);
        let in_memory = self.put(key.clone(), stored.clone(), true);
        match &self.disk {
            Some(d) => d.write(&key, &stored) || in_memory,
            None => in_memory,
        }
    }

    /// Puts `stored` in memory (`new`: a response just stored, counted, rather than one
    /// brought back from disk).
    fn put(&self, key: Bytes, stored: Arc<Stored>, new: bool) -> bool {
        let size = stored.size();
        if size > self.budget {
            return false;
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.tick += 1;
        let tick = inner.tick;
        let slot = inner.keys.entry(key.clone()).or_default();
        if let Some(i) = slot
            .variants
            .iter()
            .position(|v| v.stored.vary == stored.vary)
        {
            let old = slot.variants.swap_remove(i);
            old.stored.live.end();
            inner.bytes -= old.stored.size();
            inner.lru.remove(&old.tick);
        }
        slot.variants.push(Variant {
            tick,
            used: tick,
            stored,
        });
        inner.lru.insert(tick, key);
        inner.bytes += size;
        if new {
            self.counts.stored.fetch_add(1, Ordering::Relaxed);
            self.counts
                .stored_bytes
                .fetch_add(size as u64, Ordering::Relaxed);
        }
        while inner.bytes > self.budget {
            let Some((old_tick, old_key)) = inner.lru.pop_first() else {
                break;
            };
            // Used since it took this place: it moves to its place of last use instead.
            let used = inner.keys.get_mut(&old_key).and_then(|slot| {
                let v = slot.variants.iter_mut().find(|v| v.tick == old_tick)?;
                (v.used > old_tick).then(|| {
                    v.tick = v.used;
                    v.used
                })
            });
            if let Some(used) = used {
                inner.lru.insert(used, old_key);
                continue;
            }
            let freed = self.drop_variant(inner, &old_key, old_tick);
            self.counts.evicted.fetch_add(1, Ordering::Relaxed);
            self.counts
                .evicted_bytes
                .fetch_add(freed as u64, Ordering::Relaxed);
        }
        true
    }

    /// Drops one variant; returns the bytes it was charged.
    fn drop_variant(&self, inner: &mut Inner, key: &Bytes, tick: u64) -> usize {
        let Some(slot) = inner.keys.get_mut(key) else {
            return 0;
        };
        let mut freed = 0;
        if let Some(i) = slot.variants.iter().position(|v| v.tick == tick) {
            let old = slot.variants.swap_remove(i);
            old.stored.live.end();
            freed = old.stored.size();
            inner.bytes -= freed;
        }
        if slot.variants.is_empty() && slot.fill.is_none() {
            inner.keys.remove(key);
        }
        freed
    }

    /// Drops every variant of `key` (§4.4); returns how many there were.
    pub fn invalidate(&self, key: &[u8]) -> usize {
        let in_memory = Self::remove_key(&mut self.lock(), key);
        let on_disk = self.disk.as_ref().map_or(0, |d| d.remove(key));
        in_memory.max(on_disk)
    }

    /// Drops every variant of every key that starts with `prefix`; returns how many.
    pub fn invalidate_prefix(&self, prefix: &[u8]) -> usize {
        let mut inner = self.lock();
        let keys: Vec<Bytes> = inner
            .keys
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        let in_memory = keys.iter().map(|k| Self::remove_key(&mut inner, k)).sum();
        drop(inner);
        let on_disk = self.disk.as_ref().map_or(0, |d| d.remove_prefix(prefix));
        std::cmp::max(in_memory, on_disk)
    }

    fn remove_key(inner: &mut Inner, key: &[u8]) -> usize {
        let Some(slot) = inner.keys.get_mut(key) else {
            return 0;
        };
        let n = slot.variants.len();
        for v in slot.variants.drain(..) {
            v.stored.live.end();
            inner.bytes -= v.stored.size();
            inner.lru.remove(&v.tick);
        }
        if slot.fill.is_none() {
            inner.keys.remove(key);
        }
        n
    }

    /// The bytes charged now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries (variants) held now.
    pub fn len(&self) -> usize {
        self.lock().lru.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fill of `key`: `Lead` when none is under way (the caller fetches and stores, and
    /// the others wait for its guard to drop), `Follow` with the one under way.
    pub fn fill(self: &Arc<Self>, key: &Bytes) -> Role {
        let mut inner = self.lock();
        let slot = inner.keys.entry(key.clone()).or_default();
        if let Some(fill) = &slot.fill {
            return Role::Follow(Wait {
                fill: fill.clone(),
                registered: false,
            });
        }
        let fill = Arc::new(Fill::default());
        slot.fill = Some(fill.clone());
        Role::Lead(Leader {
            store: Arc::downgrade(self),
            key: key.clone(),
            fill,
        })
    }
}

/// One fetch under way that other requests wait for.
#[derive(Default)]
pub struct Fill {
    done: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

pub enum Role {
    Lead(Leader),
    Follow(Wait),
}

/// The request that fetches for the key; dropping it (stored or not) wakes the followers.
pub struct Leader {
    store: Weak<Store>,
    key: Bytes,
    fill: Arc<Fill>,
}

impl Drop for Leader {
    fn drop(&mut self) {
        if let Some(store) = self.store.upgrade() {
            let mut inner = store.lock();
            if let Some(slot) = inner.keys.get_mut(&self.key) {
                if slot
                    .fill
                    .as_ref()
                    .is_some_and(|f| Arc::ptr_eq(f, &self.fill))
                {
                    slot.fill = None;
                }
                if slot.variants.is_empty() && slot.fill.is_none() {
                    inner.keys.remove(&self.key);
                }
            }
        }
        self.fill.done.store(true, Ordering::Release);
        let wakers = std::mem::take(
            &mut *self
                .fill
                .wakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for w in wakers {
            w.wake();
        }
    }
}

/// A follower waiting for the leader to finish.
pub struct Wait {
    fill: Arc<Fill>,
    registered: bool,
}

impl Future for Wait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.fill.done.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        {
            let mut wakers = self
                .fill
                .wakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Checked again under the lock: the leader sets `done` before taking the wakers.
            if self.fill.done.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            if !self.registered {
                wakers.push(cx.waker().clone());
            } else if let Some(w) = wakers.iter_mut().find(|w| w.will_wake(cx.waker())) {
                w.clone_from(cx.waker());
            } else {
                wakers.push(cx.waker().clone());
            }
        }
        self.registered = true;
        Poll::Pending
    }
}

/// The process's stores, one per `proxy.cache` directive (by where it is written and its
/// sizes): the workers share it, and a reload that keeps the directive keeps the store.
static STORES: Mutex<Vec<(StoreKey, Weak<Store>)>> = Mutex::new(Vec::new());

/// The stores in use, each labelled `file:line` of its `proxy.cache`, for metrics.
pub fn all() -> Vec<(String, Arc<Store>)> {
    let stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
    stores
        .iter()
        .filter_map(|((file, line, ..), s)| Some((format!("{file}:{line}"), s.upgrade()?)))
        .collect()
}

type StoreKey = (String, u32, u64, u64, Option<(PathBuf, u64)>);

/// The store of the `proxy.cache` at `file:line` with these limits, and with the disk store
/// in `disk` (a directory and its budget) when given. A disk store that cannot be opened is
/// logged and left out (`prepare` has checked the directory already).
pub fn shared(
    file: &str,
    line: u32,
    budget: u64,
    max_object: u64,
    disk: Option<(&Path, u64)>,
) -> Arc<Store> {
    let key = (
        file.to_owned(),
        line,
        budget,
        max_object,
        disk.map(|(p, n)| (p.to_path_buf(), n)),
    );
    let mut stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
    stores.retain(|(_, s)| s.strong_count() > 0);
    if let Some(s) = stores
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, s)| s.upgrade())
    {
        return s;
    }
    let mut store = Store::new(budget, max_object);
    if let Some((dir, size)) = disk {
        match Disk::open(dir, size) {
            Ok(d) => store = store.with_disk(d),
            Err(e) => tracing::error!(dir = %dir.display(), error = %e,
                "proxy.cache: the disk store cannot be opened; memory only"),
        }
    }
    let store = Arc::new(store);
    stores.push((key, Arc::downgrade(&store)));
    store
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::control::ResponseControl;
    use crate::cache::policy::Timing;

    fn stored(body: usize, vary: &[(&str, Option<&str>)]) -> Stored {
        Stored {
            status: 200,
            headers: Vec::new(),
            body: Bytes::from(vec![b'x'; body]),
            trailers: Vec::new(),
            timing: Timing {
                request_time: 0,
                response_time: 0,
                initial_age: 0,
            },
            control: ResponseControl::default(),
            lifetime: 60,
            vary: vary
                .iter()
                .map(|(n, v)| {
                    (
                        Bytes::copy_from_slice(n.as_bytes()),
                        v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                    )
                })
                .collect(),
            live: Default::default(),
        }
    }

    fn no_fields(_: &[u8]) -> Option<Bytes> {
        None
    }

    #[test]
    fn least_recently_used_go_first_within_the_budget() {
        let one = stored(1000, &[]).size();
        let store = Store::new(3 * one as u64, 2000);
        for k in ["a", "b", "c"] {
            assert!(store.insert(Bytes::from(k), stored(1000, &[])));
        }
        assert!(matches!(store.lookup(b"a", no_fields), Found::Hit(_)));
        assert!(store.insert(Bytes::from("d"), stored(1000, &[])));
        // b was the least recently used.
        assert!(matches!(store.lookup(b"b", no_fields), Found::Miss));
        assert!(matches!(store.lookup(b"a", no_fields), Found::Hit(_)));
        assert_eq!(store.len(), 3);
        assert!(store.bytes() <= 3 * one);
        assert!(!store.insert(Bytes::from("e"), stored(3000, &[])));
        assert_eq!(store.invalidate(b"a"), 1);
        assert!(matches!(store.lookup(b"a", no_fields), Found::Miss));
        assert_eq!(store.len(), 2);
        assert_eq!(store.invalidate_prefix(b""), 2);
        assert_eq!((store.len(), store.bytes()), (0, 0));
    }

    #[test]
    fn variants_by_vary() {
        let store = Store::new(1 << 20, 1 << 20);
        let key = Bytes::from("k");
        assert!(store.insert(key.clone(), stored(10, &[("accept-language", Some("en"))])));
        assert!(store.insert(key.clone(), stored(20, &[("accept-language", Some("de"))])));
        let de = |n: &[u8]| {
            normalized(
                (n == b"accept-language")
                    .then_some(&b"de,fr"[..])
                    .into_iter(),
            )
        };
        assert!(matches!(store.lookup(b"k", de), Found::VaryMiss));
        let de = |n: &[u8]| normalized((n == b"accept-language").then_some(&b"de"[..]).into_iter());
        match store.lookup(b"k", de) {
            Found::Hit(s) => assert_eq!(s.body.len(), 20),
            _ => panic!("no hit"),
        }
        // The same variant again replaces it.
        assert!(store.insert(key.clone(), stored(30, &[("accept-language", Some("de"))])));
        assert_eq!(store.len(), 2);
        assert_eq!(
            normalized([&b"a,b"[..], b" c "].into_iter()).as_deref(),
            Some(&b"a, b, c"[..])
        );
    }

    #[test]
    fn followers_wait_for_the_leader() {
        let store = Arc::new(Store::new(1 << 20, 1 << 20));
        let key = Bytes::from("k");
        let Role::Lead(leader) = store.fill(&key) else {
            panic!("first is not the leader")
        };
        let Role::Follow(mut wait) = store.fill(&key) else {
            panic!("second does not follow")
        };
        let waker = futures_noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        drop(leader);
        assert!(Pin::new(&mut wait).poll(&mut cx).is_ready());
        assert!(matches!(store.fill(&key), Role::Lead(_)));
    }

    fn futures_noop_waker() -> Waker {
        Waker::noop().clone()
    }
}
