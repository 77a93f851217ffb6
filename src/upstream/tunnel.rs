//! Tunnels to a backend (`proxy.tunnel`): a request with `Upgrade` on a connection of its
//! own, and once the backend answers `101 Switching Protocols`, bytes both ways until
//! either side closes or nothing moves for the tunnel's idle timeout. The connection is
//! HTTP/1.1 whatever `proxy.http2.*` says (over TLS to an `https://` backend, offering only
//! `http/1.1` in ALPN): an upgrade exists only there. Any other answer is
//! an ordinary response, read to its end; the connection is never pooled either way.

use super::backend::Backend;
use super::cap::Slot;
use super::conn::Conn;
use super::connect::{connection, proxy_line_for};
use super::errors::{log_failure, UpstreamError};
use super::lease::Lease;
use super::pool::Pool;
use super::read_arena::ReadArena;
use super::response::{ReadError, ResponseReader};
use crate::http::body::Next;
use crate::http::{
    Body, BodyError, BodyStream, Frame, Method, RequestBody, Response, Side, StreamBody,
};
use crate::proto::h1::ResponseFraming;
use bytes::{Buf, Bytes};
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

/// An upgrade request as it goes to the backend.
pub struct TunnelRequest {
    pub method: Method,
    /// Origin form: `/path?query`.
    pub target: Bytes,
    /// End-to-end fields, Host first (the protocol's own, such as `Sec-WebSocket-Key`,
    /// included). `Connection` and `Upgrade` are written here.
    pub headers: Vec<(Bytes, Bytes)>,
    /// The `Upgrade` value: the protocol asked for.
    pub upgrade: Bytes,
    /// What the client sends once the tunnel is open.
    pub client: RequestBody,
    /// How long the open tunnel may carry nothing either way.
    pub idle_timeout: Duration,
    /// With `proxy.proxy-protocol`: the client's address and the one it connected to.
    pub client_addrs: Option<(SocketAddr, SocketAddr)>,
}

/// Opens a tunnel: the backend's `101` (its fields; the body is the backend's bytes, and
/// the client's are sent as they come), or its other answer as it is.
pub async fn open_tunnel(
    pool: Rc<Pool>,
    backend: Rc<Backend>,
    req: TunnelRequest,
) -> Result<Response, UpstreamError> {
    exchange(&pool, &backend, req, None)
        .await
        .map_err(|(e, _)| {
            log_failure(&backend, &e);
            e
        })
}

/// How much a CONNECT tunnel reads from its target at a time.
const CONNECT_READ_SIZE: usize = 16 * 1024;

/// Why a CONNECT target could not be reached: the client's answer, and the failure named
/// as RFC 9209 names proxy errors (`Proxy-Status`'s `error` parameter).
#[derive(Debug)]
pub struct ConnectError {
    pub error: UpstreamError,
    /// `connection_refused`, `connection_timeout`, `destination_ip_unroutable` or
    /// `proxy_internal_error`.
    pub proxy_error: &'static str,
    /// The system's words for a `proxy_internal_error`.
    pub details: Option<String>,
}

/// A CONNECT tunnel (`proxy.connect`): a TCP connection to `to`, then bytes both ways until
/// either side closes or nothing moves for `idle_timeout`. The answer is a `200` whose body
/// is the target's bytes; the client's (`client`) are sent as they come.
pub async fn open_connect(
    to: SocketAddr,
    client: RequestBody,
    connect_timeout: Duration,
    idle_timeout: Duration,
) -> Result<Response, ConnectError> {
    let stream = match tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(to))
        .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let (proxy_error, details) = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => ("connection_refused", None),
                std::io::ErrorKind::TimedOut => ("connection_timeout", None),
                std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable => {
                    ("destination_ip_unroutable", None)
                }
                _ => ("proxy_internal_error", Some(e.to_string())),
            };
            return Err(ConnectError {
                error: UpstreamError::bad_gateway(format!("CONNECT to {to}: cannot connect: {e}")),
                proxy_error,
                details,
            });
        }
        Err(_) => {
            return Err(ConnectError {
                error: UpstreamError::timeout(format!(
                    "CONNECT to {to}: no connection within proxy.timeout.connect"
                )),
                proxy_error: "connection_timeout",
                details: None,
            })
        }
    };
    let _ = stream.set_nodelay(true);
    let tunnel = Tunnel {
        client,
        early: Bytes::new(),
        read_size: CONNECT_READ_SIZE,
    };
    // The reader is never asked for a response: a CONNECT target speaks no HTTP to us.
    let reader = ResponseReader::new(false, 0, 0, CONNECT_READ_SIZE);
    Ok(Response {
        status: 200,
        headers: Vec::new().into(),
        body: Body::Stream(StreamBody {
            len: None,
            stream: Box::new(Passage::new(
                Conn::Tcp(stream),
                reader,
                Some(tunnel),
                idle_timeout,
                (None, None),
            )),
        }),
    })
}

