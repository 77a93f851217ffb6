//! HTTP/2 to backends (`proxy.http2.ratio`): one connection per backend per worker carries
//! many client requests at once, on the sans-IO [`ClientConn`].
//!
//! A connection is an [`H2Conn`] in the worker's [`Pool`], shared by the requests on it, and
//! a driver task (the only one per connection) that connects, writes what the streams queued
//! and reads what the backend sends, waking the streams it concerns. Each request is an
//! [`H2Stream`] polled by the client connection's own task, as an HTTP/1.1 exchange is: it
//! sends its request body as the windows allow while it waits for the response, then
//! becomes the response body the client's codec pulls (still sending the request body:
//! bidirectional streaming). Dropping it resets the stream (RST_STREAM CANCEL).
//!
//! A TLS backend that does not choose `h2` in ALPN gets the request over HTTP/1.1 on that
//! connection, and is remembered as not speaking HTTP/2. A GOAWAY makes the pool open a new
//! connection for the next requests while those in flight finish; a stream the backend
//! refused (REFUSED_STREAM, or above a GOAWAY's last id) before any of its body was sent is
//! sent again on a fresh connection, once.

use super::balance::Lease;
use super::conn::{Conn, TlsStart};
use super::exchange::{self, Outgoing, Timer, Unsent};
use super::pool::Pool;
use super::{is_forbidden_trailer, Backend, UpstreamError, UpstreamRequest};
use crate::http::body::Next;
use crate::http::StreamBody;
use crate::http::{Body, BodyError, BodyStream, Frame, Method, RequestBody, Response, Side};
use crate::proto::h2::client::{ClientConn, ClientSettings, Received, ResponseHead};
use bytes::{Bytes, BytesMut};
use std::cell::RefCell;
use std::future::poll_fn;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use tokio::io::AsyncWrite;
use tokio::time::Instant;

/// Response bytes read from the backend at once, at least.
const READ_SIZE: usize = 16 * 1024;
/// The read buffer grows by this much when it runs short.
const READ_CHUNK: usize = 64 * 1024;
/// How long a new connection stays open for the requests that were waiting for it.
const UNUSED_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// One HTTP/2 connection to a backend, shared by the requests on it.
pub struct H2Conn {
    inner: RefCell<Inner>,
}

struct Inner {
    state: State,
    conn: ClientConn,
    /// The driver task, woken when a stream queued output.
    driver: Option<Waker>,
    /// Requests waiting for the connection to open.
    waiters: Vec<Waker>,
}

enum State {
    Connecting,
    Open,
    Failed,
    /// ALPN chose HTTP/1.1: the first request takes the connection.
    FellBack(Option<Conn>),
}

impl H2Conn {
    /// Whether a new request may go on this connection (or wait for it to open).
    pub fn usable(&self) -> bool {
        let inner = self.inner.borrow();
        match inner.state {
            State::Connecting => true,
            State::Open => inner.conn.has_capacity(),
            State::Failed | State::FellBack(_) => false,
        }
    }

    /// Runs `f` on the protocol state, then wakes the driver if there is output to write.
    fn with<R>(&self, f: impl FnOnce(&mut ClientConn) -> R) -> R {
        let mut inner = self.inner.borrow_mut();
        let r = f(&mut inner.conn);
        if !inner.conn.output().is_empty() {
            if let Some(w) = inner.driver.take() {
                w.wake();
            }
        }
        r
    }

    /// Starts a connection to `backend` and its driver; the pool holds it while it lives.
    fn start(pool: &Rc<Pool>, backend: &Rc<Backend>, max_streams: u32) -> Rc<H2Conn> {
        let me = Rc::new(H2Conn {
            inner: RefCell::new(Inner {
                state: State::Connecting,
                conn: ClientConn::new(ClientSettings {
                    max_concurrent_streams: max_streams,
                    stream_window: backend.io_size as u32,
                    // `proxy.max-response-head-size`, as for HTTP/1.1.
                    max_header_list_size: u32::try_from(backend.max_response_head)
                        .unwrap_or(u32::MAX),
                }),
                driver: None,
                waiters: Vec::new(),
            }),
        });
        pool.add_h2(&backend.pool_key, me.clone());
        let (pool, backend, conn) = (pool.clone(), backend.clone(), me.clone());
        tokio::task::spawn_local(async move {
            drive(&conn, &backend).await;
            pool.remove_h2(&backend.pool_key, &conn);
        });
        me
    }

