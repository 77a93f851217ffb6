//! The HTTP/1.x connection driver: reads bytes, feeds the sans-IO codec, routes each request,
//! and writes responses. Pipelined requests are answered in order, their responses gathered
//! in one buffer and written with one syscall per read. See `src/proto/h1/LIFECYCLE.md`.

use super::buffers::READ_BUFFER;
use super::transport::{self, Transport};
use super::worker::WorkerCtx;
use crate::http::request::RequestBuilder;
use crate::http::response::BodyPart;
use crate::http::{body, Answer, Body, FileRange, Request, Response};
use crate::log::LogRecord;
use crate::proto::h1::{self, BodyFraming, ChunkedDecoder, ResponseHead};
use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncReadExt;

mod streaming;

/// Bodies up to this size are copied into the write buffer; larger ones are written directly.
const COPY_BODY_MAX: usize = 16 * 1024;

/// The HTTP/2 client preface, which switches a new connection to HTTP/2 (prior knowledge).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves one connection until it closes.
pub(crate) async fn serve<T: Transport>(
    stream: T,
    peer: SocketAddr,
    local: SocketAddr,
    ctx: &WorkerCtx,
) {
    let mut conn = Conn {
        stream,
        peer,
        local,
        ctx,
        rbuf: ctx.buffers.read_buffer(),
        wbuf: ctx.buffers.write_buffer(),
        queued: 0,
        fresh: true,
        handoff: None,
        timer: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
        stop: Box::pin(ctx.stop.notified()),
    };
    conn.stop.as_mut().enable();
    let open = crate::metrics::OpenConnection::new(crate::metrics::Proto::Http1);
    match conn.run().await {
        Ok(()) => {
            if let Some(upgrade) = conn.handoff.take() {
                drop(open);
                let Conn {
                    mut stream,
                    rbuf,
                    wbuf,
                    ..
                } = conn;
                ctx.buffers.give_write(wbuf);
                // Boxed: the HTTP/2 state would otherwise enlarge every connection's task.
                Box::pin(super::h2::serve(
                    &mut stream,
                    peer,
                    local,
                    ctx,
                    rbuf,
                    upgrade,
                ))
                .await;
                // After a GOAWAY the client may still send (WINDOW_UPDATE, a PING): unread,
                // that would reset the connection before it read our last responses.
                transport::drain_input(&mut stream).await;
                return;
            }
        }
        Err(Close::Quietly) => {}
        Err(Close::Io(e)) => tracing::debug!(peer = %peer, "connection closed: {e}"),
        Err(Close::Linger) => conn.linger_close().await,
    }
    ctx.buffers.give_read(std::mem::take(&mut conn.rbuf));
    ctx.buffers.give_write(std::mem::take(&mut conn.wbuf));
}

struct Conn<'a, T> {
    stream: T,
    peer: SocketAddr,
    local: SocketAddr,
    ctx: &'a WorkerCtx,
    rbuf: BytesMut,
    /// Responses not yet written.
    wbuf: Vec<u8>,
    /// Number of responses in `wbuf`.
    queued: usize,
    /// No request answered yet: the HTTP/2 preface may still come.
    fresh: bool,
    /// Set when the connection switches to HTTP/2 (prior knowledge, or an upgrade).
    handoff: Option<Option<super::h2::Upgrade>>,
    /// The read deadline, reset for each wait.
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Completes when the server begins to stop; registered once per connection.
    stop: Pin<Box<tokio::sync::futures::Notified<'a>>>,
}

/// How a connection ends abnormally.
enum Close {
    /// Peer went away or a timeout passed while idle: nothing to say.
    Quietly,
    Io(std::io::Error),
    /// An error response was written: stop reading requests, drain a little, close.
    Linger,
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
}

