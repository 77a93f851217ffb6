//! One TCP connection's lifecycle: its states (PROXY line, TLS handshake, HTTP/1, HTTP/2,
//! parked, in the HTTP/1 lane) and every transition between them. The protocol drivers
//! (`h1`, `h2`, `tls_transport`, `park`) serve one state each and return how it ended; only
//! this module moves a connection on. See LIFECYCLE.md beside this file.

mod park;

pub(crate) use park::Parking;

use super::context::{Addrs, WorkerCtx};
use super::h1::{self, Ended, Http2Via, Switched};
use super::tls_early::{self, Handshaken};
use super::tls_socket::TlsSocket;
use super::tls_transport::{self, Alpn, TlsTransport};
use super::transport::{self, Transport};
use super::{h2, panics};
use crate::config::{any_contains, Cidr};
use bytes::BytesMut;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use tokio::net::TcpStream;
use tokio::sync::futures::Notified;
use tokio::time::Sleep;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A worker's connections: what their drivers share, and the parked ones.
pub(crate) struct Connections {
    pub ctx: Rc<WorkerCtx>,
    /// Idle connections parked without their task (`http1-idle-park-delay`) and the
    /// HTTP/1.1 lane (`http1-lane`); `None` when both are off.
    pub parking: Option<Parking>,
}

/// A connection to be parked (`park.rs`): what its next task takes over.
pub(crate) enum Idle {
    /// It waited `http1-idle-park-delay` for its next request: whether a request was
    /// answered yet, and its place in the open-connection count, which it keeps while parked.
    Http1 {
        fresh: bool,
        open: crate::metrics::OpenConnection,
        /// What the lane (`park.rs`) read and answered but could not finish: the task goes on
        /// from there. Boxed: the hand-over is the rare path.
        carried: Option<Box<h1::Carried>>,
    },
    /// It switched to HTTP/2 and has been quiet (`h2::Asleep`).
    Http2(Box<h2::Asleep>),
}

impl Connections {
    /// Serves this worker's parked connections until the worker ends (`park::watch`).
    pub fn watch_parked(self: Rc<Self>) -> impl Future<Output = ()> {
        park::watch(self)
    }

    /// Closes every parked connection (the server stops, or the worker ends).
    pub fn close_parked(&self) {
        if let Some(parking) = &self.parking {
            parking.close_all();
        }
    }
}

/// Serves a connection just accepted, in a task of its own: after its PROXY header when
/// `proxy_protocol` (the ranges of the peers allowed to send one, empty for any), with a TLS
/// handshake when `tls`.
pub(crate) fn open(
    stream: TcpStream,
    addrs: Addrs,
    guard: ConnectionGuard,
    tls: Option<TlsAcceptor>,
    proxy_protocol: Option<&[Cidr]>,
) {
    if let Some(trusted) = proxy_protocol {
        if !trusted.is_empty() && !any_contains(trusted, addrs.0.ip()) {
            // Nobody who reaches the port directly may claim another address.
            tracing::info!(
                peer = %addrs.0,
                "closing a connection: PROXY header from a peer not in proxy-protocol-from"
            );
            return;
        }
        tokio::task::spawn_local(after_proxy_header(stream, addrs, guard, tls));
    } else {
        spawn_connection(stream, addrs, guard, tls, None);
    }
}

/// Puts a plain connection just accepted into the lane (`Listener::Lane` in `worker.rs`).
pub(crate) fn enter_lane(socket: std::net::TcpStream, addrs: Addrs, guard: ConnectionGuard) {
    park::enter(socket, addrs, guard)
}

/// The task of a connection of a `proxy-protocol` listener: reads the PROXY header that opens
/// it, then serves it as the client the header names. One without a valid header is closed.
async fn after_proxy_header(
    mut stream: TcpStream,
    (peer, local): Addrs,
    guard: ConnectionGuard,
    tls: Option<TlsAcceptor>,
) {
    let timeout = guard.ctx().routing().config.handshake_timeout;
    let client = match super::proxy_protocol::read(&mut stream, timeout).await {
        Ok(client) => client.unwrap_or(peer),
        Err(e) => {
            tracing::info!(peer = %peer, "closing a connection: bad PROXY header: {e}");
            return;
        }
    };
    match tls {
        Some(acceptor) => serve_tls(stream, (client, local), guard, acceptor).await,
        None => serve_plain(stream, (client, local), guard, None).await,
    }
}