    fn set_state(&self, state: State) {
        let mut inner = self.inner.borrow_mut();
        inner.state = state;
        for w in inner.waiters.drain(..) {
            w.wake();
        }
    }

    /// Waits until the connection is no longer connecting.
    async fn opened(&self) {
        poll_fn(|cx| {
            let mut inner = self.inner.borrow_mut();
            if matches!(inner.state, State::Connecting) {
                inner.waiters.push(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(())
        })
        .await
    }
}

/// The driver: connects, then writes and reads until the connection ends.
async fn drive(me: &Rc<H2Conn>, backend: &Backend) {
    let tls = backend.tls.as_ref().map(|t| TlsStart {
        client: &t.0,
        offer_h2: true,
    });
    let mut conn = match Conn::connect(&backend.addr, None, tls, backend.connect_timeout).await {
        Ok(c) => c,
        Err(e) => {
            me.inner.borrow_mut().conn.close(&e.to_string());
            return me.set_state(State::Failed);
        }
    };
    if backend.tls.is_some() && !conn.is_h2() {
        return me.set_state(State::FellBack(Some(conn)));
    }
    me.set_state(State::Open);
    let mut rbuf = BytesMut::new();
    let mut idle = Idle::default();
    poll_fn(|cx| poll_drive(me, &mut conn, &mut rbuf, &mut idle, backend, cx)).await;
    let mut inner = me.inner.borrow_mut();
    inner.conn.close("the connection to the backend ended");
    inner.state = State::Failed;
}

/// When the connection became idle, for `proxy.timeout.keepalive`.
#[derive(Default)]
struct Idle {
    since: Option<Instant>,
    timer: Timer,
}

fn poll_drive(
    me: &H2Conn,
    io: &mut Conn,
    rbuf: &mut BytesMut,
    idle: &mut Idle,
    backend: &Backend,
    cx: &mut Context<'_>,
) -> Poll<()> {
    loop {
        let mut inner = me.inner.borrow_mut();
        if !inner
            .driver
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            inner.driver = Some(cx.waker().clone());
        }
        let c = &mut inner.conn;
        while !c.output().is_empty() {
            match Pin::new(&mut *io).poll_write(cx, c.output()) {
                Poll::Ready(Ok(0)) => {
                    c.close("the backend stopped reading");
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(n)) => c.consume_output(n),
                Poll::Ready(Err(e)) => {
                    c.close(&format!("write failed: {e}"));
                    return Poll::Ready(());
                }
                Poll::Pending => break,
            }
        }
        // TLS holds written records until flushed.
        if let Poll::Ready(Err(e)) = Pin::new(&mut *io).poll_flush(cx) {
            c.close(&format!("write failed: {e}"));
            return Poll::Ready(());
        }
        if c.output().is_empty()
            && (c.failure().is_some() || c.is_closing() && c.stream_count() == 0)
        {
            return Poll::Ready(());
        }
        // Frames keep slices of the buffer alive until the client takes them: read into
        // large chunks, so a new one is needed only every few reads.
        if rbuf.capacity() - rbuf.len() < READ_SIZE {
            rbuf.reserve(READ_CHUNK);
        }
        match io.poll_read_buf(cx, rbuf, READ_SIZE) {
            Poll::Ready(Ok(0)) => {
                c.close("the backend closed the connection");
                return Poll::Ready(());
            }
            Poll::Ready(Ok(_)) => {
                c.receive(rbuf);
                continue;
            }
            Poll::Ready(Err(e)) => {
                c.close(&format!("read failed: {e}"));
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
        if c.stream_count() > 0 {
            idle.since = None;
            return Poll::Pending;
        }
        let since = *idle.since.get_or_insert_with(Instant::now);
        // A new connection waits for the request it was opened for, whatever the keep-alive.
        let keep = match c.ever_used() {
            true => backend.keepalive_timeout,
            false => backend.keepalive_timeout.max(UNUSED_GRACE),
        };
        drop(inner);
        if idle.timer.poll_until(cx, since + keep).is_pending() {
            return Poll::Pending;
        }
        me.inner.borrow_mut().conn.shut_down();
    }
}

/// Sends `req` over HTTP/2 (or over HTTP/1.1 when the backend turned out not to speak it).
/// `lease` (a balancer's count) lasts as long as the stream. A request none of which was
/// sent (the connection failed, or the backend refused the stream twice) is given back.
pub async fn exchange(
    pool: &Rc<Pool>,
    backend: &Rc<Backend>,
    req: UpstreamRequest,
    max_streams: u32,
    mut lease: Option<Lease>,
) -> Result<Response, (UpstreamError, Option<Unsent>)> {
    let head_request = req.method == Method::Head;
    let mut req = Some(req);
    let mut fresh_only = false;
    loop {
        let conn = match pool.h2_conn(&backend.pool_key).filter(|_| !fresh_only) {
            Some(c) => c,
            None => H2Conn::start(pool, backend, max_streams),
        };
        conn.opened().await;
        let fell_back = match &mut conn.inner.borrow_mut().state {
            State::FellBack(c) => Some(c.take()),
            _ => None,
        };
        let Some(r) = req.take() else {
            return Err((UpstreamError::bad_gateway("request lost"), None));
        };
        if let Some(first) = fell_back {
            pool.mark_no_h2(&backend.pool_key);
            let mut out = Outgoing::new(r, backend);
            let first = first.map(exchange::Connected::new);
            let sent = exchange::exchange(pool, backend, &mut out, first, lease).await;
            return sent.map_err(|(e, back)| (e, back.then_some(Unsent::Serialized(out))));
        }
        let failure = conn.inner.borrow().conn.failure().map(str::to_owned);
        if let Some(e) = failure {
            return Err((UpstreamError::bad_gateway(e), Some(Unsent::Fields(r))));
        }
        let mut stream = match H2Stream::open(&conn, backend, r) {
            Ok(s) => s,
            // Filled up while this request waited: another connection.
            Err(r) => {
                req = Some(*r);
                continue;
            }
        };
        stream.lease = lease.take();
        let head = poll_fn(|cx| stream.poll_head(cx)).await;
        if head.is_err() {
            lease = stream.lease.take();
        }
        match head {
            Ok(head) => return Ok(stream.respond(head, head_request)),
            Err(Failed::Refused(r)) if !fresh_only => {
                tracing::debug!(backend = %backend.name, "proxy: stream refused or connection lost, sending again");
                req = Some(r);
                fresh_only = true;
            }
            Err(Failed::Refused(r)) => {
                return Err((
                    UpstreamError::bad_gateway("the backend refused the stream twice"),
                    Some(Unsent::Fields(r)),
                ))
            }
            Err(Failed::Error(e)) => return Err((e, None)),
        }
    }
}

enum Failed {
    /// Refused before any of the request body went: the request, to send again.
    Refused(UpstreamRequest),
    Error(UpstreamError),
}

/// A request's method, target and fields, kept to send it again.
type Replay = (Method, Bytes, Vec<(Bytes, Bytes)>);

/// One request on an HTTP/2 connection, then its response body.
struct H2Stream {
    conn: Rc<H2Conn>,
    id: u32,
    backend: Rc<Backend>,
    /// Kept until the response head, to send again if the backend refuses the stream.
    replay: Option<Replay>,
    body: Option<RequestBody>,
    /// Body bytes taken from the client that the windows did not let go yet.
    pending: Option<Bytes>,
    /// Some request body went (a refused stream cannot be sent again).
    body_started: bool,
    /// The method may be sent twice (after a connection lost before the response).
    idempotent: bool,
    /// The stream is forgotten (ended or reset): nothing to do on drop.
    done: bool,
    sent_at: Option<Instant>,
    stalled_since: Option<Instant>,
    timer: Timer,
    /// With `proxy.proxy-protocol`, for a request given back to go to another backend.
    client_addrs: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    /// A balancer's count of this request in flight (a stream of a multiplexed connection
    /// counts as one request, as least-conn weighs them): dropped with the stream.
    lease: Option<Lease>,
}

impl H2Stream {
    /// Opens the stream with the request head; gives the request back when the connection
    /// has no room.
    fn open(
        conn: &Rc<H2Conn>,
        backend: &Rc<Backend>,
        req: UpstreamRequest,
    ) -> Result<H2Stream, Box<UpstreamRequest>> {
        let UpstreamRequest {
            method,
            target,
            headers,
            body,
            client_addrs,
        } = req;
        let scheme: &[u8] = if backend.tls.is_some() {
            b"https"
        } else {
            b"http"
        };
        let is_host = |n: &Bytes| n.eq_ignore_ascii_case(b"host");
        let authority = headers.iter().find(|(n, _)| is_host(n)).map(|(_, v)| v);
        let fields = headers
            .iter()
            .filter(|(n, _)| !is_host(n) && !is_connection_specific(n))
            .map(|(n, v)| (&n[..], &v[..]));
        let len = body.as_ref().and_then(RequestBody::content_length);
        let mut digits = [0u8; 20];
        let len_field = len.map(|n| {
            (
                &b"content-length"[..],
                crate::proto::h1::itoa(n, &mut digits),
            )
        });
        let fields = fields.chain(len_field);
        let end_stream = body.is_none() || len == Some(0);
        let pseudo: [(&[u8], &[u8]); 4] = [
            (b":method", method.as_bytes()),
            (b":scheme", scheme),
            (b":authority", authority.map_or(&b""[..], |a| &a[..])),
            (b":path", &target),
        ];
        let opened = conn.with(|c| c.open(&pseudo, fields, end_stream));
        let Ok(id) = opened else {
            // Boxed: rare, and the request is large.
            return Err(Box::new(UpstreamRequest {
                method,
                target,
                headers,
                body,
                client_addrs,
            }));
        };
        let idempotent = super::is_idempotent(&method);
        Ok(H2Stream {
            conn: conn.clone(),
            id,
            backend: backend.clone(),
            replay: Some((method, target, headers)),
            body: if end_stream { None } else { body },
            pending: None,
            body_started: false,
            idempotent,
            done: false,
            sent_at: end_stream.then(Instant::now),
            stalled_since: None,
            timer: Timer::default(),
            client_addrs,
            lease: None,
        })
    }

    /// Sends what it can of the request body. Only a failing client body is an error.
    fn pump(&mut self, cx: &mut Context<'_>) -> Result<(), BodyError> {
        let id = self.id;
        loop {
            if self.sent_at.is_some() {
                return Ok(());
            }
            if !self.conn.with(|c| c.may_send(id)) {
                // The backend ended or refused the stream: the rest is not wanted.
                self.body = None;
                self.pending = None;
                self.sent_at = Some(Instant::now());
                return Ok(());
            }
            if let Some(mut data) = self.pending.take() {
                self.body_started = true;
                let all = self.conn.with(|c| {
                    let all = c.send_data(id, &mut data, false);
                    if !all {
                        c.set_waker(id, cx.waker());
                    }
                    all
                });
                if !all {
                    self.pending = Some(data);
                    self.stalled_since.get_or_insert_with(Instant::now);
                    return Ok(());
                }
                self.stalled_since = None;
            }
            let Some(body) = self.body.as_mut() else {
                return Ok(());
            };
            match body.poll_frame(cx) {
                Poll::Ready(Some(Ok(Frame::Data(b)))) => {
                    if !b.is_empty() {
                        self.pending = Some(b);
                    }
                }
                Poll::Ready(Some(Ok(Frame::Trailers(t)))) => {
                    let t: Vec<_> = t
                        .into_iter()
                        .filter(|(n, _)| !is_forbidden_trailer(n))
                        .collect();
                    self.conn.with(|c| c.send_trailers(id, &t));
                    self.finish_sending();
                }
                Poll::Ready(None) => {
                    self.conn.with(|c| c.send_data(id, &mut Bytes::new(), true));
                    self.finish_sending();
                }
                Poll::Ready(Some(Err(e))) => {
                    self.body = None;
                    return Err(e);
                }
                Poll::Pending => return Ok(()),
            }
        }
    }

    fn finish_sending(&mut self) {
        self.body = None;
        self.body_started = true;
        self.sent_at = Some(Instant::now());
    }

    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<ResponseHead, Failed>> {
        if let Err(e) = self.pump(cx) {
            return Poll::Ready(Err(Failed::Error(UpstreamError::from_body(e))));
        }
        let id = self.id;
        let got = self.conn.with(|c| {
            let got = c.take_head(id);
            if got.is_none() {
                c.set_waker(id, cx.waker());
            }
            got
        });
        match got {
            Some(Ok(head)) => {
                self.replay = None;
                return Poll::Ready(Ok(head));
            }
            Some(Err(f)) => {
                self.forget();
                let again = f.refused || f.connection_lost && self.idempotent;
                let replay = self.replay.take().filter(|_| again && !self.body_started);
                return Poll::Ready(Err(match replay {
                    Some((method, target, headers)) => Failed::Refused(UpstreamRequest {
                        method,
                        target,
                        headers,
                        body: self.body.take(),
                        client_addrs: self.client_addrs,
                    }),
                    None => Failed::Error(UpstreamError::bad_gateway(f.reason)),
                }));
            }
            None => {}
        }
        let (at, what) = match (self.sent_at, self.stalled_since) {
            (Some(sent), _) => (sent + self.backend.first_byte_timeout, "first_byte"),
            (None, Some(since)) => (since + self.backend.io_timeout, "io"),
            (None, None) => return Poll::Pending,
        };
        std::task::ready!(self.timer.poll_until(cx, at));
        Poll::Ready(Err(Failed::Error(UpstreamError::timeout(format!(
            "no response within proxy.timeout.{what} over HTTP/2"
        )))))
    }

    /// The client's response: the head, and the rest of the stream as its body.
    fn respond(mut self, head: ResponseHead, head_request: bool) -> Response {
        let body = if head.end_stream || head_request {
            match (head_request, head.content_length) {
                (true, Some(n)) if n > 0 => Body::Stream(StreamBody {
                    len: Some(n),
                    stream: Box::new(H2Body { stream: None }),
                }),
                _ => Body::Empty,
            }
        } else {
            let len = head.content_length;
            self.stalled_since = None;
            Body::Stream(StreamBody {
                len,
                stream: Box::new(H2Body { stream: Some(self) }),
            })
        };
        Response {
            status: head.status,
            headers: head.headers.into(),
            body,
        }
    }

    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        if let Err(e) = self.pump(cx) {
            return Poll::Ready(Some(Err(e)));
        }
        let id = self.id;
        let got = self.conn.with(|c| {
            let got = c.take_data(id);
            if matches!(got, Received::Pending) {
                c.set_waker(id, cx.waker());
            }
            got
        });
        match got {
            Received::Data(b) => {
                self.stalled_since = None;
                return Poll::Ready(Some(Ok(Frame::Data(b))));
            }
            Received::Trailers(t) => {
                self.forget();
                let t = t
                    .into_iter()
                    .filter(|(n, _)| !is_forbidden_trailer(n))
                    .collect();
                return Poll::Ready(Some(Ok(Frame::Trailers(t))));
            }
            Received::End => {
                self.forget();
                return Poll::Ready(None);
            }
            Received::Failed(f) => {
                self.forget();
                return Poll::Ready(Some(Err(BodyError::new(Side::Upstream, f.reason))));
            }
            Received::Pending => {}
        }
        let since = *self.stalled_since.get_or_insert_with(Instant::now);
        std::task::ready!(self.timer.poll_until(cx, since + self.backend.io_timeout));
        Poll::Ready(Some(Err(BodyError::new(
            Side::Upstream,
            format!(
                "stalled for proxy.timeout.io ({} ms) mid-body over HTTP/2",
                self.backend.io_timeout.as_millis()
            ),
        ))))
    }

    /// Done with the stream: reset it if it has not ended both ways (the request body may
    /// still be going when the response ended, or the client left).
    fn forget(&mut self) {
        if !self.done {
            self.done = true;
            let id = self.id;
            self.conn.with(|c| c.reset(id));
        }
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        self.forget();
    }
}

/// A response body read from an HTTP/2 stream as the client's codec pulls it.
struct H2Body {
    /// `None` for the body of a response to HEAD.
    stream: Option<H2Stream>,
}

impl BodyStream for H2Body {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let Some(s) = self.stream.as_mut() else {
            return Poll::Ready(None);
        };
        let next = std::task::ready!(s.poll_body(cx));
        if let Some(Err(e)) = &next {
            super::log_body_error(&s.backend, e);
        }
        if !matches!(next, Some(Ok(Frame::Data(_)))) {
            self.stream = None;
        }
        Poll::Ready(next)
    }
}

/// Fields not forwarded as they are: HTTP/2 forbids some, and the client writes framing itself.
fn is_connection_specific(name: &[u8]) -> bool {
    crate::proto::request_head::is_connection_specific(name)
        || name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"expect")
}
