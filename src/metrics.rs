//! Server metrics: counters kept per worker thread in plain `Cell`s (no atomic, no lock on a
//! request's path), published by each worker into its slot of a process-wide registry a few
//! times a second and summed when the `status` or `metrics` handler is asked.
//!
//! Counting is on only when the configuration has a `status` or `metrics` path, so a server
//! that does not expose them pays one thread-local flag test per request.
//!
//! Only counting lives here: the handlers render the counters (`handler/status.rs`).

pub mod in_flight;
pub mod quic;
pub mod quic_admission;
pub mod quic_secret;
pub mod tls_early_data;

use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How often a worker copies its counters to its slot: the staleness of a scrape.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(200);

/// Protocols requests are counted by.
#[derive(Clone, Copy)]
pub enum Proto {
    Http1 = 0,
    Http2 = 1,
    Http3 = 2,
}

/// Transports connections are counted by.
#[derive(Clone, Copy)]
pub enum Transport {
    Tcp = 0,
    Tls = 1,
    Quic = 2,
}

/// TLS handshake outcomes.
#[derive(Clone, Copy)]
pub enum Handshake {
    Full = 0,
    Resumed = 1,
    Failed = 2,
}

/// HTTP/2 error codes counted by name (RFC 9113 section 7); one more slot for unknown codes.
const H2_CODES: usize = 15;

/// Which way an HTTP/2 RST_STREAM or GOAWAY went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Sent = 0,
    Received = 1,
}

/// Upper bounds (microseconds) of the request duration histogram buckets; +Inf is implied.
/// The Prometheus text (`handler/status/prometheus.rs`) labels them in seconds.
pub const BUCKETS_US: [u64; 10] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 500_000, 2_500_000,
];

