//! The stream table's bookkeeping: resets, connection errors, held requests; streams open and
//! close in `transition.rs`.

use super::transition::Event;
use super::{Closed, Connection, Fail, Phase, Res, RECENT_RESETS};
use crate::http::Request;
use crate::proto::h2::frame::{self, Reason};
use std::time::Instant;

impl Connection {
    /// Resets stream `i` from our side (a failed or inconsistent streamed body), without
    /// charging the client's reset budget.
    pub(super) fn reset(&mut self, i: usize, reason: Reason) {
        let id = self.streams[i].id;
        self.put_reset(id, reason);
        self.note_reset(id);
        self.transition(i, Event::Close { told: true });
    }

    /// Applies a frame handler's result: a stream's error resets the stream (`stream_error`)
    /// and the connection goes on, unless the resets it is made to send exceed their budget;
    /// the connection's passes on, for `recv_with` to drop the input and send GOAWAY.
    #[inline(always)]
    pub(super) fn apply(&mut self, r: Res, now: Instant) -> Res {
        match r {
            Err(Fail::Stream { id, code }) => self.stream_error(id, code, now),
            r => r,
        }
    }

    /// Resets stream `id` with `reason` (RST_STREAM) and forgets it. Called directly only
    /// where a stream is refused and its header block is still decoded (HPACK sync); every
    /// other stream error is a [`Fail::Stream`] the frame handler returns.
    pub(super) fn stream_error(&mut self, id: u32, reason: Reason, now: Instant) -> Res {
        self.put_reset(id, reason);
        self.note_reset(id);
        if let Some(i) = self.index(id) {
            self.transition(i, Event::Close { told: true });
        }
        // Resets we are made to send cost the same budget as the client's (MadeYouReset).
        self.spend_reset(now)
    }

    /// Writes RST_STREAM(`reason`) for stream `id`, counted in the metrics.
    pub(super) fn put_reset(&mut self, id: u32, reason: Reason) {
        frame::put_rst_stream(&mut self.out, id, reason);
        self.stats.reset(true, reason);
    }

    pub(super) fn note_reset(&mut self, id: u32) {
        if self.recently_reset.len() >= RECENT_RESETS {
            self.recently_reset.pop_front();
        }
        self.recently_reset.push_back(id);
    }

    pub(super) fn fail(&mut self, reason: Reason, why: &'static str) {
        frame::put_goaway(&mut self.out, self.max_client_stream, reason);
        self.stats.goaway(true, reason, why);
        self.closed = Some(Closed::GoAway(reason, why));
        self.partial = None;
    }

    pub(super) fn check_done(&mut self) {
        if self.closed.is_some() || !self.streams.is_empty() {
            return;
        }
        if let Phase::Final { .. } = self.phase {
            self.closed = Some(Closed::GoAway(Reason::NO_ERROR, "server stopping"));
        } else if self.peer_goaway {
            self.closed = Some(Closed::PeerGoAway);
        }
    }

    pub(super) fn index(&self, id: u32) -> Option<usize> {
        self.streams.position(id)
    }

    /// Stream `id`'s held request, out of the table.
    #[inline]
    pub(super) fn take_held(&mut self, id: u32) -> Option<Request> {
        if self.held.front().is_some_and(|(held, _)| *held == id) {
            return self.held.pop_front().map(|(_, req)| req);
        }
        let k = self.held_position(id)?;
        self.held.remove(k).map(|(_, req)| req)
    }

    /// Where stream `id`'s request is in `held`: mostly the first.
    #[inline]
    pub(super) fn held_position(&self, id: u32) -> Option<usize> {
        if self.held.front().is_some_and(|(held, _)| *held == id) {
            return Some(0);
        }
        self.held.iter().position(|(held, _)| *held == id)
    }

    /// Drops stream `id`'s held request (the stream went away or was answered early).
    pub(super) fn drop_held(&mut self, id: u32) {
        if let Some(req) = self.take_held(id) {
            req.recycle();
        }
    }
}
