//! Listeners, worker threads, accept, connection limits, timeouts and graceful shutdown.
//!
//! One worker thread per `num-threads`, each a tokio `current_thread` runtime with its own
//! SO_REUSEPORT socket for every listen address, its own router (handlers, open-file cache)
//! and access-log buffers. The only state shared between workers is the connection count
//! (for `max-connections`) and the phase of their generation.
//!
//! Reload (SIGHUP): the configuration is read, checked and prepared (`prepare.rs`) again; a
//! new generation of workers gets duplicates of the same listening sockets (so connections
//! waiting in an accept queue are not lost), and once every new worker is set up the old
//! generation drains: it stops accepting, answers what it has, and ends within
//! `shutdown-timeout`.
// Peer input must never panic: outside tests, no unwrap or expect here.

pub mod account;
mod answer_memo;
mod buffers;
mod connection;
mod context;
mod fastcgi_spawn;
mod h1;
mod h2;
mod h2_settings;
mod h3;
mod listen;
pub(crate) mod panics;
pub mod pid_file;
pub mod prepare;
mod proxy_protocol;
mod quic;
mod reload;
mod request_end;
mod request_start;
pub(crate) mod routing;
/// The PROXY header parser, public for its fuzz target only.
#[doc(hidden)]
pub use proxy_protocol::{parse as parse_proxy_header, Header as ProxyHeader};
/// The trailing-PADDING finder of client QUIC packets, public for its fuzz target only.
#[doc(hidden)]
pub use quic::padding_start as quic_padding_start;
mod tls_early;
mod tls_socket;
mod tls_transport;
mod transport;
mod upgrade;
mod wake_flag;
mod worker;

use crate::config::{Config, ListenKind};
use prepare::Prepared;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

/// A server whose sockets are bound, ready to [`Server::run`].
pub struct Server {
    config: Arc<Config>,
    /// The runtime objects of `config` (TLS configurations, the `user` account, ...).
    prepared: Arc<Prepared>,
    /// The file the configuration came from: SIGHUP reads it again.
    source: Option<PathBuf>,
    /// Registered at bind time, so a signal that arrives once we print our address is ours.
    signals: Signals,
    /// Every listen address with its sockets; workers get duplicates of these descriptors.
    listeners: Vec<Bound>,
    /// The executable we were started from: SIGUSR2 starts it again (binary upgrade).
    exe: Option<PathBuf>,
    /// `fastcgi.spawn`'s applications, stopped when the server is dropped.
    spawned: fastcgi_spawn::Spawned,
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
    /// Binds every listener, one socket per worker. A port of 0 is resolved once and shared.
    /// `prepared` is what [`prepare::prepare`] made of `config`.
    pub fn bind(config: Config, prepared: Prepared) -> Result<Server, StartError> {
        // Started by a binary upgrade: the previous process's sockets, kept where still
        // configured (the others close here).
        let inherited = upgrade::inherited().map_err(StartError)?;
        let listeners = Bound::reconcile(&inherited, &config).map_err(StartError)?;
        drop(inherited);
        raise_open_file_limit();
        let signals =
            Signals::register().map_err(|e| StartError(format!("cannot handle signals: {e}")))?;
        Ok(Server {
            config: Arc::new(config),
            prepared: Arc::new(prepared),
            source: None,
            signals,
            listeners,
            exe: std::env::current_exe().ok(),
            spawned: fastcgi_spawn::Spawned::default(),
        })
    }

    /// What must happen as root before serving, in h2o's order: every log opened (and its
    /// command started), the `pid-file` written, the `fastcgi.spawn` applications started,
    /// then the switch to `user`. Returns the pid file, which removes itself when dropped at
    /// exit.
    pub fn settle(&mut self) -> Result<Option<pid_file::PidFile>, StartError> {
        for target in self.config.access_log_targets() {
            if let Err(e) = crate::log::target::open(target) {
                tracing::error!("cannot open access log {target}: {e}");
            }
        }
        let pid_file = match &self.config.pid_file {
            Some(path) => match pid_file::PidFile::write(path) {
                Ok(f) => Some(f),
                // After `user`, the old process's account may not write where root did; the
                // upgrade still goes on.
                Err(e) if upgrade::started_by_upgrade() => {
                    tracing::error!("{e}");
                    None
                }
                Err(e) => return Err(StartError(e)),
            },
            None => None,
        };
        self.spawned = fastcgi_spawn::Spawned::start(&self.config, self.prepared.user.as_ref())?;
        if let Some(account) = &self.prepared.user {
            account.switch_to().map_err(StartError)?;
        }
        Ok(pid_file)
    }

