//! What a worker's connections share (`WorkerCtx`): the routing of the configuration
//! (`routing.rs`, swapped by a reload in place), the memos and buffer pools, the stop
//! signals, and the count of open connections.

use super::answer_memo::AnswerMemo;
use super::buffers::BufferPool;
use super::routing::Routing;
use super::Shared;
use crate::proto::h1::ParseMemo;
use std::cell::{Cell, Ref, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::Notify;

/// A connection's peer and local addresses.
pub(crate) type Addrs = (SocketAddr, SocketAddr);

/// What every connection task of this worker shares.
pub(crate) struct WorkerCtx {
    /// The current configuration's routing. Borrowed only within a synchronous call (never
    /// across an await): the worker swaps it between two turns of its tasks.
    routing: RefCell<Rc<Routing>>,
    /// Counts the swaps: a connection that keeps something of the routing (HTTP/2's memo of
    /// a repeated request's answer) compares it with its own.
    epoch: Cell<u32>,
    /// The parse of the last request head repeated on this worker (under `head_limits`).
    pub parse_memo: RefCell<ParseMemo>,
    /// The lane's answer to the last request repeated on this worker (`answer_memo.rs`).
    pub answer_memo: RefCell<AnswerMemo>,
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
    /// The first connection after none: wakes the worker's housekeeping from its idle sleep.
    pub(super) busy: Notify,
    pub(super) shared: Arc<Shared>,
}

impl WorkerCtx {
    /// A worker's context, routing by `routing`.
    pub(super) fn new(routing: Routing, shared: Arc<Shared>, parks: bool, lane: bool) -> WorkerCtx {
        WorkerCtx {
            routing: RefCell::new(Rc::new(routing)),
            epoch: Cell::new(0),
            parse_memo: RefCell::new(ParseMemo::new()),
            answer_memo: RefCell::default(),
            buffers: Default::default(),
            stopping: Cell::new(false),
            close_idle: Cell::new(false),
            stop: Notify::new(),
            parks,
            lane,
            active: Cell::new(0),
            went_idle: Cell::new(false),
            all_closed: Notify::new(),
            busy: Notify::new(),
            shared,
        }
    }

    /// The current routing, for a synchronous use (a request's start): the borrow must end
    /// before the caller awaits.
    #[inline(always)]
    pub fn routing(&self) -> Ref<'_, Rc<Routing>> {
        self.routing.borrow()
    }

    /// The current routing, kept (by an answer still to come, a connection's settings).
    pub fn current(&self) -> Rc<Routing> {
        self.routing.borrow().clone()
    }

    /// The number of routing swaps so far.
    #[inline(always)]
    pub fn epoch(&self) -> u32 {
        self.epoch.get()
    }

    /// A reload in place: the next requests route by `new`. The memos of this worker hold
    /// answers and heads of the old routes: they go. Returns the old routing (its logs are
    /// flushed when its last answer in progress ends and drops it). `Err` when a borrow is
    /// held (never between two turns, where the worker calls this).
    pub(super) fn swap_routing(&self, new: Rc<Routing>) -> Result<Rc<Routing>, Rc<Routing>> {
        let Ok(mut current) = self.routing.try_borrow_mut() else {
            return Err(new);
        };
        let old = std::mem::replace(&mut *current, new);
        drop(current);
        *self.parse_memo.borrow_mut() = ParseMemo::new();
        *self.answer_memo.borrow_mut() = Default::default();
        self.epoch.set(self.epoch.get().wrapping_add(1));
        Ok(old)
    }

    /// Counts a connection as open in this worker (a graceful stop waits for it).
    pub(super) fn count_open(&self) {
        if self.active.get() == 0 {
            self.busy.notify_one();
        }
        self.active.set(self.active.get() + 1);
    }

    /// Something was counted with no connection open (a QUIC packet before or without a
    /// connection: a Retry, a stateless reset): wakes the housekeeping from its idle sleep so
    /// that the other workers' status pages see it.
    pub(super) fn counted_while_idle(&self) {
        if self.active.get() == 0 {
            self.busy.notify_one();
        }
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
