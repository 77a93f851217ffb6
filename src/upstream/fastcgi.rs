//! The FastCGI client: one request per connection at a time, over TCP or a Unix socket, with
//! the worker's idle connections kept for `fastcgi.timeout.keepalive`.
//!
//! A kept connection holds one of the application's workers (PHP-FPM serves a connection at a
//! time, and a connection it has not accepted waits in the listen backlog behind the kept
//! ones). So with keep-alive a worker opens at most `fastcgi.max-connections` to an
//! application (more requests wait for one), and a connection is closed after
//! [`REQUESTS_PER_CONNECTION`], so that connections queued behind kept ones (other spate
//! workers, other servers) get their turn.
//!
//! [`exchange`] sends BEGIN_REQUEST and PARAMS, streams the request body as STDIN records,
//! then reads STDOUT until the CGI head is whole and resolves to it with a body that goes on
//! reading STDOUT as the client's codec pulls it (a slow client slows the application down).
//! STDERR goes to the error log. The connection returns to the pool only after END_REQUEST,
//! with nothing left over, when the application was asked to keep it (`FCGI_KEEP_CONN`).
//!
//! Failures: the application cannot be reached, 503 (h2o's answer); it answers something that
//! is not FastCGI or CGI, 502; it does not answer within `fastcgi.timeout.io`, 504.
//!
//! The body is sent before the answer is read: PHP-FPM and php-cgi read the whole body before
//! they run the script, so they never wait on us while we wait on them.

use super::conn::Conn;
use crate::config::{FastcgiConf, UpstreamAddr};
use crate::http::body::Next;
use crate::http::{BodyError, BodyStream, Frame, RequestBody, Side};
use crate::proto::fastcgi::{self, cgi, Params, Record};
use bytes::{Bytes, BytesMut};
use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Bytes read from the application at a time.
const READ_SIZE: usize = 16 * 1024;

/// A worker with a new connection unanswered for [`BACKLOG_SIGN`] (likely in the
/// application's listen backlog, behind connections this worker keeps) closes the connections
/// it would keep, rather than hold the application's workers while its own requests wait.
const BACKLOG_SIGN: Duration = Duration::from_millis(50);

///
/// Requests a kept connection carries before it is closed: frees the application's worker
/// for whoever waits in its listen backlog, at 1% of a connection per request.
const REQUESTS_PER_CONNECTION: u32 = 100;

/// A FastCGI application as the client needs it.
pub struct FastcgiTarget {
    pub addr: UpstreamAddr,
    pub timeout_io: Duration,
    pub keepalive: Duration,
    pub max_connections: usize,
    pub max_request_buffer: u64,
    pub max_response_head: usize,
    /// Where the log lines say the application is.
    pub name: String,
}

impl FastcgiTarget {
    pub fn new(conf: &FastcgiConf) -> FastcgiTarget {
        let name = match &conf.addr {
            UpstreamAddr::Tcp { host, port } => format!("{host}:{port}"),
            UpstreamAddr::Unix(p) => format!("unix:{}", p.display()),
        };
        FastcgiTarget {
            addr: conf.addr.clone(),
            timeout_io: conf.timeout_io,
            keepalive: conf.keepalive,
            max_connections: conf.max_connections,
            max_request_buffer: conf.max_request_buffer,
            max_response_head: conf.max_response_head,
            name,
        }
    }
}

/// The worker's idle FastCGI connections, newest last. An idle connection holds one of the
/// application's workers (PHP-FPM serves a connection at a time), so expired ones are closed
/// even when no request comes to reuse them.
pub struct FastcgiPool {
    idle: RefCell<Vec<Idle>>,
    /// Per application: the connections (busy ones) a worker may have open beyond the idle.
    slots: RefCell<Vec<(UpstreamAddr, Arc<Semaphore>)>>,
    /// New connections sent a request and not answered yet, and since when (see
    /// [`Unanswered`]). Few: a connection is new only when the pool grows.
    unanswered: RefCell<Vec<(u64, Instant)>>,
    /// Names the next [`Unanswered`].
    next_unanswered: Cell<u64>,
    /// Whether the task that closes expired connections is running.
    sweeping: Cell<bool>,
    me: Weak<FastcgiPool>,
}

struct Idle {
    addr: UpstreamAddr,
    conn: Kept,
    until: Instant,
}

/// A connection and the requests it has carried.
struct Kept {
    conn: Conn,
    served: u32,
}

