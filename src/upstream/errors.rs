//! Why an exchange failed, and how failures are logged: once, naming the backend and the
//! side to blame.

use super::backend::Backend;
use crate::http::{BodyError, Response, Side};
use std::fmt;

/// Why an exchange failed before a response could be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    /// What the client gets: 502, 503, 504, or 400/500 when the failure was not the backend's.
    pub status: u16,
    pub side: Side,
    pub reason: String,
}

impl UpstreamError {
    pub(super) fn bad_gateway(reason: impl Into<String>) -> UpstreamError {
        UpstreamError {
            status: 502,
            side: Side::Upstream,
            reason: reason.into(),
        }
    }

    pub(super) fn timeout(reason: impl Into<String>) -> UpstreamError {
        UpstreamError {
            status: 504,
            side: Side::Upstream,
            reason: reason.into(),
        }
    }

    /// 503: the backend is at its connection cap and the request could not wait.
    pub(super) fn unavailable(reason: impl Into<String>) -> UpstreamError {
        UpstreamError {
            status: 503,
            side: Side::Upstream,
            reason: reason.into(),
        }
    }

    pub(super) fn from_body(e: BodyError) -> UpstreamError {
        UpstreamError {
            status: if e.side == Side::Downstream { 400 } else { 500 },
            side: e.side,
            reason: format!("request body: {}", e.reason),
        }
    }

    /// The response the client gets.
    pub fn response(&self) -> Response {
        Response::error(self.status)
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Logs why an exchange with `backend` failed (a warning when the backend is to blame).
pub fn log_failure(backend: &Backend, e: &UpstreamError) {
    if !crate::log::emit_request_errors() {
        return;
    }
    if e.side == Side::Upstream {
        tracing::warn!(backend = %backend.name, "proxy: {e}");
    } else {
        tracing::info!(backend = %backend.name, "proxy: {e}");
    }
}

/// Logs a body that broke off mid-way, once, naming the backend and the side that failed.
pub fn log_body_error(backend: &Backend, e: &BodyError) {
    if !crate::log::emit_request_errors() {
        return;
    }
    let name = &backend.name;
    match e.side {
        Side::Upstream => tracing::warn!(backend = %name, "proxy: response body: {}", e.reason),
        _ => tracing::info!(backend = %name, "proxy: request body: {}", e.reason),
    }
}
