//! The HTTP/1.x connection driver: reads bytes, feeds the sans-IO codec, routes each request,
//! and writes responses. Pipelined requests are answered in order, their responses gathered
//! in one buffer and written with one syscall per read. See `src/proto/h1/LIFECYCLE.md`.

use super::buffers::READ_BUFFER;
use super::context::{Addrs, WorkerCtx};
use super::request_end::{request_ended, Counted, Figures, Logged};
use super::request_start::{self, Routed};
use super::transport::{self, Transport};
use crate::http::clock;
use crate::http::request::RequestBuilder;
use crate::http::response::BodyPart;
use crate::http::{body, Body, FileRange, Request, Response};
use crate::log::AccessLog;
use crate::metrics::in_flight::{InFlight, Phase};
use crate::proto::h1::{self, BodyFraming, BodyLength, ChunkedDecoder, ResponseHead};
use bytes::{Bytes, BytesMut};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::futures::Notified;
use tokio::time::Sleep;

mod lane;
mod splice;
mod streaming;
mod switch;

pub(crate) use lane::{answer_in_lane, LaneStep};
pub(crate) use splice::{Sink, SplicedBodies};
use switch::{h2c_upgrade, is_preface_prefix, not_http, PREFACE};

/// Bodies up to this size are copied into the write buffer; larger ones are written directly.
const COPY_BODY_MAX: usize = 16 * 1024;

/// Where a connection resumes in a new task (parked, or handed over by the lane).
pub(crate) struct Resume {
    /// No request answered yet.
    pub fresh: bool,
    /// Its place in the open-connection count, kept while it was parked.
    pub open: crate::metrics::OpenConnection,
    /// What the lane read and answered but could not finish: the task goes on from there.
    pub carried: Option<Box<Carried>>,
}

/// How the HTTP/1 driver let a connection go.
pub(crate) enum Ended<'a, T> {
    /// It is closed, or done and to be closed.
    Closed,
    /// Idle for `http1-idle-park-delay` (or, with the lane, after a request): to be parked,
    /// with whether a request was answered yet and its place in the open-connection count.
    Idle {
        fresh: bool,
        open: crate::metrics::OpenConnection,
    },
    /// It switches to HTTP/2.
    Http2(Switched<'a, T>),
}

/// A connection switching to HTTP/2, with what the HTTP/2 driver goes on from: the bytes
/// read past the switch, and the connection's timer and stop signal (registered already).
pub(crate) struct Switched<'a, T> {
    pub stream: T,
    pub rbuf: BytesMut,
    pub via: Http2Via,
    pub timer: Pin<Box<Sleep>>,
    pub stop: Pin<Box<Notified<'a>>>,
}

/// How a connection switches to HTTP/2.
pub(crate) enum Http2Via {
    /// The client preface (prior knowledge).
    Preface,
    /// An HTTP/1.1 request with `Upgrade: h2c`, answered with 101.
    Upgrade(Box<H2cUpgrade>),
}

/// An HTTP/1.1 request upgraded with `Upgrade: h2c`: it becomes stream 1.
pub(crate) struct H2cUpgrade {
    pub request: Request,
    /// The decoded `HTTP2-Settings` payload.
    pub settings: Vec<u8>,
}

/// A lane connection's buffers as it goes back to a task: the bytes read and not yet
/// answered (from the start of a request), and responses not yet sent: bytes, then what the
/// lane did not send of a file.
pub(crate) struct Carried {
    pub rbuf: BytesMut,
    pub wbuf: Vec<u8>,
    pub file: Option<FileRange>,
}

/// Serves one connection until it closes, until it has been idle long enough to park (then
/// the caller parks the socket), or until it switches to HTTP/2. `resumed` is a parked
/// connection's.
/// The addresses are borrowed (and the socket may be): the task that owns them keeps them
/// anyway, a copy here would double them per connection.
pub(crate) fn serve<'a, T: Transport + 'a>(
    stream: T,
    addrs: &'a Addrs,
    ctx: &'a WorkerCtx,
    resumed: Option<Resume>,
) -> impl Future<Output = Ended<'a, T>> + 'a {
    let (fresh, open, carried) = match resumed {
        Some(Resume {
            fresh,
            open,
            carried,
        }) => (fresh, Some(open), carried),
        None => (true, None, None),
    };
    let (rbuf, wbuf, file) = match carried {
        Some(c) => (c.rbuf, c.wbuf, c.file.map(Box::new)),
        None => (ctx.buffers.read_buffer(), ctx.buffers.write_buffer(), None),
    };
    let tls = stream.tls_facts();
    let mut conn = Conn {
        stream,
        tls,
        addrs,
        ctx,
        rbuf,
        wbuf,
        queued: 0,
        fresh,
        handoff: None,
        timer: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
        stop: Box::pin(ctx.stop.notified()),
        waits_armed: false,
    };
    // A block that owns the connection holds one copy of it (an async fn would keep its
    // arguments besides): this future lives as long as the connection.
    async move {
        // The rest of a file the lane began to send goes first.
        if let Some(rest) = file {
            if let Err(e) = conn.send_file(&rest).await {
                if let Close::Io(e) = e {
                    tracing::debug!(peer = %conn.addrs.0, "connection closed: {e}");
                }
                return Ended::Closed;
            }
        }
        match conn.serve(open).await {
            Step::Closed => Ended::Closed,
            Step::Idle { fresh, open } => Ended::Idle { fresh, open },
            Step::Http2(via) => Ended::Http2(Switched {
                stream: conn.stream,
                rbuf: conn.rbuf,
                via,
                timer: conn.timer,
                stop: conn.stop,
            }),
        }
    }
}

