//! The per-worker open-file cache: request key -> open file with its validators preformatted,
//! so a hit costs one hash lookup and no syscall. Entries are checked against the filesystem
//! with `stat` once they are older than the revalidation interval; a changed file is reopened,
//! a vanished one evicted.

use super::encoding::Coding;
use crate::config::MimeTypes;
use crate::http::recycle::HeaderList;
use crate::http::OpenFile;
use bytes::Bytes;
use rustc_hash::FxHashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::rc::Rc;
use std::time::Duration;

/// Entries kept per worker before the least recently used one is dropped (each holds an
/// open descriptor).
pub const DEFAULT_CAPACITY: usize = 4096;
/// Bytes of small files' contents a cache keeps in memory before the least recently used entry
/// is dropped, unless set (the router gives each worker its share of `file.memory-cache-size`).
pub const DEFAULT_CONTENTS_BUDGET: u64 = crate::config::FILE_MEMORY_CACHE_SIZE;
/// Entries compared to choose the one to drop when the cache is full.
const EVICTION_SAMPLE: usize = 8;
/// How old an entry may get before it is checked with `stat`.
pub const DEFAULT_REVALIDATE_AFTER: Duration = Duration::from_secs(1);
/// Files up to this size are read into memory when opened and answered from there
/// (`file.memory-cache-max-file-size`).
pub const SMALL_FILE: u64 = crate::config::FILE_MEMORY_CACHE_MAX_FILE;

/// Per-worker cache of open files, shared by every file handler of the worker.
pub struct OpenFileCache {
    /// Key -> index into `entries`. The indirection lets a hit be one lookup that can still
    /// evict a stale entry without a second one.
    /// Fx, not SipHash: the keys are files that exist (a peer cannot fill the map with
    /// colliding keys), and the hash is on every request's path.
    map: FxHashMap<Box<[u8]>, usize>,
    entries: Vec<Slot>,
    /// The index of the last entry found, tried before hashing: a worker answering the same
    /// file again (a benchmark, a page's hot asset) compares one key instead of hashing and
    /// probing. Any removal or insertion forgets it.
    last: Option<usize>,
    /// Where the next eviction starts sampling (see [`OpenFileCache::victim`]).
    hand: usize,
    capacity: usize,
    /// Bytes of file contents the entries hold in memory, and the most they may.
    held: u64,
    budget: u64,
    /// Files up to this size are held in memory ([`SMALL_FILE`] unless configured).
    hold_max: u64,
    revalidate_after: Duration,
    /// Distinct (mime map, index list) settings of the handlers using this cache; an entry
    /// remembers which one resolved it.
    profiles: Vec<Profile>,
}

/// The handler settings a cache entry depends on: `file.mime.*` and `file.index`.
type Profile = (MimeTypes, Vec<String>);

struct Slot {
    key: Box<[u8]>,
    entry: Entry,
}

impl OpenFileCache {
    pub fn new() -> OpenFileCache {
        OpenFileCache::with_capacity(DEFAULT_CAPACITY)
    }

    pub fn with_capacity(capacity: usize) -> OpenFileCache {
        OpenFileCache {
            map: FxHashMap::default(),
            entries: Vec::new(),
            last: None,
            hand: 0,
            capacity: capacity.max(1),
            held: 0,
            budget: DEFAULT_CONTENTS_BUDGET,
            hold_max: SMALL_FILE,
            revalidate_after: DEFAULT_REVALIDATE_AFTER,
            profiles: Vec::new(),
        }
    }

    /// How long an entry is trusted without a `stat`; zero checks on every request.
    pub fn set_revalidate_after(&mut self, after: Duration) {
        self.revalidate_after = after;
        for slot in &mut self.entries {
            slot.entry.fresh_until = fresh_until(slot.entry.checked, after);
            slot.entry.vouch();
        }
    }

    /// The most bytes of small files' contents the entries may hold in memory.
    pub fn set_contents_budget(&mut self, budget: u64) {
        self.budget = budget;
    }