impl FastcgiPool {
    pub fn new() -> Rc<FastcgiPool> {
        Rc::new_cyclic(|me| FastcgiPool {
            idle: RefCell::new(Vec::new()),
            slots: RefCell::new(Vec::new()),
            unanswered: RefCell::new(Vec::new()),
            next_unanswered: Cell::new(0),
            sweeping: Cell::new(false),
            me: me.clone(),
        })
    }

    /// The newest idle connection to `addr` the application has not closed; expired ones go.
    fn take(&self, addr: &UpstreamAddr) -> Option<Kept> {
        let now = Instant::now();
        let mut idle = self.idle.borrow_mut();
        idle.retain(|i| i.until > now);
        while let Some(at) = idle.iter().rposition(|i| i.addr == *addr) {
            let conn = idle.swap_remove(at).conn;
            // An idle connection has nothing to read: anything (the end) means it is gone.
            let mut probe = BytesMut::with_capacity(1);
            match conn.conn.try_read_buf(&mut probe) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(conn),
                _ => continue,
            }
        }
        None
    }

    fn put(&self, addr: &UpstreamAddr, conn: Kept, keepalive: Duration) {
        self.idle.borrow_mut().push(Idle {
            addr: addr.clone(),
            conn,
            until: Instant::now() + keepalive,
        });
        self.start_sweeping();
    }

    /// Whether a new connection of this worker has waited [`BACKLOG_SIGN`] for its answer.
    fn backlogged(&self) -> bool {
        let unanswered = self.unanswered.borrow();
        if unanswered.is_empty() {
            return false;
        }
        let now = Instant::now();
        unanswered
            .iter()
            .any(|(_, since)| now - *since >= BACKLOG_SIGN)
    }

    /// A busy-connection slot for `target`'s application, waiting while all are taken.
    async fn slot(&self, t: &FastcgiTarget) -> Option<OwnedSemaphorePermit> {
        let sem = {
            let mut slots = self.slots.borrow_mut();
            match slots.iter().find(|(a, _)| *a == t.addr) {
                Some((_, s)) => s.clone(),
                None => {
                    let s = Arc::new(Semaphore::new(t.max_connections));
                    slots.push((t.addr.clone(), s.clone()));
                    s
                }
            }
        };
        if let Ok(p) = sem.clone().try_acquire_owned() {
            return Some(p);
        }
        sem.acquire_owned().await.ok()
    }

    /// Closes expired connections even when no request comes.
    fn start_sweeping(&self) {
        super::pool::start_sweeping(&self.sweeping, &self.me, FastcgiPool::sweep);
    }

    /// Drops expired connections; the next expiry, or `None` (sweeping stops) when none is
    /// idle.
    fn sweep(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut idle = self.idle.borrow_mut();
        idle.retain(|i| i.until > now);
        let next = idle.iter().map(|i| i.until).min();
        if next.is_none() {
            self.sweeping.set(false);
        }
        next
    }

    /// Idle connections kept (the tests).
    pub fn idle_count(&self) -> usize {
        self.idle.borrow().len()
    }
}

/// Why an exchange failed before the answer's head.
#[derive(Debug)]
pub struct FastcgiError {
    /// What the client gets: 503 (unreachable), 502 (malformed), 504 (timeout), 413 or 400.
    pub status: u16,
    pub side: Side,
    pub reason: String,
}

impl FastcgiError {
    fn new(status: u16, side: Side, reason: impl Into<String>) -> FastcgiError {
        FastcgiError {
            status,
            side,
            reason: reason.into(),
        }
    }

    fn io(e: io::Error, what: &str) -> FastcgiError {
        if e.kind() == io::ErrorKind::TimedOut {
            return FastcgiError::new(504, Side::Upstream, format!("{what}: timed out"));
        }
        FastcgiError::new(502, Side::Upstream, format!("{what}: {e}"))
    }
}

/// The answer's head, and its body still to read.
pub struct FastcgiAnswer {
    pub head: cgi::CgiHead,
    pub body: FastcgiStream,
}

