//! Small per-request buffers without an allocation each: response heads, DATA frame headers
//! and request bytes are cut from the worker's block ([`crate::http::block`]), and a
//! stream's queue of outgoing frames is a vector reused from the streams that ended before it.

pub(super) use crate::http::block::{copy, cut};
use bytes::Bytes;
use std::cell::RefCell;

/// Frame queues kept for reuse, per worker thread.
const SPARE_QUEUES: usize = 256;

thread_local! {
    // Per worker thread: the endpoint driver and its streams live on one thread.
    static QUEUES: RefCell<Vec<Vec<Bytes>>> = const { RefCell::new(Vec::new()) };
}

/// A frame queue, reused if one is spare.
pub(super) fn queue() -> Vec<Bytes> {
    QUEUES.with(|q| q.borrow_mut().pop()).unwrap_or_default()
}

/// Gives a stream's frame queue back for reuse.
pub(super) fn give_back(mut queue: Vec<Bytes>) {
    if queue.capacity() == 0 || queue.capacity() > 16 {
        return;
    }
    queue.clear();
    QUEUES.with(|q| {
        let mut q = q.borrow_mut();
        if q.len() < SPARE_QUEUES {
            q.push(queue);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_reused_empty() {
        let mut q = queue();
        q.push(Bytes::from_static(b"x"));
        let cap = q.capacity();
        give_back(q);
        let again = queue();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), cap);
    }
}