    /// The most bytes of files' contents the entries may hold in memory.
    pub fn contents_budget(&self) -> u64 {
        self.budget
    }

    /// Files up to `size` bytes are read into memory when opened (0: none is).
    pub fn set_hold_max(&mut self, size: u64) {
        self.hold_max = size;
    }

    /// The largest file read into memory when opened.
    pub fn hold_max(&self) -> u64 {
        self.hold_max
    }

    /// Number of cached entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Closes every cached file (used when the process runs out of descriptors).
    pub fn clear(&mut self) {
        self.last = None;
        self.map.clear();
        self.entries.clear();
        self.held = 0;
    }

    /// The id handlers with these settings share; entries resolved under another id have a
    /// content type or index file that may not apply.
    pub(super) fn profile(&mut self, mime_types: &MimeTypes, index: &[String]) -> usize {
        if let Some(i) = self
            .profiles
            .iter()
            .position(|(m, x)| m == mime_types && x.as_slice() == index)
        {
            return i;
        }
        self.profiles.push((mime_types.clone(), index.to_vec()));
        self.profiles.len() - 1
    }

    /// The entry for `key` if it is still valid: fresh, or stale but unchanged on disk.
    pub(super) fn lookup(&mut self, key: &[u8], now: Tick) -> Option<&mut Entry> {
        let i = match self.last {
            Some(i) if *self.entries[i].key == *key => i,
            _ => *self.map.get(key)?,
        };
        self.last = Some(i);
        if now >= self.entries[i].entry.fresh_until {
            let entry = &mut self.entries[i].entry;
            let same = match std::fs::metadata(OsStr::from_bytes(&entry.path)) {
                Ok(meta) => entry.main.id == FileId::of(&meta),
                Err(_) => false,
            };
            if !same {
                self.remove_at(i);
                return None;
            }
            // The siblings may have changed on their own: probe them again when asked.
            entry.forget_variants();
            entry.checked = now;
            entry.fresh_until = fresh_until(now, self.revalidate_after);
            entry.vouch();
        }
        let entry = &mut self.entries[i].entry;
        entry.used = now;
        Some(entry)
    }

    /// Stores `entry` under `key`, dropping the least recently used entry when full.
    pub(super) fn insert(&mut self, key: &[u8], mut entry: Entry) -> &mut Entry {
        self.last = None;
        entry.fresh_until = fresh_until(entry.checked, self.revalidate_after);
        entry.vouch();
        let size = entry.held();
        if let Some(&i) = self.map.get(key) {
            self.held = self.held - self.entries[i].entry.held() + size;
            self.entries[i].entry = entry;
            return &mut self.entries[i].entry;
        }
        while !self.entries.is_empty()
            && (self.entries.len() >= self.capacity || self.held + size > self.budget)
        {
            let i = self.victim();
            self.remove_at(i);
        }
        self.held += size;
        let i = self.entries.len();
        self.map.insert(key.into(), i);
        self.entries.push(Slot {
            key: key.into(),
            entry,
        });
        &mut self.entries[i].entry
    }

    /// The entry to drop for a new one: the least recently used of a few, sampled from a hand
    /// that moves round the entries. A scan of them all would cost a full cache's worth of
    /// compares on every miss, which is what traffic over more files than the cache holds
    /// does all the time; a sample of [`EVICTION_SAMPLE`] nearly always holds one of the
    /// oldest. `entries` is not empty.
    fn victim(&mut self) -> usize {
        let n = self.entries.len();
        let start = self.hand % n;
        let sample = EVICTION_SAMPLE.min(n);
        self.hand = start + sample;
        (start..start + sample)
            .map(|i| i % n)
            .min_by_key(|&i| self.entries[i].entry.used)
            .unwrap_or(start)
    }

