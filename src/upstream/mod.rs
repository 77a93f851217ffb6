//! The client side of the proxy: HTTP/1.1 (and HTTP/2, [`h2`]) to backends over TCP, TLS or
//! Unix sockets, with a per-worker connection pool; lists of backends ([`balance`]) with
//! their health ([`health`]); tunnels ([`tunnel`]).
//!
//! [`send`] is polled by the client connection's own task (no task per request): it takes a
//! pooled connection or opens one, sends the request head and streams the request body while
//! it reads the response head, then resolves to a [`Response`] whose body is a stream the
//! client's codec pulls, so a slow client slows the reads from the backend. Dropping the
//! future or the body cancels the exchange; a connection goes back to the pool only when
//! clean: whole request sent, whole response read, keep-alive allowed.
//!
//! Errors say which side failed ([`Side`]), as Pingora's do: 502 when the backend cannot be
//! reached or answers malformed, 504 when it does not answer in time.
// Peer input must never panic: outside tests, no unwrap or expect here.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod balance;
mod conn;
mod exchange;
mod h2;
mod health;
mod pool;
mod probe;
mod proxy_line;
mod request;
mod response;
#[cfg(test)]
pub(crate) mod tests;
mod tunnel;

pub use balance::{open_tunnel_balanced, send_balanced, Group};
pub use exchange::send;
pub use health::{backend_health, Board};
pub use tunnel::{open_tunnel, TunnelRequest};

pub use pool::{Pool, PoolKey};

use crate::config::{BackendConf, ProxyConf, UpstreamAddr};
use crate::http::{BodyError, Method, RequestBody, Response, Side};
use crate::tls::client::TlsClient;
use bytes::Bytes;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a request sent with `Expect: 100-continue` waits for `100 Continue` before
/// sending its body anyway (RFC 9110 10.1.1 lets a client stop waiting).
pub const EXPECT_WAIT: Duration = Duration::from_secs(1);

/// A backend and how to talk to it: built once per proxy handler.
#[derive(Debug)]
pub struct Backend {
    pub addr: UpstreamAddr,
    /// For logs: `host:port` or `unix:/path`.
    pub name: String,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub io_timeout: Duration,
    /// 0: one connection per request.
    pub keepalive_timeout: Duration,
    pub max_idle_connections: usize,
    /// Bytes read from the backend at once, and request bytes queued towards it.
    pub io_size: usize,
    /// Send `Expect: 100-continue` with request bodies.
    pub expect: bool,
    /// `proxy.max-response-head-size`: also bounds a trailer section.
    pub max_response_head: usize,
    /// `proxy.max-response-headers`
    pub max_response_fields: usize,
    /// `proxy.proxy-protocol`: new connections start with a PROXY line.
    pub proxy_protocol: bool,
    /// `https://`: the TLS client (SNI and verification from the URL's host).
    pub tls: Option<TlsClient>,
    /// Idle connections are pooled under the address and the scheme.
    pub pool_key: PoolKey,
    /// HTTP/2 to the backend for a share of the requests (`proxy.http2.*`).
    pub http2: Option<Http2>,
}

/// Which requests go over HTTP/2, and how many at once on a connection.
#[derive(Debug)]
pub struct Http2 {
    /// `proxy.http2.ratio`, 1 to 100.
    pub ratio: u8,
    pub max_concurrent_streams: u32,
    /// Accumulates `ratio` per request; a request goes over HTTP/2 each time it passes 100,
    /// so the share is exact and evenly spread.
    credit: std::cell::Cell<u32>,
}

impl Http2 {
    /// `None` when no request to this backend (`tls`: an `https://` one) goes over HTTP/2.
    pub fn new(conf: &ProxyConf, tls: bool) -> Option<Http2> {
        let on = ProxyConf::speaks_http2(tls, conf.http2_ratio, conf.http2_force_cleartext);
        on.then(|| Http2 {
            ratio: conf.http2_ratio,
            max_concurrent_streams: conf.http2_max_concurrent_streams,
            credit: std::cell::Cell::new(0),
        })
    }

    /// Whether this request goes over HTTP/2.
    fn pick(&self, pool: &Pool, key: &PoolKey) -> bool {
        let c = self.credit.get() + u32::from(self.ratio);
        let h2 = c >= 100;
        self.credit.set(if h2 { c - 100 } else { c });
        h2 && !pool.speaks_no_h2(key)
    }
}