    /// Names the configuration file that SIGHUP reloads.
    pub fn reload_from(mut self, path: PathBuf) -> Server {
        self.source = Some(path);
        self
    }

    /// The addresses actually bound, in configuration order.
    pub fn local_addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.listeners.iter().map(|b| b.addr)
    }

    /// Where the server can be reached: `http://ADDR/` or `https://ADDR/` per listener.
    pub fn urls(&self) -> impl Iterator<Item = String> + '_ {
        self.listeners.iter().map(|b| match &b.unix {
            Some((_, path)) => format!("unix:{}", path.display()),
            None => {
                let scheme = if b.tls { "https" } else { "http" };
                format!("{scheme}://{}/", b.addr)
            }
        })
    }

    /// Serves until SIGTERM or SIGINT, then stops accepting, lets in-flight requests finish
    /// (bounded by `shutdown-timeout`) and returns. SIGHUP reloads the configuration.
    pub fn run(mut self) -> std::io::Result<()> {
        let shared = Arc::new(Shared {
            connections: AtomicUsize::new(0),
            max_connections: AtomicUsize::new(self.config.max_connections.max(1)),
            connection_closed: Notify::new(),
        });
        // Certificates from ACME: the stored ones in use at once, the others ordered on a
        // thread of their own while everything else serves.
        crate::acme::start(&self.config);
        let mut current = Generation::start(
            self.config.clone(),
            self.prepared.clone(),
            &self.listeners,
            &shared,
        )
        .map_err(std::io::Error::other)?;
        upgrade::report_ready();
        let mut draining: Vec<Generation> = Vec::new();
        // After a binary upgrade the new process serves: we drain as for a reload, then exit.
        let mut last = Phase::Stopping;
        loop {
            match self.signals.next() {
                Signal::Stop => break,
                Signal::Upgrade => {
                    if self.upgrade() {
                        last = Phase::Draining;
                        break;
                    }
                }
                Signal::Reopen => {
                    tracing::info!("SIGUSR1: reopening log files");
                    crate::log::reopen::request();
                }
                Signal::Reload => {
                    draining.retain(|g| !g.is_finished());
                    if let Some(next) = self.reload(&shared, &current) {
                        let old = std::mem::replace(&mut current, next);
                        old.set(Phase::Draining);
                        draining.push(old);
                    }
                }
            }
        }
        tracing::info!("shutting down: no new connections, finishing in-flight requests");
        let failed = crate::tls::handshake_failures();
        if failed > 0 {
            tracing::info!("{failed} TLS handshake(s) failed or timed out since start");
        }
        draining.push(current);
        for g in &draining {
            g.set(last);
        }
        for g in draining {
            g.join();
        }
        Ok(())
    }

    /// SIGUSR2: starts the new executable on our sockets. True once it serves.
    fn upgrade(&self) -> bool {
        let Some(exe) = &self.exe else {
            tracing::error!("binary upgrade failed: the path of the executable is unknown");
            return false;
        };
        tracing::info!("SIGUSR2: binary upgrade, starting {}", exe.display());
        let started = Instant::now();
        match upgrade::start(exe, &self.listeners) {
            Ok(pid) => {
                tracing::info!(
                    "binary upgrade: new process {pid} serves (ready in {} ms); this one drains and exits",
                    started.elapsed().as_millis()
                );
                true
            }
            Err(e) => {
                tracing::error!("binary upgrade failed: {e}; still serving");
                false
            }
        }
    }

    /// Reads the configuration again and applies it: in place, in the `current` workers,
    /// when it changes nothing they set up once (`reload::in_place_blocker`), else by
    /// starting workers with it on the same sockets (returned: the caller drains `current`).
    /// On any problem, logs it and returns `None`: the running workers keep serving.
    fn reload(&mut self, shared: &Arc<Shared>, current: &Generation) -> Option<Generation> {
        let Some(path) = &self.source else {
            tracing::warn!("SIGHUP: no configuration file to reload (spate serve)");
            return None;
        };
        let started = Instant::now();
        tracing::info!("reloading {}", path.display());
        // Loading and preparing fail alike: every error logged, the old configuration kept.
        let loaded = crate::config::load_file(path)
            .and_then(|config| prepare::prepare(&config).map(|p| (config, Arc::new(p))));
        let (config, prepared) = match loaded {
            Ok(both) => both,
            Err(errors) => {
                for e in &errors {
                    tracing::error!("{e}");
                }
                tracing::error!(
                    "reload failed: {} error(s) in {}; still serving the previous configuration",
                    errors.len(),
                    path.display()
                );
                return None;
            }
        };
        for w in &config.warnings {
            tracing::warn!("{}: {}", w.at, w.message);
        }
        let listeners = match Bound::reconcile(&self.listeners, &config) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("{e}");
                tracing::error!("reload failed; still serving the previous configuration");
                return None;
            }
        };
        if prepared.user != self.prepared.user || config.pid_file != self.config.pid_file {
            tracing::warn!("a reload does not change user or pid-file: they apply at the next start or binary upgrade");
        }
        let blocker = reload::in_place_blocker(&self.config, &config);
        let config = Arc::new(config);
        // Hosts the reload adds to ACME: their stored certificates, and a thread for them.
        crate::acme::start(&config);
        shared
            .max_connections
            .store(config.max_connections.max(1), Ordering::Relaxed);
        let Some(generation_because) = blocker else {
            let workers = with_bound_ports(config.clone(), &listeners);
            let handshakes = match quic_settings(&workers, &prepared) {
                Ok(q) => routing::Handshakes::new(&workers, &prepared, servers_of(&q)),
                Err(e) => {
                    shared
                        .max_connections
                        .store(self.config.max_connections.max(1), Ordering::Relaxed);
                    tracing::error!("reload failed: {e}; still serving the previous configuration");
                    return None;
                }
            };
            let late = current.apply_in_place(workers, prepared.clone(), handshakes);
            // `generation` on the status page counts successful reloads, in place too.
            crate::metrics::set_server_info(crate::metrics::ServerInfo {
                max_connections: config.max_connections,
                worker_threads: config.num_threads.max(1),
                listeners: listeners.len(),
                generation: 0,
            });
            let mut logs = config.access_log_targets();
            logs.extend(crate::log::reopen::ErrorLog::target());
            crate::log::target::keep_only(&logs);
            self.config = config;
            self.prepared = prepared;
            self.listeners = listeners;
            if late > 0 {
                tracing::error!("reload in place: {late} worker(s) did not confirm in time");
            }
            tracing::info!(
                "reloaded {} in {} ms (in place: no connection closed)",
                path.display(),
                started.elapsed().as_millis()
            );
            return None;
        };
        match Generation::start(config.clone(), prepared.clone(), &listeners, shared) {
            Ok(g) => {
                // The new workers have opened their logs: close those no longer configured.
                let mut logs = config.access_log_targets();
                logs.extend(crate::log::reopen::ErrorLog::target());
                crate::log::target::keep_only(&logs);
                self.config = config;
                self.prepared = prepared;
                // Sockets of removed listeners close once the old workers let go of them.
                self.listeners = listeners;
                tracing::info!(
                    "reloaded {} in {} ms (new worker generation: {generation_because})",
                    path.display(),
                    started.elapsed().as_millis()
                );
                Some(g)
            }
            Err(e) => {
                shared
                    .max_connections
                    .store(self.config.max_connections.max(1), Ordering::Relaxed);
                tracing::error!("reload failed: {e}; still serving the previous configuration");
                None
            }
        }
    }
}

