//! The endpoint driver: one task per worker and QUIC listener. It reads datagrams (GRO
//! batches) from the worker's socket, hands each to quinn's endpoint or to the endpoint that
//! owns it (`route`), lets every connection that got input, a timer or a wake-up do its HTTP/3
//! work (`server::h3`), and sends what the connections produced (GSO batches). It waits on
//! the socket, its inbox of forwarded datagrams, the earliest connection timer, the wake-ups
//! of pending answers and bodies, and the worker's stop signal.

use super::early;
use super::initial;
use super::route::{self, Forwarded, Route};
use super::Settings;
use crate::config::Retry;
use crate::metrics::quic::{self as quic_metrics, Event as QuicEvent};
use crate::metrics::quic_admission as admission;
use crate::proto::h3::qpack;
use crate::server::context::{ActiveGuard, WorkerCtx};
use crate::server::h3::{H3Conn, Wakes};
use crate::server::panics::contain_step;
use bytes::BytesMut;
use quinn_proto::{
    ConnectionHandle, DatagramEvent, Endpoint, EndpointEvent, Event, Incoming, Transmit,
};
use quinn_udp::{RecvMeta, UdpSocketState};
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Datagrams read per turn before the connections get to run.
const READ_BUDGET: usize = 256;
/// recvmmsg batch: how many (GRO) buffers one read fills.
const RECV_BATCH: usize = 8;
/// Transmits one connection may send per turn; it is driven again next turn if it has more.
const SEND_BUDGET: usize = 32;
/// HTTP/3's H3_NO_ERROR, for a graceful CONNECTION_CLOSE.
const H3_NO_ERROR: u32 = 0x100;
/// HTTP/3's H3_INTERNAL_ERROR, for a connection whose handling failed (a contained panic).
const H3_INTERNAL_ERROR: u32 = 0x102;
/// Turns the driver runs back to back before it lets the worker's other tasks run.
const TURNS_PER_YIELD: u32 = 8;

/// QUIC connections open across all workers and listeners (`max-quic-connections`).
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Serves one QUIC socket of this worker until the worker stops and its connections end.
pub(crate) async fn serve(sock: std::net::UdpSocket, settings: Settings, ctx: Rc<WorkerCtx>) {
    let Some(route) = Route::register() else {
        tracing::error!("too many QUIC endpoints in this process");
        return;
    };
    let local = match sock.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!("QUIC socket: {e}");
            return;
        }
    };
    let state = match UdpSocketState::new((&sock).into()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("QUIC socket {local}: {e}");
            return;
        }
    };
    let sock = match UdpSocket::from_std(sock) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("QUIC socket {local}: {e}");
            return;
        }
    };
    let endpoint = Endpoint::new(
        Arc::new(super::endpoint_config(&settings.quic, route.tag)),
        Some(settings.server.clone()),
        true,
        None,
    );
    let gso = if ctx.routing().config.http3.gso {
        state.max_gso_segments()
    } else {
        1
    };
    let gro = state.gro_segments().clamp(1, 64);
    let payload = usize::from(settings.quic.max_udp_payload_size).max(1500);
    let recv_chunk = super::batch::receive_buffer(payload, gro);
    let mut d = Driver {
        ctx: &ctx,
        settings: &settings,
        epoch: ctx.epoch(),
        local,
        sock,
        state,
        endpoint,
        conns: Vec::new(),
        open: 0,
        wakes: Arc::new(Wakes::default()),
        woken: Vec::new(),
        dirty: Vec::new(),
        failed: Vec::new(),
        earliest: None,
        recv_buf: vec![0; RECV_BATCH * recv_chunk],
        send_buf: Vec::with_capacity(64 << 10),
        gso,
        // quinn keeps the RFC's factor of 3: a lower `amp-limit` is met by validating first.
        retry: if settings.quic.amp_limit < 3 {
            Retry::On
        } else {
            settings.quic.retry
        },
        shutdown_at: None,
        encoder: qpack::Encoder::default(),
    };
    // The driver polls every request's handler and body itself, inside this one task: under
    // tokio's cooperative budget (128 I/O operations per task poll, meant for one connection)
    // the streams of a busy turn would find every socket "not ready" once it is spent and be
    // woken again at once, polled a dozen times per request. The driver bounds its own turns
    // instead (TURNS_PER_YIELD, and the read and send budgets).
    tokio::task::unconstrained(d.run(route)).await;
}