    /// Drops entry `i`, moving the last entry into its place.
    fn remove_at(&mut self, i: usize) {
        self.last = None;
        let slot = self.entries.swap_remove(i);
        self.held -= slot.entry.held();
        self.map.remove(&slot.key);
        if let Some(moved) = self.entries.get(i) {
            if let Some(index) = self.map.get_mut(&moved.key) {
                *index = i;
            }
        }
    }
}

impl Default for OpenFileCache {
    fn default() -> Self {
        Self::new()
    }
}

/// When an entry checked at `checked` is next checked; far intervals that do not fit a
/// [`Tick`] check at once (the safe side).
fn fresh_until(checked: Tick, after: Duration) -> Tick {
    u64::try_from(after.as_nanos())
        .ok()
        .and_then(|after| checked.0.checked_add(after))
        .map_or(checked, Tick)
}

/// A reading of the coarse monotonic clock in nanoseconds. Every hit reads the time; the
/// coarse clock (the kernel's tick, a few milliseconds, far finer than the revalidation
/// interval) is read without the time-stamp counter and without the `Duration`
/// normalisation of `Instant`, at about a third of the cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Tick(u64);

impl Tick {
    /// The files' `reuse_until` is on the same clock.
    #[inline]
    pub fn now() -> Tick {
        Tick(crate::http::clock::coarse_ns())
    }
}

/// One cached answer: the file a request key resolves to.
pub(super) struct Entry {
    /// The file's path (for a directory key, the index file's).
    pub path: Box<[u8]>,
    pub main: Representation,
    pub content_type: Bytes,
    /// The handler profile that resolved this entry (see [`OpenFileCache::profile`]).
    pub profile: usize,
    /// Precompressed siblings by [`Coding::index`]; `None` until probed.
    pub variants: Option<[Option<Representation>; 2]>,
    checked: Tick,
    /// `checked` plus the revalidation interval: compared as it is on every hit.
    fresh_until: Tick,
    used: Tick,
}

impl Entry {
    pub fn new(path: &[u8], main: Representation, content_type: Bytes, profile: usize) -> Entry {
        let now = Tick::now();
        Entry {
            path: path.into(),
            main,
            content_type,
            profile,
            variants: None,
            checked: now,
            fresh_until: now,
            used: now,
        }
    }

    /// Bytes of the main file's contents held in memory (what the cache's budget counts;
    /// precompressed siblings, opened later and only with `file.send-compressed`, are not).
    fn held(&self) -> u64 {
        self.main
            .file
            .contents
            .as_ref()
            .map_or(0, |c| c.len() as u64)
    }

    /// Tells the entry's open files until when the cache trusts them unchecked
    /// ([`OpenFile::reuse_until`]): an answer made from one may be given again until then.
    fn vouch(&self) {
        self.main.file.reuse_until.set(self.fresh_until.0);
        for rep in self.variants.iter().flatten().flatten() {
            rep.file.reuse_until.set(self.fresh_until.0);
        }
    }

    /// Drops the siblings (to probe them again), and what was vouched for them.
    fn forget_variants(&mut self) {
        for rep in self.variants.take().iter().flatten().flatten() {
            rep.file.reuse_until.set(0);
        }
    }

    /// The `.br` / `.gz` siblings, opening them on first use.
    /// `hold_max`: as [`open`]'s.
    pub fn variants(&mut self, hold_max: u64) -> &[Option<Representation>; 2] {
        let path = &self.path;
        let until = self.fresh_until.0;
        self.variants.get_or_insert_with(|| {
            Coding::ALL.map(|c| {
                let mut p = Vec::with_capacity(path.len() + 3);
                p.extend_from_slice(path);
                p.extend_from_slice(c.suffix());
                match open(&p, hold_max) {
                    Ok(Opened::File(mut r)) => {
                        r.mark_coding(c);
                        r.file.reuse_until.set(until);
                        Some(r)
                    }
                    _ => None,
                }
            })
        })
    }
}

