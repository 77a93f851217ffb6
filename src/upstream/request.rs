//! Sending a request to a backend: the head, then the body as the client's codec delivers it,
//! framed with Content-Length or chunked (trailers as chunked trailers). Writes are vectored
//! and the body's bytes are never copied.
//!
//! On a reused connection the body pieces sent are also kept (they are reference-counted, so
//! this costs no copy) until the response starts, up to a bound: if the backend had closed the
//! connection, the request can be sent again on a fresh one.

use super::conn::Conn;
use super::fields::is_forbidden_trailer;
use crate::http::{BodyError, Frame, RequestBody, Side};
use crate::proto::h1::{self, RequestFraming};
use bytes::{Buf, Bytes};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;

/// Slices handed to one vectored write.
const MAX_IOV: usize = 32;

/// Why sending stopped.
#[derive(Debug)]
pub enum SendError {
    /// Writing to the backend failed.
    Io(io::Error),
    /// The client's body failed (or broke its own framing).
    Body(BodyError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `Expect: 100-continue` was sent: the body waits for `100 Continue`.
    AwaitContinue,
    /// Sending the body as it arrives.
    Body,
    /// Everything is queued (and sent once `out` is empty).
    Done,
    /// A write or the body failed; nothing more is sent.
    Failed,
}

/// What a request needs to be sent (again): the serialized head and the body.
pub struct Prepared {
    pub head: Bytes,
    pub body: Option<RequestBody>,
    pub framing: RequestFraming,
    pub expect_continue: bool,
    /// Body pieces taken from `body` on an earlier attempt, to send first.
    pub replay: Vec<Frame>,
}

impl Prepared {
    /// Nothing to send: what an `Outgoing` (`h1.rs`) holds while its
    /// request is out.
    pub fn empty() -> Prepared {
        Prepared {
            head: Bytes::new(),
            body: None,
            framing: RequestFraming::None,
            expect_continue: false,
            replay: Vec::new(),
        }
    }

    /// Serializes the head of a request.
    pub fn new(req: &h1::RequestHead<'_>, body: Option<RequestBody>) -> Prepared {
        // Cut from the worker's block: the head lives until the response starts.
        let fields: usize = req.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let size = req.target.len() + fields + 96;
        let (head, ()) = crate::http::block::cut(size, |out| h1::write_request_head(out, req));
        Prepared {
            head: head.freeze(),
            body,
            framing: req.framing,
            expect_continue: req.expect_continue,
            replay: Vec::new(),
        }
    }
}

pub struct RequestWriter {
    head_len: usize,
    /// The head, kept for a retry until the response starts.
    head: Bytes,
    /// What is left to write of the head, before `out` (a request without a body needs no
    /// queue).
    head_left: Bytes,
    out: VecDeque<Bytes>,
    out_len: usize,
    /// Bytes written so far (head first).
    written: usize,
    body: Option<RequestBody>,
    framing: RequestFraming,
    expect_continue: bool,
    /// Body bytes still to come under Content-Length framing.
    left: u64,
    state: State,
    /// Body pieces taken so far, while a retry is still possible.
    replay: Option<Vec<Frame>>,
    replay_len: usize,
    /// Stop taking body pieces once this much is queued (`proxy.max-buffer-size`).
    high_water: usize,
    progressed: bool,
    /// TLS held records the socket did not take when everything else was written.
    unflushed: bool,
}

impl RequestWriter {
    /// `keep_replay`: keep the body pieces sent, for a retry (only worth it on a reused
    /// connection).
    pub fn new(p: Prepared, keep_replay: bool, high_water: usize) -> RequestWriter {
        let (left, state) = match p.framing {
            RequestFraming::None | RequestFraming::Length(0) => (0, State::Done),
            RequestFraming::Length(n) => (n, State::Body),
            RequestFraming::Chunked => (0, State::Body),
        };
        // A retry resends what was taken at once: the backend may take a body sent without
        // waiting for `100 Continue`.
        let state = if state == State::Body && p.expect_continue && p.replay.is_empty() {
            State::AwaitContinue
        } else {
            state
        };
        let mut w = RequestWriter {
            head_len: p.head.len(),
            head: p.head.clone(),
            out_len: p.head.len(),
            head_left: p.head,
            out: VecDeque::new(),
            written: 0,
            body: if state == State::Done { None } else { p.body },
            framing: p.framing,
            expect_continue: p.expect_continue,
            left,
            state,
            replay: keep_replay.then(Vec::new),
            replay_len: 0,
            high_water,
            progressed: false,
            unflushed: false,
        };
        for f in p.replay {
            // These were accepted once; the same checks pass again.
            let _ = w.queue_frame(f);
        }
        w
    }

