//! The server side of one HTTP/2 connection, sans-IO: bytes in ([`Connection::recv_with`]),
//! requests out ([`Connection::next_request`]), responses in ([`Connection::respond`]),
//! bytes out ([`Connection::fill`] / [`Connection::output_parts`]). Streamed bodies cross as
//! values, never as I/O: a request body goes into the pipe the handler reads, and a streamed
//! response body is polled by the driver and pushed in ([`Connection::push_body`]) when
//! [`Connection::wants_body`] says the client can take more. No socket, no clock and no
//! global: the driver passes `now`, the Date and the coarse clock ([`Connection::set_now`]), lends the
//! worker's run buffer to `recv`, takes the counts for the metrics
//! ([`Connection::take_stats`]), and asks [`Connection::poll_timeout`] when to call
//! [`Connection::handle_timeout`]. See `LIFECYCLE.md` next to this file.
//!
//! This file holds the connection and its public API; the rest is in files of one concern
//! each, every one an `impl Connection` block.

use super::flow::Window;
use super::frame::{self, flag, kind, setting, Frame, FrameError, Head, Reason, MAX_WINDOW};
use super::hpack::{self, HeaderField};
use super::output::{OutputParts, SplicedBodies};
use super::ready::{self, ReadyQueues};
use super::runs::RunBuffer;
use super::stream::{Recv, Send, Tail};
use super::table::StreamTable;
use crate::http::body::{BodyStream, Trailers};
use crate::http::clock::DATE_LEN;
use crate::http::{Request, Response};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod body;
mod buffers;
mod flood;
mod headers;
mod park;
mod recv;
mod repeat;
mod send;
mod settings;
mod stats;
mod streams;
mod transition;

pub use buffers::{Released, TurnBuffers};
pub use park::Parked;
pub use settings::Settings;
pub use stats::{GoAway, Stats, RESET_CODES};

use flood::{Budget, Dribble};
use repeat::RequestMemo;
use send::HeadersCache;
use transition::Event;

/// Stop pulling body bytes into the output once it holds this much: the driver writes it out
/// first, so memory per connection stays bounded whatever the windows are. Whole small
/// answers may fill the output further, up to [`Settings::max_write`].
pub const OUTPUT_HIGH_WATER: usize = 128 * 1024;

/// The default of [`Settings::max_write`]: a turn of 100 answers of 4 KiB goes out in one
/// write (about 420 KB).
pub const DEFAULT_MAX_WRITE: usize = 512 * 1024;

/// Why a connection ended, for the driver's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// We sent GOAWAY with this code (NO_ERROR for idle timeout and graceful shutdown).
    GoAway(Reason, &'static str),
    /// The client sent GOAWAY and every stream is finished.
    PeerGoAway,
}

/// A stream the driver asked to track ([`Connection::respond_tracked`]) has ended: what the
/// access log and the metrics need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamDone {
    pub id: u32,
    /// The response's status.
    pub status: u16,
    /// What the driver gave with the response (the metrics clock at the request's start).
    pub mark: u64,
    /// Response header block bytes sent (HEADERS, CONTINUATION and trailers payloads).
    pub head_bytes: u64,
    /// Response body bytes sent (DATA payloads).
    pub body_bytes: u64,
    /// The response ended with END_STREAM; otherwise the stream was reset or the
    /// connection ended first.
    pub complete: bool,
}

/// One HTTP/2 server connection.
pub struct Connection {
    cfg: Arc<Settings>,
    peer: SocketAddr,
    local: SocketAddr,
    phase: Phase,
    closed: Option<Closed>,
    /// The frames to write; large payloads in memory go out from there (`spliced`).
    out: Vec<u8>,
    spliced: SplicedBodies,

    // Receiving.
    decoder: hpack::Decoder,
    /// Decoded header bytes; each request freezes its part and the rest is reused.
    hbuf: BytesMut,
    fields: Vec<HeaderField>,
    /// A header block waiting for CONTINUATION frames.
    partial: Option<Partial>,
    block: Vec<u8>,
    /// The last request whose header block left the HPACK table as it was, to repeat for
    /// the same block bytes.
    memo: RequestMemo,
    recv_conn_window: u32,
    recv_conn_unacked: u32,
    /// The highest stream id the client opened.
    max_client_stream: u32,
    last_frame_at: Instant,
    peer_goaway: bool,

