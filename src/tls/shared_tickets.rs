//! Session ticket keys shared by a fleet: every instance encrypts with the newest live key and
//! decrypts with any live key, so a client resumes on whichever instance the balancer picks.
//!
//! The keys come from h2o's stores (`ticket-store: file`, `memcached` or `redis`) in h2o's key format
//! (a YAML list of `name`, `cipher`, `hash`, `key`, `not_before`, `not_after`), and a ticket is
//! the RFC 5077 construction h2o's OpenSSL uses: key name (16) ‖ IV (16) ‖ AES-256-CBC ‖
//! HMAC-SHA256 over all before it. The key files and memcached items are interchangeable with
//! h2o's; the tickets are not, as what they carry is rustls' session encoding, not OpenSSL's.
//!
//! A background thread refreshes the keys; a handshake only takes a read lock. When the store
//! is down, the keys held carry on (one log line per state change); when every held key has
//! expired, a local key keeps tickets working on this instance alone.

use crate::config::TicketStore;
use crate::fleet::item::ItemConn;
use crate::fleet::Store;
use aws_lc_rs::cipher::{
    DecryptionContext, EncryptionContext, PaddedBlockDecryptingKey, PaddedBlockEncryptingKey,
    UnboundCipherKey, AES_128, AES_256,
};
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;
use rustls::server::ProducesTickets;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zeroize::Zeroizing;

const NAME_LEN: usize = 16;
const IV_LEN: usize = 16;
/// h2o stores an HMAC key of the hash's block size (64 bytes for SHA-1 and SHA-256).
const HMAC_KEY_LEN: usize = 64;
/// The longest tag (SHA-256's); SHA-1's is 20 bytes.
const TAG_LEN: usize = 32;

/// A key's cipher and hash, as h2o names them. spate makes `aes-256-cbc` with `sha256`; a
/// ticket file of h2o's may hold `aes-128-cbc` or `sha1` keys too, which decrypt and, when
/// newest, encrypt as h2o would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suite {
    /// 16 (AES-128) or 32 (AES-256).
    pub aes_key_len: usize,
    pub sha1: bool,
}

impl Suite {
    pub const AES_256_SHA256: Suite = Suite {
        aes_key_len: 32,
        sha1: false,
    };

    fn cipher_name(self) -> &'static str {
        if self.aes_key_len == 16 {
            "aes-128-cbc"
        } else {
            "aes-256-cbc"
        }
    }

    fn hash_name(self) -> &'static str {
        if self.sha1 {
            "sha1"
        } else {
            "sha256"
        }
    }

    fn tag_len(self) -> usize {
        if self.sha1 {
            20
        } else {
            32
        }
    }

    fn secret_len(self) -> usize {
        self.aes_key_len + HMAC_KEY_LEN
    }
}
/// How often the store is read again.
const REFRESH: Duration = Duration::from_secs(5);
/// Bound on each memcached or Redis step (connect, send, answer).
const STORE_TIMEOUT: Duration = Duration::from_secs(1);
/// A new key is announced this long before it starts encrypting, so every instance has read
/// it by then (h2o's figure)...
const LEAD_SECS: u64 = 60;

/// ...or a quarter of a shorter `lifetime`, though never less than two reads of the store: a
/// lead longer than the quarter would leave a short-lived fleet encrypting with old keys.
fn lead_secs(lifetime: u64) -> u64 {
    (lifetime / 4).clamp(2 * REFRESH.as_secs(), LEAD_SECS)
}

/// One ticket key as h2o stores it.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyEntry {
    pub name: [u8; NAME_LEN],
    pub suite: Suite,
    /// The AES key, then the HMAC key ([`Suite::secret_len`] bytes); wiped when dropped, as
    /// every copy of key material here (the store's text, our serialisation) is.
    pub secret: Zeroizing<Vec<u8>>,
    pub not_before: u64,
    pub not_after: u64,
}

impl std::fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KeyEntry({}, {}..={})",
            hex(&self.name),
            self.not_before,
            self.not_after
        )
    }
}

impl KeyEntry {
    /// A random key valid from `not_before` for five quarters of `lifetime`.
    fn generate(not_before: u64, lifetime: u64) -> Result<KeyEntry, String> {
        let mut k = KeyEntry {
            name: [0; NAME_LEN],
            suite: Suite::AES_256_SHA256,
            secret: Zeroizing::new(vec![0; Suite::AES_256_SHA256.secret_len()]),
            not_before,
            not_after: not_before + lifetime + lifetime / 4,
        };
        aws_lc_rs::rand::fill(&mut k.name).map_err(|_| "no randomness for a ticket key")?;
        aws_lc_rs::rand::fill(&mut k.secret).map_err(|_| "no randomness for a ticket key")?;
        Ok(k)
    }
}

