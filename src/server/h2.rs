//! The HTTP/2 connection driver: reads bytes into the sans-IO [`Connection`], answers each
//! request through the router (no task per stream), and writes what the connection produced
//! with one write per loop turn. An answer that is ready now is given at once (the inline
//! path); one that comes later, and streamed response bodies, are kept in [`StreamWork`] and
//! polled by this same task when their wakers fire. See `src/proto/h2/LIFECYCLE.md`.

mod ends;
mod work;

use super::buffers::BufferPool;
use super::context::WorkerCtx;
use super::request_start::{self, Routed};
use super::routing::Routing;
use super::transport::Transport;
use crate::http::Request;
use crate::metrics::Mark;
use crate::proto::h2::frame::Reason;
use crate::proto::h2::{Closed, Connection, Parked};
use bytes::BytesMut;
use ends::StreamEnds;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncReadExt;
use tokio::sync::futures::Notified;
use work::{LogStart, StreamWork};

/// The read buffer starts this small (most turns of a busy connection read a few hundred
/// bytes of HEADERS) and grows while reads fill it, up to `READ_MAX`.
const READ_MIN: usize = 4 * 1024;
const READ_MAX: usize = 64 * 1024;
/// After a GOAWAY for an error, keep reading (and dropping) this long so the peer sees the
/// GOAWAY rather than a reset caused by unread data.
const LINGER: Duration = Duration::from_secs(1);

/// An HTTP/1.1 request upgraded with `Upgrade: h2c`: it becomes stream 1.
pub(crate) struct Upgrade {
    pub request: Request,
    /// The decoded `HTTP2-Settings` payload.
    pub settings: Vec<u8>,
}

/// How an HTTP/2 connection begins in its task.
pub(crate) enum Start {
    /// With the client preface (prior knowledge, or TLS with ALPN `h2`).
    New,
    /// With an HTTP/1.1 request upgraded with `Upgrade: h2c`.
    Upgrade(Box<Upgrade>),
    /// Where it left its previous task: quiet, parked by the worker (`server/connection/park.rs`).
    Resumed(Box<Asleep>),
}

/// A quiet connection in its compact form ([`Parked`]), out of any task: the worker keeps
/// it with its socket until the client sends again, its deadline passes or the server stops,
/// and then gives it a task again ([`Start::Resumed`]). Only sockets that park
/// (`Transport::PARKS`) leave their task so; the others wait in it (`wait_parked`).
pub(crate) struct Asleep {
    conn: Parked,
    /// The connection's next deadline (its idle timeout).
    deadline: Option<Instant>,
    /// Its place in the open-connection count, kept while it sleeps.
    open: Option<crate::metrics::OpenConnection>,
}

impl Asleep {
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}

