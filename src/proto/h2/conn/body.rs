//! Request bodies: DATA, discarded or piped to the handler, and the receive windows they
//! consume.

use super::transition::Event;
use super::{Connection, Fail, Res};
use crate::http::body::{self, BodyError, Side, Trailers};
use crate::http::Request;
use crate::proto::h2::frame::{self, Reason};
use crate::proto::h2::stream::{Recv, Send};
use bytes::Bytes;
use std::time::Instant;

impl Connection {
    /// Stream `id`'s request was just opened with a body to follow: if its handler streams
    /// bodies, the request gets a body pipe and is handed out now, before its body.
    pub(super) fn attach_body(&mut self, id: u32, streams_body: &dyn Fn(&Request) -> bool) {
        let Some(i) = self.index(id) else { return };
        let s = &self.streams[i];
        let Recv::Open { content_length, .. } = s.recv else {
            return;
        };
        if !s.send.holds_request() {
            return;
        }
        let Some((_, req)) = self.held.iter_mut().find(|(held, _)| *held == id) else {
            return;
        };
        if !streams_body(req) {
            return;
        }
        let (writer, reader) = body::pipe(content_length);
        req.set_body(reader);
        self.transition(i, Event::PipeOpened(writer));
        self.requests.push_back(id);
    }

    pub(super) fn on_data(
        &mut self,
        id: u32,
        end_stream: bool,
        data: &[u8],
        flow_len: u32,
        now: Instant,
    ) -> Res {
        let len = data.len();
        if flow_len > self.recv_conn_window {
            return Err(Fail::Connection {
                code: Reason::FLOW_CONTROL_ERROR,
                why: "connection window exceeded",
            });
        }
        // Discarded bodies give the connection window back at once; bytes kept in a body
        // pipe may hold some of it back (`hold_credit`).
        self.recv_conn_window -= flow_len;
        self.recv_conn_unacked += flow_len;
        if len == 0 && !end_stream {
            self.spend_control(now)?;
        }
        let Some(i) = self.index(id) else {
            if id > self.max_client_stream {
                return Err(Fail::Connection {
                    code: Reason::PROTOCOL_ERROR,
                    why: "DATA on an idle stream",
                });
            }
            if self.recently_reset.contains(&id) {
                // We reset it; the client may have sent this before it knew.
                return Ok(());
            }
            return Err(Fail::Stream {
                id,
                code: Reason::STREAM_CLOSED,
            });
        };
        if matches!(self.streams[i].recv, Recv::Closed { .. }) {
            return Err(Fail::Stream {
                id,
                code: Reason::STREAM_CLOSED,
            });
        }
        if flow_len > self.streams[i].recv_window {
            return Err(Fail::Stream {
                id,
                code: Reason::FLOW_CONTROL_ERROR,
            });
        }
        let s = &mut self.streams[i];
        s.recv_window -= flow_len;
        let (received, content_length, tunnel) = match &mut s.recv {
            Recv::Open {
                content_length,
                received,
                tunnel,
                ..
            } => {
                *received += len as u64;
                (*received, *content_length, *tunnel)
            }
            Recv::Closed { .. } => (0, None, false),
        };
        if content_length.is_some_and(|cl| received > cl || (end_stream && received != cl)) {
            return Err(Fail::Stream {
                id,
                code: Reason::PROTOCOL_ERROR,
            });
        }
        if received > self.cfg.max_request_body && !tunnel {
            return self.body_too_large(i);
        }
        let s = &mut self.streams[i];
        // Bytes kept in a pipe earn credit when read (`credit_consumed`); padding and
        // discarded bodies at once.
        let mut credit = flow_len;
        if let Some(w) = s.recv.pipe() {
            if len > 0 {
                w.push(Bytes::copy_from_slice(data));
                self.unread_total += len as u64;
                credit -= len as u32;
                self.hold_credit();
            }
        }
        if end_stream {
            return self.end_of_request(id, None);
        }
        let s = &mut self.streams[i];
        s.recv_unacked += credit;
        if s.recv_unacked >= self.cfg.input_window / 2 {
            frame::put_window_update(&mut self.out, id, s.recv_unacked);
            s.recv_window += s.recv_unacked;
            s.recv_unacked = 0;
        }
        Ok(())
    }