struct Conn<'a, T> {
    stream: T,
    /// The TLS session, for log lines (read once: it does not change after the handshake).
    tls: Option<crate::log::TlsFacts>,
    /// Peer, local.
    addrs: &'a Addrs,
    ctx: &'a WorkerCtx,
    rbuf: BytesMut,
    /// Responses not yet written.
    wbuf: Vec<u8>,
    /// Number of responses in `wbuf`.
    queued: usize,
    /// No request answered yet: the HTTP/2 preface may still come.
    fresh: bool,
    /// Set when the connection switches to HTTP/2 (prior knowledge, or an upgrade).
    handoff: Option<Http2Via>,
    /// The read deadline, reset for each wait.
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Completes when the server begins to stop; registered once per connection.
    stop: Pin<Box<tokio::sync::futures::Notified<'a>>>,
    /// The timer and the stop signal hold this task's waker from an earlier poll, and neither
    /// was reset since: an idle wait need not poll them again (`poll_idle`).
    waits_armed: bool,
}

/// How `Conn::serve` let the connection go (`Ended`, without what it hands over).
enum Step {
    Closed,
    Idle {
        fresh: bool,
        open: crate::metrics::OpenConnection,
    },
    Http2(Http2Via),
}

/// How a connection ends abnormally.
enum Close {
    /// Peer went away or a timeout passed while idle: nothing to say.
    Quietly,
    Io(std::io::Error),
    /// An error response was written: stop reading requests, drain a little, close.
    Linger,
    /// Idle for `http1-idle-park-delay`: hand the socket back to be parked.
    Park,
}

impl From<std::io::Error> for Close {
    fn from(e: std::io::Error) -> Close {
        Close::Io(e)
    }
}

/// What a read while waiting for a request produced.
enum Wait {
    Data,
    Eof,
    TimedOut,
    Stopping,
    /// The park delay passed.
    Park,
}

impl<'a, T: Transport> Conn<'a, T> {
    async fn serve(&mut self, open: Option<crate::metrics::OpenConnection>) -> Step {
        self.stop.as_mut().enable();
        let ctx = self.ctx;
        let open = open
            .unwrap_or_else(|| crate::metrics::OpenConnection::new(crate::metrics::Proto::Http1));
        match self.run().await {
            Ok(()) => {
                if let Some(via) = self.handoff.take() {
                    drop(open);
                    ctx.buffers.give_write(std::mem::take(&mut self.wbuf));
                    return Step::Http2(via);
                }
            }
            Err(Close::Park) => {
                ctx.buffers.give_read(std::mem::take(&mut self.rbuf));
                ctx.buffers.give_write(std::mem::take(&mut self.wbuf));
                let fresh = self.fresh;
                return Step::Idle { fresh, open };
            }
            Err(Close::Quietly) => {}
            Err(Close::Io(e)) => tracing::debug!(peer = %self.addrs.0, "connection closed: {e}"),
            // Boxed, as the other rare states, to keep the connection's task small.
            Err(Close::Linger) => Box::pin(self.linger_close()).await,
        }
        ctx.buffers.give_read(std::mem::take(&mut self.rbuf));
        ctx.buffers.give_write(std::mem::take(&mut self.wbuf));
        Step::Closed
    }

    async fn run(&mut self) -> Result<(), Close> {
        let mut request_started: Option<Instant> = None;
        loop {
            let preface = self.fresh && is_preface_prefix(&self.rbuf);
            if preface && self.rbuf.len() >= PREFACE.len() {
                self.handoff = Some(Http2Via::Preface);
                return Ok(());
            }
            // The head is parsed and answered in `next` (not here), so it is not part of the
            // task's state; neither is a borrow of `self` once the statement ends.
            let outcome = match self.next(preface) {
                Ok(Responded::Now(keep_alive)) => Ok(keep_alive),
                Ok(Responded::Later(later)) => Ok(later.await?),
                Err(not_yet) => Err(not_yet),
            };
            let not_yet = match outcome {
                Ok(keep_alive) => {
                    request_started = None;
                    if self.handoff.is_some() {
                        self.flush(false).await?;
                        return Ok(());
                    }
                    if !keep_alive {
                        self.flush(false).await?;
                        return Err(Close::Linger);
                    }
                    if self.queued >= self.ctx.routing().config.limits.pipelined_requests {
                        self.flush(false).await?;
                    }
                    continue;
                }
                Err(not_yet) => not_yet,
            };
            match not_yet {
                NotYet::More => {}
                NotYet::NotHttp => {
                    // Neither HTTP/1 nor the HTTP/2 preface: no HTTP/1 answer (which an
                    // HTTP/2 client would misread as a frame), just close.
                    self.log_request_error(400, "not an HTTP request");
                    return Err(Close::Quietly);
                }
                NotYet::Reject(e) => {
                    self.reject(e).await?;
                    return Err(Close::Linger);
                }
                NotYet::Handshake => {
                    Box::pin(self.complete_handshake()).await?;
                    continue;
                }
            }
            // Need more bytes: whatever is answered goes out first.
            self.flush(false).await?;
            if self.rbuf.is_empty() && self.ctx.close_idle.get() {
                return Ok(());
            }
            let idle = self.rbuf.is_empty();
            let parking = idle && T::PARKS;
            // A plain connection that answered a request waits in the lane (`connection/park.rs`).
            if !self.fresh && parking && self.ctx.lane {
                return Err(Close::Park);
            }
            let now = Instant::now();
            // A plain connection waits the park delay rather than the keep-alive timeout, and
            // then is parked (`connection/park.rs`), which keeps the deadline.
            let parks = parking && self.ctx.parks;
            let deadline = {
                let routing = self.ctx.routing();
                let http1 = &routing.config.http1;
                if parks {
                    now + http1.idle_park_delay
                } else if idle {
                    now + http1.keepalive_timeout
                } else {
                    let started = *request_started.get_or_insert(now);
                    (started + http1.request_timeout).min(now + http1.request_io_timeout)
                }
            };
            match self.read_until(now, deadline, idle, parks).await? {
                Wait::Data => {}
                Wait::Eof | Wait::Stopping => return Ok(()),
                Wait::Park => return Err(Close::Park),
                // Nothing, or only the empty lines RFC 9112 2.2 lets a client send before a
                // request: closed quietly, as h2o does, rather than answered 408.
                Wait::TimedOut if self.rbuf.iter().all(|b| matches!(b, b'\r' | b'\n')) => {
                    return Ok(())
                }
                Wait::TimedOut => {
                    self.log_request_error(408, "request head not received in time");
                    self.write_error(408);
                    self.flush(false).await?;
                    return Err(Close::Linger);
                }
            }
        }
    }