/// A key ready for use: the cipher and MAC keys built once.
struct ReadyKey {
    entry: KeyEntry,
    encrypt: PaddedBlockEncryptingKey,
    decrypt: PaddedBlockDecryptingKey,
    mac: hmac::Key,
}

impl ReadyKey {
    fn new(entry: KeyEntry) -> Result<ReadyKey, String> {
        let suite = entry.suite;
        if entry.secret.len() != suite.secret_len() {
            return Err("bad ticket key length".into());
        }
        let (aes, mac) = entry.secret.split_at(suite.aes_key_len);
        let algorithm = if suite.aes_key_len == 16 {
            &AES_128
        } else {
            &AES_256
        };
        let cipher = |what| {
            UnboundCipherKey::new(algorithm, aes).map_err(|_| format!("bad AES key ({what})"))
        };
        let hash = if suite.sha1 {
            hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY
        } else {
            hmac::HMAC_SHA256
        };
        Ok(ReadyKey {
            encrypt: PaddedBlockEncryptingKey::cbc_pkcs7(cipher("encrypt")?)
                .map_err(|_| "AES-CBC unavailable")?,
            decrypt: PaddedBlockDecryptingKey::cbc_pkcs7(cipher("decrypt")?)
                .map_err(|_| "AES-CBC unavailable")?,
            mac: hmac::Key::new(hash, mac),
            entry,
        })
    }

    fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut iv = [0; IV_LEN];
        aws_lc_rs::rand::fill(&mut iv).ok()?;
        let mut body = plain.to_vec();
        self.encrypt
            .less_safe_encrypt(&mut body, EncryptionContext::Iv128(FixedLength::from(iv)))
            .ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + IV_LEN + body.len() + TAG_LEN);
        out.extend_from_slice(&self.entry.name);
        out.extend_from_slice(&iv);
        out.extend_from_slice(&body);
        let tag = hmac::sign(&self.mac, &out);
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (signed, tag) = ticket.split_at(ticket.len().checked_sub(self.entry.suite.tag_len())?);
        hmac::verify(&self.mac, signed, tag).ok()?;
        let iv: [u8; IV_LEN] = signed.get(NAME_LEN..NAME_LEN + IV_LEN)?.try_into().ok()?;
        let mut body = signed.get(NAME_LEN + IV_LEN..)?.to_vec();
        let plain = self
            .decrypt
            .decrypt(&mut body, DecryptionContext::Iv128(FixedLength::from(iv)))
            .ok()?
            .len();
        body.truncate(plain);
        Some(body)
    }
}

/// The `ProducesTickets` of a shared store.
pub struct SharedTickets {
    lifetime: Duration,
    /// Newest `not_before` first.
    keys: RwLock<Arc<Vec<ReadyKey>>>,
}

impl std::fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTickets")
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl SharedTickets {
    fn held(&self) -> Arc<Vec<ReadyKey>> {
        match self.keys.read() {
            Ok(k) => k.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn held_entries(&self) -> Vec<KeyEntry> {
        self.held().iter().map(|k| k.entry.clone()).collect()
    }

    /// Installs `entries` when they differ from the keys held.
    fn install(&self, mut entries: Vec<KeyEntry>) -> Result<(), String> {
        entries.sort_by_key(|k| std::cmp::Reverse(k.not_before));
        if entries == self.held_entries() {
            return Ok(());
        }
        let ready = entries
            .into_iter()
            .map(ReadyKey::new)
            .collect::<Result<Vec<_>, _>>()?;
        let ready = Arc::new(ready);
        match self.keys.write() {
            Ok(mut k) => *k = ready,
            Err(p) => *p.into_inner() = ready,
        }
        Ok(())
    }

    fn encrypt_at(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        let keys = self.held();
        let key = keys
            .iter()
            .find(|k| k.entry.not_before <= now && now <= k.entry.not_after)?;
        key.seal(plain)
    }

    fn decrypt_at(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        if ticket.len() < NAME_LEN + IV_LEN + 16 + 20 {
            return None;
        }
        let keys = self.held();
        let key = keys
            .iter()
            .find(|k| k.entry.name[..] == ticket[..NAME_LEN] && now <= k.entry.not_after)?;
        key.open(ticket)
    }
}

impl ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.lifetime.as_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, unix_now())
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(cipher, unix_now())
    }
}