    // Peer settings and sending.
    encoder: hpack::Encoder,
    headers_cache: HeadersCache,
    peer_max_frame: u32,
    peer_initial_window: u32,
    send_conn_window: Window,
    stalled_since: Option<Instant>,
    /// The Date field of this turn's responses, from the driver's clock ([`Connection::set_now`]).
    date: [u8; DATE_LEN],
    /// The coarse monotonic clock of this turn ([`crate::http::clock::coarse_ns`]), from the
    /// driver ([`Connection::set_now`]): whether a memoised answer's file may be given again.
    coarse_ns: u64,
    /// Counts for the metrics, until the driver takes them.
    stats: Stats,
    /// The driver's metrics mark for this turn's requests ([`Connection::set_turn_mark`]),
    /// for those answered from the memo.
    turn_mark: u64,

    // Streams.
    streams: StreamTable,
    /// Streams with body bytes to send, by urgency.
    ready: ReadyQueues,
    /// Streams whose request is complete, in arrival order.
    requests: VecDeque<u32>,
    /// The requests not yet handed out, by stream id (`Send::Waiting { held: true }`): out of
    /// the stream table, whose entries move on every insertion and removal. Mostly in the
    /// order they are handed out, so taking one is taking the first.
    held: VecDeque<(u32, Request)>,
    /// Requests handed out and not yet answered (`Send::WithHandler`). This count and the
    /// next three change only in `Connection::transition`.
    in_handler: u32,
    /// Streams with response bytes left to send (`Send::Body` or `Send::Stream`).
    sending: u32,
    /// Of those, streamed bodies (`Send::Stream`).
    streaming: u32,
    /// Streams with a request body pipe (`Recv::Open` or `Recv::Closed` with `pipe`).
    body_pipes: u32,
    /// Request body bytes in pipes and not yet read, over all streams.
    unread_total: u64,
    /// Connection-level credit held back because `unread_total` is above one window.
    credit_held: u64,
    /// A request whose body follows was opened by the frame just processed: `recv_with` asks
    /// whether its handler streams bodies.
    opened_with_body: Option<u32>,
    /// Streams that went away while the driver held work for them (a pending answer, a
    /// streamed body): the driver drops that work.
    cancelled: Vec<u32>,
    /// Tracked streams that ended.
    done: Vec<StreamDone>,
    /// Streams we closed whose END_STREAM or RST_STREAM is still in the output: the client
    /// counts them as open until it reads that, so they count against `max_streams`.
    closed_unwritten: u32,
    /// `recv` stopped after a batch of new requests and left frames in its input.
    recv_paused: bool,
    /// New streams seen by the current `recv` call.
    batch_opened: usize,
    /// New streams since the connection was last quiet ([`QUIET_TRIM`]) or its client last
    /// waited longer than [`KEEP_BUFFERS_WITHIN`]: from [`KEEP_BUFFERS_OPENED`] on, the
    /// connection is busy and keeps its buffers between turns.
    opened_lately: u32,
    /// A write since the last `release_idle_buffers` was larger than [`KEEP_OUTPUT_MAX`].
    wrote_large: bool,
    /// A graceful shutdown began before the client's preface and SETTINGS: it starts once
    /// they came.
    drain_when_open: bool,
    /// Input came since the last trim: trim once the client stays quiet for [`QUIET_TRIM`].
    /// Set by input only, so a trim that found nothing to do is not retried in a loop.
    trim_when_quiet: bool,

