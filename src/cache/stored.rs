//! One stored response: its head, body, timing and the varying values it was stored
//! under, as the memory and the disk store both hold it.

use super::control::ResponseControl;
use super::policy::Timing;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The request's values of the fields a response varies on, names lowercase.
pub type Vary = Vec<(Bytes, Option<Bytes>)>;

/// Whether a request whose fields `request` gives has the values `vary` holds.
pub fn vary_matches(vary: &Vary, request: &impl Fn(&[u8]) -> Option<Bytes>) -> bool {
    vary.iter()
        .all(|(name, value)| request(name).as_deref() == value.as_deref())
}

/// What an entry costs beyond its fields' and body's bytes (the entry, the map slot).
const ENTRY_OVERHEAD: usize = 256;

/// One stored response.
#[derive(Debug)]
pub struct Stored {
    pub status: u16,
    /// As the client gets them, without `Age` (computed at each use).
    pub headers: Vec<(Bytes, Bytes)>,
    pub body: Bytes,
    /// The fields after the body (chunked trailers, HTTP/2 trailing HEADERS), given again
    /// after it.
    pub trailers: Vec<(Bytes, Bytes)>,
    pub timing: Timing,
    pub control: ResponseControl,
    pub lifetime: u64,
    /// The request's values of the fields the response varies on, names lowercase.
    pub vary: Vary,
    /// Whether it is still the memory store's: answers made from it may repeat while it is.
    pub live: Live,
}

/// Whether a stored response is still the store's: cleared when it is replaced, evicted
/// or invalidated, so that a connection's memo of an answer made from it lets go. It also
/// holds the store's count of the hits such memos give.
#[derive(Debug)]
pub struct Live {
    live: AtomicBool,
    /// The store's `repeated` count, once it holds the response.
    repeated: Option<Arc<AtomicU64>>,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            live: AtomicBool::new(true),
            repeated: None,
        }
    }
}

impl Live {
    pub fn get(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    pub fn end(&self) {
        self.live.store(false, Ordering::Release);
    }

    /// Hits given again from memos of answers made from it go to `repeated`.
    pub fn count_in(&mut self, repeated: &Arc<AtomicU64>) {
        self.repeated = Some(repeated.clone());
    }
}

impl crate::http::repeat::Leased for Stored {
    #[inline]
    fn live(&self) -> bool {
        self.live.get()
    }

    #[inline]
    fn given(&self, n: u64) {
        if let Some(r) = &self.live.repeated {
            r.fetch_add(n, Ordering::Relaxed);
        }
    }
}

impl Stored {
    /// An empty entry, for moving one out.
    pub fn placeholder() -> Stored {
        Stored {
            status: 0,
            headers: Vec::new(),
            body: Bytes::new(),
            trailers: Vec::new(),
            timing: Timing {
                request_time: 0,
                response_time: 0,
                initial_age: 0,
            },
            control: ResponseControl::default(),
            lifetime: 0,
            vary: Vec::new(),
            live: Live::default(),
        }
    }

    /// The bytes it is charged in the budget.
    pub fn size(&self) -> usize {
        ENTRY_OVERHEAD
            + self.body.len()
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len() + 16)
                .sum::<usize>()
            + self
                .trailers
                .iter()
                .map(|(n, v)| n.len() + v.len() + 16)
                .sum::<usize>()
            + self
                .vary
                .iter()
                .map(|(n, v)| n.len() + v.as_ref().map_or(0, Bytes::len))
                .sum::<usize>()
    }

    /// Whether a request whose fields `request` gives matches this variant.
    /// `request` gives the request's value of a field, [`normalized`].
    pub fn matches(&self, request: &impl Fn(&[u8]) -> Option<Bytes>) -> bool {
        vary_matches(&self.vary, request)
    }
}
