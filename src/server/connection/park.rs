//! Parked connections. A plain-TCP keep-alive connection that has waited
//! `http1-idle-park-delay` for its next request gives up its task: the task's future, tokio's
//! I/O registration, its timer and stop signal (about 1.3 KB) are freed, and what remains is a
//! small record in this worker's `Parking`, with the socket in a per-worker epoll instance.
//! So does a cleartext HTTP/2 connection once it is quiet (`h2::Asleep`, no stream and no frame
//! for a second): its compact state goes into a slab of fixed-size slots (`Sleepers`), not a
//! heap block of its own. Parked state is what stays for long, while the busy state of the
//! connections that park is freed around it: in a slab it is packed together, and the freed
//! pages can go back to the system (a block per connection would pin one page of freed
//! memory each, about 3 KB per parked connection in RSS).
//!
//! The lane (`http1-lane`) uses the same instance and records: plain connections enter it
//! from accept, and an HTTP/1.1 connection whose task answered a request comes back to it at
//! once. Its sockets are edge-triggered, not one-shot: on readiness `watch` reads, answers
//! inline requests (`h1::answer_in_lane`, the inline path of a connection task) and sends the
//! responses in place, and the connection stays; anything else goes to a task with the bytes
//! read (`Served::Handover`). Lane deadlines follow each connection's last request: the
//! records are linked in activity order (`Parked::lane_head`).
//!
//! One task per worker (`watch`) serves all parked connections: readiness resumes a connection
//! (its socket goes back to tokio and a new connection task reads the waiting request), the
//! keep-alive deadline closes it, and so does a server stop. An HTTP/2 connection is resumed
//! for its deadline (idle timeout) and for a server stop instead, so that its task can send
//! the GOAWAY. Parked connections keep their `max-connections` slot and their place in the
//! metrics (the guard and the open-connection count travel with the record). Deadlines come in
//! park order, as every connection of a worker has the same keep-alive timeout, and every
//! HTTP/2 connection the same idle timeout (parking a second after its last frame): a FIFO
//! sweep per protocol, no timer per connection. (An HTTP/2 connection whose last response
//! outlasted the client's last frame parks later than that; its idle timeout may then pass
//! late by as much, when the connection before it in the FIFO expires.)

use super::{spawn_connection, ConnectionGuard, Connections, Idle};
use crate::server::buffers::trim_allocator;
use crate::server::context::{Addrs, WorkerCtx};
use crate::server::h1::Carried;
use crate::server::h2::Asleep;
use bytes::BytesMut;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;

mod lane;
use lane::{exchange, Lane, Served};

/// Readiness events taken from the epoll instance per call.
const EVENTS_PER_CALL: usize = 64;
/// How many times in a row a drained epoll instance is looked at again before the task
/// goes back to the runtime (bounded: other tasks of the worker must run).
const LOOK_AGAIN: u32 = 3;
/// The deadline of a record that has none (an HTTP/2 connection without idle timeout).
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Parked connections since the last trim after which the freed tasks are given back to the
/// system (see `watch`); fewer are not worth a `malloc_trim`.
const TRIM_AFTER_PARKS: usize = 64;
/// At most one trim per this interval, so a server parking connections all the time pays
/// for one walk of its heap per second at most.
const TRIM_INTERVAL: Duration = Duration::from_secs(1);
/// Slots per chunk of the `Sleepers` slab (one bit each in a `u64`): about 24 KB a chunk.
const SLEEPERS_PER_CHUNK: u32 = 64;
/// No record: the end of the lane's list.
const NIL: u32 = u32::MAX;

/// This worker's parked connections.
pub(crate) struct Parking {
    /// The keep-alive timeout less the park delay: what is left of a parked connection's wait.
    lead: Duration,
    /// `http1-keepalive-timeout`: a lane connection's wait after its last request.
    keepalive: Duration,
    /// `http1-idle-park-delay` is on: idle connections park after it.
    parks: bool,
    /// `http1-lane` is on: the HTTP/1.1 records are served in place (edge-triggered).
    lane: bool,
    /// The epoll instance holding the parked sockets, one-shot each, watched by tokio.
    epoll: AsyncFd<OwnedFd>,
    parked: RefCell<Parked>,
    /// Wakes `watch` when it must look again: it sleeps without a deadline, or a trim is due.
    changed: tokio::sync::Notify,
    /// The next keep-alive deadline `watch` wakes for; `None` while it has none to keep.
    next_wake: Cell<Option<Instant>>,
    /// Connections parked since the allocator was last trimmed.
    since_trim: Cell<usize>,
    /// The room of the lane's list of spliced bodies, kept between batches.
    splice: Cell<crate::server::h1::SplicedBodies>,
}