    /// Parses the request head at the start of `rbuf` and answers it (see `respond`).
    #[inline(always)]
    fn next(&mut self, preface: bool) -> Result<Responded<'_>, NotYet> {
        // Empty after the last request was answered (the usual case): nothing to parse.
        if preface || self.rbuf.is_empty() {
            return Err(NotYet::More);
        }
        let limits = &self.ctx.routing().head_limits;
        let parsed = (self.ctx.parse_memo.borrow_mut()).parse(&self.rbuf, limits);
        match parsed {
            // Early data (`tls_early.rs`): a request not safe to replay waits for the
            // handshake, and is parsed again then.
            Ok(Some(head))
                if self.stream.early()
                    && !request_start::may_answer_early(
                        &self.ctx.routing(),
                        head.method.as_bytes(),
                    ) =>
            {
                Err(NotYet::Handshake)
            }
            Ok(Some(head)) => Ok(self.respond(head)),
            Ok(None) => Err(NotYet::More),
            Err(_) if self.fresh && not_http(&self.rbuf) => Err(NotYet::NotHttp),
            Err(e) => Err(NotYet::Reject(e)),
        }
    }

    /// Answers one request whose head is at the start of `rbuf`: at once when its answer is
    /// ready and small (`answer`), else with a boxed future, so that a connection's task,
    /// which lives as long as the connection, only holds the small states of `run`.
    #[inline(always)]
    fn respond(&mut self, head: h1::Head) -> Responded<'_> {
        match self.answer(head) {
            Answered::Done(keep_alive) => Responded::Now(keep_alive),
            Answered::Streaming(exchange, answer, log) => {
                Responded::Later(self.respond_streaming_boxed(exchange, answer, log))
            }
            Answered::Waits(reply) => Responded::Later(self.reply_boxed(reply)),
            Answered::Rejected(e) => Responded::Later(Box::pin(async move {
                self.reject(e).await?;
                Err(Close::Linger)
            })),
        }
    }

    /// Routes one request and, when its answer is ready and small, writes it.
    #[inline(always)]
    fn answer(&mut self, head: h1::Head) -> Answered {
        let head_len = head.len as u64;
        let keep_alive = head.keep_alive && !self.ctx.stopping.get();
        let framing = head.body;
        let upgrade = head.upgrade;
        let expect_continue = head.expect_continue && framing != BodyFraming::None;
        let mut req = build_request(head, &mut self.rbuf, self.stream.is_secure(), self.addrs);
        if self.stream.early() {
            req.set_early_data(true);
        }
        self.fresh = false;
        // `upgrade`: `Connection: upgrade` on a bodiless HTTP/1.1 request, which an h2c
        // upgrade needs (RFC 9110 7.8); without it, no header is looked at.
        // The routing this request starts with: borrowed for this call only.
        let ctx = self.ctx;
        let routing = ctx.routing();
        if upgrade && routing.config.http1.upgrade_to_http2 {
            if let Some(settings) = h2c_upgrade(&req) {
                self.wbuf.extend_from_slice(
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
                );
                self.handoff = Some(Http2Via::Upgrade(Box::new(H2cUpgrade {
                    request: req,
                    settings,
                })));
                return Answered::Done(true);
            }
        }

        // A body the handler reads streams to it as it arrives: the slow path.
        // So does an upgrade a handler may tunnel: after its 101, the client's bytes.
        let tunnel = upgrade && routing.router.tunnels(&req);
        let writer = if tunnel || framing != BodyFraming::None && routing.router.streams_body(&req)
        {
            let length = match framing {
                BodyFraming::Length(n) => Some(n),
                _ => None,
            };
            let (writer, body) = body::pipe(length);
            req.set_body(body);
            Some(writer)
        } else {
            None
        };
        if framing == BodyFraming::Chunked && writer.is_none() {
            // Check what already came of a body the handler will not read before answering:
            // a malformed one gets 400 and a close, as nginx does, not the handler's answer.
            if let Err(e) = self.check_chunked_prefix() {
                return Answered::Rejected(e);
            }
        }
        let (resp, route) = match request_start::route(&routing, &mut req) {
            Routed::Now(resp, route)
                if writer.is_none() && !matches!(resp.body, Body::Stream(_)) =>
            {
                (resp, route)
            }
            routed => {
                // An early request's copy, routed again if the answer is 425 Too Early.
                let early_copy = (req.is_early_data() && framing == BodyFraming::None)
                    .then(|| Box::new(req.clone()));
                let exchange = streaming::Exchange {
                    early_copy,
                    req,
                    writer,
                    framing,
                    keep_alive,
                    expect_continue,
                    tunnel,
                };
                let log = routed.log();
                let answer = match routed {
                    Routed::Now(resp, _) => streaming::Answer::Now(resp),
                    Routed::Later(later) => streaming::Answer::Later(later),
                };
                return Answered::Streaming(exchange, answer, log);
            }
        };
        let reply = Reply {
            req,
            resp,
            log: route.log().cloned(),
            framing,
            keep_alive,
            expect_continue,
            head_len,
        };
        // Inline: the body is copied, and the request body (if any) is all here already.
        let body_here = match framing {
            BodyFraming::None => true,
            BodyFraming::Length(n) => self.rbuf.len() as u64 >= n,
            BodyFraming::Chunked => false,
        };
        if !(body_here && reply.inline()) {
            return Answered::Waits(reply);
        }
        let out = Out {
            server_line: routing.server_line(self.addrs.1.port()),
            wbuf: &mut self.wbuf,
            splice: None,
            tls: self.tls,
        };
        out.write_inline(reply, &mut self.rbuf);
        self.queued += 1;
        Answered::Done(keep_alive)
    }

    /// The answers that wait to be written, boxed (see `respond`), out of line.
    #[inline(never)]
    fn reply_boxed<'s>(
        &'s mut self,
        reply: Reply,
    ) -> Pin<Box<dyn Future<Output = Result<bool, Close>> + 's>> {
        Box::pin(self.reply(reply))
    }

    async fn reply(&mut self, mut reply: Reply) -> Result<bool, Close> {
        let clock = self.out().reply_started(&reply);
        // Listed (when a `status` path lists requests) until its body is read past too.
        let chunked = reply.framing == BodyFraming::Chunked;
        let listed = InFlight::enter_in(
            &reply.req,
            if chunked {
                Phase::Receiving
            } else {
                Phase::Sending
            },
        );
        if chunked {
            // As h2o, a chunked body the handler does not read is read before the answer: one
            // over `limit-request-body` (or malformed) is answered 413 (400), not by the handler.
            let dec = ChunkedDecoder::new(self.ctx.routing().config.limits.request_head);
            self.discard_chunked_rest(dec, 0, false).await?;
        }
        InFlight::set_phase(&listed, Phase::Sending);
        let body = std::mem::take(&mut reply.resp.body);
        let body_len = body.len();
        let resp = &reply.resp;
        let total = if carries_date(&resp.headers) {
            self.send::<false>(
                &reply.req,
                resp.status,
                &resp.headers,
                body,
                reply.keep_alive,
            )
            .await?
        } else {
            self.send::<true>(
                &reply.req,
                resp.status,
                &resp.headers,
                body,
                reply.keep_alive,
            )
            .await?
        };
        self.out().reply_sent(&reply, body_len, clock, total);
        self.queued += 1;
        // The handler did not need the body; read past it to reach the next request.
        if let BodyFraming::Length(n) = reply.framing {
            InFlight::set_phase(&listed, Phase::Receiving);
            self.discard_body(n).await?;
        }
        drop(listed);
        Ok(reply.keep_alive)
    }

    /// The connection's inline-answer state (`Out`), for a reply's log line and metrics: its
    /// head is written by `send`, so it has no Server line.
    fn out(&mut self) -> Out<'_> {
        Out {
            server_line: &[],
            wbuf: &mut self.wbuf,
            splice: None,
            tls: self.tls,
        }
    }

    /// Writes the head and body of `resp` into the write buffer, or straight to the socket
    /// for large and file bodies. Returns the bytes of the response.
    /// `DATE`: write our Date field (the slow path leaves a proxied response's own). A const
    /// parameter so the fast path has its own copy, inlined as before the slow path existed.
    async fn send<const DATE: bool>(
        &mut self,
        req: &Request,
        status: u16,
        headers: &[(Bytes, Bytes)],
        body: Body,
        keep_alive: bool,
    ) -> Result<u64, Close> {
        let head_len = {
            let routing = self.ctx.routing();
            let head = ResponseHead {
                status,
                headers,
                body: BodyLength::Known(body.len()),
                keep_alive,
                server_line: routing.server_line(self.addrs.1.port()),
                date: None,
            };
            write_head_now(&mut self.wbuf, head, DATE) as u64
        };
        if req.is_head() || status == 304 || status == 204 {
            return Ok(head_len);
        }
        let body_len = body.len();
        match body {
            Body::Empty => {}
            Body::Bytes(b) => self.send_bytes(&b).await?,
            Body::File(f) => self.send_file(&f).await?,
            // Streams take the slow path (`streaming.rs`), never this one.
            Body::Stream(_) => return Err(Close::Quietly),
            Body::Parts(parts) => {
                for p in parts {
                    match p {
                        BodyPart::Bytes(b) => self.send_bytes(&b).await?,
                        BodyPart::File(f) => self.send_file(&f).await?,
                    }
                }
            }
        }
        Ok(head_len + body_len)
    }

    async fn send_bytes(&mut self, b: &Bytes) -> Result<(), Close> {
        if b.len() <= COPY_BODY_MAX {
            self.wbuf.extend_from_slice(b);
        } else {
            self.flush(true).await?;
            let t = self.send_timeout();
            self.stream.write_all(b, false, t).await?;
        }
        Ok(())
    }

    async fn send_file(&mut self, f: &FileRange) -> Result<(), Close> {
        if let Some(bytes) = f.cached_bytes() {
            return self.send_bytes(&bytes).await;
        }
        self.flush(true).await?;
        let t = self.send_timeout();
        self.stream
            .send_file(&f.file.file, f.offset, f.len, t)
            .await?;
        Ok(())
    }

    /// Writes out the buffered responses. `more` tells the kernel a body follows.
    async fn flush(&mut self, more: bool) -> Result<(), Close> {
        if !self.wbuf.is_empty() {
            let t = self.send_timeout();
            self.stream.write_all(&self.wbuf, more, t).await?;
            self.wbuf.clear();
        }
        self.queued = 0;
        Ok(())
    }

    fn send_timeout(&self) -> Duration {
        self.ctx.routing().config.http1.send_timeout
    }

    /// Reads into `rbuf` until data arrives or the deadline passes. When `idle` (between
    /// requests), a server stop also ends the wait, and on plain TCP the connection waits
    /// without buffers: they go back to the worker's pool meanwhile. When it `parks`, the
    /// deadline is the park time: the wait then ends with `Wait::Park`. `now` is when the
    /// deadline was computed.
    async fn read_until(
        &mut self,
        now: Instant,
        deadline: Instant,
        idle: bool,
        parks: bool,
    ) -> Result<Wait, Close> {
        self.arm_timer(now, deadline);
        if idle {
            if self.ctx.close_idle.get() {
                return Ok(Wait::Stopping);
            }
            if T::WAITS_WITHOUT_BUFFER && self.wbuf.is_empty() {
                return self.wait_bufferless(deadline, parks).await;
            }
        }
        // Only a bufferless wait parks (responses are flushed before an idle wait).
        debug_assert!(!parks);
        if self.rbuf.capacity() - self.rbuf.len() < 1024 {
            self.rbuf.reserve(READ_BUFFER);
        }
        loop {
            // Biased: when data is there, the timer and the stop signal are not even polled.
            let waited = tokio::select! {
                biased;
                r = self.stream.read_buf(&mut self.rbuf) => match r? {
                    0 => Wait::Eof,
                    _ => Wait::Data,
                },
                _ = self.timer.as_mut() => Wait::TimedOut,
                _ = self.stop.as_mut(), if idle => Wait::Stopping,
            };
            match waited {
                Wait::TimedOut if !self.timer_expired(deadline) => {}
                Wait::Stopping if !self.stop_closes_idle() => {}
                waited => return Ok(waited),
            }
        }
    }

    /// Sets the connection's one timer for `deadline` (`now` or later). Moving a timer to a
    /// later time costs as much as parsing a request head, and an idle connection's deadline
    /// moves later with every request: so a timer still set for a time to come, before
    /// `deadline`, is left as it is. It fires early, and `timer_expired` sets it again.
    fn arm_timer(&mut self, now: Instant, deadline: Instant) {
        let set_for = self.timer.deadline().into_std();
        if set_for <= now || set_for > deadline {
            self.set_timer(deadline);
        }
    }

    /// Sets the timer for `deadline`; the next idle wait polls it again.
    fn set_timer(&mut self, deadline: Instant) {
        self.timer.as_mut().reset(deadline.into());
        self.waits_armed = false;
    }

    /// The timer fired: whether `deadline` has passed. If not (it was set early, see
    /// `arm_timer`), it is set again for `deadline`.
    fn timer_expired(&mut self, deadline: Instant) -> bool {
        if Instant::now() >= deadline {
            return true;
        }
        self.set_timer(deadline);
        false
    }

    /// The stop signal fired: says whether an idle connection closes now (the server stops)
    /// or, when a reload drains this worker, waits on for one more request (its response
    /// says `Connection: close`), so a client about to reuse the connection is answered.
    fn stop_closes_idle(&mut self) -> bool {
        if self.ctx.close_idle.get() {
            return true;
        }
        // Listen again: a stop during the drain ends the wait.
        self.stop.set(self.ctx.stop.notified());
        self.stop.as_mut().enable();
        self.waits_armed = false;
        false
    }

    /// Waits for readiness without buffers. When it `parks`, the timer is the park time: when
    /// it fires, the connection parks rather than times out. The timer is set for `deadline`
    /// or earlier (`arm_timer`).
    async fn wait_bufferless(&mut self, deadline: Instant, parks: bool) -> Result<Wait, Close> {
        self.ctx.buffers.give_read(std::mem::take(&mut self.rbuf));
        self.ctx.buffers.give_write(std::mem::take(&mut self.wbuf));
        loop {
            let waited = std::future::poll_fn(|cx| self.poll_idle(cx, parks)).await?;
            match waited {
                // `poll_idle` took the buffers for the read.
                Wait::Data | Wait::Eof => return Ok(waited),
                Wait::Park | Wait::TimedOut if !self.timer_expired(deadline) => continue,
                Wait::Park => return Ok(Wait::Park),
                Wait::Stopping if !self.stop_closes_idle() => continue,
                Wait::TimedOut | Wait::Stopping => {
                    self.rbuf = self.ctx.buffers.read_buffer();
                    self.wbuf = self.ctx.buffers.write_buffer();
                    return Ok(waited);
                }
            }
        }
    }

    /// One poll of a bufferless wait: readiness first (after a wake-up it is usually the reason,
    /// and alone), then the timer (`Wait::Park` when it `parks`) and the stop signal. Those two
    /// keep the waker of their last poll, this task's: while neither fired nor was reset since,
    /// polling them again would only store the same waker again, once per request. A stop sets
    /// `stopping` before it notifies, and a fired timer is elapsed: both are then polled.
    /// On readiness it takes the buffers and reads (`Wait::Data` or `Wait::Eof`, buffers kept).
    fn poll_idle(&mut self, cx: &mut Context<'_>, parks: bool) -> Poll<std::io::Result<Wait>> {
        if let Poll::Ready(r) = self.stream.poll_readable(cx) {
            r?;
            self.rbuf = self.ctx.buffers.read_buffer();
            self.wbuf = self.ctx.buffers.write_buffer();
            // Readiness can be stale (a fresh socket, an event already consumed): a read that
            // finds nothing registers the waker, and the wait goes on without buffers.
            match poll_read_buf(&mut self.stream, cx, &mut self.rbuf) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(Wait::Eof)),
                Poll::Ready(Ok(_)) => return Poll::Ready(Ok(Wait::Data)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.ctx.buffers.give_read(std::mem::take(&mut self.rbuf));
                    self.ctx.buffers.give_write(std::mem::take(&mut self.wbuf));
                }
            }
        }
        if self.waits_armed && !self.timer.is_elapsed() && !self.ctx.stopping.get() {
            return Poll::Pending;
        }
        self.waits_armed = false;
        if self.timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(if parks { Wait::Park } else { Wait::TimedOut }));
        }
        if self.stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(Wait::Stopping));
        }
        self.waits_armed = true;
        Poll::Pending
    }

    /// Reads and drops `n` bytes of request body.
    async fn discard_body(&mut self, mut n: u64) -> Result<(), Close> {
        loop {
            let have = (self.rbuf.len() as u64).min(n);
            let _ = self.rbuf.split_to(have as usize);
            n -= have;
            if n == 0 {
                return Ok(());
            }
            self.read_body_bytes().await?;
        }
    }

    /// Reads and drops the rest of a chunked body, `received` data bytes of it already seen.
    /// `answered`: the response is in the buffer already; else a body that is malformed or
    /// over `limit-request-body` is answered here with its error status.
    async fn discard_chunked_rest(
        &mut self,
        mut dec: ChunkedDecoder,
        mut received: u64,
        answered: bool,
    ) -> Result<(), Close> {
        loop {
            let failed = match dec.decode(&self.rbuf) {
                Ok(r) => {
                    received += r.data.len() as u64;
                    if received <= self.ctx.routing().config.limits.request_body {
                        let _ = self.rbuf.split_to(r.consumed);
                        if r.done {
                            return Ok(());
                        }
                        if r.consumed == 0 || self.rbuf.is_empty() {
                            self.read_body_bytes().await?;
                        }
                        continue;
                    }
                    (413, "chunked request body too large")
                }
                Err(e) => (e.status(), e.reason()),
            };
            self.log_request_error(failed.0, failed.1);
            if !answered {
                self.write_error(failed.0);
            }
            // Deliver the response, then close.
            self.flush(false).await?;
            return Err(Close::Linger);
        }
    }

    /// Decodes the chunked body bytes already in `rbuf` without consuming them, reporting
    /// malformed framing. The body is decoded again as it is discarded; keeping no decoder
    /// here keeps the connection's future small.
    fn check_chunked_prefix(&self) -> Result<(), h1::Error> {
        let mut dec = ChunkedDecoder::new(self.ctx.routing().config.limits.request_head);
        let mut rest = &self.rbuf[..];
        while !rest.is_empty() {
            let r = dec.decode(rest)?;
            if r.done || r.consumed == 0 {
                break;
            }
            rest = &rest[r.consumed..];
        }
        Ok(())
    }

    /// Reads more of a body; a silence longer than `http1-request-io-timeout` ends the
    /// connection. Responses are flushed first: the client may wait for them (or for 100).
    async fn read_body_bytes(&mut self) -> Result<(), Close> {
        self.flush(false).await?;
        let now = Instant::now();
        let deadline = now + self.ctx.routing().config.http1.request_io_timeout;
        match self.read_until(now, deadline, false, false).await? {
            Wait::Data => Ok(()),
            Wait::Eof | Wait::TimedOut | Wait::Stopping | Wait::Park => Err(Close::Quietly),
        }
    }

    /// Answers a request the codec rejected, with `Connection: close`.
    async fn reject(&mut self, e: h1::Error) -> Result<(), Close> {
        self.log_request_error(e.status(), e.reason());
        self.write_error(e.status());
        self.flush(false).await
    }

    fn write_error(&mut self, status: u16) {
        let resp = Response::error(status);
        let body = match &resp.body {
            Body::Bytes(b) => b.clone(),
            _ => Bytes::new(),
        };
        let routing = self.ctx.routing();
        let server_line = routing.server_line(self.addrs.1.port());
        clock::with_date(|date| {
            h1::write_head(
                &mut self.wbuf,
                &ResponseHead {
                    status,
                    headers: &resp.headers,
                    body: BodyLength::Known(body.len() as u64),
                    keep_alive: false,
                    server_line,
                    date: Some(date),
                },
            )
        });
        self.wbuf.extend_from_slice(&body);
    }

    fn log_request_error(&self, status: u16, reason: &str) {
        if crate::log::emit_request_errors() {
            tracing::info!(peer = %self.addrs.0, "rejected request with {status}: {reason}");
        }
    }

    /// Half-closes, then reads and drops input for a short while so the error response is
    /// not destroyed by a reset caused by unread data.
    /// A request received in early data must wait for the client's Finished: what is
    /// answered goes out first.
    async fn complete_handshake(&mut self) -> Result<(), Close> {
        crate::metrics::tls_early_data::request_held();
        self.flush(false).await?;
        self.stream.complete_handshake().await.map_err(Close::Io)
    }

    async fn linger_close(&mut self) {
        let _ = self.stream.shutdown_write();
        transport::drain_input(&mut self.stream).await;
    }
}

