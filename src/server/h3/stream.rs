//! One HTTP/3 request stream: its request (head, body through the pipe, trailers), its
//! handler's answer (now, or pending and polled when woken), and the response frames written
//! as quinn accepts them. A stream is done when the response is fully handed to quinn (FIN
//! queued, or reset) and the request side has ended or been stopped.

use super::wake::{StreamWake, Wakes};
use super::{frame_pool, slab};
use super::{varint, PIPE_HIGH_WATER, READ_BUDGET};
use crate::http::body::{self, BodyStream, BodyWriter, Frame, Trailers};
use crate::http::{Body, BodyError, BodySource, Request, Response, Side};
use crate::log::AccessLog;
use crate::metrics::in_flight::{InFlight, Phase};
use crate::metrics::Mark;
use crate::proto::h3::{qpack, Error, ErrorCode, RequestEvent, Session};
use crate::server::context::WorkerCtx;
use crate::server::request_end::{request_ended, Counted, Figures, Logged};
use crate::server::request_start::{self, LaterAnswer, Routed};
use bytes::{Bytes, BytesMut};
use quinn_proto::{Connection, ReadError, StreamId, VarInt, WriteError};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

/// In-memory body chunks at least this long are handed to quinn without a copy.
const SHARE_MIN: usize = 1024;
/// Frames produced per stream per drive, so a fast producer does not hog the turn.
const DRIVE_BUDGET: usize = 64;

/// What [`ReqStream::drive`] left.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// More to do later (a wake-up, writability, or the request's end).
    Open,
    /// More to do now: the turn's budget ran out with frames still coming.
    Busy,
    /// Both directions are finished: forget the stream.
    Done,
}

pub(super) struct ReqStream<'a> {
    id: StreamId,
    ctx: &'a WorkerCtx,
    peer: SocketAddr,
    local: SocketAddr,
    wake: StreamWake,
    /// Received bytes the session has not consumed (a partial frame, a blocked HEADERS).
    recv: BytesMut,
    /// quinn reported the stream's FIN.
    fin: bool,
    /// The request side is over: its end came, or we stopped reading it.
    recv_done: bool,
    /// Stopped reading because the pipe was full.
    paused: bool,
    /// The request body, for a handler that reads it.
    body: Option<BodyWriter>,
    /// Request body bytes received (for `limit-request-body`).
    body_received: u64,
    trailers: Option<Trailers>,
    /// A request whose handler runs once its (dropped) body has ended.
    waiting: Option<Request>,
    /// What early data (0-RTT) left to do: rare, so boxed out of every stream's size.
    early: Option<Box<Early>>,
    send: Send,
    /// The largest DATA frame payload made of a body we have whole (`http3-data-frame-size`).
    chunk: usize,
    /// Frames quinn has not accepted yet.
    out: Vec<Bytes>,
    log: Option<Log>,
    received_at: SystemTime,
    started: Instant,
    /// The request's start, when the worker counts requests.
    mark: Option<Mark>,
    /// Its entry in the list of requests in flight while its body streams out, taken from
    /// its answer (only when a `status` path lists requests).
    listed: Option<InFlight>,
    /// The response status, and the bytes of its head (with frame headers) and body.
    status: u16,
    head_bytes: u64,
    body_bytes: u64,
}

/// A request that came in early data, waiting for the handshake to complete.
#[derive(Default)]
struct Early {
    /// Routed once the handshake has completed: a request with a method not in
    /// `http3-0rtt-methods`, or the copy of an early request whose answer was `425 Too
    /// Early` (RFC 8470 section 5.2).
    held: Option<Request>,
    /// A copy of a request answered in early data, to route again if the answer is 425.
    copy: Option<Request>,
}

enum Send {
    /// No answer yet: the request is not complete, or its handler not called.
    Waiting,
    Answer(LaterAnswer),
    Source(BodySource),
    Stream(Box<dyn BodyStream>),
    /// Everything is in `out`; FIN follows it.
    Tail,
    /// FIN queued or the stream reset.
    Done,
}