/// One listen address of the configuration and its sockets.
struct Bound {
    /// The address as configured (port 0 included): what a reloaded configuration matches.
    configured: SocketAddr,
    /// The address bound.
    addr: SocketAddr,
    tls: bool,
    /// A QUIC listener: `udp` holds its sockets, `socks` is empty.
    quic: bool,
    /// SO_REUSEPORT sockets, at least one per worker of the configuration that made them.
    socks: Vec<std::net::TcpListener>,
    udp: Vec<std::net::UdpSocket>,
    /// A `type: unix` listener's socket (every worker accepts on it) and its file.
    unix: Option<(std::os::unix::net::UnixListener, PathBuf)>,
}

impl Bound {
    /// The sockets for `config`: those of `old` whose address is still configured (the same
    /// descriptors, so no queued connection is lost), more when there are more workers, and
    /// fresh ones (checked to be free) for new addresses.
    fn reconcile(old: &[Bound], config: &Config) -> Result<Vec<Bound>, String> {
        let workers = config.num_threads.max(1);
        let mut out = Vec::with_capacity(config.listeners.len());
        for l in &config.listeners {
            if let Some(u) = &l.unix {
                // The same socket when the file is still configured: nothing queued is lost.
                let kept = old
                    .iter()
                    .filter_map(|b| b.unix.as_ref())
                    .find(|(_, path)| *path == u.path)
                    .and_then(|(s, _)| s.try_clone().ok());
                let sock = match kept {
                    Some(s) => s,
                    None => listen::bind_unix(u).map_err(|e| {
                        format!("{}: cannot listen on {}: {e}", l.at, u.path.display())
                    })?,
                };
                out.push(Bound {
                    configured: l.addr,
                    addr: l.addr,
                    tls: l.tls.is_some(),
                    quic: false,
                    socks: Vec::new(),
                    udp: Vec::new(),
                    unix: Some((sock, u.path.clone())),
                });
                continue;
            }
            let quic = l.kind == ListenKind::Quic;
            let tuning = listen::Tuning {
                socket: l.socket,
                fastopen: config.tcp_fastopen,
            };
            let bind_tcp = |a| listen::bind(a, &tuning);
            let bound = match old
                .iter()
                .find(|b| b.configured == l.addr && b.quic == quic && b.unix.is_none())
            {
                Some(b) => {
                    let at = &l.at;
                    let addr = b.addr;
                    for s in &b.socks {
                        tuning
                            .apply(socket2::SockRef::from(s))
                            .map_err(|e| format!("{at}: cannot set up {addr}: {e}"))?;
                    }
                    Bound {
                        configured: l.addr,
                        addr,
                        tls: quic || l.tls.is_some(),
                        quic,
                        socks: keep_and_grow(&b.socks, workers, at, addr, bind_tcp)?,
                        udp: keep_and_grow(&b.udp, workers, at, addr, quic::bind)?,
                        unix: None,
                    }
                }
                None if quic => {
                    // Port 0: the TCP listener of the same configured address (bound above,
                    // when listed first) gives the port, so both share one port number.
                    let want = out
                        .iter()
                        .find(|b: &&Bound| b.configured == l.addr && !b.quic)
                        .map_or(l.addr, |b| b.addr);
                    let udp = quic::bind_fresh(want, workers)
                        .map_err(|e| format!("{}: cannot listen on {want} (UDP): {e}", l.at))?;
                    let addr = first_addr(&udp, &l.at)?;
                    Bound {
                        configured: l.addr,
                        addr,
                        tls: true,
                        quic,
                        socks: Vec::new(),
                        udp,
                        unix: None,
                    }
                }
                None => {
                    let socks = listen::bind_fresh(l.addr, workers, &tuning)
                        .map_err(|e| format!("{}: {e}", l.at))?;
                    let addr = first_addr(&socks, &l.at)?;
                    Bound {
                        configured: l.addr,
                        addr,
                        tls: l.tls.is_some(),
                        quic,
                        socks,
                        udp: Vec::new(),
                        unix: None,
                    }
                }
            };
            out.push(bound);
        }
        if out.is_empty() {
            return Err("no listen address configured".into());
        }
        Ok(out)
    }
}

