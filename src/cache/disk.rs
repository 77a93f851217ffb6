//! The disk store of `proxy.cache.disk`: one file per stored response under a directory,
//! behind the memory store. Its index (key, variant, size, use order) is in memory and is
//! rebuilt at start from each file's small head, without reading the bodies.
//!
//! A file is written whole under a temporary name and renamed into place, so a reader never
//! sees part of one; temporary files a crash leaves are removed at start. There is no fsync:
//! a response lost in a power cut is fetched again, and what a power cut can leave under a
//! final name (a short file, blocks of zeros) fails the length or checksum checks and is
//! dropped like any corrupt file: removed, logged once, and fetched again.
//!
//! ```text
//! file     DIR/ab/abcd0123456789ef (the name is a hash of the key and the variant's values)
//!  0       magic "spate-c1"
//!  8       head length (u32), head CRC-32 (u32)
//! 16       body length (u64)
//! 24       body CRC-32 (u32), 0 (u32)
//! 32       head: key, status, timing, lifetime, varying values, fields
//!          body
//! ```
//!
//! Reads and writes are plain file calls on the worker's thread, measured not to wait for
//! the device: a write (once per stored miss, after the backend's round trip) goes to the
//! page cache and never renames over a file (which makes ext4 flush it); a read (once per
//! memory miss) comes from the page cache in the common case.

use super::policy::{self, Timing};
use super::stored::{vary_matches, Stored, Vary};
use bytes::Bytes;
use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::hash::{BuildHasher, Hash, Hasher};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

const MAGIC: &[u8; 8] = b"spate-c1";
/// The fixed part before the head.
const PREFIX: usize = 32;
/// A head larger than this is not one of ours.
const MAX_HEAD: usize = 1 << 20;
/// Temporary files: `tmp.PID.SEQ` in the directory itself.
const TEMP_PREFIX: &str = "tmp.";

/// Counts of the disk store, for metrics.
#[derive(Debug, Default)]
pub struct DiskCounts {
    /// Responses read from disk (memory misses answered from a file).
    pub reads: AtomicU64,
    pub written: AtomicU64,
    pub evicted: AtomicU64,
    /// Files dropped because they were not whole or not ours.
    pub corrupt: AtomicU64,
    /// Writes that failed (a full disk, say): nothing is left of them.
    pub failed: AtomicU64,
}

pub struct Disk {
    dir: PathBuf,
    budget: u64,
    names: RandomState,
    seq: AtomicU64,
    inner: Mutex<Index>,
    /// A write failing is logged once until one succeeds again.
    failing: AtomicBool,
    pub counts: DiskCounts,
}

#[derive(Default)]
struct Index {
    files: HashMap<u64, Entry>,
    /// The files of each key: one per variant.
    keys: HashMap<Bytes, Vec<u64>>,
    /// Use order: tick -> file; the smallest tick is the least recently used.
    lru: BTreeMap<u64, u64>,
    tick: u64,
    bytes: u64,
}

struct Entry {
    key: Bytes,
    vary: Vary,
    size: u64,
    tick: u64,
}

impl Index {
    /// Adds a file, in place of the key's file with the same varying values; returns the
    /// file it replaced under another name, to remove.
    fn add(&mut self, name: u64, key: Bytes, vary: Vary, size: u64) -> Option<u64> {
        let same = self.keys.get(&key).and_then(|names| {
            names
                .iter()
                .copied()
                .find(|n| self.files.get(n).is_some_and(|e| e.vary == vary))
        });
        if let Some(old) = same {
            self.remove(old);
        }
        // A hash collision with another key's file: the file now holds this one.
        self.remove(name);
        self.tick += 1;
        let tick = self.tick;
        self.keys.entry(key.clone()).or_default().push(name);
        self.lru.insert(tick, name);
        self.bytes += size;
        self.files.insert(
            name,
            Entry {
                key,
                vary,
                size,
                tick,
            },
        );
        same.filter(|&old| old != name)
    }

    fn remove(&mut self, name: u64) -> bool {
        let Some(e) = self.files.remove(&name) else {
            return false;
        };
        self.bytes -= e.size;
        self.lru.remove(&e.tick);
        if let Some(names) = self.keys.get_mut(&e.key) {
            names.retain(|&n| n != name);
            if names.is_empty() {
                self.keys.remove(&e.key);
            }
        }
        true
    }

    fn touch(&mut self, name: u64) {
        if let Some(e) = self.files.get_mut(&name) {
            self.lru.remove(&e.tick);
            self.tick += 1;
            e.tick = self.tick;
            self.lru.insert(e.tick, name);
        }
    }