    /// Streams we reset lately: frames the client sent before it saw the reset are ignored.
    recently_reset: VecDeque<u32>,
    resets: Budget,
    control: Budget,
    /// Small WINDOW_UPDATEs and DATA frames sent since the connection last woke: the data
    /// dribble check (`spend_tiny_window_update`).
    dribble: Dribble,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the 24-byte client preface.
    Preface,
    /// Preface received; the first frame must be SETTINGS.
    FirstSettings,
    Open,
    /// First GOAWAY (2^31-1) and a PING sent; the final GOAWAY follows the PING's ACK.
    Draining,
    /// Final GOAWAY sent: streams above `last` are ignored; the connection ends when the
    /// table is empty.
    Final {
        last: u32,
    },
}

/// What a header block in progress is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockUse {
    Request,
    Trailers,
    /// Decoded only to keep the HPACK table in sync: refused, closed or ignored stream.
    Discard,
}

#[derive(Debug)]
struct Partial {
    stream: u32,
    end_stream: bool,
    usage: BlockUse,
    started: Instant,
}

/// An error ending the processing of the current frame, saying what it closes. The frame
/// handlers return it and `recv_frames` applies it (`Connection::apply`): RST_STREAM for a
/// stream's, GOAWAY for the connection's. A stream refused while its header block is still
/// decoded (for the HPACK table's sake) is reset where it is refused instead (`stream_error`).
enum Fail {
    /// RST_STREAM(`code`): stream `id` closes, the connection goes on.
    Stream { id: u32, code: Reason },
    /// GOAWAY(`code`): the connection ends, for `why` (the log line's reason).
    Connection { code: Reason, why: &'static str },
}

type Res = Result<(), Fail>;

/// Opaque data of the PING that measures the round trip before the final GOAWAY.
const SHUTDOWN_PING: [u8; 8] = *b"spate-GA";
/// WINDOW_UPDATEs with smaller increments are checked against the DATA frames sent (data
/// dribble, `spend_tiny_window_update`).
const TINY_WINDOW_UPDATE: u32 = 1024;
/// Decoded header bytes are carved from allocations of about this size.
const HBUF_CHUNK: usize = 4 * 1024;
/// Response values up to this long that repeat per resource are indexed.
const INDEX_VALUE_MAX: usize = 64;
/// How many of our own resets to remember.
const RECENT_RESETS: usize = 16;
/// New requests decoded per `recv` call. Answering them before decoding more keeps the stream
/// table, the decoded headers and the pending responses small (the memory a connection
/// holds at its peak), and the working set in cache.
const REQUEST_BATCH: usize = 16;
/// The flags of a HEADERS frame that `Connection::repeat_headers` may answer before it is
/// decoded as a frame: the whole block and the whole request, no padding or priority to
/// take off (other flags mean nothing on HEADERS).
const REPEAT_FLAGS_MASK: u8 = flag::END_STREAM | flag::END_HEADERS | flag::PADDED | flag::PRIORITY;
const REPEAT_FLAGS: u8 = flag::END_STREAM | flag::END_HEADERS;
/// The output buffer's first allocation, enough for a batch of small responses.
const OUT_INITIAL: usize = 4 * 1024;
/// New streams since the connection was last quiet from which it keeps its buffers between
/// turns (see [`Connection::release_idle_buffers`]): a client's second request.
const KEEP_BUFFERS_OPENED: u32 = 2;
/// A client's input that comes later than this after its previous input starts it afresh as
/// not busy: by then the other connections' turns have evicted the buffers it kept from the
/// cache, and with thousands of such slow clients (h2load -c10000 -m1) what each kept
/// would add up to megabytes (about 11 KB each) for nothing.
const KEEP_BUFFERS_WITHIN: Duration = Duration::from_millis(1);
/// The largest write of a turn after which a busy connection keeps its buffers.
const KEEP_OUTPUT_MAX: usize = 16 * 1024;
/// How long after the client's last frame an idle connection trims what it keeps for the
/// next request: the response headers cache (it matches only responses of the same second,
/// their Date) and the HPACK tables' spare capacity. Later than a busy client's next
/// request, so the trimming costs a busy connection nothing.
const QUIET_TRIM: Duration = Duration::from_secs(1);

impl Connection {
    /// A connection whose client starts with the preface. Our SETTINGS and connection
    /// WINDOW_UPDATE are already in the output.
    /// `cfg` may be shared: a worker's connections hold one copy of it.
    pub fn new(
        cfg: impl Into<Arc<Settings>>,
        peer: SocketAddr,
        local: SocketAddr,
        now: Instant,
    ) -> Connection {
        let mut c = Connection::from_parked(Parked::fresh(cfg.into(), now), peer, local, now);
        c.out.reserve(OUT_INITIAL);
        let settings = [
            (setting::MAX_CONCURRENT_STREAMS, c.cfg.max_streams),
            (setting::INITIAL_WINDOW_SIZE, c.cfg.input_window),
            (
                setting::MAX_HEADER_LIST_SIZE,
                u32::try_from(c.cfg.max_header_list).unwrap_or(u32::MAX),
            ),
            (setting::NO_RFC7540_PRIORITIES, 1),
            (setting::ENABLE_CONNECT_PROTOCOL, 1),
        ];
        // The last one only when some path tunnels.
        let n = settings.len() - usize::from(!c.cfg.enable_connect_protocol);
        frame::put_settings(&mut c.out, &settings[..n]);
        if c.cfg.input_window > frame::DEFAULT_WINDOW {
            frame::put_window_update(&mut c.out, 0, c.cfg.input_window - frame::DEFAULT_WINDOW);
            c.recv_conn_window = c.cfg.input_window;
        }
        c
    }