type Registry = Vec<(TicketStore, Duration, Weak<SharedTickets>)>;

/// Every listener of the process uses one `SharedTickets` (and one updater thread) per store.
static REGISTRY: Mutex<Registry> = Mutex::new(Vec::new());

/// The shared ticket keys of `store`, read once now (a file that cannot be read is an error;
/// an unreachable memcached or Redis is logged and retried in the background).
pub fn shared(store: &TicketStore, lifetime: Duration) -> Result<Arc<SharedTickets>, String> {
    let mut registry = match REGISTRY.lock() {
        Ok(r) => r,
        Err(p) => p.into_inner(),
    };
    registry.retain(|(_, _, w)| w.strong_count() > 0);
    if let Some(t) = registry
        .iter()
        .find(|(s, l, _)| s == store && *l == lifetime)
        .and_then(|(_, _, w)| w.upgrade())
    {
        return Ok(t);
    }
    let tickets = Arc::new(SharedTickets {
        lifetime,
        keys: RwLock::new(Arc::new(Vec::new())),
    });
    let mut updater = Updater {
        store: store.clone(),
        lifetime: lifetime.as_secs().max(4),
        conn: None,
        failing: None,
    };
    let first = updater.refresh(&tickets);
    if let (TicketStore::File(path), Err(e)) = (store, &first) {
        return Err(format!("ticket-file {}: {e}", path.display()));
    }
    updater.keep_encrypting(&tickets)?;
    let weak = Arc::downgrade(&tickets);
    std::thread::Builder::new()
        .name("ticket-keys".into())
        .spawn(move || updater.run(first, weak))
        .map_err(|e| format!("cannot start the ticket key thread: {e}"))?;
    registry.push((store.clone(), lifetime, Arc::downgrade(&tickets)));
    Ok(tickets)
}

/// The background side: reads (and for memcached or Redis, rolls over) the keys.
struct Updater {
    store: TicketStore,
    lifetime: u64,
    conn: Option<ItemConn>,
    /// The last error, while the store fails (for one log line per state change).
    failing: Option<String>,
}

impl Updater {
    /// Reports the first round's `first` (made while the server was being prepared, before
    /// its log was set up: hence the pause), then refreshes every `REFRESH`.
    fn run(mut self, first: Result<usize, String>, tickets: Weak<SharedTickets>) {
        std::thread::sleep(Duration::from_secs(1));
        self.report(&first);
        loop {
            std::thread::sleep(REFRESH);
            let Some(t) = tickets.upgrade() else {
                return;
            };
            let r = self.refresh(&t);
            self.report(&r);
            if let Err(e) = self.keep_encrypting(&t) {
                tracing::warn!("session ticket keys: {e}");
            }
        }
    }

    fn describe(&self) -> String {
        match &self.store {
            TicketStore::File(p) => format!("ticket-file {}", p.display()),
            TicketStore::Memcached { host, port, .. } => format!("memcached {host}:{port}"),
            TicketStore::Redis { host, port, .. } => format!("redis {host}:{port}"),
            TicketStore::Internal => "internal".into(),
        }
    }

    fn report(&mut self, r: &Result<usize, String>) {
        match r {
            Ok(n) => {
                if self.failing.take().is_some() {
                    tracing::info!(
                        "session ticket keys: {} is back ({n} keys)",
                        self.describe()
                    );
                }
            }
            Err(e) => {
                if self.failing.is_none() {
                    tracing::warn!(
                        "session ticket keys: {} failed, keeping the keys held: {e}",
                        self.describe()
                    );
                }
                self.failing = Some(e.clone());
            }
        }
    }

    /// When no held key may encrypt now (store down for longer than the keys live), adds a
    /// local one so tickets still work on this instance.
    fn keep_encrypting(&self, t: &SharedTickets) -> Result<(), String> {
        let now = unix_now();
        let mut entries = t.held_entries();
        if roll(&mut entries, now, self.lifetime)? {
            t.install(entries)?;
        }
        Ok(())
    }

