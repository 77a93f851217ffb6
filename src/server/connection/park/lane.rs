//! The lane's side of a connection's turn: reading what a lane socket has, answering the
//! inline requests in place (`h1::answer_in_lane`) and sending their responses, all without
//! waiting. `Parking::serve` (`park.rs`) runs it on readiness and keeps, hands over or closes
//! the connection by what it returns.

use crate::http::clock::BatchClock;
use crate::server::buffers::READ_BUFFER;
use crate::server::context::{Addrs, WorkerCtx};
use crate::server::h1::{self, LaneStep, Sink, SplicedBodies};
use bytes::BytesMut;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};

/// A read buffer with less room than this grows before the next read.
const READ_ROOM_MIN: usize = 1024;
/// Full reads a lane connection gets per readiness: a client that keeps its socket full goes
/// to a task (whose reads take turns with the other tasks) rather than hold the lane.
const READS_PER_TURN: usize = 4;

/// What one batch of readiness events shares: the worker's buffers (taken at the first lane
/// event, given back after the batch) and the clocks, read at the first answer.
#[derive(Default)]
pub(super) struct Lane {
    pub buffers: Option<(BytesMut, Vec<u8>)>,
    pub clock: BatchClock,
    /// Bodies sent from their own memory (empty between connections).
    pub splice: SplicedBodies,
}

/// How a lane connection's turn ended.
pub(super) enum Served {
    /// Nothing left to read: it stays in the lane.
    Kept,
    /// A task takes over from what is in the buffers.
    Handover,
    /// End of stream or an error.
    Closed,
}

/// Reads what `fd` has (edge-triggered: until a read comes short), answers the inline
/// requests (`h1::answer_in_lane`) and sends their responses with one `send` per read;
/// `answered` says whether any request was. Leaves the buffers (read, write) and `splice`
/// empty unless it hands over: then what is still to send is in `wbuf` and `splice`.
#[allow(clippy::too_many_arguments)]
pub(super) fn exchange(
    fd: RawFd,
    addrs: &Addrs,
    fresh: bool,
    ctx: &WorkerCtx,
    clock: &BatchClock,
    (rbuf, wbuf): (&mut BytesMut, &mut Vec<u8>),
    splice: &mut SplicedBodies,
    answered: &mut bool,
) -> Served {
    let pipelined = ctx.routing().config.limits.pipelined_requests;
    for _ in 0..READS_PER_TURN {
        if rbuf.capacity() - rbuf.len() < READ_ROOM_MIN {
            rbuf.reserve(READ_BUFFER);
        }
        let room = rbuf.capacity() - rbuf.len();
        // The system call itself: libc's `recv` is a cancellation point, which costs more
        // than the rest of its wrapper, on every request. `rbuf` grows by what came.
        let n = match crate::sys::socket::recv_direct(fd, rbuf, libc::MSG_DONTWAIT) {
            Ok(n) => n,
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => return Served::Kept,
                io::ErrorKind::Interrupted => continue,
                _ => return Served::Closed,
            },
        };
        if n == 0 {
            // A partial request then end of stream: the task answers as it would.
            return if rbuf.is_empty() {
                Served::Closed
            } else {
                Served::Handover
            };
        }
        let mut queued = 0;
        while !rbuf.is_empty() {
            let fresh = fresh && !*answered;
            let send_alone = |answer: &[u8]| send_once(fd, answer).unwrap_or(0);
            match h1::answer_in_lane(ctx, addrs, fresh, clock, rbuf, wbuf, splice, send_alone) {
                LaneStep::Answered => *answered = true,
                LaneStep::Handover => return Served::Handover,
            }
            queued += 1;
            // A file goes out before anything follows it.
            if queued >= pipelined || splice.ends_with_file() {
                if !send_now(fd, wbuf, splice) {
                    return Served::Handover;
                }
                queued = 0;
            }
        }
        if !send_now(fd, wbuf, splice) {
            return Served::Handover;
        }
        if n < room {
            return Served::Kept;
        }
    }
    // More to read, and no new edge will say so.
    Served::Handover
}

/// Sends `wbuf` with the bodies spliced into it without waiting; true when all of it went
/// (both are then empty). What did not go stays in `wbuf` for the task that takes over (an
/// error there closes it).
#[inline]
fn send_now(fd: RawFd, wbuf: &mut Vec<u8>, splice: &mut SplicedBodies) -> bool {
    if !splice.is_empty() {
        return send_spliced(fd, wbuf, splice);
    }
    // Empty after an answer sent alone (`h1::answer_in_lane`): no call.
    wbuf.is_empty() || send_queued(fd, wbuf)
}

#[inline(never)]
fn send_spliced(fd: RawFd, wbuf: &mut Vec<u8>, splice: &mut SplicedBodies) -> bool {
    splice.send_all(wbuf, &mut Socket(fd))
}

/// A lane socket as the sink of spliced output: the system calls themselves, without waiting.
struct Socket(RawFd);

impl Sink for Socket {
    fn gathered(&mut self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        let more = if more { libc::MSG_MORE } else { 0 };
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | more;
        crate::sys::socket::send_gathered_direct(self.0, iov, flags)
    }

    fn file(
        &mut self,
        file: &std::fs::File,
        offset: &mut libc::off_t,
        len: usize,
    ) -> io::Result<usize> {
        // The socket does not block: a file larger than its room goes in part, and the
        // task that takes over sends the rest.
        crate::sys::file::sendfile(self.0, file.as_raw_fd(), offset, len)
    }
}

#[inline(never)]
fn send_queued(fd: RawFd, wbuf: &mut Vec<u8>) -> bool {
    while !wbuf.is_empty() {
        match send_once(fd, wbuf) {
            Ok(n) => {
                wbuf.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// One `send` of `bytes` without waiting: how many the socket took.
#[inline]
fn send_once(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    // The system call itself, as for the read (`exchange`).
    crate::sys::socket::send_direct(fd, bytes, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
}