    /// A connection upgraded from HTTP/1.1 (`Upgrade: h2c`): `settings` is the decoded
    /// HTTP2-Settings payload, `request` becomes stream 1, half-closed (remote). The client
    /// still sends the preface.
    pub fn upgraded(
        cfg: impl Into<Arc<Settings>>,
        peer: SocketAddr,
        local: SocketAddr,
        now: Instant,
        settings: &[u8],
        request: Request,
    ) -> Result<Connection, Reason> {
        let mut c = Connection::new(cfg, peer, local, now);
        if settings.len() % 6 != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let head = Head {
            len: settings.len() as u32,
            kind: kind::SETTINGS,
            flags: 0,
            stream: 0,
        };
        match frame::decode(head, settings, frame::MAX_MAX_FRAME_SIZE) {
            Ok(Frame::Settings { settings, .. }) => {
                for (id, v) in settings.iter() {
                    if c.apply_setting(id, v).is_err() {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                }
            }
            Ok(_) => return Err(Reason::PROTOCOL_ERROR),
            Err(FrameError::Connection(r) | FrameError::Stream(_, r)) => return Err(r),
        }
        // Half-closed (remote): the HTTP/1.1 request carried its whole body.
        let send = Send::Waiting {
            held: true,
            head: request.is_head(),
        };
        c.insert(1, (Recv::ENDED, send));
        c.held.push_back((1, request));
        c.max_client_stream = 1;
        c.requests.push_back(1);
        Ok(c)
    }

    /// [`Connection::recv_with`] for a server whose handlers never stream request bodies.
    pub fn recv(&mut self, input: &mut BytesMut, now: Instant, runs: &mut RunBuffer) {
        self.recv_with(input, now, runs, &|_| false);
    }

    /// Consumes the complete frames at the start of `input`. Protocol errors are answered
    /// in the output (RST_STREAM, or GOAWAY and [`Connection::closed`]). After a batch of
    /// new requests it stops early, leaving frames in `input`, and [`Connection::recv_paused`]
    /// is set: answer the requests, then call again (without reading) until it is clear.
    ///
    /// `streams_body` is asked about each request whose body follows its HEADERS: when it
    /// says yes, the request is handed out at once with a body pipe
    /// ([`Request::take_body`]); otherwise it is handed out at END_STREAM and its DATA is
    /// discarded.
    ///
    /// `runs` is the worker's run buffer, lent for the runs of repeated answers
    /// ([`RunBuffer`]): one a worker, not one a connection.
    pub fn recv_with(
        &mut self,
        input: &mut BytesMut,
        now: Instant,
        runs: &mut RunBuffer,
        streams_body: &dyn Fn(&Request) -> bool,
    ) {
        self.memo.answer_fresh = None;
        self.recv_paused = false;
        self.batch_opened = 0;
        self.trim_when_quiet = true;
        if self.out.capacity() == 0 {
            self.out.reserve(OUT_INITIAL);
        }
        if self.closed.is_some() {
            input.clear();
            return;
        }
        // A stream's error never leaves `recv_frames`: it is applied there, frame by frame.
        if let Err(Fail::Connection { code, why }) =
            self.recv_frames(input, now, runs, streams_body)
        {
            input.clear();
            self.fail(code, why);
        }
    }

    /// The next complete request to answer, with its stream id, while fewer than
    /// `max_concurrent_requests` are with handlers.
    pub fn next_request(&mut self) -> Option<(u32, Request)> {
        while self.in_handler < self.cfg.max_concurrent_requests {
            let id = self.requests.pop_front()?;
            let Some(i) = self.index(id) else { continue };
            if self.streams[i].send.holds_request() {
                let Some(req) = self.take_held(id) else {
                    self.transition(i, Event::HeldDropped);
                    continue;
                };
                self.transition(i, Event::HandedOut);
                return Some((id, req));
            }
        }
        None
    }

    /// [`Connection::next_request`], with the request left where the connection holds it: the
    /// driver reads it there, then lets it go ([`Connection::release_request`]) or takes it
    /// ([`Connection::take_request`]) before asking for the next. A request is a few hundred
    /// bytes, and handing it out by value moved it through each layer on the way.
    #[inline(always)]
    pub fn next_request_held(&mut self) -> Option<(u32, &mut Request)> {
        while self.in_handler < self.cfg.max_concurrent_requests {
            let id = self.requests.pop_front()?;
            let Some(i) = self.index(id) else { continue };
            if !self.streams[i].send.holds_request() {
                continue;
            }
            let Some(k) = self.held_position(id) else {
                self.transition(i, Event::HeldDropped);
                continue;
            };
            self.transition(i, Event::HandedOut);
            return Some((id, &mut self.held[k].1));
        }
        None
    }

    /// Drops stream `id`'s request handed out by [`Connection::next_request_held`], where it
    /// is, keeping its field list for the next.
    #[inline(always)]
    pub fn release_request(&mut self, id: u32) {
        if let Some(req) = self.take_held(id) {
            req.recycle();
        }
    }

    /// Takes stream `id`'s request handed out by [`Connection::next_request_held`] (to keep
    /// it past the answer: an access log, a pending answer).
    pub fn take_request(&mut self, id: u32) -> Option<Request> {
        self.take_held(id)
    }

    /// Gives the response for stream `id` (from [`Connection::next_request`]): its HEADERS
    /// go into the output now, its body as windows allow. A stream reset meanwhile drops it.
    ///
    /// A streamed body (`Body::Stream`) comes back: the driver polls it when
    /// [`Connection::wants_body`] and hands over what it yields ([`Connection::push_body`],
    /// [`Connection::end_body`], [`Connection::reset_body`]). `None` otherwise (the body was
    /// taken, or is not sent: HEAD, 204, 304, a stream gone).
    #[inline]
    pub fn respond(&mut self, id: u32, resp: Response) -> Option<Box<dyn BodyStream>> {
        self.respond_inner(id, resp, None, false)
    }

    /// [`Connection::respond`], and reports the stream's end in [`Connection::take_done`]
    /// (exactly once, even when the stream is already gone), with `mark`.
    #[inline]
    pub fn respond_tracked(
        &mut self,
        id: u32,
        resp: Response,
        mark: u64,
    ) -> Option<Box<dyn BodyStream>> {
        self.respond_inner(id, resp, Some(mark), false)
    }

    /// Whether stream `id` is the last one opened for the memoised request
    /// (`RequestMemo`): its answer, if the handler says it repeats
    /// ([`crate::http::Handler::answer_repeats`]), is worth giving with
    /// [`Connection::respond_repeatable`].
    #[inline]
    pub fn answer_memo_wanted(&self, id: u32) -> bool {
        self.memo.stream == id
    }

    /// [`Connection::respond`] (tracked with `mark` when given) for the memoised request's
    /// stream ([`Connection::answer_memo_wanted`]), with an answer that depends on the
    /// request alone while [`crate::http::Body::reusable_at`] holds: the connection keeps it and gives it
    /// again, bytes for bytes, to the next streams that send the same header block, without
    /// handing their requests out (see `RequestMemo`).
    #[inline]
    pub fn respond_repeatable(
        &mut self,
        id: u32,
        resp: Response,
        mark: Option<u64>,
    ) -> Option<Box<dyn BodyStream>> {
        self.respond_inner(id, resp, mark, true)
    }

    /// Forgets the memoised request and its kept answer: the driver's routing changed (a
    /// reload in place), so the next request is answered by the handler again.
    pub fn forget_answers(&mut self) {
        self.memo.clear();
    }

    /// The time of this turn: the Date field's value for its responses and the coarse
    /// monotonic clock ([`crate::http::clock::coarse_ns`]) that says whether a memoised
    /// answer may be given again. The driver reads its clocks once a turn, before `recv`, and
    /// the connection reads none.
    pub fn set_now(&mut self, date: &[u8; DATE_LEN], coarse_ns: u64) {
        self.date = *date;
        self.coarse_ns = coarse_ns;
    }

    /// The metrics mark (`metrics::Mark::to_bits`) of this turn's requests, given to those
    /// answered from the memo as `respond_tracked` gives its `mark`.
    #[inline]
    pub fn set_turn_mark(&mut self, mark: u64) {
        self.turn_mark = mark;
    }

    /// Whether the streamed body of stream `id` may be polled for its next chunk: the last one
    /// was framed, the stream and connection have send window, and the output has room for
    /// body bytes (`has_body_room`). So a slow client stops reads from the producer.
    pub fn wants_body(&self, id: u32) -> bool {
        self.has_body_room()
            && self.send_conn_window.is_open()
            && self
                .index(id)
                .is_some_and(|i| self.streams[i].wants_chunk())
    }

    /// The next chunk of stream `id`'s streamed body. Returns whether the stream still takes
    /// its body; `false` when it is gone (reset, or the chunk overran the announced
    /// content-length, which resets it): drop the producer.
    pub fn push_body(&mut self, id: u32, data: Bytes) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        let s = &mut self.streams[i];
        let Send::Stream(o) = &mut s.send else {
            return false;
        };
        if o.tail != Tail::Open {
            return false;
        }
        let total = o.sent + o.queued.len() as u64 + data.len() as u64;
        if o.declared.is_some_and(|d| total > d) {
            tracing::debug!(stream = id, "streamed body longer than its content-length");
            self.reset(i, Reason::INTERNAL_ERROR);
            return false;
        }
        if o.queued.is_empty() {
            o.queued = data;
        } else if !data.is_empty() {
            // Only when pushed without `wants_body`: still bounded by the caller.
            let mut joined = BytesMut::with_capacity(o.queued.len() + data.len());
            joined.extend_from_slice(&o.queued);
            joined.extend_from_slice(&data);
            o.queued = joined.freeze();
        }
        self.schedule(i);
        true
    }