    /// The least recently used out until the files fit `budget`; returns them.
    fn evict(&mut self, budget: u64) -> Vec<u64> {
        let mut out = Vec::new();
        while self.bytes > budget {
            let Some((_, name)) = self.lru.pop_first() else {
                break;
            };
            self.remove(name);
            out.push(name);
        }
        out
    }
}

impl Disk {
    /// The store in `dir` (created when missing), its index read from the files there:
    /// temporary files of a crash are removed, and so are files that are not whole.
    pub fn open(dir: &Path, budget: u64) -> io::Result<Disk> {
        fs::create_dir_all(dir)?;
        let disk = Disk {
            dir: dir.to_path_buf(),
            budget,
            names: RandomState::new(),
            seq: AtomicU64::new(0),
            inner: Mutex::new(Index::default()),
            failing: AtomicBool::new(false),
            counts: DiskCounts::default(),
        };
        let mut found: Vec<(u64, u64, Bytes, Vary, u64)> = Vec::new();
        for sub in fs::read_dir(dir)?.flatten() {
            let file_name = sub.file_name();
            let Some(sub_name) = file_name.to_str() else {
                continue;
            };
            if sub_name.starts_with(TEMP_PREFIX) {
                let _ = fs::remove_file(sub.path());
                continue;
            }
            if sub_name.len() != 2 || u8::from_str_radix(sub_name, 16).is_err() {
                continue;
            }
            for file in fs::read_dir(sub.path())?.flatten() {
                let path = file.path();
                let name = file
                    .file_name()
                    .to_str()
                    .filter(|n| n.len() == 16 && n.starts_with(sub_name))
                    .and_then(|n| u64::from_str_radix(n, 16).ok());
                let Some(name) = name else {
                    continue;
                };
                match read_head(&path) {
                    Ok((key, vary, response_time, size)) => {
                        found.push((response_time, name, key, vary, size));
                    }
                    Err(why) => disk.dropped(&path, &why),
                }
            }
        }
        // Oldest first, so that the use order starts as the order of storing.
        found.sort_by_key(|f| (f.0, f.1));
        let mut index = disk.lock();
        for (_, name, key, vary, size) in found {
            if let Some(old) = index.add(name, key, vary, size) {
                // Two files of one variant (written by another process, say): the newer stays.
                let _ = fs::remove_file(disk.path(old));
            }
        }
        for name in index.evict(budget) {
            let _ = fs::remove_file(disk.path(name));
        }
        drop(index);
        Ok(disk)
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn path(&self, name: u64) -> PathBuf {
        let mut p = self.dir.join(format!("{:02x}", name >> 56));
        p.push(format!("{name:016x}"));
        p
    }

    fn name(&self, key: &[u8], vary: &Vary) -> u64 {
        let mut h = self.names.build_hasher();
        key.hash(&mut h);
        vary.hash(&mut h);
        h.finish()
    }

    /// The bytes of the files now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The files now.
    pub fn len(&self) -> usize {
        self.lock().files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn dropped(&self, path: &Path, why: &str) {
        self.counts.corrupt.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(file = %path.display(), why, "proxy.cache: dropped a corrupt file");
        let _ = fs::remove_file(path);
    }

    /// The stored response of `key` for a request whose fields `request` gives, read from
    /// its file; a file found corrupt is dropped (and `None`).
    pub fn read(&self, key: &[u8], request: &impl Fn(&[u8]) -> Option<Bytes>) -> Option<Stored> {
        let name = {
            let mut index = self.lock();
            let names = index.keys.get(key)?;
            let name = names.iter().copied().find(|n| {
                index
                    .files
                    .get(n)
                    .is_some_and(|e| vary_matches(&e.vary, request))
            })?;
            index.touch(name);
            name
        };
        let path = self.path(name);
        match load(&path, key) {
            Ok(stored) => {
                self.counts.reads.fetch_add(1, Ordering::Relaxed);
                Some(stored)
            }
            Err(why) => {
                self.lock().remove(name);
                if why == GONE {
                    // Evicted or replaced meanwhile by another worker.
                    return None;
                }
                self.dropped(&path, why);
                None
            }
        }
    }

    /// Writes `s` as the file of `key` (whole, under a temporary name, then renamed), then
    /// evicts the least recently used over the budget. Returns whether it was stored.
    pub fn write(&self, key: &Bytes, s: &Stored) -> bool {
        let head = encode_head(key, s);
        let size = (PREFIX + head.len() + s.body.len()) as u64;
        if size > self.budget || head.len() > MAX_HEAD {
            return false;
        }
        let name = self.name(key, &s.vary);
        let path = self.path(name);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .dir
            .join(format!("{TEMP_PREFIX}{}.{seq}", std::process::id()));
        if let Err(e) = write_file(&temp, &path, &head, &s.body) {
            let _ = fs::remove_file(&temp);
            self.counts.failed.fetch_add(1, Ordering::Relaxed);
            if !self.failing.swap(true, Ordering::Relaxed) {
                tracing::warn!(dir = %self.dir.display(), error = %e,
                    "proxy.cache: cannot write to the disk store (logged once until a write succeeds)");
            }
            return false;
        }
        self.failing.store(false, Ordering::Relaxed);
        self.counts.written.fetch_add(1, Ordering::Relaxed);
        let mut index = self.lock();
        if let Some(old) = index.add(name, key.clone(), s.vary.clone(), size) {
            let _ = fs::remove_file(self.path(old));
        }
        let victims = index.evict(self.budget);
        // Removed under the lock: a file of the same name written meanwhile is not lost.
        for &v in &victims {
            let _ = fs::remove_file(self.path(v));
        }
        drop(index);
        self.counts
            .evicted
            .fetch_add(victims.len() as u64, Ordering::Relaxed);
        true
    }

    /// Removes every file of `key`; returns how many.
    pub fn remove(&self, key: &[u8]) -> usize {
        let mut index = self.lock();
        let names = index.keys.get(key).cloned().unwrap_or_default();
        for &n in &names {
            index.remove(n);
            let _ = fs::remove_file(self.path(n));
        }
        names.len()
    }

    /// Removes every file of every key that starts with `prefix`; returns how many.
    pub fn remove_prefix(&self, prefix: &[u8]) -> usize {
        let mut index = self.lock();
        let names: Vec<u64> = index
            .keys
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .flat_map(|(_, n)| n.iter().copied())
            .collect();
        for &n in &names {
            index.remove(n);
            let _ = fs::remove_file(self.path(n));
        }
        names.len()
    }
}

fn write_file(temp: &Path, path: &Path, head: &[u8], body: &[u8]) -> io::Result<()> {
    let mut prefix = Vec::with_capacity(PREFIX + head.len());
    prefix.extend_from_slice(MAGIC);
    prefix.extend_from_slice(&(head.len() as u32).to_le_bytes());
    prefix.extend_from_slice(&crc32fast::hash(head).to_le_bytes());
    prefix.extend_from_slice(&(body.len() as u64).to_le_bytes());
    prefix.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    prefix.extend_from_slice(&0u32.to_le_bytes());
    prefix.extend_from_slice(head);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)?;
    f.write_all(&prefix)?;
    f.write_all(body)?;
    drop(f);
    // Not renamed over the old file: ext4 flushes a file renamed over another
    // (auto_da_alloc), and the worker would wait for the device (measured: 2 waits in 3
    // replacements, none for a new name). A reader in between finds no file: a miss.
    let _ = fs::remove_file(path);
    match fs::rename(temp, path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::rename(temp, path)
        }
        other => other,
    }
}