/// Serves one HTTP/2 connection until it closes, or until it is quiet and its socket can be
/// parked by the worker: then it returns the connection [`Asleep`] and the caller parks the
/// socket. `handed` holds bytes already read (the preface, when handed over by the HTTP/1
/// driver).
pub(crate) fn serve<'s, 'a: 's, T: Transport + 's>(
    mut stream: T,
    (peer, local): (SocketAddr, SocketAddr),
    ctx: &'a WorkerCtx,
    handed: BytesMut,
    start: Start,
    mut waits: Waits<'s, 'a>,
) -> impl Future<Output = Option<Box<Asleep>>> + use<'s, 'a, T> {
    let mut rbuf = if T::WAITS_WITHOUT_BUFFER {
        // The HTTP/1 driver's pooled buffer: it goes back to the pool while idle.
        handed
    } else {
        // The HTTP/1 driver's buffer is large; keep only the bytes it read.
        let mut rbuf = BytesMut::with_capacity(READ_MIN.max(handed.len()));
        rbuf.extend_from_slice(&handed);
        rbuf
    };
    let now = Instant::now();
    let cfg = || (ctx.routing().h2).for_connection(stream.is_secure(), local.port());
    // Boxed: the connection's state is large and lives as long as the connection.
    let state = match start {
        Start::New => Some(State::Awake(Box::new(Connection::new(
            cfg(),
            peer,
            local,
            now,
        )))),
        Start::Upgrade(u) => {
            match Connection::upgraded(cfg(), peer, local, now, &u.settings, u.request) {
                Ok(conn) => Some(State::Awake(Box::new(conn))),
                Err(r) => {
                    tracing::debug!(peer = %peer, "bad HTTP2-Settings in upgrade: {r:?}");
                    None
                }
            }
        }
        Start::Resumed(asleep) => {
            // It waits without a buffer, as it did while parked.
            if rbuf.is_empty() {
                ctx.buffers.give_read(std::mem::take(&mut rbuf));
            }
            Some(State::Asleep(asleep))
        }
    };
    // The worker parks the socket of a quiet connection, which then leaves this task.
    let leaves_task = T::PARKS && ctx.parks;
    // A block that owns what it needs holds one copy of it (an async fn would keep its
    // arguments besides): this future lives as long as the connection. It waits in its
    // smallest state while the connection is parked; the busy states are in `run`'s boxed
    // future, allocated when the connection wakes.
    async move {
        let mut state = state?;
        let mut open = match state {
            State::Awake(_) => Some(crate::metrics::OpenConnection::new(
                crate::metrics::Proto::Http2,
            )),
            State::Asleep(_) => None,
        };
        let (r, mut conn) = loop {
            let mut conn = match state {
                State::Awake(conn) => conn,
                State::Asleep(asleep) => {
                    // A resumed connection's stop signal began after the server's stop.
                    let woke = if ctx.stopping.get() {
                        Ok(Woke::Turn)
                    } else {
                        let deadline = asleep.deadline;
                        wait_parked(&mut stream, ctx, &mut rbuf, &mut waits, deadline).await
                    };
                    let now = Instant::now();
                    let Asleep { conn, open: o, .. } = *asleep;
                    open = o;
                    let mut conn = Box::new(Connection::unpark(conn, peer, local, now));
                    match woke {
                        Ok(Woke::Turn) => {}
                        Ok(Woke::Timer) => conn.handle_timeout(now),
                        Ok(Woke::Closed) => break (Ok(()), conn),
                        Err(e) => break (Err(e), conn),
                    }
                    conn
                }
            };
            let r = Box::pin(run(&mut stream, &mut conn, ctx, &mut rbuf, &mut waits)).await;
            count_stats(&mut conn);
            if !matches!(r, Ok(Pause::Quiet)) {
                break (r.map(|_| ()), conn);
            }
            // Quiet: wait for the client in the connection's compact form, here or parked
            // by the worker.
            let asleep = park(conn, open.take());
            if leaves_task {
                return Some(asleep);
            }
            state = State::Asleep(asleep);
        };
        count_stats(&mut conn);
        ctx.buffers.give_read(std::mem::take(&mut rbuf));
        if let Err(e) = r {
            tracing::debug!(peer = %conn.peer(), "HTTP/2 connection closed: {e}");
            return None;
        }
        match conn.closed() {
            Some(Closed::GoAway(r, why)) if r != Reason::NO_ERROR => {
                if crate::log::emit_request_errors() {
                    tracing::info!(peer = %conn.peer(), "closed HTTP/2 connection with {r:?}: {why}");
                }
                // Boxed, as a rare state, to keep the connection's future small.
                Box::pin(linger_close(&mut stream)).await;
            }
            _ => {
                let _ = stream.shutdown_write();
            }
        }
        drop(open);
        None
    }
}

/// A connection in its task: serving turns, or waiting quiet in its compact form.
enum State {
    Awake(Box<Connection>),
    Asleep(Box<Asleep>),
}

/// What a connection waits on besides its socket, kept for its whole life (re-creating them
/// each turn would cost a timer registration per turn and their room in the future): the
/// timer, and the server's stop signal, registered (enabled) before the connection started.
pub(crate) struct Waits<'s, 'a> {
    pub timer: Pin<&'s mut tokio::time::Sleep>,
    pub stop: Pin<&'s mut Notified<'a>>,
}

/// Serves turns until the connection closes or goes quiet. What is still open when it
/// closes ends here: pending answers and bodies are dropped (cancelling their upstream
/// work), request bodies aborted, and logged streams logged incomplete. The streams' work
/// lives in this future, not in the connection's: a parked connection holds none.
async fn run<'a, T: Transport>(
    stream: &mut T,
    conn: &mut Connection,
    ctx: &'a WorkerCtx,
    rbuf: &mut BytesMut,
    waits: &mut Waits<'_, 'a>,
) -> std::io::Result<Pause> {
    let mut work = StreamWork::default();
    let mut ends = StreamEnds::new(crate::metrics::enabled(), stream.tls_facts());
    let r = turns(stream, conn, ctx, rbuf, &mut work, &mut ends, waits).await;
    if !matches!(r, Ok(Pause::Quiet)) {
        drop(work);
        conn.close_streams();
        ends.write_ended(conn);
    }
    r
}