/// Spawns the task that serves a connection: a new one (TLS when `tls`), or a parked one
/// that became readable (`resumed`).
fn spawn_connection(
    stream: TcpStream,
    addrs: Addrs,
    guard: ConnectionGuard,
    tls: Option<TlsAcceptor>,
    resumed: Option<Idle>,
) {
    match tls {
        Some(acceptor) => {
            tokio::task::spawn_local(serve_tls(stream, addrs, guard, acceptor));
        }
        None => {
            tokio::task::spawn_local(serve_plain(stream, addrs, guard, resumed));
        }
    }
}

/// A plain TCP connection's task. A connection the HTTP/1 driver returns idle is parked
/// (`park.rs`) as the task ends.
async fn serve_plain(
    mut stream: TcpStream,
    addrs: Addrs,
    guard: ConnectionGuard,
    resumed: Option<Idle>,
) {
    // The task's own copies of the socket and addresses, lent to the connection (see
    // `h1::serve`).
    let idle = {
        // Pinned in place, so that the connection's future is stored once in the task.
        let conn = std::pin::pin!(serve_http(&mut stream, &addrs, guard.ctx(), resumed));
        // A panic closes this connection only; the guard still frees its slot.
        panics::contain(conn, &addrs.0).await.flatten()
    };
    match idle {
        Some(idle) => park::park(stream, addrs, guard, idle),
        None => drop(guard),
    }
}

/// Serves a connection in HTTP/1 (new, or resumed from parking or the lane), and in HTTP/2
/// once it switches (prior knowledge or `Upgrade: h2c`) or when it resumes as HTTP/2. Returns
/// the connection when it is to be parked.
fn serve_http<'a, T: Transport + 'a>(
    stream: T,
    addrs: &'a Addrs,
    ctx: &'a WorkerCtx,
    resumed: Option<Idle>,
) -> impl Future<Output = Option<Idle>> + 'a {
    let begin = Begin::of(resumed);
    // A block that owns what it serves holds one copy of it (an async fn would keep its
    // arguments besides): this future lives as long as the connection.
    async move {
        let switched = match begin {
            Begin::Http1(resume) => match h1::serve(stream, addrs, ctx, resume).await {
                Ended::Closed => return None,
                Ended::Idle { fresh, open } => {
                    return Some(Idle::Http1 {
                        fresh,
                        open,
                        carried: None,
                    })
                }
                Ended::Http2(switched) => Http2Conn::from(switched),
            },
            // A resumed HTTP/2 connection goes straight to its driver.
            Begin::Http2(asleep) => Http2Conn::resumed(stream, ctx, asleep),
        };
        serve_switched(switched, addrs, ctx).await
    }
}

/// A connection on its way into the HTTP/2 driver: the bytes read before, how it begins, and
/// its timer and stop signal (registered already).
struct Http2Conn<'a, T> {
    stream: T,
    rbuf: BytesMut,
    start: h2::Start,
    timer: Pin<Box<Sleep>>,
    stop: Pin<Box<Notified<'a>>>,
}

/// Where a connection's task begins.
enum Begin {
    /// In HTTP/1: new, or where it was parked (or handed over by the lane).
    Http1(Option<h1::Resume>),
    /// In HTTP/2, where it was parked.
    Http2(Box<h2::Asleep>),
}

impl Begin {
    fn of(resumed: Option<Idle>) -> Begin {
        match resumed {
            None => Begin::Http1(None),
            Some(Idle::Http1 {
                fresh,
                open,
                carried,
            }) => Begin::Http1(Some(h1::Resume {
                fresh,
                open,
                carried,
            })),
            Some(Idle::Http2(asleep)) => Begin::Http2(asleep),
        }
    }
}

impl<'a, T> Http2Conn<'a, T> {
    /// A parked HTTP/2 connection given a task again: a new timer and stop signal, and a
    /// read buffer.
    fn resumed(stream: T, ctx: &'a WorkerCtx, asleep: Box<h2::Asleep>) -> Self {
        let mut stop = Box::pin(ctx.stop.notified());
        stop.as_mut().enable();
        Http2Conn {
            stream,
            rbuf: ctx.buffers.read_buffer(),
            start: h2::Start::Resumed(asleep),
            timer: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
            stop,
        }
    }
}