/// The records, in a slab, with the order they were parked in.
struct Parked {
    records: Vec<Option<Record>>,
    free: Vec<u32>,
    /// (slot, serial) of HTTP/1.1 records in park order; entries of records resumed since
    /// are skipped.
    order: VecDeque<(u32, u32)>,
    /// The same for HTTP/2 records with a deadline.
    order_h2: VecDeque<(u32, u32)>,
    /// The lane's records in the order of their `until` (linked through `Record::prev` and
    /// `next`). An answer only notes its time in its record (`Record::active`); the list
    /// catches up when its head's `until` comes (`expire_lane`), which moves a record active
    /// since to the tail: per request, no queue entry and no neighbour's record touched.
    lane_head: u32,
    lane_tail: u32,
    serial: u32,
    /// The compact state of the parked HTTP/2 connections.
    sleepers: Sleepers,
}

/// What a parked connection keeps.
struct Record {
    socket: std::net::TcpStream,
    addrs: Addrs,
    guard: ConnectionGuard,
    idle: Kept,
    /// The keep-alive deadline (HTTP/1.1), or the connection's own deadline (HTTP/2). In the
    /// lane's list, the deadline as of its place there: one answered since has until
    /// `active` plus the keep-alive timeout.
    until: Instant,
    /// In the lane: when it last answered a request (or came in), on `tick`.
    active: u32,
    /// Tells this record from a later one in the same slot.
    serial: u32,
    /// In the lane's list (`Parked::lane_head`), with its neighbours there; its entry in
    /// `order`, if any, is stale.
    linked: bool,
    prev: u32,
    next: u32,
}

/// What a parked connection's next task takes over (`Idle`), as the record keeps it.
enum Kept {
    Http1 {
        fresh: bool,
        open: crate::metrics::OpenConnection,
    },
    /// The slot of its `Asleep` in `Sleepers`.
    Http2(u32),
}

/// A slab of parked HTTP/2 connections' `Asleep`s: chunks of `SLEEPERS_PER_CHUNK` slots,
/// filled lowest chunk first, so that the records stay packed in few pages; a chunk that
/// empties is freed (but the first, which a worker with any HTTP/2 client keeps using).
/// (Generic only for its tests.)
struct Sleepers<T = Asleep> {
    chunks: Vec<Chunk<T>>,
    /// The chunks with a free slot (freed chunks included), lowest first.
    with_room: BTreeSet<u32>,
}

struct Chunk<T> {
    /// Bit i: slot i holds an `Asleep`.
    used: u64,
    /// Empty (no allocation) while the chunk is freed.
    slots: Box<[Option<T>]>,
}

impl Default for Parked {
    fn default() -> Self {
        Parked {
            records: Vec::new(),
            free: Vec::new(),
            order: VecDeque::new(),
            order_h2: VecDeque::new(),
            lane_head: NIL,
            lane_tail: NIL,
            serial: 0,
            sleepers: Sleepers::default(),
        }
    }
}

impl Parked {
    /// Puts `slot` at the tail of the lane's list (out of its place first, if linked).
    fn link_last(&mut self, slot: u32) {
        self.unlink(slot);
        let tail = self.lane_tail;
        let Some(Some(r)) = self.records.get_mut(slot as usize) else {
            return;
        };
        r.linked = true;
        r.prev = tail;
        r.next = NIL;
        match self.records.get_mut(tail as usize) {
            Some(Some(t)) => t.next = slot,
            _ => self.lane_head = slot,
        }
        self.lane_tail = slot;
    }

    /// Takes `slot` out of the lane's list, if it is in it.
    fn unlink(&mut self, slot: u32) {
        let Some(Some(r)) = self.records.get_mut(slot as usize) else {
            return;
        };
        if !r.linked {
            return;
        }
        r.linked = false;
        let (prev, next) = (r.prev, r.next);
        match self.records.get_mut(prev as usize) {
            Some(Some(p)) => p.next = next,
            _ => self.lane_head = next,
        }
        match self.records.get_mut(next as usize) {
            Some(Some(n)) => n.prev = prev,
            _ => self.lane_tail = prev,
        }
    }

    /// Takes the record out of `slot` (out of the lane's list too) and frees the slot.
    fn remove(&mut self, slot: u32) -> Option<Record> {
        self.unlink(slot);
        let record = self.records.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(record)
    }
}

impl<T> Default for Sleepers<T> {
    fn default() -> Self {
        Sleepers {
            chunks: Vec::new(),
            with_room: BTreeSet::new(),
        }
    }
}

