//! `server-timing` (h2o 2.3): the `Server-Timing` header with the time the handler took to
//! make the answer's head (`process`), and the trailer with the time the body took
//! (`response`) and the whole (`total`) where the transport can carry trailers.
//!
//! h2o's names and format (`name; dur=MS[.UUU]`). spate measures from the moment the router
//! hands the request over: the metrics of the connection and of reading the request (h2o's
//! `connect`, `request-header`, `request-body`, `request-total`) are not measured, and are
//! left out as h2o leaves out a metric it has no value for. A path without `server-timing`
//! has no wrapper: it costs nothing.

use crate::config::ServerTiming;
use crate::http::body::Next;
use crate::http::clock::monotonic_ns;
use crate::http::{
    Answer, Body, BodyError, BodySource, BodyStream, Frame, Handler, Method, Request, Response,
    Side, StreamBody, Version,
};
use bytes::Bytes;
use std::fmt::Write;
use std::task::{Context, Poll};

/// A known body is handed on this much at a time once it is a stream.
const CHUNK: usize = 16 * 1024;

/// A path's handler with its answers timed.
pub struct Timed {
    inner: Box<dyn Handler>,
    enforce: bool,
}

impl Timed {
    /// Wraps `inner`, or gives it back as it is when `server-timing` is OFF.
    pub fn wrap(setting: ServerTiming, inner: Box<dyn Handler>) -> Box<dyn Handler> {
        match setting {
            ServerTiming::Off => inner,
            ServerTiming::On | ServerTiming::Enforce => Box::new(Timed {
                inner,
                enforce: setting == ServerTiming::Enforce,
            }),
        }
    }
}

/// What of the request decides the answer's timing fields.
#[derive(Clone, Copy)]
struct Asked {
    version: Version,
    head: bool,
    enforce: bool,
    start: u64,
}

impl Handler for Timed {
    fn handle(&self, req: &Request) -> Answer {
        let asked = Asked {
            version: req.version,
            head: req.method == Method::Head,
            enforce: self.enforce,
            start: monotonic_ns(),
        };
        match self.inner.handle(req) {
            Answer::Now(resp) => Answer::Now(timed(asked, resp)),
            Answer::Later(later) => {
                Answer::Later(Box::pin(async move { timed(asked, later.await) }))
            }
        }
    }

    fn streams_body(&self) -> bool {
        self.inner.streams_body()
    }

    fn tunnels(&self) -> bool {
        self.inner.tunnels()
    }

    // Each answer has its own timing: never given again, and never by the HTTP/1.1 lane,
    // which would send a streamed body through a task anyway.
    fn answers_now(&self) -> bool {
        false
    }
}

/// Adds the header, and when the transport allows it the trailer, to `resp`.
fn timed(asked: Asked, mut resp: Response) -> Response {
    let head_ready = monotonic_ns();
    let mut value = String::with_capacity(24);
    element(
        &mut value,
        "process",
        head_ready.saturating_sub(asked.start),
    );
    // Tunnels (101, a CONNECT's 2xx) and answers without a body have no trailer.
    let has_body = !asked.head && !matches!(resp.status, 100..=199 | 204 | 304);
    let chunked_anyway = matches!(&resp.body, Body::Stream(s) if s.len.is_none());
    let trailer = has_body
        && match asked.version {
            Version::Http2 | Version::Http3 => true,
            Version::Http11 => asked.enforce || chunked_anyway,
            Version::Http10 => false,
        };
    resp.headers
        .push((Bytes::from_static(b"Server-Timing"), Bytes::from(value)));
    if trailer {
        resp.headers.push((
            Bytes::from_static(b"Trailer"),
            Bytes::from_static(b"server-timing"),
        ));
        let body = std::mem::take(&mut resp.body);
        // HTTP/1.1 carries trailers only in chunked framing: no length.
        let len = match asked.version {
            Version::Http11 => None,
            _ => body.known_len(),
        };
        resp.body = Body::Stream(StreamBody {
            len,
            stream: Box::new(TimedBody {
                source: Source::of(body),
                start: asked.start,
                head_ready,
            }),
        });
    }
    resp
}

/// `name; dur=MS`, with three decimals when there are microseconds (h2o's format).
fn element(out: &mut String, name: &str, ns: u64) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    let us = ns / 1000;
    let (ms, frac) = (us / 1000, us % 1000);
    let _ = write!(out, "{name}; dur={ms}");
    if frac != 0 {
        let _ = write!(out, ".{frac:03}");
    }
}

enum Source {
    Known(BodySource, Vec<u8>),
    Stream(Box<dyn BodyStream>),
    /// The body is out: the trailer comes next.
    Empty,
    /// The trailer is out, or the body failed.
    Done,
}

impl Source {
    fn of(body: Body) -> Source {
        match body {
            Body::Stream(s) => Source::Stream(s.stream),
            known => match BodySource::new(known) {
                Some(b) => Source::Known(b, Vec::new()),
                None => Source::Empty,
            },
        }
    }
}

/// The answer's body, then the trailer with the time it took.
struct TimedBody {
    source: Source,
    start: u64,
    head_ready: u64,
}

impl TimedBody {
    fn trailer(&mut self, mut trailers: Vec<(Bytes, Bytes)>) -> Poll<Next> {
        self.source = Source::Done;
        let now = monotonic_ns();
        let mut value = String::with_capacity(40);
        element(&mut value, "response", now.saturating_sub(self.head_ready));
        element(&mut value, "total", now.saturating_sub(self.start));
        trailers.push((Bytes::from_static(b"server-timing"), Bytes::from(value)));
        Poll::Ready(Some(Ok(Frame::Trailers(trailers))))
    }
}

impl BodyStream for TimedBody {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        match &mut self.source {
            Source::Done => Poll::Ready(None),
            Source::Empty => self.trailer(Vec::new()),
            Source::Known(body, _) if body.remaining() == 0 => {
                self.source = Source::Empty;
                self.poll_frame(cx)
            }
            Source::Known(body, buf) => {
                if let Some(b) = body.take_bytes(CHUNK, 1) {
                    return Poll::Ready(Some(Ok(Frame::Data(b))));
                }
                buf.clear();
                match body.fill(buf, CHUNK) {
                    Ok(_) => Poll::Ready(Some(Ok(Frame::Data(Bytes::copy_from_slice(buf))))),
                    Err(e) => {
                        self.source = Source::Done;
                        Poll::Ready(Some(Err(BodyError::new(
                            Side::Internal,
                            format!("read: {e}"),
                        ))))
                    }
                }
            }
            Source::Stream(s) => match s.poll_frame(cx) {
                Poll::Ready(None) => {
                    self.source = Source::Empty;
                    self.poll_frame(cx)
                }
                Poll::Ready(Some(Ok(Frame::Trailers(t)))) => self.trailer(t),
                Poll::Ready(Some(Err(e))) => {
                    self.source = Source::Done;
                    Poll::Ready(Some(Err(e)))
                }
                other => other,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_h2o_writes_them() {
        let mut s = String::new();
        element(&mut s, "process", 1_500_000);
        element(&mut s, "total", 2_000_000_000);
        element(&mut s, "response", 7_000);
        assert_eq!(
            s,
            "process; dur=1.500, total; dur=2000, response; dur=0.007"
        );
    }
}
