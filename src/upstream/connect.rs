//! A connection to a backend ready for a request: a pooled one, or a new one that starts
//! with the PROXY line when configured. Nothing of the request has been sent yet.

use super::backend::Backend;
use super::cap::{Grant, Refused, Slot};
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
    /// Its place under the backend's cap (`None`: uncapped).
    pub(super) slot: Option<Slot>,
}

impl Connected {
    /// A connection just made.
    pub(super) fn new(conn: Conn) -> Connected {
        Connected {
            conn,
            timer: Timer::default(),
            reused: false,
            slot: None,
        }
    }
}

/// A connection to `backend` ready for a request: the newest idle one when `may_reuse`, else
/// a new one, which gets `proxy_line` first. At the backend's cap the request waits in its
/// queue for a connection released or a slot freed (503 when the queue is full or the wait
/// too long). Nothing of the request has been sent when this fails.
pub(super) async fn connection(
    pool: &Pool,
    backend: &Backend,
    proxy_line: Option<&[u8]>,
    may_reuse: bool,
) -> Result<Connected, UpstreamError> {
    if let Some((conn, timer, slot)) = may_reuse.then(|| pool.take(&backend.pool_key)).flatten() {
        return Ok(Connected {
            conn,
            timer,
            reused: true,
            slot,
        });
    }
    let gate = pool.gate(
        &backend.pool_key,
        backend.max_connections,
        backend.queue_max,
    );
    let slot = match gate {
        None => None,
        Some(gate) => match gate.try_open() {
            Some(s) => Some(s),
            None => match gate.wait(backend.queue_timeout) {
                Err(r) => return Err(refused(r)),
                Ok(wait) => match wait.await {
                    Err(r) => return Err(refused(r)),
                    Ok(Grant::Idle(conn, timer, slot)) => {
                        return Ok(Connected {
                            conn,
                            timer,
                            reused: true,
                            slot: Some(slot),
                        })
                    }
                    Ok(Grant::Open(s)) => Some(s),
                },
            },
        },
    };
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
    Ok(Connected {
        slot,
        ..Connected::new(conn)
    })
}

fn refused(r: Refused) -> UpstreamError {
    UpstreamError::unavailable(match r {
        Refused::QueueFull => "at proxy.max-connections and proxy.queue.max requests waiting",
        Refused::Timeout => "no connection free within proxy.queue.timeout",
    })
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