impl<'a, T> From<Switched<'a, T>> for Http2Conn<'a, T> {
    fn from(s: Switched<'a, T>) -> Self {
        let start = match s.via {
            Http2Via::Preface => h2::Start::New,
            Http2Via::Upgrade(u) => {
                let u = *u;
                h2::Start::Upgrade(Box::new(h2::Upgrade {
                    request: u.request,
                    settings: u.settings,
                }))
            }
        };
        Http2Conn {
            stream: s.stream,
            rbuf: s.rbuf,
            start,
            timer: s.timer,
            stop: s.stop,
        }
    }
}

/// Serves a connection that switched to HTTP/2 (or resumed as HTTP/2) in its task until it
/// closes, or goes quiet where it parks.
async fn serve_switched<'a, T: Transport>(
    switched: Http2Conn<'a, T>,
    addrs: &Addrs,
    ctx: &'a WorkerCtx,
) -> Option<Idle> {
    let Http2Conn {
        mut stream,
        rbuf,
        start,
        mut timer,
        mut stop,
    } = switched;
    let asleep = serve_h2(&mut stream, addrs, ctx, rbuf, start, &mut timer, &mut stop).await;
    if let Some(asleep) = asleep {
        return Some(Idle::Http2(asleep));
    }
    // After a GOAWAY the client may still send (WINDOW_UPDATE, a PING): unread, that would
    // reset the connection before it read our last responses.
    Box::pin(transport::drain_input(&mut stream)).await;
    None
}

/// Runs the HTTP/2 driver with the connection's timer and stop signal. Boxed: the HTTP/2
/// state would otherwise enlarge every connection's task.
async fn serve_h2<'a, T: Transport>(
    stream: &mut T,
    addrs: &Addrs,
    ctx: &'a WorkerCtx,
    rbuf: BytesMut,
    start: h2::Start,
    timer: &mut Pin<Box<Sleep>>,
    stop: &mut Pin<Box<Notified<'a>>>,
) -> Option<Box<h2::Asleep>> {
    let waits = h2::Waits {
        timer: timer.as_mut(),
        stop: stop.as_mut(),
    };
    Box::pin(h2::serve(stream, *addrs, ctx, rbuf, start, waits)).await
}

/// A TLS connection's task: the handshake, then the protocol ALPN chose. Boxed: the TLS state
/// would otherwise enlarge the task; the handshake apart, so its larger state is freed once
/// it is done.
async fn serve_tls(stream: TcpStream, addrs: Addrs, guard: ConnectionGuard, acceptor: TlsAcceptor) {
    {
        let conn = std::pin::pin!(async {
            let ctx = guard.ctx();
            // `early-data`: the handshake's first half by hand (`tls_early.rs`).
            if acceptor.config().max_early_data_size > 0 {
                return Box::pin(serve_tls_early(stream, acceptor, &addrs, ctx)).await;
            }
            if let Some(tls) =
                Box::pin(tls_transport::handshake(stream, acceptor, addrs.0, ctx)).await
            {
                Box::pin(serve_tls_session(tls, &addrs, ctx)).await
            }
        });
        panics::contain(conn, &addrs.0).await;
    }
    drop(guard);
}

/// A connection on a listener with `early-data`: one whose early data was accepted (HTTP/1.1
/// or HTTP/2) is served from the server's flight on, before the client's Finished; the rest
/// as usual.
async fn serve_tls_early(stream: TcpStream, acceptor: TlsAcceptor, addrs: &Addrs, ctx: &WorkerCtx) {
    match tls_early::handshake(stream, acceptor, addrs.0, ctx).await {
        Some(Handshaken::Stream(tls)) => serve_tls_session(tls, addrs, ctx).await,
        Some(Handshaken::Early(early)) if early.is_h2() => {
            tls_early::serve_h2(*early, *addrs, ctx).await
        }
        Some(Handshaken::Early(early)) => match h1::serve(*early, addrs, ctx, None).await {
            Ended::Closed | Ended::Idle { .. } => {}
            // The HTTP/2 preface on an `http/1.1` connection: not served early.
            Ended::Http2(_) => tracing::debug!(peer = %addrs.0, "HTTP/2 preface in early data"),
        },
        None => {}
    }
}

