//! Per-worker pool of connection buffers. An idle keep-alive connection gives its read and
//! write buffers back while it waits, so thousands of idle connections hold no buffers and
//! the few busy ones reuse the same cache-warm memory (nginx frees idle buffers likewise).

use crate::proto::h2::{TurnBuffers, DEFAULT_MAX_WRITE};
use bytes::BytesMut;
use std::cell::RefCell;

/// Size of a read buffer; it grows beyond this only for large request heads.
pub(crate) const READ_BUFFER: usize = 16 * 1024;
/// Initial size of a write buffer.
const WRITE_BUFFER: usize = 16 * 1024;
/// Buffers kept for reuse per worker; more are freed.
const KEEP: usize = 64;
/// A write buffer that grew past this (a large pipelined batch) is freed, not kept.
const KEEP_WRITE_MAX: usize = 256 * 1024;
/// HTTP/2 output buffers kept: a connection holds one only during its turn, so a few cover
/// the turns whose writes wait on the socket at once.
const KEEP_OUTPUT: usize = 4;
/// An HTTP/2 output buffer that grew past this is freed, not kept: it holds a turn of the
/// default `http2-max-write-size` and the frame past it, after `Vec`'s doubling.
const KEEP_OUTPUT_MAX: usize = 2 * DEFAULT_MAX_WRITE;
/// HTTP/2 turn buffers kept, as for output buffers.
const KEEP_TURN: usize = 4;
/// Turn buffers that grew past this (a turn of many streams) are freed, not kept.
const KEEP_TURN_MAX: usize = 32 * 1024;

#[derive(Default)]
pub(crate) struct BufferPool {
    read: RefCell<Vec<BytesMut>>,
    write: RefCell<Vec<Vec<u8>>>,
    /// HTTP/2 output buffers between turns, apart from `write`: an HTTP/2 connection does
    /// not take one from here when it starts, so it gives back more than it takes, and the
    /// surplus must not fill the HTTP/1 pool up to [`KEEP`].
    output: RefCell<Vec<Vec<u8>>>,
    /// HTTP/2 turn buffers of connections that are not busy, between their turns.
    turn: RefCell<Vec<TurnBuffers>>,
}

impl BufferPool {
    pub fn read_buffer(&self) -> BytesMut {
        match self.read.borrow_mut().pop() {
            Some(mut b) => {
                // Reclaims the whole allocation when nothing else still points into it.
                b.reserve(READ_BUFFER);
                b
            }
            None => BytesMut::with_capacity(READ_BUFFER),
        }
    }

    pub fn write_buffer(&self) -> Vec<u8> {
        self.write
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(WRITE_BUFFER))
    }

    /// Takes back a read buffer; only an empty one is kept.
    pub fn give_read(&self, b: BytesMut) {
        let mut pool = self.read.borrow_mut();
        if b.is_empty() && b.capacity() > 0 && pool.len() < KEEP {
            pool.push(b);
        }
    }

    pub fn give_write(&self, mut b: Vec<u8>) {
        let mut pool = self.write.borrow_mut();
        if b.capacity() > 0 && b.capacity() <= KEEP_WRITE_MAX && pool.len() < KEEP {
            b.clear();
            pool.push(b);
        }
    }

    /// An HTTP/2 output buffer another turn gave back, if any (its connection allocates
    /// its own otherwise).
    pub fn output_buffer(&self) -> Option<Vec<u8>> {
        self.output.borrow_mut().pop()
    }

    /// Takes back an HTTP/2 output buffer between turns (see
    /// `Connection::release_idle_buffers`); kept when there is room, whatever its capacity
    /// up to [`KEEP_OUTPUT_MAX`], so a turn of large answers finds the room an earlier one
    /// grew.
    pub fn give_output(&self, mut b: Vec<u8>) {
        let mut pool = self.output.borrow_mut();
        if b.capacity() > 0 && b.capacity() <= KEEP_OUTPUT_MAX && pool.len() < KEEP_OUTPUT {
            b.clear();
            pool.push(b);
        }
    }

    /// HTTP/2 turn buffers another connection gave back, if any.
    pub fn turn_buffers(&self) -> Option<TurnBuffers> {
        self.turn.borrow_mut().pop()
    }

    /// Takes back HTTP/2 turn buffers (see `Connection::release_idle_buffers`); kept when
    /// there is room and they did not grow past [`KEEP_TURN_MAX`].
    pub fn give_turn(&self, t: TurnBuffers) {
        let mut pool = self.turn.borrow_mut();
        if pool.len() < KEEP_TURN && t.size() <= KEEP_TURN_MAX {
            pool.push(t);
        }
    }
}

/// Gives freed heap memory back to the system (glibc keeps a burst's peak otherwise).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn trim_allocator() {
    crate::sys::memory::trim_heap();
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn trim_allocator() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_buffers_and_drops_unsuitable_ones() {
        let pool = BufferPool::default();
        let mut r = pool.read_buffer();
        r.extend_from_slice(b"abc");
        pool.give_read(r); // not empty: dropped
        assert!(pool.read.borrow().is_empty());
        let r = pool.read_buffer();
        let ptr = r.as_ptr();
        pool.give_read(r);
        assert_eq!(
            pool.read_buffer().as_ptr(),
            ptr,
            "the same allocation comes back"
        );

        let mut w = pool.write_buffer();
        w.extend_from_slice(b"xyz");
        let ptr = w.as_ptr();
        pool.give_write(w);
        let w = pool.write_buffer();
        assert!(w.is_empty());
        assert_eq!(w.as_ptr(), ptr);
        pool.give_write(Vec::with_capacity(KEEP_WRITE_MAX + 1));
        assert!(pool.write.borrow().is_empty());
    }

    #[test]
    fn keeps_a_few_output_buffers_apart_from_write_buffers() {
        let pool = BufferPool::default();
        assert!(pool.output_buffer().is_none());
        for _ in 0..KEEP_OUTPUT + 3 {
            pool.give_output(Vec::with_capacity(64 * 1024));
        }
        assert_eq!(pool.output.borrow().len(), KEEP_OUTPUT);
        assert!(pool.write.borrow().is_empty());
        let mut big = pool.output_buffer().unwrap();
        assert!(big.capacity() >= 64 * 1024);
        big.extend_from_slice(b"frames");
        pool.give_output(big);
        assert!(pool.output_buffer().unwrap().is_empty());
        pool.give_output(Vec::with_capacity(KEEP_OUTPUT_MAX + 1));
        assert_eq!(pool.output.borrow().len(), KEEP_OUTPUT - 1);
        // A full turn of the default write size, grown by doubling past it, is kept.
        pool.give_output(Vec::with_capacity(2 * DEFAULT_MAX_WRITE));
        assert_eq!(pool.output.borrow().len(), KEEP_OUTPUT);
    }
}