/// An entry that goes (evicted, found changed, replaced, the cache cleared) no longer vouches
/// for its files: an answer made from them is not given again.
impl Drop for Entry {
    fn drop(&mut self) {
        self.main.file.reuse_until.set(0);
        self.forget_variants();
    }
}

/// An open file with its validators formatted once.
#[derive(Debug, Clone)]
pub(super) struct Representation {
    pub file: Rc<OpenFile>,
    pub etag: Bytes,
    pub last_modified: Bytes,
    /// The header fields of a 200 with the whole representation, built on its first such
    /// answer and shared by the next ones.
    pub whole: Option<WholeHead>,
    id: FileId,
}

/// A 200's header fields and the handler settings they were built for (handlers sharing the
/// cache may differ in `file.etag`; `vary` follows the precompressed siblings found).
#[derive(Debug, Clone)]
pub(super) struct WholeHead {
    pub etag: bool,
    pub vary: bool,
    pub fields: Rc<HeaderList>,
}

/// What a path turned out to be.
#[derive(Debug)]
pub(super) enum Opened {
    File(Representation),
    Dir,
    /// A FIFO, socket or device: never served.
    Special,
}

/// Opens `path` without blocking (a FIFO must not stall the worker), and reads it into memory
/// when it is `hold_max` bytes or less.
pub(super) fn open(path: &[u8], hold_max: u64) -> io::Result<Opened> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(OsStr::from_bytes(path))?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Ok(Opened::Dir);
    }
    if !meta.is_file() {
        return Ok(Opened::Special);
    }
    Ok(Opened::File(Representation::new(file, &meta, hold_max)?))
}

impl Representation {
    /// Tags a precompressed sibling's ETag with its coding: two siblings written in the same
    /// clock tick with the same size must still differ (`"...-2-br"`).
    pub(super) fn mark_coding(&mut self, c: Coding) {
        let tag = &self.etag[..self.etag.len().saturating_sub(1)];
        let mut marked = Vec::with_capacity(tag.len() + 6);
        marked.extend_from_slice(tag);
        marked.push(b'-');
        marked.extend_from_slice(c.name().as_bytes());
        marked.push(b'"');
        self.etag = marked.into();
        self.whole = None;
    }

    fn new(mut file: File, meta: &Metadata, hold_max: u64) -> io::Result<Representation> {
        let modified = meta.modified()?;
        let mut size = meta.size();
        let contents = if size <= hold_max {
            let mut buf = Vec::with_capacity(size as usize);
            (&mut file).take(size).read_to_end(&mut buf)?;
            // A file truncated since fstat: serve what is there, with a matching length.
            size = buf.len() as u64;
            Some(Bytes::from(buf))
        } else {
            None
        };
        let id = FileId::of(meta);
        Ok(Representation {
            etag: format_etag(meta).into(),
            last_modified: httpdate::fmt_http_date(modified).into(),
            whole: None,
            file: Rc::new(OpenFile::new(file, size, modified, contents)),
            id,
        })
    }
}