/// The file was gone when read.
const GONE: &str = "gone";

/// The fixed part's lengths and checksums, checked against the file's length.
struct Prefix {
    head_len: usize,
    head_crc: u32,
    body_len: u64,
    body_crc: u32,
}

fn parse_prefix(b: &[u8], file_len: u64) -> Result<Prefix, &'static str> {
    if b.len() < PREFIX || &b[..8] != MAGIC {
        return Err("not a spate cache file");
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut body_len = [0u8; 8];
    body_len.copy_from_slice(&b[16..24]);
    let p = Prefix {
        head_len: u32_at(8) as usize,
        head_crc: u32_at(12),
        body_len: u64::from_le_bytes(body_len),
        body_crc: u32_at(24),
    };
    if p.head_len > MAX_HEAD {
        return Err("head too long");
    }
    if (PREFIX + p.head_len) as u64 + p.body_len != file_len {
        return Err("length differs from its head's");
    }
    Ok(p)
}

/// The index's part of a file: key, varying values, response time, size.
fn read_head(path: &Path) -> Result<(Bytes, Vary, u64, u64), String> {
    let mut f = File::open(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let mut buf = vec![0u8; 4096.min(len as usize)];
    f.read_exact(&mut buf).map_err(|e| e.to_string())?;
    let p = parse_prefix(&buf, len)?;
    let end = PREFIX + p.head_len;
    if buf.len() < end {
        let have = buf.len();
        buf.resize(end, 0);
        f.read_exact(&mut buf[have..]).map_err(|e| e.to_string())?;
    }
    let head = &buf[PREFIX..end];
    if crc32fast::hash(head) != p.head_crc {
        return Err("head checksum".into());
    }
    let h = decode_head(Bytes::copy_from_slice(head)).ok_or("head malformed")?;
    Ok((h.key, h.stored.vary, h.stored.timing.response_time, len))
}

/// A stored response from its file, checked whole and against `key`.
fn load(path: &Path, key: &[u8]) -> Result<Stored, &'static str> {
    let data = match fs::read(path) {
        Ok(d) => Bytes::from(d),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(GONE),
        Err(_) => return Err("unreadable"),
    };
    let p = parse_prefix(&data, data.len() as u64)?;
    let head = data.slice(PREFIX..PREFIX + p.head_len);
    let body = data.slice(PREFIX + p.head_len..);
    if crc32fast::hash(&head) != p.head_crc {
        return Err("head checksum");
    }
    if crc32fast::hash(&body) != p.body_crc {
        return Err("body checksum");
    }
    let h = decode_head(head).ok_or("head malformed")?;
    if h.key != key {
        // Another key's file under a colliding name: not corrupt, not ours.
        return Err(GONE);
    }
    let mut stored = h.stored;
    stored.body = body;
    Ok(stored)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn encode_head(key: &[u8], s: &Stored) -> Vec<u8> {
    let fields: usize = s.headers.iter().map(|(n, v)| n.len() + v.len() + 8).sum();
    let mut out = Vec::with_capacity(64 + key.len() + fields);
    put_bytes(&mut out, key);
    out.extend_from_slice(&s.status.to_le_bytes());
    for n in [
        s.timing.request_time,
        s.timing.response_time,
        s.timing.initial_age,
        s.lifetime,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&(s.vary.len() as u32).to_le_bytes());
    for (name, value) in &s.vary {
        put_bytes(&mut out, name);
        match value {
            Some(v) => {
                out.push(1);
                put_bytes(&mut out, v);
            }
            None => out.push(0),
        }
    }
    out.extend_from_slice(&(s.headers.len() as u32).to_le_bytes());
    for (n, v) in &s.headers {
        put_bytes(&mut out, n);
        put_bytes(&mut out, v);
    }
    if !s.trailers.is_empty() {
        out.extend_from_slice(&(s.trailers.len() as u32).to_le_bytes());
        for (n, v) in &s.trailers {
            put_bytes(&mut out, n);
            put_bytes(&mut out, v);
        }
    }
    out
}

struct Head {
    key: Bytes,
    stored: Stored,
}

/// Reads `head` front to back; every piece is a slice of it.
struct Cursor {
    b: Bytes,
    at: usize,
}

impl Cursor {
    fn take(&mut self, n: usize) -> Option<Bytes> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len())?;
        let out = self.b.slice(self.at..end);
        self.at = end;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b);
        Some(u64::from_le_bytes(a))
    }

    fn bytes(&mut self) -> Option<Bytes> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A count of items, each at least `min` bytes: no larger than what is left allows.
    fn count(&mut self, min: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n <= (self.b.len() - self.at) / min).then_some(n)
    }
}