impl<T> Sleepers<T> {
    /// Stores `asleep`; its slot, or `None` when there are 2^32 of them already.
    fn insert(&mut self, asleep: T) -> Option<u32> {
        let c = match self.with_room.first() {
            Some(&c) => c,
            None => {
                let c = u32::try_from(self.chunks.len()).ok()?;
                c.checked_mul(SLEEPERS_PER_CHUNK)?;
                self.chunks.push(Chunk {
                    used: 0,
                    slots: Box::default(),
                });
                self.with_room.insert(c);
                c
            }
        };
        let chunk = self.chunks.get_mut(c as usize)?;
        if chunk.slots.is_empty() {
            chunk.slots = (0..SLEEPERS_PER_CHUNK).map(|_| None).collect();
        }
        let i = (!chunk.used).trailing_zeros();
        *chunk.slots.get_mut(i as usize)? = Some(asleep);
        chunk.used |= 1 << i;
        if chunk.used == u64::MAX {
            self.with_room.remove(&c);
        }
        Some(c * SLEEPERS_PER_CHUNK + i)
    }

    /// Takes the `Asleep` in `slot` out, freeing the slot.
    fn take(&mut self, slot: u32) -> Option<T> {
        let (c, i) = (slot / SLEEPERS_PER_CHUNK, slot % SLEEPERS_PER_CHUNK);
        let chunk = self.chunks.get_mut(c as usize)?;
        let asleep = chunk.slots.get_mut(i as usize)?.take()?;
        chunk.used &= !(1 << i);
        self.with_room.insert(c);
        if chunk.used == 0 && c > 0 {
            chunk.slots = Box::default();
        }
        Some(asleep)
    }
}

