//! The timer an exchange's deadlines share, kept with a pooled connection for the next one.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::time::{Instant, Sleep};

/// A lazily created timer, kept with a pooled connection for its next exchange (creating,
/// registering and dropping a tokio timer per request cost ~900 instructions; moving a
/// registered one later costs one compare-and-swap). A deadline that moves later does not
/// reset it; it re-arms when it fires early.
#[derive(Default)]
pub struct Timer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// Parked since its last use: the next deadline replaces the old one.
    parked: bool,
}

impl Timer {
    pub fn poll_until(&mut self, cx: &mut Context<'_>, at: Instant) -> Poll<()> {
        let sleep = match &mut self.sleep {
            Some(s) => {
                if s.deadline() > at || std::mem::take(&mut self.parked) {
                    s.as_mut().reset(at);
                }
                s
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        loop {
            ready!(sleep.as_mut().poll(cx));
            if Instant::now() >= at {
                return Poll::Ready(());
            }
            sleep.as_mut().reset(at);
        }
    }

    /// Until its next use, the timer wakes no one: the waker of the last exchange (which may
    /// hold that request's task or stream) is replaced with one that does nothing.
    pub fn park(&mut self) {
        if let Some(s) = &mut self.sleep {
            // Outside the task's budget: a spent budget would leave the old waker in place.
            let mut sleep = tokio::task::unconstrained(s.as_mut());
            let noop = &mut Context::from_waker(std::task::Waker::noop());
            let _ = Pin::new(&mut sleep).poll(noop);
            self.parked = true;
        }
    }
}
