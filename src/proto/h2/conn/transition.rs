//! The one place where a stream changes state (RFC 9113 section 5.1, as `stream.rs` types it)
//! and where those changes move the connection's counts of streams in each state: open
//! streams (the table's length: [`Connection::insert`] and `Event::Close`), requests with
//! handlers (`in_handler`), streams sending a body (`sending`) and of those streamed ones
//! (`streaming`), request body pipes (`body_pipes`), and streams closed with their last frame
//! still in the output (`closed_unwritten`). A stream opens through [`Connection::insert`],
//! in the state its first header block says; every later change of variant of its `Recv` or
//! `Send`, counted or not, goes through [`Connection::transition`]; the repeated answers,
//! which never enter the table (`repeat.rs`), are counted through
//! [`Connection::close_repeats`]. Nothing else adds to or takes from those counts, except
//! that `closed_unwritten` is cleared when the output is written.

use super::{Connection, StreamDone, REQUEST_BATCH};
use crate::http::body::{BodyError, BodyWriter, Side};
use crate::proto::h2::stream::{set_send, Recv, Send};

/// What happens to a stream.
pub(super) enum Event {
    /// Its held request goes to a handler (`next_request`): `Waiting { held }` becomes
    /// `WithHandler`.
    HandedOut,
    /// Its held request is dropped (the connection answered it, or it closes), not handed
    /// out. Returns whether it held one.
    HeldDropped,
    /// It is no longer with a handler: the answer came, or the connection answered or dropped
    /// the request itself. [`Connection::transition`] says whether it was with one.
    LeftHandler,
    /// Its sending half becomes this.
    Send(Send),
    /// The handler streams its request body through this pipe.
    PipeOpened(BodyWriter),
    /// Its request body pipe is dropped: the body was all read, or it was aborted.
    PipeClosed,
    /// The client ended it (END_STREAM): half-closed (remote), keeping the body pipe.
    RecvEnded,
    /// It closes: the table forgets it, and the driver hears what it must (work cancelled,
    /// the end of a tracked stream). `told`: our END_STREAM or RST_STREAM for it is in the
    /// output, and the client counts it as open until that is written (`max_streams`).
    Close { told: bool },
}

impl Connection {
    /// Applies `event` to stream `i` and the counts that depend on its state. Returns whether
    /// it changed anything (`LeftHandler`: whether the stream was with a handler).
    ///
    /// Every caller passes a constant event: inlined, only its arm is left.
    #[inline(always)]
    pub(super) fn transition(&mut self, i: usize, event: Event) -> bool {
        match event {
            Event::HandedOut => {
                self.in_handler += 1;
                let send = &mut self.streams[i].send;
                debug_assert!(send.holds_request());
                let head = matches!(send, Send::Waiting { head: true, .. });
                // `Waiting` holds nothing: no drop glue, no test of what it was.
                std::mem::forget(std::mem::replace(send, Send::WithHandler { head }));
                true
            }
            Event::HeldDropped => self.drop_held_request(i),
            Event::LeftHandler => self.leave_handler(i),
            Event::Send(to) => {
                self.set_send(i, to);
                true
            }
            Event::PipeOpened(writer) => {
                let (Recv::Open { pipe, .. } | Recv::Closed { pipe }) = &mut self.streams[i].recv;
                *pipe = Some(writer);
                self.body_pipes += 1;
                true
            }
            Event::PipeClosed => self.close_pipe(i),
            Event::RecvEnded => {
                let recv = &mut self.streams[i].recv;
                let Recv::Open { pipe, .. } = recv else {
                    return false;
                };
                let pipe = pipe.take();
                // What is left of `Open` is plain numbers: no drop glue.
                std::mem::forget(std::mem::replace(recv, Recv::Closed { pipe }));
                true
            }
            Event::Close { told } => {
                if told {
                    self.closed_unwritten += 1;
                }
                self.remove(i);
                true
            }
        }
    }

