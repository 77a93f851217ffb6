//! A connection to memcached or Redis for what a fleet shares: one item updated with
//! compare-and-set (`gets` and `cas`, or `GET` and a compare-and-set script: the ticket-key
//! list), and plain values with an expiry (the session cache).

use super::memcached::{Memcached, Stored};
use super::redis::Redis;
use super::{timed, Op, Store};
use std::time::Duration;

/// What a later `replace` checks the item still is.
pub enum Version {
    Cas(u64),
    Value(Vec<u8>),
}

/// A connection to the store holding the item.
pub enum ItemConn {
    Memcached(Memcached),
    Redis(Redis),
}

impl ItemConn {
    pub fn connect(
        store: Store,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<ItemConn, String> {
        timed(store, Op::Get, || match store {
            Store::Memcached => Memcached::connect(host, port, timeout).map(ItemConn::Memcached),
            Store::Redis => Redis::connect(host, port, timeout).map(ItemConn::Redis),
        })
    }

    fn store(&self) -> Store {
        match self {
            ItemConn::Memcached(_) => Store::Memcached,
            ItemConn::Redis(_) => Store::Redis,
        }
    }

    /// The item's value and version, or `None` when there is no such item.
    pub fn read(&mut self, key: &str) -> Result<Option<(Vec<u8>, Version)>, String> {
        timed(self.store(), Op::Get, || match self {
            ItemConn::Memcached(m) => Ok(m.gets(key)?.map(|(v, cas)| (v, Version::Cas(cas)))),
            ItemConn::Redis(r) => Ok(r.get(key)?.map(|v| (v.clone(), Version::Value(v)))),
        })
    }

    /// Stores the item if there is none (`Ok(false)`: another instance stored first).
    pub fn add(&mut self, key: &str, value: &[u8], expires: u32) -> Result<bool, String> {
        timed(self.store(), Op::Set, || match self {
            ItemConn::Memcached(m) => Ok(m.add(key, value, expires)? == Stored::Yes),
            ItemConn::Redis(r) => r.set(key, value, expires, true),
        })
    }

    /// Replaces the item if it is still at `version` (`Ok(false)`: it changed meanwhile).
    pub fn replace(
        &mut self,
        key: &str,
        value: &[u8],
        expires: u32,
        version: &Version,
    ) -> Result<bool, String> {
        timed(self.store(), Op::Set, || match (self, version) {
            (ItemConn::Memcached(m), Version::Cas(cas)) => {
                Ok(m.cas(key, value, expires, *cas)? == Stored::Yes)
            }
            (ItemConn::Redis(r), Version::Value(old)) => r.replace_if(key, old, value, expires),
            _ => Err("version of another store".into()),
        })
    }

    /// A plain value, or `None`.
    pub fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, String> {
        timed(self.store(), Op::Get, || match self {
            ItemConn::Memcached(m) => Ok(m.gets(key)?.map(|(v, _)| v)),
            ItemConn::Redis(r) => r.get(key),
        })
    }

    /// Stores a plain value for `expires` seconds.
    pub fn set(&mut self, key: &str, value: &[u8], expires: u32) -> Result<(), String> {
        timed(self.store(), Op::Set, || match self {
            ItemConn::Memcached(m) => m.set(key, value, expires),
            ItemConn::Redis(r) => r.set(key, value, expires, false).map(|_| ()),
        })
    }

    pub fn delete(&mut self, key: &str) -> Result<(), String> {
        timed(self.store(), Op::Set, || match self {
            ItemConn::Memcached(m) => m.delete(key),
            ItemConn::Redis(r) => r.del(key),
        })
    }
}