struct Driver<'a> {
    ctx: &'a WorkerCtx,
    settings: &'a Settings,
    /// The worker's routing epoch the endpoint's server configuration is of: after a reload
    /// in place, the next new connection takes the routing's (its certificates).
    epoch: u32,
    local: SocketAddr,
    sock: UdpSocket,
    state: UdpSocketState,
    endpoint: Endpoint,
    /// By `ConnectionHandle` index.
    conns: Vec<Option<Conn<'a>>>,
    open: usize,
    wakes: Arc<Wakes>,
    /// The wake marks taken this turn (kept for its capacity).
    woken: Vec<usize>,
    /// Connections to drive this turn (may repeat).
    dirty: Vec<usize>,
    /// Connections quinn-proto panicked in during the timer scan, to discard after it.
    failed: Vec<usize>,
    /// The earliest connection timer, or earlier: a timer that moved later is only seen at
    /// the next scan. Turns before it do no work per connection for timers.
    earliest: Option<Instant>,
    recv_buf: Vec<u8>,
    send_buf: Vec<u8>,
    /// Datagrams per send (1 without GSO).
    gso: usize,
    /// When a new client's address is validated with a Retry first.
    retry: Retry,
    /// Set once the worker stops: connections still open then are closed.
    shutdown_at: Option<Instant>,
    /// The QPACK encoder of every connection's responses, with its memos: answers on one
    /// connection make the lines the next connection's answers reuse.
    encoder: qpack::Encoder,
}

struct Conn<'a> {
    quic: quinn_proto::Connection,
    h3: H3Conn<'a>,
    /// Counted among the handshakes under way (`retry: auto`).
    handshaking: bool,
    /// The client sent 0-RTT packets (counted as accepted or refused when the handshake ends).
    sent_0rtt: bool,
    /// Set when queued for this turn, so a connection is driven once per turn.
    queued: bool,
    /// GOAWAY sent.
    closing: bool,
    /// Its HTTP/3 handling panicked: it is being closed (H3_INTERNAL_ERROR) and its HTTP/3
    /// state is not touched again.
    broken: bool,
    /// quinn's next timer, as of the last time the connection was driven.
    timeout: Option<Instant>,
    /// The client address the connection was last driven with: a change is a migration.
    path: SocketAddr,
    _active: ActiveGuard<'a>,
    _open: crate::metrics::OpenConnection,
}

