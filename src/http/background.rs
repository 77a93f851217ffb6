//! Work a handler leaves running behind its answer (the cache's refresh of a stale entry,
//! RFC 5861): handed over here and started by the worker, which owns the thread's tasks
//! (`server/worker.rs` runs [`next`] in a loop and spawns what it gets). Handlers never
//! spawn tasks themselves.
//!
//! Per thread: a handler and its worker share the thread, and the work is not `Send`.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Waker};

/// One piece of background work.
pub type Work = Pin<Box<dyn Future<Output = ()>>>;

#[derive(Default)]
struct Queue {
    work: Vec<Work>,
    /// The worker's loop, waiting in [`next`].
    waker: Option<Waker>,
}

thread_local! {
    static QUEUE: RefCell<Queue> = RefCell::new(Queue::default());
}

/// Hands `work` to the thread's worker, which starts it on its next turn. Outside a worker
/// (a unit test) it waits for a [`next`] that never comes, and is dropped with the thread.
pub fn spawn(work: impl Future<Output = ()> + 'static) {
    QUEUE.with_borrow_mut(|q| {
        q.work.push(Box::pin(work));
        if let Some(w) = q.waker.take() {
            w.wake();
        }
    });
}

/// The next work handed over on this thread.
pub async fn next() -> Work {
    std::future::poll_fn(|cx| {
        QUEUE.with_borrow_mut(|q| match q.work.pop() {
            Some(w) => Poll::Ready(w),
            None => {
                q.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn work_handed_over_is_given_to_the_worker() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let done = Rc::new(std::cell::Cell::new(0));
        let d = done.clone();
        rt.block_on(async move {
            let waiting = tokio::task::LocalSet::new();
            waiting
                .run_until(async move {
                    let worker = tokio::task::spawn_local(async {
                        loop {
                            tokio::task::spawn_local(next().await);
                        }
                    });
                    tokio::task::yield_now().await;
                    spawn(async move { d.set(d.get() + 1) });
                    for _ in 0..4 {
                        tokio::task::yield_now().await;
                    }
                    worker.abort();
                })
                .await;
        });
        assert_eq!(done.get(), 1);
    }
}