    /// One round: the number of keys now held, or why the store failed.
    fn refresh(&mut self, t: &SharedTickets) -> Result<usize, String> {
        match self.store.clone() {
            TicketStore::Internal => Ok(t.held().len()),
            TicketStore::File(path) => {
                let text =
                    Zeroizing::new(std::fs::read_to_string(&path).map_err(|e| e.to_string())?);
                let now = unix_now();
                let mut keys = parse_keys(&text)?;
                keys.retain(|k| now <= k.not_after);
                let n = keys.len();
                t.install(keys)?;
                Ok(n)
            }
            TicketStore::Memcached { host, port, key } => {
                self.shared_round(t, Store::Memcached, &host, port, &key)
            }
            TicketStore::Redis { host, port, key } => {
                self.shared_round(t, Store::Redis, &host, port, &key)
            }
        }
    }

    /// A round with memcached or Redis; a failure drops the connection (made again next).
    fn shared_round(
        &mut self,
        t: &SharedTickets,
        store: Store,
        host: &str,
        port: u16,
        item: &str,
    ) -> Result<usize, String> {
        let r = self.item_round(t, store, host, port, item);
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    fn item_round(
        &mut self,
        t: &SharedTickets,
        store: Store,
        host: &str,
        port: u16,
        item: &str,
    ) -> Result<usize, String> {
        let conn = match &mut self.conn {
            Some(c) => c,
            None => self
                .conn
                .insert(ItemConn::connect(store, host, port, STORE_TIMEOUT)?),
        };
        // Another instance may store between our read and our write: read again then.
        for _ in 0..4 {
            let now = unix_now();
            let current = conn.read(item)?.map(|(v, ver)| (Zeroizing::new(v), ver));
            let mut keys = match &current {
                Some((value, _)) => {
                    let text = std::str::from_utf8(value).map_err(|_| "item is not text")?;
                    parse_keys(text)?
                }
                // A new or restarted store: seed it with the keys held, so sessions made
                // before the restart still resume.
                None => t.held_entries(),
            };
            keys.sort_by_key(|k| std::cmp::Reverse(k.not_before));
            // A missing item is written even when the keys held need no roll-over, so that
            // instances joining later read them.
            if roll(&mut keys, now, self.lifetime)? || current.is_none() {
                let value = serialize_keys(&keys);
                // The item outlives its newest key by a margin; each roll-over renews it.
                let expires = u32::try_from(self.lifetime * 2).unwrap_or(u32::MAX);
                let stored = match &current {
                    None => conn.add(item, value.as_bytes(), expires)?,
                    Some((_, version)) => conn.replace(item, value.as_bytes(), expires, version)?,
                };
                if !stored {
                    continue;
                }
            }
            let n = keys.len();
            t.install(keys)?;
            return Ok(n);
        }
        Err("the item kept changing under us".into())
    }
}

/// h2o's roll-over: drops expired keys, and adds a key when none may encrypt now (usable at
/// once) or the newest is older than a quarter of the lifetime (usable after `lead_secs`).
/// Returns whether `keys` (newest first) changed.
fn roll(keys: &mut Vec<KeyEntry>, now: u64, lifetime: u64) -> Result<bool, String> {
    let before = keys.len();
    keys.retain(|k| now <= k.not_after);
    let mut altered = keys.len() != before;
    let can_encrypt = keys
        .iter()
        .any(|k| k.not_before <= now && now <= k.not_after);
    let newest_start = keys.first().map_or(0, |k| k.not_before);
    if !can_encrypt || newest_start + lifetime / 4 < now {
        let not_before = if can_encrypt {
            now + lead_secs(lifetime)
        } else {
            now
        };
        let mut k = KeyEntry::generate(not_before, lifetime)?;
        // Distinct first bytes, as h2o keeps them (QUIC uses one byte as the key id).
        while keys.iter().any(|o| o.name[0] == k.name[0]) {
            k.name[0] = k.name[0].wrapping_add(1);
        }
        keys.insert(0, k);
        altered = true;
    }
    Ok(altered)
}

/// One key's `name: value` pairs as read.
type KeyFields = Vec<(String, String)>;

/// h2o's key list: a YAML sequence of flat mappings, as h2o writes it (block style, one
/// `key: value` a line). Other YAML layouts are refused with the line that did not fit.
pub fn parse_keys(text: &str) -> Result<Vec<KeyEntry>, String> {
    // The values hold the keys' hex: wiped whichever way this returns.
    let mut maps: Zeroizing<Vec<(usize, KeyFields)>> = Zeroizing::new(Vec::new());
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split(" #").next().unwrap_or("").trim_end();
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') || t == "---" || t == "..." {
            continue;
        }
        let rest = match t.strip_prefix('-') {
            Some(r) if r.is_empty() || r.starts_with(' ') => {
                maps.push((i + 1, Vec::new()));
                r.trim()
            }
            _ => t,
        };
        if rest.is_empty() {
            continue;
        }
        let (Some((_, map)), Some((k, v))) = (maps.last_mut(), rest.split_once(':')) else {
            return Err(format!(
                "line {}: expected a list of keys (- name: ...)",
                i + 1
            ));
        };
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
        map.push((k.trim().to_owned(), v.to_owned()));
    }
    maps.iter()
        .map(|(line, m)| entry(m).map_err(|e| format!("the key at line {line}: {e}")))
        .collect()
}