/// Sends one request: `params` without CONTENT_LENGTH (added here from the body), then the
/// body, and reads the answer's head.
pub async fn exchange(
    pool: Rc<FastcgiPool>,
    target: Rc<FastcgiTarget>,
    mut params: Params,
    body: Option<RequestBody>,
) -> Result<FastcgiAnswer, FastcgiError> {
    let t = &*target;
    // A body of unknown length is read first: CONTENT_LENGTH must come before it.
    let (body, buffered) = match body {
        Some(b) if b.content_length().is_none() => (None, Some(buffer_body(b, t).await?)),
        b => (b, None),
    };
    let length = match (&body, &buffered) {
        (Some(b), _) => b.content_length(),
        (None, Some(data)) => Some(data.len() as u64),
        (None, None) => None,
    };
    if let Some(n) = length {
        params.push(b"CONTENT_LENGTH", n.to_string().as_bytes());
    }
    let keep = !t.keepalive.is_zero();
    let permit = match keep {
        true => pool.slot(t).await,
        false => None,
    };
    let mut out = BytesMut::with_capacity(params.as_bytes().len() + 64);
    fastcgi::begin_request(&mut out, keep);
    fastcgi::stream_records(&mut out, fastcgi::PARAMS, params.as_bytes());
    fastcgi::end_stream(&mut out, fastcgi::PARAMS);
    if let Some(data) = &buffered {
        fastcgi::stream_records(&mut out, fastcgi::STDIN, data);
    }
    let Some(mut body) = body else {
        fastcgi::end_stream(&mut out, fastcgi::STDIN);
        // The whole request is in `out`: one a kept connection lost (the application closed
        // it as we took it) is sent again on a new one.
        let mut permit = permit;
        if let Some(kept) = keep.then(|| pool.take(&t.addr)).flatten() {
            match send(kept, &out, &pool, &target, permit).await {
                Sent::Answer(answer) => return answer,
                // The slot went with the lost connection.
                Sent::Lost => permit = pool.slot(t).await,
            }
        }
        let kept = Kept::new(connect(t).await?);
        return match send(kept, &out, &pool, &target, permit).await {
            Sent::Answer(answer) => answer,
            Sent::Lost => Err(FastcgiError::new(
                502,
                Side::Upstream,
                "the application closed the connection without answering",
            )),
        };
    };
    let mut kept = match keep.then(|| pool.take(&t.addr)).flatten() {
        Some(k) => k,
        None => Kept::new(connect(t).await?),
    };
    send_body(&mut kept.conn, &mut body, &mut out, t).await?;
    fastcgi::end_stream(&mut out, fastcgi::STDIN);
    write(&mut kept.conn, &out, t).await?;
    read_head(kept, pool, target, permit)
        .await
        .map_err(|e| e.error)
}

/// Counts a new connection in [`FastcgiPool::unanswered`] until its first record (or its end).
struct Unanswered(Rc<FastcgiPool>, u64);

impl Unanswered {
    fn new(pool: &Rc<FastcgiPool>) -> Unanswered {
        let id = pool.next_unanswered.get();
        pool.next_unanswered.set(id + 1);
        pool.unanswered.borrow_mut().push((id, Instant::now()));
        Unanswered(pool.clone(), id)
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.0
            .unanswered
            .borrow_mut()
            .retain(|(id, _)| *id != self.1);
    }
}

/// What sending a whole request on a connection came to.
// Returned once and matched at once: boxing the answer would cost an allocation a request.
#[allow(clippy::large_enum_variant)]
enum Sent {
    Answer(Result<FastcgiAnswer, FastcgiError>),
    /// A kept connection was closed before anything came back: send again on a new one.
    Lost,
}

async fn send(
    mut kept: Kept,
    out: &[u8],
    pool: &Rc<FastcgiPool>,
    target: &Rc<FastcgiTarget>,
    permit: Option<OwnedSemaphorePermit>,
) -> Sent {
    let reused = kept.served > 0;
    if let Err(e) = write(&mut kept.conn, out, target).await {
        return match reused && e.status != 504 {
            true => Sent::Lost,
            false => Sent::Answer(Err(e)),
        };
    }
    match read_head(kept, pool.clone(), target.clone(), permit).await {
        Err(e) if reused && e.untouched => Sent::Lost,
        r => Sent::Answer(r.map_err(|e| e.error)),
    }
}

impl Kept {
    fn new(conn: Conn) -> Kept {
        Kept { conn, served: 0 }
    }
}

/// A failure before the answer's head, and whether nothing at all came back.
struct HeadError {
    error: FastcgiError,
    /// The connection ended (not timed out) before any record: a kept connection the
    /// application had closed.
    untouched: bool,
}

async fn connect(t: &FastcgiTarget) -> Result<Conn, FastcgiError> {
    match Conn::connect(&t.addr, None, None, t.timeout_io).await {
        Ok(c) => Ok(c),
        Err(e) => Err(FastcgiError::new(
            503,
            Side::Upstream,
            format!("cannot connect to {}: {e}", t.name),
        )),
    }
}

async fn write(conn: &mut Conn, data: &[u8], t: &FastcgiTarget) -> Result<(), FastcgiError> {
    match tokio::time::timeout(t.timeout_io, conn.write_all(data)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(FastcgiError::io(e, "sending the request")),
        Err(_) => Err(FastcgiError::io(
            io::ErrorKind::TimedOut.into(),
            "sending the request",
        )),
    }
}