/// The tunnel's exchange on a connection of its own (never pooled), which starts with the
/// PROXY line when configured. `lease` (a balancer's count) lasts as long as the tunnel. A
/// backend that cannot be reached gives the request back: nothing of it was sent.
pub(super) async fn exchange(
    pool: &Pool,
    backend: &Backend,
    req: TunnelRequest,
    lease: Option<Lease>,
) -> Result<Response, (UpstreamError, Option<TunnelRequest>)> {
    let line = proxy_line_for(backend, req.client_addrs);
    let (conn, slot) = match connection(pool, backend, line.as_deref(), false).await {
        Ok(c) => (c.conn, c.slot),
        Err(e) => return Err((e, Some(req))),
    };
    opened(backend, conn, slot, req, lease)
        .await
        .map_err(|e| (e, None))
}

/// Sends the upgrade request on `conn` and reads the backend's answer.
async fn opened(
    backend: &Backend,
    mut conn: Conn,
    slot: Option<Slot>,
    req: TunnelRequest,
    lease: Option<Lease>,
) -> Result<Response, UpstreamError> {
    let head = request_head(&req);
    match tokio::time::timeout(backend.io_timeout, conn.write_all(&head)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(UpstreamError::bad_gateway(format!("write failed: {e}"))),
        Err(_) => {
            return Err(UpstreamError::timeout(
                "request not sent in proxy.timeout.io",
            ))
        }
    }
    let mut reader = ResponseReader::new(
        false,
        backend.max_response_head,
        backend.max_response_fields,
        backend.io_size,
    );
    let read_head = async {
        loop {
            let head = poll_fn(|cx| reader.poll_head(&mut conn, cx)).await?;
            // Interim answers (100, 103) are not passed on; 101 is final here.
            if head.status >= 200 || head.status == 101 {
                return Ok(head);
            }
        }
    };
    let head = match tokio::time::timeout(backend.first_byte_timeout, read_head).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            return Err(UpstreamError::bad_gateway(match e {
                ReadError::Malformed(m) => format!("malformed response: {m}"),
                ReadError::Closed => "connection closed before a response".into(),
                ReadError::Io(e) => format!("read failed: {e}"),
            }))
        }
        Err(_) => {
            return Err(UpstreamError::timeout(format!(
                "no response within proxy.timeout.first_byte ({} ms)",
                backend.first_byte_timeout.as_millis()
            )))
        }
    };
    let switched = head.status == 101;
    let body = if switched {
        let early = reader.take_buffered();
        let tunnel = Tunnel {
            client: req.client,
            early,
            read_size: backend.io_size,
        };
        Body::Stream(StreamBody {
            len: None,
            stream: Box::new(Passage::new(
                conn,
                reader,
                Some(tunnel),
                req.idle_timeout,
                (lease, slot),
            )),
        })
    } else {
        match head.framing {
            ResponseFraming::None => Body::Empty,
            _ => Body::Stream(StreamBody {
                len: head.content_length,
                stream: Box::new(Passage::new(
                    conn,
                    reader,
                    None,
                    backend.io_timeout,
                    (lease, slot),
                )),
            }),
        }
    };
    Ok(Response {
        status: head.status,
        headers: head.headers.into(),
        body,
    })
}

