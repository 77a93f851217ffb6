//! The HTTP/1.x slow path: a request whose body streams to its handler, whose answer comes
//! later, or whose response body is a stream (a proxied exchange). One loop on the connection's
//! own task moves three things at once: request body bytes from the socket into the handler's
//! pipe (only while the handler keeps up: the pipe holds at most a read buffer), the pending
//! answer, and the response body from its stream to the socket (pulled only once the previous
//! piece is written, so a slow client slows the producer). See `src/proto/h1/LIFECYCLE.md`.

use super::{Close, Conn};
use crate::http::body::BodyWriter;
use crate::http::{Body, BodyError, BodyStream, Frame, Method, Request, Response, Side};
use crate::log::AccessLog;
use crate::metrics::in_flight::{InFlight, Phase};
use crate::proto::h1::{self, BodyFraming, BodyLength, ChunkedDecoder, ResponseHead};
use crate::server::buffers::READ_BUFFER;
use crate::server::request_end::{request_ended, Counted, Figures, Logged};
use crate::server::request_start::{self, LaterAnswer, Routed};
use crate::server::transport::Transport;
use bytes::Bytes;
use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};
use tokio::io::AsyncReadExt;

/// Response bytes gathered from a stream before they are written.
const GATHER_MAX: usize = 64 * 1024;

/// The answer of a request on the slow path, as routing gave it.
pub(super) enum Answer {
    /// Ready now (its body streams, or the request's does).
    Now(Response),
    Later(LaterAnswer),
}

/// A request on the slow path, with what the driver knows of it.
pub(super) struct Exchange {
    pub req: Request,
    /// A copy of a request answered in TLS early data (without a body): routed again once
    /// the handshake has completed if the answer is `425 Too Early` (RFC 8470 section 5.2).
    pub early_copy: Option<Box<Request>>,
    /// The handler's body pipe, when it reads the body.
    pub writer: Option<BodyWriter>,
    pub framing: BodyFraming,
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// The request asks to upgrade and its handler tunnels: a 101 with a streamed body turns
    /// the connection into a byte pipe both ways (`writer` then carries the client's bytes).
    pub tunnel: bool,
}

/// What is left of the request body on the wire.
enum BodyIn {
    Done,
    Length(u64),
    Chunked(ChunkedDecoder),
    /// A tunnel: every byte the client sends, until it closes.
    Raw,
    /// The client closed its side of a tunnel: nothing more to read.
    Closed,
}

/// Where the response stands.
enum Out {
    Waiting(LaterAnswer),
    Streaming {
        stream: Box<dyn BodyStream>,
        /// Chunked framing (HTTP/1.1, length unknown); otherwise the bytes go as they are.
        chunked: bool,
    },
    Done,
}

/// What moving the response forward produced.
enum Step {
    Head(Response),
    /// This many body bytes were gathered into the write buffer.
    Data(u64),
    /// The body ended after this many more bytes (and trailers, when chunked).
    End(u64),
    Failed(BodyError),
    /// The handler made room for more request body.
    Room,
    /// Interim responses (103 Early Hints) went into the write buffer.
    Interim,
}

/// Where an answered request stands: still waiting, sending its body, or only receiving
/// the request's.
fn answered_phase(out: &Out, body_in: &BodyIn) -> Phase {
    match (out, body_in) {
        (Out::Waiting(_), _) => Phase::Handling,
        (Out::Streaming { .. }, _) => Phase::Sending,
        (Out::Done, BodyIn::Length(_) | BodyIn::Chunked(_)) => Phase::Receiving,
        (Out::Done, _) => Phase::Sending,
    }
}

/// For the access log, once the response is over.
struct Sent {
    status: u16,
    headers: Vec<(Bytes, Bytes)>,
    body: u64,
    total: u64,
}

