//! One worker thread: a current-thread runtime that accepts on its own sockets and runs one
//! task per connection. Everything here is thread-local; nothing is locked per request.

use super::connection::{self, ConnectionGuard, Connections, Parking};
use super::context::WorkerCtx;
use super::routing::{Handshakes, ListenKey, Routing};
use super::{panics, Phase, Shared};
use crate::config::Config;
use crate::log::AccessLog;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How often buffered access-log lines are written out even when the buffer is not full
/// (`housekeeping`).
const LOG_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// How often at most an idle worker gives memory back (`housekeeping`).
const IDLE_TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// A listening socket of this worker; for a TLS listener, what names its acceptor in the
/// worker's routing (read at each accept: a reload in place may change the certificates).
pub(crate) struct Socket {
    pub listener: Listening,
    pub tls: Option<ListenKey>,
    /// `proxy-protocol`: each connection opens with a PROXY header naming the client, sent
    /// by a peer of these ranges (`proxy-protocol-from`; empty: any peer).
    pub proxy_protocol: Option<Arc<[crate::config::Cidr]>>,
}

/// A TCP listening socket, or the socket of a `type: unix` listener (shared by the workers).
pub(crate) enum Listening {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// The address both ends of a connection to a `type: unix` listener have: it has no IP
/// address (a PROXY header names the client behind the balancer).
const UNIX_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// A UDP socket of a QUIC listener, with the listener's QUIC settings.
pub(crate) type QuicSocket = (std::net::UdpSocket, super::quic::Settings);

/// Runs the worker until its generation is stopped. Called on the worker's own thread.
/// `ready` gets one message once the worker is set up (or could not be); accepting starts
/// when the phase becomes `Serving`.
/// `handshakes`: the listeners' TLS and QUIC configurations; `in_place`: the reloads this
/// generation applies in place.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    config: Arc<Config>,
    prepared: Arc<super::Prepared>,
    handshakes: Handshakes,
    sockets: Vec<Socket>,
    quic: Vec<QuicSocket>,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
    in_place: watch::Receiver<Option<Arc<InPlace>>>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot start a worker runtime: {e}")));
            return;
        }
    };
    panics::install_hook();
    let local = tokio::task::LocalSet::new();
    // The worker's own work runs as a task: the future `block_on` polls on every wake-up
    // of the thread is then only its handle, not this whole state machine.
    let main = local.spawn_local(async move {
        let routing = Routing::build(config.clone(), &prepared, handshakes, None);
        drop(prepared);
        let parking = Parking::new(&config);
        let ctx = Rc::new(WorkerCtx::new(
            routing,
            shared.clone(),
            parking.as_ref().is_some_and(|p| p.parks()),
            parking.as_ref().is_some_and(|p| p.lane()),
        ));

        let conns = Rc::new(Connections {
            ctx: ctx.clone(),
            parking,
        });
        let lane = ctx.lane;
        let mut listeners = Vec::with_capacity(sockets.len());
        for Socket {
            listener: sock,
            tls,
            proxy_protocol,
        } in sockets
        {
            // The lane reads a connection's first bytes as a request: a PROXY header is read
            // by the connection's task first.
            let listener = match sock {
                Listening::Unix(sock) => (tokio::net::UnixListener::from_std(sock))
                    .map(Listener::Unix)
                    .map_err(|e| e.to_string()),
                Listening::Tcp(sock) if lane && tls.is_none() && proxy_protocol.is_none() => {
                    let fd = crate::sys::reactor::register(sock, tokio::io::Interest::READABLE);
                    fd.map(Listener::Lane).map_err(|e| e.to_string())
                }
                Listening::Tcp(sock) => {
                    (TcpListener::from_std(sock).map(Listener::Tokio)).map_err(|e| e.to_string())
                }
            };
            match listener {
                Ok(l) => listeners.push((l, tls, proxy_protocol)),
                Err(e) => {
                    let _ = ready.send(Err(format!("cannot register a listener: {e}")));
                    return;
                }
            }
        }
        let _ = ready.send(Ok(()));
        drop(ready);
        crate::metrics::enable(config.wants_metrics());
        crate::metrics::in_flight::enable(config.wants_requests_listed());
        crate::log::set_emit_request_errors(config.emit_request_errors);
        // Dropped when the worker ends: its counters move to the retired sum.
        let slot = crate::metrics::Slot::register();
        let now = wait_for(&mut phase, |p| p != Phase::Standby).await;
        if now != Phase::Serving {
            return;
        }
        for (listener, tls, proxy_protocol) in listeners {
            tokio::task::spawn_local(accept_loop(listener, tls, proxy_protocol, conns.clone()));
        }
        for (sock, settings) in quic {
            tokio::task::spawn_local(super::quic::serve(sock, settings, ctx.clone()));
        }
        let retired = Rc::new(RefCell::new(Vec::new()));
        let metrics = crate::metrics::enabled();
        // Dropping the slot (with the task, when the worker ends) retires its counters.
        let housekeeper =
            tokio::task::spawn_local(housekeeping(ctx.clone(), retired.clone(), slot, metrics));
        let reloader =
            tokio::task::spawn_local(apply_in_place(ctx.clone(), in_place, retired.clone()));
        let parker = tokio::task::spawn_local(conns.clone().watch_parked());
        // Work handlers leave behind an answer (a cache's refresh) runs as this worker's tasks.
        let background = tokio::task::spawn_local(async {
            loop {
                tokio::task::spawn_local(crate::http::background::next().await);
            }
        });

        let now = wait_for(&mut phase, |p| p >= Phase::Draining).await;
        // Accept loops see this and end, closing this worker's copies of the sockets.
        ctx.stopping.set(true);
        crate::metrics::set_draining();
        ctx.close_idle.set(now == Phase::Stopping);
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
        let stopped = async {
            if now != Phase::Stopping {
                wait_for(&mut phase, |p| p == Phase::Stopping).await;
                ctx.close_idle.set(true);
                ctx.stop.notify_waiters();
            }
            std::future::pending::<()>().await
        };
        let drained_or_stopped = async {
            tokio::select! {
                _ = drained => {}
                _ = stopped => {}
            }
        };
        if tokio::time::timeout(config.shutdown_timeout, drained_or_stopped)
            .await
            .is_err()
        {
            tracing::warn!(
                "shutdown-timeout reached with {} connections open; closing them",
                ctx.active.get()
            );
        }
        housekeeper.abort();
        reloader.abort();
        parker.abort();
        background.abort();
        // The records hold the context (their guards): close them now, not never.
        conns.close_parked();
        flush_all(&ctx, &retired);
    });
    if let Err(e) = local.block_on(&rt, main) {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// Waits until the phase satisfies `done`; a generation whose sender is gone is stopping.
async fn wait_for(phase: &mut watch::Receiver<Phase>, done: impl Fn(Phase) -> bool) -> Phase {
    loop {
        let now = *phase.borrow_and_update();
        if done(now) {
            return now;
        }
        if phase.changed().await.is_err() {
            return Phase::Stopping;
        }
    }
}

/// A listening socket as its accept loop takes connections from it.
enum Listener {
    /// Each connection registered with tokio, for its task.
    Tokio(TcpListener),
    /// Plain TCP with `http1-lane` on: each connection goes straight into the lane
    /// (`connection/park.rs`), with no task and no registration with tokio (the lane's is
    /// the only one).
    Lane(AsyncFd<std::net::TcpListener>),
    /// A `type: unix` listener: each connection's socket is then served as a TCP one (reads,
    /// writes and shutdown are the same calls on both; the addresses are [`UNIX_ADDR`]).
    Unix(tokio::net::UnixListener),
}

/// A connection as its listener gave it.
enum Accepted {
    Tokio(TcpStream),
    Lane(std::net::TcpStream),
}

impl Listener {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Listener::Tokio(l) => l.local_addr(),
            Listener::Lane(l) => l.get_ref().local_addr(),
            Listener::Unix(_) => Ok(UNIX_ADDR),
        }
    }

    async fn accept(&self) -> std::io::Result<(Accepted, SocketAddr)> {
        match self {
            Listener::Tokio(l) => l.accept().await.map(|(s, a)| (Accepted::Tokio(s), a)),
            Listener::Lane(l) => loop {
                let mut ready = l.readable().await?;
                if let Ok(r) = ready.try_io(|l| accept_nonblocking(l.get_ref())) {
                    return r.map(|(s, a)| (Accepted::Lane(s), a));
                }
            },
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                // The same descriptor, as the stream type the connection code takes.
                let fd = std::os::fd::OwnedFd::from(s.into_std()?);
                let s = TcpStream::from_std(std::net::TcpStream::from(fd))?;
                Ok((Accepted::Tokio(s), UNIX_ADDR))
            }
        }
    }
}

