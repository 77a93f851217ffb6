//! The worker's read arena: reads from backends (HTTP/1.1 responses, tunnels) are carved from
//! per-worker chunks, so a response costs no allocation of its own, only a share of a chunk,
//! which is reused once every piece of it is gone; and a waiting exchange or an idle tunnel
//! holds no buffer.

use super::conn::Conn;
use bytes::{Bytes, BytesMut};
use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Small, because a piece a slow client has not taken yet keeps its whole chunk alive.
const CHUNK: usize = 32 * 1024;

thread_local! {
    static ARENA: RefCell<ReadArena> = RefCell::new(ReadArena(BytesMut::new()));
}

/// Empty between reads: every read is split off whole.
pub struct ReadArena(BytesMut);

impl ReadArena {
    /// Reads what `conn` has now into the worker's arena and hands `buf` (empty) exactly the
    /// bytes that arrived.
    pub fn try_read(conn: &Conn, buf: &mut BytesMut, want: usize) -> io::Result<usize> {
        ARENA.with_borrow_mut(|arena| {
            let chunk = arena.room(want);
            let n = conn.try_read_buf(chunk)?;
            *buf = chunk.split_to(n);
            Ok(n)
        })
    }

    /// Reads what the backend has (at most `want`) into the worker's arena. Through
    /// `AsyncRead`, so that a short read marks the socket drained and the next poll waits for
    /// readiness instead of trying a read that would find nothing (one system call less per
    /// message).
    pub fn poll_read(
        conn: &mut Conn,
        cx: &mut Context<'_>,
        want: usize,
    ) -> Poll<io::Result<Bytes>> {
        // Nothing is reserved while the backend is quiet. Not over TLS: rustls may hold
        // decrypted bytes the socket no longer shows.
        if !conn.is_tls() {
            std::task::ready!(conn.poll_read_ready(cx))?;
        }
        ARENA.with_borrow_mut(|arena| {
            let chunk = arena.room(want);
            debug_assert!(chunk.is_empty());
            // The arena is empty (every read is split off whole): its length becomes `n`.
            let read = |buf: &mut ReadBuf<'_>| Pin::new(&mut *conn).poll_read(cx, buf);
            let n = std::task::ready!(crate::sys::buf::poll_fill(chunk, want, read))?;
            Poll::Ready(Ok(chunk.split_to(n).freeze()))
        })
    }

    /// The chunk, with room for `want` bytes at least.
    fn room(&mut self, want: usize) -> &mut BytesMut {
        if self.0.capacity() < want {
            // Reclaims the chunk when nothing points into it any more, else takes a new one.
            self.0.reserve(CHUNK.max(want));
        }
        &mut self.0
    }
}
