//! The one rule for repeatable answers: whether an answer kept from before may be given
//! again at `now`, and with which Date second ([`Repeatable::at`]). The protocol caches keep
//! the encoded bytes (an HTTP/1.1 head or whole answer, an HPACK block and its frames, a run
//! of slots, a QPACK section) and ask this rule whether those bytes still answer.
//!
//! An answer repeats when its handler says it depends on nothing but the request, the
//! configuration and the file it was made from ([`crate::http::Handler::answer_repeats`]),
//! and its body is kept whole: bytes always hold, a file's contents while the open-file
//! cache would answer from it unchecked ([`OpenFile::reusable_at`]), a body in parts or
//! streamed never. Its Date is the one thing that changes with time: kept bytes say the
//! second they were made in ([`Dated`]), and are patched or renewed when it changes. The
//! configuration generation needs no check: a reload makes new workers, and every memo here
//! is a worker's or a connection's.
//!
//! The six memos, and what each keys on, stores, and when it expires:
//!
//! - `proto/h1/parse_memo.rs` (`ParseMemo`): keys on a request head's bytes, under the
//!   worker's fixed limits; stores its parse. Never expires: a parse is a function of those
//!   bytes alone. Kept only when the same head came twice in a row.
//! - `server/answer_memo.rs` (`AnswerMemo`): keys on a request head's bytes and the local
//!   address; stores the whole HTTP/1.1 answer. Holds while [`Repeatable::at`] says so (the
//!   file's freshness), with the Date patched for a new second; dropped when stale. Kept
//!   only when the same head came twice in a row; replaced after a few misses.
//! - `proto/h2/conn/repeat.rs` (`AnswerMemo` of a `RequestMemo`): keys on the request's HPACK
//!   block bytes while the decoder's table is unchanged; stores the answer's HEADERS and DATA
//!   frames. Holds while the headers cache keeps the block's stamp (the encoder's table
//!   unchanged), its Date is this turn's (the block indexes it: a new second renews the
//!   answer) and [`Repeatable::holds_at`] says the body holds, checked once a turn.
//! - `proto/h2/runs.rs` (`RunBuffer`): keys on an answer's frame bytes and the identity of
//!   its body (held); stores slots of that answer laid out back to back. Never expires on its
//!   own: it is filled only from an h2 answer memo that the rule vouches for at that turn.
//! - `proto/h3/qpack/memo.rs` (`LineMemo`): keys on a field's name and value bytes; stores
//!   its encoded field line. Never expires: with the static table only, a line is a function
//!   of its field.
//! - `proto/h3/qpack/section_memo.rs` (`SectionMemo`): keys on the status and every field's
//!   bytes (the Date among them, so a new second is a miss); stores the encoded section.
//!   Never expires, for the same reason.
//!
//! An answer made from an entry of a shared store (the proxy cache's fresh hit) also holds
//! only while its [`Lease`] does: the entry is still the store's, and the wall second its
//! `Age` was counted in has not ended. Its handler offers the lease with the answer
//! ([`offer`]); [`Repeatable::of`] takes it for the body it was offered with.

use super::clock::Coarse;
use super::{Body, OpenFile, Response};
use bytes::Bytes;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// What makes a kept answer the answer again: the file its body came from, if any, and the
/// Date second its bytes say.
#[derive(Debug, Clone)]
pub struct Repeatable {
    /// The open-file cache's entry the body was made from; none for bytes.
    file: Option<Rc<OpenFile>>,
    /// The shared store's entry the answer was made from, if any.
    lease: Option<Lease>,
    dated: Dated,
}

/// What an entry of a store shared by the workers says of itself (the proxy cache's
/// stored response).
pub trait Leased: Send + Sync {
    /// Whether it is still the store's: false once replaced, dropped or purged.
    fn live(&self) -> bool;

    /// `n` answers made from it were given again from a memo (counted as the store's hits).
    fn given(&self, n: u64);
}

/// An answer made from a store's entry holds while the entry is live and until `until_ns`
/// (on [`super::clock::coarse_ns`]): the end of the second its age was counted in.
#[derive(Clone)]
pub struct Lease {
    pub entry: Arc<dyn Leased>,
    pub until_ns: u64,
    /// The body the answer was made with (its address and length), to know it again.
    body: (usize, usize),
}

impl Lease {
    #[inline]
    fn holds_at(&self, coarse_ns: u64) -> bool {
        coarse_ns < self.until_ns && self.entry.live()
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("until_ns", &self.until_ns)
            .finish()
    }
}

thread_local! {
    /// The lease offered with the last answer made from a store's entry on this worker.
    static OFFERED: RefCell<Option<Lease>> = const { RefCell::new(None) };
}

/// Offers `entry`'s lease for an answer whose body is `body`, until `until_ns`: the
/// answer may then repeat ([`offered`]) while the lease holds.
#[inline]
pub fn offer(body: &Bytes, entry: Arc<dyn Leased>, until_ns: u64) {
    let lease = Lease {
        entry,
        until_ns,
        body: (body.as_ptr() as usize, body.len()),
    };
    OFFERED.with_borrow_mut(|o| *o = Some(lease));
}