#[allow(clippy::too_many_arguments)]
async fn turns<'a, T: Transport>(
    stream: &mut T,
    conn: &mut Connection,
    ctx: &'a WorkerCtx,
    rbuf: &mut BytesMut,
    work: &mut StreamWork,
    ends: &mut StreamEnds,
    waits: &mut Waits<'_, 'a>,
) -> std::io::Result<Pause> {
    let send_timeout = ctx.routing().config.http1.send_timeout;
    let mut shutdown_deadline: Option<Instant> = None;
    let mut sizer = ReadSizer::new(rbuf.capacity());
    // The routing the connection's memo of a repeated answer was made by (a parked
    // connection's memo is dropped: each `run` begins without one).
    let mut epoch = ctx.epoch();
    loop {
        let now = Instant::now();
        // The start of this turn's requests, for the metrics: one clock reading per turn.
        let mark = crate::metrics::start();
        if let Some(m) = mark {
            conn.set_turn_mark(m.to_bits());
        }
        // The Date and coarse clock of this turn's responses: the connection reads no clock.
        let coarse_ns = crate::http::clock::coarse_ns();
        crate::http::clock::with_now(|d| conn.set_now(d, coarse_ns));
        if conn.needs_output() {
            conn.lend_output(ctx.buffers.output_buffer().unwrap_or_default());
        }
        if conn.needs_turn_buffers() {
            if let Some(t) = ctx.buffers.turn_buffers() {
                conn.lend_turn_buffers(t);
            }
        }
        if epoch != ctx.epoch() {
            // A reload in place: this turn's requests route by the new routing.
            epoch = ctx.epoch();
            conn.forget_answers();
        }
        // Early data (`tls_early.rs`): false but on a connection whose handshake is not done.
        let early = stream.early();
        // Decode and answer a batch of requests at a time; their small responses finish (and
        // free their streams) before the next batch is decoded, all in one write. They
        // route by the routing borrowed for this batch (never across an await).
        {
            let routing = ctx.routing();
            let streams_body = |req: &Request| routing.router.streams_body(req);
            loop {
                if !rbuf.is_empty() {
                    let mut runs = routing.h2.runs.borrow_mut();
                    conn.recv_with(rbuf, now, &mut runs, &streams_body);
                }
                while answer(conn, &routing, work, ends, now, mark, early) {}
                if !conn.recv_paused() || conn.closed().is_some() {
                    break;
                }
                conn.fill(now);
                if conn.output_full() {
                    break;
                }
            }
        }
        if !work.is_empty() {
            // New answers get their first poll; woken ones, their next.
            std::future::poll_fn(|cx| {
                work.drive(cx, conn, ends, now);
                Poll::Ready(())
            })
            .await;
        }
        if ctx.stopping.get() && shutdown_deadline.is_none() {
            conn.shutdown();
            let grace = ctx.routing().config.http2.graceful_shutdown_timeout;
            // Zero means no limit of its own; `shutdown-timeout` still ends the worker.
            let grace = if grace.is_zero() {
                Duration::from_secs(365 * 24 * 3600)
            } else {
                grace
            };
            shutdown_deadline = Some(now + grace);
        }
        // One write per turn; large bodies take several, yielding between them. The server's
        // preface waits for the client's and goes out with the answers to its first frames:
        // one write and one wake-up of the client less per connection.
        loop {
            conn.fill(Instant::now());
            ends.write_ended(conn);
            if conn.output_is_empty() || conn.awaits_preface() {
                break;
            }
            stream
                .write_parts(conn.output_parts(), send_timeout)
                .await?;
            conn.clear_output();
            if !conn.wants_fill() || conn.closed().is_some() {
                break;
            }
            tokio::task::yield_now().await;
        }
        if conn.closed().is_some() {
            return Ok(Pause::Closed);
        }
        if work.waits_for_handshake() {
            // Early requests not safe to answer before the client's Finished, or answered
            // 425 by a backend: routed again now that the answers that could go out did.
            Box::pin(stream.complete_handshake()).await?;
            answer_after_handshake(conn, &ctx.routing(), work, ends, Instant::now(), mark);
            continue;
        }
        if conn.recv_paused() {
            // Complete frames are still buffered: no need to wait for the socket.
            continue;
        }

        count_stats(conn);
        // A waiting connection holds no output buffer, nor its turn buffers unless it is busy:
        // they go back to the worker.
        let released = conn.release_idle_buffers();
        if let Some(out) = released.output {
            ctx.buffers.give_output(out);
        }
        if let Some(t) = released.turn {
            ctx.buffers.give_turn(t);
        }
        // An idle connection waits without a read buffer where the transport allows it.
        let bufferless = T::WAITS_WITHOUT_BUFFER && rbuf.is_empty();
        if bufferless {
            ctx.buffers.give_read(std::mem::take(rbuf));
        } else {
            sizer.prepare(rbuf);
        }
        let deadline = match (conn.poll_timeout(), shutdown_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The stop signal was registered before the flag is read (see `Waits`).
        let watch_stop = shutdown_deadline.is_none();
        if watch_stop && ctx.stopping.get() {
            continue;
        }
        if T::WAITS_WITHOUT_BUFFER
            && watch_stop
            && rbuf.is_empty()
            && work.is_empty()
            && ends.is_empty()
            && conn.parkable()
        {
            return Ok(Pause::Quiet);
        }
        if let Some(d) = deadline {
            // Moved only when due sooner (or spent): a busy connection's next deadline is
            // always later (its idle timeout, its quiet trim), and an earlier one only fires
            // the timer early, after which this turn's end arms it afresh. Moving it costs
            // about 100 instructions, a tenth of a one-request turn's own work.
            let d = tokio::time::Instant::from(d);
            if d < waits.timer.deadline() || waits.timer.is_elapsed() {
                waits.timer.as_mut().reset(d);
            }
        }
        tokio::select! {
            r = read_some(stream, rbuf, &ctx.buffers, bufferless) => {
                let (n, spare) = r?;
                if n == 0 {
                    return Ok(Pause::Closed);
                }
                crate::metrics::received(n as u64);
                if bufferless {
                    sizer.alloc = rbuf.capacity();
                }
                sizer.record(n, spare);
            }
            _ = waits.timer.as_mut(), if deadline.is_some() => {
                let now = Instant::now();
                if shutdown_deadline.is_some_and(|d| now >= d) {
                    conn.abort(Reason::NO_ERROR, "graceful shutdown timeout");
                } else {
                    conn.handle_timeout(now);
                }
            }
            _ = waits.stop.as_mut(), if watch_stop => {}
            // A pending answer or a body was woken (a backend socket, a timer), or a body the
            // client has window for can be pulled.
            _ = std::future::poll_fn(|_| {
                if work.ready(conn) { Poll::Ready(()) } else { Poll::Pending }
            }), if !work.is_empty() => {}
        }
    }
}

/// `conn` in its compact form, with its deadline; its own allocation is freed before the
/// wait begins.
/// Forwards what the connection counted to the metrics.
fn count_stats(conn: &mut Connection) {
    let Some(stats) = conn.take_stats() else {
        return;
    };
    use crate::metrics::{h2_goaway, h2_reset, Direction};
    for (direction, counts) in [
        (Direction::Sent, &stats.resets_sent),
        (Direction::Received, &stats.resets_received),
    ] {
        for (code, &n) in counts.iter().enumerate() {
            for _ in 0..n {
                h2_reset(direction, code as u32);
            }
        }
    }
    for g in &stats.goaways {
        let direction = match g.sent {
            true => Direction::Sent,
            false => Direction::Received,
        };
        h2_goaway(direction, g.code, g.cause);
    }
}

fn park(conn: Box<Connection>, open: Option<crate::metrics::OpenConnection>) -> Box<Asleep> {
    let deadline = conn.poll_timeout();
    Box::new(Asleep {
        conn: (*conn).park(),
        deadline,
        open,
    })
}

/// Why [`run`] returned.
enum Pause {
    /// The connection is over (closed by either side).
    Closed,
    /// The connection is [`Connection::parkable`]: quiet, with nothing in flight.
    Quiet,
}

/// What ended a parked wait.
enum Woke {
    /// Bytes arrived (in the read buffer), or the server began to stop: run a turn.
    Turn,
    /// The connection's deadline passed.
    Timer,
    /// The client closed the connection.
    Closed,
}

/// Waits for the client while the connection is parked: until bytes arrive (read into a
/// buffer from the worker's pool), `deadline` passes, or the server begins to stop (which the
/// next turn of [`run`] sees). It polls the socket's readiness instead of awaiting a read,
/// so the connection's future holds next to nothing for this wait.
async fn wait_parked<'a, T: Transport>(
    stream: &mut T,
    ctx: &'a WorkerCtx,
    rbuf: &mut BytesMut,
    waits: &mut Waits<'_, 'a>,
    deadline: Option<Instant>,
) -> std::io::Result<Woke> {
    if let Some(d) = deadline {
        waits.timer.as_mut().reset(d.into());
    }
    std::future::poll_fn(|cx| {
        while let Poll::Ready(r) = stream.poll_readable(cx) {
            r?;
            if let Some(r) = read_pooled(stream, rbuf, &ctx.buffers, cx) {
                let (n, _) = r?;
                if n == 0 {
                    return Poll::Ready(Ok(Woke::Closed));
                }
                crate::metrics::received(n as u64);
                return Poll::Ready(Ok(Woke::Turn));
            }
        }
        if deadline.is_some() && waits.timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(Woke::Timer));
        }
        if waits.stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(Woke::Turn));
        }
        Poll::Pending
    })
    .await
}

