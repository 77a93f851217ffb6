//! The end of a request, one path for every protocol (HTTP/1 inline and streamed, the
//! HTTP/1.1 lane, HTTP/2 stream ends, HTTP/3 request streams): the metrics count it when the
//! worker counts, and its access-log line is written on a route with an access log
//! (`request_start::Route::log`). What differs by protocol (its version, byte counts, clock
//! readings) comes in as arguments.

use crate::http::Request;
use crate::log::{AccessLog, LogRecord, TlsFacts};
use crate::metrics::{self, Mark, Proto};
use bytes::Bytes;
use std::cell::RefCell;
use std::time::{Duration, SystemTime};

/// The figures of a request that ended, for its metrics count and its log line alike.
pub(crate) struct Figures {
    pub proto: Proto,
    pub status: u16,
    /// Request bytes counted with it (0 where the connection counts what it reads).
    pub bytes_in: u64,
    /// Response body bytes sent (`%b`).
    pub body_bytes: u64,
    /// Response bytes sent: head, framing and body (`%O`).
    pub total_bytes: u64,
}

/// The clock readings of a counted request (`metrics::start`).
pub(crate) struct Counted {
    /// When it began.
    pub started: Mark,
    /// When it ended, when that was read already (one reading for the requests that ended
    /// together); else it is read now.
    pub ended: Option<Mark>,
}

/// What the access-log line needs besides the figures: the request, the response's fields
/// and the line's clock readings, and the connection's facts.
pub(crate) struct Logged<'r> {
    pub file: &'r RefCell<AccessLog>,
    pub req: &'r Request,
    pub resp_headers: &'r [(Bytes, Bytes)],
    /// When the request head was received.
    pub received_at: SystemTime,
    /// From receiving the request to the end of the response.
    pub duration: Duration,
    /// The connection's TLS session (`None` in cleartext and over QUIC).
    pub tls: Option<TlsFacts>,
    /// The HTTP/2 stream it came on.
    pub stream_id: Option<u32>,
}

/// Ends a request: counts it (`counted`; `None` when the worker does not count) and writes
/// its log line (`log`; `None` without an access log). Inlined: it is on every request's path.
#[inline(always)]
pub(crate) fn request_ended(figures: Figures, counted: Option<Counted>, log: Option<Logged<'_>>) {
    if let Some(c) = counted {
        let end = c.ended.unwrap_or_else(Mark::now);
        metrics::request_between(
            figures.proto,
            figures.status,
            figures.bytes_in,
            figures.total_bytes,
            c.started,
            end,
        );
    }
    if let Some(l) = log {
        let record = LogRecord {
            req: l.req,
            status: figures.status,
            body_bytes: figures.body_bytes,
            total_bytes: figures.total_bytes,
            received_at: l.received_at,
            duration: l.duration,
            resp_headers: l.resp_headers,
            tls: l.tls,
            stream_id: l.stream_id,
        };
        l.file.borrow_mut().log(&record);
    }
}