/// The QUIC settings of each listener (`None` for the others), and the TLS warnings of the
/// others logged.
fn quic_settings(
    config: &Config,
    prepared: &Prepared,
) -> Result<Vec<Option<quic::Settings>>, String> {
    let mut out = Vec::with_capacity(config.listeners.len());
    for (l, quic_tls) in config.listeners.iter().zip(&prepared.quic_tls) {
        if l.kind == ListenKind::Quic {
            out.push(Some(quic::Settings::new(config, l, quic_tls.clone())?));
            continue;
        }
        out.push(None);
        warn_tls(l);
    }
    Ok(out)
}

/// The QUIC server configuration of each listener of `quic` (`quic_settings`).
fn servers_of(
    quic: &[Option<quic::Settings>],
) -> impl Iterator<Item = Option<Arc<quinn_proto::ServerConfig>>> + '_ {
    quic.iter().map(|q| q.as_ref().map(|q| q.server.clone()))
}

/// The warnings of a TLS listener's configuration (logged at each start and reload).
fn warn_tls(l: &crate::config::Listen) {
    if let Some(t) = &l.tls {
        for w in &t.warnings {
            tracing::warn!("{w}");
        }
    }
}

/// The configuration the workers see: a listener's port 0 replaced by the port it was bound
/// to (`listeners` are in the configuration's order), so that routing by listener and
/// Alt-Svc name the address clients reach.
fn with_bound_ports(config: Arc<Config>, listeners: &[Bound]) -> Arc<Config> {
    if config.listeners.iter().all(|l| l.addr.port() != 0) {
        return config;
    }
    let mut c = (*config).clone();
    for (l, b) in c.listeners.iter_mut().zip(listeners) {
        if l.addr.port() == 0 {
            l.addr = b.addr;
        }
    }
    Arc::new(c)
}