/// Reads into `rbuf`; returns the bytes read and the free space they were read into.
/// `bufferless`: first waits for the socket to be readable, then reads into a buffer from
/// the worker's pool (given back if the readiness was stale).
async fn read_some<T: Transport>(
    stream: &mut T,
    rbuf: &mut BytesMut,
    pool: &BufferPool,
    bufferless: bool,
) -> std::io::Result<(usize, usize)> {
    if !bufferless {
        let spare = rbuf.capacity() - rbuf.len();
        return Ok((stream.read_buf(rbuf).await?, spare));
    }
    std::future::poll_fn(|cx| loop {
        if let Err(e) = std::task::ready!(stream.poll_readable(cx)) {
            return Poll::Ready(Err(e));
        }
        if let Some(r) = read_pooled(stream, rbuf, pool, cx) {
            return Poll::Ready(r);
        }
    })
    .await
}

/// Once the socket is readable: one read into a buffer from `pool`, which goes back if the
/// readiness was stale (`None`; the read registered `cx` for the next). Returns the bytes
/// read and the buffer's free space.
fn read_pooled<T: Transport>(
    stream: &mut T,
    rbuf: &mut BytesMut,
    pool: &BufferPool,
    cx: &mut std::task::Context<'_>,
) -> Option<std::io::Result<(usize, usize)>> {
    *rbuf = pool.read_buffer();
    let spare = rbuf.capacity();
    // A read future keeps nothing between polls: made and polled once, here.
    let read = {
        let fut = stream.read_buf(rbuf);
        tokio::pin!(fut);
        fut.poll(cx)
    };
    match read {
        Poll::Ready(r) => Some(r.map(|n| (n, spare))),
        Poll::Pending => {
            pool.give_read(std::mem::take(rbuf));
            None
        }
    }
}