impl<T: Transport> Conn<'_, T> {
    async fn run(&mut self) -> Result<(), Close> {
        let mut request_started: Option<Instant> = None;
        loop {
            let preface = self.fresh && is_preface_prefix(&self.rbuf);
            if preface && self.rbuf.len() >= PREFACE.len() {
                self.handoff = Some(None);
                return Ok(());
            }
            let parsed = if preface {
                Ok(None)
            } else {
                h1::parse_head(&self.rbuf, &self.ctx.head_limits)
            };
            match parsed {
                Ok(Some(head)) => {
                    request_started = None;
                    let keep_alive = self.respond(head).await?;
                    if self.handoff.is_some() {
                        self.flush(false).await?;
                        return Ok(());
                    }
                    if !keep_alive {
                        self.flush(false).await?;
                        return Err(Close::Linger);
                    }
                    if self.queued >= self.ctx.config.limits.pipelined_requests {
                        self.flush(false).await?;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(_) if self.fresh && not_http(&self.rbuf) => {
                    // Neither HTTP/1 nor the HTTP/2 preface: no HTTP/1 answer (which an
                    // HTTP/2 client would misread as a frame), just close.
                    self.log_request_error(400, "not an HTTP request");
                    return Err(Close::Quietly);
                }
                Err(e) => {
                    self.reject(e).await?;
                    return Err(Close::Linger);
                }
            }
            // Need more bytes: whatever is answered goes out first.
            self.flush(false).await?;
            if self.rbuf.is_empty() && self.ctx.close_idle.get() {
                return Ok(());
            }
            let http1 = &self.ctx.config.http1;
            let now = Instant::now();
            let idle = self.rbuf.is_empty();
            let deadline = if idle {
                now + http1.keepalive_timeout
            } else {
                let started = *request_started.get_or_insert(now);
                (started + http1.request_timeout).min(now + http1.request_io_timeout)
            };
            match self.read_until(deadline, idle).await? {
                Wait::Data => {}
                Wait::Eof | Wait::Stopping => return Ok(()),
                Wait::TimedOut if self.rbuf.is_empty() => return Ok(()),
                Wait::TimedOut => {
                    self.log_request_error(408, "request head not received in time");
                    self.write_error(408);
                    self.flush(false).await?;
                    return Err(Close::Linger);
                }
            }
        }
    }

    /// Answers one request whose head is at the start of `rbuf`; returns whether the
    /// connection stays open.
    async fn respond(&mut self, head: h1::Head) -> Result<bool, Close> {
        let head_len = head.len as u64;
        let head_bytes = self.rbuf.split_to(head.len).freeze();
        let keep_alive = head.keep_alive && !self.ctx.stopping.get();
        let framing = head.body;
        let expect_continue = head.expect_continue && framing != BodyFraming::None;
        let mut req = RequestBuilder {
            method: head.method,
            version: head.version,
            secure: self.stream.is_secure(),
            peer: self.peer,
            local: self.local,
            target: head.target,
            authority: head.authority,
            fields: head.fields,
        }
        .build(head_bytes);
        self.fresh = false;
        if framing == BodyFraming::None && self.ctx.config.http1.upgrade_to_http2 {
            if let Some(settings) = h2c_upgrade(&req) {
                self.wbuf.extend_from_slice(
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
                );
                self.handoff = Some(Some(super::h2::Upgrade {
                    request: req,
                    settings,
                }));
                return Ok(true);
            }
        }

        // A body the handler reads streams to it as it arrives: the slow path.
        let ctx = self.ctx;
        let writer = if framing != BodyFraming::None && ctx.router.streams_body(&req) {
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
                self.reject(e).await?;
                return Err(Close::Linger);
            }
        }
        let (answer, route) = ctx.router.handle(&req);
        let resp = match answer {
            Answer::Now(resp) if writer.is_none() && !matches!(resp.body, Body::Stream(_)) => resp,
            answer => {
                let exchange = streaming::Exchange {
                    req,
                    route,
                    writer,
                    framing,
                    keep_alive,
                    expect_continue,
                };
                return self.respond_streaming_boxed(exchange, answer).await;
            }
        };
        let log = route.and_then(|r| r.access_log.as_ref());
        let received_at = log.map(|_| (SystemTime::now(), Instant::now()));
        let counted = crate::metrics::start();
        if expect_continue {
            h1::write_continue(&mut self.wbuf);
        }
        let Response {
            status,
            headers,
            body,
        } = resp;
        let body_len = if req.is_head() { 0 } else { body.len() };
        let total = self
            .send::<true>(&req, status, &headers, body, keep_alive)
            .await?;
        if let Some(started) = counted {
            let body_in = match framing {
                BodyFraming::Length(n) => n,
                _ => 0,
            };
            crate::metrics::request(
                crate::metrics::Proto::Http1,
                status,
                head_len + body_in,
                total,
                started,
            );
        }
        if let (Some(log), Some((at, started))) = (log, received_at) {
            log.borrow_mut().log(&LogRecord {
                req: &req,
                status,
                body_bytes: body_len,
                total_bytes: total,
                received_at: at,
                duration: started.elapsed(),
                resp_headers: &headers,
            });
        }
        self.queued += 1;
        // The handler did not need the body; read past it to reach the next request.
        match framing {
            BodyFraming::None => {}
            BodyFraming::Length(n) => self.discard_body(n).await?,
            BodyFraming::Chunked => self.discard_chunked().await?,
        }
        Ok(keep_alive)
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
        let head_len = h1::write_head(
            &mut self.wbuf,
            &ResponseHead {
                status,
                headers,
                content_length: Some(body.len()),
                keep_alive,
                server_line: &self.ctx.server_line,
                date: DATE,
            },
        ) as u64;
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
        self.ctx.config.http1.send_timeout
    }

    /// Reads into `rbuf` until data arrives or the deadline passes. When `idle` (between
    /// requests), a server stop also ends the wait, and on plain TCP the connection waits
    /// without buffers: they go back to the worker's pool meanwhile.
    async fn read_until(&mut self, deadline: Instant, idle: bool) -> Result<Wait, Close> {
        // One timer per connection, moved rather than re-created: extending a registered
        // timer is a store, not a timer-wheel operation.
        self.timer.as_mut().reset(deadline.into());
        if idle {
            if self.ctx.close_idle.get() {
                return Ok(Wait::Stopping);
            }
            if T::WAITS_WITHOUT_BUFFER && self.wbuf.is_empty() {
                return self.wait_bufferless().await;
            }
        }
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
            if !matches!(waited, Wait::Stopping) || self.stop_closes_idle() {
                return Ok(waited);
            }
        }
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
        false
    }

    async fn wait_bufferless(&mut self) -> Result<Wait, Close> {
        loop {
            self.ctx.buffers.give_read(std::mem::take(&mut self.rbuf));
            self.ctx.buffers.give_write(std::mem::take(&mut self.wbuf));
            // Biased: after a wake-up, readiness is what to check first (and usually alone).
            let waited = tokio::select! {
                biased;
                r = self.stream.readable() => r.map(|()| Wait::Data),
                _ = self.timer.as_mut() => Ok(Wait::TimedOut),
                _ = self.stop.as_mut() => Ok(Wait::Stopping),
            };
            self.rbuf = self.ctx.buffers.read_buffer();
            self.wbuf = self.ctx.buffers.write_buffer();
            match waited? {
                Wait::Data => {}
                Wait::Stopping if !self.stop_closes_idle() => continue,
                other => return Ok(other),
            }
            // Readiness can be stale (a fresh socket, an event already consumed): read once
            // without waiting, and go back to waiting bufferless if nothing is there.
            let read = {
                let fut = self.stream.read_buf(&mut self.rbuf);
                tokio::pin!(fut);
                std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
            };
            match read {
                Poll::Ready(Ok(0)) => return Ok(Wait::Eof),
                Poll::Ready(Ok(_)) => return Ok(Wait::Data),
                Poll::Ready(Err(e)) => return Err(Close::Io(e)),
                Poll::Pending => {}
            }
        }
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

    async fn discard_chunked(&mut self) -> Result<(), Close> {
        let dec = ChunkedDecoder::new(self.ctx.config.limits.request_head);
        self.discard_chunked_rest(dec, 0).await
    }

    /// Reads and drops the rest of a chunked body, `received` data bytes of it already seen.
    async fn discard_chunked_rest(
        &mut self,
        mut dec: ChunkedDecoder,
        mut received: u64,
    ) -> Result<(), Close> {
        loop {
            let r = match dec.decode(&self.rbuf) {
                Ok(r) => r,
                Err(e) => {
                    // The response already went into the buffer; deliver it, then close.
                    self.log_request_error(e.status(), e.reason());
                    self.flush(false).await?;
                    return Err(Close::Linger);
                }
            };
            received += r.data.len() as u64;
            if received > self.ctx.config.limits.request_body {
                self.log_request_error(413, "chunked request body too large");
                self.flush(false).await?;
                return Err(Close::Linger);
            }
            let _ = self.rbuf.split_to(r.consumed);
            if r.done {
                return Ok(());
            }
            if r.consumed == 0 || self.rbuf.is_empty() {
                self.read_body_bytes().await?;
            }
        }
    }

    /// Decodes the chunked body bytes already in `rbuf` without consuming them, reporting
    /// malformed framing. The body is decoded again as it is discarded; keeping no decoder
    /// here keeps the connection's future small.
    fn check_chunked_prefix(&self) -> Result<(), h1::Error> {
        let mut dec = ChunkedDecoder::new(self.ctx.config.limits.request_head);
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
        let deadline = Instant::now() + self.ctx.config.http1.request_io_timeout;
        match self.read_until(deadline, false).await? {
            Wait::Data => Ok(()),
            Wait::Eof | Wait::TimedOut | Wait::Stopping => Err(Close::Quietly),
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
        h1::write_head(
            &mut self.wbuf,
            &ResponseHead {
                status,
                headers: &resp.headers,
                content_length: Some(body.len() as u64),
                keep_alive: false,
                server_line: &self.ctx.server_line,
                date: true,
            },
        );
        self.wbuf.extend_from_slice(&body);
    }

    fn log_request_error(&self, status: u16, reason: &str) {
        if self.ctx.config.emit_request_errors {
            tracing::info!(peer = %self.peer, "rejected request with {status}: {reason}");
        }
    }

    /// Half-closes, then reads and drops input for a short while so the error response is
    /// not destroyed by a reset caused by unread data.
    async fn linger_close(&mut self) {
        let _ = self.stream.shutdown_write();
        transport::drain_input(&mut self.stream).await;
    }
}

/// Whether `buf` is a (possibly partial) HTTP/2 preface; empty is not.
fn is_preface_prefix(buf: &[u8]) -> bool {
    let n = buf.len().min(PREFACE.len());
    n > 0 && buf[..n] == PREFACE[..n]
}

/// Whether the first line of `buf` is complete and names no HTTP version.
fn not_http(buf: &[u8]) -> bool {
    match memchr::memchr(b'\n', buf) {
        Some(end) => !buf[..end].windows(6).any(|w| w == b" HTTP/"),
        None => false,
    }
}

/// The decoded HTTP2-Settings of an HTTP/1.1 request asking `Upgrade: h2c` (RFC 7540
/// section 3.2), or `None` when this is not such a request.
fn h2c_upgrade(req: &Request) -> Option<Vec<u8>> {
    if req.version != crate::http::Version::Http11 {
        return None;
    }
    let upgrade = req.header(b"upgrade")?;
    let wants_h2c = upgrade
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"));
    if !wants_h2c {
        return None;
    }
    let mut settings = req.header_all(b"http2-settings");
    let value = settings.next()?;
    if settings.next().is_some() {
        return None;
    }
    base64url_decode(value.trim_ascii())
}

/// Decodes unpadded (or padded) base64url.
fn base64url_decode(s: &[u8]) -> Option<Vec<u8>> {
    let s = s
        .strip_suffix(b"==")
        .or_else(|| s.strip_suffix(b"="))
        .unwrap_or(s);
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for &c in s {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url() {
        assert_eq!(
            base64url_decode(b"AAMAAABkAAQAoAAAAAIAAAAA").unwrap().len(),
            18
        );
        assert_eq!(base64url_decode(b"aGk").unwrap(), b"hi");
        assert_eq!(base64url_decode(b"aGk=").unwrap(), b"hi");
        assert!(base64url_decode(b"a*").is_none());
    }

    #[test]
    fn preface_prefixes() {
        assert!(is_preface_prefix(b"PRI * HT"));
        assert!(is_preface_prefix(PREFACE));
        assert!(!is_preface_prefix(b""));
        assert!(!is_preface_prefix(b"GET / HTTP/1.1"));
        assert!(not_http(b"INVALID CONNECTION PREFACE\r\n\r\n"));
        assert!(!not_http(b"GET / HTTP/1.1\r\n"));
        assert!(!not_http(b"GET /very-long-target"));
    }
}