/// Where inline answers go: a connection's write buffer. The code both a
/// connection's task (`Conn::answer`) and the lane (`answer_in_lane`) run for an inline answer.
struct Out<'o> {
    /// The Server line (and Alt-Svc) of the routing the request started with, for the local
    /// port.
    server_line: &'o [u8],
    wbuf: &'o mut Vec<u8>,
    /// Where bodies in memory go instead of being copied into `wbuf` (the lane's, which
    /// sends them from their own memory: `splice.rs`); `None` copies.
    splice: Option<&'o mut SplicedBodies>,
    /// The connection's TLS session, for the log line.
    tls: Option<crate::log::TlsFacts>,
}

impl Out<'_> {
    /// Writes an inline reply (its body copied) with its log line and metrics, and steps
    /// `rbuf` past a request body the handler did not need (all of it is there).
    #[inline(always)]
    fn write_inline(mut self, mut reply: Reply, rbuf: &mut BytesMut) {
        let started = self.reply_started(&reply);
        let body_len = reply.resp.body.len();
        let total = self.write_copied(&mut reply);
        self.reply_sent(&reply, body_len, started, total);
        crate::http::recycle::give_header_list(reply.resp.headers);
        reply.req.recycle();
        if let BodyFraming::Length(n) = reply.framing {
            let _ = rbuf.split_to(n as usize);
        }
    }

    /// Begins a reply: `100 Continue` when asked; the clock readings for the log and metrics.
    fn reply_started(&mut self, reply: &Reply) -> ReplyClock {
        if reply.expect_continue {
            h1::write_continue(self.wbuf);
        }
        ReplyClock {
            received_at: (reply.log.as_ref()).map(|_| (SystemTime::now(), Instant::now())),
            counted: crate::metrics::start(),
        }
    }

    /// Counts and logs a reply of `total` bytes.
    fn reply_sent(&mut self, reply: &Reply, body_len: u64, clock: ReplyClock, total: u64) {
        let body_in = match reply.framing {
            BodyFraming::Length(n) => n,
            _ => 0,
        };
        let figures = Figures {
            proto: crate::metrics::Proto::Http1,
            status: reply.resp.status,
            bytes_in: reply.head_len + body_in,
            body_bytes: if reply.req.is_head() { 0 } else { body_len },
            total_bytes: total,
        };
        let counted = clock.counted.map(|started| Counted {
            started,
            ended: None,
        });
        let log = match (&reply.log, clock.received_at) {
            (Some(log), Some((at, started))) => Some(Logged {
                file: log,
                req: &reply.req,
                resp_headers: &reply.resp.headers,
                received_at: at,
                duration: started.elapsed(),
                tls: self.tls,
                stream_id: None,
            }),
            _ => None,
        };
        request_ended(figures, counted, log);
    }

    /// Writes the head and the body of an inline reply, copied or (a large one in memory, with
    /// `splice`) taken to be sent from where it is; returns its bytes.
    fn write_copied(&mut self, reply: &mut Reply) -> u64 {
        let resp = &reply.resp;
        let head = ResponseHead {
            status: resp.status,
            headers: &resp.headers,
            body: BodyLength::Known(resp.body.len()),
            keep_alive: reply.keep_alive,
            server_line: self.server_line,
            date: None,
        };
        let dated = !carries_date(&resp.headers);
        let head_len = write_head_now(self.wbuf, head, dated) as u64;
        if reply.sends_no_body() {
            return head_len;
        }
        let body_len = resp.body.len();
        if let Some(splice) = self.splice.as_deref_mut() {
            if splices(&resp.body) {
                splice.push(self.wbuf.len(), std::mem::take(&mut reply.resp.body));
                return head_len + body_len;
            }
        }
        let resp = &reply.resp;
        let wbuf = &mut *self.wbuf;
        let mut copy = |b: &[u8]| wbuf.extend_from_slice(b);
        match &resp.body {
            Body::Bytes(b) => copy(b),
            Body::File(f) => copy(f.cached_slice().unwrap_or_default()),
            Body::Parts(parts) => {
                for p in parts {
                    match p {
                        BodyPart::Bytes(b) => copy(b),
                        BodyPart::File(f) => copy(f.cached_slice().unwrap_or_default()),
                    }
                }
            }
            Body::Empty | Body::Stream(_) => {}
        }
        head_len + body_len
    }
}

