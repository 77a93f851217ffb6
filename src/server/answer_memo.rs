//! The HTTP/1.1 answer memo of a worker's lane: a request repeated byte for byte (a load
//! generator, a health check, a poll, the same asset asked for by many clients) is answered
//! with the bytes of the last answer to it, without parsing, routing or asking a handler.
//!
//! An answer is kept only when its handler says it is the answer to the same request for as
//! long as its body may be reused (`PathRoute::answer_repeats`: `respond`, `redirect`, a
//! file the open-file cache holds; never on a path with an access log). A request is the
//! same when its head has the same bytes and it came to the same local address (routing
//! and the Server line follow the listener). Whether the kept bytes are still the answer is
//! the one rule's ([`Repeatable::at`]): until the body's file is checked again they are,
//! with the Date field rewritten when the second changes; after that the memo is dropped and
//! the request takes the usual path.

use crate::http::clock::{self, BatchClock, DATE_LEN};
use crate::http::repeat::{Repeatable, Reuse};
use std::net::SocketAddr;

/// Request heads longer than this are not kept (and a peer cannot make the memo hold more).
const HEAD_MAX: usize = 1024;
/// Answers longer than this are not kept.
const ANSWER_MAX: usize = 16 * 1024;
/// Requests answered the usual way, while an answer is kept, before the next such answer
/// replaces it: a kept answer nobody repeats gives way, one that is repeated among others
/// stays.
const REPLACE_AFTER_MISSES: u32 = 2;

/// One worker's kept answer.
#[derive(Default)]
pub(crate) struct AnswerMemo {
    /// The request head's bytes; empty when nothing is kept.
    head: Vec<u8>,
    local: Option<SocketAddr>,
    /// The answer's bytes, head and body, as the usual path wrote them.
    answer: Vec<u8>,
    /// Where the Date value is in `answer`; none when it is not ours to change (an answer
    /// from the proxy cache's store says the stored Date, and holds only within the second
    /// its Age was counted in).
    date_at: Option<usize>,
    /// Whether `answer` still holds, and the Date second it says; none when nothing is kept.
    reuse: Option<Repeatable>,
    status: u16,
    /// Requests answered the usual way since the last answer given from here.
    misses: u32,
    /// The head of the last request whose answer could have been kept and was not, and the
    /// address it came to: an answer is kept when its request comes a second time in a row
    /// of such requests, so traffic that does not repeat copies no answer (see
    /// [`AnswerMemo::seen_again`]).
    candidate: Vec<u8>,
    candidate_local: Option<SocketAddr>,
}

/// What the lane needs of an answer given from the memo besides its bytes: the request's
/// length, and the status the metrics count.
pub(crate) struct Given {
    /// The request head's length (the bytes to step past).
    pub head_len: usize,
    pub status: u16,
}

impl AnswerMemo {
    /// The kept answer, when `buf` starts with the kept request head, it came to `local`, and
    /// the answer still holds at `clock`'s time (its Date field then says that second).
    /// Otherwise counts a miss (the request takes the usual path), dropping an answer that no
    /// longer holds.
    #[inline]
    pub fn give(
        &mut self,
        buf: &[u8],
        local: SocketAddr,
        clock: &BatchClock,
    ) -> Option<(Given, &[u8])> {
        let n = self.head.len();
        if n == 0 || buf.len() < n || buf[..n] != self.head[..] || self.local != Some(local) {
            self.misses = self.misses.saturating_add(1);
            return None;
        }
        let Some(reuse) = &mut self.reuse else {
            return None;
        };
        match reuse.at(clock.now()) {
            Reuse::AsKept => {}
            Reuse::Redate(second) => {
                if let Some(at) = self.date_at {
                    clock::with_second(second, |text| {
                        self.answer[at..at + DATE_LEN].copy_from_slice(text)
                    });
                }
                reuse.redated(second);
            }
            Reuse::Stale => {
                self.clear();
                return None;
            }
        }
        self.misses = 0;
        reuse.given(1);
        let given = Given {
            head_len: n,
            status: self.status,
        };
        Some((given, &self.answer))
    }

    /// Whether the next answer that repeats should be kept: none is, or the kept one was
    /// not asked for lately.
    #[inline]
    pub fn wants(&self) -> bool {
        self.head.is_empty() || self.misses >= REPLACE_AFTER_MISSES
    }