/// One worker's live counters.
struct Local {
    on: Cell<bool>,
    /// Requests by protocol and status class (1xx .. 5xx).
    requests: [[Cell<u64>; 5]; 3],
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    open: [Cell<u64>; 3],
    accepted: [Cell<u64>; 3],
    /// Open connections by protocol, once it is known (after TLS and ALPN, or the preface).
    open_proto: [Cell<u64>; 3],
    handshakes: [Cell<u64>; 3],
    /// HTTP/2 RST_STREAM frames by direction and error code.
    resets: [[Cell<u64>; H2_CODES]; 2],
    /// Request durations: one count per bucket (the last is +Inf), and the sum.
    duration: [Cell<u64>; 11],
    duration_sum_us: Cell<u64>,
    /// Proxy tunnels (WebSocket and other upgrades): opened in all, open now.
    tunnels: [Cell<u64>; 2],
    /// Connections closed because their handling panicked (contained, see server/panics.rs).
    panics: Cell<u64>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            on: Cell::new(false),
            requests: [const { [const { Cell::new(0) }; 5] }; 3],
            bytes_in: Cell::new(0),
            bytes_out: Cell::new(0),
            open: [const { Cell::new(0) }; 3],
            accepted: [const { Cell::new(0) }; 3],
            open_proto: [const { Cell::new(0) }; 3],
            handshakes: [const { Cell::new(0) }; 3],
            resets: [[const { Cell::new(0) }; H2_CODES], [const { Cell::new(0) }; H2_CODES]],
            duration: [const { Cell::new(0) }; 11],
            duration_sum_us: Cell::new(0),
            tunnels: [const { Cell::new(0) }; 2],
            panics: Cell::new(0),
        }
    };
    /// Per backend (proxy URL): requests and errors (502/504 answered for it). Apart from
    /// `LOCAL`, which then needs no destructor: its every access is one plain load.
    static BACKENDS: std::cell::RefCell<Vec<(Arc<str>, u64, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// HTTP/2 GOAWAYs by direction, code and cause (a handful of fixed causes).
    static GOAWAYS: std::cell::RefCell<Vec<GoAways>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How many HTTP/2 GOAWAYs went one way with one code and cause.
#[derive(Clone, Debug, PartialEq)]
pub struct GoAways {
    pub direction: Direction,
    pub code: u32,
    /// Why we sent it (the connection's `Closed::GoAway` reason); "client" for received ones.
    pub cause: &'static str,
    pub count: u64,
}

fn bump(c: &Cell<u64>, n: u64) {
    c.set(c.get().wrapping_add(n));
}

/// Whether this worker counts (set once at worker start from the configuration).
pub fn enable(on: bool) {
    LOCAL.with(|l| l.on.set(on));
}

/// Whether counting is on for this worker.
pub fn enabled() -> bool {
    LOCAL.with(|l| l.on.get())
}

/// A reading of the metrics clock: when a counted request started, or when several ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(u64);

impl Mark {
    /// Reads the clock.
    #[inline]
    pub fn now() -> Mark {
        Mark(crate::http::clock::monotonic_ns())
    }

    /// As a plain number, for a layer that only carries it (the HTTP/2 connection).
    pub fn to_bits(self) -> u64 {
        self.0
    }

    pub fn from_bits(bits: u64) -> Mark {
        Mark(bits)
    }
}

/// The start of a request to count, or `None` when this worker does not count.
#[inline]
pub fn start() -> Option<Mark> {
    if enabled() {
        Some(Mark::now())
    } else {
        None
    }
}

/// A finished request (`started` came from [`start`]): its status, bytes received and sent.
#[inline(always)]
pub fn request(proto: Proto, status: u16, bytes_in: u64, bytes_out: u64, started: Mark) {
    request_between(proto, status, bytes_in, bytes_out, started, Mark::now());
}

/// [`request`] with its end already read (one reading for the requests that ended together).
// Inlined: a call with six arguments costs a fifth of the counting.
#[inline(always)]
pub fn request_between(
    proto: Proto,
    status: u16,
    bytes_in: u64,
    bytes_out: u64,
    started: Mark,
    ended: Mark,
) {
    let us = ended.0.saturating_sub(started.0) / 1_000;
    LOCAL.with(|l| {
        let class = (usize::from(status / 100)).clamp(1, 5) - 1;
        bump(&l.requests[proto as usize][class], 1);
        bump(&l.bytes_in, bytes_in);
        bump(&l.bytes_out, bytes_out);
        let b = BUCKETS_US
            .iter()
            .position(|&le| us <= le)
            .unwrap_or(BUCKETS_US.len());
        bump(&l.duration[b], 1);
        bump(&l.duration_sum_us, us);
    });
}

/// Request bytes read outside any one request's count (HTTP/2 counts every frame it reads).
pub fn received(bytes: u64) {
    LOCAL.with(|l| {
        if l.on.get() {
            bump(&l.bytes_in, bytes);
        }
    });
}

/// A connection opened (`true`) or closed (`false`).
pub fn connection(t: Transport, opened: bool) {
    LOCAL.with(|l| {
        if !l.on.get() {
            return;
        }
        let c = &l.open[t as usize];
        if opened {
            bump(&l.accepted[t as usize], 1);
            c.set(c.get() + 1);
        } else {
            c.set(c.get().saturating_sub(1));
        }
    });
}

/// A connection's handling panicked; the panic was contained and the connection closed.
/// Counted even when metrics are off: it is rare and always worth knowing.
pub fn connection_panicked() {
    LOCAL.with(|l| bump(&l.panics, 1));
}

/// A TLS handshake ended.
pub fn handshake(h: Handshake) {
    LOCAL.with(|l| {
        if l.on.get() {
            bump(&l.handshakes[h as usize], 1);
        }
    });
}

/// A connection speaking `Proto`, counted open while this lives.
pub struct OpenConnection(Option<Proto>);

impl OpenConnection {
    pub fn new(proto: Proto) -> OpenConnection {
        LOCAL.with(|l| {
            if !l.on.get() {
                return OpenConnection(None);
            }
            bump(&l.open_proto[proto as usize], 1);
            OpenConnection(Some(proto))
        })
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            LOCAL.with(|l| {
                let c = &l.open_proto[p as usize];
                c.set(c.get().saturating_sub(1));
            });
        }
    }
}

/// A proxy tunnel, counted open while this lives.
pub struct OpenTunnel(bool);

impl OpenTunnel {
    pub fn open() -> OpenTunnel {
        LOCAL.with(|l| {
            if !l.on.get() {
                return OpenTunnel(false);
            }
            bump(&l.tunnels[0], 1);
            bump(&l.tunnels[1], 1);
            OpenTunnel(true)
        })
    }
}

impl Drop for OpenTunnel {
    fn drop(&mut self) {
        if self.0 {
            LOCAL.with(|l| {
                let c = &l.tunnels[1];
                c.set(c.get().saturating_sub(1));
            });
        }
    }
}

/// An HTTP/2 RST_STREAM with error `code` was sent or received.
pub fn h2_reset(direction: Direction, code: u32) {
    LOCAL.with(|l| {
        if l.on.get() {
            let code = (code as usize).min(H2_CODES - 1);
            bump(&l.resets[direction as usize][code], 1);
        }
    });
}