fn entry(m: &[(String, String)]) -> Result<KeyEntry, String> {
    let get = |name: &str| {
        m.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or(format!("`{name}` is missing"))
    };
    let name: [u8; NAME_LEN] = unhex(get("name")?)
        .and_then(|v| v.try_into().ok())
        .ok_or("`name` must be 32 hex digits")?;
    let cipher = get("cipher")?;
    let aes_key_len = match cipher.to_ascii_lowercase().as_str() {
        "aes-256-cbc" => 32,
        "aes-128-cbc" => 16,
        _ => {
            return Err(format!(
                "cipher {cipher} is not supported (aes-256-cbc and aes-128-cbc are)"
            ))
        }
    };
    let hash = get("hash")?;
    let sha1 = match hash.to_ascii_lowercase().as_str() {
        "sha256" => false,
        "sha1" => true,
        _ => {
            return Err(format!(
                "hash {hash} is not supported (sha256 and sha1 are)"
            ))
        }
    };
    let suite = Suite { aes_key_len, sha1 };
    let secret = unhex(get("key")?)
        .map(Zeroizing::new)
        .filter(|v| v.len() == suite.secret_len())
        .ok_or_else(|| {
            format!(
                "`key` must be {} hex digits (the {cipher} key and a 64-byte HMAC key)",
                suite.secret_len() * 2
            )
        })?;
    let number = |n: &str| {
        get(n)?
            .parse::<u64>()
            .map_err(|_| format!("`{n}` is not a number"))
    };
    let (not_before, not_after) = (number("not_before")?, number("not_after")?);
    if not_after < not_before {
        return Err("`not_after` is before `not_before`".into());
    }
    Ok(KeyEntry {
        name,
        suite,
        secret,
        not_before,
        not_after,
    })
}

