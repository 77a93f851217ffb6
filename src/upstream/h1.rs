//! One HTTP/1.1 exchange with a backend: the future that sends the request and waits for the
//! response head (retrying once on a fresh connection when a pooled one turns out dead), and
//! the body stream that reads the rest, still sending the request body if it has not all gone
//! yet (a backend may answer before it has read everything).

use super::backend::{Backend, UpstreamRequest};
use super::cap::Slot;
use super::conn::Conn;
use super::connect::{connection, proxy_line_for, Connected};
use super::errors::{log_body_error, UpstreamError};
use super::fields::is_idempotent;
use super::lease::Lease;
use super::pool::Pool;
use super::request::{Prepared, RequestWriter, SendError};
use super::response::{Head, ReadError, ResponseReader};
use super::timer::Timer;
use crate::http::body::Next;
use crate::http::{Body, BodyError, BodyStream, Frame, Method, Response, Side, StreamBody};
use crate::proto::h1::{self, RequestFraming, ResponseFraming};
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// How long a request sent with `Expect: 100-continue` waits for `100 Continue` before
/// sending its body anyway (RFC 9110 10.1.1 lets a client stop waiting).
pub const EXPECT_WAIT: Duration = Duration::from_secs(1);

/// A request ready to go to any backend of its list: the head serialized once.
pub(super) struct Outgoing {
    prepared: Prepared,
    head_request: bool,
    idempotent: bool,
    /// `proxy.proxy-protocol`: the line each new connection starts with.
    proxy_line: Option<Vec<u8>>,
    /// The client takes interim responses: a backend's 103 or 102 is posted on.
    interim: bool,
}

impl Outgoing {
    /// The prepared request, leaving an empty one in its place (a retry puts it back).
    fn take_prepared(&mut self) -> Prepared {
        std::mem::replace(&mut self.prepared, Prepared::empty())
    }

    /// `backend` gives the settings the head depends on (keep-alive, `Expect`), the same for
    /// every backend of a list.
    pub(super) fn new(req: UpstreamRequest, backend: &Backend) -> Outgoing {
        let UpstreamRequest {
            method,
            target,
            headers,
            body,
            client_addrs,
            interim,
        } = req;
        let framing = match &body {
            None => RequestFraming::None,
            Some(b) => match b.content_length() {
                Some(n) => RequestFraming::Length(n),
                None => RequestFraming::Chunked,
            },
        };
        let has_body = !matches!(framing, RequestFraming::None | RequestFraming::Length(0));
        let head = h1::RequestHead {
            method: &method,
            target: &target,
            headers: &headers,
            framing,
            keep_alive: !backend.keepalive_timeout.is_zero(),
            expect_continue: backend.expect && has_body,
        };
        let prepared = Prepared::new(&head, body);
        crate::http::recycle::give_header_list(headers);
        // The fields were slices of the client's request buffer: it goes now.
        Outgoing {
            prepared,
            head_request: method == Method::Head,
            idempotent: is_idempotent(&method),
            proxy_line: proxy_line_for(backend, client_addrs),
            interim,
        }
    }
}

/// Sends `out` over HTTP/1.1 to `backend` on `first` (from [`connection`], or a TLS
/// connection where ALPN did not choose h2) or a connection of its own, and
/// reads up to the response head; a pooled connection found dead is replaced by a new one
/// once. `lease` (a balancer's count of requests in flight) ends with the exchange. A failure
/// to connect, or an idempotent request without a body sent whose new connection broke before
/// any answer, comes with `true`: `out` holds the request again, and another backend may take
/// it. (`out` is borrowed, not moved in: an argument lasts as long as the future, and the
/// caller's copy would make every exchange's state larger.)
pub(super) async fn exchange(
    pool: &Rc<Pool>,
    backend: &Rc<Backend>,
    out: &mut Outgoing,
    mut first: Option<Connected>,
    mut lease: Option<Lease>,
) -> Result<Response, (UpstreamError, bool)> {
    let mut may_reuse = true;
    loop {
        let connected = match first.take() {
            Some(c) => c,
            None => match connection(pool, backend, out.proxy_line.as_deref(), may_reuse).await {
                Ok(c) => c,
                Err(e) => return Err((e, true)),
            },
        };
        let reused = connected.reused;
        let (head_request, idempotent) = (out.head_request, out.idempotent);
        let mut ex = Exchange::new(connected, out.take_prepared(), head_request, pool, backend);
        ex.lease = lease.take();
        ex.interim = out.interim;
        match poll_fn(|cx| ex.poll_head(cx)).await {
            Ok(head) => return ex.respond(head, head_request).map_err(|e| (e, false)),
            Err(f) if !f.retryable => return Err((f.error, false)),
            Err(f) if reused => {
                lease = ex.lease.take();
                let Some(p) = ex.writer.into_retry(idempotent) else {
                    return Err((f.error, false));
                };
                tracing::debug!(
                    backend = %backend.name,
                    "proxy: pooled connection was dead ({}), retrying",
                    f.error
                );
                out.prepared = p;
                may_reuse = false;
            }
            // A new connection broke before any response byte: another backend may take an
            // idempotent request none of whose body went out (as nginx's proxy_next_upstream
            // error does).
            Err(f) => {
                let back = ex.writer.into_retry(false).filter(|_| idempotent);
                let given_back = back.is_some();
                if let Some(prepared) = back {
                    out.prepared = prepared;
                }
                return Err((f.error, given_back));
            }
        }
    }
}