/// Sizes the read buffer to the traffic: it doubles while reads fill it, halves while they
/// use a small part of it, and a grown buffer is given back once it is empty again, so an
/// idle or lightly used connection holds `READ_MIN` bytes.
struct ReadSizer {
    /// The free space to offer the next read.
    want: usize,
    /// The buffer's allocation, as far as we know it.
    alloc: usize,
}

impl ReadSizer {
    fn new(alloc: usize) -> ReadSizer {
        ReadSizer {
            want: READ_MIN,
            alloc,
        }
    }

    /// Makes room for the next read.
    fn prepare(&mut self, rbuf: &mut BytesMut) {
        if rbuf.is_empty() && self.alloc > 2 * self.want {
            *rbuf = BytesMut::with_capacity(self.want);
            self.alloc = self.want;
        } else if rbuf.capacity() - rbuf.len() < self.want / 2 {
            // Reclaims consumed space at the front when it can, else reallocates.
            rbuf.reserve(self.want);
            self.alloc = self.alloc.max(rbuf.capacity());
        }
    }

    /// A read returned `n` bytes into `spare` free bytes.
    fn record(&mut self, n: usize, spare: usize) {
        if n >= spare {
            self.want = (self.want * 2).min(READ_MAX);
        } else if n < self.want / 4 {
            self.want = (self.want / 2).max(READ_MIN);
        }
    }
}

