//! `proxy.cache`: the HTTP cache (RFC 9111) in front of a path's backends.
//!
//! `proxy.cache: ON` takes the defaults; the mapping form sets them:
//! `proxy.cache: {memory: 64MB, max-object-size: 1MB, lock-timeout: 5000}`. `OFF` turns an
//! inherited cache off. Paths that inherit one `proxy.cache` share its store.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::Location;
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
    /// Where the directive is: the store is the process's one for this place, so a reload
    /// keeps what it holds.
    pub at: Location,
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
        &["memory", "max-object-size", "lock-timeout", "purge"],
    ) {
        let full = format!("{name}.{key}");
        match key {
            "memory" => conf.memory = size(ctx, &full, val)?,
            "max-object-size" => conf.max_object_size = size(ctx, &full, val)?,
            "purge" => conf.purge = ctx.bool(&full, val)?,
            _ => conf.lock_timeout = Duration::from_millis(ctx.uint(&full, val, 1)?),
        }
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
    (ctx.errors.len() == before).then_some(Some(conf))
}

/// A byte count: an integer, or one with a K, M or G suffix (`64MB`, `512K`, `1G`).
fn size(ctx: &mut Ctx, name: &str, v: &Node) -> Option<u64> {
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