/// A failure before the response head, and whether sending again may help.
struct Failure {
    error: UpstreamError,
    /// The connection broke before anything was received.
    retryable: bool,
}

struct Exchange {
    conn: Conn,
    /// The connection's place under the backend's cap: it goes with the connection.
    slot: Option<Slot>,
    writer: RequestWriter,
    reader: ResponseReader,
    pool: Rc<Pool>,
    backend: Rc<Backend>,
    /// The backend allows another request on this connection (from the response head).
    keep_alive: bool,
    /// Writing failed: nothing more is sent, the response may still come.
    send_error: Option<io::Error>,
    started: Instant,
    /// When the whole request had been sent (the first-byte timeout starts then).
    sent_at: Option<Instant>,
    /// Since when nothing has moved (the io timeout runs from then).
    stalled_since: Option<Instant>,
    timer: Timer,
    /// A balancer's count of this request in flight: dropped with the exchange.
    lease: Option<Lease>,
    /// The client takes interim responses (`UpstreamRequest::interim`).
    interim: bool,
    /// Interim heads received so far (`proxy.max-informational-responses`).
    informational: u32,
}

impl Exchange {
    fn new(
        connected: Connected,
        prepared: Prepared,
        head_request: bool,
        pool: &Rc<Pool>,
        backend: &Rc<Backend>,
    ) -> Exchange {
        let Connected {
            conn,
            timer,
            reused,
            slot,
        } = connected;
        Exchange {
            conn,
            slot,
            writer: RequestWriter::new(prepared, reused, backend.io_size),
            reader: ResponseReader::new(
                head_request,
                backend.max_response_head,
                backend.max_response_fields,
                backend.io_size,
            ),
            pool: pool.clone(),
            backend: backend.clone(),
            keep_alive: false,
            send_error: None,
            started: Instant::now(),
            sent_at: None,
            stalled_since: None,
            timer,
            lease: None,
            interim: false,
            informational: 0,
        }
    }

