//! HTTP/2 to backends (`proxy.http2.ratio`): one connection per backend per worker carries
//! many client requests at once, on the sans-IO `ClientConn` of `proto::h2::client`.
//!
//! A connection is an [`H2Conn`] (`h2_conn.rs`) in the worker's [`Pool`], shared by the
//! requests on it, and a driver task (the only one per connection, started here) that
//! connects, writes what the streams queued and reads what the backend sends, waking the
//! streams it concerns. Each request is an [`H2Stream`] polled by the client connection's own
//! task, as an HTTP/1.1 exchange is: it sends its request body as the windows allow while it
//! waits for the response, then becomes the response body the client's codec pulls (still
//! sending the request body: bidirectional streaming). Dropping it resets the stream
//! (RST_STREAM CANCEL).
//!
//! A TLS backend that does not choose `h2` in ALPN gives the request back with that
//! connection, for `dispatch` to send over HTTP/1.1, and is remembered as not speaking
//! HTTP/2. A GOAWAY makes the pool open a new connection for the next requests while those in
//! flight finish; a stream the backend refused (REFUSED_STREAM, or above a GOAWAY's last id)
//! before any of its body was sent is sent again on a fresh connection, once.

use super::backend::{Backend, UpstreamRequest};
use super::conn::{Conn, TlsStart};
use super::errors::{log_body_error, UpstreamError};
use super::fields::{is_connection_specific, is_forbidden_trailer, is_idempotent};
use super::h2_conn::H2Conn;
use super::lease::Lease;
use super::pool::Pool;
use super::timer::Timer;
use crate::http::body::Next;
use crate::http::StreamBody;
use crate::http::{Body, BodyError, BodyStream, Frame, Method, RequestBody, Response, Side};
use crate::proto::h2::client::{ClientSettings, Received, ResponseHead};
use bytes::Bytes;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// Starts a connection to `backend` and its driver; the pool holds it while it lives.
fn start(pool: &Rc<Pool>, backend: &Rc<Backend>, max_streams: u32) -> Rc<H2Conn> {
    let me = Rc::new(H2Conn::new(ClientSettings {
        max_concurrent_streams: max_streams,
        stream_window: backend.io_size as u32,
        // `proxy.max-response-head-size`, as for HTTP/1.1.
        max_header_list_size: u32::try_from(backend.max_response_head).unwrap_or(u32::MAX),
    }));
    pool.add_h2(&backend.pool_key, me.clone());
    let (pool, backend, conn) = (pool.clone(), backend.clone(), me.clone());
    tokio::task::spawn_local(async move {
        drive(&conn, &backend).await;
        pool.remove_h2(&backend.pool_key, &conn);
    });
    me
}

/// The driver: connects, then writes and reads until the connection ends.
async fn drive(me: &H2Conn, backend: &Backend) {
    let tls = backend.tls.as_ref().map(|t| TlsStart {
        client: &t.0,
        offer_h2: true,
    });
    let conn = match Conn::connect(&backend.addr, None, tls, backend.connect_timeout).await {
        Ok(c) => c,
        Err(e) => return me.fail(&e.to_string()),
    };
    if backend.tls.is_some() && !conn.is_h2() {
        return me.fall_back(conn);
    }
    me.run(conn, backend.keepalive_timeout).await;
}

/// Sends `req` over HTTP/2. `lease` (a balancer's count) lasts as long as the stream. A
/// request none of which was sent (the connection failed, or the backend refused the stream
/// twice) is given back; so is one to a backend that turned out not to speak HTTP/2, with
/// the connection ALPN chose HTTP/1.1 on (unless another request took it) and the lease.
pub(super) async fn exchange(
    pool: &Rc<Pool>,
    backend: &Rc<Backend>,
    req: UpstreamRequest,
    max_streams: u32,
    mut lease: Option<Lease>,
) -> Result<Response, H2Failure> {
    let head_request = req.method == Method::Head;
    let mut req = Some(req);
    let mut fresh_only = false;
    loop {
        let conn = match pool.h2_conn(&backend.pool_key).filter(|_| !fresh_only) {
            Some(c) => c,
            None => start(pool, backend, max_streams),
        };
        conn.opened().await;
        let fell_back = conn.take_fallback();
        let Some(r) = req.take() else {
            return Err(H2Failure::Failed(
                UpstreamError::bad_gateway("request lost"),
                None,
            ));
        };
        if let Some(conn) = fell_back {
            return Err(H2Failure::FellBack {
                req: r,
                conn,
                lease,
            });
        }
        if let Some(e) = conn.failure() {
            return Err(H2Failure::Failed(UpstreamError::bad_gateway(e), Some(r)));
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
                return Err(H2Failure::Failed(
                    UpstreamError::bad_gateway("the backend refused the stream twice"),
                    Some(r),
                ))
            }
            Err(Failed::Error(e)) => return Err(H2Failure::Failed(e, None)),
        }
    }
}

/// Why a request did not get an answer over HTTP/2.
pub(super) enum H2Failure {
    /// The error the client gets, and the request when none of it was sent.
    Failed(UpstreamError, Option<UpstreamRequest>),
    /// ALPN chose HTTP/1.1: the request goes over it, on `conn` when no other request took
    /// it, still counted by `lease`.
    FellBack {
        req: UpstreamRequest,
        conn: Option<Conn>,
        lease: Option<Lease>,
    },
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
    /// The client takes interim responses (kept for a request given back).
    interim: bool,
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
            interim,
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
                interim,
            }));
        };
        let idempotent = is_idempotent(&method);
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
            interim,
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

    /// A backend's interim heads before the final one: passed on to a client that takes them
    /// (`UpstreamRequest::interim`); `count` of them in all (100s included) against
    /// `proxy.max-informational-responses`.
    fn interim_heads(&mut self, heads: Vec<ResponseHead>, count: u32) -> Result<(), UpstreamError> {
        if count > self.backend.max_informational {
            return Err(UpstreamError::bad_gateway(format!(
                "more than proxy.max-informational-responses ({}) interim responses",
                self.backend.max_informational
            )));
        }
        for h in heads {
            if h.content_length.is_some_and(|n| n > 0) {
                return Err(UpstreamError::bad_gateway(format!(
                    "malformed response: {} interim response with a body length",
                    h.status
                )));
            }
            if self.interim {
                super::h1::post_interim(h.status, h.headers);
            }
        }
        Ok(())
    }

    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<ResponseHead, Failed>> {
        if let Err(e) = self.pump(cx) {
            return Poll::Ready(Err(Failed::Error(UpstreamError::from_body(e))));
        }
        let id = self.id;
        let (got, interim, count) = self.conn.with(|c| {
            let interim = c.take_interim(id);
            let got = c.take_head(id);
            if got.is_none() {
                c.set_waker(id, cx.waker());
            }
            (got, interim, c.interim_count(id))
        });
        if count > 0 {
            if let Err(e) = self.interim_heads(interim, count) {
                self.forget();
                return Poll::Ready(Err(Failed::Error(e)));
            }
        }
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
                        interim: self.interim,
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
            log_body_error(&s.backend, e);
        }
        if !matches!(next, Some(Ok(Frame::Data(_)))) {
            self.stream = None;
        }
        Poll::Ready(next)
    }
}
