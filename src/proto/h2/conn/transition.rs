//! The one place where a stream's changes of state move the connection's counts of streams
//! in each state: open streams (the table's length: [`Connection::insert`] and
//! `Event::Close`), requests with handlers (`in_handler`), streams sending a body (`sending`)
//! and of those streamed ones (`streaming`), request body pipes (`body_pipes`), and streams
//! closed with their last frame still in the output (`closed_unwritten`). Every event of a
//! stream's life that changes one of them goes through [`Connection::transition`], its opening
//! through [`Connection::insert`], and the repeated answers, which never enter the table (`repeat.rs`), through
//! [`Connection::close_repeats`]; nothing else adds to or takes from those counts, except that
//! `closed_unwritten` is cleared when the output is written.

use super::{Connection, StreamDone, REQUEST_BATCH};
use crate::http::body::{BodyError, BodyWriter, Side};
use crate::proto::h2::stream::{set_send, Send};

/// What happens to a stream, as far as the connection's counts go.
pub(super) enum Event {
    /// Its request goes to a handler (`next_request`).
    HandedOut,
    /// It is no longer with a handler: the answer came, or the connection answered or dropped
    /// the request itself. [`Connection::transition`] says whether it was with one.
    LeftHandler,
    /// Its sending half becomes this.
    Send(Send),
    /// The handler streams its request body through this pipe.
    PipeOpened(BodyWriter),
    /// Its request body pipe is dropped: the body was all read, or it was aborted.
    PipeClosed,
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
                debug_assert!(matches!(send, Send::Waiting));
                // `Waiting` holds nothing: no drop glue, no test of what it was.
                std::mem::forget(std::mem::replace(send, Send::WithHandler));
                true
            }
            Event::LeftHandler => self.leave_handler(i),
            Event::Send(to) => {
                self.set_send(i, to);
                true
            }
            Event::PipeOpened(writer) => {
                self.streams[i].body = Some(writer);
                self.body_pipes += 1;
                true
            }
            Event::PipeClosed => self.close_pipe(i),
            Event::Close { told } => {
                if told {
                    self.closed_unwritten += 1;
                }
                self.remove(i);
                true
            }
        }
    }

    /// Opens stream `id` in the table, made where it stays: its slot. The table's length is the
    /// count of open streams (`max_streams`), so opening is counted there, as closing is in
    /// `Event::Close`.
    #[inline]
    pub(super) fn insert(&mut self, id: u32) -> usize {
        let send_window = self.peer_initial_window;
        let recv_window = self.cfg.input_window;
        self.streams
            .open(id, send_window, recv_window, REQUEST_BATCH)
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
        let was = matches!(send, Send::WithHandler);
        if was {
            // `WithHandler` holds nothing: no drop glue.
            std::mem::forget(std::mem::replace(send, Send::Waiting));
            self.in_handler -= 1;
        }
        was
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
        if self.streams[i].body.take().is_none() {
            return false;
        }
        self.body_pipes -= 1;
        true
    }

    fn remove(&mut self, i: usize) {
        let s = &self.streams[i];
        if s.body.is_some()
            || s.holds_request
            || s.sent.is_some()
            || matches!(s.send, Send::WithHandler | Send::Stream(_))
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
        if std::mem::take(&mut self.streams[i].holds_request) {
            self.drop_held(self.streams[i].id);
        }
        if self.streams[i].body.is_some() {
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