    /// Whether the request with `head`, to `local`, whose answer could be kept, is the one
    /// seen last time such a request came: only then is its answer worth keeping. Otherwise
    /// it becomes the one to look for, at the cost of copying its head (a varied stream of
    /// requests would otherwise copy every other answer into the memo, to give none).
    #[inline]
    pub fn seen_again(&mut self, head: &[u8], local: SocketAddr) -> bool {
        if self.candidate == head && self.candidate_local == Some(local) {
            return true;
        }
        if head.len() <= HEAD_MAX {
            self.candidate.clear();
            self.candidate.extend_from_slice(head);
            self.candidate_local = Some(local);
        }
        false
    }

    /// Keeps `answer` (head and body, as written, with its Date field) for the request with
    /// `head` that came to `local`; `reuse` is the rule for it, its Date second not known yet
    /// (the next answer given writes the current date in, unless the Date is a store's:
    /// [`Repeatable::leased`]). Out of line: the miss.
    #[inline(never)]
    pub fn keep(
        &mut self,
        head: &[u8],
        local: SocketAddr,
        status: u16,
        reuse: Repeatable,
        answer: &[u8],
    ) {
        self.clear();
        let date_at = if reuse.leased() {
            None
        } else {
            let Some(at) = date_value_at(answer) else {
                return;
            };
            Some(at)
        };
        if head.len() > HEAD_MAX || answer.len() > ANSWER_MAX {
            return;
        }
        self.head.extend_from_slice(head);
        self.answer.extend_from_slice(answer);
        self.local = Some(local);
        self.date_at = date_at;
        self.reuse = Some(reuse);
        self.status = status;
    }

    fn clear(&mut self) {
        self.head.clear();
        self.answer.clear();
        self.reuse = None;
        self.misses = 0;
    }
}

