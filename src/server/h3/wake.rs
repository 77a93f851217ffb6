//! Wake-ups of a request stream's pending answer or streamed body: the stream is marked, and
//! its connection queued for the endpoint driver, which drives only connections that were
//! woken and, in them, polls only streams that were.

use crate::server::quic::Wakes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// A stream's waker and its mark.
pub(crate) struct StreamWake {
    flag: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    woken: AtomicBool,
    conn: usize,
    wakes: Arc<Wakes>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Queue the connection once per mark.
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.wakes.wake(self.conn);
        }
    }
}

impl StreamWake {
    /// A waker for a stream of connection `conn`; it starts marked, so the stream is polled
    /// once.
    pub fn new(conn: usize, wakes: &Arc<Wakes>) -> StreamWake {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            conn,
            wakes: wakes.clone(),
        });
        StreamWake {
            waker: Waker::from(flag.clone()),
            flag,
        }
    }

    /// Whether the stream was woken since the last call; clears the mark.
    pub fn take(&self) -> bool {
        self.flag.woken.swap(false, Ordering::AcqRel)
    }

    /// Marks the stream to be polled again (it made progress and may make more).
    pub fn mark(&self) {
        self.flag.woken.store(true, Ordering::Release);
    }

    pub fn waker(&self) -> &Waker {
        &self.waker
    }
}