/// An HTTP/2 GOAWAY with error `code` was sent (for `cause`) or received.
pub fn h2_goaway(direction: Direction, code: u32, cause: &'static str) {
    if !enabled() {
        return;
    }
    GOAWAYS.with(|g| {
        let mut g = g.borrow_mut();
        match g
            .iter_mut()
            .find(|x| x.direction == direction && x.code == code && x.cause == cause)
        {
            Some(x) => x.count += 1,
            None => g.push(GoAways {
                direction,
                code,
                cause,
                count: 1,
            }),
        }
    });
}

/// A proxied request to `backend` ended; `failed` when the backend could not answer.
pub fn backend(backend: &Arc<str>, failed: bool) {
    if !enabled() {
        return;
    }
    BACKENDS.with(|b| {
        let mut b = b.borrow_mut();
        let i = match b
            .iter()
            .position(|(n, _, _)| Arc::ptr_eq(n, backend) || n == backend)
        {
            Some(i) => i,
            None => {
                b.push((backend.clone(), 0, 0));
                b.len() - 1
            }
        };
        b[i].1 += 1;
        b[i].2 += u64::from(failed);
    });
}

/// The counters of one worker (or a sum of them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub requests: [[u64; 5]; 3],
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub open: [u64; 3],
    pub accepted: [u64; 3],
    pub open_proto: [u64; 3],
    pub handshakes: [u64; 3],
    pub resets: [[u64; H2_CODES]; 2],
    pub duration: [u64; 11],
    pub duration_sum_us: u64,
    /// Proxy tunnels opened in all, and open now.
    pub tunnels: [u64; 2],
    pub panics: u64,
    pub backends: Vec<(Arc<str>, u64, u64)>,
    pub goaways: Vec<GoAways>,
    pub quic: quic::Counters,
}

impl Snapshot {
    fn local() -> Snapshot {
        LOCAL.with(|l| Snapshot {
            requests: l.requests.each_ref().map(|p| p.each_ref().map(Cell::get)),
            bytes_in: l.bytes_in.get(),
            bytes_out: l.bytes_out.get(),
            open: l.open.each_ref().map(Cell::get),
            accepted: l.accepted.each_ref().map(Cell::get),
            open_proto: l.open_proto.each_ref().map(Cell::get),
            handshakes: l.handshakes.each_ref().map(Cell::get),
            resets: l.resets.each_ref().map(|d| d.each_ref().map(Cell::get)),
            duration: l.duration.each_ref().map(Cell::get),
            duration_sum_us: l.duration_sum_us.get(),
            tunnels: l.tunnels.each_ref().map(Cell::get),
            panics: l.panics.get(),
            backends: BACKENDS.with(|b| b.borrow().clone()),
            goaways: GOAWAYS.with(|g| g.borrow().clone()),
            quic: quic::Counters::local(),
        })
    }