/// Whether a lease was offered for `body` (an answer just made with it).
pub fn offered(body: &Body) -> bool {
    lease_for(body).is_some()
}

/// The lease offered for `body`, if any: an answer's body of bytes is known by its address
/// and length, which no other live answer's bytes share but one made from the same entry.
fn lease_for(body: &Body) -> Option<Lease> {
    let Body::Bytes(b) = body else {
        return None;
    };
    let id = (b.as_ptr() as usize, b.len());
    OFFERED.with_borrow(|o| o.as_ref().filter(|l| l.body == id).cloned())
}

/// What [`Repeatable::at`] says of a kept answer at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// The answer as kept: its Date says this second.
    AsKept,
    /// The answer once its Date says this second instead (then [`Repeatable::redated`]).
    Redate(u64),
    /// No longer the answer: its file is to be checked again.
    Stale,
}

impl Repeatable {
    /// The rule for `resp` when its handler's verdict ([`crate::http::Handler::answer_repeats`])
    /// is `repeats`; None when it may not be given again. Its Date second is not known yet.
    #[inline]
    pub fn answer(resp: &Response, repeats: bool) -> Option<Repeatable> {
        if !repeats {
            return None;
        }
        Repeatable::of(&resp.body)
    }

    /// The rule for an answer with `body`, its handler's verdict taken: none for a body that
    /// is not kept whole (in parts or streamed).
    #[inline]
    pub fn of(body: &Body) -> Option<Repeatable> {
        let (file, lease) = match body {
            Body::Empty => (None, None),
            Body::Bytes(_) => (None, lease_for(body)),
            Body::File(f) => (Some(f.file.clone()), None),
            Body::Parts(_) | Body::Stream(_) => return None,
        };
        Some(Repeatable {
            file,
            lease,
            dated: Dated::UNKNOWN,
        })
    }

    /// Whether the kept answer is still the answer at `now`, and with which Date second.
    #[inline]
    pub fn at(&self, now: Coarse) -> Reuse {
        if !self.holds_at(now.monotonic_ns) {
            Reuse::Stale
        } else if self.dated.second == now.unix_second {
            Reuse::AsKept
        } else {
            Reuse::Redate(now.unix_second)
        }
    }

    /// Whether what the answer was made from still holds at `coarse_ns` (on
    /// [`super::clock::coarse_ns`]), its Date aside: for a memo whose encoded bytes carry the
    /// Date in a key of their own (the HTTP/2 headers cache's).
    #[inline]
    pub fn holds_at(&self, coarse_ns: u64) -> bool {
        self.file.as_ref().is_none_or(|f| f.reusable_at(coarse_ns))
            && self.lease.as_ref().is_none_or(|l| l.holds_at(coarse_ns))
    }

    /// Whether the answer was made from a store's entry (its Date is the stored one).
    #[inline]
    pub fn leased(&self) -> bool {
        self.lease.is_some()
    }

    /// Counts `n` answers given again from a memo: a store's entry counts them as its hits
    /// (one branch for any other answer).
    #[inline]
    pub fn given(&self, n: usize) {
        if let Some(l) = &self.lease {
            l.entry.given(n as u64);
        }
    }

    /// The kept bytes now say `second` (after [`Reuse::Redate`]).
    #[inline]
    pub fn redated(&mut self, second: u64) {
        self.dated.second = second;
    }
}

/// The Date second kept bytes say, for bytes that never go stale but for their Date (a
/// rendered head whose fields the memo holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dated {
    second: u64,
}

impl Dated {
    /// No second yet: the first answer given writes the current one in.
    pub const UNKNOWN: Dated = Dated { second: u64::MAX };

    /// Bytes dated `second`.
    #[inline]
    pub fn at(second: u64) -> Dated {
        Dated { second }
    }

    /// Whether the kept bytes must be patched to say `second`; they then say it.
    #[inline]
    pub fn redate(&mut self, second: u64) -> bool {
        if self.second == second {
            return false;
        }
        self.second = second;
        true
    }
}