    /// Sends the request and reads up to the final response head.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<Head, Failure>> {
        loop {
            if let Err(e) = self.pump(cx) {
                return Poll::Ready(Err(Failure {
                    error: UpstreamError::from_body(e),
                    retryable: false,
                }));
            }
            let read = self.reader.poll_head(&mut self.conn, cx);
            self.note_progress();
            match read {
                Poll::Ready(Ok(head)) if head.status < 200 && head.status != 101 => {
                    if let Err(error) = self.interim_head(head) {
                        return Poll::Ready(Err(Failure {
                            error,
                            retryable: false,
                        }));
                    }
                    continue;
                }
                Poll::Ready(Ok(head)) => return Poll::Ready(Ok(head)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(self.read_failure(e))),
                Poll::Pending => {}
            }
            let Some((at, expiry)) = self.head_deadline() else {
                return Poll::Pending;
            };
            ready!(self.timer.poll_until(cx, at));
            match expiry {
                HeadExpiry::Continue => self.writer.start_body(),
                HeadExpiry::FirstByte => {
                    return Poll::Ready(Err(Failure {
                        error: UpstreamError::timeout(format!(
                            "no response within proxy.timeout.first_byte ({} ms)",
                            self.backend.first_byte_timeout.as_millis()
                        )),
                        retryable: false,
                    }))
                }
                HeadExpiry::Io => {
                    return Poll::Ready(Err(Failure {
                        error: UpstreamError::timeout(format!(
                            "stalled for proxy.timeout.io ({} ms) before the response head",
                            self.backend.io_timeout.as_millis()
                        )),
                        retryable: false,
                    }))
                }
            }
        }
    }

    /// The next piece of the response body, sending more of the request body on the way.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        if let Err(e) = self.pump(cx) {
            return Poll::Ready(Some(Err(e)));
        }
        let read = self.reader.poll_body(&mut self.conn, cx);
        self.note_progress();
        match read {
            Poll::Ready(Some(Err(e))) => {
                let reason = match e {
                    ReadError::Closed => "connection closed before the end of the body".into(),
                    ReadError::Io(e) => format!("read failed mid-body: {e}"),
                    ReadError::Malformed(m) => format!("malformed body: {m}"),
                };
                return Poll::Ready(Some(Err(BodyError::new(Side::Upstream, reason))));
            }
            Poll::Ready(Some(Ok(frame))) => {
                self.stalled_since = None;
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        let since = *self.stalled_since.get_or_insert_with(Instant::now);
        ready!(self.timer.poll_until(cx, since + self.backend.io_timeout));
        Poll::Ready(Some(Err(BodyError::new(
            Side::Upstream,
            format!(
                "stalled for proxy.timeout.io ({} ms) mid-body",
                self.backend.io_timeout.as_millis()
            ),
        ))))
    }

    /// Sends what it can of the request. A write error is kept (the backend may still
    /// answer: it may have stopped reading on purpose); only a failing client body is
    /// returned.
    fn pump(&mut self, cx: &mut Context<'_>) -> Result<(), BodyError> {
        if self.sent_at.is_some() {
            return Ok(());
        }
        match self.writer.poll_send(&mut self.conn, cx) {
            Poll::Ready(Ok(())) => self.sent_at = Some(Instant::now()),
            Poll::Ready(Err(SendError::Io(e))) => {
                self.send_error = Some(e);
                self.sent_at = Some(Instant::now());
            }
            Poll::Ready(Err(SendError::Body(e))) => return Err(e),
            Poll::Pending => {}
        }
        Ok(())
    }

    fn note_progress(&mut self) {
        let wrote = self.writer.take_progress();
        if self.reader.take_progress() || wrote {
            self.stalled_since = None;
        }
    }

    /// An interim head before the final one: `100 Continue` lets the request body go; another
    /// (103 Early Hints, 102) goes on to a client that takes them. Each counts against
    /// `proxy.max-informational-responses`, so a backend cannot hold the exchange with them
    /// forever; one that announces a body is malformed (RFC 9110 15.2: a 1xx has none).
    fn interim_head(&mut self, head: Head) -> Result<(), UpstreamError> {
        self.informational += 1;
        if self.informational > self.backend.max_informational {
            return Err(UpstreamError::bad_gateway(format!(
                "more than proxy.max-informational-responses ({}) interim responses",
                self.backend.max_informational
            )));
        }
        if head.content_length.is_some_and(|n| n > 0) {
            return Err(UpstreamError::bad_gateway(format!(
                "malformed response: {} interim response with a body length",
                head.status
            )));
        }
        if head.status == 100 {
            self.writer.start_body();
        } else if self.interim {
            post_interim(head.status, head.headers);
        }
        Ok(())
    }

    /// What the exchange waits for before the response head, and until when.
    fn head_deadline(&mut self) -> Option<(Instant, HeadExpiry)> {
        if self.writer.awaits_continue() {
            return Some((self.started + EXPECT_WAIT, HeadExpiry::Continue));
        }
        if let (Some(sent), false) = (self.sent_at, self.reader.received_any()) {
            return Some((
                sent + self.backend.first_byte_timeout,
                HeadExpiry::FirstByte,
            ));
        }
        if self.reader.received_any() || self.writer.is_blocked() {
            let since = *self.stalled_since.get_or_insert_with(Instant::now);
            return Some((since + self.backend.io_timeout, HeadExpiry::Io));
        }
        // Waiting for the client's body: its own codec times that out.
        None
    }

    fn read_failure(&self, e: ReadError) -> Failure {
        let (reason, broken) = match (e, &self.send_error) {
            (ReadError::Malformed(m), _) => (format!("malformed response: {m}"), false),
            (ReadError::Closed, Some(w)) => (format!("write failed: {w}"), true),
            (ReadError::Closed, None) => ("connection closed before a response".into(), true),
            (ReadError::Io(e), _) => (format!("read failed: {e}"), true),
        };
        Failure {
            error: UpstreamError::bad_gateway(reason),
            retryable: broken && !self.reader.received_any(),
        }
    }

    /// Turns the final head into the client's response.
    fn respond(mut self, head: Head, head_request: bool) -> Result<Response, UpstreamError> {
        if head.status == 101 {
            return Err(UpstreamError::bad_gateway(
                "101 Switching Protocols: upgrades are not proxied",
            ));
        }
        self.writer.forget_replay();
        self.keep_alive = head.keep_alive;
        let body = if head_request {
            // No body, but the client learns the length a GET would have.
            self.release();
            match head.content_length {
                Some(0) => Body::Empty,
                len => Body::Stream(StreamBody {
                    len,
                    stream: Box::new(NoBody),
                }),
            }
        } else {
            match head.framing {
                ResponseFraming::None => {
                    self.release();
                    Body::Empty
                }
                ResponseFraming::Length(n) => match self.reader.take_whole_body() {
                    // Small responses arrive with their head: no stream, and the
                    // connection is free at once.
                    Some(bytes) => {
                        self.release();
                        if bytes.is_empty() {
                            Body::Empty
                        } else {
                            Body::Bytes(bytes)
                        }
                    }
                    None => Body::Stream(StreamBody {
                        len: Some(n),
                        stream: Box::new(ProxyBody { ex: Some(self) }),
                    }),
                },
                ResponseFraming::Chunked | ResponseFraming::UntilClose => {
                    Body::Stream(StreamBody {
                        len: None,
                        stream: Box::new(ProxyBody { ex: Some(self) }),
                    })
                }
            }
        };
        Ok(Response {
            status: head.status,
            headers: head.headers.into(),
            body,
        })
    }

    /// Ends the exchange: the connection goes back to the pool when it is clean, else it
    /// is closed.
    fn release(self) {
        let clean = self.keep_alive
            && self.writer.is_sent()
            && self.send_error.is_none()
            && self.reader.is_clean_end();
        if clean {
            self.pool.put(
                &self.backend.pool_key,
                self.conn,
                self.timer,
                self.slot,
                self.backend.keepalive_timeout,
                self.backend.max_idle_connections,
            );
        }
    }
}