impl<'a> Driver<'a> {
    async fn run(&mut self, mut route: Route) {
        let mut forwarded = Vec::new();
        let mut stop_seen = false;
        // One timer for the driver's life, moved only when the deadline changes.
        let sleep = tokio::time::sleep_until(tokio::time::Instant::now());
        tokio::pin!(sleep);
        let mut armed: Option<Instant> = None;
        let mut turns = 0u32;
        loop {
            turns += 1;
            if turns % TURNS_PER_YIELD == 0 {
                // Unconstrained, the driver never runs out of budget: let the worker's TCP
                // connections run between busy turns.
                tokio::task::yield_now().await;
            }
            let now = Instant::now();
            while let Ok(f) = route.inbox.try_recv() {
                forwarded.push(f);
            }
            for f in forwarded.drain(..) {
                self.on_datagram(now, f.remote, f.local_ip, f.ecn, f.data);
            }
            let reading = self.reading();
            if reading {
                if let Err(e) = self.read_socket(now, route.tag) {
                    tracing::warn!("QUIC socket {}: {e}", self.local);
                }
            }
            if self.ctx.stopping.get() && !stop_seen {
                stop_seen = true;
                self.begin_shutdown(now);
            }
            self.on_timers(now);
            self.take_wakes();
            self.drive_dirty(now).await;
            if self.open == 0 {
                self.ctx.counted_while_idle();
            }
            if stop_seen && self.open == 0 {
                tracing::debug!("QUIC endpoint {}: stopped, no connection left", self.local);
                return;
            }

            let deadline = self.next_timeout();
            let stop = self.ctx.stop.notified();
            tokio::pin!(stop);
            stop.as_mut().enable();
            if self.ctx.stopping.get() != stop_seen || !self.dirty.is_empty() {
                continue;
            }
            if let Some(d) = deadline.filter(|d| armed != Some(*d)) {
                sleep.as_mut().reset(d.into());
                armed = Some(d);
            }
            let reading = self.reading();
            tokio::select! {
                r = self.sock.readable(), if reading => {
                    if let Err(e) = r {
                        tracing::warn!("QUIC socket {}: {e}", self.local);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                f = route.inbox.recv() => forwarded.extend(f),
                _ = &mut sleep, if deadline.is_some() => armed = None,
                _ = self.wakes.notified() => {}
                _ = &mut stop, if !stop_seen => {}
            }
        }
    }

    /// Whether this endpoint reads its socket. A generation drained by a reload leaves the
    /// socket to the new generation, which forwards the packets of our connections to us.
    fn reading(&self) -> bool {
        !self.ctx.stopping.get() || self.ctx.close_idle.get()
    }

    /// Reads until the socket is empty or the budget is spent.
    fn read_socket(&mut self, now: Instant, our_tag: u16) -> io::Result<()> {
        let mut metas = [RecvMeta::default(); RECV_BATCH];
        let mut read = 0;
        let mut drained = false;
        while read < READ_BUDGET && !drained {
            let chunk = self.recv_buf.len() / RECV_BATCH;
            let n = {
                let mut chunks = self.recv_buf.chunks_mut(chunk);
                let mut bufs: [IoSliceMut<'_>; RECV_BATCH] =
                    std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
                let state = &self.state;
                let sock = &self.sock;
                let mut got = 0;
                // A batch that came back short took every datagram queued: the readiness is
                // cleared with it (as by a `WouldBlock`), so the next turn waits for the next
                // datagram instead of a recvmmsg that finds nothing.
                let r = sock.try_io(Interest::READABLE, || {
                    got = state.recv(sock.into(), &mut bufs, &mut metas)?;
                    if got < RECV_BATCH {
                        Err(io::ErrorKind::WouldBlock.into())
                    } else {
                        Ok(got)
                    }
                });
                match r {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        drained = true;
                        got
                    }
                    Err(e) => return Err(e),
                }
            };
            // Out of `self` while its datagrams are handled.
            let recv_buf = std::mem::take(&mut self.recv_buf);
            for (i, meta) in metas.iter().enumerate().take(n) {
                let buf = &recv_buf[i * chunk..i * chunk + meta.len];
                let stride = meta.stride.max(1);
                let ecn = meta
                    .ecn
                    .and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8));
                for seg in buf.chunks(stride) {
                    read += 1;
                    let data = BytesMut::from(seg);
                    if let Some(tag) = route::tag_of(seg).filter(|t| *t != our_tag) {
                        if route::is_initial(seg) && self.first_flight_or_ownerless(tag, seg) {
                            self.on_datagram(now, meta.addr, meta.dst_ip, ecn, data);
                            continue;
                        }
                        let f = Forwarded {
                            data,
                            remote: meta.addr,
                            local_ip: meta.dst_ip,
                            ecn,
                        };
                        if route::forward(tag, f) {
                            quic_metrics::count(QuicEvent::Forwarded);
                            tracing::trace!(tag, from = %meta.addr, "forwarded a datagram to its endpoint");
                            continue;
                        }
                        // No such endpoint (any more): quinn answers it.
                        self.on_datagram(now, meta.addr, meta.dst_ip, ecn, BytesMut::from(seg));
                        continue;
                    }
                    self.on_datagram(now, meta.addr, meta.dst_ip, ecn, data);
                }
            }
            self.recv_buf = recv_buf;
        }
        Ok(())
    }