impl Parking {
    /// The parking of a worker with `config`, or `None` when parking is off (a zero delay, or
    /// one that is not shorter than the keep-alive timeout) or the epoll instance cannot be
    /// made. Call inside the worker's runtime.
    pub fn new(config: &crate::config::Config) -> Option<Parking> {
        let http1 = &config.http1;
        let delay = http1.idle_park_delay;
        let parks = !delay.is_zero() && delay < http1.keepalive_timeout;
        if !parks && !http1.lane {
            return None;
        }
        let owned = match crate::sys::epoll::create() {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(
                    "http1-idle-park-delay: no epoll instance ({e}); idle connections keep their task"
                );
                return None;
            }
        };
        let registered = crate::sys::reactor::register(owned, tokio::io::Interest::READABLE);
        let epoll = match registered {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("http1-idle-park-delay: cannot watch the epoll instance ({e})");
                return None;
            }
        };
        Some(Parking {
            lead: http1.keepalive_timeout.saturating_sub(delay),
            keepalive: http1.keepalive_timeout,
            parks,
            lane: http1.lane,
            epoll,
            parked: RefCell::default(),
            changed: tokio::sync::Notify::new(),
            next_wake: Cell::new(None),
            since_trim: Cell::new(0),
            splice: Cell::default(),
        })
    }

    /// Whether idle connections park after `http1-idle-park-delay` (HTTP/1.1 and h2c).
    pub fn parks(&self) -> bool {
        self.parks
    }

    /// Whether a plain HTTP/1.1 connection waits in the lane once it answered a request.
    pub fn lane(&self) -> bool {
        self.lane
    }

    /// Closes every parked connection (the server stops, or the worker ends).
    pub fn close_all(&self) {
        let records = {
            let mut p = self.parked.borrow_mut();
            p.lane_head = NIL;
            p.lane_tail = NIL;
            p.order.clear();
            p.order_h2.clear();
            p.free.clear();
            (
                std::mem::take(&mut p.records),
                std::mem::take(&mut p.sleepers),
            )
        };
        // Dropped outside the borrow: a guard's drop may wake other code of this worker.
        drop(records);
    }

    /// Parks a connection, or puts it in the lane. `waited`: it waited the park delay (what
    /// is left of its keep-alive timeout is its deadline, in park order); otherwise it waits
    /// the whole timeout, in the lane's list.
    fn insert(
        &self,
        socket: std::net::TcpStream,
        addrs: Addrs,
        guard: ConnectionGuard,
        idle: Idle,
        waited: bool,
    ) -> io::Result<()> {
        let now = Instant::now();
        let listed = self.lane && !waited && matches!(idle, Idle::Http1 { .. });
        let (until, in_order) = match &idle {
            Idle::Http1 { .. } if listed => (now + self.keepalive, true),
            Idle::Http1 { .. } => (now + self.lead, true),
            Idle::Http2(asleep) => match asleep.deadline() {
                Some(d) => (d, true),
                None => (now + FAR_FUTURE, false),
            },
        };
        let h2 = matches!(idle, Idle::Http2(_));
        let fd = socket.as_raw_fd();
        let too_many = || io::Error::other("too many parked connections");
        let mut p = self.parked.borrow_mut();
        let slot = match p.free.pop() {
            Some(s) => s,
            None => {
                let s = u32::try_from(p.records.len()).map_err(|_| too_many())?;
                p.records.push(None);
                s
            }
        };
        // Into the slab before the connection's task (and its busy state) is freed.
        let idle = match idle {
            // A task hands over no buffers as it parks.
            Idle::Http1 { fresh, open, .. } => Kept::Http1 { fresh, open },
            Idle::Http2(asleep) => match p.sleepers.insert(*asleep) {
                Some(s) => Kept::Http2(s),
                None => {
                    p.free.push(slot);
                    return Err(too_many());
                }
            },
        };
        p.serial = p.serial.wrapping_add(1);
        let serial = p.serial;
        let served = self.lane && matches!(idle, Kept::Http1 { .. });
        if let Err(e) = self.arm(fd, libc::EPOLL_CTL_ADD, slot, serial, served) {
            p.free.push(slot);
            let asleep = match idle {
                Kept::Http2(s) => p.sleepers.take(s),
                Kept::Http1 { .. } => None,
            };
            drop(p);
            drop(asleep);
            return Err(e);
        }
        p.records[slot as usize] = Some(Record {
            socket,
            addrs,
            guard,
            idle,
            until,
            active: tick(),
            serial,
            linked: false,
            prev: NIL,
            next: NIL,
        });
        if listed {
            p.link_last(slot);
        } else if in_order {
            if h2 {
                p.order_h2.push_back((slot, serial));
            } else {
                p.order.push_back((slot, serial));
            }
        }
        drop(p);
        // A deadline `watch` keeps that comes before this one (as in park order within a
        // protocol) needs no wake-up; an HTTP/2 deadline may come before an HTTP/1.1 one.
        let sooner = self.next_wake.get().is_none_or(|w| in_order && until < w);
        if sooner {
            self.changed.notify_one();
        }
        Ok(())
    }

    /// Counts a task freed by parking toward the next trim (see `watch`). A connection that
    /// enters the lane from `accept` freed nothing: counting it would trim the heap every
    /// second under a stream of new connections, and the pages given back are faulted in
    /// again at once.
    fn count_freed_task(&self) {
        let parks = self.since_trim.get() + 1;
        self.since_trim.set(parks);
        if parks == TRIM_AFTER_PARKS {
            self.changed.notify_one();
        }
    }

    /// Adds `fd` to the epoll instance (or re-arms it), reporting one readiness event; or,
    /// for a connection the lane serves in place, every new readiness (edge-triggered: an
    /// answered request costs no `epoll_ctl`).
    fn arm(
        &self,
        fd: RawFd,
        op: libc::c_int,
        slot: u32,
        serial: u32,
        served: bool,
    ) -> io::Result<()> {
        let once = if served {
            libc::EPOLLET
        } else {
            libc::EPOLLONESHOT
        };
        let ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | once) as u32,
            u64: (u64::from(serial) << 32) | u64::from(slot),
        };
        crate::sys::epoll::control(self.epoll.as_raw_fd(), op, fd, ev)
    }

    /// Takes the record an event names, if it is still parked, with its slot; the slot stays
    /// reserved until `put_back` or `release`.
    fn take(&self, data: u64) -> Option<(u32, Record)> {
        let (slot, serial) = split(data);
        let mut p = self.parked.borrow_mut();
        let entry = p.records.get_mut(slot as usize)?;
        if entry.as_ref().is_none_or(|r| r.serial != serial) {
            return None;
        }
        Some((slot, entry.take()?))
    }

    /// Puts back a record whose wake-up found nothing to read; its place in the order stays.
    fn put_back(&self, slot: u32, record: Record) {
        let fd = record.socket.as_raw_fd();
        if self
            .arm(fd, libc::EPOLL_CTL_MOD, slot, record.serial, false)
            .is_ok()
        {
            if let Some(entry) = self.parked.borrow_mut().records.get_mut(slot as usize) {
                *entry = Some(record);
                return;
            }
        }
        self.release(slot);
        self.discard(record);
    }

    /// Frees a slot whose record left (resumed or closed).
    fn release(&self, slot: u32) {
        self.parked.borrow_mut().free.push(slot);
    }

    /// Handles the readiness events waiting in the epoll instance; how many there were (fewer
    /// than a full batch: the instance is drained).
    fn wake_ready(&self, ctx: &WorkerCtx) -> io::Result<usize> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_CALL];
        // Timeout 0 never blocks.
        let n = match crate::sys::epoll::wait(self.epoll.as_raw_fd(), &mut events, 0) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(EVENTS_PER_CALL),
            Err(e) => return Err(e),
        };
        let mut lane = Lane {
            splice: self.splice.take(),
            ..Lane::default()
        };
        for ev in &events[..n] {
            if let Some(served) = self.served(ev.u64) {
                // The peer closed its side: what it sent last is answered, then the lane closes
                // (no later edge would tell).
                let closed = ev.events & (libc::EPOLLRDHUP | libc::EPOLLHUP) as u32 != 0;
                self.serve(served, closed, ctx, &mut lane);
            } else if let Some((slot, record)) = self.take(ev.u64) {
                self.wake(slot, record, ctx);
            }
        }
        if let Some((rbuf, wbuf)) = lane.buffers {
            ctx.buffers.give_read(rbuf);
            ctx.buffers.give_write(wbuf);
        }
        self.splice.set(lane.splice);
        Ok(n)
    }

    /// The record an event names, when the lane serves it in place: its slot, socket,
    /// addresses and whether it answered no request yet.
    fn served(&self, data: u64) -> Option<(u32, RawFd, Addrs, bool)> {
        if !self.lane {
            return None;
        }
        let (slot, serial) = split(data);
        let p = self.parked.borrow();
        match p.records.get(slot as usize) {
            Some(Some(r)) if r.serial == serial => match r.idle {
                Kept::Http1 { fresh, .. } => Some((slot, r.socket.as_raw_fd(), r.addrs, fresh)),
                Kept::Http2(_) => None,
            },
            _ => None,
        }
    }

    /// Serves a lane connection that became readable: reads, answers inline requests and
    /// sends their responses, all in place; the connection stays in the lane, or goes to a
    /// task with what it read (`Handover`), or closes.
    fn serve(
        &self,
        served: (u32, RawFd, Addrs, bool),
        closed: bool,
        ctx: &WorkerCtx,
        lane: &mut Lane,
    ) {
        // The addresses stay where `served` put them (a copy cost every request 14
        // instructions).
        let (slot, fd, fresh) = (served.0, served.1, served.3);
        let addrs = &served.2;
        let (rbuf, wbuf) = lane
            .buffers
            .get_or_insert_with(|| (ctx.buffers.read_buffer(), ctx.buffers.write_buffer()));
        let mut answered = false;
        let clock = &lane.clock;
        let outcome = crate::server::panics::contain_step(&addrs.0, || {
            let splice = &mut lane.splice;
            exchange(
                fd,
                addrs,
                fresh,
                ctx,
                clock,
                (rbuf, wbuf),
                splice,
                &mut answered,
            )
        });
        let served = outcome.map(|s| match s {
            Served::Kept if closed => Served::Closed,
            s => s,
        });
        let Some(served) = served else {
            // A panic: this connection closes, with whatever it left in the buffers.
            rbuf.clear();
            wbuf.clear();
            lane.splice.clear();
            self.close(slot);
            return;
        };
        match served {
            Served::Kept if answered => {
                let tick = tick_at(lane.clock.now().monotonic_ns);
                let mut p = self.parked.borrow_mut();
                let Some(Some(r)) = p.records.get_mut(slot as usize) else {
                    return;
                };
                r.active = tick;
                if let Kept::Http1 { fresh, .. } = &mut r.idle {
                    *fresh = false;
                }
                // A connection parked after its delay (in `order`) answers in the lane: it
                // takes its place in the lane's list, with the lane's deadline.
                if !r.linked {
                    r.until = Instant::now() + self.keepalive;
                    p.link_last(slot);
                }
            }
            Served::Kept => {}
            Served::Closed => self.close(slot),
            Served::Handover => {
                let record = self.parked.borrow_mut().remove(slot);
                let Some(mut record) = record else {
                    return;
                };
                if let Kept::Http1 { fresh, .. } = &mut record.idle {
                    *fresh &= !answered;
                }
                // The bytes go in buffers of their own size, and the lane keeps its pooled
                // ones: a burst of new HTTP/2 connections (each handed over with its preface)
                // would otherwise leave a full read and write buffer with every task that has
                // yet to run.
                // What is still to send: bytes in memory as one buffer, and a file's rest.
                let file = lane.splice.take_file();
                lane.splice.flatten_into(wbuf);
                let carried = Carried {
                    rbuf: BytesMut::from(&rbuf[..]),
                    wbuf: wbuf.as_slice().to_vec(),
                    file,
                };
                rbuf.clear();
                wbuf.clear();
                self.resume(record, Some(Box::new(carried)));
            }
        }
    }

    /// Closes the lane connection in `slot`.
    fn close(&self, slot: u32) {
        let record = self.parked.borrow_mut().remove(slot);
        if let Some(r) = record {
            self.discard(r);
        }
    }

    /// A parked socket became readable: resume it if a request waits, close it at end of
    /// stream or on an error, park it again if the wake-up was spurious.
    fn wake(&self, slot: u32, record: Record, ctx: &WorkerCtx) {
        let mut byte = [0u8; 1];
        let peek = libc::MSG_PEEK | libc::MSG_DONTWAIT;
        let n = crate::sys::socket::recv(record.socket.as_raw_fd(), &mut byte, peek);
        let spurious = n
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock);
        if spurious && !ctx.close_idle.get() {
            return self.put_back(slot, record);
        }
        self.release(slot);
        if n.is_ok_and(|n| n > 0) && !ctx.close_idle.get() {
            self.resume(record, None);
        } else {
            // The peer closed (or reset), or the server stops.
            self.discard(record);
        }
    }

    /// Closes the HTTP/1.1 connections whose keep-alive deadline passed and resumes the
    /// HTTP/2 connections whose deadline passed; returns the next deadline.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let h1 = self.expire_queue(now, |p| &mut p.order);
        let h2 = self.expire_queue(now, |p| &mut p.order_h2);
        let lane = self.expire_lane(now);
        [h1, h2, lane].into_iter().flatten().min()
    }

    /// Closes the lane's connections whose keep-alive deadline passed (the list's head),
    /// and moves those active since they were listed to the tail with their deadline;
    /// returns the next deadline.
    fn expire_lane(&self, now: Instant) -> Option<Instant> {
        let tick = tick();
        loop {
            let mut p = self.parked.borrow_mut();
            let head = p.lane_head;
            let Some(Some(r)) = p.records.get_mut(head as usize) else {
                return None;
            };
            if r.until > now {
                return Some(r.until);
            }
            // (An activity after `now`, taken later, is no idle time.)
            let idle_ms = Some(tick.wrapping_sub(r.active)).filter(|&ms| ms <= u32::MAX / 2);
            let idle = Duration::from_millis(u64::from(idle_ms.unwrap_or(0)));
            if idle < self.keepalive {
                r.until = now + (self.keepalive - idle);
                p.link_last(head);
                continue;
            }
            let record = p.remove(head);
            drop(p);
            if let Some(r) = record {
                self.discard(r);
            }
        }
    }

    /// `expire` for the records of one FIFO.
    fn expire_queue(
        &self,
        now: Instant,
        queue: impl Fn(&mut Parked) -> &mut VecDeque<(u32, u32)>,
    ) -> Option<Instant> {
        loop {
            let mut p = self.parked.borrow_mut();
            let &(slot, serial) = queue(&mut p).front()?;
            let entry = p.records.get_mut(slot as usize);
            // A record the lane's list took over has a stale entry here.
            let current =
                entry.and_then(|e| e.as_ref().filter(|r| r.serial == serial && !r.linked));
            match current.map(|r| r.until) {
                Some(until) if until > now => return Some(until),
                Some(_) => {
                    queue(&mut p).pop_front();
                    let record = p.records.get_mut(slot as usize).and_then(Option::take);
                    p.free.push(slot);
                    drop(p);
                    // An HTTP/2 connection's task applies its timeout (a GOAWAY).
                    match record {
                        Some(r) if matches!(r.idle, Kept::Http2(_)) => self.resume(r, None),
                        Some(r) => self.discard(r),
                        None => {}
                    }
                }
                // Resumed or re-parked since: a stale entry.
                None => {
                    queue(&mut p).pop_front();
                }
            }
        }
    }

    /// Gives the parked HTTP/2 connections their task back as the server begins to stop:
    /// they send a GOAWAY and close when the client is done.
    fn resume_http2(&self) {
        let woken: Vec<Record> = {
            let mut p = self.parked.borrow_mut();
            p.order_h2.clear();
            let mut woken = Vec::new();
            let mut freed = Vec::new();
            for (slot, entry) in p.records.iter_mut().enumerate() {
                if entry
                    .as_ref()
                    .is_some_and(|r| matches!(r.idle, Kept::Http2(_)))
                {
                    woken.extend(entry.take());
                    freed.push(slot as u32);
                }
            }
            p.free.extend(freed);
            woken
        };
        for r in woken {
            self.resume(r, None);
        }
    }

    /// Gives a parked connection a task again; it reads the request that woke it, or goes on
    /// from what the lane `carried`.
    fn resume(&self, record: Record, carried: Option<Box<Carried>>) {
        let Record {
            socket,
            addrs,
            guard,
            idle,
            ..
        } = record;
        let idle = match idle {
            Kept::Http1 { fresh, open } => Idle::Http1 {
                fresh,
                open,
                carried,
            },
            Kept::Http2(slot) => {
                let asleep = self.parked.borrow_mut().sleepers.take(slot);
                match asleep {
                    Some(a) => Idle::Http2(Box::new(a)),
                    // Not reached: a record's slot holds its state until it leaves.
                    None => return,
                }
            }
        };
        // Leave the parking epoll instance before tokio's takes the socket.
        let _ = crate::sys::epoll::delete(self.epoll.as_raw_fd(), socket.as_raw_fd());
        match TcpStream::from_std(socket) {
            Ok(stream) => spawn_connection(stream, addrs, guard, None, Some(idle)),
            Err(e) => tracing::debug!(peer = %addrs.0, "cannot resume a parked connection: {e}"),
        }
    }

    /// Closes a parked connection: its record and its slot in `Sleepers` go.
    fn discard(&self, record: Record) {
        if let Kept::Http2(slot) = record.idle {
            let asleep = self.parked.borrow_mut().sleepers.take(slot);
            // Dropped outside the borrow, as the record.
            drop(asleep);
        }
        drop(record);
    }
}