    /// Sends what is queued and takes more of the body while the backend accepts it.
    /// `Ready(Ok)` once the whole request is sent; after `Ready(Err)` nothing more is sent.
    pub fn poll_send(
        &mut self,
        conn: &mut Conn,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), SendError>> {
        loop {
            if let Err(e) = self.poll_flush(conn, cx) {
                self.fail();
                return Poll::Ready(Err(SendError::Io(e)));
            }
            match self.state {
                // Sent once TLS, too, has written out the records it holds.
                State::Done if self.out_len == 0 => {
                    return match Pin::new(&mut *conn).poll_flush(cx) {
                        Poll::Ready(Ok(())) => {
                            self.unflushed = false;
                            Poll::Ready(Ok(()))
                        }
                        Poll::Ready(Err(e)) => {
                            self.fail();
                            Poll::Ready(Err(SendError::Io(e)))
                        }
                        Poll::Pending => {
                            self.unflushed = true;
                            Poll::Pending
                        }
                    };
                }
                State::Done | State::AwaitContinue | State::Failed => return Poll::Pending,
                State::Body => {}
            }
            if self.out_len >= self.high_water {
                return Poll::Pending;
            }
            let Some(body) = self.body.as_mut() else {
                // Only on a retry: the body ended during the first attempt.
                if let Err(e) = self.queue_end() {
                    self.fail();
                    return Poll::Ready(Err(SendError::Body(e)));
                }
                continue;
            };
            let next = match body.poll_frame(cx) {
                Poll::Ready(next) => next,
                Poll::Pending => return Poll::Pending,
            };
            let queued = match next {
                Some(Ok(frame)) => self.queue_frame(frame),
                Some(Err(e)) => Err(e),
                None => self.queue_end(),
            };
            if let Err(e) = queued {
                self.fail();
                return Poll::Ready(Err(SendError::Body(e)));
            }
        }
    }

    /// The backend said `100 Continue` (or we stopped waiting for it): send the body.
    pub fn start_body(&mut self) {
        if self.state == State::AwaitContinue {
            self.state = State::Body;
        }
    }

    pub fn awaits_continue(&self) -> bool {
        self.state == State::AwaitContinue
    }

    /// The whole request has been written.
    pub fn is_sent(&self) -> bool {
        self.state == State::Done && self.out_len == 0
    }

    /// Bytes are queued that the backend has not accepted yet.
    pub fn is_blocked(&self) -> bool {
        (self.out_len > 0 || self.unflushed) && self.state != State::Failed
    }

    /// Whether bytes moved since the last call.
    pub fn take_progress(&mut self) -> bool {
        std::mem::take(&mut self.progressed)
    }

    /// The response has started: the request will not be sent again.
    pub fn forget_replay(&mut self) {
        self.replay = None;
        self.head = Bytes::new();
    }

    /// The request, to send again on a fresh connection: possible while every body piece
    /// taken is still kept, and either no body byte reached the backend or sending it twice
    /// is harmless (`idempotent`).
    pub fn into_retry(self, idempotent: bool) -> Option<Prepared> {
        let body_sent = self.written > self.head_len;
        if body_sent && !idempotent {
            return None;
        }
        let replay = self.replay?;
        Some(Prepared {
            head: self.head,
            body: self.body,
            framing: self.framing,
            expect_continue: self.expect_continue,
            replay,
        })
    }

