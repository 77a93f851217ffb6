//! Interim responses (1xx but 100 and 101: 103 Early Hints, 102 Processing) on their way to
//! the client ahead of the final answer.
//!
//! A pending answer is a future whose output is the final response, and the layers around a
//! proxied exchange (the cache, the edge checks, authentication) only await it. So an interim
//! response does not travel through them: the exchange posts it here while the client's
//! driver polls the answer ([`listen`]), and the driver takes it when the poll returns, in
//! order, before any final head. A post while no answer is polled (a background refresh of
//! the cache) is dropped. One thread polls one answer at a time, so what is posted during a
//! poll belongs to that answer.
//!
//! Nothing here runs for an answer ready now; a pending answer that posts nothing costs two
//! stores of a thread-local byte per poll.

use super::response::Headers;
use std::cell::{Cell, RefCell};

/// One interim response.
#[derive(Debug)]
pub struct Interim {
    /// 102 to 199 (never 100 or 101: those belong to the codecs).
    pub status: u16,
    pub headers: Headers,
}

/// No answer is being polled: posts are dropped.
const DEAF: u8 = 0;
/// An answer is being polled, nothing posted yet.
const LISTENING: u8 = 1;
/// An answer is being polled and posted something.
const POSTED: u8 = 2;

thread_local! {
    static STATE: Cell<u8> = const { Cell::new(DEAF) };
    static QUEUE: RefCell<Vec<Interim>> = const { RefCell::new(Vec::new()) };
}

/// Whether an answer's driver is polling it now: an interim response posted would reach the
/// client (the caller still decides whether the client's protocol takes them).
pub fn listening() -> bool {
    STATE.with(|s| s.get() != DEAF)
}

/// Hands `interim` to the driver polling the current answer; dropped when none is.
pub fn post(interim: Interim) {
    if !listening() {
        return;
    }
    STATE.with(|s| s.set(POSTED));
    QUEUE.with(|q| q.borrow_mut().push(interim));
}

/// How many interim responses the poll under way has posted so far: a layer around an answer
/// notes it before polling its inner answer, then edits what that one posted
/// ([`edit_since`]).
pub fn posted() -> usize {
    if STATE.with(Cell::get) != POSTED {
        return 0;
    }
    QUEUE.with(|q| q.borrow().len())
}

/// Applies `edit` to the interim responses posted during this poll after the first `from`.
pub fn edit_since(from: usize, mut edit: impl FnMut(&mut Interim)) {
    if STATE.with(Cell::get) != POSTED {
        return;
    }
    QUEUE.with(|q| q.borrow_mut().iter_mut().skip(from).for_each(&mut edit));
}

/// Runs `poll` (a poll of one pending answer) listening for interim responses, and gives
/// each one posted to `each`, in order, after it returns.
#[inline]
pub fn listen<R>(poll: impl FnOnce() -> R, mut each: impl FnMut(Interim)) -> R {
    STATE.with(|s| s.set(LISTENING));
    let r = poll();
    if STATE.with(|s| s.replace(DEAF)) == POSTED {
        drain(&mut each);
    }
    r
}

#[inline(never)]
fn drain(each: &mut dyn FnMut(Interim)) {
    let taken = QUEUE.with(|q| std::mem::take(&mut *q.borrow_mut()));
    for i in taken {
        each(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn early(link: &'static str) -> Interim {
        Interim {
            status: 103,
            headers: vec![(
                bytes::Bytes::from_static(b"link"),
                bytes::Bytes::from_static(link.as_bytes()),
            )]
            .into(),
        }
    }

    #[test]
    fn posts_during_a_poll_reach_its_driver_in_order() {
        let mut got = Vec::new();
        let r = listen(
            || {
                post(early("</a.css>"));
                post(early("</b.js>"));
                7
            },
            |i| got.push(i),
        );
        assert_eq!(r, 7);
        let links: Vec<_> = got
            .iter()
            .map(|i| i.headers.iter().next().map(|(_, v)| v.clone()))
            .collect();
        assert_eq!(
            links,
            [
                Some(bytes::Bytes::from_static(b"</a.css>")),
                Some(bytes::Bytes::from_static(b"</b.js>"))
            ]
        );
    }

    #[test]
    fn a_layer_edits_only_what_its_inner_answer_posted() {
        let mut got = Vec::new();
        listen(
            || {
                post(early("</own.css>"));
                let from = posted();
                post(early("</inner.css>"));
                edit_since(from, |i| i.status = 102);
            },
            |i| got.push(i.status),
        );
        assert_eq!(got, [103, 102]);
    }

    #[test]
    fn posts_outside_a_poll_are_dropped() {
        post(early("</stray.css>"));
        assert!(!listening());
        let mut got = 0;
        listen(|| assert!(listening()), |_| got += 1);
        assert_eq!(got, 0);
        assert!(!listening());
    }
}
