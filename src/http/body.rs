//! Bodies that stream: a response body a handler produces piece by piece and the codec pulls
//! ([`BodyStream`]), and a request body the codec receives piece by piece and the handler pulls
//! ([`RequestBody`], fed through its [`BodyWriter`]).
//!
//! Both live on one worker thread and are polled by the connection's own task, so the request
//! body is a shared queue (`Rc<RefCell<..>>`), never a channel or a lock. Backpressure: the
//! codec gives flow-control credit back (HTTP/2 WINDOW_UPDATE, reading more from TCP) only for
//! what the handler consumed ([`BodyWriter::take_consumed`]), and pulls a response body only
//! when the client can take more.

use bytes::Bytes;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Header fields after a body (HTTP/1.1 chunked trailers, HTTP/2 trailing HEADERS).
pub type Trailers = Vec<(Bytes, Bytes)>;

/// One piece of a streamed body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data(Bytes),
    /// The last piece, when there are trailers.
    Trailers(Trailers),
}

/// Which side of an exchange failed, as a proxy's logs, retries and status codes need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The backend: unreachable, timed out, malformed, gone mid-body.
    Upstream,
    /// The client: reset the stream, closed the connection, sent a malformed body.
    Downstream,
    /// Ourselves: a limit, a file read error.
    Internal,
}

/// Why a streamed body ended before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyError {
    pub side: Side,
    pub reason: String,
}

impl BodyError {
    pub fn new(side: Side, reason: impl Into<String>) -> BodyError {
        BodyError {
            side,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Upstream => "upstream",
            Side::Downstream => "downstream",
            Side::Internal => "internal",
        };
        write!(f, "{side}: {}", self.reason)
    }
}

/// What polling a streamed body gives: a piece, the end (`None`), or a failure.
pub type Next = Option<Result<Frame, BodyError>>;

/// A response body produced over time (a proxied response). The codec calls `poll_frame`
/// only when the client can take more, so a slow client slows the producer down.
/// Dropping it cancels the work behind it.
pub trait BodyStream {
    /// The next piece. `Ready(None)` ends the body normally; `Ready(Some(Err(_)))` ends it
    /// abnormally, and the codec makes the client see that (a reset, a close before the end).
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next>;
}

/// A streamed response body and its length when known in advance (Content-Length).
pub struct StreamBody {
    pub len: Option<u64>,
    pub stream: Box<dyn BodyStream>,
}

impl fmt::Debug for StreamBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamBody")
            .field("len", &self.len)
            .finish()
    }
}

/// Makes a request body: the codec keeps the writer, the handler gets the body.
pub fn pipe(content_length: Option<u64>) -> (BodyWriter, RequestBody) {
    let shared = Rc::new(RefCell::new(Pipe {
        chunks: VecDeque::new(),
        buffered: 0,
        consumed: 0,
        end: None,
        reader: None,
        reader_gone: false,
        content_length,
    }));
    (
        BodyWriter {
            shared: shared.clone(),
        },
        RequestBody { shared },
    )
}

struct Pipe {
    chunks: VecDeque<Bytes>,
    /// Bytes in `chunks`.
    buffered: usize,
    /// Bytes the reader took since the codec last asked.
    consumed: u64,
    /// Set once the codec saw the end (with trailers, if any) or a failure.
    end: Option<Result<Option<Trailers>, BodyError>>,
    reader: Option<Waker>,
    reader_gone: bool,
    content_length: Option<u64>,
}

impl Pipe {
    fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }
}

/// A request body as a handler pulls it.
pub struct RequestBody {
    shared: Rc<RefCell<Pipe>>,
}

impl RequestBody {
    /// The declared length (Content-Length), if the client sent one.
    pub fn content_length(&self) -> Option<u64> {
        self.shared.borrow().content_length
    }

