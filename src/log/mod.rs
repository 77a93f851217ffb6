//! Access logs: Apache-style formats with h2o's `%` escapes, buffered per worker.
//!
//! Each worker owns its [`AccessLog`]s (no locks on a request's path). By default each line
//! is written at the end of its request, as h2o and nginx do; with `buffer-size`, lines collect
//! in a buffer that is written with one `write` when it passes that size, on
//! [`AccessLog::flush`] (each second) and on drop. Workers write to duplicates of one `O_APPEND` descriptor (or one pipe, see
//! [`target`]), and a write only ever carries whole lines, so workers sharing a log do not
//! interleave inside a line.
//!
//! Supported escapes: `%%`, `%A`, `%a`/`%h`, `%b`, `%B`, `%D`, `%H`, `%l`, `%m`, `%O`, `%p`,
//! `%{local}p`, `%{remote}p`, `%q`, `%r`, `%s` (also `%>s`), `%t`, `%{sec|msec|usec|msec_frac|
//! usec_frac}t`, `%{STRFTIME}t` (UTC; locale and week-number conversions excluded), `%T`,
//! `%{s|ms|us}T`, `%U`, `%u`, `%V`, `%v`, `%{NAME}i`, `%{NAME}o`, `%{duration}x`,
//! `%{ssl.protocol-version|ssl.session-reused|ssl.cipher|ssl.cipher-bits}x`,
//! `%{http2.stream-id}x`, and h2o's other `%{NAME}x` names, logged as missing
//! (`format::UNMEASURED`). Anything else is rejected by [`Formats::compile`].

mod format;
mod num;
mod render;
pub mod reopen;
pub mod target;
mod time;

pub use crate::config::Escape;
use crate::config::{AccessLogConf, LogTarget};
use crate::http::Request;
use format::Compiled;
use std::fs::File;
use std::time::{Duration, SystemTime};
use time::Calendar;

/// Apache's (and h2o's) common log format.
pub const COMMON_FORMAT: &str = "%h %l %u %t \"%r\" %s %b";

/// Apache's combined log format, h2o's default.
pub const COMBINED_FORMAT: &str = "%h %l %u %t \"%r\" %s %b \"%{Referer}i\" \"%{User-agent}i\"";

/// The most `buffer-size` may ask: the buffer is reserved up front.
pub const BUFFER_LIMIT: usize = 64 * 1024;

thread_local! {
    static EMIT_REQUEST_ERRORS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// `error-log.emit-request-errors` for this worker thread (set at worker start).
pub fn set_emit_request_errors(on: bool) {
    EMIT_REQUEST_ERRORS.with(|e| e.set(on));
}

/// Whether errors of single requests (a backend that failed, a body that broke off, a
/// rejected request) go to the error log: h2o's `error-log.emit-request-errors`.
pub fn emit_request_errors() -> bool {
    EMIT_REQUEST_ERRORS.with(std::cell::Cell::get)
}

/// The access-log formats of one configuration, each compiled once (by `prepare`, at `-t`,
/// start and reload) and copied into every worker's [`AccessLog`]s.
#[derive(Default)]
pub struct Formats(Vec<(Box<str>, Escape, Compiled)>);

impl Formats {
    /// Compiles `format` with `escape`, unless it already is; the error says which escape is
    /// wrong (for config errors).
    pub fn compile(&mut self, format: &str, escape: Escape) -> Result<(), String> {
        if self.find(format, escape).is_none() {
            let compiled = Compiled::new(format, escape)?;
            self.0.push((format.into(), escape, compiled));
        }
        Ok(())
    }

    fn find(&self, format: &str, escape: Escape) -> Option<&Compiled> {
        self.0
            .iter()
            .find(|(f, e, _)| **f == *format && *e == escape)
            .map(|(_, _, c)| c)
    }
}

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
    /// The connection's TLS session, for `%{ssl.*}x`; `None` in cleartext and over QUIC.
    pub tls: Option<TlsFacts>,
    /// The HTTP/2 stream the request came on (`%{http2.stream-id}x`).
    pub stream_id: Option<u32>,
}

