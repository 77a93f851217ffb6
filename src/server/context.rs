//! What a worker's connections share (`WorkerCtx`): the configuration, the router, the
//! memos and buffer pools, the stop signals, and the count of open connections.

use super::answer_memo::AnswerMemo;
use super::buffers::BufferPool;
use super::h2_settings::H2Settings;
use super::Shared;
use crate::config::Config;
use crate::handler::Router;
use crate::proto::h1::{HeadLimits, ParseMemo};
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::Notify;

/// A connection's peer and local addresses.
pub(crate) type Addrs = (SocketAddr, SocketAddr);

/// What every connection task of this worker shares.
pub(crate) struct WorkerCtx {
    pub config: Arc<Config>,
    pub router: Router,
    /// `Server: NAME\r\n`, or empty when `send-server-name` is OFF.
    pub(super) server_line: Vec<u8>,
    /// The Server line followed by `Alt-Svc: h3=":PORT"\r\n`, for each TCP port that has a
    /// QUIC listener on the same port number (`http3-alt-svc`); usually empty.
    pub(super) alt_svc_lines: Vec<(u16, Vec<u8>)>,
    pub head_limits: HeadLimits,
    /// The parse of the last request head repeated on this worker (under `head_limits`).
    pub parse_memo: RefCell<ParseMemo>,
    /// The lane's answer to the last request repeated on this worker (`answer_memo.rs`).
    pub answer_memo: RefCell<AnswerMemo>,
    /// HTTP/2 connection settings from the configuration.
    pub h2: H2Settings,
    /// Buffers of idle HTTP/1 connections, for reuse.
    pub buffers: BufferPool,
    /// Set once this worker drains or stops: connections close after their current response.
    pub stopping: Cell<bool>,
    /// Set once the server stops (not when a reload drains this worker): idle connections
    /// and handshakes in progress close at once.
    pub close_idle: Cell<bool>,
    /// Wakes idle connections when draining or stopping begins, and again when a drain turns
    /// into a stop.
    pub stop: Notify,
    /// Idle plain connections leave their task after `http1-idle-park-delay` (HTTP/1.1 and
    /// h2c): the worker has parking for them (`connection/park.rs`).
    pub parks: bool,
    /// A plain HTTP/1.1 connection that answered a request waits in the lane (`http1-lane`).
    pub lane: bool,
    /// Open connections of this worker, to know when a graceful stop is complete.
    pub(super) active: Cell<usize>,
    /// The last connection closed since the allocator was last trimmed.
    pub(super) went_idle: Cell<bool>,
    pub(super) all_closed: Notify,
    pub(super) shared: Arc<Shared>,
}

impl WorkerCtx {
    /// The Server line for a response on local `port`, with `Alt-Svc` when a QUIC listener
    /// shares the port. Preformatted: no allocation per response.
    #[inline(always)]
    pub fn server_line(&self, port: u16) -> &[u8] {
        if self.alt_svc_lines.is_empty() {
            return &self.server_line;
        }
        self.alt_svc_lines
            .iter()
            .find(|(p, _)| *p == port)
            .map_or(&self.server_line[..], |(_, l)| &l[..])
    }

    /// Counts a connection as open in this worker (a graceful stop waits for it).
    pub(super) fn count_open(&self) {
        self.active.set(self.active.get() + 1);
    }

    /// A connection that held a `max-connections` slot closed: frees the slot and counts it.
    pub(super) fn connection_closed(&self) {
        self.shared.closed();
        self.count_closed();
    }

    /// Counts an open connection as closed; the last one wakes a graceful stop.
    pub(super) fn count_closed(&self) {
        self.active.set(self.active.get() - 1);
        if self.active.get() == 0 {
            self.went_idle.set(true);
            self.all_closed.notify_waiters();
        }
    }
}

/// Counts a QUIC connection as open in this worker (a graceful stop waits for it), for its
/// lifetime. QUIC connections have their own limit (`max-quic-connections`), so they take no
/// `max-connections` slot.
pub(crate) struct ActiveGuard<'a> {
    ctx: &'a WorkerCtx,
}

impl ActiveGuard<'_> {
    pub fn new(ctx: &WorkerCtx) -> ActiveGuard<'_> {
        ctx.count_open();
        ActiveGuard { ctx }
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.ctx.count_closed();
    }
}