/// The next piece of the client's body, or `None` at its end.
async fn next_piece(body: &mut RequestBody) -> Result<Option<Bytes>, FastcgiError> {
    loop {
        match poll_fn(|cx| body.poll_frame(cx)).await {
            Some(Ok(Frame::Data(d))) => return Ok(Some(d)),
            // CGI has no trailers.
            Some(Ok(Frame::Trailers(_))) => continue,
            None => return Ok(None),
            Some(Err(e)) => {
                let status = if e.side == Side::Downstream { 400 } else { 500 };
                return Err(FastcgiError::new(
                    status,
                    e.side,
                    format!("request body: {}", e.reason),
                ));
            }
        }
    }
}

/// Streams the body as STDIN records behind what `out` holds; `out` keeps the tail.
async fn send_body(
    conn: &mut Conn,
    body: &mut RequestBody,
    out: &mut BytesMut,
    t: &FastcgiTarget,
) -> Result<(), FastcgiError> {
    while let Some(piece) = next_piece(body).await? {
        fastcgi::stream_records(out, fastcgi::STDIN, &piece);
        if out.len() >= 64 * 1024 {
            write(conn, out, t).await?;
            out.clear();
        }
    }
    Ok(())
}

async fn buffer_body(mut body: RequestBody, t: &FastcgiTarget) -> Result<BytesMut, FastcgiError> {
    let mut data = BytesMut::new();
    while let Some(piece) = next_piece(&mut body).await? {
        if (data.len() + piece.len()) as u64 > t.max_request_buffer {
            return Err(FastcgiError::new(
                413,
                Side::Downstream,
                "request body of unknown length over fastcgi.max-request-buffer",
            ));
        }
        data.extend_from_slice(&piece);
    }
    Ok(data)
}