/// The request whose head (parsed as `head`) is at the start of `rbuf`, which steps past it.
#[inline(always)]
fn build_request(head: h1::Head, rbuf: &mut BytesMut, secure: bool, addrs: &Addrs) -> Request {
    let head_bytes = rbuf.split_to(head.len).freeze();
    RequestBuilder {
        method: head.method,
        version: head.version,
        secure,
        peer: addrs.0,
        local: addrs.1,
        target: head.target,
        authority: head.authority,
        fields: head.fields,
    }
    .build(head_bytes)
}

/// Why the bytes read so far are not a request to answer.
enum NotYet {
    /// No complete request head yet.
    More,
    /// Neither HTTP/1 nor the HTTP/2 preface.
    NotHttp,
    Reject(h1::Error),
    /// A request received in early data that must wait for the TLS handshake.
    Handshake,
}

/// A request answered now (whether the connection stays open), or a future that answers it.
enum Responded<'s> {
    Now(bool),
    Later(Pin<Box<dyn Future<Output = Result<bool, Close>> + 's>>),
}

/// What routing a request produced.
enum Answered {
    /// Answered inline (or switched to HTTP/2); whether the connection stays open.
    Done(bool),
    /// The slow path: a streamed body either way, or an answer that comes later.
    Streaming(
        streaming::Exchange,
        streaming::Answer,
        Option<Rc<RefCell<AccessLog>>>,
    ),
    /// Ready, but writing it may wait: a large or file body, or a request body to read past.
    Waits(Reply),
    /// The request is malformed after all (its body's framing): an error answer, then close.
    Rejected(h1::Error),
}