    /// Whether an Initial packet whose destination ID names another endpoint's tag stays
    /// here: nobody holds that tag, or the ID is the client's own (its first flight, which
    /// the endpoint that read it accepts). Otherwise it is a later Initial of a handshake that
    /// endpoint began (`initial.rs`).
    fn first_flight_or_ownerless(&self, tag: u16, datagram: &[u8]) -> bool {
        !route::has_owner(tag)
            || initial::opens_as_first_flight(&*self.settings.server.crypto, datagram)
    }

    fn on_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<quinn_proto::EcnCodepoint>,
        data: BytesMut,
    ) {
        crate::metrics::received(data.len() as u64);
        // Long-header packets come only during a handshake: short ones skip this at once.
        let sent_0rtt = early::carries_0rtt(&data);
        let mut buf = Vec::new();
        // quinn-proto's work on a datagram is contained like ours (a panic there would end
        // the task that drives every QUIC connection of the worker): a datagram the endpoint
        // panicked on is dropped; a connection quinn panicked in is discarded.
        let endpoint = &mut self.endpoint;
        let event = contain_step(&remote, || {
            #[cfg(debug_assertions)]
            crate::server::panics::debug_panic_on_datagram(data.len());
            endpoint.handle(now, remote, local_ip, ecn, data, &mut buf)
        });
        match event.flatten() {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                if let Some(Some(c)) = self.conns.get_mut(ch.0) {
                    c.sent_0rtt |= sent_0rtt;
                    if contain_step(&remote, || c.quic.handle_event(ev)).is_none() {
                        self.discard(ch.0);
                        return;
                    }
                    queue(&mut self.dirty, ch.0, c);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                self.on_incoming(now, incoming, sent_0rtt)
            }
            Some(DatagramEvent::Response(t)) => {
                quic_metrics::answered(&buf);
                self.send_one(&t, &buf);
            }
            None => {}
        }
    }

    /// A new connection: refused past `max-quic-connections` or while stopping, sent a Retry
    /// when the address is to be validated first, else accepted.
    fn on_incoming(&mut self, now: Instant, incoming: Incoming, sent_0rtt: bool) {
        let mut buf = Vec::new();
        if self.epoch != self.ctx.epoch() {
            self.epoch = self.ctx.epoch();
            let server = self.ctx.routing().quic_server(&self.settings.listener);
            if let Some(server) = server {
                self.endpoint.set_server_config(Some(server));
            }
        }
        let max = self.ctx.routing().config.http3.max_connections;
        if self.ctx.stopping.get() || OPEN.load(Ordering::Relaxed) >= max {
            let t = self.endpoint.refuse(incoming, &mut buf);
            self.send_one(&t, &buf);
            return;
        }
        if self.validate_first(now) && !incoming.remote_address_validated() && incoming.may_retry()
        {
            match self.endpoint.retry(incoming, &mut buf) {
                Ok(t) => {
                    admission::retry_sent();
                    self.send_one(&t, &buf);
                }
                Err(e) => self.endpoint.ignore(e.into_incoming()),
            }
            return;
        }
        let remote = incoming.remote_address();
        match self.endpoint.accept(incoming, now, &mut buf, None) {
            Ok((ch, quic)) => {
                OPEN.fetch_add(1, Ordering::Relaxed);
                self.open += 1;
                let local = SocketAddr::new(
                    quic.local_ip().unwrap_or(self.local.ip()),
                    self.settings.port,
                );
                admission::handshaking(true);
                admission::handshake_begun(now);
                let conn = Conn {
                    quic,
                    h3: H3Conn::new(self.ctx, remote, local, ch.0, self.wakes.clone()),
                    handshaking: true,
                    sent_0rtt,
                    queued: false,
                    closing: false,
                    broken: false,
                    timeout: None,
                    path: remote,
                    _active: ActiveGuard::new(self.ctx),
                    _open: crate::metrics::OpenConnection::new(crate::metrics::Proto::Http3),
                };
                crate::metrics::connection(crate::metrics::Transport::Quic, true);
                if self.conns.len() <= ch.0 {
                    self.conns.resize_with(ch.0 + 1, || None);
                }
                self.conns[ch.0] = Some(conn);
                self.dirty.push(ch.0);
            }
            Err(e) => {
                tracing::debug!(peer = %remote, "QUIC connection not accepted: {}", e.cause);
                if let Some(t) = e.response {
                    self.send_one(&t, &buf);
                }
            }
        }
    }

    /// Whether a new connection's address is validated with a Retry first: always, never, or
    /// (`retry: auto`) while `retry-threshold` handshakes or more are under way, so a flood
    /// of Initial packets from forged addresses holds no more state than that, or once
    /// `retry-rate` handshakes began this second, so such a flood costs a TLS handshake's
    /// work (a signature) for no more than that many a second.
    fn validate_first(&self, now: Instant) -> bool {
        let q = &self.settings.quic;
        match self.retry {
            Retry::On => true,
            Retry::Off => false,
            Retry::Auto => {
                admission::handshakes_under_way() >= q.retry_threshold as usize
                    || (q.retry_rate > 0
                        && admission::handshakes_begun_this_second(now) >= q.retry_rate)
            }
        }
    }

    /// Queues the connections whose streams were woken.
    fn take_wakes(&mut self) {
        self.wakes.take(&mut self.woken);
        for &i in &self.woken {
            if let Some(Some(c)) = self.conns.get_mut(i) {
                queue(&mut self.dirty, i, c);
            }
        }
        self.woken.clear();
    }

    /// Connections whose timer expired handle it (they are driven this turn, which reads
    /// their next timer).
    fn on_timers(&mut self, now: Instant) {
        if self.earliest.is_some_and(|t| t <= now) {
            let mut next = None;
            for (i, slot) in self.conns.iter_mut().enumerate() {
                let Some(c) = slot else { continue };
                match c.timeout {
                    Some(t) if t <= now => {
                        c.timeout = None;
                        let peer = c.quic.remote_address();
                        if contain_step(&peer, || c.quic.handle_timeout(now)).is_none() {
                            self.failed.push(i);
                            continue;
                        }
                        queue(&mut self.dirty, i, c);
                    }
                    Some(t) => next = earlier(next, Some(t)),
                    None => {}
                }
            }
            self.earliest = next;
            for i in std::mem::take(&mut self.failed) {
                self.discard(i);
            }
        }
        if let Some(at) = self.shutdown_at.filter(|at| *at <= now) {
            self.shutdown_at = None;
            for (i, slot) in self.conns.iter_mut().enumerate() {
                let Some(c) = slot else { continue };
                c.quic.close(now, H3_NO_ERROR.into(), bytes::Bytes::new());
                queue(&mut self.dirty, i, c);
            }
            tracing::debug!("http3-graceful-shutdown-timeout at {at:?}: closed what was open");
        }
    }

    fn next_timeout(&self) -> Option<Instant> {
        earlier(self.earliest, self.shutdown_at)
    }

    /// The worker stops or drains: every connection gets a GOAWAY, and
    /// `http3-graceful-shutdown-timeout` (if set) bounds how long they may finish.
    fn begin_shutdown(&mut self, now: Instant) {
        let grace = self.ctx.routing().config.http3.graceful_shutdown_timeout;
        if !grace.is_zero() {
            self.shutdown_at = Some(now + grace);
        }
        for (i, slot) in self.conns.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            queue(&mut self.dirty, i, c);
        }
    }

    /// Lets every queued connection process its events, do its HTTP/3 work and send. One
    /// that has more to send is queued again for the next turn, after reading the socket
    /// (its acknowledgements) and the others.
    async fn drive_dirty(&mut self, now: Instant) {
        let end = self.dirty.len();
        for k in 0..end {
            let i = self.dirty[k];
            let more = self.drive(i, now).await;
            if let Some(Some(c)) = self.conns.get_mut(i) {
                c.queued = more;
                if more {
                    self.dirty.push(i);
                }
            }
        }
        self.dirty.drain(..end);
    }

    /// Drives connection `i`; true if it has more to send.
    async fn drive(&mut self, i: usize, now: Instant) -> bool {
        let stopping = self.ctx.stopping.get();
        let Some(Some(c)) = self.conns.get_mut(i) else {
            return false;
        };
        let encoder = &mut self.encoder;
        if c.broken {
            while c.quic.poll().is_some() {}
        } else {
            // A panic in one connection's HTTP/3 work (a bug) closes that connection only.
            let peer = c.quic.remote_address();
            let worked = crate::server::panics::contain_step(&peer, || {
                while let Some(ev) = c.quic.poll() {
                    match ev {
                        Event::Connected => {
                            quic_metrics::handshake();
                            c.h3.on_connected(&mut c.quic);
                        }
                        Event::ConnectionLost { reason } => c.h3.on_lost(reason),
                        Event::Stream(s) => c.h3.on_stream_event(s),
                        _ => {}
                    }
                }
                c.h3.drive(&mut c.quic, encoder, now);
            });
            if worked.is_none() {
                c.broken = true;
                c.closing = true;
                c.quic
                    .close(now, H3_INTERNAL_ERROR.into(), bytes::Bytes::new());
            }
        }
        if c.handshaking && !c.quic.is_handshaking() {
            c.handshaking = false;
            admission::handshaking(false);
            if !c.quic.is_closed() {
                admission::zero_rtt(c.sent_0rtt, c.quic.has_0rtt());
            }
        }
        // A handshake under way when the worker began to drain completes first (a reload or
        // an upgrade may have come between the client's first and second flights): closing
        // it would fail the client's connection attempt; once connected, it is told to go.
        // One that never completes ends at the idle timeout; a stop closes it at once.
        if stopping && !c.closing && (self.ctx.close_idle.get() || !c.quic.is_handshaking()) {
            c.closing = true;
            c.h3.shutdown(&mut c.quic);
        }
        if c.closing && !c.quic.is_closed() && c.h3.is_finished(&mut c.quic) {
            tracing::debug!(
                conn = i,
                "HTTP/3 connection finished after GOAWAY: closing it"
            );
            c.quic.close(now, H3_NO_ERROR.into(), bytes::Bytes::new());
        }
        let peer = c.quic.remote_address();
        if peer != c.path {
            c.path = peer;
            quic_metrics::count(QuicEvent::Migration);
        }
        loop {
            let endpoint = &mut self.endpoint;
            let step = contain_step(&peer, || {
                let ev = c.quic.poll_endpoint_events()?;
                let drained = ev.is_drained();
                if let Some(back) = endpoint.handle_event(ConnectionHandle(i), ev) {
                    c.quic.handle_event(back);
                }
                Some(drained)
            });
            let drained = match step {
                None => {
                    self.discard(i);
                    return false;
                }
                Some(None) => break,
                Some(Some(drained)) => drained,
            };
            if drained {
                log_stats(i, &c.quic);
                self.forget(i);
                return false;
            }
        }
        // Send what the connection has, a GSO batch at a time.
        let mut sent = 0;
        loop {
            let Some(Some(c)) = self.conns.get_mut(i) else {
                return false;
            };
            self.send_buf.clear();
            let gso = super::batch::segments_per_send(self.gso, c.quic.current_mtu());
            let send_buf = &mut self.send_buf;
            let peer = c.quic.remote_address();
            let Some(transmit) = contain_step(&peer, || c.quic.poll_transmit(now, gso, send_buf))
            else {
                self.discard(i);
                return false;
            };
            let Some(t) = transmit else {
                if c.handshaking
                    && c.quic.stats().path.sent_packets
                        > self.settings.quic.max_initial_handshake_packets
                {
                    self.drop_handshake(i);
                    return false;
                }
                // Its timers change only when it is driven: read them once, here.
                c.timeout = c.quic.poll_timeout();
                self.earliest = earlier(self.earliest, c.timeout);
                return false;
            };
            self.send(&t).await;
            sent += 1;
            if sent >= SEND_BUDGET {
                if let Some(Some(c)) = self.conns.get_mut(i) {
                    c.timeout = c.quic.poll_timeout();
                    self.earliest = earlier(self.earliest, c.timeout);
                }
                return true;
            }
        }
    }

    /// `max-initial-handshake-packets` (h2o's): a connection still handshaking that has sent
    /// more packets than that (a peer that keeps the handshake going, making us send) is
    /// dropped without a word, as h2o does.
    fn drop_handshake(&mut self, i: usize) {
        if let Some(Some(c)) = self.conns.get(i) {
            tracing::info!(
                peer = %c.quic.remote_address(),
                sent = c.quic.stats().path.sent_packets,
                "QUIC connection dropped: more than max-initial-handshake-packets ({}) sent before its handshake completed",
                self.settings.quic.max_initial_handshake_packets
            );
        }
        admission::handshake_packets_exceeded();
        self.discard(i);
    }

    /// Discards connection `i` after a panic inside quinn-proto: its state is not to be
    /// trusted, so nothing more is sent (the peer sees an idle timeout) and the endpoint is
    /// told it drained, which frees its connection IDs.
    fn discard(&mut self, i: usize) {
        if !matches!(self.conns.get(i), Some(Some(_))) {
            return;
        }
        let endpoint = &mut self.endpoint;
        let peer = self.local;
        let _ = contain_step(&peer, || {
            endpoint.handle_event(ConnectionHandle(i), EndpointEvent::drained())
        });
        self.forget(i);
    }

    /// Removes connection `i` from the table and the counts.
    fn forget(&mut self, i: usize) {
        if let Some(Some(c)) = self.conns.get(i) {
            if c.handshaking {
                admission::handshaking(false);
            }
        }
        self.conns[i] = None;
        crate::metrics::connection(crate::metrics::Transport::Quic, false);
        self.open -= 1;
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }

    /// Sends a transmit from `send_buf`, waiting for the socket if it is full.
    async fn send(&mut self, t: &Transmit) {
        let tx = udp_transmit(t, &self.send_buf[..t.size]);
        loop {
            let r = self.sock.try_io(Interest::WRITABLE, || {
                self.state.send((&self.sock).into(), &tx)
            });
            match r {
                Ok(()) => {
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.sock.writable().await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::debug!("QUIC send to {}: {e}", t.destination);
                    return;
                }
            }
        }
    }

    /// Sends an endpoint's own answer (Retry, refusal, version negotiation, stateless reset)
    /// without waiting: if the socket is full, it is dropped like any lost packet.
    fn send_one(&self, t: &Transmit, buf: &[u8]) {
        let tx = udp_transmit(t, &buf[..t.size.min(buf.len())]);
        let _ = self.sock.try_io(Interest::WRITABLE, || {
            self.state.send((&self.sock).into(), &tx)
        });
    }
}

