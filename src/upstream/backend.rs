//! A backend and how to talk to it (built once per proxy handler), and the request as it
//! goes there.

use super::pool::{Pool, PoolKey};
use crate::config::{BackendConf, ProxyConf, UpstreamAddr};
use crate::http::{Method, RequestBody};
use crate::tls::client::TlsClient;
use bytes::Bytes;
use std::net::SocketAddr;
use std::time::Duration;

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
    /// `proxy.max-connections` per worker (0: uncapped), `proxy.queue.max`,
    /// `proxy.queue.timeout`.
    pub max_connections: u32,
    pub queue_max: usize,
    pub queue_timeout: Duration,
    /// Bytes read from the backend at once, and request bytes queued towards it.
    pub io_size: usize,
    /// Send `Expect: 100-continue` with request bodies.
    pub expect: bool,
    /// `proxy.max-response-head-size`: also bounds a trailer section.
    pub max_response_head: usize,
    /// `proxy.max-response-headers`
    pub max_response_fields: usize,
    /// `proxy.max-informational-responses`: interim (1xx) heads allowed before the final one.
    pub max_informational: u32,
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
    pub(super) fn pick(&self, pool: &Pool, key: &PoolKey) -> bool {
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
    /// The backend `b` of a list with the settings of `conf`.
    /// `clients` are the TLS clients of the configuration's `https://` backends (`prepare`
    /// builds them).
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
            max_connections: conf.max_connections,
            queue_max: conf.queue_max,
            queue_timeout: conf.queue_timeout,
            // A bound on memory per exchange; reads beyond 64 KiB gain nothing.
            io_size: conf.max_buffer_size.clamp(1, 64 * 1024),
            expect: conf.expect,
            max_response_head: conf.max_response_head_size,
            max_response_fields: conf.max_response_headers,
            max_informational: conf.max_informational,
            proxy_protocol: conf.proxy_protocol,
        }
    }
}

/// `host:port` (`https://host:port` over TLS) or `unix:/path`, for logs.
pub(super) fn display_name(addr: &UpstreamAddr, tls: bool) -> String {
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
    /// The client takes interim responses (`send-informational` and its protocol): a
    /// backend's 103 or 102 is posted to [`crate::http::interim`] on its way.
    pub interim: bool,
}