    /// Stops sending. The body stays: a retry continues from where it was.
    fn fail(&mut self) {
        self.state = State::Failed;
        self.head_left = Bytes::new();
        self.out.clear();
        self.out_len = 0;
    }

    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.out_len += b.len();
            self.out.push_back(b);
        }
    }

    fn keep_for_replay(&mut self, f: &Frame) {
        if let Some(r) = self.replay.as_mut() {
            if let Frame::Data(d) = f {
                self.replay_len += d.len();
            }
            if self.replay_len > self.high_water {
                self.replay = None;
            } else {
                r.push(f.clone());
            }
        }
    }

    fn queue_frame(&mut self, frame: Frame) -> Result<(), BodyError> {
        self.keep_for_replay(&frame);
        match frame {
            Frame::Data(d) if d.is_empty() => Ok(()),
            Frame::Data(d) => match self.framing {
                RequestFraming::Length(_) => {
                    if d.len() as u64 > self.left {
                        return Err(BodyError::new(
                            Side::Internal,
                            "request body longer than its Content-Length",
                        ));
                    }
                    self.left -= d.len() as u64;
                    self.push(d);
                    Ok(())
                }
                RequestFraming::Chunked => {
                    let mut size = Vec::with_capacity(18);
                    h1::write_chunk_size(&mut size, d.len());
                    self.push(Bytes::from(size));
                    self.push(d);
                    self.push(Bytes::from_static(b"\r\n"));
                    Ok(())
                }
                RequestFraming::None => Err(BodyError::new(
                    Side::Internal,
                    "request body without framing",
                )),
            },
            Frame::Trailers(mut t) => {
                t.retain(|(n, _)| !is_forbidden_trailer(n));
                if self.framing == RequestFraming::Chunked {
                    let mut last = Vec::with_capacity(64);
                    h1::write_last_chunk(&mut last, &t);
                    self.push(Bytes::from(last));
                    self.state = State::Done;
                    self.body = None;
                    Ok(())
                } else {
                    // Content-Length framing has no place for trailers: they are dropped.
                    self.queue_end()
                }
            }
        }
    }

    fn queue_end(&mut self) -> Result<(), BodyError> {
        match self.framing {
            RequestFraming::Chunked => self.push(Bytes::from_static(b"0\r\n\r\n")),
            RequestFraming::Length(_) if self.left > 0 => {
                return Err(BodyError::new(
                    Side::Downstream,
                    "request body shorter than its Content-Length",
                ))
            }
            _ => {}
        }
        self.state = State::Done;
        self.body = None;
        Ok(())
    }

    /// Writes what is queued until the socket is full. `Ok` also when it would block.
    fn poll_flush(&mut self, conn: &mut Conn, cx: &mut Context<'_>) -> io::Result<()> {
        while self.out_len > 0 {
            let mut slices = [IoSlice::new(&[]); MAX_IOV];
            let mut n = 0;
            let head = (!self.head_left.is_empty()).then_some(&self.head_left);
            for (slot, b) in slices
                .iter_mut()
                .zip(head.into_iter().chain(self.out.iter()))
            {
                *slot = IoSlice::new(b);
                n += 1;
            }
            let wrote = match Pin::new(&mut *conn).poll_write_vectored(cx, &slices[..n]) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(w)) => w,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            };
            self.progressed = true;
            self.written += wrote;
            self.out_len -= wrote;
            let from_head = wrote.min(self.head_left.len());
            self.head_left.advance(from_head);
            if self.head_left.is_empty() {
                // Even empty, the slice would keep the worker's block it was cut from.
                self.head_left = Bytes::new();
            }
            let mut left = wrote - from_head;
            while left > 0 {
                let Some(front) = self.out.front_mut() else {
                    break;
                };
                if front.len() <= left {
                    left -= front.len();
                    self.out.pop_front();
                } else {
                    front.advance(left);
                    left = 0;
                }
            }
        }
        Ok(())
    }
}
