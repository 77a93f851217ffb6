//! The cap on connections open to one backend per worker (`proxy.max-connections`) and the
//! queue of requests waiting for one (`proxy.queue.max`, `proxy.queue.timeout`).
//!
//! Each connection under a cap holds a [`Slot`], busy or idle, and gives it up when it
//! closes. A connection released to the pool goes straight to the first request waiting, and
//! a slot given up becomes the first waiter's right to open a new connection: waiters are
//! served in arrival order as soon as something is released, never by polling. A waiter that
//! goes away (its client left, or the timeout) leaves the queue, and passes on what it had
//! been given but not yet taken.

use super::conn::Conn;
use super::timer::Timer;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;

/// The connections to one backend of one worker, and the requests waiting for one.
pub(super) struct Gate {
    cap: u32,
    /// Connections holding a slot (including slots handed to a waiter not yet woken).
    open: Cell<u32>,
    queue_max: usize,
    /// Oldest first; as all wait the same time, they also expire in this order.
    waiters: RefCell<VecDeque<Rc<Waiter>>>,
    /// Whether the task that expires waiters runs (one per gate, only while some wait: no
    /// timer per waiting request).
    expiring: Cell<bool>,
    me: Weak<Gate>,
}

/// One connection's right to be open; dropping it lets the first waiter open one.
pub(super) struct Slot {
    gate: Rc<Gate>,
}

/// What a waiter is given: an idle connection (with its exchanges' timer), or a slot to open
/// a new one.
pub(super) enum Grant {
    Idle(Conn, Timer, Slot),
    Open(Slot),
}

pub(super) struct Waiter {
    /// Still in the gate's queue: not yet served nor expired (a waiter leaves it only by
    /// being taken from the front, or on drop).
    queued: Cell<bool>,
    grant: RefCell<Option<Grant>>,
    waker: Cell<Option<Waker>>,
    deadline: Instant,
    timed_out: Cell<bool>,
}

/// Why a request got no connection: the queue was full, or it waited too long.
pub(super) enum Refused {
    QueueFull,
    Timeout,
}

impl Gate {
    pub(super) fn new(cap: u32, queue_max: usize) -> Rc<Gate> {
        Rc::new_cyclic(|me| Gate {
            cap,
            open: Cell::new(0),
            queue_max,
            waiters: RefCell::new(VecDeque::new()),
            expiring: Cell::new(false),
            me: me.clone(),
        })
    }

    /// A slot for a new connection when the cap allows one now. Requests already waiting
    /// go first.
    pub(super) fn try_open(self: &Rc<Gate>) -> Option<Slot> {
        if self.open.get() >= self.cap || !self.waiters.borrow().is_empty() {
            return None;
        }
        self.open.set(self.open.get() + 1);
        Some(Slot { gate: self.clone() })
    }

    /// Waits in the queue, at most `timeout`, for a connection or a slot.
    pub(super) fn wait(self: &Rc<Gate>, timeout: Duration) -> Result<Wait, Refused> {
        let mut waiters = self.waiters.borrow_mut();
        if waiters.len() >= self.queue_max {
            return Err(Refused::QueueFull);
        }
        let me = Rc::new(Waiter {
            queued: Cell::new(true),
            grant: RefCell::new(None),
            waker: Cell::new(None),
            deadline: Instant::now() + timeout,
            timed_out: Cell::new(false),
        });
        waiters.push_back(me.clone());
        drop(waiters);
        self.start_expiring();
        Ok(Wait {
            gate: self.clone(),
            me,
        })
    }

    fn start_expiring(&self) {
        if self.expiring.replace(true) {
            return;
        }
        let me = self.me.clone();
        tokio::task::spawn_local(async move {
            loop {
                let Some(next) = me.upgrade().and_then(|g| g.expire()) else {
                    return;
                };
                tokio::time::sleep_until(next).await;
            }
        });
    }