/// An answer ready now, with what its log line and metrics need.
struct Reply {
    req: Request,
    resp: Response,
    log: Option<Rc<RefCell<AccessLog>>>,
    framing: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
    head_len: u64,
}

impl Reply {
    fn sends_no_body(&self) -> bool {
        self.req.is_head() || self.resp.status == 304 || self.resp.status == 204
    }

    /// Whether its body is written with its head, as a copy (no wait, no sendfile).
    fn inline(&self) -> bool {
        self.sends_no_body() || copies(&self.resp.body)
    }
}

/// Clock readings taken when a reply begins, for the access log and the metrics.
struct ReplyClock {
    received_at: Option<(SystemTime, Instant)>,
    counted: Option<crate::metrics::Mark>,
}

/// Whether a body goes into the write buffer as a copy (no wait, no sendfile).
fn copies(body: &Body) -> bool {
    let small = |n: usize| n <= COPY_BODY_MAX;
    match body {
        Body::Empty => true,
        Body::Bytes(b) => small(b.len()),
        Body::File(f) => f.cached_slice().is_some_and(|c| small(c.len())),
        Body::Parts(parts) => parts.iter().all(|p| match p {
            BodyPart::Bytes(b) => small(b.len()),
            BodyPart::File(f) => f.cached_slice().is_some_and(|c| small(c.len())),
        }),
        Body::Stream(_) => false,
    }
}