    /// Stream `i`'s request body passed `limit-request-body`: 413 if no response started
    /// (its end then resets the stream with NO_ERROR to stop the body), else RST_STREAM. A
    /// body pipe is aborted and dropped; further DATA is discarded.
    pub(super) fn body_too_large(&mut self, i: usize) -> Res {
        let id = self.streams[i].id;
        self.drop_pipe(
            i,
            BodyError::new(
                Side::Internal,
                "request body larger than limit-request-body",
            ),
        );
        if self.streams[i].send.unanswered() {
            self.respond_early(id, 413);
            Ok(())
        } else {
            Err(Fail::Stream {
                id,
                code: Reason::CANCEL,
            })
        }
    }

    /// The client ended stream `id`: its request is complete.
    pub(super) fn end_of_request(&mut self, id: u32, trailers: Option<Trailers>) -> Res {
        let Some(i) = self.index(id) else {
            return Ok(());
        };
        self.transition(i, Event::RecvEnded);
        let s = &self.streams[i];
        if let Some(w) = s.recv.pipe() {
            // Handed out (or queued) when its head arrived.
            w.finish(trailers);
            if matches!(s.send, Send::Done) {
                // Answered already; the rest of the body was let in and dropped.
                self.transition(i, Event::Close { told: false });
            }
        } else if s.send.holds_request() {
            self.requests.push_back(id);
        } else if matches!(s.send, Send::Done) {
            self.transition(i, Event::Close { told: false });
        }
        Ok(())
    }

    /// Returns credit for the request body bytes handlers read since the last call: a stream
    /// WINDOW_UPDATE per half window read (while the stream still receives), and the
    /// connection credit held back for them.
    pub(super) fn credit_consumed(&mut self) {
        let half = self.cfg.input_window / 2;
        for i in 0..self.streams.slots() {
            let s = &mut self.streams[i];
            // A free slot has no pipe.
            let (w, receiving) = match &s.recv {
                Recv::Open { pipe: Some(w), .. } => (w, true),
                Recv::Closed { pipe: Some(w) } => (w, false),
                _ => continue,
            };
            let read = w.take_consumed();
            if read == 0 {
                continue;
            }
            self.unread_total = self.unread_total.saturating_sub(read);
            if receiving {
                s.recv_unacked = s
                    .recv_unacked
                    .saturating_add(u32::try_from(read).unwrap_or(u32::MAX));
                if s.recv_unacked >= half {
                    frame::put_window_update(&mut self.out, s.id, s.recv_unacked);
                    s.recv_window = s.recv_window.saturating_add(s.recv_unacked);
                    s.recv_unacked = 0;
                }
            } else if w.buffered() == 0 && w.is_finished() {
                // All of it arrived and was read: nothing more to account for.
                self.transition(i, Event::PipeClosed);
            }
        }
        self.hold_credit();
        self.replenish_connection_window();
    }

    /// Keeps connection credit back for the unread request body bytes above one window
    /// (`input_window`), and gives back what was held once they are read. One stalled stream
    /// (at most one window unread) never holds connection credit, so it does not starve the
    /// others; a connection buffers at most about two windows of request bodies.
    pub(super) fn hold_credit(&mut self) {
        let held = self
            .unread_total
            .saturating_sub(u64::from(self.cfg.input_window));
        if held > self.credit_held {
            let more = u32::try_from(held - self.credit_held).unwrap_or(u32::MAX);
            self.recv_conn_unacked = self.recv_conn_unacked.saturating_sub(more);
        } else {
            let back = u32::try_from(self.credit_held - held).unwrap_or(u32::MAX);
            self.recv_conn_unacked = self.recv_conn_unacked.saturating_add(back);
        }
        self.credit_held = held;
    }

    /// Aborts (unless already finished) and drops stream `i`'s request body pipe; its unread
    /// bytes (queued, or read since the last `credit_consumed`) no longer hold credit.
    pub(super) fn drop_pipe(&mut self, i: usize, why: BodyError) {
        let Some(w) = self.streams[i].recv.pipe() else {
            return;
        };
        if !w.is_finished() {
            w.abort(why);
        }
        let unread = w.buffered() as u64 + w.take_consumed();
        self.transition(i, Event::PipeClosed);
        self.unread_total = self.unread_total.saturating_sub(unread);
        self.hold_credit();
    }

    pub(super) fn replenish_connection_window(&mut self) {
        // Batched: one WINDOW_UPDATE per half window consumed, not one per DATA frame.
        let target = self.cfg.input_window.max(frame::DEFAULT_WINDOW);
        if self.recv_conn_unacked >= target / 2 {
            frame::put_window_update(&mut self.out, 0, self.recv_conn_unacked);
            self.recv_conn_window += self.recv_conn_unacked;
            self.recv_conn_unacked = 0;
        }
    }
}