/// What a connection cost in datagrams, system calls and frames, for tuning the transport
/// (`RUST_LOG=spate::server::quic=debug`).
fn log_stats(conn: usize, quic: &quinn_proto::Connection) {
    let s = quic.stats();
    quic_metrics::closed(s.path.sent_packets, s.path.lost_packets);
    tracing::debug!(
        conn,
        tx_datagrams = s.udp_tx.datagrams,
        tx_ios = s.udp_tx.ios,
        tx_bytes = s.udp_tx.bytes,
        rx_datagrams = s.udp_rx.datagrams,
        rx_bytes = s.udp_rx.bytes,
        tx_packets = s.path.sent_packets,
        lost_packets = s.path.lost_packets,
        tx_acks = s.frame_tx.acks,
        rx_acks = s.frame_rx.acks,
        tx_stream = s.frame_tx.stream,
        rx_stream = s.frame_rx.stream,
        tx_max_streams = s.frame_tx.max_streams_bidi,
        tx_max_data = s.frame_tx.max_data,
        tx_max_stream_data = s.frame_tx.max_stream_data,
        tx_ping = s.frame_tx.ping,
        "QUIC connection drained"
    );
}

fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Queues connection `i` for this turn, once.
fn queue(dirty: &mut Vec<usize>, i: usize, c: &mut Conn<'_>) {
    if !c.queued {
        c.queued = true;
        dirty.push(i);
    }
}

fn udp_transmit<'b>(t: &Transmit, contents: &'b [u8]) -> quinn_udp::Transmit<'b> {
    quinn_udp::Transmit {
        destination: t.destination,
        ecn: t
            .ecn
            .and_then(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)),
        contents,
        segment_size: t.segment_size,
        src_ip: t.src_ip,
    }
}