    fn add(&mut self, o: &Snapshot) {
        let grids = [
            (self.requests.as_flattened_mut(), o.requests.as_flattened()),
            (self.resets.as_flattened_mut(), o.resets.as_flattened()),
        ];
        for (a, b) in grids {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        let pairs = [
            (&mut self.open[..], &o.open[..]),
            (&mut self.accepted[..], &o.accepted[..]),
            (&mut self.open_proto[..], &o.open_proto[..]),
            (&mut self.handshakes[..], &o.handshakes[..]),
            (&mut self.duration[..], &o.duration[..]),
            (&mut self.tunnels[..], &o.tunnels[..]),
        ];
        for (a, b) in pairs {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        self.duration_sum_us += o.duration_sum_us;
        self.panics += o.panics;
        self.quic.add(&o.quic);
        for (name, n, e) in &o.backends {
            match self.backends.iter_mut().find(|(m, _, _)| m == name) {
                Some(b) => {
                    b.1 += n;
                    b.2 += e;
                }
                None => self.backends.push((name.clone(), *n, *e)),
            }
        }
        for g in &o.goaways {
            match self
                .goaways
                .iter_mut()
                .find(|x| x.direction == g.direction && x.code == g.code && x.cause == g.cause)
            {
                Some(x) => x.count += g.count,
                None => self.goaways.push(g.clone()),
            }
        }
    }
}

/// What the status handler reports besides counters.
#[derive(Clone, Debug, Default)]
pub struct ServerInfo {
    pub max_connections: usize,
    pub worker_threads: usize,
    pub listeners: usize,
    /// Configurations loaded: 1 at start, one more per successful reload.
    pub generation: u64,
}

struct Registry {
    slots: Vec<Arc<Mutex<Snapshot>>>,
    /// Counters of workers that ended (replaced by a reload), so totals never go back.
    retired: Snapshot,
    info: ServerInfo,
    started: Option<SystemTime>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    slots: Vec::new(),
    retired: Snapshot {
        requests: [[0; 5]; 3],
        bytes_in: 0,
        bytes_out: 0,
        open: [0; 3],
        accepted: [0; 3],
        open_proto: [0; 3],
        handshakes: [0; 3],
        resets: [[0; H2_CODES]; 2],
        duration: [0; 11],
        duration_sum_us: 0,
        tunnels: [0; 2],
        panics: 0,
        backends: Vec::new(),
        goaways: Vec::new(),
        quic: quic::Counters::ZERO,
    },
    info: ServerInfo {
        max_connections: 0,
        worker_threads: 0,
        listeners: 0,
        generation: 0,
    },
    started: None,
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // A panic while holding the lock left plain numbers behind: still usable.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records the running configuration's shape (at start and after each reload); counts the
/// generation.
pub fn set_server_info(info: ServerInfo) {
    let mut r = registry();
    r.started.get_or_insert_with(SystemTime::now);
    let generation = r.info.generation + 1;
    r.info = ServerInfo { generation, ..info };
}

/// A worker's place in the registry; publishing copies the worker's counters into it.
pub struct Slot(Arc<Mutex<Snapshot>>);

impl Slot {
    /// Registers the calling worker thread.
    pub fn register() -> Slot {
        let s = Arc::new(Mutex::new(Snapshot::default()));
        registry().slots.push(s.clone());
        OWN_SLOT.with(|own| *own.borrow_mut() = Some(s.clone()));
        Slot(s)
    }

    /// Copies this thread's counters into the slot (every `PUBLISH_INTERVAL` while the
    /// worker has connections); false when they had not changed since the last copy.
    pub fn publish(&self) -> bool {
        let snap = Snapshot::local();
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if *slot == snap {
            return false;
        }
        *slot = snap;
        true
    }
}

impl Drop for Slot {
    /// The worker ends: its totals move to the retired sum; its open connections are gone.
    fn drop(&mut self) {
        let mut snap = Snapshot::local();
        snap.open = [0; 3];
        snap.open_proto = [0; 3];
        snap.tunnels[1] = 0;
        OWN_SLOT.with(|own| *own.borrow_mut() = None);
        let mut r = registry();
        r.slots.retain(|s| !Arc::ptr_eq(s, &self.0));
        r.retired.add(&snap);
    }
}

/// The sum over every worker; the calling worker's own counters are published first, so
/// they are exact, the others at most `PUBLISH_INTERVAL` old.
pub fn total() -> (Snapshot, ServerInfo, Option<SystemTime>) {
    OWN_SLOT.with(|own| {
        if let Some(slot) = own.borrow().as_ref() {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Snapshot::local();
        }
    });
    let r = registry();
    let mut sum = r.retired.clone();
    for s in &r.slots {
        sum.add(&s.lock().unwrap_or_else(|e| e.into_inner()));
    }
    (sum, r.info.clone(), r.started)
}

thread_local! {
    /// This worker's slot, for [`total`].
    static OWN_SLOT: std::cell::RefCell<Option<Arc<Mutex<Snapshot>>>> =
        const { std::cell::RefCell::new(None) };
}

thread_local! {
    static DRAINING: Cell<bool> = const { Cell::new(false) };
}

/// Marks this worker as draining (a reload replaced it, or the server stops).
pub fn set_draining() {
    DRAINING.with(|d| d.set(true));
}

/// Whether this worker drains: the readiness handler answers 503.
pub fn draining() -> bool {
    DRAINING.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_counted_with_its_duration_only_when_counting_is_on() {
        enable(false);
        assert!(start().is_none());
        enable(true);
        let started = start().expect("counting is on");
        std::thread::sleep(Duration::from_millis(3));
        request(Proto::Http2, 404, 10, 200, started);
        let s = Snapshot::local();
        assert_eq!(s.requests[1][3], 1);
        assert_eq!((s.bytes_in, s.bytes_out), (10, 200));
        // 3 ms and a little: the (2.5 ms, 5 ms] bucket, or a later one on a slow machine.
        assert_eq!(s.duration[..3].iter().sum::<u64>(), 0, "{:?}", s.duration);
        assert_eq!(s.duration.iter().sum::<u64>(), 1);
        assert!(s.duration_sum_us >= 3_000, "{}", s.duration_sum_us);
        enable(false);
    }
}