/// Where the value of the Date field starts in a response head the server wrote: its own
/// Date field comes first (after the status and Server lines), before any of the handler's.
/// A walk over the line ends, which stops at the head's end: it is a few lines in, and a
/// `memmem` searcher costs more to set up than this walk.
fn date_value_at(answer: &[u8]) -> Option<usize> {
    const FIELD: &[u8] = b"\r\nDate: ";
    for i in memchr::memchr_iter(b'\r', answer) {
        let rest = &answer[i..];
        if rest.starts_with(b"\r\n\r\n") {
            return None;
        }
        if rest.starts_with(FIELD) {
            let at = i + FIELD.len();
            let value = answer.get(at..at + DATE_LEN)?;
            return (!value.contains(&b'\r')).then_some(at);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Body;

    const GET: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";

    fn local() -> SocketAddr {
        "127.0.0.1:8080".parse().unwrap()
    }

    fn answer() -> Vec<u8> {
        let mut a = b"HTTP/1.1 200 OK\r\nServer: s\r\nDate: ".to_vec();
        a.extend_from_slice(&[b'x'; DATE_LEN]);
        a.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\n42");
        a
    }

    /// The rule for an answer of bytes alone.
    fn bytes() -> Repeatable {
        Repeatable::of(&Body::Empty).expect("bytes are kept whole")
    }

    fn kept() -> AnswerMemo {
        let mut m = AnswerMemo::default();
        assert!(m.wants());
        m.keep(GET, local(), 200, bytes(), &answer());
        m
    }

    #[test]
    fn a_repeated_head_gets_the_kept_answer_with_the_current_date() {
        let mut m = kept();
        let mut buf = GET.to_vec();
        buf.extend_from_slice(b"GET /next");
        let clock = BatchClock::default();
        let (given, out) = m.give(&buf, local(), &clock).expect("a repeat");
        assert_eq!(given.head_len, GET.len());
        assert_eq!(given.status, 200);
        let at = date_value_at(out).unwrap();
        let said = clock::with_second(clock.now().unix_second, |d| *d);
        assert_eq!(&out[at..at + DATE_LEN], said);
        assert!(out.ends_with(b"\r\n\r\n42"));
        assert!(!m.wants());
        // A batch a second later: the same answer, dated anew.
        let next = clock.now().unix_second + 1;
        let later = BatchClock::at(clock::Coarse {
            unix_second: next,
            ..clock.now()
        });
        let (_, out) = m.give(GET, local(), &later).expect("a repeat");
        let at = date_value_at(out).unwrap();
        assert_eq!(&out[at..at + DATE_LEN], clock::with_second(next, |d| *d));
    }

    #[test]
    fn another_head_or_address_or_a_partial_head_is_a_miss() {
        let mut m = kept();
        let clock = BatchClock::default();
        let other = b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(m.give(other, local(), &clock).is_none());
        assert!(m.give(&GET[..GET.len() - 1], local(), &clock).is_none());
        let elsewhere: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert!(m.give(GET, elsewhere, &clock).is_none());
        // Not asked for lately: the next answer replaces it.
        assert!(m.wants());
        assert!(m.give(GET, local(), &clock).is_some());
        assert!(!m.wants());
    }

    #[test]
    fn an_answer_is_worth_keeping_when_its_request_comes_twice_in_a_row() {
        let mut m = AnswerMemo::default();
        let other = b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n";
        let elsewhere: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert!(!m.seen_again(GET, local()));
        assert!(!m.seen_again(other, local()));
        assert!(!m.seen_again(GET, local()), "another came between");
        assert!(!m.seen_again(GET, elsewhere), "to another address");
        assert!(m.seen_again(GET, elsewhere));
        let long_head = [b'a'; HEAD_MAX + 1];
        assert!(!m.seen_again(&long_head, local()));
        assert!(!m.seen_again(&long_head, local()), "too long to look for");
    }

    #[test]
    fn bodies_in_parts_or_streamed_have_no_source() {
        let part = crate::http::response::BodyPart::Bytes(bytes::Bytes::from_static(b"4"));
        assert!(Repeatable::of(&Body::Parts(vec![part])).is_none());
        assert!(Repeatable::of(&Body::Empty).is_some());
    }

    #[test]
    fn the_date_is_found_in_the_head_only() {
        let a = answer();
        let before = b"HTTP/1.1 200 OK\r\nServer: s\r\nDate: ".len();
        assert_eq!(date_value_at(&a), Some(before));
        assert_eq!(date_value_at(b"HTTP/1.1 200 OK\r\n\r\nDate: x"), None);
        assert_eq!(
            date_value_at(b"HTTP/1.1 200 OK\r\nDate: short\r\n\r\n"),
            None
        );
        assert_eq!(date_value_at(b"HTTP/1.1 200 OK\r\nDate: "), None);
    }

    #[test]
    fn an_answer_from_a_store_keeps_its_date_and_counts_its_repeats() {
        use crate::http::repeat::{offer, Leased};
        use std::sync::atomic::{AtomicU64, Ordering};
        struct Entry(AtomicU64);
        impl Leased for Entry {
            fn live(&self) -> bool {
                true
            }
            fn given(&self, n: u64) {
                self.0.fetch_add(n, Ordering::Relaxed);
            }
        }
        let body = bytes::Bytes::from_static(b"42");
        let entry = std::sync::Arc::new(Entry(AtomicU64::new(0)));
        offer(&body, entry.clone(), u64::MAX);
        let reuse = Repeatable::of(&Body::Bytes(body)).expect("bytes are kept whole");
        let stored = b"HTTP/1.1 200 OK\r\nServer: s\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
                       Age: 3\r\nContent-Length: 2\r\n\r\n42";
        let mut m = AnswerMemo::default();
        m.keep(GET, local(), 200, reuse, stored);
        let clock = BatchClock::default();
        let (_, out) = m.give(GET, local(), &clock).expect("a repeat");
        assert_eq!(out, stored, "the stored Date as it was");
        let later = BatchClock::at(clock::Coarse {
            unix_second: clock.now().unix_second + 1,
            ..clock.now()
        });
        let (_, out) = m.give(GET, local(), &later).expect("a repeat");
        assert_eq!(out, stored);
        assert_eq!(entry.0.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn long_or_undated_answers_are_not_kept() {
        let mut m = AnswerMemo::default();
        m.keep(GET, local(), 200, bytes(), b"HTTP/1.1 200 OK\r\n\r\n42");
        assert!(m.wants());
        let mut long = answer();
        long.resize(ANSWER_MAX + 1, b'.');
        m.keep(GET, local(), 200, bytes(), &long);
        assert!(m.wants());
        let long_head = [b'a'; HEAD_MAX + 1];
        m.keep(&long_head, local(), 200, bytes(), &answer());
        assert!(m.wants());
    }
}