/// h2o's key list text, newest first (wiped when dropped: it holds the keys).
pub fn serialize_keys(keys: &[KeyEntry]) -> Zeroizing<String> {
    // Room for every key, so that growing leaves no copy behind.
    let mut out = Zeroizing::new(String::with_capacity(keys.len() * 320));
    for k in keys {
        let _ = write!(
            out,
            "- name: {}\n  cipher: {}\n  hash: {}\n  key: ",
            hex(&k.name),
            k.suite.cipher_name(),
            k.suite.hash_name(),
        );
        for x in k.secret.iter() {
            let _ = write!(out, "{x:02x}");
        }
        let _ = writeln!(
            out,
            "\n  not_before: {}\n  not_after: {}",
            k.not_before, k.not_after
        );
    }
    out
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key material is held only in types that wipe it when dropped: the parsed keys, the
    /// text written to the store (a change of type fails to compile here).
    #[test]
    fn keys_are_wiped_when_dropped() {
        fn wiped<T: zeroize::Zeroize>(_: &Zeroizing<T>) {}
        let keys = vec![KeyEntry::generate(1, 3600).expect("key")];
        wiped(&keys[0].secret);
        let text = serialize_keys(&keys);
        wiped(&text);
        let back = parse_keys(&text).expect("parse");
        wiped(&back[0].secret);
        assert_eq!(back, keys);
    }

    fn tickets(entries: Vec<KeyEntry>) -> SharedTickets {
        let t = SharedTickets {
            lifetime: Duration::from_secs(3600),
            keys: RwLock::new(Arc::new(Vec::new())),
        };
        t.install(entries).expect("install");
        t
    }

    #[test]
    fn encrypts_with_newest_live_key_decrypts_with_any() {
        let old = KeyEntry::generate(1000, 3600).expect("key");
        let new = KeyEntry::generate(2000, 3600).expect("key");
        let a = tickets(vec![old.clone()]);
        let b = tickets(vec![old.clone(), new.clone()]);
        // Before `new` starts, both use `old`: each opens the other's tickets.
        let t = a.encrypt_at(b"session", 1500).expect("ticket");
        assert_eq!(&t[..16], &old.name);
        assert_eq!(b.decrypt_at(&t, 1500).as_deref(), Some(&b"session"[..]));
        // Once `new` is live, b encrypts with it; a cannot open those until it reads `new`.
        let t2 = b.encrypt_at(b"session", 2500).expect("ticket");
        assert_eq!(&t2[..16], &new.name);
        assert_eq!(a.decrypt_at(&t2, 2500), None);
        assert_eq!(b.decrypt_at(&t, 2500).as_deref(), Some(&b"session"[..]));
        // Past its `not_after`, a key opens nothing.
        assert_eq!(b.decrypt_at(&t, old.not_after + 1), None);
        // Tampering fails the MAC.
        let mut bad = t2.clone();
        let last = bad.len() - 40;
        bad[last] ^= 1;
        assert_eq!(b.decrypt_at(&bad, 2500), None);
        assert_eq!(b.decrypt_at(&t2[..20], 2500), None);
    }

    #[test]
    fn h2o_key_file_round_trips() {
        let keys = vec![
            KeyEntry::generate(2000, 3600).expect("key"),
            KeyEntry::generate(1000, 3600).expect("key"),
        ];
        let text = serialize_keys(&keys);
        assert!(text.starts_with("- name: "));
        assert!(text.contains("\n  cipher: aes-256-cbc\n  hash: sha256\n  key: "));
        assert_eq!(parse_keys(&text).expect("parse"), keys);
        let e = parse_keys("- name: 00\n  cipher: aes-256-cbc\n").expect_err("bad");
        assert!(e.contains("line 1: `name` must be 32 hex digits"), "{e}");
        let e = parse_keys("name: x\n").expect_err("bad");
        assert!(e.contains("line 1: expected a list"), "{e}");
    }

    #[test]
    fn h2o_s_aes_128_cbc_sha1_keys_seal_and_open() {
        // The form of h2o's t/40session-ticket/forever_ticket.yaml (a made-up key).
        let text = format!(
            "- name: {}\n  cipher: aes-128-cbc\n  hash: sha1\n  key: {}\n  not_before: 0\n  not_after: 18446744073709551615\n",
            "a3".repeat(16),
            "5c".repeat(80)
        );
        let keys = parse_keys(&text).expect("parse");
        assert_eq!(
            keys[0].suite,
            Suite {
                aes_key_len: 16,
                sha1: true
            }
        );
        assert_eq!(*serialize_keys(&keys), text);
        let t = tickets(keys);
        let sealed = t.encrypt_at(b"session", 5).expect("ticket");
        // Name, IV, one AES block of padded plaintext, a 20-byte SHA-1 tag.
        assert_eq!(sealed.len(), 16 + 16 + 16 + 20);
        assert_eq!(t.decrypt_at(&sealed, 5).as_deref(), Some(&b"session"[..]));
        let short = text.replace(&"5c".repeat(80), &"5c".repeat(96));
        let e = parse_keys(&short).expect_err("wrong length");
        assert!(e.contains("`key` must be 160 hex digits"), "{e}");
        let e = parse_keys(&text.replace("aes-128-cbc", "des-cbc")).expect_err("cipher");
        assert!(e.contains("cipher des-cbc is not supported"), "{e}");
    }

    #[test]
    fn roll_over_every_quarter_lifetime() {
        let mut keys = Vec::new();
        assert!(roll(&mut keys, 10_000, 400).expect("roll"));
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].not_before, 10_000);
        // Within the quarter: nothing to do.
        assert!(!roll(&mut keys, 10_100, 400).expect("roll"));
        // Past it: a key announced 60 s ahead, with a distinct first name byte.
        assert!(roll(&mut keys, 10_101, 400).expect("roll"));
        assert_eq!(keys[0].not_before, 10_101 + LEAD_SECS);
        assert_ne!(keys[0].name[0], keys[1].name[0]);
        // Five quarters on, the first key is gone.
        let mut later = keys.clone();
        roll(&mut later, 10_000 + 501, 400).expect("roll");
        assert!(later.iter().all(|k| k.not_before != 10_000));
        // A short lifetime: announced a quarter ahead (and no less than two store reads).
        let mut short = Vec::new();
        roll(&mut short, 10_000, 48).expect("roll");
        assert!(roll(&mut short, 10_013, 48).expect("roll"));
        assert_eq!(short[0].not_before, 10_013 + 12);
        assert_eq!(lead_secs(8), 10);
    }
}
