//! Protocol-neutral request and response types, the clock and the Handler trait.

pub mod accept_encoding;
pub mod background;
pub mod block;
pub mod body;
pub mod body_source;
pub mod clock;
pub mod interim;
pub mod recycle;
pub mod repeat;
pub mod request;
pub mod response;

pub use body::{BodyError, BodyStream, Frame, RequestBody, Side, StreamBody, Trailers};
pub use body_source::BodySource;
pub use request::{Method, Request, Version};
pub use response::{Body, FileRange, Headers, OpenFile, Response};

use std::future::Future;
use std::pin::Pin;

/// Something that answers requests: a file handler, a fixed response, a redirect, a proxy.
///
/// Handlers are built per worker thread from the configuration, so they may keep per-worker
/// state (an open-file cache) in `RefCell`s without locks; they are never shared across threads.
pub trait Handler {
    /// Answers `req`, at once or later. Must not block for long: file handlers do
    /// `open`/`fstat` and read small files, nothing slower; anything that waits (a backend)
    /// answers [`Answer::Later`].
    fn handle(&self, req: &Request) -> Answer;

    /// Whether this handler reads request bodies ([`Request::take_body`]). The codec then
    /// hands the request over as soon as its head is in, with the body streaming behind it.
    /// Otherwise the codec receives the body and drops it.
    fn streams_body(&self) -> bool {
        false
    }

    /// Whether this handler turns a protocol upgrade (HTTP/1.1 `Upgrade`, HTTP/2 extended
    /// CONNECT) into a tunnel: it answers 101 (HTTP/1.1) or 200 (HTTP/2) with a body that
    /// streams what the other end sends, and reads the client's bytes as the request body.
    fn tunnels(&self) -> bool {
        false
    }

    /// Whether `resp`, this handler's answer ready now, is the answer to a byte-identical
    /// request for as long as [`Body::reusable_now`] says: it depends on nothing but the
    /// request, the configuration and the file it was made from (not on time, state or a
    /// backend). An HTTP/2 connection then answers the same request again from a memo of
    /// its bytes, without asking the handler.
    fn answer_repeats(&self, _resp: &Response) -> bool {
        false
    }

    /// Whether this handler always answers [`Answer::Now`] and `handle` has no effect beyond
    /// its answer, so a driver may run it and drop the answer to hand the request to another
    /// path (the HTTP/1.1 lane, `src/server/connection/park/lane.rs`, does for answers it
    /// cannot write inline).
    fn answers_now(&self) -> bool {
        false
    }

    /// Whether [`Handler::answer_now`] may give an answer, for a handler that does not
    /// always answer now ([`Handler::answers_now`]): the HTTP/1.1 lane then asks it first.
    fn answers_now_at_times(&self) -> bool {
        false
    }

    /// An answer ready now that `handle` would give, with no effect beyond it, when there
    /// is one (the proxy cache's fresh hit); `None`, nothing done, and the request takes the
    /// usual path ([`Handler::handle`]).
    fn answer_now(&self, _req: &Request) -> Option<Response> {
        None
    }
}

/// A handler's answer.
pub enum Answer {
    /// Ready now: the inline path (files, fixed responses, redirects).
    Now(Response),
    /// Still to come: polled by the connection's own task (no task per request) until it
    /// yields the response. Dropping it cancels the work (the client went away).
    Later(Pending),
}

/// A response that is still being produced.
pub type Pending = Pin<Box<dyn Future<Output = Response>>>;

impl From<Response> for Answer {
    fn from(r: Response) -> Answer {
        Answer::Now(r)
    }
}

/// The value of one hexadecimal digit (percent-encoding, chunk sizes).
pub fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
