//! `proxy.cache`: the HTTP cache (RFC 9111) in front of a path's backends.
//!
//! `proxy.cache: ON` takes the defaults; the mapping form sets them:
//! `proxy.cache: {memory: 64MB, max-object-size: 1MB, lock-timeout: 5000}`, and
//! `disk: {path: DIR, max-size: 1GB}` adds a store on disk that survives restarts. `OFF` turns
//! an inherited cache off. Paths that inherit one `proxy.cache` share its store.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::Location;
use std::path::PathBuf;
use std::time::Duration;

/// One `proxy.cache`: a memory store and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConf {
    /// `memory` (64MB): the byte budget of the stored responses (heads and bodies); the
    /// least recently used go first when it is full.
    pub memory: u64,
    /// `max-object-size` (1MB): a response larger than this is passed on, not stored.
    pub max_object_size: u64,
    /// `lock-timeout` (5000 ms): how long a request for a key another request is already
    /// fetching waits for that answer before going to the backend itself.
    pub lock_timeout: Duration,
    /// `purge` (OFF): a `PURGE` request from the machine itself (a loopback address) drops
    /// the stored responses of its URL, or of every URL it prefixes when it ends with `*`.
    pub purge: bool,
    /// `purge-secret` (none): a `PURGE` from any address is accepted when it carries this
    /// value in `Purge-Secret` (and implies `purge: ON`).
    pub purge_secret: Option<String>,
    /// `disk` (none): the store on disk behind the memory one.
    pub disk: Option<DiskConf>,
    /// Where the directive is: the store is the process's one for this place, so a reload
    /// keeps what it holds.
    pub at: Location,
}

/// `proxy.cache.disk`: a directory of one file per stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConf {
    /// `path`: the directory (created when missing; relative to the configuration file).
    pub path: PathBuf,
    /// `max-size` (1GB): the byte budget of the files; the least recently used go first.
    pub max_size: u64,
    /// Where `path` is written, for the checks of `prepare`.
    pub at: Location,
}

impl DiskConf {
    pub const DEFAULT_MAX_SIZE: u64 = 1 << 30;
}

impl CacheConf {
    pub const DEFAULT_MEMORY: u64 = 64 << 20;
    pub const DEFAULT_MAX_OBJECT_SIZE: u64 = 1 << 20;
    pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_millis(5000);
}

/// `proxy.cache`: ON, OFF or the mapping. `Some(None)` is OFF.
pub(super) fn parse(ctx: &mut Ctx, name: &str, v: &Node) -> Option<Option<CacheConf>> {
    let mut conf = CacheConf {
        memory: CacheConf::DEFAULT_MEMORY,
        max_object_size: CacheConf::DEFAULT_MAX_OBJECT_SIZE,
        lock_timeout: CacheConf::DEFAULT_LOCK_TIMEOUT,
        purge: false,
        purge_secret: None,
        disk: None,
        at: ctx.at(v.line),
    };
    if v.as_map().is_none() {
        return ctx.bool(name, v).map(|on| on.then_some(conf));
    }
    let entries = ctx.map(name, v)?;
    let before = ctx.errors.len();
    for (key, val) in ctx.known_keys(
        name,
        entries,
        &[
            "memory",
            "max-object-size",
            "lock-timeout",
            "purge",
            "purge-secret",
            "disk",
        ],
    ) {
        let full = format!("{name}.{key}");
        match key {
            "memory" => conf.memory = size(ctx, &full, val)?,
            "max-object-size" => conf.max_object_size = size(ctx, &full, val)?,
            "purge" => conf.purge = ctx.bool(&full, val)?,
            "purge-secret" => conf.purge_secret = Some(secret(ctx, &full, val)?),
            "disk" => conf.disk = Some(disk(ctx, &full, val)?),
            _ => conf.lock_timeout = Duration::from_millis(ctx.uint(&full, val, 1)?),
        }
    }
    if conf.purge_secret.is_some() {
        conf.purge = true;
    }
    if conf.max_object_size > conf.memory {
        ctx.error(
            v.line,
            format!(
                "{name}: max-object-size ({}) is larger than memory ({})",
                conf.max_object_size, conf.memory
            ),
        );
    }
    if let Some(d) = conf
        .disk
        .as_ref()
        .filter(|d| d.max_size < conf.max_object_size)
    {
        ctx.error(
            v.line,
            format!(
                "{name}: max-object-size ({}) is larger than disk.max-size ({})",
                conf.max_object_size, d.max_size
            ),
        );
    }
    (ctx.errors.len() == before).then_some(Some(conf))
}

/// The shortest `purge-secret`: a shorter one could be guessed.
const SECRET_MIN: usize = 16;

/// `purge-secret`: a string of at least [`SECRET_MIN`] visible characters (it is compared
/// with a field value).
fn secret(ctx: &mut Ctx, name: &str, v: &Node) -> Option<String> {
    let s = ctx.string(name, v)?;
    if s.len() < SECRET_MIN || !s.bytes().all(|b| b.is_ascii_graphic()) {
        ctx.error(
            v.line,
            format!(
                "{name} expects at least {SECRET_MIN} visible ASCII characters (no spaces), got {} characters",
                s.chars().count()
            ),
        );
        return None;
    }
    Some(s)
}

/// `disk: {path: DIR, max-size: SIZE}`.
fn disk(ctx: &mut Ctx, name: &str, v: &Node) -> Option<DiskConf> {
    let entries = ctx.map(name, v)?;
    let mut path = None;
    let mut max_size = DiskConf::DEFAULT_MAX_SIZE;
    for (key, val) in ctx.known_keys(name, entries, &["path", "max-size"]) {
        let full = format!("{name}.{key}");
        match key {
            "path" => path = Some(ctx.path_at(&full, val)?),
            _ => max_size = size(ctx, &full, val)?,
        }
    }
    let Some(path) = path else {
        ctx.error(
            v.line,
            format!("{name} needs a path (the directory of its files)"),
        );
        return None;
    };
    Some(DiskConf {
        path: path.path,
        max_size,
        at: path.at,
    })
}

/// A byte count: an integer, or one with a K, M or G suffix (`64MB`, `512K`, `1G`).
pub(super) fn size(ctx: &mut Ctx, name: &str, v: &Node) -> Option<u64> {
    let parsed = v.as_u64().or_else(|| {
        let s = v.as_str()?.trim();
        let s = s.strip_suffix(['B', 'b']).unwrap_or(s);
        let (digits, unit) = match s.char_indices().last()? {
            (i, 'K' | 'k') => (&s[..i], 1u64 << 10),
            (i, 'M' | 'm') => (&s[..i], 1 << 20),
            (i, 'G' | 'g') => (&s[..i], 1 << 30),
            _ => (s, 1),
        };
        digits.trim().parse::<u64>().ok()?.checked_mul(unit)
    });
    match parsed {
        Some(n) if n > 0 => Some(n),
        _ => {
            ctx.error(
                v.line,
                format!(
                    "{name} expects a size in bytes (like 65536, 512K, 64MB), got {}",
                    show(v)
                ),
            );
            None
        }
    }
}