/// Routes the next request, if there is one to answer now (returns whether there was). An
/// answer ready now goes to the connection at once; one that comes later waits in `work`.
/// The stream is tracked to its end for a route with an access log, and when the worker
/// counts requests (`mark`). The request is read where the connection holds it, and taken
/// only to be kept (for the log).
///
/// `early`: what is read came in TLS early data (`tls_early.rs`), the handshake not complete;
/// a request not safe to replay then waits in `work` for it (RFC 8470). Always false on
/// other connections (a constant of their transport).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn answer(
    conn: &mut Connection,
    routing: &Rc<Routing>,
    work: &mut StreamWork,
    ends: &mut StreamEnds,
    now: Instant,
    mark: Option<Mark>,
    early: bool,
) -> bool {
    let Some((id, req)) = conn.next_request_held() else {
        return false;
    };
    let mut early_copy = None;
    if early {
        if !request_start::may_answer_early(routing, req.method.as_bytes()) {
            crate::metrics::tls_early_data::request_held();
            if let Some(req) = conn.take_request(id) {
                work.after_handshake(id, req);
            }
            return true;
        }
        req.set_early_data(true);
        early_copy = bodiless_copy(req);
    }
    let routed = request_start::route(routing, req);
    answer_routed(
        conn,
        work,
        ends,
        now,
        mark,
        (id, routed),
        early_copy,
        |conn| conn.take_request(id),
    );
    true
}

/// A copy of an early request without a body, to route again after the handshake if its
/// answer is `425 Too Early` (RFC 8470 section 5.2); a request with a body is not repeated.
fn bodiless_copy(req: &mut Request) -> Option<Box<Request>> {
    match req.take_body() {
        Some(body) => {
            req.set_body(body);
            None
        }
        None => Some(Box::new(req.clone())),
    }
}

/// Routes requests that waited for the handshake (`StreamWork::after_handshake`): early ones
/// not safe to replay, and copies of early ones answered 425. Neither is early any more.
fn answer_after_handshake(
    conn: &mut Connection,
    routing: &Rc<Routing>,
    work: &mut StreamWork,
    ends: &mut StreamEnds,
    now: Instant,
    mark: Option<Mark>,
) {
    for (id, mut req) in work.take_after_handshake() {
        req.set_early_data(false);
        let routed = request_start::route(routing, &mut req);
        answer_routed(conn, work, ends, now, mark, (id, routed), None, |_| {
            Some(req)
        });
    }
}

/// Gives stream `id` its routed answer, or keeps it in `work` until it comes. `taken` gives
/// the request to keep for the access log; `early_copy`, the copy of an early request.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn answer_routed(
    conn: &mut Connection,
    work: &mut StreamWork,
    ends: &mut StreamEnds,
    now: Instant,
    mark: Option<Mark>,
    (id, routed): (u32, Routed<'_>),
    early_copy: Option<Box<Request>>,
    taken: impl FnOnce(&mut Connection) -> Option<Request>,
) {
    let log_start = |conn: &mut Connection| {
        let req = taken(conn)?;
        Some(LogStart {
            req,
            received_at: SystemTime::now(),
            started: now,
        })
    };
    match routed {
        Routed::Now(resp, _) if resp.status == 425 && early_copy.is_some() => {
            conn.release_request(id);
            if let Some(copy) = early_copy {
                work.too_early(id, *copy);
            }
        }
        Routed::Now(resp, route) => {
            let file = route.log();
            // The memoised request's answer, when it repeats, is kept to give again to the
            // same request (its logged path is not: each request has its line).
            let repeats = conn.answer_memo_wanted(id) && route.answer_repeats(&resp);
            let body = match (file, mark) {
                _ if repeats => {
                    conn.release_request(id);
                    conn.respond_repeatable(id, resp, mark.map(Mark::to_bits))
                }
                (None, None) => {
                    conn.release_request(id);
                    conn.respond(id, resp)
                }
                (file, mark) => {
                    match file.map(|f| (f, log_start(conn))) {
                        Some((file, Some(start))) => ends.start(id, file, start, &resp),
                        _ => conn.release_request(id),
                    }
                    conn.respond_tracked(id, resp, mark.map_or(0, Mark::to_bits))
                }
            };
            if let Some(body) = body {
                work.add_body(id, body);
            }
        }
        Routed::Later(later) => {
            let log = match later.route().log() {
                Some(_) => log_start(conn).map(Box::new),
                None => {
                    conn.release_request(id);
                    None
                }
            };
            work.add_answer(id, later, log, mark);
            if let Some(copy) = early_copy {
                work.keep_early_copy(id, copy);
            }
        }
    }
}

async fn linger_close<T: Transport>(stream: &mut T) {
    let _ = stream.shutdown_write();
    let deadline = Instant::now() + LINGER;
    // On the heap: an array here would enlarge every connection's future.
    let mut buf = vec![0u8; 4096];
    let mut drained = 0usize;
    while drained < 256 * 1024 {
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => return,
        }
    }
}
