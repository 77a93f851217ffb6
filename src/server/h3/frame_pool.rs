//! DATA frame buffers of file bodies read from disk, reused per worker thread.
//!
//! A file the open-file cache holds no copy of (over `file.memory-cache-max-file-size`) is read
//! `http3-data-frame-size` bytes (16 KiB) at a time into a buffer with the frame header in
//! front, and handed to quinn as `Bytes`; quinn drops it once
//! the client acknowledged it. Allocated each time, such a buffer is too large for malloc's
//! per-thread cache: every chunk cost a search of the heap's bins and a coalescing free
//! (`_int_malloc`, `unlink_chunk` in `perf` on the mixed-size HTTP/3 load). Here the buffer's
//! owner gives it back to a small per-thread stack when quinn lets go of it, and the next
//! chunk takes it from there.

use bytes::Bytes;
use std::cell::RefCell;

/// Bytes of buffers kept per worker thread, whatever the load: 32 of 16 KiB.
const SPARE_BYTES: usize = 512 * 1024;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer of at least `cap` bytes' capacity: a spare one of exactly `cap` if there
/// is one (frames of one size share the stack; other sizes are allocated).
pub(super) fn take(cap: usize) -> Vec<u8> {
    let spare = FREE.with(|f| {
        let mut f = f.borrow_mut();
        match f.last() {
            Some(v) if v.capacity() == cap => f.pop(),
            _ => None,
        }
    });
    spare.unwrap_or_else(|| Vec::with_capacity(cap))
}

/// `frame` as `Bytes` whose buffer comes back to the stack once every slice of it is dropped.
pub(super) fn freeze(frame: Vec<u8>) -> Bytes {
    Bytes::from_owner(Pooled(frame))
}

/// A frame buffer on loan to quinn.
struct Pooled(Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.0);
        v.clear();
        // `try_with`: a buffer dropped while the thread's locals are torn down is just freed.
        let _ = FREE.try_with(|f| {
            let mut f = f.borrow_mut();
            let same_size = f.last().is_none_or(|w| w.capacity() == v.capacity());
            if (f.len() + 1) * v.capacity() <= SPARE_BYTES && same_size {
                f.push(v);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_once_every_slice_is_dropped() {
        let mut v = take(4096);
        v.extend_from_slice(b"frame");
        let ptr = v.as_ptr();
        let b = freeze(v);
        let tail = b.slice(2..);
        drop(b);
        assert_eq!(&tail[..], b"ame");
        drop(tail);
        let again = take(4096);
        assert_eq!(again.as_ptr(), ptr);
        assert!(again.is_empty());
        drop(freeze(again));
        // Another size is not served from the stack, nor kept on it.
        let other = take(100);
        assert_eq!(other.capacity(), 100);
        drop(freeze(other));
        assert_eq!(FREE.with(|f| f.borrow().len()), 1);
        let reused = take(4096);
        assert_eq!(reused.as_ptr(), ptr);
    }

    #[test]
    fn the_stack_is_bounded() {
        let frames: Vec<Bytes> = (0..40).map(|_| freeze(take(16 * 1024))).collect();
        drop(frames);
        assert_eq!(FREE.with(|f| f.borrow().len()), 32);
        // A buffer larger than the whole budget is not kept.
        FREE.with(|f| f.borrow_mut().clear());
        drop(freeze(take(SPARE_BYTES + 1)));
        assert_eq!(FREE.with(|f| f.borrow().len()), 0);
    }
}