/// Serves a connection after its handshake with the protocol the client chose in ALPN.
async fn serve_tls_session(tls: Box<TlsStream<TlsSocket>>, addrs: &Addrs, ctx: &WorkerCtx) {
    let alpn = Alpn::of(tls.get_ref().1.alpn_protocol());
    let mut conn = TlsTransport::new(tls);
    match alpn {
        Alpn::H2 => {
            let timer = tokio::time::sleep_until(tokio::time::Instant::now());
            let stop = ctx.stop.notified();
            tokio::pin!(timer, stop);
            stop.as_mut().enable();
            let waits = h2::Waits { timer, stop };
            // Request bytes that came with the client's Finished are answered in the first
            // turn: the server's SETTINGS (and the held tickets) go out with the responses.
            let handed = conn.take_decrypted(&ctx.buffers);
            h2::serve(&mut conn, *addrs, ctx, handed, h2::Start::New, waits).await;
            // As after a cleartext HTTP/2 connection (see `serve_switched`), into a pooled
            // buffer.
            let mut buf = ctx.buffers.read_buffer();
            Box::pin(transport::drain_input_into(&mut conn, &mut buf)).await;
            ctx.buffers.give_read(buf);
        }
        // A TLS connection never parks (`Transport::PARKS`): rustls keeps its state.
        Alpn::Http1 => {
            let early = early_start(&mut conn, ctx);
            serve_http(conn, addrs, ctx, early).await;
        }
        // rustls only selects a protocol from `tls::alpn_protocols`; `acme-tls/1` (a
        // TLS-ALPN-01 validation) ends with its handshake (RFC 8737 §3).
        Alpn::Other => tracing::debug!(peer = %addrs.0, "no driver for the ALPN protocol"),
    }
}

/// Where HTTP/1 starts on a connection whose early data (`early-data`) was accepted: with
/// those bytes read, as if carried. `None` (the usual start) without early data.
fn early_start(conn: &mut TlsTransport, ctx: &WorkerCtx) -> Option<Idle> {
    if !conn.early_data_accepted() {
        return None;
    }
    let carried = h1::Carried {
        rbuf: conn.take_decrypted(&ctx.buffers),
        wbuf: ctx.buffers.write_buffer(),
        file: None,
    };
    Some(Idle::Http1 {
        fresh: true,
        open: crate::metrics::OpenConnection::new(crate::metrics::Proto::Http1),
        carried: Some(Box::new(carried)),
    })
}

/// Holds a connection's slot for its lifetime, also if its task is dropped at shutdown (or
/// while the connection is parked).
pub(crate) struct ConnectionGuard {
    conns: Rc<Connections>,
    transport: crate::metrics::Transport,
}

impl ConnectionGuard {
    /// Call after `Shared::open_connection` took the slot.
    pub fn new(conns: Rc<Connections>, transport: crate::metrics::Transport) -> ConnectionGuard {
        conns.ctx.count_open();
        crate::metrics::connection(transport, true);
        ConnectionGuard { conns, transport }
    }

    /// What the connection's drivers share.
    pub fn ctx(&self) -> &Rc<WorkerCtx> {
        &self.conns.ctx
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        crate::metrics::connection(self.transport, false);
        self.conns.ctx.connection_closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of a future its builder would return, without building it.
    fn future_size<A, F: Future>(_: impl FnOnce(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A connection's task lives as long as the connection: keep it small.
    #[test]
    fn connection_tasks_are_small() {
        let plain = future_size(|(s, a, g): (TcpStream, Addrs, ConnectionGuard)| {
            serve_plain(s, a, g, None)
        });
        let tls = future_size(
            |(s, a, g, t): (TcpStream, Addrs, ConnectionGuard, TlsAcceptor)| serve_tls(s, a, g, t),
        );
        eprintln!("plain connection task: {plain} B, TLS: {tls} B");
        // The HTTP/2 and TLS states are boxed apart: without that, this would be kilobytes.
        assert!(plain <= 1024, "{plain} B");
        assert!(tls <= 512, "{tls} B");
    }
}