    /// Stream `id`'s streamed body ended, with trailers if any: END_STREAM (or trailing
    /// HEADERS) follows the bytes already pushed. A body shorter than its content-length
    /// resets the stream instead.
    pub fn end_body(&mut self, id: u32, trailers: Option<Trailers>) {
        let Some(i) = self.index(id) else { return };
        let s = &mut self.streams[i];
        let Send::Stream(o) = &mut s.send else { return };
        if o.tail != Tail::Open {
            return;
        }
        if o.declared
            .is_some_and(|d| o.sent + o.queued.len() as u64 != d)
        {
            tracing::debug!(stream = id, "streamed body shorter than its content-length");
            self.reset(i, Reason::INTERNAL_ERROR);
            return;
        }
        o.tail = match trailers {
            Some(t) if !t.is_empty() => Tail::Trailers(t),
            _ => Tail::End,
        };
        if o.queued.is_empty() {
            // Nothing left to frame: the end needs no window.
            self.write_tail(i, None);
        }
    }

    /// Stream `id`'s streamed body failed: RST_STREAM(INTERNAL_ERROR), so the client never
    /// takes a cut body for a complete one.
    pub fn reset_body(&mut self, id: u32) {
        if let Some(i) = self.index(id) {
            if matches!(self.streams[i].send, Send::Stream(_)) {
                self.reset(i, Reason::INTERNAL_ERROR);
            }
        }
    }