fn decode_head(head: Bytes) -> Option<Head> {
    let mut c = Cursor { b: head, at: 0 };
    let key = c.bytes()?;
    let status = c.u16()?;
    let timing = Timing {
        request_time: c.u64()?,
        response_time: c.u64()?,
        initial_age: c.u64()?,
    };
    let lifetime = c.u64()?;
    let n = c.count(5)?;
    let mut vary = Vec::with_capacity(n);
    for _ in 0..n {
        let name = c.bytes()?;
        let value = match c.u8()? {
            0 => None,
            _ => Some(c.bytes()?),
        };
        vary.push((name, value));
    }
    let n = c.count(8)?;
    let mut headers = Vec::with_capacity(n);
    for _ in 0..n {
        headers.push((c.bytes()?, c.bytes()?));
    }
    // Trailers, when the response had any (files without them end here).
    let mut trailers = Vec::new();
    if c.at != c.b.len() {
        let n = c.count(8)?;
        trailers.reserve(n);
        for _ in 0..n {
            trailers.push((c.bytes()?, c.bytes()?));
        }
    }
    if c.at != c.b.len() {
        return None;
    }
    let control = policy::response_control(&headers);
    Some(Head {
        key,
        stored: Stored {
            status,
            headers,
            body: Bytes::new(),
            trailers,
            timing,
            control,
            lifetime,
            vary,
            live: Default::default(),
        },
    })
}

#[cfg(test)]
mod tests;
