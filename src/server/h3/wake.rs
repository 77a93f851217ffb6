//! Wake-ups of a request stream's pending answer or streamed body: the stream is marked, and
//! its connection queued for the endpoint driver, which drives only connections that were
//! woken and, in them, polls only streams that were.

use crate::server::wake_flag::{OnWake, WakeFlag};
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use tokio::sync::Notify;

/// Marks kept for reuse per worker thread (a stream's mark is an allocation otherwise).
const SPARE_MAX: usize = 256;

thread_local! {
    // Marks no waker refers to any more, so no stale wake-up can reach their next stream.
    static SPARE: RefCell<Vec<Arc<Flag>>> = const { RefCell::new(Vec::new()) };
}

/// A stream's waker and its mark.
pub(crate) struct StreamWake {
    flag: Arc<Flag>,
    waker: Waker,
}

/// A stream's mark: a wake-up queues its connection for the endpoint driver.
type Flag = WakeFlag<QueueConn>;

struct QueueConn {
    /// The connection's index (set again when the mark is reused).
    conn: AtomicUsize,
    wakes: Arc<Wakes>,
}

impl OnWake for QueueConn {
    // Queue the connection once per mark.
    const ONCE_PER_MARK: bool = true;

    fn woken(&self) {
        self.wakes.wake(self.conn.load(Ordering::Relaxed));
    }
}

impl StreamWake {
    /// A waker for a stream of connection `conn`; it starts marked, so the stream is polled
    /// once.
    pub fn new(conn: usize, wakes: &Arc<Wakes>) -> StreamWake {
        let spare = SPARE
            .try_with(|s| s.borrow_mut().pop())
            .ok()
            .flatten()
            .filter(|f| Arc::ptr_eq(&f.then.wakes, wakes) && Arc::strong_count(f) == 1);
        let flag = match spare {
            Some(f) => {
                f.then.conn.store(conn, Ordering::Relaxed);
                f.mark();
                f
            }
            None => Arc::new(Flag::new(
                true,
                QueueConn {
                    conn: AtomicUsize::new(conn),
                    wakes: wakes.clone(),
                },
            )),
        };
        StreamWake {
            waker: Waker::from(flag.clone()),
            flag,
        }
    }

    /// Whether the stream was woken since the last call; clears the mark.
    pub fn take(&self) -> bool {
        self.flag.take()
    }

    /// Marks the stream to be polled again (it made progress and may make more).
    pub fn mark(&self) {
        self.flag.mark();
    }

    pub fn waker(&self) -> &Waker {
        &self.waker
    }
}

impl Drop for StreamWake {
    /// The mark is kept for another stream when nothing but this holds it (no waker was
    /// cloned into a socket's or a timer's registration).
    fn drop(&mut self) {
        if Arc::strong_count(&self.flag) == 2 {
            let _ = SPARE.try_with(|s| {
                let mut s = s.borrow_mut();
                if s.len() < SPARE_MAX {
                    s.push(self.flag.clone());
                }
            });
        }
    }
}

/// Connections' wake-ups from pending answers and bodies: the connection's index, then a
/// nudge to the driver.
#[derive(Default)]
pub(crate) struct Wakes {
    woken: Mutex<Vec<usize>>,
    notify: Notify,
}

impl Wakes {
    /// Marks connection `conn` to be driven.
    pub fn wake(&self, conn: usize) {
        if let Ok(mut w) = self.woken.lock() {
            w.push(conn);
        }
        self.notify.notify_one();
    }

    /// Completes at the next wake-up (or at once if one came since the last).
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Swaps the marks into `into` (empty), so both vectors keep their capacity across turns.
    pub fn take(&self, into: &mut Vec<usize>) {
        if let Ok(mut w) = self.woken.lock() {
            std::mem::swap(&mut *w, into);
        }
    }
}