/// Duplicates of `socks` (the same sockets: nothing queued is lost), and more bound while
/// there are fewer than `workers` (none when `socks` is empty: the listener is of the other
/// kind).
fn keep_and_grow<S: SocketDup>(
    socks: &[S],
    workers: usize,
    at: &crate::config::Location,
    addr: SocketAddr,
    bind: impl Fn(SocketAddr) -> std::io::Result<S>,
) -> Result<Vec<S>, String> {
    let mut out = Vec::with_capacity(socks.len().max(workers));
    for s in socks {
        out.push(s.dup().map_err(|e| format!("{at}: {e}"))?);
    }
    while !out.is_empty() && out.len() < workers {
        out.push(bind(addr).map_err(|e| format!("{at}: cannot listen on {addr}: {e}"))?);
    }
    Ok(out)
}

/// The address the first of `socks` is bound to (they all share it).
fn first_addr<S: SocketDup>(
    socks: &[S],
    at: &crate::config::Location,
) -> Result<SocketAddr, String> {
    match socks.first().map(SocketDup::local_addr) {
        Some(Ok(a)) => Ok(a),
        Some(Err(e)) => Err(format!("{at}: {e}")),
        None => Err(format!("{at}: no socket bound")),
    }
}

/// A bound socket: TCP listeners and UDP sockets.
trait SocketDup: Sized {
    fn dup(&self) -> std::io::Result<Self>;
    fn local_addr(&self) -> std::io::Result<SocketAddr>;
}

impl SocketDup for std::net::TcpListener {
    fn dup(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        std::net::TcpListener::local_addr(self)
    }
}

impl SocketDup for std::net::UdpSocket {
    fn dup(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        std::net::UdpSocket::local_addr(self)
    }
}

/// What a generation of workers is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Set up, but not accepting yet: the previous generation still serves.
    Standby,
    Serving,
    /// Replaced by a reload: stop accepting, finish what is open (idle HTTP/1.1 connections
    /// get their next response with `Connection: close`), bounded by `shutdown-timeout`.
    Draining,
    /// The server stops: as draining, and idle connections close at once.
    Stopping,
}

