//! Small per-request buffers without an allocation each: response heads, DATA frame headers
//! and request bytes are cut from one block per worker thread (each piece costs a reference
//! count), and a stream's queue of outgoing frames is a vector reused from the streams that
//! ended before it.

use bytes::{Bytes, BytesMut};
use std::cell::RefCell;

/// The block pieces are cut from; a new one is started when the rest is too short. A block
/// is freed when the last piece cut from it is dropped.
const BLOCK: usize = 16 * 1024;
/// Frame queues kept for reuse, per worker thread.
const SPARE_QUEUES: usize = 256;

thread_local! {
    // Per worker thread: the endpoint driver and its streams live on one thread.
    static BLOCK_REST: RefCell<BytesMut> = RefCell::new(BytesMut::new());
    static QUEUES: RefCell<Vec<Vec<Bytes>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `write` on an empty buffer with room for `reserve` bytes (it may write more: the
/// buffer grows) and returns what it wrote, cut from the worker's block.
pub(super) fn cut<R>(reserve: usize, write: impl FnOnce(&mut BytesMut) -> R) -> (BytesMut, R) {
    BLOCK_REST.with(|b| {
        let mut b = b.borrow_mut();
        if b.capacity() - b.len() < reserve {
            *b = BytesMut::with_capacity(BLOCK.max(reserve));
        }
        let r = write(&mut b);
        (b.split(), r)
    })
}

/// `bytes` copied into the worker's block.
pub(super) fn copy(bytes: &[u8]) -> BytesMut {
    cut(bytes.len(), |b| b.extend_from_slice(bytes)).0
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
    fn pieces_keep_their_bytes_and_may_outgrow_their_reservation() {
        let a = copy(b"head").freeze();
        let (b, n) = cut(2, |b| {
            b.extend_from_slice(&[7u8; 3000]);
            b.len()
        });
        let c = copy(b"tail").freeze();
        assert_eq!(&a[..], b"head");
        assert_eq!(n, 3000);
        assert!(b.iter().all(|x| *x == 7) && b.len() == 3000);
        assert_eq!(&c[..], b"tail");
        let big = copy(&[1u8; BLOCK + 10]);
        assert_eq!(big.len(), BLOCK + 10);
    }

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
