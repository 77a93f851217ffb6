//! `error-log.emit-request-errors` set on a host or path to the opposite of the global
//! value: the worker's switch ([`crate::log::emit_request_errors`]) is turned that way while
//! the path's handler works on a request (its first call, each poll of a later answer and of
//! a streamed body), then put back. Paths that keep the global value are not wrapped.

use crate::http::body::Next;
use crate::http::{Answer, Body, BodyStream, Handler, Request, Response};
use std::task::{Context, Poll};

pub struct RequestErrors {
    inner: Box<dyn Handler>,
    emit: bool,
}

impl RequestErrors {
    /// Wraps `inner` when the path's `emit` differs from the global `global`.
    pub fn wrap(emit: Option<bool>, global: bool, inner: Box<dyn Handler>) -> Box<dyn Handler> {
        match emit {
            Some(emit) if emit != global => Box::new(RequestErrors { inner, emit }),
            _ => inner,
        }
    }
}

/// Runs `f` with the worker's switch set to `emit`.
fn with_switch<R>(emit: bool, f: impl FnOnce() -> R) -> R {
    let before = crate::log::emit_request_errors();
    crate::log::set_emit_request_errors(emit);
    let r = f();
    crate::log::set_emit_request_errors(before);
    r
}

fn switched_body(emit: bool, mut resp: Response) -> Response {
    if let Body::Stream(s) = &mut resp.body {
        // `Ended` is a unit: boxing it allocates nothing.
        let inner = std::mem::replace(&mut s.stream, Box::new(Ended));
        s.stream = Box::new(SwitchedBody { inner, emit });
    }
    resp
}

impl Handler for RequestErrors {
    fn handle(&self, req: &Request) -> Answer {
        let emit = self.emit;
        match with_switch(emit, || self.inner.handle(req)) {
            Answer::Now(resp) => Answer::Now(switched_body(emit, resp)),
            Answer::Later(mut later) => Answer::Later(Box::pin(std::future::poll_fn(move |cx| {
                with_switch(emit, || later.as_mut().poll(cx)).map(|r| switched_body(emit, r))
            }))),
        }
    }

    fn streams_body(&self) -> bool {
        self.inner.streams_body()
    }

    fn tunnels(&self) -> bool {
        self.inner.tunnels()
    }

    fn answers_now(&self) -> bool {
        self.inner.answers_now()
    }

    fn answer_repeats(&self, resp: &Response) -> bool {
        self.inner.answer_repeats(resp)
    }
}

/// A streamed body polled with the switch set.
struct SwitchedBody {
    inner: Box<dyn BodyStream>,
    emit: bool,
}

impl BodyStream for SwitchedBody {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let inner = &mut self.inner;
        with_switch(self.emit, || inner.poll_frame(cx))
    }
}

/// A placeholder while a body is moved into its wrapper.
struct Ended;

impl BodyStream for Ended {
    fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
        Poll::Ready(None)
    }
}
