//! The end of a request, one path for every protocol (HTTP/1 inline and streamed, the
//! HTTP/1.1 lane, HTTP/2 stream ends, HTTP/3 request streams): the metrics count it when the
//! worker counts, and its access-log line is written on a route with an access log. What
//! differs by protocol (its version, byte counts, timings) comes in as arguments.

use crate::log::{AccessLog, LogRecord};
use crate::metrics::{self, Mark, Proto};
use std::cell::RefCell;

/// What the metrics count of a request that ended.
pub(crate) struct Counted {
    pub proto: Proto,
    pub status: u16,
    /// Request bytes counted with it (0 where the connection counts what it reads).
    pub bytes_in: u64,
    /// Response bytes sent: head, framing and body.
    pub bytes_out: u64,
    /// When it began (`metrics::start`).
    pub started: Mark,
    /// When it ended, when that was read already (one reading for the requests that ended
    /// together); else it is read now.
    pub ended: Option<Mark>,
}

/// Ends a request: counts it (`counted`; `None` when the worker does not count) and writes
/// its log line (`log`; `None` without an access log). Inlined: it is on every request's path.
#[inline(always)]
pub(crate) fn request_ended(
    counted: Option<Counted>,
    log: Option<(&RefCell<AccessLog>, LogRecord<'_>)>,
) {
    if let Some(c) = counted {
        let ended = c.ended.unwrap_or_else(Mark::now);
        metrics::request_between(c.proto, c.status, c.bytes_in, c.bytes_out, c.started, ended);
    }
    if let Some((file, record)) = log {
        file.borrow_mut().log(&record);
    }
}