impl Accepted {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Accepted::Tokio(s) => s.local_addr(),
            Accepted::Lane(s) => s.local_addr(),
        }
    }

    fn set_nodelay(&self) -> std::io::Result<()> {
        match self {
            Accepted::Tokio(s) => s.set_nodelay(true),
            Accepted::Lane(s) => s.set_nodelay(true),
        }
    }
}

/// One `accept4` of a connection that is non-blocking from the start (std's accept would
/// need one more system call for it), with its peer's address.
fn accept_nonblocking(
    l: &std::net::TcpListener,
) -> std::io::Result<(std::net::TcpStream, SocketAddr)> {
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    let (socket, peer) = socket2::SockRef::from(l).accept4(flags)?;
    let peer = peer
        .as_socket()
        .ok_or_else(|| std::io::Error::other("a peer without an IP address"))?;
    Ok((socket.into(), peer))
}

/// Accepts until the worker drains. A connection accepted is always served: the loop only
/// ends between accepts.
async fn accept_loop(
    listener: Listener,
    tls: Option<ListenKey>,
    proxy_protocol: Option<Arc<[crate::config::Cidr]>>,
    conns: Rc<Connections>,
) {
    let ctx = &conns.ctx;
    // A listener bound to one address gives it to every connection: no getsockname each.
    let bound = match listener {
        Listener::Unix(_) => Some(UNIX_ADDR),
        _ => listener
            .local_addr()
            .ok()
            .filter(|a| !a.ip().is_unspecified()),
    };
    // The listener's TLS acceptor, read again from the routing after a reload in place.
    let mut acceptor = (tls.as_ref()).map(|key| (ctx.epoch(), ctx.routing().acceptor(key)));
    loop {
        let stop = ctx.stop.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if ctx.stopping.get() {
            return;
        }
        let next = async {
            ctx.shared.below_limit().await;
            listener.accept().await
        };
        let accepted = tokio::select! {
            biased;
            _ = &mut stop => return,
            r = next => r,
        };
        let (stream, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: wait a little instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let local = match bound.map_or_else(|| stream.local_addr(), Ok) {
            Ok(a) => a,
            Err(_) => continue,
        };
        let _ = stream.set_nodelay();
        if let (Some(key), Some((epoch, a))) = (&tls, &mut acceptor) {
            if *epoch != ctx.epoch() {
                (*epoch, *a) = (ctx.epoch(), ctx.routing().acceptor(key));
            }
        }
        let tls = match &acceptor {
            None => None,
            Some((_, Some(a))) => Some(a.clone()),
            // A reload in place keeps a listener's TLS (`reload::in_place_blocker`).
            Some((_, None)) => {
                tracing::error!("no TLS configuration for a TLS listener: connection closed");
                continue;
            }
        };
        // Accepted while another worker reached the limit: wait here, unserved, for a slot.
        ctx.shared.open_connection().await;
        let transport = if tls.is_some() {
            crate::metrics::Transport::Tls
        } else {
            crate::metrics::Transport::Tcp
        };
        let guard = ConnectionGuard::new(conns.clone(), transport);
        match stream {
            Accepted::Tokio(stream) => {
                connection::open(stream, (peer, local), guard, tls, proxy_protocol.as_deref())
            }
            Accepted::Lane(socket) => connection::enter_lane(socket, (peer, local), guard),
        }
    }
}

/// A reload the running workers apply in place (`reload.rs`): the new configuration, what
/// `prepare` made of it, and the listeners' handshake configurations. Each worker acknowledges on `ack`
/// once it routes by it.
pub(crate) struct InPlace {
    pub config: Arc<Config>,
    pub prepared: Arc<super::Prepared>,
    pub handshakes: Handshakes,
    pub ack: std::sync::mpsc::Sender<Result<(), String>>,
}

/// Applies each reload in place sent to this generation: builds the new routing on this
/// thread (its handlers are the worker's own), keeping the idle backend connections, and
/// swaps it in between two turns of the connections' tasks.
async fn apply_in_place(
    ctx: Rc<WorkerCtx>,
    mut reloads: watch::Receiver<Option<Arc<InPlace>>>,
    retired: Rc<RefCell<Vec<Weak<Routing>>>>,
) {
    while reloads.changed().await.is_ok() {
        let Some(next) = reloads.borrow_and_update().clone() else {
            continue;
        };
        let pool = ctx.routing().router.pool();
        let routing = Rc::new(Routing::build(
            next.config.clone(),
            &next.prepared,
            next.handshakes.clone(),
            Some(pool),
        ));
        let mut routing = routing;
        // A borrow is only ever held within one synchronous call: the next try succeeds.
        let old = loop {
            match ctx.swap_routing(routing) {
                Ok(old) => break old,
                Err(back) => {
                    routing = back;
                    tokio::task::yield_now().await;
                }
            }
        };
        crate::log::set_emit_request_errors(next.config.emit_request_errors);
        crate::metrics::in_flight::enable(next.config.wants_requests_listed());
        let mut retired = retired.borrow_mut();
        retired.retain(|r| r.strong_count() > 0);
        // Answers in progress keep the old routing; its log lines are flushed while they do.
        if Rc::strong_count(&old) > 1 {
            retired.push(Rc::downgrade(&old));
        }
        drop(retired);
        drop(old);
        let _ = next.ack.send(Ok(()));
    }
}

/// The worker's periodic work, on one timer that runs only while the worker has connections
/// (or just lost its last one), every `PUBLISH_INTERVAL` with metrics on, else every
/// `LOG_FLUSH_INTERVAL`:
/// - metrics: copies this worker's counters to its slot, for the status page and `/metrics`
///   served by the other workers (their own counters they read at once);
/// - access logs: writes buffered lines out every `LOG_FLUSH_INTERVAL` (a line waits at most
///   that long), and reopens the files when asked (SIGUSR1), those of the current routing and
///   of the routings answers in progress still hold (`retired`);
/// - memory: gives it back to the system once the worker went idle after a busy spell (glibc
///   keeps a burst's peak otherwise, e.g. 10,000 proxied exchanges at once), at most once per
///   `IDLE_TRIM_INTERVAL` and only with no connection open, so a busy worker never pays.
///
/// With no connection open, the counters published and unchanged, the lines written and the
/// memory trimmed, it sleeps until the next connection opens (`busy`): an idle worker does not
/// wake at all.
async fn housekeeping(
    ctx: Rc<WorkerCtx>,
    retired: Rc<RefCell<Vec<Weak<Routing>>>>,
    slot: crate::metrics::Slot,
    metrics: bool,
) {
    use tokio::time::Instant;
    let period = if metrics {
        crate::metrics::PUBLISH_INTERVAL
    } else {
        LOG_FLUSH_INTERVAL
    };
    let mut reopen = crate::log::reopen::Requests::default();
    let mut next = Instant::now() + period;
    let mut flush_due = Instant::now() + LOG_FLUSH_INTERVAL;
    let mut trim_due = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = reopen.next() => {
                for_each_log(&ctx, &retired, |l| l.reopen());
                continue;
            }
        }
        let now = Instant::now();
        next = now + period;
        let changed = metrics && slot.publish();
        if now >= flush_due {
            flush_all(&ctx, &retired);
            flush_due = now + LOG_FLUSH_INTERVAL;
        }
        let idle = ctx.active.get() == 0;
        if idle && ctx.went_idle.get() && now >= trim_due {
            ctx.went_idle.set(false);
            super::buffers::trim_allocator();
            trim_due = now + IDLE_TRIM_INTERVAL;
        }
        if !idle || changed || ctx.went_idle.get() {
            continue;
        }
        // Nothing left to do until a connection opens: what the last ones logged goes out now.
        flush_all(&ctx, &retired);
        loop {
            tokio::select! {
                _ = ctx.busy.notified() => break,
                _ = reopen.next() => for_each_log(&ctx, &retired, |l| l.reopen()),
            }
        }
        let now = Instant::now();
        next = now + period;
        flush_due = now + LOG_FLUSH_INTERVAL;
    }
}

fn flush_all(ctx: &WorkerCtx, retired: &RefCell<Vec<Weak<Routing>>>) {
    for_each_log(ctx, retired, |l| l.flush());
}

fn for_each_log(
    ctx: &WorkerCtx,
    retired: &RefCell<Vec<Weak<Routing>>>,
    mut each: impl FnMut(&mut AccessLog),
) {
    let current = ctx.current();
    let retired = retired.borrow();
    let old = retired.iter().filter_map(Weak::upgrade);
    for routing in std::iter::once(current).chain(old) {
        for l in &routing.logs {
            each(&mut l.borrow_mut());
        }
    }
}