/// The workers of one configuration.
struct Generation {
    phase: watch::Sender<Phase>,
    /// Reloads the workers apply in place.
    in_place: watch::Sender<Option<Arc<worker::InPlace>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// How long new workers may take to set up before a reload gives up on them.
const WORKER_SETUP_TIMEOUT: Duration = Duration::from_secs(10);

impl Generation {
    /// Starts one worker per `num-threads` on duplicates of `listeners`' sockets, waits until
    /// every one is set up, then lets them accept.
    fn start(
        config: Arc<Config>,
        prepared: Arc<Prepared>,
        listeners: &[Bound],
        shared: &Arc<Shared>,
    ) -> Result<Generation, String> {
        let config = with_bound_ports(config, listeners);
        let workers = config.num_threads.max(1);
        let quic_settings = quic_settings(&config, &prepared)?;
        let handshakes = routing::Handshakes::new(&config, &prepared, servers_of(&quic_settings));
        // Worker i accepts on sockets i, i + workers, ...: every socket has a worker.
        let mut per_worker: Vec<Vec<worker::Socket>> = (0..workers).map(|_| Vec::new()).collect();
        let mut quic_per_worker: Vec<Vec<worker::QuicSocket>> =
            (0..workers).map(|_| Vec::new()).collect();
        let configured = listeners.iter().zip(&config.listeners);
        for ((b, l), quic) in configured.zip(&quic_settings) {
            let acceptor = l.tls.is_some().then(|| routing::ListenKey::of(l));
            if let Some((s, path)) = &b.unix {
                for sockets in &mut per_worker {
                    let dup = s
                        .try_clone()
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    sockets.push(worker::Socket {
                        listener: worker::Listening::Unix(dup),
                        tls: acceptor.clone(),
                        proxy_protocol: l.proxy_protocol.then(|| Arc::from(&[][..])),
                    });
                }
            }
            for (j, s) in b.socks.iter().enumerate() {
                let dup = s.try_clone().map_err(|e| format!("{}: {e}", b.addr))?;
                per_worker[j % workers].push(worker::Socket {
                    listener: worker::Listening::Tcp(dup),
                    tls: acceptor.clone(),
                    proxy_protocol: l
                        .proxy_protocol
                        .then(|| Arc::from(l.proxy_protocol_from.as_slice())),
                });
            }
            if let Some(q) = quic {
                for (j, s) in b.udp.iter().enumerate() {
                    let dup = s.try_clone().map_err(|e| format!("{}: {e}", b.addr))?;
                    quic_per_worker[j % workers].push((dup, q.clone()));
                }
            }
        }
        let (phase, phase_rx) = watch::channel(Phase::Standby);
        let (in_place, in_place_rx) = watch::channel(None);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut generation = Generation {
            phase,
            in_place,
            threads: Vec::with_capacity(workers),
        };
        for (i, (sockets, quic)) in per_worker.into_iter().zip(quic_per_worker).enumerate() {
            let config = config.clone();
            let prepared = prepared.clone();
            let shared = shared.clone();
            let (phase, in_place) = (phase_rx.clone(), in_place_rx.clone());
            let ready = ready_tx.clone();
            let handshakes = handshakes.clone();
            let t = std::thread::Builder::new()
                .name(format!("spate-worker-{i}"))
                .spawn(move || {
                    worker::run(
                        config, prepared, handshakes, sockets, quic, shared, phase, in_place, ready,
                    )
                });
            match t {
                Ok(t) => generation.threads.push(t),
                Err(e) => {
                    generation.abandon();
                    return Err(format!("cannot start a worker thread: {e}"));
                }
            }
        }
        drop(ready_tx);
        let deadline = Instant::now() + WORKER_SETUP_TIMEOUT;
        for _ in 0..workers {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = match ready_rx.recv_timeout(left) {
                Ok(r) => r,
                Err(_) => Err("a worker did not finish setting up".to_string()),
            };
            if let Err(e) = r {
                generation.abandon();
                return Err(e);
            }
        }
        generation.set(Phase::Serving);
        crate::metrics::set_server_info(crate::metrics::ServerInfo {
            max_connections: config.max_connections,
            worker_threads: workers,
            listeners: listeners.len(),
            generation: 0,
        });
        Ok(generation)
    }

