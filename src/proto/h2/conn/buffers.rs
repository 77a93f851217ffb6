//! Buffer lending: the output and turn buffers a connection gives back between turns.

use super::repeat::RequestMemo;
use super::{Connection, KEEP_BUFFERS_OPENED, OUT_INITIAL};
use crate::http::Request;
use crate::proto::h2::hpack::HeaderField;
use crate::proto::h2::output::Spliced;
use crate::proto::h2::table::StreamTable;
use bytes::BytesMut;
use std::collections::VecDeque;

/// What [`Connection::release_idle_buffers`] gives back for the driver to lend to the next
/// turn of any connection.
#[derive(Default)]
pub struct Released {
    /// The emptied output buffer ([`Connection::lend_output`]).
    pub output: Option<Vec<u8>>,
    /// The turn buffers of a connection that is not busy ([`Connection::lend_turn_buffers`]).
    pub turn: Option<TurnBuffers>,
}

/// The collections a turn fills and empties again: the stream table, the request queues
/// and the decoded headers' buffers. A connection that is not busy gives them back between
/// turns instead of keeping them, and the next turn of any connection reuses them instead
/// of allocating and growing its own again (thousands of clients that each send a request
/// now and then: h2load -c10000 -m1).
#[derive(Default)]
pub struct TurnBuffers {
    pub(super) streams: StreamTable,
    hbuf: BytesMut,
    fields: Vec<HeaderField>,
    block: Vec<u8>,
    requests: VecDeque<u32>,
    held: VecDeque<(u32, Request)>,
    spliced: Vec<Spliced>,
}

impl TurnBuffers {
    /// The bytes they hold (their capacities).
    pub fn size(&self) -> usize {
        use std::mem::size_of;
        self.streams.size()
            + self.hbuf.capacity()
            + self.fields.capacity() * size_of::<HeaderField>()
            + self.block.capacity()
            + self.requests.capacity() * size_of::<u32>()
            + self.held.capacity() * size_of::<(u32, Request)>()
            + self.spliced.capacity() * size_of::<Spliced>()
    }
}

impl Connection {
    /// Frees the buffers a turn grew (stream table, decoded headers, queues) when the
    /// connection has nothing in flight, and gives back its output buffer once written (even
    /// with streams open), empty, for the driver to lend to the next turn of any connection
    /// ([`Connection::lend_output`]): a waiting connection holds no output buffer, and a turn
    /// of large bodies writes into room an earlier turn grew instead of growing its own
    /// again by doubling. Call before
    /// waiting for input: an idle connection then holds little more than its HPACK tables.
    /// A connection still quiet after `QUIET_TRIM` trims more (see `handle_timeout`).
    ///
    /// A busy connection (its second request since it was last quiet, each within
    /// `KEEP_BUFFERS_WITHIN` of the client's previous input) keeps the rest until
    /// that quiet trim instead: a client that multiplexes sends its next requests within
    /// microseconds, one that does not within a round trip, and freeing and regrowing the
    /// table and queues every turn cost more than decoding the requests. Not after a large
    /// write (over `KEEP_OUTPUT_MAX`): with hundreds of such connections, what each kept
    /// would be out of cache by its next turn, while freed it is the next one's, still warm.
    /// Such a connection keeps its request memo though: its next requests are most likely the
    /// same again, and answered from the memo they skip decoding and the handler.
    pub fn release_idle_buffers(&mut self) -> Released {
        if !self.out.is_empty() {
            return Released::default();
        }
        let out = std::mem::take(&mut self.out);
        let small_answers = !std::mem::take(&mut self.wrote_large);
        let busy = self.opened_lately >= KEEP_BUFFERS_OPENED && self.trim_when_quiet;
        let turn = if busy && small_answers {
            None
        } else {
            self.take_buffers(busy)
        };
        Released {
            output: (out.capacity() > 0).then_some(out),
            turn,
        }
    }

    /// Whether the connection has no output buffer: the driver may lend it one before a turn
    /// ([`Connection::lend_output`]); otherwise the turn allocates its own.
    #[inline]
    pub fn needs_output(&self) -> bool {
        self.out.capacity() == 0
    }

    /// Gives the connection an empty output buffer to use (one another connection released,
    /// see [`Connection::release_idle_buffers`], or a new one when given none). Ignored
    /// unless [`Connection::needs_output`].
    pub fn lend_output(&mut self, mut buf: Vec<u8>) {
        if self.out.capacity() == 0 {
            buf.clear();
            buf.reserve(OUT_INITIAL);
            self.out = buf;
        }
    }

    /// Whether the connection has no turn buffers: the driver may lend it another
    /// connection's ([`Connection::lend_turn_buffers`]); otherwise the turn allocates its own.
    #[inline]
    pub fn needs_turn_buffers(&self) -> bool {
        self.streams.capacity() == 0
    }

    /// Gives the connection the turn buffers another connection released (see
    /// [`Connection::release_idle_buffers`]). Ignored unless [`Connection::needs_turn_buffers`].
    pub fn lend_turn_buffers(&mut self, t: TurnBuffers) {
        if !self.needs_turn_buffers() || !self.streams.is_empty() || self.partial.is_some() {
            return;
        }
        let TurnBuffers {
            streams,
            hbuf,
            fields,
            block,
            requests,
            held,
            spliced,
        } = t;
        self.streams = streams;
        self.hbuf = hbuf;
        self.fields = fields;
        self.block = block;
        self.requests = requests;
        self.held = held;
        self.spliced.lend_list(spliced);
    }

    /// The buffers of [`Connection::release_idle_buffers`], when nothing uses them.
    pub(super) fn free_buffers(&mut self) {
        drop(self.take_buffers(false));
    }

    /// Takes out the turn buffers, emptied, when nothing uses them (none when they held no
    /// memory). The request memo holds its request's part of the decoded headers' buffer: it
    /// goes too, unless `keep_memo` (a busy connection keeps it until the quiet trim or the
    /// next other request).
    pub(super) fn take_buffers(&mut self, keep_memo: bool) -> Option<TurnBuffers> {
        if !self.streams.is_empty() || !self.out.is_empty() || self.partial.is_some() {
            return None;
        }
        self.out = Vec::new();
        if !keep_memo {
            self.memo = RequestMemo::default();
        }
        self.ready = Default::default();
        let mut t = TurnBuffers {
            streams: std::mem::take(&mut self.streams),
            hbuf: std::mem::take(&mut self.hbuf),
            fields: std::mem::take(&mut self.fields),
            block: std::mem::take(&mut self.block),
            requests: std::mem::take(&mut self.requests),
            held: std::mem::take(&mut self.held),
            spliced: self.spliced.take_list(),
        };
        t.fields.clear();
        t.block.clear();
        t.hbuf.clear();
        (t.size() > 0).then_some(t)
    }
}