/// What revalidation compares: a different value means a different file or new contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileId {
    fn of(meta: &Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

/// A strong ETag from the modification time (with nanoseconds, so a same-size rewrite within
/// one second still changes it) and the size: `"<secs>.<nsecs>-<size>"` in hex. The inode is
/// left out so servers sharing a copied tree agree, as nginx does.
fn format_etag(meta: &Metadata) -> String {
    format!(
        "\"{:x}.{:x}-{:x}\"",
        meta.mtime(),
        meta.mtime_nsec(),
        meta.size()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(dir: &std::path::Path, name: &str, body: &[u8]) -> Representation {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        match open(p.as_os_str().as_bytes(), SMALL_FILE).unwrap() {
            Opened::File(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn small_files_are_read_large_are_not() {
        let d = tempfile::tempdir().unwrap();
        let small = rep(d.path(), "s", b"hello");
        assert_eq!(small.file.contents.as_deref(), Some(&b"hello"[..]));
        assert_eq!(small.file.size, 5);
        assert!(small.etag.starts_with(b"\"") && small.etag.ends_with(b"-5\""));
        let big = rep(d.path(), "b", &vec![7u8; SMALL_FILE as usize + 1]);
        assert!(big.file.contents.is_none());
        assert_eq!(big.file.size, SMALL_FILE + 1);
    }

    #[test]
    fn directories_and_missing_files() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(
            open(d.path().as_os_str().as_bytes(), SMALL_FILE),
            Ok(Opened::Dir)
        ));
        let missing = d.path().join("nope");
        let err = open(missing.as_os_str().as_bytes(), SMALL_FILE).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn fifo_does_not_block_and_is_special() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fifo");
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        crate::sys::file::mkfifo(&c, 0o644).unwrap();
        assert!(matches!(
            open(p.as_os_str().as_bytes(), SMALL_FILE),
            Ok(Opened::Special)
        ));
    }

    #[test]
    fn evicts_least_recently_used_when_full() {
        let d = tempfile::tempdir().unwrap();
        let mut c = OpenFileCache::with_capacity(2);
        c.set_revalidate_after(Duration::from_secs(3600));
        for k in ["a", "b"] {
            let r = rep(d.path(), k, k.as_bytes());
            c.insert(k.as_bytes(), Entry::new(k.as_bytes(), r, Bytes::new(), 0));
            // Longer than a tick of the coarse clock.
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(c.lookup(b"a", Tick::now()).is_some());
        let r = rep(d.path(), "c", b"c");
        c.insert(b"c", Entry::new(b"c", r, Bytes::new(), 0));
        assert_eq!(c.len(), 2);
        assert!(c.lookup(b"b", Tick::now()).is_none());
        assert!(c.lookup(b"a", Tick::now()).is_some());
        assert!(c.lookup(b"c", Tick::now()).is_some());
    }

    #[test]
    fn contents_held_in_memory_stay_within_the_budget() {
        let d = tempfile::tempdir().unwrap();
        let mut c = OpenFileCache::with_capacity(100);
        c.set_revalidate_after(Duration::from_secs(3600));
        c.set_contents_budget(10);
        for k in ["a", "b", "c", "d", "e"] {
            let r = rep(d.path(), k, b"1234");
            c.insert(k.as_bytes(), Entry::new(k.as_bytes(), r, Bytes::new(), 0));
            assert!(c.held <= 10, "{}", c.held);
        }
        assert_eq!((c.len(), c.held), (2, 8));
        // Replacing an entry counts the new contents instead of the old.
        let r = rep(d.path(), "e", b"12");
        c.insert(b"e", Entry::new(b"e", r, Bytes::new(), 0));
        assert_eq!((c.len(), c.held), (2, 6));
        c.clear();
        assert_eq!(c.held, 0);
    }

    #[test]
    fn a_full_cache_drops_an_old_entry_without_scanning_them_all() {
        let d = tempfile::tempdir().unwrap();
        let mut c = OpenFileCache::with_capacity(64);
        c.set_revalidate_after(Duration::from_secs(3600));
        let names: Vec<String> = (0..200).map(|i| format!("f{i}")).collect();
        for k in &names {
            let r = rep(d.path(), k, b"x");
            c.insert(k.as_bytes(), Entry::new(k.as_bytes(), r, Bytes::new(), 0));
            assert!(c.len() <= 64);
        }
        assert_eq!(c.len(), 64);
        // Every key left still finds its own entry.
        let mut found = 0;
        for k in &names {
            if let Some(e) = c.lookup(k.as_bytes(), Tick::now()) {
                assert_eq!(&*e.path, k.as_bytes());
                found += 1;
            }
        }
        assert_eq!(found, 64);
    }

    #[test]
    fn removal_keeps_other_keys_pointing_at_their_entries() {
        let d = tempfile::tempdir().unwrap();
        let mut c = OpenFileCache::new();
        for k in ["a", "b", "c"] {
            let r = rep(d.path(), k, k.as_bytes());
            let p = d.path().join(k);
            c.insert(
                k.as_bytes(),
                Entry::new(p.as_os_str().as_bytes(), r, Bytes::new(), 0),
            );
        }
        std::fs::remove_file(d.path().join("a")).unwrap();
        c.set_revalidate_after(Duration::ZERO);
        assert!(c.lookup(b"a", Tick::now()).is_none());
        assert_eq!(c.len(), 2);
        for k in ["b", "c"] {
            let e = c.lookup(k.as_bytes(), Tick::now()).unwrap();
            assert_eq!(e.main.file.contents.as_deref(), Some(k.as_bytes()));
        }
    }

    #[test]
    fn the_last_entry_found_is_tried_first_but_never_wrong() {
        let d = tempfile::tempdir().unwrap();
        let mut c = OpenFileCache::new();
        c.set_revalidate_after(Duration::from_secs(3600));
        for k in ["a", "bb", "c"] {
            let r = rep(d.path(), k, k.as_bytes());
            c.insert(k.as_bytes(), Entry::new(k.as_bytes(), r, Bytes::new(), 0));
        }
        for k in ["a", "a", "bb", "c", "bb", "b"] {
            let found = c.lookup(k.as_bytes(), Tick::now());
            let contents = found.and_then(|e| e.main.file.contents.clone());
            let expected = (k != "b").then(|| Bytes::copy_from_slice(k.as_bytes()));
            assert_eq!(contents, expected, "{k}");
        }
        c.clear();
        assert!(c.lookup(b"bb", Tick::now()).is_none());
    }

    #[test]
    fn revalidation_notices_change_and_removal() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let key = p.as_os_str().as_bytes();
        let mut c = OpenFileCache::new();
        let r = rep(d.path(), "f", b"one");
        c.insert(key, Entry::new(key, r, Bytes::new(), 0));
        // Within the interval nothing is checked, even though the file changes.
        std::fs::write(&p, b"three").unwrap();
        assert!(c.lookup(key, Tick::now()).is_some());
        c.set_revalidate_after(Duration::ZERO);
        assert!(c.lookup(key, Tick::now()).is_none());
        assert!(c.is_empty());
        let r = rep(d.path(), "f", b"three");
        c.insert(key, Entry::new(key, r, Bytes::new(), 0));
        assert!(c.lookup(key, Tick::now()).is_some());
        std::fs::remove_file(&p).unwrap();
        assert!(c.lookup(key, Tick::now()).is_none());
    }

    #[test]
    fn files_are_vouched_for_while_fresh_and_not_once_their_entry_goes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let key = p.as_os_str().as_bytes();
        let mut c = OpenFileCache::new();
        c.set_revalidate_after(Duration::from_secs(3600));
        let r = rep(d.path(), "f", b"one");
        let file = r.file.clone();
        assert!(!file.reusable_now(), "not before the cache has it");
        c.insert(key, Entry::new(key, r, Bytes::new(), 0));
        assert!(file.reusable_now());
        // Stale: the next lookup checks it on disk, so an answer from it is not given again.
        c.set_revalidate_after(Duration::ZERO);
        assert!(!file.reusable_now());
        std::fs::write(&p, b"two!").unwrap();
        assert!(c.lookup(key, Tick::now()).is_none(), "changed");
        let r = rep(d.path(), "f", b"two!");
        let second = r.file.clone();
        c.insert(key, Entry::new(key, r, Bytes::new(), 0));
        c.set_revalidate_after(Duration::from_secs(3600));
        assert!(second.reusable_now() && !file.reusable_now());
        // Replaced under its key, or the cache cleared: no longer vouched for.
        let r = rep(d.path(), "f", b"two!");
        let third = r.file.clone();
        c.insert(key, Entry::new(key, r, Bytes::new(), 0));
        assert!(third.reusable_now() && !second.reusable_now());
        c.clear();
        assert!(!third.reusable_now());
    }
}