    /// Streams that went away (client reset, error, limit) while the driver held work for
    /// them: their pending answer or streamed body is to be dropped, which cancels it.
    pub fn take_cancelled(&mut self) -> std::vec::Drain<'_, u32> {
        self.cancelled.drain(..)
    }

    /// Tracked streams ([`Connection::respond_tracked`]) that ended since the last call.
    pub fn take_done(&mut self) -> std::vec::Drain<'_, StreamDone> {
        self.done.drain(..)
    }

    /// Ends every stream, as when the connection is gone: request bodies are aborted,
    /// driver work is cancelled and tracked streams are reported incomplete.
    pub fn close_streams(&mut self) {
        for i in (0..self.streams.slots()).rev() {
            if self.streams.is_open(i) {
                self.transition(i, Event::Close { told: false });
            }
        }
    }

    /// Pulls body bytes into the output, fairly among ready streams, until the windows, the
    /// streams or the output's room for body bytes (`has_body_room`) stop it.
    pub fn fill(&mut self, now: Instant) {
        if self.body_pipes > 0 {
            self.credit_consumed();
        }
        let mut urgency = 0;
        while self.has_body_room() && self.send_conn_window.is_open() && urgency < ready::URGENCIES
        {
            let Some(id) = self.ready.pop_front(urgency) else {
                urgency += 1;
                continue;
            };
            let Some(i) = self.index(id) else { continue };
            self.streams[i].queued = false;
            if !self.streams[i].sendable() {
                continue;
            }
            self.send_data(i);
        }
        let blocked = self.sending > 0
            && self.closed.is_none()
            && !self.wants_fill()
            && !self.stream_can_take_chunks();
        if !blocked {
            self.stalled_since = None;
        } else if self.stalled_since.is_none() {
            self.stalled_since = Some(now);
        }
    }

    /// The last [`Connection::recv`] left complete frames in its input for the next call.
    pub fn recv_paused(&self) -> bool {
        self.recv_paused
    }

    /// Whether [`Connection::fill`] would produce more bytes now.
    pub fn wants_fill(&self) -> bool {
        self.send_conn_window.is_open() && !self.ready.is_empty()
    }

    /// The output holds [`Settings::max_write`] bytes or more: time to write it.
    #[inline(always)]
    pub fn output_full(&self) -> bool {
        self.out.len() + self.spliced.len() >= self.cfg.max_write
    }

    /// What to write to the socket.
    pub fn output_parts(&self) -> OutputParts<'_> {
        OutputParts::new(&self.out, &self.spliced)
    }

    /// The frame bytes to write, when nothing is spliced in (see [`Settings::splice_min`]):
    /// a connection whose DATA payloads are all smaller than that. Tests only: anything
    /// else writes [`Connection::output_parts`], which a large payload may be part of.
    #[cfg(test)]
    pub fn output(&self) -> &[u8] {
        debug_assert!(self.spliced.len() == 0, "bodies spliced: use output_parts");
        &self.out
    }

    /// Whether there is nothing to write.
    #[inline]
    pub fn output_is_empty(&self) -> bool {
        // A spliced body follows its DATA frame's header.
        self.out.is_empty()
    }

    /// Call once the output was written; the buffer is kept for reuse.
    pub fn clear_output(&mut self) {
        self.wrote_large |= self.out.len() + self.spliced.len() > KEEP_OUTPUT_MAX;
        self.out.clear();
        self.spliced.clear();
        self.closed_unwritten = 0;
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Set once the connection is over: write the output, then close.
    pub fn closed(&self) -> Option<Closed> {
        self.closed
    }

    /// Nothing came from the client yet, not even its preface, and the connection is not
    /// closing: the server's preface may wait for it (a client sends its own first, without
    /// waiting for the server's, RFC 9113 section 3.4) and go out with the first answers.
    pub fn awaits_preface(&self) -> bool {
        matches!(self.phase, Phase::Preface) && self.closed.is_none()
    }

    /// Starts a graceful shutdown: GOAWAY with 2^31-1 and a PING; the final GOAWAY with the
    /// last stream id follows its ACK (one round trip later), then open streams finish.
    pub fn shutdown(&mut self) {
        if self.closed.is_some() || matches!(self.phase, Phase::Draining | Phase::Final { .. }) {
            return;
        }
        if matches!(self.phase, Phase::Preface | Phase::FirstSettings) {
            // Accepted just as the drain began: a GOAWAY(0) now would refuse the requests
            // the client is about to send. The usual two GOAWAYs follow its SETTINGS.
            self.drain_when_open = true;
            return;
        }
        frame::put_goaway(&mut self.out, MAX_WINDOW, Reason::NO_ERROR);
        // Counted once per connection, though a second GOAWAY follows.
        self.stats.goaway(true, Reason::NO_ERROR, "server stopping");
        frame::put_ping(&mut self.out, false, &SHUTDOWN_PING);
        self.phase = Phase::Draining;
    }

    /// Ends the connection now with GOAWAY(code), e.g. when the shutdown timeout passed.
    pub fn abort(&mut self, reason: Reason, why: &'static str) {
        if self.closed.is_none() {
            self.fail(reason, why);
        }
    }

    /// When the driver must call [`Connection::handle_timeout`] at the latest.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        let mut t = None::<Instant>;
        let mut at = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(p) = &self.partial {
            at(p.started + self.cfg.header_timeout);
        }
        if let Some(s) = self.stalled_since {
            at(s + self.cfg.stall_timeout);
        }
        if self.waits_on_client() {
            at(self.last_frame_at + self.cfg.idle_timeout);
        }
        if self.trim_when_quiet && self.streams.is_empty() {
            at(self.last_frame_at + QUIET_TRIM);
        }
        t
    }

    /// Applies the timeouts that have passed by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        if self.trim_when_quiet && self.streams.is_empty() && now >= self.last_frame_at + QUIET_TRIM
        {
            self.trim_when_quiet = false;
            self.opened_lately = 0;
            self.free_buffers();
            self.headers_cache.clear();
            self.decoder.shrink_to_fit();
            self.encoder.shrink_to_fit();
        }
        if self
            .partial
            .as_ref()
            .is_some_and(|p| now >= p.started + self.cfg.header_timeout)
        {
            self.fail(
                Reason::ENHANCE_YOUR_CALM,
                "header block not completed in time",
            );
        } else if self
            .stalled_since
            .is_some_and(|s| now >= s + self.cfg.stall_timeout)
        {
            self.fail(
                Reason::ENHANCE_YOUR_CALM,
                "peer kept a zero window too long",
            );
        } else if self.waits_on_client() && now >= self.last_frame_at + self.cfg.idle_timeout {
            if self.streams.is_empty() {
                self.fail(Reason::NO_ERROR, "idle timeout");
            } else {
                self.fail(Reason::ENHANCE_YOUR_CALM, "request not completed in time");
            }
        }
    }

    /// Streams in the table (open or half-closed).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Nothing is owed to the client (no response being sent, no answer pending): either no
    /// stream is open, or the open ones wait for the client to finish its request. The idle
    /// timer runs then. A pending answer or a streamed body is bounded by its handler's own
    /// timeouts (a backend's), not by the client's silence.
    fn waits_on_client(&self) -> bool {
        self.streams.is_empty() || (self.sending == 0 && self.in_handler == 0)
    }
}

#[cfg(test)]
mod tests;
