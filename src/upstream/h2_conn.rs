//! One HTTP/2 connection to a backend, shared by the requests on it: the sans-IO
//! [`ClientConn`] and the loop of its driver task (the only one per connection), which writes
//! what the streams queued and reads what the backend sends, waking the streams it concerns.

use super::conn::Conn;
use super::timer::Timer;
use crate::proto::h2::client::{ClientConn, ClientSettings};
use bytes::BytesMut;
use std::cell::RefCell;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::time::Instant;

/// Response bytes read from the backend at once, at least.
const READ_SIZE: usize = 16 * 1024;
/// The read buffer grows by this much when it runs short.
const READ_CHUNK: usize = 64 * 1024;
/// How long a new connection stays open for the requests that were waiting for it.
const UNUSED_GRACE: Duration = Duration::from_secs(1);

/// One HTTP/2 connection to a backend, shared by the requests on it.
pub(super) struct H2Conn {
    inner: RefCell<Inner>,
}

struct Inner {
    state: State,
    conn: ClientConn,
    /// The driver task, woken when a stream queued output.
    driver: Option<Waker>,
    /// Requests waiting for the connection to open.
    waiters: Vec<Waker>,
}

enum State {
    Connecting,
    Open,
    Failed,
    /// ALPN chose HTTP/1.1: the first request takes the connection.
    FellBack(Option<Conn>),
}

impl H2Conn {
    /// A connection about to be made, with the protocol's `settings`.
    pub(super) fn new(settings: ClientSettings) -> H2Conn {
        H2Conn {
            inner: RefCell::new(Inner {
                state: State::Connecting,
                conn: ClientConn::new(settings),
                driver: None,
                waiters: Vec::new(),
            }),
        }
    }

    /// Whether a new request may go on this connection (or wait for it to open).
    pub(super) fn usable(&self) -> bool {
        let inner = self.inner.borrow();
        match inner.state {
            State::Connecting => true,
            State::Open => inner.conn.has_capacity(),
            State::Failed | State::FellBack(_) => false,
        }
    }

    /// Runs `f` on the protocol state, then wakes the driver if there is output to write.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut ClientConn) -> R) -> R {
        let mut inner = self.inner.borrow_mut();
        let r = f(&mut inner.conn);
        if !inner.conn.output().is_empty() {
            if let Some(w) = inner.driver.take() {
                w.wake();
            }
        }
        r
    }

    /// Waits until the connection is no longer connecting.
    pub(super) async fn opened(&self) {
        poll_fn(|cx| {
            let mut inner = self.inner.borrow_mut();
            if matches!(inner.state, State::Connecting) {
                inner.waiters.push(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(())
        })
        .await
    }

    /// The connection could not be made: every request on it fails with `reason`.
    pub(super) fn fail(&self, reason: &str) {
        self.inner.borrow_mut().conn.close(reason);
        self.set_state(State::Failed);
    }

    /// ALPN chose HTTP/1.1: the first request to come takes `io`.
    pub(super) fn fall_back(&self, io: Conn) {
        self.set_state(State::FellBack(Some(io)));
    }

    /// Once open: the connection ALPN chose HTTP/1.1 on, if no other request took it yet.
    /// `None` while it speaks HTTP/2.
    pub(super) fn take_fallback(&self) -> Option<Option<Conn>> {
        match &mut self.inner.borrow_mut().state {
            State::FellBack(c) => Some(c.take()),
            _ => None,
        }
    }

    /// Why the connection failed, if it did.
    pub(super) fn failure(&self) -> Option<String> {
        self.inner.borrow().conn.failure().map(str::to_owned)
    }

    /// Writes and reads on `io` until the connection ends; idle for `keepalive`, it shuts
    /// down.
    pub(super) async fn run(&self, mut io: Conn, keepalive: Duration) {
        self.set_state(State::Open);
        let mut rbuf = BytesMut::new();
        let mut idle = Idle::default();
        poll_fn(|cx| poll_drive(self, &mut io, &mut rbuf, &mut idle, keepalive, cx)).await;
        let mut inner = self.inner.borrow_mut();
        inner.conn.close("the connection to the backend ended");
        inner.state = State::Failed;
    }

    /// Moves to `state`, waking the requests that waited for the connection to open.
    fn set_state(&self, state: State) {
        let mut inner = self.inner.borrow_mut();
        inner.state = state;
        for w in inner.waiters.drain(..) {
            w.wake();
        }
    }
}

/// When the connection became idle, for `proxy.timeout.keepalive`.
#[derive(Default)]
struct Idle {
    since: Option<Instant>,
    timer: Timer,
}

fn poll_drive(
    me: &H2Conn,
    io: &mut Conn,
    rbuf: &mut BytesMut,
    idle: &mut Idle,
    keepalive: Duration,
    cx: &mut Context<'_>,
) -> Poll<()> {
    loop {
        let mut inner = me.inner.borrow_mut();
        if !inner
            .driver
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            inner.driver = Some(cx.waker().clone());
        }
        let c = &mut inner.conn;
        while !c.output().is_empty() {
            match Pin::new(&mut *io).poll_write(cx, c.output()) {
                Poll::Ready(Ok(0)) => {
                    c.close("the backend stopped reading");
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(n)) => c.consume_output(n),
                Poll::Ready(Err(e)) => {
                    c.close(&format!("write failed: {e}"));
                    return Poll::Ready(());
                }
                Poll::Pending => break,
            }
        }
        // TLS holds written records until flushed.
        if let Poll::Ready(Err(e)) = Pin::new(&mut *io).poll_flush(cx) {
            c.close(&format!("write failed: {e}"));
            return Poll::Ready(());
        }
        if c.output().is_empty()
            && (c.failure().is_some() || c.is_closing() && c.stream_count() == 0)
        {
            return Poll::Ready(());
        }
        // Frames keep slices of the buffer alive until the client takes them: read into
        // large chunks, so a new one is needed only every few reads.
        if rbuf.capacity() - rbuf.len() < READ_SIZE {
            rbuf.reserve(READ_CHUNK);
        }
        match io.poll_read_buf(cx, rbuf, READ_SIZE) {
            Poll::Ready(Ok(0)) => {
                c.close("the backend closed the connection");
                return Poll::Ready(());
            }
            Poll::Ready(Ok(_)) => {
                c.receive(rbuf);
                continue;
            }
            Poll::Ready(Err(e)) => {
                c.close(&format!("read failed: {e}"));
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
        if c.stream_count() > 0 {
            idle.since = None;
            return Poll::Pending;
        }
        let since = *idle.since.get_or_insert_with(Instant::now);
        // A new connection waits for the request it was opened for, whatever the keep-alive.
        let keep = match c.ever_used() {
            true => keepalive,
            false => keepalive.max(UNUSED_GRACE),
        };
        drop(inner);
        if idle.timer.poll_until(cx, since + keep).is_pending() {
            return Poll::Pending;
        }
        me.inner.borrow_mut().conn.shut_down();
    }
}
