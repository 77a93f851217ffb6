//! The wake flag of a piece of pending work (an HTTP/2 stream's pending answer or body, an
//! HTTP/3 request stream): its waker marks it, then tells its owner (`OnWake`), which polls
//! only the work that was marked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// What a wake-up does besides marking the flag.
pub(crate) trait OnWake: Send + Sync + 'static {
    /// A wake-up of a flag already marked is dropped: the owner is told once per mark.
    const ONCE_PER_MARK: bool;

    fn woken(&self);
}

/// A mark set by its waker (`Arc<WakeFlag<T>>` is the waker) and cleared by its owner before
/// each poll, so a wake-up during the poll is kept.
pub(crate) struct WakeFlag<T> {
    woken: AtomicBool,
    pub then: T,
}

impl<T> WakeFlag<T> {
    pub fn new(marked: bool, then: T) -> WakeFlag<T> {
        WakeFlag {
            woken: AtomicBool::new(marked),
            then,
        }
    }

    /// Whether the flag was marked since the last call; clears the mark.
    pub fn take(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }

    /// Whether the flag is marked (the mark stays).
    pub fn is_marked(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }

    /// Marks the work to be polled again without a wake-up (it made progress and may make
    /// more).
    pub fn mark(&self) {
        self.woken.store(true, Ordering::Release);
    }
}

impl<T: OnWake> Wake for WakeFlag<T> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if T::ONCE_PER_MARK {
            if !self.woken.swap(true, Ordering::AcqRel) {
                self.then.woken();
            }
        } else {
            self.woken.store(true, Ordering::Release);
            self.then.woken();
        }
    }
}

/// The flag of work its connection's task polls: a wake-up wakes the task.
impl OnWake for Waker {
    const ONCE_PER_MARK: bool = false;

    fn woken(&self) {
        self.wake_by_ref();
    }
}
