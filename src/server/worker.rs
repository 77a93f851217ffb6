//! One worker thread: a current-thread runtime that accepts on its own sockets and runs one
//! task per connection. Everything here is thread-local; nothing is locked per request.

use super::{h1, tls_transport, Shared};
use crate::config::Config;
use crate::handler::Router;
use crate::log::AccessLog;
use crate::proto::h1::HeadLimits;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

/// How often buffered access-log lines are written out even when the buffer is not full.
const LOG_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// What every connection task of this worker shares.
pub(crate) struct WorkerCtx {
    pub config: Arc<Config>,
    pub router: Router,
    /// `Server: NAME\r\n`, or empty when `send-server-name` is OFF.
    pub server_line: Vec<u8>,
    pub head_limits: HeadLimits,
    /// HTTP/2 connection settings from the configuration.
    pub h2: crate::proto::h2::Settings,
    /// Buffers of idle HTTP/1 connections, for reuse.
    pub buffers: super::buffers::BufferPool,
    /// Set once the server is stopping: connections close after their current response.
    pub stopping: Cell<bool>,
    /// Wakes idle connections when stopping begins.
    pub stop: Notify,
    /// Open connections of this worker, to know when a graceful stop is complete.
    active: Cell<usize>,
    all_closed: Notify,
    shared: Arc<Shared>,
}

/// Runs the worker until the server stops. Called on the worker's own thread.
pub(crate) fn run(
    config: Arc<Config>,
    sockets: Vec<(std::net::TcpListener, Option<TlsAcceptor>)>,
    shared: Arc<Shared>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start a worker runtime: {e}");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let mut logs = Vec::new();
        let router = Router::new(&config, &mut logs);
        let server_line = if config.send_server_name {
            format!("Server: {}\r\n", config.server_name).into_bytes()
        } else {
            Vec::new()
        };
        let head_limits = HeadLimits {
            head_size: config.limits.request_head,
            target_size: config.limits.request_target,
            fields: config.limits.request_headers,
            body_size: config.limits.request_body,
        };
        let ctx = Rc::new(WorkerCtx {
            config: config.clone(),
            router,
            server_line,
            head_limits,
            h2: super::h2::settings(&config),
            buffers: Default::default(),
            stopping: Cell::new(false),
            stop: Notify::new(),
            active: Cell::new(0),
            all_closed: Notify::new(),
            shared: shared.clone(),
        });

        let mut accept_tasks = Vec::new();
        for (sock, tls) in sockets {
            match TcpListener::from_std(sock) {
                Ok(listener) => accept_tasks.push(tokio::task::spawn_local(accept_loop(
                    listener,
                    tls,
                    ctx.clone(),
                ))),
                Err(e) => tracing::error!("cannot register a listener: {e}"),
            }
        }
        let flusher = tokio::task::spawn_local(flush_logs_periodically(logs.clone()));

        let mut stop = shared.stop.clone();
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        ctx.stopping.set(true);
        for t in accept_tasks {
            t.abort();
        }
        ctx.stop.notify_waiters();
        let drained = async {
            while ctx.active.get() > 0 {
                let closed = ctx.all_closed.notified();
                if ctx.active.get() == 0 {
                    break;
                }
                closed.await;
            }
        };
        if tokio::time::timeout(config.shutdown_timeout, drained)
            .await
            .is_err()
        {
            tracing::warn!(
                "shutdown-timeout reached with {} connections open; closing them",
                ctx.active.get()
            );
        }
        flusher.abort();
        flush_all(&logs);
    });
}

async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, ctx: Rc<WorkerCtx>) {
    loop {
        ctx.shared.below_limit().await;
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: wait a little instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let local = match stream.local_addr() {
            Ok(a) => a,
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        // Accepted while another worker reached the limit: wait here, unserved, for a slot.
        ctx.shared.open_connection().await;
        let guard = ConnectionGuard::new(ctx.clone());
        let tls = tls.clone();
        tokio::task::spawn_local(async move {
            match tls {
                // Boxed: the TLS state would otherwise enlarge every plain connection's task.
                Some(acceptor) => {
                    Box::pin(tls_transport::serve(
                        stream, acceptor, peer, local, &guard.ctx,
                    ))
                    .await
                }
                None => h1::serve(stream, peer, local, &guard.ctx).await,
            }
            drop(guard);
        });
    }
}

/// Holds a connection's slot for its lifetime, also if its task is dropped at shutdown.
struct ConnectionGuard {
    ctx: Rc<WorkerCtx>,
}

impl ConnectionGuard {
    /// Call after `Shared::open_connection` took the slot.
    fn new(ctx: Rc<WorkerCtx>) -> ConnectionGuard {
        ctx.active.set(ctx.active.get() + 1);
        ConnectionGuard { ctx }
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.ctx.shared.closed();
        self.ctx.active.set(self.ctx.active.get() - 1);
        if self.ctx.active.get() == 0 {
            self.ctx.all_closed.notify_waiters();
        }
    }
}

async fn flush_logs_periodically(logs: Vec<Rc<RefCell<AccessLog>>>) {
    if logs.is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(LOG_FLUSH_INTERVAL);
    loop {
        tick.tick().await;
        flush_all(&logs);
    }
}

fn flush_all(logs: &[Rc<RefCell<AccessLog>>]) {
    for l in logs {
        l.borrow_mut().flush();
    }
}
