//! Listeners, worker threads, accept, connection limits, timeouts and graceful shutdown.
//!
//! One worker thread per `num-threads`, each a tokio `current_thread` runtime with its own
//! SO_REUSEPORT socket for every listen address, its own router (handlers, open-file cache)
//! and access-log buffers. The only state shared between workers is the connection count
//! (for `max-connections`) and the shutdown signal.

mod buffers;
mod h1;
mod h2;
mod listen;
mod tls_transport;
mod transport;
mod worker;

use crate::config::{Config, ListenKind};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{watch, Notify};
use tokio_rustls::TlsAcceptor;

/// A server whose sockets are bound, ready to [`Server::run`].
pub struct Server {
    config: Arc<Config>,
    /// Registered at bind time, so a signal that arrives once we print our address is ours.
    signals: StopSignals,
    /// Per worker, one socket for each listen address, with its TLS acceptor if any.
    sockets: Vec<Vec<(std::net::TcpListener, Option<TlsAcceptor>)>>,
    /// Bound addresses, and whether each is TLS.
    addrs: Vec<(SocketAddr, bool)>,
}

/// Why the server could not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

impl Server {
    /// Binds every listener for every worker. A port of 0 is resolved once and shared.
    pub fn bind(config: Config) -> Result<Server, StartError> {
        let workers = config.num_threads.max(1);
        let mut sockets: Vec<Vec<(std::net::TcpListener, Option<TlsAcceptor>)>> =
            (0..workers).map(|_| Vec::new()).collect();
        let mut addrs = Vec::new();
        for l in &config.listeners {
            if l.kind == ListenKind::Quic {
                return Err(StartError(format!(
                    "{}: listen type quic (HTTP/3) is not supported yet",
                    l.at
                )));
            }
            // One rustls configuration per listener, shared by the workers so that
            // sessions resume whichever worker accepts the next connection.
            let acceptor = match &l.tls {
                Some(tls) => {
                    for w in &tls.warnings {
                        tracing::warn!("{w}");
                    }
                    let c = crate::tls::server_config(tls, &config.session_resumption)
                        .map_err(|e| StartError(format!("{}: {e}", tls.at)))?;
                    Some(TlsAcceptor::from(c))
                }
                None => None,
            };
            let socks = listen::bind_fresh(l.addr, workers)
                .map_err(|e| StartError(format!("{}: {e}", l.at)))?;
            let addr = socks[0]
                .local_addr()
                .map_err(|e| StartError(format!("{}: {e}", l.at)))?;
            for (per_worker, sock) in sockets.iter_mut().zip(socks) {
                per_worker.push((sock, acceptor.clone()));
            }
            addrs.push((addr, l.tls.is_some()));
        }
        if addrs.is_empty() {
            return Err(StartError("no listen address configured".into()));
        }
        raise_open_file_limit();
        let signals = StopSignals::register()
            .map_err(|e| StartError(format!("cannot handle signals: {e}")))?;
        Ok(Server {
            config: Arc::new(config),
            signals,
            sockets,
            addrs,
        })
    }

    /// The addresses actually bound, in configuration order.
    pub fn local_addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.addrs.iter().map(|(a, _)| *a)
    }

    /// Where the server can be reached: `http://ADDR/` or `https://ADDR/` per listener.
    pub fn urls(&self) -> impl Iterator<Item = String> + '_ {
        self.addrs.iter().map(|(a, tls)| {
            let scheme = if *tls { "https" } else { "http" };
            format!("{scheme}://{a}/")
        })
    }

    /// Serves until SIGTERM or SIGINT, then stops accepting, lets in-flight requests finish
    /// (bounded by `shutdown-timeout`) and returns.
    pub fn run(self) -> std::io::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            connections: AtomicUsize::new(0),
            max_connections: self.config.max_connections.max(1),
            connection_closed: Notify::new(),
            stop: stop_rx,
        });
        let mut threads = Vec::new();
        for (i, sockets) in self.sockets.into_iter().enumerate() {
            let config = self.config.clone();
            let shared = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("spate-worker-{i}"))
                .spawn(move || worker::run(config, sockets, shared))?;
            threads.push(t);
        }
        self.signals.wait();
        tracing::info!("shutting down: no new connections, finishing in-flight requests");
        let failed = crate::tls::handshake_failures();
        if failed > 0 {
            tracing::info!("{failed} TLS handshake(s) failed or timed out since start");
        }
        let _ = stop_tx.send(true);
        for t in threads {
            if t.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        Ok(())
    }
}

/// State every worker sees.
pub(crate) struct Shared {
    /// Open connections across all workers.
    connections: AtomicUsize,
    max_connections: usize,
    /// Signalled when a connection closes while the limit was reached.
    connection_closed: Notify,
    /// Becomes `true` when the server is asked to stop.
    stop: watch::Receiver<bool>,
}

impl Shared {
    /// Waits while the server is at `max-connections`: accepting pauses instead of failing.
    async fn below_limit(&self) {
        self.wait_until(|n| n < self.max_connections).await;
    }

    /// Takes a connection slot, waiting for one to free up. A worker may have accepted a
    /// connection just as another reached the limit; that connection waits here, unserved.
    async fn open_connection(&self) {
        loop {
            let n = self.connections.load(Ordering::Relaxed);
            if n < self.max_connections {
                if self
                    .connections
                    .compare_exchange(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            self.wait_until(|n| n < self.max_connections).await;
        }
    }

    async fn wait_until(&self, ready: impl Fn(usize) -> bool) {
        loop {
            let freed = self.connection_closed.notified();
            tokio::pin!(freed);
            // Register interest before checking, so a close in between is not missed.
            freed.as_mut().enable();
            if ready(self.connections.load(Ordering::Relaxed)) {
                return;
            }
            freed.await;
        }
    }

    fn closed(&self) {
        let before = self.connections.fetch_sub(1, Ordering::Relaxed);
        if before >= self.max_connections {
            self.connection_closed.notify_waiters();
        }
    }
}

/// SIGTERM and SIGINT handlers on a small runtime of the main thread.
struct StopSignals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn register() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _guard = rt.enter();
        let term = signal(SignalKind::terminate())?;
        let int = signal(SignalKind::interrupt())?;
        drop(_guard);
        Ok(StopSignals { rt, term, int })
    }

    fn wait(mut self) {
        self.rt.block_on(async {
            tokio::select! {
                _ = self.term.recv() => {}
                _ = self.int.recv() => {}
            }
        });
    }
}

/// Each worker's open-file cache and connections need descriptors: lift the soft limit to
/// the hard one, as nginx's worker_rlimit_nofile would.
fn raise_open_file_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::debug!("could not raise RLIMIT_NOFILE");
            }
        }
    }
}
