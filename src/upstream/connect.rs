//! A connection to a backend ready for a request: a pooled one, or a new one that starts
//! with the PROXY line when configured. Nothing of the request has been sent yet.

use super::backend::Backend;
use super::conn::{Conn, TlsStart};
use super::errors::UpstreamError;
use super::pool::Pool;
use super::proxy_line;
use super::timer::Timer;
use std::net::SocketAddr;

/// A connection ready for a request, with the timer its exchanges share.
pub(super) struct Connected {
    pub(super) conn: Conn,
    pub(super) timer: Timer,
    /// It came from the pool (the backend may have closed it meanwhile).
    pub(super) reused: bool,
}

impl Connected {
    /// A connection just made.
    pub(super) fn new(conn: Conn) -> Connected {
        Connected {
            conn,
            timer: Timer::default(),
            reused: false,
        }
    }
}

/// A connection to `backend` ready for a request: the newest idle one when `may_reuse`, else
/// a new one, which gets `proxy_line` first. Nothing of the request has been sent when this
/// fails.
pub(super) async fn connection(
    pool: &Pool,
    backend: &Backend,
    proxy_line: Option<&[u8]>,
    may_reuse: bool,
) -> Result<Connected, UpstreamError> {
    if let Some((conn, timer)) = may_reuse.then(|| pool.take(&backend.pool_key)).flatten() {
        return Ok(Connected {
            conn,
            timer,
            reused: true,
        });
    }
    let tls = backend.tls.as_ref().map(|t| TlsStart {
        client: &t.0,
        offer_h2: false,
    });
    // Boxed: a new connection is rare next to pooled ones, and its state (~1.4 KB with TLS)
    // would otherwise be carried by every exchange.
    let connect = Conn::connect(&backend.addr, proxy_line, tls, backend.connect_timeout);
    let conn = Box::pin(connect)
        .await
        .map_err(|e| UpstreamError::bad_gateway(e.to_string()))?;
    Ok(Connected::new(conn))
}

/// With `proxy.proxy-protocol`: the line a new connection to `backend` starts with.
pub(super) fn proxy_line_for(
    backend: &Backend,
    client_addrs: Option<(SocketAddr, SocketAddr)>,
) -> Option<Vec<u8>> {
    client_addrs
        .filter(|_| backend.proxy_protocol)
        .map(|(from, to)| proxy_line::v1(from, to))
}