#[derive(Clone, Copy)]
enum HeadExpiry {
    /// Stop waiting for `100 Continue`.
    Continue,
    FirstByte,
    Io,
}

/// Posts a backend's interim response to the client's driver, without the fields that belong
/// to the connection it came on.
pub(super) fn post_interim(status: u16, mut headers: Vec<(bytes::Bytes, bytes::Bytes)>) {
    headers.retain(|(n, _)| !super::fields::is_connection_specific(n));
    crate::http::interim::post(crate::http::interim::Interim {
        status,
        headers: headers.into(),
    });
}

/// A response body read from the backend as the client's codec pulls it.
struct ProxyBody {
    /// `None` once the body ended (the connection went back to the pool or was closed).
    ex: Option<Exchange>,
}

impl BodyStream for ProxyBody {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let Some(ex) = self.ex.as_mut() else {
            return Poll::Ready(None);
        };
        let next = ready!(ex.poll_body(cx));
        match &next {
            // The codec may stop pulling after the last byte it expects (or the trailers):
            // release at once rather than on the next poll.
            Some(Ok(Frame::Data(_))) if !ex.reader.is_done() => {}
            Some(Ok(_)) | None => {
                if let Some(ex) = self.ex.take() {
                    ex.release();
                }
            }
            Some(Err(e)) => {
                log_body_error(&ex.backend, e);
                self.ex = None;
            }
        }
        Poll::Ready(next)
    }
}

/// The body of a response to HEAD: nothing.
struct NoBody;

impl BodyStream for NoBody {
    fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
        Poll::Ready(None)
    }
}