    /// The next piece of the body. Taking data gives the client credit to send more.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let mut p = self.shared.borrow_mut();
        if let Some(b) = p.chunks.pop_front() {
            p.buffered -= b.len();
            p.consumed += b.len() as u64;
            return Poll::Ready(Some(Ok(Frame::Data(b))));
        }
        match p.end.take() {
            Some(Ok(Some(t))) => {
                p.end = Some(Ok(None));
                Poll::Ready(Some(Ok(Frame::Trailers(t))))
            }
            Some(Ok(None)) => {
                p.end = Some(Ok(None));
                Poll::Ready(None)
            }
            Some(Err(e)) => {
                p.end = Some(Err(e.clone()));
                Poll::Ready(Some(Err(e)))
            }
            None => {
                if !p.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    p.reader = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestBody")
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        let mut p = self.shared.borrow_mut();
        p.reader_gone = true;
        // What was buffered will never be read: it counts as consumed, so the codec gives the
        // credit back.
        p.consumed += p.buffered as u64;
        p.buffered = 0;
        p.chunks.clear();
    }
}

/// The codec's end of a request body.
pub struct BodyWriter {
    shared: Rc<RefCell<Pipe>>,
}

impl BodyWriter {
    /// Queues received body bytes. Dropped at once when the handler no longer reads.
    pub fn push(&self, data: Bytes) {
        let mut p = self.shared.borrow_mut();
        if p.reader_gone {
            p.consumed += data.len() as u64;
            return;
        }
        if data.is_empty() {
            return;
        }
        p.buffered += data.len();
        p.chunks.push_back(data);
        p.wake_reader();
    }

    /// The body ended, with trailers if the client sent any.
    pub fn finish(&self, trailers: Option<Trailers>) {
        let mut p = self.shared.borrow_mut();
        if p.end.is_none() {
            p.end = Some(Ok(trailers.filter(|t| !t.is_empty())));
        }
        p.wake_reader();
    }

    /// The body will not complete: the client reset the stream or went away.
    pub fn abort(&self, e: BodyError) {
        let mut p = self.shared.borrow_mut();
        if p.end.is_none() {
            p.end = Some(Err(e));
        }
        p.wake_reader();
    }

    /// Bytes queued and not yet read by the handler.
    pub fn buffered(&self) -> usize {
        self.shared.borrow().buffered
    }

    /// Bytes the handler read (or dropped) since the last call: credit to give back.
    pub fn take_consumed(&self) -> u64 {
        std::mem::take(&mut self.shared.borrow_mut().consumed)
    }

    /// The handler dropped the body: further bytes are discarded on arrival.
    pub fn reader_gone(&self) -> bool {
        self.shared.borrow().reader_gone
    }

    /// Whether `finish` or `abort` was called.
    pub fn is_finished(&self) -> bool {
        self.shared.borrow().end.is_some()
    }
}

impl fmt::Debug for BodyWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BodyWriter")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn poll(b: &mut RequestBody) -> Poll<Next> {
        let mut cx = Context::from_waker(Waker::noop());
        b.poll_frame(&mut cx)
    }

    #[test]
    fn data_then_trailers_then_end() {
        let (w, mut r) = pipe(None);
        assert!(poll(&mut r).is_pending());
        w.push(Bytes::from_static(b"ab"));
        w.push(Bytes::from_static(b"cd"));
        assert_eq!(w.buffered(), 4);
        w.finish(Some(vec![(
            Bytes::from_static(b"x"),
            Bytes::from_static(b"1"),
        )]));
        assert_eq!(
            poll(&mut r),
            Poll::Ready(Some(Ok(Frame::Data(Bytes::from_static(b"ab")))))
        );
        assert_eq!(w.take_consumed(), 2);
        assert!(matches!(
            poll(&mut r),
            Poll::Ready(Some(Ok(Frame::Data(_))))
        ));
        assert!(matches!(
            poll(&mut r),
            Poll::Ready(Some(Ok(Frame::Trailers(_))))
        ));
        assert_eq!(poll(&mut r), Poll::Ready(None));
        assert_eq!(poll(&mut r), Poll::Ready(None));
        assert_eq!(w.take_consumed(), 2);
    }

    #[test]
    fn dropped_reader_returns_credit() {
        let (w, r) = pipe(Some(10));
        w.push(Bytes::from_static(b"abc"));
        drop(r);
        assert!(w.reader_gone());
        assert_eq!(w.take_consumed(), 3);
        w.push(Bytes::from_static(b"de"));
        assert_eq!(w.take_consumed(), 2);
        assert_eq!(w.buffered(), 0);
    }

    #[test]
    fn abort_is_seen_after_data() {
        let (w, mut r) = pipe(None);
        w.push(Bytes::from_static(b"a"));
        w.abort(BodyError::new(Side::Downstream, "reset"));
        assert!(matches!(poll(&mut r), Poll::Ready(Some(Ok(_)))));
        assert!(matches!(poll(&mut r), Poll::Ready(Some(Err(_)))));
        assert!(matches!(poll(&mut r), Poll::Ready(Some(Err(_)))));
    }
}