impl Default for Dated {
    fn default() -> Dated {
        Dated::UNKNOWN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::FileRange;
    use bytes::Bytes;
    use std::time::SystemTime;

    const SECOND: u64 = 784_111_777;

    fn at(monotonic_ns: u64, unix_second: u64) -> Coarse {
        Coarse {
            monotonic_ns,
            unix_second,
        }
    }

    fn file_body(reuse_until: u64) -> (Rc<OpenFile>, Body) {
        let f = std::fs::File::open("Cargo.toml").expect("the crate's manifest");
        let open = Rc::new(OpenFile::new(f, 2, SystemTime::UNIX_EPOCH, None));
        open.reuse_until.set(reuse_until);
        let body = Body::File(FileRange {
            file: open.clone(),
            offset: 0,
            len: 2,
        });
        (open, body)
    }

    fn dated(body: &Body, second: u64) -> Repeatable {
        let mut r = Repeatable::of(body).expect("a body kept whole");
        r.redated(second);
        r
    }

    #[test]
    fn fresh_bytes_repeat_as_kept_in_their_second() {
        let r = dated(&Body::Bytes(Bytes::from_static(b"42")), SECOND);
        assert_eq!(r.at(at(0, SECOND)), Reuse::AsKept);
        assert_eq!(r.at(at(u64::MAX, SECOND)), Reuse::AsKept);
        assert!(r.holds_at(u64::MAX));
        let r = dated(&Body::Empty, SECOND);
        assert_eq!(r.at(at(7, SECOND)), Reuse::AsKept);
    }

    #[test]
    fn a_file_holds_until_the_cache_checks_it_again() {
        let (open, body) = file_body(1_000);
        let r = dated(&body, SECOND);
        assert_eq!(r.at(at(999, SECOND)), Reuse::AsKept);
        assert_eq!(r.at(at(1_000, SECOND)), Reuse::Stale);
        // The file changed: the cache let go of its entry.
        open.reuse_until.set(0);
        assert_eq!(r.at(at(0, SECOND)), Reuse::Stale);
        assert!(!r.holds_at(0));
    }

    #[test]
    fn a_new_second_redates() {
        let mut r = dated(&Body::Bytes(Bytes::from_static(b"42")), SECOND);
        assert_eq!(r.at(at(5, SECOND + 1)), Reuse::Redate(SECOND + 1));
        r.redated(SECOND + 1);
        assert_eq!(r.at(at(5, SECOND + 1)), Reuse::AsKept);
        // Not dated yet: any second redates.
        let fresh = Repeatable::of(&Body::Empty).expect("kept whole");
        assert_eq!(fresh.at(at(5, SECOND)), Reuse::Redate(SECOND));
        // A stale file is stale whatever the second.
        let (_open, body) = file_body(0);
        assert_eq!(dated(&body, SECOND).at(at(5, SECOND + 1)), Reuse::Stale);
    }

    #[test]
    fn bodies_in_parts_or_streamed_never_repeat() {
        let part = crate::http::response::BodyPart::Bytes(Bytes::from_static(b"4"));
        assert!(Repeatable::of(&Body::Parts(vec![part])).is_none());
        struct Never;
        impl crate::http::BodyStream for Never {
            fn poll_frame(
                &mut self,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<crate::http::body::Next> {
                std::task::Poll::Pending
            }
        }
        let stream = crate::http::StreamBody {
            len: None,
            stream: Box::new(Never),
        };
        assert!(Repeatable::of(&Body::Stream(stream)).is_none());
        let resp = Response::new(200);
        assert!(Repeatable::answer(&resp, false).is_none());
        assert!(Repeatable::answer(&resp, true).is_some());
    }

    struct Entry(std::sync::atomic::AtomicBool, std::sync::atomic::AtomicU64);

    impl Leased for Entry {
        fn live(&self) -> bool {
            self.0.load(std::sync::atomic::Ordering::Relaxed)
        }

        fn given(&self, n: u64) {
            self.1.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn an_answer_from_a_store_holds_while_its_lease_does() {
        let body = Bytes::from(vec![b'x'; 64]);
        let entry = Arc::new(Entry(
            std::sync::atomic::AtomicBool::new(true),
            std::sync::atomic::AtomicU64::new(0),
        ));
        // Not offered: bytes alone always hold.
        assert!(!offered(&Body::Bytes(body.clone())));
        offer(&body, entry.clone(), 1_000);
        assert!(offered(&Body::Bytes(body.clone())));
        // Other bytes (another answer's, or a copy) are not the lease's.
        assert!(!offered(&Body::Bytes(Bytes::from(vec![b'x'; 64]))));
        assert!(!offered(&Body::Bytes(body.slice(1..))));
        let r = dated(&Body::Bytes(body.clone()), SECOND);
        assert!(r.leased());
        assert_eq!(r.at(at(999, SECOND)), Reuse::AsKept);
        // Answers given again from a memo are counted by the entry.
        r.given(3);
        r.given(1);
        assert_eq!(entry.1.load(std::sync::atomic::Ordering::Relaxed), 4);
        // The second its age was counted in ended.
        assert_eq!(r.at(at(1_000, SECOND + 1)), Reuse::Stale);
        assert!(!r.holds_at(1_000));
        // The entry was replaced, evicted or purged.
        entry.0.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(!r.holds_at(0));
        assert_eq!(r.at(at(0, SECOND)), Reuse::Stale);
        // A body the lease was not offered for holds as bytes do.
        let other = dated(&Body::Bytes(Bytes::from_static(b"42")), SECOND);
        assert!(other.holds_at(u64::MAX));
        assert!(!other.leased());
        other.given(1);
        assert_eq!(entry.1.load(std::sync::atomic::Ordering::Relaxed), 4);
    }

    #[test]
    fn dated_bytes_are_patched_once_a_second() {
        let mut d = Dated::UNKNOWN;
        assert!(d.redate(SECOND));
        assert!(!d.redate(SECOND));
        assert!(d.redate(SECOND + 1));
        assert_eq!(d, Dated::at(SECOND + 1));
    }
}