    /// Opens stream `id` in the table, made where it stays: its slot, in the state `halves`
    /// (`Recv`, `Send`) its first header block says. The table's length is the count of open
    /// streams (`max_streams`), so opening is counted there, as closing is in `Event::Close`.
    #[inline]
    pub(super) fn insert(&mut self, id: u32, halves: (Recv, Send)) -> usize {
        let send_window = self.peer_initial_window;
        let recv_window = self.cfg.input_window;
        self.streams
            .open(id, send_window, recv_window, halves, REQUEST_BATCH)
    }

    /// Counts `n` repeated answers, streams that closed without entering the table, as
    /// `Close { told: true }` would: each one's END_STREAM is in the output, and the client
    /// counts it as open until it reads it (`max_streams`).
    #[inline(always)]
    pub(super) fn close_repeats(&mut self, n: u32) {
        self.closed_unwritten += n;
    }

    #[inline(always)]
    fn leave_handler(&mut self, i: usize) -> bool {
        let send = &mut self.streams[i].send;
        let Send::WithHandler { head } = *send else {
            return false;
        };
        // `WithHandler` holds nothing: no drop glue.
        std::mem::forget(std::mem::replace(send, Send::Waiting { held: false, head }));
        self.in_handler -= 1;
        true
    }

    /// Stream `i` no longer holds its request, which is dropped (`drop_held`).
    fn drop_held_request(&mut self, i: usize) -> bool {
        let s = &mut self.streams[i];
        let Send::Waiting { held, .. } = &mut s.send else {
            return false;
        };
        if !std::mem::take(held) {
            return false;
        }
        let id = s.id;
        self.drop_held(id);
        true
    }

    /// Moves stream `i`'s sending half to `to`, keeping the `sending` and `streaming` counts
    /// (`Send::is_sending`, `Send::is_streaming`).
    #[inline]
    fn set_send(&mut self, i: usize, to: Send) {
        let send = &mut self.streams[i].send;
        self.sending = self.sending - u32::from(send.is_sending()) + u32::from(to.is_sending());
        self.streaming =
            self.streaming - u32::from(send.is_streaming()) + u32::from(to.is_streaming());
        set_send(send, to);
    }

    fn close_pipe(&mut self, i: usize) -> bool {
        let (Recv::Open { pipe, .. } | Recv::Closed { pipe }) = &mut self.streams[i].recv;
        if pipe.take().is_none() {
            return false;
        }
        self.body_pipes -= 1;
        true
    }

    fn remove(&mut self, i: usize) {
        let s = &self.streams[i];
        if s.recv.pipe().is_some()
            || s.sent.is_some()
            || matches!(
                s.send,
                Send::Waiting { held: true, .. } | Send::WithHandler { .. } | Send::Stream(_)
            )
        {
            self.before_remove(i);
        }
        if self.streams[i].send.is_sending() {
            // What the stream sent is already reported (`before_remove`).
            self.set_send(i, Send::Done);
        }
        self.streams.close(i);
        self.check_done();
    }

    /// What the driver must hear of stream `i`'s removal: its request body is aborted, its
    /// work cancelled, its end reported for the log. Not on the inline path.
    #[cold]
    #[inline(never)]
    fn before_remove(&mut self, i: usize) {
        self.drop_held_request(i);
        if self.streams[i].recv.pipe().is_some() {
            let why = BodyError::new(Side::Downstream, "stream closed before the body ended");
            self.drop_pipe(i, why);
        }
        let id = self.streams[i].id;
        if let Send::Stream(_) = self.streams[i].send {
            // Out of the counts in `remove`, once its end is reported.
            self.cancelled.push(id);
        }
        if self.leave_handler(i) {
            self.cancelled.push(id);
        }
        let s = &self.streams[i];
        if let Some(sent) = &s.sent {
            self.done.push(StreamDone {
                id,
                status: sent.status,
                mark: sent.mark,
                head_bytes: sent.head,
                body_bytes: sent.body,
                complete: matches!(s.send, Send::Done),
            });
        }
    }
}