/// The TLS client of backend `b` among `clients` (by [`crate::config::UpstreamTls::id`]).
pub fn tls_client(b: &BackendConf, clients: &[Option<TlsClient>]) -> Option<TlsClient> {
    b.tls.as_ref().and_then(|t| clients.get(t.id)?.clone())
}

impl Backend {
    /// The backend `b` of a list with the settings of `conf`; `clients` are the TLS clients
    /// of the configuration's `https://` backends (`prepare` builds them).
    pub fn new(conf: &ProxyConf, b: &BackendConf, clients: &[Option<TlsClient>]) -> Backend {
        let addr = b.url.addr.clone();
        let tls = b.tls.is_some();
        Backend {
            name: display_name(&addr, tls),
            http2: Http2::new(conf, tls),
            pool_key: PoolKey::new(&addr, tls),
            tls: tls_client(b, clients),
            addr,
            connect_timeout: conf.connect_timeout,
            first_byte_timeout: conf.first_byte_timeout,
            io_timeout: conf.io_timeout,
            keepalive_timeout: conf.keepalive_timeout,
            max_idle_connections: conf.max_idle_connections,
            // A bound on memory per exchange; reads beyond 64 KiB gain nothing.
            io_size: conf.max_buffer_size.clamp(1, 64 * 1024),
            expect: conf.expect,
            max_response_head: conf.max_response_head_size,
            max_response_fields: conf.max_response_headers,
            proxy_protocol: conf.proxy_protocol,
        }
    }
}

/// `host:port` (`https://host:port` over TLS) or `unix:/path`, for logs.
fn display_name(addr: &UpstreamAddr, tls: bool) -> String {
    match addr {
        UpstreamAddr::Tcp { host, port } if tls => format!("https://{host}:{port}"),
        UpstreamAddr::Tcp { host, port } => format!("{host}:{port}"),
        UpstreamAddr::Unix(path) => format!("unix:{}", path.display()),
    }
}

/// A request as it goes to a backend: the handler has converted its header fields.
pub struct UpstreamRequest {
    pub method: Method,
    /// Origin form: `/path?query`.
    pub target: Bytes,
    /// End-to-end fields, Host first. Framing (Content-Length, Transfer-Encoding),
    /// Connection and Expect are written by the client.
    pub headers: Vec<(Bytes, Bytes)>,
    pub body: Option<RequestBody>,
    /// With `proxy.proxy-protocol`: the client's address and the one it connected to.
    pub client_addrs: Option<(SocketAddr, SocketAddr)>,
}

/// Why an exchange failed before a response could be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    /// What the client gets: 502, 504, or 400/500 when the failure was not the backend's.
    pub status: u16,
    pub side: Side,
    pub reason: String,
}

impl UpstreamError {
    fn bad_gateway(reason: impl Into<String>) -> UpstreamError {
        UpstreamError {
            status: 502,
            side: Side::Upstream,
            reason: reason.into(),
        }
    }

    fn timeout(reason: impl Into<String>) -> UpstreamError {
        UpstreamError {
            status: 504,
            side: Side::Upstream,
            reason: reason.into(),
        }
    }

    fn from_body(e: BodyError) -> UpstreamError {
        UpstreamError {
            status: if e.side == Side::Downstream { 400 } else { 500 },
            side: e.side,
            reason: format!("request body: {}", e.reason),
        }
    }

    /// The response the client gets.
    pub fn response(&self) -> Response {
        Response::error(self.status)
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Logs a body that broke off mid-way, once, naming the backend and the side that failed.
fn log_body_error(backend: &Backend, e: &BodyError) {
    if !crate::log::emit_request_errors() {
        return;
    }
    let name = &backend.name;
    match e.side {
        Side::Upstream => tracing::warn!(backend = %name, "proxy: response body: {}", e.reason),
        _ => tracing::info!(backend = %name, "proxy: request body: {}", e.reason),
    }
}

/// Fields that must not travel as trailers (RFC 9110 6.5.1): framing, routing and
/// connection fields. Dropped from trailers forwarded either way.
pub fn is_forbidden_trailer(name: &[u8]) -> bool {
    [
        &b"content-length"[..],
        b"transfer-encoding",
        b"host",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

/// Whether sending a request twice has the effect of sending it once (RFC 9110 9.2.2).
fn is_idempotent(m: &Method) -> bool {
    matches!(
        m,
        Method::Get | Method::Head | Method::Put | Method::Delete | Method::Options | Method::Trace
    )
}