/// What [`ReqStream::produce`] made.
enum Made {
    Nothing,
    /// Interim responses (103 Early Hints) were queued; the answer is still to come.
    Interim,
    Response(Response),
    /// A DATA frame header and its payload.
    Data(Bytes, Bytes),
    /// A whole DATA frame, with its payload and header lengths.
    Frame(Bytes, usize, usize),
    Trailers(Trailers),
    /// The body could not be produced: reset the stream.
    Failed,
    /// Everything is queued: FIN.
    Fin,
}

/// The longest DATA frame header: a one-byte type and a length of up to 8 bytes.
const FRAME_HEADER_MAX: usize = 9;

/// The length of the header of a DATA frame of `len` bytes.
fn data_header_len(len: usize) -> usize {
    1 + crate::proto::h3::varint::len(len as u64)
}

fn data_header(len: usize) -> Bytes {
    slab::cut(9, |head| Session::data_frame_header(len as u64, head))
        .0
        .freeze()
}

/// What the access log needs of a stream.
struct Log {
    file: Rc<RefCell<AccessLog>>,
    req: Request,
    headers: Vec<(Bytes, Bytes)>,
}

impl<'a> ReqStream<'a> {
    pub fn new(
        id: StreamId,
        ctx: &'a WorkerCtx,
        peer: SocketAddr,
        local: SocketAddr,
        conn: usize,
        wakes: &Arc<Wakes>,
    ) -> ReqStream<'a> {
        ReqStream {
            id,
            ctx,
            peer,
            local,
            wake: StreamWake::new(conn, wakes),
            recv: BytesMut::new(),
            fin: false,
            recv_done: false,
            paused: false,
            body: None,
            body_received: 0,
            trailers: None,
            waiting: None,
            early: None,
            send: Send::Waiting,
            chunk: 16 * 1024,
            out: slab::queue(),
            log: None,
            received_at: SystemTime::now(),
            started: Instant::now(),
            mark: None,
            listed: None,
            status: 0,
            head_bytes: 0,
            body_bytes: 0,
        }
    }

    /// Whether reading stopped with data left in quinn (a full pipe, or the read budget)
    /// and may go on now.
    pub fn wants_read(&self) -> bool {
        self.paused
            && !self.recv_done
            && self
                .body
                .as_ref()
                .is_none_or(|w| w.buffered() < PIPE_HIGH_WATER)
    }

    /// Reads what quinn has for this stream (as far as the pipe has room) and acts on the
    /// events. A connection error is returned; a stream error resets the stream here.
    pub fn read(
        &mut self,
        conn: &mut Connection,
        session: &mut Session,
        encoder: &mut qpack::Encoder,
        events: &mut Vec<RequestEvent>,
        now: Instant,
    ) -> Result<(), Error> {
        if self.recv_done {
            return Ok(());
        }
        if self
            .body
            .as_ref()
            .is_some_and(|w| w.buffered() >= PIPE_HIGH_WATER)
        {
            self.paused = true;
            return Ok(());
        }
        self.paused = false;
        let mut reset = None;
        {
            let mut rs = conn.recv_stream(self.id);
            let Ok(mut chunks) = rs.read(true) else {
                // quinn has closed the receive side: nothing more will come.
                self.recv_done = true;
                return session.stream_gone(self.id.into());
            };
            let mut budget = READ_BUDGET;
            while budget > 0 {
                match chunks.next(budget) {
                    Ok(Some(c)) => {
                        budget = budget.saturating_sub(c.bytes.len());
                        if self.recv.is_empty() {
                            self.recv = slab::copy(&c.bytes);
                        } else {
                            self.recv.extend_from_slice(&c.bytes);
                        }
                    }
                    Ok(None) => {
                        self.fin = true;
                        break;
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(code)) => {
                        reset = Some(code);
                        break;
                    }
                }
            }
            if budget == 0 {
                // More may be buffered: read again after the others.
                self.paused = true;
            }
            let _ = chunks.finalize();
        }
        if let Some(code) = reset {
            self.on_peer_reset(conn, session, code);
            return Ok(());
        }
        if self.recv.is_empty() && !self.fin {
            return Ok(());
        }
        match session.on_request_stream(self.id.into(), &mut self.recv, self.fin, events) {
            Ok(()) => {}
            Err(Error::Stream(code, why)) => {
                if crate::log::emit_request_errors() {
                    tracing::info!(peer = %self.peer, "HTTP/3 stream error {:#x}: {why}", code.0);
                }
                self.abort(conn, code);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        // Whether a body follows the head: the stream goes on, or this batch carries one.
        let body_follows = !self.fin
            || events
                .iter()
                .any(|e| matches!(e, RequestEvent::Data(_) | RequestEvent::Trailers(_)));
        for ev in events.drain(..) {
            match ev {
                RequestEvent::Head(head) => {
                    let content_length = head.content_length;
                    if head.expect_continue && body_follows {
                        // The client waits for this before sending its body.
                        let (out, ()) = slab::cut(8, |out| {
                            Session::encode_response_head(encoder, 100, std::iter::empty(), out)
                        });
                        self.out.push(out.freeze());
                    }
                    let req = head.into_request(self.peer, self.local);
                    self.on_head(
                        conn,
                        session,
                        encoder,
                        req,
                        content_length,
                        body_follows,
                        now,
                    );
                }
                RequestEvent::Data(data) => {
                    self.body_received += data.len() as u64;
                    if self.body_received > self.ctx.routing().config.limits.request_body {
                        self.too_large(conn, session, encoder);
                        continue;
                    }
                    if let Some(w) = &self.body {
                        w.push(data);
                    }
                }
                RequestEvent::Trailers(t) => self.trailers = Some(t),
                RequestEvent::End => {
                    self.recv_done = true;
                    if let Some(w) = self.body.take() {
                        w.finish(self.trailers.take());
                    }
                    if let Some(req) = self.waiting.take() {
                        self.answer(conn, encoder, req, now);
                    }
                }
                RequestEvent::Blocked => {}
                RequestEvent::HeadTooLarge => {
                    self.stop_reading(conn, session, ErrorCode::H3_NO_ERROR);
                    self.respond(encoder, Response::error(431), false);
                }
            }
        }
        if self
            .body
            .as_ref()
            .is_some_and(|w| w.buffered() >= PIPE_HIGH_WATER)
        {
            self.paused = true;
        }
        Ok(())
    }

    /// The request head: handlers that read bodies get it now, with the body streaming
    /// behind; the others once the body (dropped) has ended.
    #[allow(clippy::too_many_arguments)]
    fn on_head(
        &mut self,
        conn: &mut Connection,
        session: &mut Session,
        encoder: &mut qpack::Encoder,
        req: Request,
        content_length: Option<u64>,
        has_body: bool,
        now: Instant,
    ) {
        self.received_at = SystemTime::now();
        self.started = now;
        self.mark = crate::metrics::start();
        let limit = self.ctx.routing().config.limits.request_body;
        if content_length.is_some_and(|l| l > limit) {
            self.too_large(conn, session, encoder);
            return;
        }
        let mut req = req;
        if has_body && self.ctx.routing().router.streams_body(&req) {
            let (writer, reader) = body::pipe(content_length);
            req.set_body(reader);
            self.body = Some(writer);
            self.answer(conn, encoder, req, now);
        } else {
            self.waiting = Some(req);
        }
    }

    /// Routes the request; one that came in early data (0-RTT accepted, the handshake not
    /// complete yet) only if its method may be answered then, else it waits for the handshake.
    fn answer(
        &mut self,
        conn: &Connection,
        encoder: &mut qpack::Encoder,
        mut req: Request,
        now: Instant,
    ) {
        // The routing the request starts with, borrowed for this call.
        let routing = self.ctx.routing();
        // `has_0rtt`: the server took the client's early data; application data before the
        // handshake completes came in it.
        let early = conn.has_0rtt() && conn.is_handshaking();
        if early {
            let state = self.early.get_or_insert_with(Box::default);
            if !request_start::may_answer_early(&routing, req.method.as_bytes()) {
                crate::metrics::quic_admission::early_request_held();
                state.held = Some(req);
                return;
            }
            // Without a body (none, or dropped): it can be routed again as it is.
            if self.body.is_none() {
                state.copy = Some(req.clone());
            }
            req.set_early_data(true);
        }
        let routed = request_start::route(&routing, &mut req);
        let file = routed.log();
        let head = req.is_head();
        match routed {
            Routed::Now(resp, _) if resp.status == 425 && self.has_early_copy() => {
                self.keep_for_log(file, req);
                self.too_early(resp);
            }
            Routed::Now(resp, _) => {
                self.keep_for_log(file, req);
                self.respond(encoder, resp, head);
            }
            Routed::Later(later) => {
                self.keep_for_log(file, req);
                self.send = Send::Answer(later);
                self.wake.mark();
            }
        }
        let _ = now;
    }

    /// An early request was answered `425 Too Early`: it is routed again once the handshake
    /// has completed (once: the copy is not early any more), and the client gets that answer.
    fn too_early(&mut self, resp: Response) {
        crate::metrics::quic_admission::too_early_retried();
        crate::http::recycle::give_header_list(resp.headers);
        if let Some(e) = &mut self.early {
            e.held = e.copy.take();
        }
        self.send = Send::Waiting;
    }

    fn has_early_copy(&self) -> bool {
        self.early.as_ref().is_some_and(|e| e.copy.is_some())
    }

    /// Keeps the request for its access log line, or lets its field list serve the next one.
    fn keep_for_log(&mut self, file: Option<Rc<RefCell<AccessLog>>>, req: Request) {
        match file {
            Some(file) => self.log = Some(Log::new(file, req)),
            None => req.recycle(),
        }
    }

    /// Queues the response head and sets up its body.
    fn respond(&mut self, encoder: &mut qpack::Encoder, resp: Response, head_request: bool) {
        let status = resp.status;
        let no_body = head_request || status == 204 || status == 304 || status < 200;
        let declared = resp.body.known_len();
        let date = crate::http::clock::with_now(|d| *d);
        let has_date = resp
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(b"date"));
        let mut digits = [0u8; 20];
        let len = declared
            .filter(|_| status != 204 && status != 304 && status >= 200)
            .map(|l| crate::proto::h1::itoa(l, &mut digits));
        let routing = self.ctx.routing();
        self.chunk = routing.config.http3.data_frame_size as usize;
        let server =
            (routing.config.send_server_name).then_some(routing.config.server_name.as_bytes());
        let fields = server
            .map(|s| (&b"server"[..], s))
            .into_iter()
            .chain((!has_date).then_some((&b"date"[..], &date[..])))
            .chain(
                resp.headers
                    .iter()
                    .filter(|(n, _)| !n.eq_ignore_ascii_case(b"content-length"))
                    .map(|(n, v)| (&n[..], &v[..])),
            )
            .chain(len.map(|l| (&b"content-length"[..], l)));
        let (out, ()) = slab::cut(256, |out| {
            Session::encode_response_head(encoder, status, fields, out)
        });
        self.status = status;
        self.head_bytes += out.len() as u64;
        match &mut self.log {
            Some(log) => log.headers = resp.headers.into_vec(),
            None => crate::http::recycle::give_header_list(resp.headers),
        }
        self.out.push(out.freeze());
        self.send = if no_body {
            Send::Tail
        } else {
            match resp.body {
                Body::Stream(s) => {
                    self.wake.mark();
                    Send::Stream(s.stream)
                }
                other => match BodySource::new(other) {
                    Some(src) => Send::Source(src),
                    None => Send::Tail,
                },
            }
        };
    }

    /// Writes queued frames and produces more while quinn accepts them.
    pub fn drive(
        &mut self,
        conn: &mut Connection,
        session: &mut Session,
        encoder: &mut qpack::Encoder,
        now: Instant,
    ) -> Step {
        let mut budget = DRIVE_BUDGET;
        loop {
            if budget == 0 {
                return Step::Busy;
            }
            budget -= 1;
            if let Some(e) = &mut self.early {
                if e.held.is_some() && !conn.is_handshaking() {
                    if let Some(req) = e.held.take() {
                        self.answer(conn, encoder, req, now);
                    }
                }
            }
            if !self.flush(conn) {
                return self.step();
            }
            match self.produce(encoder) {
                Made::Nothing => break,
                Made::Interim => {}
                Made::Response(resp) if resp.status == 425 && self.has_early_copy() => {
                    self.too_early(resp);
                }
                Made::Response(resp) => {
                    let head = self.log.as_ref().is_some_and(|l| l.req.is_head());
                    self.respond(encoder, resp, head);
                }
                Made::Data(head, data) => {
                    self.count_body(data.len() as u64, head.len() as u64);
                    self.out.push(head);
                    self.out.push(data);
                }
                Made::Frame(frame, body, framing) => {
                    self.count_body(body as u64, framing as u64);
                    self.out.push(frame);
                }
                Made::Trailers(t) => {
                    let (out, ()) = slab::cut(64, |out| {
                        let trailers = t.iter().map(|(n, v)| (&n[..], &v[..]));
                        Session::encode_trailers(encoder, trailers, out)
                    });
                    self.out.push(out.freeze());
                }
                Made::Failed => self.reset(conn, ErrorCode::H3_INTERNAL_ERROR),
                Made::Fin => {
                    let _ = conn.send_stream(self.id).finish();
                    self.send = Send::Done;
                    self.listed = None;
                    self.write_log();
                }
            }
        }
        // A handler that answered without reading the whole body: stop the rest.
        if matches!(self.send, Send::Done) && !self.recv_done && self.body.is_none() {
            self.stop_reading(conn, session, ErrorCode::H3_NO_ERROR);
        }
        self.step()
    }

    /// The next thing to send: the pending answer, a body chunk, trailers or the end.
    fn produce(&mut self, encoder: &mut qpack::Encoder) -> Made {
        match &mut self.send {
            Send::Waiting | Send::Done => Made::Nothing,
            Send::Answer(later) => {
                if !self.wake.take() {
                    return Made::Nothing;
                }
                let mut cx = Context::from_waker(self.wake.waker());
                let (out, head_bytes) = (&mut self.out, &mut self.head_bytes);
                let mut interim = false;
                let polled = later.poll_interim(&mut cx, |i| {
                    // A HEADERS frame of its own ahead of the final one (RFC 9114 4.1).
                    let fields = i.headers.iter().map(|(n, v)| (&n[..], &v[..]));
                    let (frame, ()) = slab::cut(128, |buf| {
                        Session::encode_response_head(encoder, i.status, fields, buf)
                    });
                    *head_bytes += frame.len() as u64;
                    out.push(frame.freeze());
                    interim = true;
                });
                match polled {
                    Poll::Ready(resp) => {
                        self.listed = later.take_listed();
                        InFlight::set_phase(&self.listed, Phase::Sending);
                        Made::Response(resp)
                    }
                    Poll::Pending if interim => Made::Interim,
                    Poll::Pending => Made::Nothing,
                }
            }
            Send::Source(src) => {
                let chunk = self.chunk;
                // A body in memory (a cached file, a fixed answer) goes to quinn as it is.
                if let Some(data) = src.take_bytes(chunk, SHARE_MIN) {
                    if src.remaining() == 0 {
                        self.send = Send::Tail;
                    }
                    return Made::Data(data_header(data.len()), data);
                }
                let want = chunk.min(usize::try_from(src.remaining()).unwrap_or(chunk));
                // A short body in memory (a proxied answer that came with its head): the frame
                // is cut from the worker's block, no allocation.
                let small = (want < SHARE_MIN)
                    .then(|| src.take_bytes(want, want))
                    .flatten();
                if let Some(data) = small {
                    if src.remaining() == 0 {
                        self.send = Send::Tail;
                    }
                    let (frame, framing) = slab::cut(want + 9, |out| {
                        Session::data_frame_header(want as u64, out);
                        let framing = out.len();
                        out.extend_from_slice(&data);
                        framing
                    });
                    return Made::Frame(frame.freeze(), want, framing);
                }
                // The frame header and its payload in one buffer. A buffer of a full chunk
                // (or most of one) is a reused one; a short tail gets its own, of its exact
                // size (so `Bytes` takes it without a second allocation).
                let pooled = want > chunk / 4;
                let mut frame = if pooled {
                    frame_pool::take(chunk + FRAME_HEADER_MAX)
                } else {
                    Vec::with_capacity(want + data_header_len(want))
                };
                crate::proto::h3::frame::put_header(
                    crate::proto::h3::frame::DATA,
                    want as u64,
                    &mut frame,
                );
                let framing = frame.len();
                match src.fill(&mut frame, want) {
                    Ok(n) if n == want => {
                        if src.remaining() == 0 {
                            self.send = Send::Tail;
                        }
                        let frame = if pooled {
                            frame_pool::freeze(frame)
                        } else {
                            Bytes::from(frame)
                        };
                        Made::Frame(frame, n, framing)
                    }
                    Ok(_) => {
                        tracing::warn!(
                            "HTTP/3 response body shorter than declared; resetting the stream"
                        );
                        Made::Failed
                    }
                    Err(e) => {
                        tracing::warn!("HTTP/3 response body: {e}; resetting the stream");
                        Made::Failed
                    }
                }
            }
            Send::Stream(body) => {
                if !self.wake.take() {
                    return Made::Nothing;
                }
                let mut cx = Context::from_waker(self.wake.waker());
                match body.poll_frame(&mut cx) {
                    Poll::Pending => Made::Nothing,
                    Poll::Ready(Some(Ok(Frame::Data(data)))) => {
                        self.wake.mark();
                        Made::Data(data_header(data.len()), data)
                    }
                    Poll::Ready(Some(Ok(Frame::Trailers(t)))) => {
                        self.send = Send::Tail;
                        Made::Trailers(t)
                    }
                    Poll::Ready(None) => {
                        self.send = Send::Tail;
                        Made::Fin
                    }
                    Poll::Ready(Some(Err(err))) => {
                        if crate::log::emit_request_errors() {
                            tracing::info!(
                                "HTTP/3 response body failed ({err}); resetting the stream"
                            );
                        }
                        Made::Failed
                    }
                }
            }
            Send::Tail => Made::Fin,
        }
    }

    fn step(&self) -> Step {
        if matches!(self.send, Send::Done) && self.out.is_empty() && self.recv_done {
            Step::Done
        } else {
            Step::Open
        }
    }

    /// Hands queued frames to quinn; true once all are taken.
    fn flush(&mut self, conn: &mut Connection) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let mut send = conn.send_stream(self.id);
        match send.write_chunks(&mut self.out) {
            Ok(w) => {
                self.out.drain(..w.chunks);
                self.out.is_empty()
            }
            Err(WriteError::Blocked) => false,
            Err(WriteError::Stopped(code)) => {
                self.peer_stopped(code);
                true
            }
            Err(WriteError::ClosedStream) => {
                self.out.clear();
                self.send = Send::Done;
                true
            }
        }
    }

    /// The peer sent STOP_SENDING: it wants no more of the response.
    pub fn peer_stopped(&mut self, _code: VarInt) {
        self.out.clear();
        if !matches!(self.send, Send::Done) {
            self.send = Send::Done;
            self.write_log();
        }
    }

    fn on_peer_reset(&mut self, conn: &mut Connection, session: &mut Session, _code: VarInt) {
        self.recv_done = true;
        let _ = session.stream_gone(self.id.into());
        if let Some(w) = self.body.take() {
            w.abort(BodyError::new(
                Side::Downstream,
                "the client reset the stream",
            ));
        }
        // No answer needed any more: cancel pending work.
        if !matches!(self.send, Send::Tail | Send::Done) {
            self.reset(conn, ErrorCode::H3_REQUEST_CANCELLED);
        }
    }

    /// A stream error: reset and stop the stream with `code`.
    fn abort(&mut self, conn: &mut Connection, code: ErrorCode) {
        self.recv_done = true;
        let _ = conn.recv_stream(self.id).stop(varint(code));
        if let Some(w) = self.body.take() {
            w.abort(BodyError::new(Side::Downstream, "HTTP/3 stream error"));
        }
        self.waiting = None;
        self.reset(conn, code);
    }

    fn reset(&mut self, conn: &mut Connection, code: ErrorCode) {
        self.out.clear();
        let _ = conn.send_stream(self.id).reset(varint(code));
        if !matches!(self.send, Send::Done) {
            self.send = Send::Done;
            self.write_log();
        }
    }

    /// Stops reading the request (STOP_SENDING with `code`).
    fn stop_reading(&mut self, conn: &mut Connection, session: &mut Session, code: ErrorCode) {
        if self.recv_done {
            return;
        }
        self.recv_done = true;
        let _ = conn.recv_stream(self.id).stop(varint(code));
        let _ = session.stream_gone(self.id.into());
        if let Some(w) = self.body.take() {
            w.abort(BodyError::new(Side::Downstream, "request body not read"));
        }
    }

    /// The body is over `limit-request-body`: 413 if nothing was answered yet.
    fn too_large(
        &mut self,
        conn: &mut Connection,
        session: &mut Session,
        encoder: &mut qpack::Encoder,
    ) {
        self.stop_reading(conn, session, ErrorCode::H3_NO_ERROR);
        self.waiting = None;
        if matches!(self.send, Send::Waiting) {
            self.respond(encoder, Response::error(413), false);
        }
    }

    fn count_body(&mut self, body: u64, framing: u64) {
        self.body_bytes += body;
        self.head_bytes += framing;
    }

    /// The response is over (sent, or reset): count it and write its log line.
    fn write_log(&mut self) {
        let figures = Figures {
            proto: crate::metrics::Proto::Http3,
            status: self.status,
            bytes_in: 0,
            body_bytes: self.body_bytes,
            total_bytes: self.head_bytes + self.body_bytes,
        };
        let counted = self.mark.take().map(|started| Counted {
            started,
            ended: None,
        });
        let Some(l) = self.log.take() else {
            request_ended(figures, counted, None);
            return;
        };
        let log = Logged {
            file: &l.file,
            req: &l.req,
            resp_headers: &l.headers,
            received_at: self.received_at,
            duration: self.started.elapsed(),
            tls: None,
            stream_id: None,
        };
        request_ended(figures, counted, Some(log));
        l.req.recycle();
        crate::http::recycle::give_header_list(l.headers);
    }
}

impl Drop for ReqStream<'_> {
    /// A stream dropped with its request body still open (the connection went away): the
    /// handler, if anything still reads the body, sees it fail rather than wait forever.
    fn drop(&mut self) {
        slab::give_back(std::mem::take(&mut self.out));
        if let Some(w) = self.body.take() {
            w.abort(BodyError::new(
                Side::Downstream,
                "the HTTP/3 connection closed",
            ));
        }
    }
}

impl Log {
    fn new(file: Rc<RefCell<AccessLog>>, req: Request) -> Log {
        Log {
            file,
            req,
            headers: Vec::new(),
        }
    }
}