/// The slot and serial an event's data names.
fn split(data: u64) -> (u32, u32) {
    ((data & u64::from(u32::MAX)) as u32, (data >> 32) as u32)
}

/// Parks a connection whose driver returned it idle (`h1::Ended::Idle`, `h2::Asleep`);
/// closes it instead when that fails or the server is stopping.
pub(super) fn park(stream: TcpStream, addrs: Addrs, guard: ConnectionGuard, idle: Idle) {
    let conns = guard.conns.clone();
    let Some(parking) = conns.parking.as_ref() else {
        return;
    };
    if conns.ctx.close_idle.get() {
        return;
    }
    let socket = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(peer = %addrs.0, "cannot park a connection: {e}");
            return;
        }
    };
    // A connection that answered a request goes to the lane at once; the others waited.
    let waited = !(parking.lane && matches!(idle, Idle::Http1 { fresh: false, .. }));
    match parking.insert(socket, addrs, guard, idle, waited) {
        Ok(()) => parking.count_freed_task(),
        Err(e) => tracing::debug!(peer = %addrs.0, "cannot park a connection: {e}"),
    }
}

/// Puts a connection just accepted into the lane (`Listener::Lane` in `worker.rs`); closes
/// it when that fails.
pub(super) fn enter(socket: std::net::TcpStream, addrs: Addrs, guard: ConnectionGuard) {
    let conns = guard.conns.clone();
    let Some(parking) = conns.parking.as_ref() else {
        return;
    };
    let idle = Idle::Http1 {
        fresh: true,
        open: crate::metrics::OpenConnection::new(crate::metrics::Proto::Http1),
        carried: None,
    };
    if let Err(e) = parking.insert(socket, addrs, guard, idle, false) {
        tracing::warn!(peer = %addrs.0, "cannot serve a connection in the lane: {e}");
    }
}