    fn set(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }

    /// Has every worker route by `config` from its next request on (`worker::apply_in_place`)
    /// and waits until they do. Returns how many did not confirm in time.
    fn apply_in_place(
        &self,
        config: Arc<Config>,
        prepared: Arc<Prepared>,
        handshakes: routing::Handshakes,
    ) -> usize {
        let (ack, acks) = std::sync::mpsc::channel();
        self.in_place.send_replace(Some(Arc::new(worker::InPlace {
            config,
            prepared,
            handshakes,
            ack,
        })));
        let deadline = Instant::now() + WORKER_SETUP_TIMEOUT;
        let mut late = self.threads.len();
        while late > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match acks.recv_timeout(left) {
                Ok(_) => late -= 1,
                Err(_) => break,
            }
        }
        late
    }

    fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Stops workers that never accepted.
    fn abandon(self) {
        self.set(Phase::Stopping);
        self.join();
    }

    fn join(self) {
        for t in self.threads {
            if t.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
    }
}

/// State every worker sees.
pub(crate) struct Shared {
    /// Open connections across all workers.
    connections: AtomicUsize,
    /// `max-connections` of the newest configuration.
    max_connections: AtomicUsize,
    /// Signalled when a connection closes while the limit was reached.
    connection_closed: Notify,
}

impl Shared {
    /// Waits while the server is at `max-connections`: accepting pauses instead of failing.
    async fn below_limit(&self) {
        self.wait_until(|n| n < self.max()).await;
    }

    /// Takes a connection slot, waiting for one to free up. A worker may have accepted a
    /// connection just as another reached the limit; that connection waits here, unserved.
    async fn open_connection(&self) {
        loop {
            let n = self.connections.load(Ordering::Relaxed);
            if n < self.max() {
                if self
                    .connections
                    .compare_exchange(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            self.wait_until(|n| n < self.max()).await;
        }
    }

    fn max(&self) -> usize {
        self.max_connections.load(Ordering::Relaxed)
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
        if before >= self.max() {
            self.connection_closed.notify_waiters();
        }
    }
}

/// What the main thread was asked to do.
enum Signal {
    /// SIGTERM or SIGINT.
    Stop,
    /// SIGHUP.
    Reload,
    /// SIGUSR1: reopen log files (logrotate).
    Reopen,
    /// SIGUSR2: binary upgrade.
    Upgrade,
}

/// Signal handlers on a small runtime of the main thread.
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _guard = rt.enter();
        let term = signal(SignalKind::terminate())?;
        let int = signal(SignalKind::interrupt())?;
        let hup = signal(SignalKind::hangup())?;
        let usr1 = signal(SignalKind::user_defined1())?;
        let usr2 = signal(SignalKind::user_defined2())?;
        drop(_guard);
        Ok(Signals {
            rt,
            term,
            int,
            hup,
            usr1,
            usr2,
        })
    }

    /// Waits for the next signal.
    fn next(&mut self) -> Signal {
        self.rt.block_on(async {
            tokio::select! {
                _ = self.term.recv() => Signal::Stop,
                _ = self.int.recv() => Signal::Stop,
                _ = self.hup.recv() => Signal::Reload,
                _ = self.usr1.recv() => Signal::Reopen,
                _ = self.usr2.recv() => Signal::Upgrade,
            }
        })
    }
}

/// Each worker's open-file cache and connections need descriptors: lift the soft limit to
/// the hard one, as nginx's worker_rlimit_nofile would.
fn raise_open_file_limit() {
    if let Ok(mut lim) = crate::sys::process::open_file_limit() {
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if crate::sys::process::set_open_file_limit(&lim).is_err() {
                tracing::debug!("could not raise RLIMIT_NOFILE");
            }
        }
    }
}