impl<'a, T: Transport> Conn<'a, T> {
    /// The slow path, boxed (its state would otherwise enlarge every connection's task) and
    /// kept out of line (so the fast path's code stays as it was).
    #[inline(never)]
    pub(super) fn respond_streaming_boxed<'s>(
        &'s mut self,
        ex: Exchange,
        answer: Answer,
        log: Option<Rc<RefCell<AccessLog>>>,
    ) -> Pin<Box<dyn Future<Output = Result<bool, Close>> + 's>> {
        Box::pin(self.respond_streaming(ex, answer, log))
    }

    /// An early request was answered `425 Too Early`: its copy is routed again once the
    /// handshake has completed (once: it is not early any more); the client gets that answer.
    async fn too_early(&mut self, mut copy: Request) -> Result<Answer, Close> {
        crate::metrics::tls_early_data::too_early_retried();
        self.stream.complete_handshake().await?;
        copy.set_early_data(false);
        let routing = Rc::clone(&self.ctx.routing());
        Ok(match request_start::route(&routing, &mut copy) {
            Routed::Now(resp, _) => Answer::Now(resp),
            Routed::Later(later) => Answer::Later(later),
        })
    }

    /// Answers one request on the slow path; returns whether the connection stays open.
    /// `log`: where the request's access-log line goes.
    async fn respond_streaming(
        &mut self,
        ex: Exchange,
        mut answer: Answer,
        log: Option<Rc<RefCell<AccessLog>>>,
    ) -> Result<bool, Close> {
        // Listed (when a `status` path lists requests) until the exchange is over: the
        // pending answer's entry goes on, an answer ready now gets its own.
        let listed = match &mut answer {
            Answer::Later(later) => later.take_listed(),
            Answer::Now(_) => InFlight::enter_in(&ex.req, Phase::Sending),
        };
        let started = (SystemTime::now(), Instant::now());
        let counted = crate::metrics::start();
        let Exchange {
            req,
            mut early_copy,
            writer,
            framing,
            mut keep_alive,
            expect_continue,
            tunnel,
        } = ex;
        let mut body_in = match framing {
            BodyFraming::None => BodyIn::Done,
            BodyFraming::Length(n) => BodyIn::Length(n),
            BodyFraming::Chunked => {
                let limit = self.ctx.routing().config.limits.request_head;
                BodyIn::Chunked(ChunkedDecoder::new(limit))
            }
        };
        if let (Some(w), BodyIn::Done, false) = (&writer, &body_in, tunnel) {
            w.finish(None);
        }
        let mut received: u64 = 0;
        let mut sent = Sent {
            status: 0,
            headers: Vec::new(),
            body: 0,
            total: 0,
        };
        let mut out = match answer {
            Answer::Later(later) => Out::Waiting(later),
            Answer::Now(resp) => {
                self.start_response(&req, resp, &mut keep_alive, &mut sent)
                    .await?
            }
        };
        InFlight::set_phase(&listed, answered_phase(&out, &body_in));
        if expect_continue && matches!(out, Out::Waiting(_)) && writer.is_some() {
            h1::write_continue(&mut self.wbuf);
        }
        let io_timeout = self.ctx.routing().config.http1.request_io_timeout;
        self.set_timer(Instant::now() + io_timeout);
        loop {
            if let Some(w) = &writer {
                if let Err(e) = self.feed_body(&mut body_in, w, &mut received) {
                    w.abort(BodyError::new(Side::Downstream, e.reason()));
                    self.log_request_error(e.status(), e.reason());
                    if matches!(out, Out::Waiting(_)) {
                        self.write_error(e.status());
                    }
                    self.flush(false).await?;
                    return Err(Close::Linger);
                }
            }
            if matches!(out, Out::Done) {
                break;
            }
            if !self.wbuf.is_empty() {
                self.flush(false).await?;
            }
            let body_wanted = !matches!(body_in, BodyIn::Done | BodyIn::Closed)
                && writer
                    .as_ref()
                    .is_some_and(|w| !w.reader_gone() && has_room(w));
            // With the body in, reading on only notices a client that leaves (bytes of a
            // pipelined request stay in the buffer for later).
            let watch_eof = matches!(body_in, BodyIn::Done) && self.rbuf.len() < READ_BUFFER;
            let read = body_wanted || watch_eof;
            if read && self.rbuf.capacity() - self.rbuf.len() < 1024 {
                self.rbuf.reserve(READ_BUFFER);
            }
            // The handler reads the body while its answer is polled: once it made room in a
            // full pipe, come back and read the socket again.
            let full = !body_wanted
                && !matches!(body_in, BodyIn::Done | BodyIn::Closed)
                && writer.as_ref().is_some_and(|w| !w.reader_gone());
            let step = tokio::select! {
                biased;
                step = poll_fn(|cx| match step(&mut out, cx, &mut self.wbuf) {
                    Poll::Pending if full && writer.as_ref().is_some_and(has_room) => {
                        Poll::Ready(Step::Room)
                    }
                    other => other,
                }) => step,
                r = self.stream.read_buf(&mut self.rbuf), if read => {
                    match r {
                        Ok(n) if n > 0 => {
                            if body_wanted && !matches!(body_in, BodyIn::Raw) {
                                self.set_timer(Instant::now() + io_timeout);
                            }
                            continue;
                        }
                        _ => {
                            if let (Some(w), BodyIn::Raw) = (&writer, &body_in) {
                                // The tunnel sends what it has, then half-closes.
                                w.finish(None);
                                body_in = BodyIn::Closed;
                                continue;
                            }
                            if let Some(w) = &writer {
                                w.abort(BodyError::new(Side::Downstream, "client closed the connection"));
                            }
                            return Err(Close::Quietly);
                        }
                    }
                }
                // A tunnel's idle timeout is its handler's (it sees both directions).
                _ = self.timer.as_mut(), if body_wanted && !matches!(body_in, BodyIn::Raw) => {
                    if let Some(w) = &writer {
                        w.abort(BodyError::new(Side::Downstream, "request body not received in time"));
                    }
                    self.log_request_error(408, "request body not received in time");
                    if matches!(out, Out::Waiting(_)) {
                        self.write_error(408);
                        self.flush(false).await?;
                        return Err(Close::Linger);
                    }
                    return Err(Close::Quietly);
                }
            };
            match step {
                Step::Head(resp) if resp.status == 425 && early_copy.is_some() => {
                    if let Some(copy) = early_copy.take() {
                        crate::http::recycle::give_header_list(resp.headers);
                        out = match self.too_early(*copy).await? {
                            Answer::Later(later) => Out::Waiting(later),
                            Answer::Now(resp) => {
                                self.start_response(&req, resp, &mut keep_alive, &mut sent)
                                    .await?
                            }
                        };
                    }
                }
                Step::Head(resp) => {
                    // Interim responses that came with it go first.
                    if !self.wbuf.is_empty() {
                        self.flush(false).await?;
                    }
                    let connected =
                        req.method == Method::Connect && (200..300).contains(&resp.status);
                    if tunnel && (resp.status == 101 || connected) {
                        if let Body::Stream(s) = resp.body {
                            out = self
                                .start_tunnel(
                                    resp.status,
                                    resp.headers.into_vec(),
                                    s.stream,
                                    &mut sent,
                                )
                                .await?;
                            body_in = BodyIn::Raw;
                            keep_alive = false;
                            InFlight::set_phase(&listed, Phase::Sending);
                            continue;
                        }
                    }
                    out = self
                        .start_response(&req, resp, &mut keep_alive, &mut sent)
                        .await?;
                    InFlight::set_phase(&listed, answered_phase(&out, &body_in));
                }
                Step::Data(n) => sent.body += n,
                Step::Room | Step::Interim => {}
                Step::End(n) => {
                    sent.body += n;
                    out = Out::Done;
                }
                Step::Failed(e) => {
                    // Never a complete-looking response: what was sent goes out, then the
                    // connection closes short of its length or last chunk.
                    tracing::debug!(peer = %self.addrs.0, "response body failed: {e}");
                    let _ = self.flush(false).await;
                    return Err(Close::Quietly);
                }
            }
        }
        sent.total += sent.body;
        if !self.wbuf.is_empty() {
            self.flush(false).await?;
        }
        // Request bytes: the body as received so far (the head is not kept on this path).
        let figures = Figures {
            proto: crate::metrics::Proto::Http1,
            status: sent.status,
            bytes_in: received,
            body_bytes: sent.body,
            total_bytes: sent.total,
        };
        let counted = counted.map(|started| Counted {
            started,
            ended: None,
        });
        let log = log.as_ref().map(|file| Logged {
            file,
            req: &req,
            resp_headers: &sent.headers,
            received_at: started.0,
            duration: started.1.elapsed(),
            tls: self.tls,
            stream_id: None,
        });
        request_ended(figures, counted, log);
        self.queued += 1;
        // Whatever the handler did not read is read past, to reach the next request.
        drop(writer);
        if matches!(body_in, BodyIn::Length(_) | BodyIn::Chunked(_)) {
            InFlight::set_phase(&listed, Phase::Receiving);
        }
        match body_in {
            BodyIn::Done | BodyIn::Raw | BodyIn::Closed => {}
            BodyIn::Length(n) => self.discard_body(n).await?,
            BodyIn::Chunked(dec) => self.discard_chunked_rest(dec, received, true).await?,
        }
        Ok(keep_alive)
    }

    /// Writes the head of `resp` and, unless its body is a stream, the whole body.
    async fn start_response(
        &mut self,
        req: &Request,
        resp: Response,
        keep_alive: &mut bool,
        sent: &mut Sent,
    ) -> Result<Out, Close> {
        let Response {
            status,
            headers,
            body,
        } = resp;
        let mut headers = headers.into_vec();
        sent.status = status;
        // A proxied response keeps the backend's Date, and may ask to close (with
        // `proxy.forward.close-connection`): the codec writes Connection itself.
        let has_date = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"date"));
        headers.retain(|(n, v)| {
            let close = n.eq_ignore_ascii_case(b"connection");
            if close && v.eq_ignore_ascii_case(b"close") {
                *keep_alive = false;
            }
            !close
        });
        let stream = match body {
            Body::Stream(s) => s,
            body => {
                sent.body = if req.is_head() { 0 } else { body.len() };
                if !has_date {
                    let now = crate::http::clock::with_now(|d| Bytes::copy_from_slice(d));
                    headers.push((Bytes::from_static(b"Date"), now));
                }
                // `send::<false>`: the fast path keeps `send::<true>` to itself.
                sent.total = self
                    .send::<false>(req, status, &headers, body, *keep_alive)
                    .await?;
                sent.total -= sent.body;
                sent.headers = headers;
                return Ok(Out::Done);
            }
        };
        let bodiless = req.is_head() || status == 204 || status == 304 || status < 200;

        // Length unknown: chunked for HTTP/1.1; an HTTP/1.0 client knows no chunked coding,
        // so its body goes as it is and ends with the connection (RFC 9112 6.3, 7).
        let length = match stream.len {
            Some(n) => BodyLength::Known(n),
            None if req.version == crate::http::Version::Http11 => BodyLength::Chunked,
            None => {
                *keep_alive = false;
                BodyLength::UntilClose
            }
        };
        let chunked = length == BodyLength::Chunked;
        sent.total = {
            let routing = self.ctx.routing();
            let head = ResponseHead {
                status,
                headers: &headers,
                body: length,
                keep_alive: *keep_alive,
                server_line: routing.server_line(self.addrs.1.port()),
                date: None,
            };
            let wbuf = &mut self.wbuf;
            if has_date {
                h1::write_head(wbuf, &head)
            } else {
                crate::http::clock::with_date(|date| {
                    h1::write_head(
                        wbuf,
                        &ResponseHead {
                            date: Some(date),
                            ..head
                        },
                    )
                })
            }
        } as u64;
        sent.headers = headers;
        if bodiless {
            return Ok(Out::Done);
        }
        self.flush(false).await?;
        Ok(Out::Streaming {
            stream: stream.stream,
            chunked,
        })
    }

    /// Writes the 101 (or a CONNECT's 2xx) that starts a tunnel; from here on the response
    /// is the stream's bytes as they are.
    async fn start_tunnel(
        &mut self,
        status: u16,
        headers: Vec<(Bytes, Bytes)>,
        stream: Box<dyn BodyStream>,
        sent: &mut Sent,
    ) -> Result<Out, Close> {
        sent.status = status;
        sent.total = {
            let routing = self.ctx.routing();
            let server_line = routing.server_line(self.addrs.1.port());
            if status == 101 {
                h1::write_switching_head(&mut self.wbuf, server_line, &headers)
            } else {
                h1::write_tunnel_head(&mut self.wbuf, status, server_line, &headers)
            }
        } as u64;
        sent.headers = headers;
        self.flush(false).await?;
        Ok(Out::Streaming {
            stream,
            chunked: false,
        })
    }

    /// Moves request body bytes from the read buffer into the handler's pipe.
    fn feed_body(
        &mut self,
        body_in: &mut BodyIn,
        w: &BodyWriter,
        received: &mut u64,
    ) -> Result<(), h1::Error> {
        loop {
            if self.rbuf.is_empty() && !matches!(body_in, BodyIn::Chunked(_)) {
                return Ok(());
            }
            match body_in {
                BodyIn::Done | BodyIn::Closed => return Ok(()),
                BodyIn::Raw => {
                    *received += self.rbuf.len() as u64;
                    w.push(self.rbuf.split().freeze());
                    return Ok(());
                }
                BodyIn::Length(n) => {
                    let take = (self.rbuf.len() as u64).min(*n) as usize;
                    *n -= take as u64;
                    *received += take as u64;
                    w.push(self.rbuf.split_to(take).freeze());
                    if *n == 0 {
                        w.finish(None);
                        *body_in = BodyIn::Done;
                    }
                    return Ok(());
                }
                BodyIn::Chunked(dec) => {
                    let r = dec.decode(&self.rbuf)?;
                    if r.consumed == 0 && !r.done {
                        return Ok(());
                    }
                    let mut piece = self.rbuf.split_to(r.consumed);
                    if !r.data.is_empty() {
                        *received += r.data.len() as u64;
                        if *received > self.ctx.routing().config.limits.request_body {
                            return Err(h1::Error::BodyTooLarge);
                        }
                        let _ = piece.split_to(r.data.start);
                        piece.truncate(r.data.len());
                        w.push(piece.freeze());
                    }
                    if r.done {
                        w.finish(dec.take_trailers());
                        *body_in = BodyIn::Done;
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// Whether the handler's pipe may take another read's worth of body.
fn has_room(w: &BodyWriter) -> bool {
    w.buffered() < READ_BUFFER
}

/// Moves the response forward: polls the pending answer, or gathers ready body pieces into
/// `wbuf` (chunk-framed when `chunked`) until the stream waits or `GATHER_MAX` is reached.
fn step(out: &mut Out, cx: &mut Context<'_>, wbuf: &mut Vec<u8>) -> Poll<Step> {
    match out {
        Out::Done => Poll::Pending,
        Out::Waiting(later) => {
            let mut interim = false;
            let polled = later.poll_interim(cx, |i| {
                h1::write_interim(wbuf, i.status, &i.headers);
                interim = true;
            });
            match polled {
                Poll::Ready(resp) => Poll::Ready(Step::Head(resp)),
                Poll::Pending if interim => Poll::Ready(Step::Interim),
                Poll::Pending => Poll::Pending,
            }
        }
        Out::Streaming { stream, chunked } => {
            let mut gathered = 0u64;
            while wbuf.len() < GATHER_MAX {
                match stream.poll_frame(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Some(Ok(Frame::Data(b)))) => {
                        if b.is_empty() {
                            continue;
                        }
                        if *chunked {
                            h1::write_chunk(wbuf, &b);
                        } else {
                            wbuf.extend_from_slice(&b);
                        }
                        gathered += b.len() as u64;
                    }
                    Poll::Ready(Some(Ok(Frame::Trailers(t)))) => {
                        if *chunked {
                            h1::write_last_chunk(wbuf, &t);
                        }
                        return Poll::Ready(Step::End(gathered));
                    }
                    Poll::Ready(None) => {
                        if *chunked {
                            h1::write_last_chunk(wbuf, &[]);
                        }
                        return Poll::Ready(Step::End(gathered));
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Step::Failed(e)),
                }
            }
            if gathered > 0 {
                Poll::Ready(Step::Data(gathered))
            } else {
                Poll::Pending
            }
        }
    }
}
