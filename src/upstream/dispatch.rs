//! The protocol of each try of a backend: HTTP/2 for its share of the requests, else
//! HTTP/1.1 on a pooled or new connection; and the request given back when a backend could
//! not take it, for the next one of a list.

use super::backend::{Backend, UpstreamRequest};
use super::connect::{connection, proxy_line_for, Connected};
use super::errors::{log_failure, UpstreamError};
use super::h1::{self, Outgoing};
use super::h2::{self, H2Failure};
use super::lease::Lease;
use super::pool::Pool;
use crate::http::Response;
use std::future::Future;
use std::rc::Rc;

/// Sends `req` to `backend` and resolves to `finish` of its response, or of the error the
/// client gets (logged here, once, naming the backend and the cause).
///
/// Over HTTP/1.1 the head is serialized before the future starts and the future holds only
/// that: every layer of async state holds its arguments (and a future it awaits) to the end,
/// and the caller boxes this future per request (smaller boxes come from the allocator's
/// per-thread caches). So `finish` runs here rather than in an async block of the caller's.
pub fn send<T>(
    pool: Rc<Pool>,
    backend: Rc<Backend>,
    req: UpstreamRequest,
    finish: impl FnOnce(Result<Response, UpstreamError>) -> T,
) -> impl Future<Output = T> {
    let mut out = match backend.http2 {
        None => Ok(Outgoing::new(req, &backend)),
        Some(_) => Err(Box::new(req)),
    };
    async move {
        // `ref mut`: the exchange borrows the head where it is, not a copy of it.
        let result = match out {
            Ok(ref mut out) => h1::exchange(&pool, &backend, out, None, None)
                .await
                .map_err(|(e, _)| e),
            Err(req) => Box::pin(attempt(&pool, &backend, Unsent::Fields(*req), None))
                .await
                .map_err(|(e, _)| e),
        };
        finish(result.inspect_err(|e| log_failure(&backend, e)))
    }
}

/// A request on its way to a backend of a list, given back when a backend could not take
/// it: its fields, or its HTTP/1.1 head once serialized (a new connection that broke before
/// answering an idempotent request).
pub(super) enum Unsent {
    Fields(UpstreamRequest),
    Serialized(Outgoing),
}

/// One try of `backend`: over HTTP/2 for its share of the requests (a request whose HTTP/1.1
/// head was already made goes over HTTP/1.1), else over HTTP/1.1 on a pooled or new
/// connection. `lease` lasts as long as the exchange. Gives the request back when the backend
/// could not take it.
pub(super) async fn attempt(
    pool: &Rc<Pool>,
    backend: &Rc<Backend>,
    unsent: Unsent,
    lease: Option<Lease>,
) -> Result<Response, (UpstreamError, Option<Unsent>)> {
    let req = match unsent {
        Unsent::Serialized(mut out) => {
            let sent = h1::exchange(pool, backend, &mut out, None, lease).await;
            return sent.map_err(|(e, back)| (e, back.then_some(Unsent::Serialized(out))));
        }
        Unsent::Fields(req) => req,
    };
    let (req, first, lease) = match backend
        .http2
        .as_ref()
        .filter(|h| h.pick(pool, &backend.pool_key))
    {
        Some(h) => {
            // Boxed: its state is ~2.5 KB, and every HTTP/1.1 exchange would carry it otherwise.
            let h2 = h2::exchange(pool, backend, req, h.max_concurrent_streams, lease);
            match Box::pin(h2).await {
                Ok(resp) => return Ok(resp),
                Err(H2Failure::Failed(e, back)) => return Err((e, back.map(Unsent::Fields))),
                // The backend did not choose h2 in ALPN: HTTP/1.1 on that connection.
                Err(H2Failure::FellBack { req, conn, lease }) => {
                    pool.mark_no_h2(&backend.pool_key);
                    (req, conn.map(Connected::new), lease)
                }
            }
        }
        None => {
            // Connected before the head is made: a backend that cannot be reached gives the
            // fields back, and the next one may take them over HTTP/2.
            let line = proxy_line_for(backend, req.client_addrs);
            match connection(pool, backend, line.as_deref(), true).await {
                Ok(c) => (req, Some(c), lease),
                Err(e) => return Err((e, Some(Unsent::Fields(req)))),
            }
        }
    };
    let mut out = Outgoing::new(req, backend);
    let sent = h1::exchange(pool, backend, &mut out, first, lease).await;
    sent.map_err(|(e, back)| (e, back.then_some(Unsent::Serialized(out))))
}