/// Whether a body is sent from where it is when it can be (`Out::splice`): bytes in memory
/// large enough that a copy would cost more than the extra piece of the write, or a file
/// the open-file cache holds no copy of (sent with `sendfile`).
#[inline]
fn splices(body: &Body) -> bool {
    match body {
        Body::Bytes(b) => b.len() >= splice::SPLICE_MIN,
        Body::File(f) => f
            .cached_slice()
            .is_none_or(|c| c.len() >= splice::SPLICE_MIN),
        _ => false,
    }
}

/// Whether the lane can send a body that is not written as a copy (`Reply::inline`) from
/// where it is (`splices`): bytes, or one range of a file.
#[inline]
fn lane_sends(body: &Body) -> bool {
    matches!(body, Body::Bytes(_) | Body::File(_))
}

/// One read into the spare capacity of `buf`, which grows by what was read (0 at end of
/// stream). What `read_buf` does, without a future to create and poll.
fn poll_read_buf<T: AsyncRead + Unpin>(
    stream: &mut T,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<std::io::Result<usize>> {
    crate::sys::buf::poll_fill(buf, usize::MAX, |spare| {
        Pin::new(stream).poll_read(cx, spare)
    })
}

/// Whether a handler's answer has a Date of its own (a cached proxied response keeps the
/// one it was stored with). A shared field list (a file's) never has: no scan for those.
#[inline(always)]
fn carries_date(headers: &crate::http::Headers) -> bool {
    headers.shared_list().is_none()
        && headers
            .iter()
            .any(|(n, _)| n.len() == 4 && n.eq_ignore_ascii_case(b"date"))
}

/// Writes `head`; `dated`: with our Date of now (read here, once), else as it is (a proxied
/// response keeps its own). Rendered each time: a memo of rendered heads saved nothing on
/// repeated answers (the answer memo sends those whole) and cost varied ones its lookup.
#[inline(always)]
fn write_head_now(out: &mut Vec<u8>, head: ResponseHead<'_>, dated: bool) -> usize {
    if dated {
        clock::with_date(|date| {
            h1::write_head(
                out,
                &ResponseHead {
                    date: Some(date),
                    ..head
                },
            )
        })
    } else {
        h1::write_head(out, &head)
    }
}