/// What a TLS connection's access-log lines say of its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsFacts {
    pub version: rustls::ProtocolVersion,
    pub suite: rustls::CipherSuite,
    /// The session was resumed (a ticket or the cache), not a full handshake.
    pub resumed: bool,
}

/// One access log file's writer on one worker thread.
pub struct AccessLog {
    conf: AccessLogConf,
    format: Compiled,
    /// `None` when the file could not be opened or the format is invalid: lines are dropped.
    file: Option<File>,
    buf: Vec<u8>,
    calendar: Calendar,
    /// A failing write is reported once, not once per flush.
    write_error_reported: bool,
    /// The format is among the compiled ones: the file is (re)opened.
    usable: bool,
}

impl AccessLog {
    /// Takes the format from `formats` and opens the file for appending. Failures are logged
    /// with `tracing::error!` and leave a log that drops its lines, so a bad log never stops
    /// serving.
    pub fn new(conf: &AccessLogConf, formats: &Formats) -> AccessLog {
        let compiled = formats.find(&conf.format, conf.escape);
        let usable = compiled.is_some();
        let (format, file) = match compiled {
            Some(format) => (format.clone(), open(conf)),
            None => {
                let format = &conf.format;
                tracing::error!(target = %conf.target, "access log format not compiled: {format}");
                let none = Compiled {
                    pieces: Vec::new(),
                    escape: conf.escape,
                    quoted_alone: Vec::new(),
                };
                (none, None)
            }
        };
        AccessLog {
            conf: conf.clone(),
            format,
            buf: Vec::with_capacity(if file.is_some() {
                buffer_capacity(conf)
            } else {
                0
            }),
            file,
            calendar: Calendar::default(),
            write_error_reported: false,
            usable,
        }
    }

    /// Writes out what is buffered, then opens the path again: after logrotate renamed the
    /// file, new lines go to a new file. A failure is logged and drops lines until the next
    /// reopen.
    pub fn reopen(&mut self) {
        self.flush();
        if self.usable {
            self.file = open(&self.conf);
            self.write_error_reported = false;
            if self.file.is_some() && self.buf.capacity() == 0 {
                self.buf.reserve(buffer_capacity(&self.conf));
            }
        }
    }

    pub fn conf(&self) -> &AccessLogConf {
        &self.conf
    }

    /// Formats one line into the buffer; writes the buffer out when it is full.
    pub fn log(&mut self, rec: &LogRecord<'_>) {
        if self.file.is_none() {
            return;
        }
        render::render(&self.format, rec, &mut self.calendar, &mut self.buf);
        if self.buf.len() >= self.conf.buffer_size.min(BUFFER_LIMIT) {
            self.flush();
        }
    }

    /// Writes out whatever is buffered (called periodically and at shutdown).
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        if let Some(file) = &mut self.file {
            // Regular files take the whole buffer in one write; write_all only loops if the
            // kernel returns short (disk full, signal), where nothing better can be done.
            let pipe = matches!(self.conf.target, LogTarget::Pipe(_));
            if let Err(e) = target::write_lines(file, &self.buf, pipe) {
                if !self.write_error_reported {
                    tracing::error!(target = %self.conf.target, "access log write: {e}");
                    self.write_error_reported = true;
                }
            }
        }
        // Lines that could not be written are dropped so the buffer stays bounded.
        self.buf.clear();
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Room for the buffered lines and the one that passes the limit.
fn buffer_capacity(conf: &AccessLogConf) -> usize {
    conf.buffer_size.min(BUFFER_LIMIT) + 1024
}

fn open(conf: &AccessLogConf) -> Option<File> {
    match target::open(&conf.target) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::error!(target = %conf.target, "cannot open access log: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests;
