//! Small short-lived buffers without an allocation each: pieces (a response head, a DATA
//! frame, a backend request head) are cut from one block per worker thread, and each piece
//! costs a reference count. A block is freed when the last piece cut from it is dropped, so
//! a piece kept long keeps its whole block: cut only what goes out soon.

use bytes::BytesMut;
use std::cell::RefCell;

/// The block pieces are cut from; a new one is started when the rest is too short.
const BLOCK: usize = 16 * 1024;

thread_local! {
    static BLOCK_REST: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// Runs `write` on an empty buffer with room for `reserve` bytes (it may write more: the
/// buffer grows) and returns what it wrote, cut from the worker's block.
pub fn cut<R>(reserve: usize, write: impl FnOnce(&mut BytesMut) -> R) -> (BytesMut, R) {
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
pub fn copy(bytes: &[u8]) -> BytesMut {
    cut(bytes.len(), |b| b.extend_from_slice(bytes)).0
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
}