/// The coarse monotonic clock in milliseconds, wrapping (every 49 days): a lane record's time
/// of activity in 4 bytes, read without the time-stamp counter. Differences are right while
/// under 49 days, and a record's are under its keep-alive timeout when they are looked at.
fn tick() -> u32 {
    tick_at(crate::http::clock::coarse_ns())
}

/// The tick of `ns` on the coarse monotonic clock.
fn tick_at(ns: u64) -> u32 {
    (ns / 1_000_000) as u32
}

/// Serves this worker's parked connections until the worker ends: readiness, keep-alive
/// deadlines, a server stop, and giving the memory of parked tasks back to the system.
pub(super) async fn watch(conns: Rc<Connections>) {
    let Some(parking) = conns.parking.as_ref() else {
        return;
    };
    let ctx = &conns.ctx;
    let mut last_trim = Instant::now();
    let mut http2_resumed = false;
    // One timer, moved only when the next wake-up changes (not once per readiness).
    let sleep = tokio::time::sleep_until(tokio::time::Instant::now());
    tokio::pin!(sleep);
    let others = Arc::new(Others::default());
    loop {
        let stop = ctx.stop.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        let changed = parking.changed.notified();
        tokio::pin!(changed);
        // HTTP/2 connections first: their tasks send the GOAWAY, also on a stop that closes
        // idle connections.
        if ctx.stopping.get() && !http2_resumed {
            parking.resume_http2();
            http2_resumed = true;
        }
        if ctx.close_idle.get() {
            parking.close_all();
        }
        let now = Instant::now();
        let next = parking.expire(now);
        // A trim is due once enough tasks were freed, at most once per TRIM_INTERVAL.
        let trim_at =
            (parking.since_trim.get() >= TRIM_AFTER_PARKS).then(|| last_trim + TRIM_INTERVAL);
        if trim_at.is_some_and(|t| t <= now) {
            trim_allocator();
            parking.since_trim.set(0);
            last_trim = now;
            continue;
        }
        let wake_at = [next, trim_at].into_iter().flatten().min();
        parking.next_wake.set(next);
        if let Some(t) = wake_at.map(tokio::time::Instant::from_std) {
            if sleep.deadline() != t {
                sleep.as_mut().reset(t);
            }
        }
        // Readiness is served here, the rest of the loop only runs when something else
        // needs a look. The deadline, `changed` and `stop` are polled only after one of them
        // woke the task (through `others`), not on every readiness of the lane.
        others.flag.store(true, Ordering::Release);
        let served = std::future::poll_fn(|cx| {
            let mut looked_again = 0;
            loop {
                match parking.epoll.poll_read_ready(cx) {
                    Poll::Ready(Ok(mut ready)) => match parking.wake_ready(ctx) {
                        Ok(EVENTS_PER_CALL) => {}
                        // Drained after serving some: the peers answered meanwhile are likely
                        // to have sent again, and looking once more here is one system call
                        // where going back to the runtime's poll is two.
                        Ok(n) if n > 0 && looked_again < LOOK_AGAIN => looked_again += 1,
                        // Drained: poll again, which registers for the next edge.
                        Ok(_) => {
                            looked_again = 0;
                            ready.clear_ready()
                        }
                        Err(e) => return Poll::Ready(Err(format!("epoll_wait failed ({e})"))),
                    },
                    Poll::Ready(Err(_)) => {
                        return Poll::Ready(Err("the epoll instance failed".to_string()))
                    }
                    Poll::Pending => break,
                }
            }
            if others.flag.swap(false, Ordering::AcqRel) {
                others.wake_with(cx.waker());
                let waker = std::task::Waker::from(others.clone());
                let mut ocx = Context::from_waker(&waker);
                let due = wake_at.is_some() && sleep.as_mut().poll(&mut ocx).is_ready();
                if due
                    || changed.as_mut().poll(&mut ocx).is_ready()
                    || stop.as_mut().poll(&mut ocx).is_ready()
                {
                    return Poll::Ready(Ok(()));
                }
            }
            Poll::Pending
        })
        .await;
        if let Err(e) = served {
            tracing::warn!("parked connections: {e}; closing them");
            parking.close_all();
            return;
        }
    }
}