/// Reads records until STDOUT holds the whole CGI head.
async fn read_head(
    conn: Kept,
    pool: Rc<FastcgiPool>,
    target: Rc<FastcgiTarget>,
    permit: Option<OwnedSemaphorePermit>,
) -> Result<FastcgiAnswer, HeadError> {
    let fail = |error, untouched| HeadError { error, untouched };
    let mut waiting = (conn.served == 0).then(|| Unanswered::new(&pool));
    let mut body = FastcgiBody {
        conn: Some(conn),
        permit,
        buf: BytesMut::with_capacity(READ_SIZE),
        timer: Box::pin(tokio::time::sleep(target.timeout_io)),
        armed: false,
        pool,
        target,
        ended: false,
    };
    let mut head = BytesMut::new();
    let mut untouched = true;
    loop {
        let record = poll_fn(|cx| body.poll_record(cx)).await;
        let was_untouched = std::mem::replace(&mut untouched, false);
        drop(waiting.take());
        match record {
            Ok(Some(Record::Stdout(d))) => {
                head.extend_from_slice(&d);
                match cgi::parse(&head) {
                    Ok(Some(h)) => {
                        let _ = head.split_to(h.len);
                        // What came after the head is the body's first piece.
                        let first = head.freeze();
                        return Ok(FastcgiAnswer {
                            head: h,
                            body: body.with_first(first),
                        });
                    }
                    Ok(None) if head.len() > body.target.max_response_head => {
                        return Err(fail(
                            FastcgiError::new(
                                502,
                                Side::Upstream,
                                "CGI response head over fastcgi.max-response-head-size",
                            ),
                            false,
                        ));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(fail(
                            FastcgiError::new(502, Side::Upstream, e.to_string()),
                            false,
                        ))
                    }
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(fail(
                    FastcgiError::new(
                        502,
                        Side::Upstream,
                        "the application ended the request before the end of the CGI head",
                    ),
                    false,
                ))
            }
            Err(e) => {
                let status = e.status();
                let lost = was_untouched && status != 504 && body.buf.is_empty();
                return Err(fail(
                    FastcgiError::new(status, Side::Upstream, e.reason),
                    lost,
                ));
            }
        }
    }
}

/// The answer's body: STDOUT records as the client's codec pulls them.
pub struct FastcgiBody {
    conn: Option<Kept>,
    /// The worker's slot for this connection while it is busy (with keep-alive).
    permit: Option<OwnedSemaphorePermit>,
    buf: BytesMut,
    /// `fastcgi.timeout.io` while waiting on the application (not while the client is slow).
    timer: Pin<Box<Sleep>>,
    /// The timer runs: nothing came since the wait began.
    armed: bool,
    pool: Rc<FastcgiPool>,
    target: Rc<FastcgiTarget>,
    ended: bool,
}

/// The body with the STDOUT bytes that came with the head.
pub struct FastcgiStream {
    first: Bytes,
    rest: FastcgiBody,
}

impl FastcgiBody {
    fn with_first(self, first: Bytes) -> FastcgiStream {
        FastcgiStream { first, rest: self }
    }

    /// The next record for this request: STDERR is logged here, `None` is END_REQUEST.
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Record>, BodyError>> {
        if self.ended {
            return Poll::Ready(Ok(None));
        }
        loop {
            match fastcgi::next_record(&mut self.buf) {
                Ok(Some(Record::Stderr(msg))) => {
                    log_stderr(&self.target.name, &msg);
                    continue;
                }
                Ok(Some(Record::End { .. })) => {
                    self.ended = true;
                    self.release();
                    return Poll::Ready(Ok(None));
                }
                Ok(Some(Record::Other)) => continue,
                Ok(Some(r)) => return Poll::Ready(Ok(Some(r))),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(upstream(format!("not FastCGI: {e}")))),
            }
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(Err(upstream("connection gone")));
            };
            match conn.conn.poll_read_buf(cx, &mut self.buf, READ_SIZE) {
                Poll::Ready(Ok(0)) => {
                    self.conn = None;
                    return Poll::Ready(Err(upstream(
                        "the application closed the connection before END_REQUEST",
                    )));
                }
                Poll::Ready(Ok(_)) => self.armed = false,
                Poll::Ready(Err(e)) => {
                    self.conn = None;
                    return Poll::Ready(Err(upstream(format!("reading: {e}"))));
                }
                Poll::Pending => {
                    if !self.armed {
                        self.armed = true;
                        let at = Instant::now() + self.target.timeout_io;
                        self.timer.as_mut().reset(at);
                    }
                    if self.timer.as_mut().poll(cx).is_ready() {
                        self.conn = None;
                        return Poll::Ready(Err(BodyError::new(
                            Side::Upstream,
                            "timed out (fastcgi.timeout.io)",
                        )));
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// After END_REQUEST: a kept connection with nothing more to read goes back to the pool.
    fn release(&mut self) {
        let Some(mut kept) = self.conn.take() else {
            return;
        };
        kept.served += 1;
        let keep = !self.target.keepalive.is_zero() && kept.served < REQUESTS_PER_CONNECTION;
        if keep && self.buf.is_empty() && !self.pool.backlogged() {
            self.pool
                .put(&self.target.addr, kept, self.target.keepalive);
        }
        // After the connection is idle, for a request waiting on the slot to find it.
        self.permit = None;
    }
}

fn upstream(reason: impl Into<String>) -> BodyError {
    BodyError::new(Side::Upstream, reason)
}

trait Status {
    fn status(&self) -> u16;
}

impl Status for BodyError {
    /// A timeout is 504, anything else the application did wrong 502.
    fn status(&self) -> u16 {
        if self.reason.starts_with("timed out") {
            504
        } else {
            502
        }
    }
}

impl BodyStream for FastcgiStream {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        if !self.first.is_empty() {
            return Poll::Ready(Some(Ok(Frame::Data(std::mem::take(&mut self.first)))));
        }
        loop {
            return match self.rest.poll_record(cx) {
                Poll::Ready(Ok(Some(Record::Stdout(d)))) if d.is_empty() => continue,
                Poll::Ready(Ok(Some(Record::Stdout(d)))) => Poll::Ready(Some(Ok(Frame::Data(d)))),
                Poll::Ready(Ok(Some(_))) => continue,
                Poll::Ready(Ok(None)) => Poll::Ready(None),
                Poll::Ready(Err(e)) => {
                    if crate::log::emit_request_errors() {
                        tracing::warn!(fastcgi = %self.rest.target.name, "fastcgi: response body: {}", e.reason);
                    }
                    Poll::Ready(Some(Err(e)))
                }
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

/// The application's STDERR: one log line per record (PHP's warnings and notices).
fn log_stderr(name: &str, msg: &[u8]) {
    let text = String::from_utf8_lossy(msg);
    let text = text.trim_end();
    if !text.is_empty() {
        tracing::warn!(fastcgi = %name, "fastcgi stderr: {text}");
    }
}

/// Logs why an exchange failed, once (a warning when the application is to blame).
pub fn log_failure(target: &FastcgiTarget, e: &FastcgiError) {
    if !crate::log::emit_request_errors() {
        return;
    }
    if e.side == Side::Upstream {
        tracing::warn!(fastcgi = %target.name, "fastcgi: {}", e.reason);
    } else {
        tracing::info!(fastcgi = %target.name, "fastcgi: {}", e.reason);
    }
}