    /// Wakes the waiters whose time is up, out of the queue; returns the next deadline, or
    /// `None` (and stops expiring) when no one waits.
    fn expire(&self) -> Option<Instant> {
        let now = Instant::now();
        loop {
            let front = self.waiters.borrow().front().cloned();
            let Some(w) = front else {
                self.expiring.set(false);
                return None;
            };
            if w.deadline > now {
                return Some(w.deadline);
            }
            self.waiters.borrow_mut().pop_front();
            w.queued.set(false);
            w.timed_out.set(true);
            if let Some(waker) = w.waker.take() {
                waker.wake();
            }
        }
    }

    /// The first waiter, out of the queue.
    fn next_waiter(&self) -> Option<Rc<Waiter>> {
        let w = self.waiters.borrow_mut().pop_front()?;
        w.queued.set(false);
        Some(w)
    }

    /// Connections open (for tests and logs).
    pub(super) fn open(&self) -> u32 {
        self.open.get()
    }

    /// Requests waiting.
    pub(super) fn queued(&self) -> usize {
        self.waiters.borrow().len()
    }
}

impl Slot {
    /// Gives a connection released clean to the first waiter; back when none waits.
    pub(super) fn hand_idle(self, conn: Conn, timer: Timer) -> Result<(), (Conn, Timer, Slot)> {
        match self.gate.next_waiter() {
            Some(w) => {
                w.give(Grant::Idle(conn, timer, self));
                Ok(())
            }
            None => Err((conn, timer, self)),
        }
    }
}

impl Waiter {
    fn give(&self, grant: Grant) {
        *self.grant.borrow_mut() = Some(grant);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The slot passes to the first waiter (the count stays), else it is freed.
        match self.gate.next_waiter() {
            Some(w) => w.give(Grant::Open(Slot {
                gate: self.gate.clone(),
            })),
            None => self.gate.open.set(self.gate.open.get().saturating_sub(1)),
        }
    }
}

/// A request waiting in a [`Gate`]'s queue; dropping it leaves the queue.
pub(super) struct Wait {
    gate: Rc<Gate>,
    me: Rc<Waiter>,
}

impl Future for Wait {
    type Output = Result<Grant, Refused>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(g) = self.me.grant.borrow_mut().take() {
            return Poll::Ready(Ok(g));
        }
        if self.me.timed_out.get() {
            return Poll::Ready(Err(Refused::Timeout));
        }
        self.me.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        // Still queued (a client that went away): leave. A waiter that was served or
        // expired is out of the queue already, and a walk of the queue (hundreds long under
        // load) for it cost more than the rest of the proxied request.
        if self.me.queued.get() {
            let mut waiters = self.gate.waiters.borrow_mut();
            match waiters.front() {
                Some(w) if Rc::ptr_eq(w, &self.me) => {
                    waiters.pop_front();
                }
                _ => waiters.retain(|w| !Rc::ptr_eq(w, &self.me)),
            }
        }
        // Given something not taken: the next waiter gets it (a slot passes on when
        // dropped; an idle connection is handed on, or closed when no one waits).
        let grant = self.me.grant.borrow_mut().take();
        if let Some(Grant::Idle(conn, timer, slot)) = grant {
            let _ = slot.hand_idle(conn, timer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_leave_the_queue_served_or_dropped_and_slots_pass_in_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let gate = Gate::new(1, 10);
            let slot = gate.try_open().unwrap();
            let t = Duration::from_secs(60);
            let (w1, w2, w3) = (gate.wait(t).ok(), gate.wait(t).ok(), gate.wait(t).ok());
            let (w1, w2, w3) = (w1.unwrap(), w2.unwrap(), w3.unwrap());
            assert_eq!(gate.queued(), 3);
            // A client that went away leaves from the middle.
            drop(w2);
            assert_eq!(gate.queued(), 2);
            // The slot given up goes to the first waiter, out of the queue.
            drop(slot);
            assert_eq!(gate.queued(), 1);
            assert!(!w1.me.queued.get() && w1.me.grant.borrow().is_some());
            assert!(w3.me.queued.get());
            // Served but gone before taking it: the slot passes to the next.
            drop(w1);
            assert_eq!(gate.queued(), 0);
            assert!(w3.me.grant.borrow().is_some());
            assert_eq!(gate.open(), 1);
            drop(w3);
            assert_eq!(gate.open(), 0);
        });
    }
}
