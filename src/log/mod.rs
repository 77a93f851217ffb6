//! Access logs: Apache-style formats with h2o's `%` escapes, buffered per worker.
//! (Stub: filled in by the access log work.)

use crate::config::AccessLogConf;
use crate::http::Request;
use std::time::{Duration, SystemTime};

/// What the server knows about a finished request.
pub struct LogRecord<'a> {
    pub req: &'a Request,
    pub status: u16,
    /// Response body bytes sent (`%b`).
    pub body_bytes: u64,
    /// Response bytes sent including the header (`%O`).
    pub total_bytes: u64,
    /// When the request head was received (`%t`).
    pub received_at: SystemTime,
    /// From receiving the request to the end of the response (`%D`, `%T`).
    pub duration: Duration,
    /// Response header fields, for `%{NAME}o`.
    pub resp_headers: &'a [(bytes::Bytes, bytes::Bytes)],
}

/// One access log file's writer on one worker thread.
pub struct AccessLog {
    conf: AccessLogConf,
}

impl AccessLog {
    pub fn new(conf: &AccessLogConf) -> AccessLog {
        AccessLog { conf: conf.clone() }
    }

    pub fn conf(&self) -> &AccessLogConf {
        &self.conf
    }

    /// Formats one line into the buffer; writes the buffer out when it is full.
    pub fn log(&mut self, _rec: &LogRecord<'_>) {}

    /// Writes out whatever is buffered (called periodically and at shutdown).
    pub fn flush(&mut self) {}
}