/// The waker `watch` gives the futures it polls seldom: it notes that one of them fired,
/// then wakes the task.
#[derive(Default)]
struct Others {
    flag: AtomicBool,
    task: std::sync::Mutex<Option<std::task::Waker>>,
}

impl Others {
    fn wake_with(&self, waker: &std::task::Waker) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if !task.as_ref().is_some_and(|t| t.will_wake(waker)) {
            *task = Some(waker.clone());
        }
    }
}

impl std::task::Wake for Others {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.flag.store(true, Ordering::Release);
        if let Some(t) = self.task.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            t.wake_by_ref();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parked connection costs its worker: keep it small (the slab holds one per
    /// parked connection, the FIFO one entry per park).
    #[test]
    fn a_parked_connection_is_a_small_record() {
        let record = std::mem::size_of::<Option<Record>>();
        eprintln!("parked record: {record} B");
        assert!(record <= 128, "{record} B");
        assert_eq!(std::mem::size_of::<(u32, u32)>(), 8);
        let asleep = std::mem::size_of::<Option<Asleep>>();
        eprintln!("parked HTTP/2 state: {asleep} B");
        assert!(asleep <= 400, "{asleep} B");
    }

    #[test]
    fn sleepers_fill_the_lowest_chunk_first_and_free_empty_chunks() {
        let per = SLEEPERS_PER_CHUNK;
        let mut s = Sleepers::<u32>::default();
        let slots: Vec<u32> = (0..3 * per).map(|v| s.insert(v).unwrap()).collect();
        assert_eq!(slots, (0..3 * per).collect::<Vec<_>>());
        // Empty the second chunk: it is freed; the first and third stay.
        for slot in per..2 * per {
            assert_eq!(s.take(slot), Some(slot));
        }
        assert_eq!(s.take(per), None);
        assert!(s.chunks[1].slots.is_empty());
        assert_eq!(s.chunks[2].slots.len(), per as usize);
        // A slot freed in the first chunk is reused before the freed chunk comes back.
        assert_eq!(s.take(5), Some(5));
        assert_eq!(s.insert(1000), Some(5));
        assert_eq!(s.insert(1001), Some(per));
        assert_eq!(s.take(per), Some(1001));
        // The first chunk stays allocated even when empty.
        for slot in 0..per {
            assert!(s.take(slot).is_some());
        }
        assert_eq!(s.chunks[0].slots.len(), per as usize);
        assert_eq!(s.take(2 * per + 3), Some(2 * per + 3));
    }
}
