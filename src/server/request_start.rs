//! The start of a request, one path for every protocol (HTTP/1 on a task and in the lane,
//! HTTP/2 streams, HTTP/3 request streams): routing it, and what its driver does next. An
//! answer ready now is written at once (`Routed::Now`, with its route for the log line); one
//! that comes later (`LaterAnswer`) is polled by the driver and finished by its route when it
//! comes. The drivers keep only what is theirs (framing, writing); a request ends in
//! `request_end.rs`. Inlined: this is every request's path.
//!
//! A request routes by the worker's current routing, which the driver borrows for the call
//! (`WorkerCtx::routing`); an answer still to come keeps its own `Rc` of it, so that it ends
//! by the configuration it started with when a reload in place swaps the routing meanwhile.

use super::routing::Routing;
use crate::handler::{Negotiated, PathRoute, RouteId};
use crate::http::interim::Interim;
use crate::http::{Answer, Pending, Request, Response};
use crate::log::AccessLog;
use crate::metrics::in_flight::InFlight;
use std::cell::RefCell;
use std::rc::Rc;
use std::task::{Context, Poll};

/// The route a request took: `None` when no path matched (the router answered itself).
#[derive(Clone, Copy)]
pub(crate) struct Route<'a>(Option<&'a PathRoute>);

impl<'a> Route<'a> {
    /// Where the request's access-log line goes: its path's access log, if it has one.
    #[inline(always)]
    pub fn log(self) -> Option<&'a Rc<RefCell<AccessLog>>> {
        self.0.and_then(|r| r.access_log.as_ref())
    }

    /// Whether `resp`, the path's answer ready now, may be given again to a byte-identical
    /// request (`PathRoute::answer_repeats`).
    #[inline(always)]
    pub fn answer_repeats(self, resp: &Response) -> bool {
        self.0.is_some_and(|r| r.answer_repeats(resp))
    }

    /// The path's checks for a request the HTTP/1.1 lane answers (`route_now`), once it
    /// knows it writes the answer itself: the refusal to give instead, if they refuse
    /// (`PathRoute::check_in_lane`).
    #[inline(always)]
    pub fn check_in_lane(self, req: &mut Request) -> Option<Response> {
        self.0.and_then(|r| r.check_in_lane(req))
    }
}

/// What routing a request gave its driver.
pub(crate) enum Routed<'a> {
    /// The answer is ready now, its route's filters applied.
    Now(Response, Route<'a>),
    /// It comes later.
    Later(LaterAnswer),
}

impl Routed<'_> {
    pub fn route(&self) -> Route<'_> {
        match self {
            Routed::Now(_, route) => *route,
            Routed::Later(later) => later.route(),
        }
    }

    /// Where the request's access-log line goes (see [`Route::log`]), kept past the routing's
    /// borrow.
    pub fn log(&self) -> Option<Rc<RefCell<AccessLog>>> {
        self.route().log().cloned()
    }
}

/// An answer still to come, with what its route needs to finish it (error documents,
/// compression, header commands): the coding the request allows is read now, so the request
/// itself need not be kept. Dropping it cancels the work (the client went away).
/// It owns the routing it started with: a reload in place does not change its end.
pub(crate) struct LaterAnswer {
    fut: Pending,
    route: Option<(Rc<Routing>, RouteId)>,
    negotiated: Negotiated,
    /// Its entry in the worker's list of requests in flight, when a `status` path lists them.
    _listed: Option<InFlight>,
}

impl LaterAnswer {
    pub fn route(&self) -> Route<'_> {
        Route(self.path())
    }

    fn path(&self) -> Option<&PathRoute> {
        let (routing, id) = self.route.as_ref()?;
        routing.router.path(*id)
    }

    /// An answer of no route, for tests of the drivers.
    #[cfg(test)]
    pub fn unrouted(fut: Pending) -> LaterAnswer {
        LaterAnswer {
            fut,
            route: None,
            negotiated: Negotiated::NONE,
            _listed: None,
        }
    }

    /// Its entry in the list of requests in flight, for the driver to keep while the
    /// request goes on past its answer (a streamed body either way).
    pub fn take_listed(&mut self) -> Option<InFlight> {
        self._listed.take()
    }

    /// [`LaterAnswer::poll`], handing each interim response (103 Early Hints, 102) the answer
    /// gave on the way to `interim`, in order, before the final answer. A 103 without fields
    /// is not passed on (as h2o).
    #[inline]
    pub fn poll_interim(
        &mut self,
        cx: &mut Context<'_>,
        mut interim: impl FnMut(Interim),
    ) -> Poll<Response> {
        crate::http::interim::listen(
            || self.poll(cx),
            |i| {
                if i.status != 103 || i.headers.iter().next().is_some() {
                    interim(i)
                }
            },
        )
    }

    /// Polls the answer; when it came, it is finished by its route.
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Response> {
        let Poll::Ready(mut resp) = self.fut.as_mut().poll(cx) else {
            return Poll::Pending;
        };
        if let Some(r) = self.path() {
            r.finish(self.negotiated, &mut resp);
        }
        Poll::Ready(resp)
    }
}

/// Whether a request received in early data (TLS 1.3 0-RTT, over QUIC or TCP, the handshake
/// not complete yet) may be answered now: its method is one of `http3-0rtt-methods` (safe to
/// replay, RFC 8470). Others wait for the handshake.
pub(crate) fn may_answer_early(routing: &Routing, method: &[u8]) -> bool {
    let allowed = &routing.config.http3.early_data_methods;
    allowed.iter().any(|m| m.as_bytes() == method)
}

/// Routes `req` by `routing` and runs its handler.
#[inline(always)]
pub(crate) fn route<'a>(routing: &'a Rc<Routing>, req: &mut Request) -> Routed<'a> {
    let (answer, route) = routing.router.handle(req);
    match answer {
        Answer::Now(resp) => Routed::Now(resp, Route(route)),
        Answer::Later(fut) => Routed::Later(later(fut, routing, route, req)),
    }
}

/// [`route`] for a request whose handler answers now without other effect (the lane's
/// inline path): `None` when it would not, and nothing was run. The path's checks are not
/// run: the lane runs them (`Route::check_in_lane`) once it knows the answer is inline.
#[inline(always)]
pub(crate) fn route_now<'a>(
    routing: &'a Routing,
    req: &mut Request,
) -> Option<(Response, Route<'a>)> {
    match routing.router.handle_now(req)? {
        (Answer::Now(resp), route) => Some((resp, Route(route))),
        (Answer::Later(_), _) => None,
    }
}

/// Out of line: the rare path, kept off the inline one's code.
#[inline(never)]
fn later(
    fut: Pending,
    routing: &Rc<Routing>,
    route: Option<&PathRoute>,
    req: &Request,
) -> LaterAnswer {
    LaterAnswer {
        fut,
        route: route.map(|r| (routing.clone(), r.id)),
        negotiated: route.map_or(Negotiated::NONE, |r| r.negotiate(req)),
        _listed: InFlight::enter(req),
    }
}
