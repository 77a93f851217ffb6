//! The HTTP cache (RFC 9111) of `proxy.cache`, protocol-neutral: `Cache-Control` read
//! (`control`), the rules of storing, freshness, age and revalidation (`policy`), the
//! memory store with its byte budget, variants and the fills under way for collapsed
//! forwarding (`store`), the disk store behind it (`disk`), and the body stream that stores a miss as it goes to the client
//! (`tee`). The proxy handler (`handler/proxy/cache.rs`) decides per request with these.
//!
//! ```text
//! tee        a miss's body to the client, and into the store when whole
//! store      the responses, LRU within the budget; fills under way
//! disk       the files behind the memory store, kept across restarts
//! policy     storable? fresh? age, 304 updates
//! control    Cache-Control directives
//! ```
// Peer input must never panic: outside tests, no unwrap or expect here.

pub mod control;
pub mod disk;
pub mod policy;
pub mod store;
pub mod stored;
mod tee;

pub use control::{RequestControl, ResponseControl};
pub use store::{shared, Found, Leader, Role, Store, Stored};
pub use tee::Filling;

use bytes::Bytes;

/// The primary key (§2): the method (a HEAD is answered from a GET's entry, so both are
/// GET), the scheme, the authority and the target (path and query).
pub fn key(secure: bool, authority: &[u8], target: &[u8]) -> Bytes {
    let mut k = Vec::new();
    key_into(&mut k, secure, authority, target);
    Bytes::from(k)
}

/// [`key`] written into `k` (emptied first).
pub fn key_into(k: &mut Vec<u8>, secure: bool, authority: &[u8], target: &[u8]) {
    let scheme: &[u8] = if secure { b"https://" } else { b"http://" };
    k.clear();
    k.reserve(scheme.len() + authority.len() + target.len());
    k.extend_from_slice(scheme);
    k.extend(authority.iter().map(u8::to_ascii_lowercase));
    k.extend_from_slice(target);
}

/// Seconds since the epoch: the clock of ages and lifetimes.
pub fn now() -> u64 {
    crate::http::clock::wall_second()
}