/// `METHOD target HTTP/1.1`, the fields, `Connection: upgrade` and `Upgrade`.
fn request_head(req: &TunnelRequest) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(req.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(&req.target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &req.headers {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: upgrade\r\nUpgrade: ");
    out.extend_from_slice(&req.upgrade);
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// The backend's bytes as a body the client's codec pulls, sending the client's bytes to
/// the backend on the way (a tunnel), or only reading (the body of a refused upgrade).
struct Passage {
    conn: Conn,
    /// A refused upgrade's body, by its framing (unused by a tunnel).
    reader: ResponseReader,
    /// `None` for a refused upgrade's body.
    tunnel: Option<Tunnel>,
    /// Client bytes taken from the pipe, not yet written.
    pending: Bytes,
    /// The client finished: the backend's write side is shut down.
    client_done: bool,
    idle_timeout: Duration,
    last_moved: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    _open: Option<crate::metrics::OpenTunnel>,
    /// Counts the tunnel (or the refused upgrade's body) in flight on its backend, and
    /// holds its connection's place under the backend's cap.
    _held: (Option<Lease>, Option<Slot>),
}

impl Passage {
    fn new(
        conn: Conn,
        reader: ResponseReader,
        tunnel: Option<Tunnel>,
        idle_timeout: Duration,
        held: (Option<Lease>, Option<Slot>),
    ) -> Passage {
        let open = tunnel.as_ref().map(|_| crate::metrics::OpenTunnel::open());
        Passage {
            conn,
            reader,
            tunnel,
            pending: Bytes::new(),
            client_done: false,
            idle_timeout,
            last_moved: Instant::now(),
            sleep: None,
            _open: open,
            _held: held,
        }
    }

    /// Writes what the client sent, as far as the backend takes it, and flushes it (TLS holds
    /// written records until flushed). Returns whether anything moved.
    fn send_client_bytes(&mut self, cx: &mut Context<'_>) -> Result<bool, BodyError> {
        let moved = self.write_client_bytes(cx)?;
        match Pin::new(&mut self.conn).poll_flush(cx) {
            Poll::Ready(Err(e)) => Err(BodyError::new(
                Side::Upstream,
                format!("tunnel: write failed: {e}"),
            )),
            _ => Ok(moved),
        }
    }

    fn write_client_bytes(&mut self, cx: &mut Context<'_>) -> Result<bool, BodyError> {
        let mut moved = false;
        let Some(client) = self.tunnel.as_mut().map(|t| &mut t.client) else {
            return Ok(false);
        };
        loop {
            if !self.pending.is_empty() {
                match Pin::new(&mut self.conn).poll_write(cx, &self.pending) {
                    Poll::Ready(Ok(n)) => {
                        self.pending.advance(n);
                        moved = true;
                        continue;
                    }
                    Poll::Ready(Err(e)) => {
                        return Err(BodyError::new(
                            Side::Upstream,
                            format!("tunnel: write failed: {e}"),
                        ))
                    }
                    Poll::Pending => return Ok(moved),
                }
            }
            if self.client_done {
                return Ok(moved);
            }
            match client.poll_frame(cx) {
                Poll::Ready(Some(Ok(Frame::Data(b)))) => self.pending = b,
                Poll::Ready(Some(Ok(Frame::Trailers(_))) | None) => {
                    // The client closed its side: so does the backend's, which then
                    // usually closes (and ends the tunnel).
                    self.client_done = true;
                    let _ = Pin::new(&mut self.conn).poll_shutdown(cx);
                    return Ok(true);
                }
                Poll::Ready(Some(Err(e))) => return Err(e),
                Poll::Pending => return Ok(moved),
            }
        }
    }

    /// Pending until nothing has moved for the idle timeout; then ready. Traffic does not
    /// touch the timer (one reset per message would cost more than the message): it is
    /// re-armed when it fires early.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let (last, idle) = (self.last_moved, self.idle_timeout);
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(last + idle)));
        loop {
            std::task::ready!(sleep.as_mut().poll(cx));
            let at = self.last_moved + idle;
            if Instant::now() >= at {
                return Poll::Ready(());
            }
            sleep.as_mut().reset(at);
        }
    }
}

impl BodyStream for Passage {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let mut moved = match self.send_client_bytes(cx) {
            Ok(m) => m,
            Err(e) => return Poll::Ready(Some(Err(e))),
        };
        let read = match &mut self.tunnel {
            Some(t) => t.poll_backend(&mut self.conn, cx),
            None => self.reader.poll_body(&mut self.conn, cx),
        };
        moved |= self.reader.take_progress() || matches!(read, Poll::Ready(Some(Ok(_))));
        if moved {
            self.last_moved = Instant::now();
        }
        match read {
            Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(frame))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => {
                let reason = match e {
                    ReadError::Closed => "connection closed before the end of the body".into(),
                    ReadError::Io(e) => format!("read failed: {e}"),
                    ReadError::Malformed(m) => format!("malformed body: {m}"),
                };
                return Poll::Ready(Some(Err(BodyError::new(Side::Upstream, reason))));
            }
            Poll::Pending => {}
        }
        std::task::ready!(self.poll_idle(cx));
        let what = if self.tunnel.is_some() {
            "tunnel idle for"
        } else {
            "stalled mid-body for"
        };
        Poll::Ready(Some(Err(BodyError::new(
            Side::Upstream,
            format!("{what} {} ms", self.idle_timeout.as_millis()),
        ))))
    }
}

/// The tunnel's side of a [`Passage`].
struct Tunnel {
    /// What the client sends once the tunnel is open.
    client: RequestBody,
    /// Bytes of the new protocol that came with the 101.
    early: Bytes,
    read_size: usize,
}

impl Tunnel {
    /// The backend's next bytes, `None` once it closed.
    fn poll_backend(
        &mut self,
        conn: &mut Conn,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame, ReadError>>> {
        if !self.early.is_empty() {
            return Poll::Ready(Some(Ok(Frame::Data(std::mem::take(&mut self.early)))));
        }
        match std::task::ready!(ReadArena::poll_read(conn, cx, self.read_size)) {
            Ok(b) if b.is_empty() => Poll::Ready(None),
            Ok(b) => Poll::Ready(Some(Ok(Frame::Data(b)))),
            Err(e) => Poll::Ready(Some(Err(ReadError::Io(e)))),
        }
    }
}
