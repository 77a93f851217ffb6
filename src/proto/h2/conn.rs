//! The server side of one HTTP/2 connection, sans-IO: bytes in ([`Connection::recv_with`]),
//! requests out ([`Connection::next_request`]), responses in ([`Connection::respond`]),
//! bytes out ([`Connection::fill`] / [`Connection::output`]). Streamed bodies cross as
//! values, never as I/O: a request body goes into the pipe the handler reads, and a streamed
//! response body is polled by the driver and pushed in ([`Connection::push_body`]) when
//! [`Connection::wants_body`] says the client can take more. No socket and no clock: the
//! driver passes `now` and asks [`Connection::poll_timeout`] when to call
//! [`Connection::handle_timeout`]. See `LIFECYCLE.md` next to this file.

use super::frame::{self, flag, kind, setting, Frame, FrameError, Head, Reason, MAX_WINDOW};
use super::hpack::{self, DecodeError, HeaderField, Indexing};
use super::output::{self, OutputParts, Spliced, SplicedBodies};
use super::ready::{self, ReadyQueues};
use super::runs::{self, Run};
use super::stream::{set_send, BodySource, Priority, Recv, Send, Sent, StreamOut, Tail};
use super::table::StreamTable;
use crate::http::body::{self, BodyError, BodyStream, Side, Trailers};
use crate::http::recycle::{FieldList, HeaderList};
use crate::http::request::RequestBuilder;
use crate::http::response::Headers;
use crate::http::{Body, Request, Response, Version};
use crate::metrics::{self, Direction};
use crate::proto::request_head;
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod park;
pub use park::Parked;

/// Stop pulling body bytes into the output once it holds this much: the driver writes it out
/// first, so memory per connection stays bounded whatever the windows are. Whole small
/// answers may fill the output further, up to [`Settings::max_write`].
pub const OUTPUT_HIGH_WATER: usize = 128 * 1024;

/// The default of [`Settings::max_write`]: a turn of 100 answers of 4 KiB goes out in one
/// write (about 420 KB).
pub const DEFAULT_MAX_WRITE: usize = 512 * 1024;

/// The connection's limits and settings, from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS we advertise and enforce (REFUSED_STREAM above it).
    pub max_streams: u32,
    /// Requests handed to handlers at once; the rest wait in order.
    pub max_concurrent_requests: u32,
    /// Per-stream receive window (SETTINGS_INITIAL_WINDOW_SIZE); the connection window is
    /// raised to the same size.
    pub input_window: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: decoded header bytes (+32 per field) per request.
    pub max_header_list: usize,
    /// Header fields per request.
    pub max_header_fields: usize,
    /// Request body bytes per stream (413 above it).
    pub max_request_body: u64,
    /// Close a connection with no stream and no frame received for this long.
    pub idle_timeout: Duration,
    /// A header block (HEADERS and its CONTINUATIONs) must be complete within this.
    pub header_timeout: Duration,
    /// Close when response data has been blocked by a zero window for this long.
    pub stall_timeout: Duration,
    /// Stream resets per second (either side's) before the connection is closed with
    /// ENHANCE_YOUR_CALM: Rapid Reset and MadeYouReset.
    pub max_resets_per_second: u32,
    /// Frames per second that cost us work but carry no request (SETTINGS, PING, PRIORITY,
    /// empty DATA or CONTINUATION, tiny WINDOW_UPDATEs) before ENHANCE_YOUR_CALM.
    pub max_control_frames_per_second: u32,
    /// Whole answers (HEADERS and a body that fits one DATA frame) are built into the output
    /// until it holds this much; then it is written. Streamed bodies stop earlier, at
    /// [`OUTPUT_HIGH_WATER`] or this, whichever is less.
    pub max_write: usize,
    /// The `server` response header, if sent.
    pub server_name: Option<Bytes>,
    /// An `alt-svc` value sent on every response (`h3=":PORT"`), if any.
    pub alt_svc: Option<Bytes>,
    pub secure: bool,
    /// Advertise SETTINGS_ENABLE_CONNECT_PROTOCOL and accept extended CONNECT (RFC 8441);
    /// without it `:protocol` makes a request malformed.
    pub enable_connect_protocol: bool,
    /// A DATA payload in memory of this many bytes or more is spliced into the output
    /// ([`Connection::output_parts`]) instead of copied into its buffer.
    pub splice_min: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_streams: 100,
            max_concurrent_requests: 100,
            input_window: 16 * 1024 * 1024,
            max_header_list: 64 * 1024,
            max_header_fields: 100,
            max_request_body: 1 << 30,
            idle_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(60),
            max_resets_per_second: 200,
            max_control_frames_per_second: 1000,
            max_write: DEFAULT_MAX_WRITE,
            server_name: None,
            alt_svc: None,
            secure: false,
            enable_connect_protocol: false,
            splice_min: output::SPLICE_MIN,
        }
    }
}

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
    send_conn_window: i64,
    stalled_since: Option<Instant>,
    /// The Date header of this turn: read once per turn, not once per response.
    date: Option<[u8; crate::http::date::DATE_LEN]>,
    /// The driver's metrics mark for this turn's requests ([`Connection::set_turn_mark`]),
    /// for those answered from the memo.
    turn_mark: u64,

    // Streams.
    streams: StreamTable,
    /// Streams with body bytes to send, by urgency.
    ready: ReadyQueues,
    /// Streams whose request is complete, in arrival order.
    requests: VecDeque<u32>,
    /// The requests not yet handed out, by stream id (`Stream::holds_request`): out of the
    /// stream table, whose entries move on every insertion and removal. Mostly in the order
    /// they are handed out, so taking one is taking the first.
    held: VecDeque<(u32, Request)>,
    /// Requests handed out and not yet answered.
    in_handler: u32,
    /// Streams with response bytes left to send (`Send::Body` or `Send::Stream`).
    sending: u32,
    /// Of those, streamed bodies (`Send::Stream`).
    streaming: u32,
    /// Streams with a request body pipe (`Stream::body`).
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
}

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
    streams: StreamTable,
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

/// An error ending processing of the current frame.
enum Fail {
    Conn(Reason, &'static str),
}

type Res = Result<(), Fail>;

/// Opaque data of the PING that measures the round trip before the final GOAWAY.
const SHUTDOWN_PING: [u8; 8] = *b"spate-GA";
/// WINDOW_UPDATEs with smaller increments count as control frames (data dribble).
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
        let i = c.insert(1);
        let s = &mut c.streams[i];
        s.head_request = request.is_head();
        s.holds_request = true;
        c.held.push_back((1, request));
        c.max_client_stream = 1;
        c.requests.push_back(1);
        Ok(c)
    }

    /// [`Connection::recv_with`] for a server whose handlers never stream request bodies.
    pub fn recv(&mut self, input: &mut BytesMut, now: Instant) {
        self.recv_with(input, now, &|_| false);
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
    pub fn recv_with(
        &mut self,
        input: &mut BytesMut,
        now: Instant,
        streams_body: &dyn Fn(&Request) -> bool,
    ) {
        self.date = None;
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
        if let Err(Fail::Conn(r, why)) = self.recv_frames(input, now, streams_body) {
            input.clear();
            self.fail(r, why);
        }
    }

    /// The next complete request to answer, with its stream id, while fewer than
    /// `max_concurrent_requests` are with handlers.
    pub fn next_request(&mut self) -> Option<(u32, Request)> {
        while self.in_handler < self.cfg.max_concurrent_requests {
            let id = self.requests.pop_front()?;
            let Some(i) = self.index(id) else { continue };
            let s = &mut self.streams[i];
            if std::mem::take(&mut s.holds_request) {
                let Some(req) = self.take_held(id) else {
                    continue;
                };
                self.in_handler += 1;
                self.streams[i].with_handler = true;
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
    pub fn next_request_held(&mut self) -> Option<(u32, &Request)> {
        while self.in_handler < self.cfg.max_concurrent_requests {
            let id = self.requests.pop_front()?;
            let Some(i) = self.index(id) else { continue };
            if !std::mem::take(&mut self.streams[i].holds_request) {
                continue;
            }
            let Some(k) = self.held_position(id) else {
                continue;
            };
            self.in_handler += 1;
            self.streams[i].with_handler = true;
            return Some((id, &self.held[k].1));
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
    /// request alone while [`Body::reusable_now`] holds: the connection keeps it and gives it
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

    /// The metrics mark (`metrics::Mark::to_bits`) of this turn's requests, given to those
    /// answered from the memo as `respond_tracked` gives its `mark`.
    #[inline]
    pub fn set_turn_mark(&mut self, mark: u64) {
        self.turn_mark = mark;
    }

    #[inline(always)]
    fn respond_inner(
        &mut self,
        id: u32,
        resp: Response,
        track: Option<u64>,
        repeatable: bool,
    ) -> Option<Box<dyn BodyStream>> {
        if self.memo.stream == id {
            // The memoised request has a new answer: only it may be given again.
            self.memo.answer = None;
            self.memo.answer_fresh = None;
        }
        let Some(i) = self.index(id) else {
            if let Some(mark) = track {
                self.done.push(StreamDone {
                    id,
                    status: resp.status,
                    mark,
                    head_bytes: 0,
                    body_bytes: 0,
                    complete: false,
                });
            }
            return None;
        };
        let s = &mut self.streams[i];
        if std::mem::take(&mut s.with_handler) {
            self.in_handler -= 1;
        }
        if !matches!(s.send, Send::Waiting) {
            return None;
        }
        if let Some(mark) = track {
            s.sent = Some(Sent {
                status: resp.status,
                mark,
                head: 0,
                body: 0,
            });
        }
        let no_body =
            s.head_request || resp.status == 204 || resp.status == 304 || resp.status < 200;
        if let Body::Stream(_) = resp.body {
            return self.respond_streamed(i, resp, no_body);
        }
        let body_len = resp.body.len();
        if !no_body && self.fits_one_frame(i, body_len) {
            if let Some(data) = in_memory(&resp.body) {
                let head =
                    self.write_headers(id, resp.status, &resp.headers, Some(body_len), false);
                crate::http::recycle::give_header_list(resp.headers);
                self.send_whole(i, &resp.body, data, head);
                if repeatable && self.memo.stream == id && self.headers_cache.valid {
                    self.keep_answer(resp.status, resp.body, track.is_some());
                }
                return None;
            }
        }
        let source = if no_body {
            None
        } else {
            BodySource::new(resp.body)
        };
        let end_stream = source.is_none();
        let head = self.write_headers(id, resp.status, &resp.headers, Some(body_len), end_stream);
        crate::http::recycle::give_header_list(resp.headers);
        if track.is_some() {
            self.count_head(i, head);
        }
        match source {
            Some(src) => {
                self.sending += 1;
                self.streams[i].send = Send::Body(src);
                self.schedule(i);
            }
            None => self.finish_send(i),
        }
        None
    }

    /// Whether stream `i` can send a body of `len` bytes now in one DATA frame: the windows
    /// and the peer's frame size allow it, and no other stream waits to send (which would
    /// go first under `fill`'s order).
    #[inline(always)]
    fn fits_one_frame(&self, i: usize, len: u64) -> bool {
        len > 0
            && len <= u64::from(self.peer_max_frame)
            && i64::try_from(len)
                .is_ok_and(|n| n <= self.streams[i].send_window && n <= self.send_conn_window)
            && self.ready.is_empty()
            && !self.output_full()
    }

    /// The whole body of stream `i` (`data`, `body`'s bytes), after its HEADERS (`head`
    /// bytes of header block): one DATA frame with END_STREAM, built in the output, and the
    /// stream is done. The small answer's path: no body source, no ready queue, no second
    /// visit in `fill`.
    #[inline(always)]
    fn send_whole(&mut self, i: usize, body: &Body, data: &[u8], head: u64) {
        let s = &mut self.streams[i];
        frame::put_head(
            &mut self.out,
            data.len(),
            kind::DATA,
            flag::END_STREAM,
            s.id,
        );
        put_body(
            &mut self.out,
            &mut self.spliced,
            self.cfg.splice_min,
            body,
            data,
        );
        let n = data.len() as u64;
        s.send_window -= n as i64;
        self.send_conn_window -= n as i64;
        if let Some(sent) = &mut s.sent {
            sent.head += head;
            sent.body += n;
        }
        self.finish_send(i);
    }

    /// Keeps the answer just sent whole for the memoised request: its header block is the
    /// headers cache's (`valid`), `body` what the DATA frame carried.
    #[cold]
    #[inline(never)]
    fn keep_answer(&mut self, status: u16, body: Body, tracked: bool) {
        let block = &self.headers_cache.block;
        let Some(data) = shared_bytes(&body) else {
            return;
        };
        let Ok(body_len) = u32::try_from(data.len()) else {
            return;
        };
        if block.len() > self.peer_max_frame as usize {
            return;
        }
        // The frames, their stream ids written per answer; a small body with them.
        let frames = &mut self.memo.frames;
        frames.clear();
        frame::put_head(frames, block.len(), kind::HEADERS, flag::END_HEADERS, 0);
        frames.extend_from_slice(block);
        frame::put_head(frames, data.len(), kind::DATA, flag::END_STREAM, 0);
        let body_in_frames = data.len() <= FRAMES_BODY_MAX;
        if body_in_frames {
            frames.extend_from_slice(&data);
        }
        let frames_len = frames.len() as u32;
        if frames.len() < FRAMES_COPY {
            frames.resize(FRAMES_COPY, 0);
        }
        self.memo.answer_fresh = None;
        self.memo.renew_left = 0;
        self.memo.answer = Some(AnswerMemo {
            status,
            frames_len,
            head_len: block.len() as u32,
            body_len,
            body_in_frames,
            body,
            data,
            stamp: self.headers_cache.stamp,
            tracked,
        });
    }

    /// A HEADERS frame with END_STREAM and END_HEADERS, without padding or priority
    /// (`REPEAT_FLAGS`), for stream `id`, answered from the memo (`answer_repeat`) before it
    /// is decoded as a frame, when the usual path would find it a new request with the
    /// memoised block: the connection open with no header block in progress, a new odd
    /// stream id, room for one more stream, the HPACK table unchanged since the memo and the
    /// request bodiless. Then it counts as the usual path counts a new stream, and returns
    /// how many more repeats may go (`answer_repeat`). Returns None (nothing done) otherwise,
    /// and the frame takes the usual path. The cheapest check that
    /// turns away a connection without a memo comes first.
    #[inline(always)]
    fn repeat_headers(&mut self, id: u32, block: &[u8]) -> Option<usize> {
        if self.memo.answer.is_none()
            || !matches!(self.phase, Phase::Open)
            || self.partial.is_some()
            || !self.decoder.kept_table()
        {
            return None;
        }
        if id <= self.max_client_stream || id % 2 == 0 {
            return None;
        }
        match self.memo.parsed_for(block) {
            Some(p) if Meta::of(p).bodiless() => {}
            _ => return None,
        }
        let room = self.answer_repeat(id)?;
        self.count_opened(id, 1);
        Some(room)
    }

    /// After a frame answered by `repeat_headers`, from `first` to `at` in `input`, answers
    /// the frames from `at` on that repeat it exactly (the same length, type, flags and
    /// block) for new odd stream ids, `room` of them at most (as `repeat_headers` found it).
    /// Nothing a repeat changes bears on what `repeat_headers` found of the connection and
    /// the memo, only on the stream ids, the counts and the room. The run goes into the
    /// worker's run buffer (`runs`), one piece of output, when no unwritten output holds that
    /// buffer; else each repeat is written as `put_repeat` writes it. Returns where the first
    /// frame it left starts.
    #[inline(always)]
    fn repeat_run(&mut self, input: &[u8], first: usize, mut at: usize, room: usize) -> usize {
        let total = at - first;
        // The frame header's length, type and flags.
        let Some(&prefix) = input[first..].first_chunk::<5>() else {
            return at;
        };
        let mut last = self.max_client_stream;
        let mut n = 0;
        // In the run buffer when it is free (`runs`), else each on its own.
        if room > 0 && next_repeat(input, at, total, &prefix, &self.memo.block, last).is_some() {
            if let Some(mut run) = self.start_run(room) {
                while n < room {
                    let Some(id) = next_repeat(input, at, total, &prefix, &self.memo.block, last)
                    else {
                        break;
                    };
                    if !run.put(id) {
                        break;
                    }
                    self.track_repeat(id);
                    last = id;
                    n += 1;
                    at += total;
                }
                self.finish_run(run);
            }
        }
        while n < room {
            let Some(id) = next_repeat(input, at, total, &prefix, &self.memo.block, last) else {
                break;
            };
            self.put_repeat(id);
            last = id;
            n += 1;
            at += total;
        }
        self.count_repeats(n);
        self.count_opened(last, n);
        at
    }

    /// Counts `n` streams up to `last`, answered by `put_repeat` before they were decoded,
    /// as `on_headers` counts new streams, but not in the batch (`REQUEST_BATCH`): a repeat
    /// holds nothing but its place in the output, which `Settings::max_write` bounds
    /// (`repeats_room`, and `recv_frames` pauses when it is full), so a read full of repeats
    /// is answered in one `recv`.
    #[inline(always)]
    fn count_opened(&mut self, last: u32, n: usize) {
        self.max_client_stream = last;
        self.opened_lately = self
            .opened_lately
            .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// Answers stream `id`, which just sent the memoised request's block with END_STREAM,
    /// with the memoised answer when it is still the answer and may go now
    /// (`repeat_allowed`, `repeats_room`): the same HEADERS block and DATA bytes as the
    /// handler's answer went out with, and no request made, routed or handed out, no stream
    /// in the table. Returns how many more repeats may go now (`repeats_room` less this one:
    /// each repeat takes one from every limit it counts), or None (nothing done), and the
    /// request takes the usual path.
    #[inline(always)]
    fn answer_repeat(&mut self, id: u32) -> Option<usize> {
        if !self.repeat_allowed() {
            return None;
        }
        let room = self.repeats_room().checked_sub(1)?;
        self.put_repeat(id);
        self.count_repeats(1);
        Some(room)
    }

    /// Whether the memoised answer is still the answer, and may go now as far as the
    /// connection's state goes (a repeat does not change any of it). It is the answer when
    /// the header block is still the cache's and nothing was encoded since (the HPACK
    /// encoder's table is as it found it), of this turn's Date second, and the body's file is
    /// one the open-file cache still answers from unchecked. It may go now when the usual
    /// path would send it at once: no earlier request waits for its answer (answers keep the
    /// requests' order), no stream waits to send, the handlers are below their limit, the
    /// peer's frame size takes the body, and neither side is shutting the connection down
    /// (a repeat then never closes it: `count_repeats` skips `check_done`).
    #[inline(always)]
    fn repeat_allowed(&mut self) -> bool {
        let Some(a) = &self.memo.answer else {
            return false;
        };
        let cache = &self.headers_cache;
        if !(cache.valid
            && cache.stamp == a.stamp
            && matches!(self.phase, Phase::Open)
            && !self.peer_goaway
            && self.requests.is_empty()
            && self.ready.is_empty()
            && self.in_handler < self.cfg.max_concurrent_requests
            && a.body_len <= self.peer_max_frame)
        {
            return false;
        }
        // Of this `recv`: the Date second and the open-file cache's clock (coarser than a
        // turn) are read once per turn.
        match self.memo.answer_fresh {
            Some(fresh) => fresh,
            None => {
                let date = *self
                    .date
                    .get_or_insert_with(|| crate::http::date::with_now(|d| *d));
                let fresh = cache.date == date && a.body.reusable_now();
                self.memo.answer_fresh = Some(fresh);
                fresh
            }
        }
    }

    /// How many repeats of the memoised answer may go now, as far as what each repeat changes
    /// goes: the streams open or closed unwritten (`max_streams`), the windows (each takes
    /// the body) and the output (one more while it is not full, as `output_full` says).
    #[inline(always)]
    fn repeats_room(&self) -> usize {
        let Some(a) = &self.memo.answer else {
            return 0;
        };
        let streams = (self.cfg.max_streams as usize)
            .saturating_sub(self.streams.len() + self.closed_unwritten as usize);
        let body = i64::from(a.body_len);
        let windows = if body > i64::from(self.peer_initial_window) || self.send_conn_window < 0 {
            0
        } else if body == 0 {
            usize::MAX
        } else {
            usize::try_from(self.send_conn_window / body).unwrap_or(0)
        };
        let each = a.frames_len as usize + if a.body_in_frames { 0 } else { body as usize };
        let output = self
            .cfg
            .max_write
            .saturating_sub(self.out.len() + self.spliced.len())
            .div_ceil(each.max(1));
        streams.min(windows).min(output)
    }

    /// Takes the worker's run buffer (`runs`) for at most `limit` repeats of the memoised
    /// answer, when it is free and the answer's body would be spliced: other answers are one
    /// piece of output already.
    #[inline(never)]
    fn start_run(&self, limit: usize) -> Option<Run> {
        let a = self.memo.answer.as_ref()?;
        if a.body_in_frames || a.data.len() < self.cfg.splice_min {
            return None;
        }
        let head = a.head_len as usize;
        Run::start(
            runs::Answer {
                frames: self.memo.frames.get(..a.frames_len as usize)?,
                body: &a.data,
                ids: [5, frame::HEADER_LEN + head + 5],
            },
            limit,
        )
    }

    /// Puts the run's bytes after the output's.
    #[inline(never)]
    fn finish_run(&mut self, run: Run) {
        if let Some(piece) = run.finish() {
            self.spliced.push(self.out.len(), piece);
        }
    }

    /// Writes the memoised answer for stream `id` (with room for it: `repeats_room`): its
    /// frames with this stream's id, and its body.
    #[inline(always)]
    fn put_repeat(&mut self, id: u32) {
        let Some(a) = &self.memo.answer else {
            return;
        };
        let at = self.out.len();
        let len = a.frames_len as usize;
        match self.memo.frames.first_chunk::<FRAMES_COPY>() {
            // Short frames are copied with the padding after them, in a copy of fixed size
            // (a few vector moves, not a call to `memcpy`), and the padding cut off.
            Some(short) if len <= FRAMES_COPY => {
                self.out.extend_from_slice(short);
                self.out.truncate(at + len);
            }
            _ => self.out.extend_from_slice(&self.memo.frames[..len]),
        }
        if !a.body_in_frames {
            put_shared(
                &mut self.out,
                &mut self.spliced,
                self.cfg.splice_min,
                &a.data,
            );
        }
        let sid = id.to_be_bytes();
        self.out[at + 5..at + 9].copy_from_slice(&sid);
        let d = at + 2 * frame::HEADER_LEN + a.head_len as usize - 4;
        self.out[d..d + 4].copy_from_slice(&sid);
        self.track_repeat(id);
    }

    /// Counts the repeat for stream `id` in the metrics when the memoised answer is tracked.
    #[inline(always)]
    fn track_repeat(&mut self, id: u32) {
        let Some(a) = &self.memo.answer else {
            return;
        };
        if a.tracked {
            self.done.push(StreamDone {
                id,
                status: a.status,
                mark: self.turn_mark,
                head_bytes: u64::from(a.head_len),
                body_bytes: u64::from(a.body_len),
                complete: true,
            });
        }
    }

    /// Counts `n` answers written by `put_repeat`: their bodies in the connection window,
    /// their streams as closed unwritten (each one's END_STREAM is in the output, and the
    /// client counts it as open until it reads it). No stream closed, so `check_done` would
    /// find what it found before (`repeat_allowed`).
    #[inline(always)]
    fn count_repeats(&mut self, n: usize) {
        let Some(a) = &self.memo.answer else {
            return;
        };
        self.send_conn_window -= i64::from(a.body_len) * n as i64;
        self.closed_unwritten += n as u32;
    }

    /// `respond` with a streamed body: kept out of the inline path's way.
    #[inline(never)]
    fn respond_streamed(
        &mut self,
        i: usize,
        resp: Response,
        no_body: bool,
    ) -> Option<Box<dyn BodyStream>> {
        let Body::Stream(body) = resp.body else {
            return None;
        };
        let id = self.streams[i].id;
        let declared = body.len;
        let head = self.write_headers(id, resp.status, &resp.headers, declared, no_body);
        self.count_head(i, head);
        let s = &mut self.streams[i];
        if no_body {
            // Dropping the stream cancels the work behind it.
            self.finish_send(i);
            return None;
        }
        s.send = Send::Stream(Box::new(StreamOut {
            queued: Bytes::new(),
            tail: Tail::Open,
            declared,
            sent: 0,
        }));
        self.sending += 1;
        self.streaming += 1;
        Some(body.stream)
    }

    /// Whether the streamed body of stream `id` may be polled for its next chunk: the last one
    /// was framed, the stream and connection have send window, and the output has room for
    /// body bytes (`has_body_room`). So a slow client stops reads from the producer.
    pub fn wants_body(&self, id: u32) -> bool {
        self.has_body_room()
            && self.send_conn_window > 0
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
                self.remove(i);
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
        while self.has_body_room() && self.send_conn_window > 0 && urgency < ready::URGENCIES {
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
        self.send_conn_window > 0 && !self.ready.is_empty()
    }

    /// Some streamed body has window for more: it waits on its producer, not on the client.
    fn stream_can_take_chunks(&self) -> bool {
        self.streaming > 0
            && self.send_conn_window > 0
            && self
                .streams
                .iter()
                .any(|s| matches!(s.send, Send::Stream(_)) && s.send_window > 0)
    }

    /// The output holds [`Settings::max_write`] bytes or more: time to write it.
    #[inline(always)]
    pub fn output_full(&self) -> bool {
        self.out.len() + self.spliced.len() >= self.cfg.max_write
    }

    /// The output may take more bytes of body pulled from a source (below
    /// [`OUTPUT_HIGH_WATER`] and [`Settings::max_write`]).
    #[inline(always)]
    fn has_body_room(&self) -> bool {
        self.out.len() + self.spliced.len() < OUTPUT_HIGH_WATER.min(self.cfg.max_write)
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
        self.date = None;
        self.closed_unwritten = 0;
    }

    /// Frees the buffers a turn grew (stream table, decoded headers, queues) when the
    /// connection has nothing in flight, and gives back its output buffer once written (even
    /// with streams open), empty, for the driver to lend to the next turn of any connection
    /// ([`Connection::lend_output`]): a waiting connection holds no output buffer, and a turn
    /// of large bodies writes into room an earlier turn grew instead of growing its own
    /// again by doubling. Call before
    /// waiting for input: an idle connection then holds little more than its HPACK tables.
    /// A connection still quiet after [`QUIET_TRIM`] trims more (see `handle_timeout`).
    ///
    /// A busy connection (its second request since it was last quiet, each within
    /// [`KEEP_BUFFERS_WITHIN`] of the client's previous input) keeps the rest until
    /// that quiet trim instead: a client that multiplexes sends its next requests within
    /// microseconds, one that does not within a round trip, and freeing and regrowing the
    /// table and queues every turn cost more than decoding the requests. Not after a large
    /// write (over [`KEEP_OUTPUT_MAX`]): with hundreds of such connections, what each kept
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
    fn free_buffers(&mut self) {
        drop(self.take_buffers(false));
    }

    /// Takes out the turn buffers, emptied, when nothing uses them (none when they held no
    /// memory). The request memo holds its request's part of the decoded headers' buffer: it
    /// goes too, unless `keep_memo` (a busy connection keeps it until the quiet trim or the
    /// next other request).
    fn take_buffers(&mut self, keep_memo: bool) -> Option<TurnBuffers> {
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
        metrics::h2_goaway(Direction::Sent, Reason::NO_ERROR.0, "server stopping");
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
            // Emptied, its stamps still counting: a kept answer never takes a later block
            // for its own.
            self.headers_cache = HeadersCache {
                stamp: self.headers_cache.stamp,
                ..HeadersCache::default()
            };
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

    // ---- receiving ------------------------------------------------------------------------

    fn recv_frames(
        &mut self,
        input: &mut BytesMut,
        now: Instant,
        streams_body: &dyn Fn(&Request) -> bool,
    ) -> Res {
        if self.phase == Phase::Preface {
            let n = input.len().min(frame::PREFACE.len());
            if input[..n] != frame::PREFACE[..n] {
                return Err(Fail::Conn(Reason::PROTOCOL_ERROR, "bad connection preface"));
            }
            if n < frame::PREFACE.len() {
                return Ok(());
            }
            input.advance(n);
            self.phase = Phase::FirstSettings;
        }
        if now.saturating_duration_since(self.last_frame_at) > KEEP_BUFFERS_WITHIN {
            self.opened_lately = 0;
        }
        let mut got_frame = false;
        // Where the next frame starts: `input` is advanced once, after the loop (or before
        // it waits for more), not per frame.
        let mut at = 0;
        while input.len() - at >= frame::HEADER_LEN {
            if self.batch_opened >= REQUEST_BATCH && self.partial.is_none() {
                self.recv_paused = true;
                break;
            }
            let head_bytes: &[u8; frame::HEADER_LEN] = input[at..at + frame::HEADER_LEN]
                .try_into()
                .map_err(|_| Fail::Conn(Reason::INTERNAL_ERROR, "frame header"))?;
            let head = Head::parse(head_bytes);
            // Refuse an oversized frame before buffering its payload.
            if head.len > frame::DEFAULT_MAX_FRAME_SIZE {
                return Err(Fail::Conn(Reason::FRAME_SIZE_ERROR, "frame too large"));
            }
            let total = frame::HEADER_LEN + head.len as usize;
            if input.len() - at < total {
                input.advance(at);
                at = 0;
                input.reserve(total - input.len());
                break;
            }
            got_frame = true;
            let payload = &input[at + frame::HEADER_LEN..at + total];
            let repeat =
                if head.kind == kind::HEADERS && head.flags & REPEAT_FLAGS_MASK == REPEAT_FLAGS {
                    self.repeat_headers(head.stream, payload)
                } else {
                    None
                };
            if let Some(room) = repeat {
                at = self.repeat_run(input, at, at + total, room);
                if self.output_full() {
                    // The frames after the run wait for the output to be written, rather
                    // than be queued as requests whose answers wait.
                    self.batch_opened = self.batch_opened.max(REQUEST_BATCH);
                }
                continue;
            }
            let r = match frame::decode(head, payload, frame::DEFAULT_MAX_FRAME_SIZE) {
                Ok(f) => self.on_frame(f, now),
                Err(FrameError::Connection(r)) => Err(Fail::Conn(r, "invalid frame")),
                Err(FrameError::Stream(id, r)) => {
                    if self.partial.is_some() {
                        Err(Fail::Conn(
                            Reason::PROTOCOL_ERROR,
                            "frame inside a header block",
                        ))
                    } else {
                        self.stream_error(id, r, now)
                    }
                }
            };
            at += total;
            r?;
            if let Some(id) = self.opened_with_body.take() {
                // Decided before the stream's first DATA frame is processed.
                self.attach_body(id, streams_body);
            }
            if self.closed.is_some() {
                input.clear();
                at = 0;
                break;
            }
        }
        input.advance(at);
        if got_frame {
            self.last_frame_at = now;
        }
        if self.drain_when_open && self.phase == Phase::Open {
            self.drain_when_open = false;
            self.shutdown();
        }
        self.replenish_connection_window();
        Ok(())
    }

    fn on_frame(&mut self, f: Frame<'_>, now: Instant) -> Res {
        if self.phase == Phase::FirstSettings {
            match f {
                Frame::Settings { ack: false, .. } => self.phase = Phase::Open,
                _ => {
                    return Err(Fail::Conn(
                        Reason::PROTOCOL_ERROR,
                        "expected SETTINGS first",
                    ))
                }
            }
        }
        if let Some(p) = &self.partial {
            match f {
                Frame::Continuation { stream, .. } if stream == p.stream => {}
                _ => return Err(Fail::Conn(Reason::PROTOCOL_ERROR, "expected CONTINUATION")),
            }
        }
        match f {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream, end_stream, data, flow_len, now),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => self.on_headers(stream, end_stream, end_headers, block, now),
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => self.on_continuation(stream, end_headers, block, now),
            Frame::Priority { .. } => self.spend_control(now),
            Frame::RstStream { stream, reason } => {
                metrics::h2_reset(Direction::Received, reason.0);
                self.on_rst_stream(stream, now)
            }
            Frame::Settings { ack, settings } => {
                if !ack {
                    self.spend_control(now)?;
                    for (id, v) in settings.iter() {
                        self.apply_setting(id, v)?;
                    }
                    frame::put_settings_ack(&mut self.out);
                }
                Ok(())
            }
            Frame::Ping { ack, data } => {
                if ack {
                    if data == SHUTDOWN_PING && self.phase == Phase::Draining {
                        frame::put_goaway(&mut self.out, self.max_client_stream, Reason::NO_ERROR);
                        self.phase = Phase::Final {
                            last: self.max_client_stream,
                        };
                        self.check_done();
                    }
                    Ok(())
                } else {
                    self.spend_control(now)?;
                    frame::put_ping(&mut self.out, true, &data);
                    Ok(())
                }
            }
            Frame::GoAway { reason, .. } => {
                metrics::h2_goaway(Direction::Received, reason.0, "client");
                self.peer_goaway = true;
                self.check_done();
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => {
                self.on_window_update(stream, increment, now)
            }
            Frame::PriorityUpdate { stream, field } => {
                self.spend_control(now)?;
                if let Some(i) = self.index(stream) {
                    self.streams[i].priority = Priority::parse(field);
                }
                Ok(())
            }
            Frame::Unknown { .. } => Ok(()),
        }
    }

    fn on_headers(
        &mut self,
        id: u32,
        end_stream: bool,
        end_headers: bool,
        block: &[u8],
        now: Instant,
    ) -> Res {
        // Every stream in the table has an id up to `max_client_stream`: a new one (a
        // request, the common case) needs no search of the table or of the recent resets.
        let known = if id > self.max_client_stream {
            None
        } else {
            self.index(id)
        };
        let usage = match known {
            Some(i) => match self.streams[i].recv {
                Recv::Body { .. } if end_stream => BlockUse::Trailers,
                Recv::Body { .. } => {
                    // Trailers must end the stream (RFC 9113 section 8.1).
                    self.stream_error(id, Reason::PROTOCOL_ERROR, now)?;
                    BlockUse::Discard
                }
                Recv::Closed => {
                    self.stream_error(id, Reason::STREAM_CLOSED, now)?;
                    BlockUse::Discard
                }
            },
            None if id <= self.max_client_stream && self.recently_reset.contains(&id) => {
                BlockUse::Discard
            }
            None if id <= self.max_client_stream => {
                return Err(Fail::Conn(
                    Reason::STREAM_CLOSED,
                    "HEADERS on a closed stream",
                ));
            }
            None => {
                if id % 2 == 0 {
                    return Err(Fail::Conn(Reason::PROTOCOL_ERROR, "even stream id"));
                }
                self.max_client_stream = id;
                self.batch_opened += 1;
                self.opened_lately = self.opened_lately.saturating_add(1);
                match self.phase {
                    Phase::Final { last } if id > last => BlockUse::Discard,
                    _ if self.streams.len() + self.closed_unwritten as usize
                        >= self.cfg.max_streams as usize =>
                    {
                        self.stream_error(id, Reason::REFUSED_STREAM, now)?;
                        BlockUse::Discard
                    }
                    _ => BlockUse::Request,
                }
            }
        };
        if end_headers {
            return self.on_block(id, end_stream, usage, block, now);
        }
        self.block.clear();
        self.block.extend_from_slice(block);
        self.partial = Some(Partial {
            stream: id,
            end_stream,
            usage,
            started: now,
        });
        Ok(())
    }

    fn on_continuation(&mut self, id: u32, end_headers: bool, block: &[u8], now: Instant) -> Res {
        let Some(p) = self.partial.take() else {
            return Err(Fail::Conn(
                Reason::PROTOCOL_ERROR,
                "CONTINUATION without HEADERS",
            ));
        };
        debug_assert_eq!(p.stream, id);
        if block.is_empty() && !end_headers {
            self.spend_control(now)?;
        }
        // The compressed block may not be much larger than the decoded list we accept.
        if self.block.len() + block.len() > self.cfg.max_header_list.saturating_mul(2) + 1024 {
            return Err(Fail::Conn(
                Reason::ENHANCE_YOUR_CALM,
                "header block too large",
            ));
        }
        self.block.extend_from_slice(block);
        if !end_headers {
            self.partial = Some(p);
            return Ok(());
        }
        let whole = std::mem::take(&mut self.block);
        let r = self.on_block(id, p.end_stream, p.usage, &whole, now);
        self.block = whole;
        r
    }

    /// A complete header block for stream `id`.
    fn on_block(
        &mut self,
        id: u32,
        end_stream: bool,
        usage: BlockUse,
        block: &[u8],
        now: Instant,
    ) -> Res {
        if usage == BlockUse::Request && self.decoder.kept_table() {
            if let Some(p) = self.memo.parsed_for(block) {
                // The request is made where it is held, not moved there through the callers.
                let meta = Meta::of(p);
                let mut renews = false;
                if end_stream && meta.bodiless() {
                    if self.answer_repeat(id).is_some() {
                        return Ok(());
                    }
                    renews = self.memo.renews();
                }
                self.memo.stream = id;
                if self.open_request_stream(id, end_stream, Some(meta))? {
                    if let Some(p) = &self.memo.parsed {
                        self.held.push_back((id, p.req.repeat()));
                    }
                }
                if renews {
                    // Its answer renews the memo: handed out before more frames are decoded,
                    // so those behind it are repeats again, not requests queued after it.
                    self.batch_opened = self.batch_opened.max(REQUEST_BATCH);
                }
                return Ok(());
            }
        }
        self.fields.clear();
        let fields = &mut self.fields;
        // Empty: the previous request took its bytes with `split`, leaving spare capacity;
        // once earlier requests are dropped, `reserve` reclaims the whole allocation.
        self.hbuf.clear();
        let need = (block.len() * 2).max(256);
        if self.hbuf.capacity() < need {
            self.hbuf.reserve(HBUF_CHUNK.max(need));
        }
        let decoded = self
            .decoder
            .decode(block, &mut self.hbuf, |f| fields.push(f));
        if !self.decoder.kept_table() {
            // Its indexes may mean other fields now.
            self.memo.clear();
        }
        match decoded {
            Ok(()) => {}
            Err(DecodeError::HeaderListTooLarge) => {
                self.hbuf.clear();
                return match usage {
                    BlockUse::Request => {
                        self.open_stream(id, end_stream, None)?;
                        self.respond_early(id, 431);
                        Ok(())
                    }
                    BlockUse::Trailers => self.stream_error(id, Reason::PROTOCOL_ERROR, now),
                    BlockUse::Discard => Ok(()),
                };
            }
            Err(e) => {
                tracing::debug!("HPACK decoding failed: {e}");
                return Err(Fail::Conn(
                    Reason::COMPRESSION_ERROR,
                    "HPACK decoding failed",
                ));
            }
        }
        match usage {
            BlockUse::Discard => {
                self.hbuf.clear();
                Ok(())
            }
            BlockUse::Trailers => {
                let ok = request_head::valid_trailers(&self.hbuf, &self.fields);
                let Some(i) = self.index(id).filter(|_| ok) else {
                    self.hbuf.clear();
                    return self.stream_error(id, Reason::PROTOCOL_ERROR, now);
                };
                if let Recv::Body {
                    content_length: Some(cl),
                    received,
                } = self.streams[i].recv
                {
                    if cl != received {
                        // Declared more than the DATA sent (section 8.1.1).
                        self.hbuf.clear();
                        return self.stream_error(id, Reason::PROTOCOL_ERROR, now);
                    }
                }
                let trailers = if self.streams[i].body.is_some() {
                    let block = self.hbuf.split().freeze();
                    let t: Trailers = self
                        .fields
                        .iter()
                        .map(|f| (block.slice(f.name.clone()), block.slice(f.value.clone())))
                        .collect();
                    Some(t)
                } else {
                    self.hbuf.clear();
                    None
                };
                self.end_of_request(id, trailers)
            }
            BlockUse::Request => {
                if self.fields.len() > self.cfg.max_header_fields {
                    self.hbuf.clear();
                    self.open_stream(id, end_stream, None)?;
                    self.respond_early(id, 431);
                    return Ok(());
                }
                match self.build_request() {
                    Ok(parsed) => {
                        // Only a busy connection keeps its memo until its next request:
                        // for another, it goes with the turn buffers.
                        if self.decoder.kept_table() && self.opened_lately >= KEEP_BUFFERS_OPENED {
                            self.memo.store(id, block, &parsed);
                        }
                        self.open_stream(id, end_stream, Some(parsed))
                    }
                    Err(()) => {
                        self.hbuf.clear();
                        self.stream_error(id, Reason::PROTOCOL_ERROR, now)
                    }
                }
            }
        }
    }

    /// Validates the decoded fields (RFC 9113 section 8.3, shared with HTTP/3 in
    /// `proto::request_head`) and builds the request.
    fn build_request(&mut self) -> Result<Parsed, ()> {
        let head = request_head::parse(&self.hbuf, &self.fields).map_err(|_| ())?;
        if head.protocol.is_some() && !self.cfg.enable_connect_protocol {
            // `:protocol` without SETTINGS_ENABLE_CONNECT_PROTOCOL is malformed (RFC 8441).
            return Err(());
        }
        let priority = head.priority.map(|r| Priority::parse(&self.hbuf[r]));
        let mut req = RequestBuilder {
            method: head.method,
            version: Version::Http2,
            secure: self.cfg.secure,
            peer: self.peer,
            local: self.local,
            target: head.target,
            authority: head.authority,
            fields: head.fields,
        }
        .build(self.hbuf.split().freeze());
        if let Some(p) = head.protocol {
            req.set_protocol(p);
        }
        Ok(Parsed {
            req,
            content_length: head.content_length,
            priority,
            expect_continue: head.expect_continue,
        })
    }

    fn open_stream(&mut self, id: u32, end_stream: bool, parsed: Option<Parsed>) -> Res {
        let meta = parsed.as_ref().map(Meta::of);
        if self.open_request_stream(id, end_stream, meta)? {
            if let Some(p) = parsed {
                self.held.push_back((id, p.req));
            }
        }
        Ok(())
    }

    /// Opens stream `id`, for a request described by `meta` (none: refused by the
    /// connection itself). Returns whether the stream holds its request: the caller then
    /// pushes it to `held`, which has room for it.
    #[inline]
    fn open_request_stream(
        &mut self,
        id: u32,
        end_stream: bool,
        meta: Option<Meta>,
    ) -> Result<bool, Fail> {
        let i = self.insert(id);
        let s = &mut self.streams[i];
        if !end_stream {
            s.recv = Recv::Body {
                content_length: meta.and_then(|m| m.content_length),
                received: 0,
            };
        }
        let mut continue_100 = false;
        if let Some(m) = meta {
            s.head_request = m.head;
            s.tunnel = m.tunnel;
            if let Some(prio) = m.priority {
                s.priority = prio;
            }
            continue_100 = m.expect_continue && !end_stream;
            if end_stream && m.content_length.is_some_and(|l| l != 0) {
                // Declared a body but sent none (section 8.1.1).
                self.stream_error(id, Reason::PROTOCOL_ERROR, self.last_frame_at)?;
                return Ok(false);
            }
            s.holds_request = true;
            if self.held.capacity() == 0 {
                self.held.reserve_exact(REQUEST_BATCH);
            }
        }
        let has_request = s.holds_request;
        if end_stream {
            self.requests.push_back(id);
        } else {
            if has_request {
                self.opened_with_body = Some(id);
            }
            if continue_100 {
                self.write_headers(id, 100, &Headers::default(), None, false);
            }
        }
        Ok(has_request)
    }

    /// Stream `id`'s request was just opened with a body to follow: if its handler streams
    /// bodies, the request gets a body pipe and is handed out now, before its body.
    fn attach_body(&mut self, id: u32, streams_body: &dyn Fn(&Request) -> bool) {
        let Some(i) = self.index(id) else { return };
        let s = &mut self.streams[i];
        let Recv::Body { content_length, .. } = s.recv else {
            return;
        };
        if !s.holds_request {
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
        s.body = Some(writer);
        self.body_pipes += 1;
        self.requests.push_back(id);
    }

    fn on_data(
        &mut self,
        id: u32,
        end_stream: bool,
        data: &[u8],
        flow_len: u32,
        now: Instant,
    ) -> Res {
        let len = data.len();
        if flow_len > self.recv_conn_window {
            return Err(Fail::Conn(
                Reason::FLOW_CONTROL_ERROR,
                "connection window exceeded",
            ));
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
                return Err(Fail::Conn(Reason::PROTOCOL_ERROR, "DATA on an idle stream"));
            }
            if self.recently_reset.contains(&id) {
                // We reset it; the client may have sent this before it knew.
                return Ok(());
            }
            return self.stream_error(id, Reason::STREAM_CLOSED, now);
        };
        if matches!(self.streams[i].recv, Recv::Closed) {
            return self.stream_error(id, Reason::STREAM_CLOSED, now);
        }
        if flow_len > self.streams[i].recv_window {
            return self.stream_error(id, Reason::FLOW_CONTROL_ERROR, now);
        }
        let s = &mut self.streams[i];
        s.recv_window -= flow_len;
        let (received, content_length) = match &mut s.recv {
            Recv::Body {
                content_length,
                received,
            } => {
                *received += len as u64;
                (*received, *content_length)
            }
            Recv::Closed => (0, None),
        };
        if content_length.is_some_and(|cl| received > cl || (end_stream && received != cl)) {
            return self.stream_error(id, Reason::PROTOCOL_ERROR, now);
        }
        if received > self.cfg.max_request_body && !self.streams[i].tunnel {
            return self.body_too_large(i, now);
        }
        let s = &mut self.streams[i];
        // Bytes kept in a pipe earn credit when read (`credit_consumed`); padding and
        // discarded bodies at once.
        let mut credit = flow_len;
        if let Some(w) = &s.body {
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
    fn body_too_large(&mut self, i: usize, now: Instant) -> Res {
        let id = self.streams[i].id;
        self.drop_pipe(
            i,
            BodyError::new(
                Side::Internal,
                "request body larger than limit-request-body",
            ),
        );
        if matches!(self.streams[i].send, Send::Waiting) {
            self.respond_early(id, 413);
            Ok(())
        } else {
            self.stream_error(id, Reason::CANCEL, now)
        }
    }

    /// The client ended stream `id`: its request is complete.
    fn end_of_request(&mut self, id: u32, trailers: Option<Trailers>) -> Res {
        let Some(i) = self.index(id) else {
            return Ok(());
        };
        let s = &mut self.streams[i];
        s.recv = Recv::Closed;
        if let Some(w) = &s.body {
            // Handed out (or queued) when its head arrived.
            w.finish(trailers);
            if matches!(s.send, Send::Done) {
                // Answered already; the rest of the body was let in and dropped.
                self.remove(i);
            }
        } else if s.holds_request {
            self.requests.push_back(id);
        } else if matches!(s.send, Send::Done) {
            self.remove(i);
        }
        Ok(())
    }

    /// Returns credit for the request body bytes handlers read since the last call: a stream
    /// WINDOW_UPDATE per half window read (while the stream still receives), and the
    /// connection credit held back for them.
    fn credit_consumed(&mut self) {
        let half = self.cfg.input_window / 2;
        for i in 0..self.streams.slots() {
            let s = &mut self.streams[i];
            // A free slot has no pipe.
            let Some(w) = &s.body else { continue };
            let read = w.take_consumed();
            if read == 0 {
                continue;
            }
            self.unread_total = self.unread_total.saturating_sub(read);
            match s.recv {
                Recv::Body { .. } => {
                    s.recv_unacked = s
                        .recv_unacked
                        .saturating_add(u32::try_from(read).unwrap_or(u32::MAX));
                    if s.recv_unacked >= half {
                        frame::put_window_update(&mut self.out, s.id, s.recv_unacked);
                        s.recv_window = s.recv_window.saturating_add(s.recv_unacked);
                        s.recv_unacked = 0;
                    }
                }
                Recv::Closed if w.buffered() == 0 && w.is_finished() => {
                    // All of it arrived and was read: nothing more to account for.
                    s.body = None;
                    self.body_pipes -= 1;
                }
                Recv::Closed => {}
            }
        }
        self.hold_credit();
        self.replenish_connection_window();
    }

    /// Keeps connection credit back for the unread request body bytes above one window
    /// (`input_window`), and gives back what was held once they are read. One stalled stream
    /// (at most one window unread) never holds connection credit, so it does not starve the
    /// others; a connection buffers at most about two windows of request bodies.
    fn hold_credit(&mut self) {
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
    fn drop_pipe(&mut self, i: usize, why: BodyError) {
        let Some(w) = self.streams[i].body.take() else {
            return;
        };
        if !w.is_finished() {
            w.abort(why);
        }
        self.body_pipes -= 1;
        let unread = w.buffered() as u64 + w.take_consumed();
        self.unread_total = self.unread_total.saturating_sub(unread);
        self.hold_credit();
    }

    fn on_rst_stream(&mut self, id: u32, now: Instant) -> Res {
        if id > self.max_client_stream {
            return Err(Fail::Conn(
                Reason::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream",
            ));
        }
        if let Some(i) = self.index(id) {
            self.remove(i);
            self.spend_reset(now)?;
        }
        Ok(())
    }

    fn on_window_update(&mut self, id: u32, increment: u32, now: Instant) -> Res {
        if increment < TINY_WINDOW_UPDATE {
            self.spend_control(now)?;
        }
        if id == 0 {
            self.send_conn_window += i64::from(increment);
            if self.send_conn_window > i64::from(MAX_WINDOW) {
                return Err(Fail::Conn(
                    Reason::FLOW_CONTROL_ERROR,
                    "connection window overflow",
                ));
            }
            return Ok(());
        }
        let Some(i) = self.index(id) else {
            if id > self.max_client_stream {
                return Err(Fail::Conn(
                    Reason::PROTOCOL_ERROR,
                    "WINDOW_UPDATE on an idle stream",
                ));
            }
            return Ok(());
        };
        let s = &mut self.streams[i];
        s.send_window += i64::from(increment);
        if s.send_window > i64::from(MAX_WINDOW) {
            return self.stream_error(id, Reason::FLOW_CONTROL_ERROR, now);
        }
        self.schedule(i);
        Ok(())
    }

    fn apply_setting(&mut self, id: u16, value: u32) -> Res {
        match id {
            setting::HEADER_TABLE_SIZE => {
                self.encoder.set_peer_max_table_size(value as usize);
                // The encoder may owe a size update at the start of the next block.
                self.headers_cache.valid = false;
            }
            setting::INITIAL_WINDOW_SIZE => {
                let delta = i64::from(value) - i64::from(self.peer_initial_window);
                self.peer_initial_window = value;
                for i in 0..self.streams.slots() {
                    if !self.streams.is_open(i) {
                        continue;
                    }
                    let s = &mut self.streams[i];
                    s.send_window += delta;
                    if s.send_window > i64::from(MAX_WINDOW) {
                        return Err(Fail::Conn(
                            Reason::FLOW_CONTROL_ERROR,
                            "stream window overflow",
                        ));
                    }
                    self.schedule(i);
                }
            }
            setting::MAX_FRAME_SIZE => self.peer_max_frame = value,
            _ => {}
        }
        Ok(())
    }

    fn replenish_connection_window(&mut self) {
        // Batched: one WINDOW_UPDATE per half window consumed, not one per DATA frame.
        let target = self.cfg.input_window.max(frame::DEFAULT_WINDOW);
        if self.recv_conn_unacked >= target / 2 {
            frame::put_window_update(&mut self.out, 0, self.recv_conn_unacked);
            self.recv_conn_window += self.recv_conn_unacked;
            self.recv_conn_unacked = 0;
        }
    }

    // ---- sending ----------------------------------------------------------------------------

    /// Writes the response HEADERS (and CONTINUATIONs); `body_len` is the content-length,
    /// `None` for a streamed body of unknown length. Returns the header block's size.
    fn write_headers(
        &mut self,
        id: u32,
        status: u16,
        headers: &Headers,
        body_len: Option<u64>,
        end_stream: bool,
    ) -> u64 {
        let at = self.out.len();
        frame::put_head(&mut self.out, 0, kind::HEADERS, 0, id);
        let status_buf = itoa3(status);
        let date = *self
            .date
            .get_or_insert_with(|| crate::http::date::with_now(|d| *d));
        let cacheable = status >= 200 && body_len.is_some();
        let cache_len = body_len.unwrap_or(0);
        if cacheable
            && self
                .headers_cache
                .matches(status, &date, headers, cache_len)
        {
            self.out.extend_from_slice(&self.headers_cache.block);
        } else {
            let block_start = self.out.len();
            let mut fields = 0;
            {
                let mut b = self.encoder.block(&mut self.out);
                b.field(b":status", &status_buf);
                fields += 1;
                if status >= 200 {
                    if let Some(server) = &self.cfg.server_name {
                        b.field(b"server", server);
                        fields += 1;
                    }
                    if let Some(alt_svc) = &self.cfg.alt_svc {
                        b.field(b"alt-svc", alt_svc);
                        fields += 1;
                    }
                    // A proxied response keeps the backend's Date.
                    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"date")) {
                        b.field(b"date", &date);
                        fields += 1;
                    }
                    for (name, value) in headers.iter() {
                        if request_head::is_connection_specific(name)
                            || name.eq_ignore_ascii_case(b"content-length")
                        {
                            continue;
                        }
                        if value.len() <= INDEX_VALUE_MAX && repeats_per_resource(name) {
                            // The same file answered again costs one byte, as in h2o.
                            b.field_with(name, value, Indexing::Incremental);
                        } else {
                            b.field(name, value);
                        }
                        fields += 1;
                    }
                    if let Some(body_len) = body_len.filter(|_| status != 204 && status != 304) {
                        let mut digits = [0u8; 20];
                        let len = format_u64(body_len, &mut digits);
                        b.field_with(b"content-length", len, Indexing::Incremental);
                        fields += 1;
                    }
                }
            }
            let block = &self.out[block_start..];
            // One byte per field, each an index: encoding it did not touch the table, so the
            // same bytes stay valid until something else is encoded.
            let reusable = cacheable
                && block.len() == fields
                && block.iter().all(|&b| b & 0x80 != 0 && b != 0xff);
            if reusable {
                let block = block.to_vec();
                self.headers_cache
                    .store(status, &date, headers, cache_len, block);
            } else {
                self.headers_cache.valid = false;
            }
        }
        self.frame_header_block(at, id, end_stream)
    }

    /// Writes trailing HEADERS with END_STREAM. Pseudo-header and connection-specific
    /// fields are not sent.
    fn write_trailers(&mut self, id: u32, trailers: &[(Bytes, Bytes)]) -> u64 {
        let at = self.out.len();
        frame::put_head(&mut self.out, 0, kind::HEADERS, 0, id);
        {
            let mut b = self.encoder.block(&mut self.out);
            for (name, value) in trailers {
                if name.starts_with(b":") || request_head::is_connection_specific(name) {
                    continue;
                }
                b.field(name, value);
            }
        }
        // The dynamic table may have changed under the cached block's indexes.
        self.headers_cache.valid = false;
        self.frame_header_block(at, id, true)
    }

    /// Frames the header block written after the 9 bytes reserved at `at`: one HEADERS, or
    /// HEADERS + CONTINUATIONs when larger than the peer's frame size. Returns the block size.
    #[inline(always)]
    fn frame_header_block(&mut self, at: usize, id: u32, end_stream: bool) -> u64 {
        let block_len = self.out.len() - at - frame::HEADER_LEN;
        let end = if end_stream { flag::END_STREAM } else { 0 };
        if block_len <= self.peer_max_frame as usize {
            frame::patch_len(&mut self.out, at, block_len);
            self.out[at + 4] = flag::END_HEADERS | end;
        } else {
            self.split_header_block(at, id, end);
        }
        block_len as u64
    }

    /// Rare: a block larger than the peer's frame size goes out as HEADERS + CONTINUATION.
    #[cold]
    #[inline(never)]
    fn split_header_block(&mut self, at: usize, id: u32, end: u8) {
        let max = self.peer_max_frame as usize;
        let block = self.out.split_off(at + frame::HEADER_LEN);
        self.out.truncate(at);
        let mut chunks = block.chunks(max).peekable();
        let mut first = true;
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            let (k, mut flags) = if first {
                (kind::HEADERS, end)
            } else {
                (kind::CONTINUATION, 0)
            };
            if last {
                flags |= flag::END_HEADERS;
            }
            frame::put_head(&mut self.out, c.len(), k, flags, id);
            self.out.extend_from_slice(c);
            first = false;
        }
    }

    /// Writes one DATA frame for the stream at `i`, as large as the windows, the peer's frame
    /// size and the body allow.
    fn send_data(&mut self, i: usize) {
        let id = self.streams[i].id;
        let Send::Body(src) = &mut self.streams[i].send else {
            return self.send_stream_data(i);
        };
        let n = (self.peer_max_frame as u64)
            .min(src.remaining())
            .min(self.streams[i].send_window.max(0) as u64)
            .min(self.send_conn_window.max(0) as u64) as usize;
        let at = self.out.len();
        frame::put_head(&mut self.out, n, kind::DATA, 0, id);
        let Send::Body(src) = &mut self.streams[i].send else {
            return;
        };
        // A frame's worth of a body in memory goes out from that memory, as whole bodies do.
        let shared = if n >= self.cfg.splice_min {
            src.take_bytes(n, n)
        } else {
            None
        };
        let filled = match shared {
            Some(b) => {
                self.spliced.push(self.out.len(), b);
                Ok(n)
            }
            None => src.fill(&mut self.out, n),
        };
        match filled {
            Ok(got) if got == n => {}
            _ => {
                self.out.truncate(at);
                tracing::debug!(
                    stream = id,
                    "response body read failed; resetting the stream"
                );
                self.put_reset(id, Reason::INTERNAL_ERROR);
                self.closed_unwritten += 1;
                self.remove(i);
                return;
            }
        }
        let done = src.remaining() == 0;
        let s = &mut self.streams[i];
        s.send_window -= n as i64;
        if let Some(sent) = &mut s.sent {
            sent.body += n as u64;
        }
        self.send_conn_window -= n as i64;
        if done {
            self.out[at + 4] = flag::END_STREAM;
            self.sending -= 1;
            self.finish_send(i);
        } else if s.send_window > 0 {
            self.requeue(i);
        }
    }

    /// Puts stream `i`, which just sent a frame and can send more, back in its ready queue:
    /// round-robin among incremental streams; a non-incremental one keeps the lead.
    fn requeue(&mut self, i: usize) {
        let s = &mut self.streams[i];
        let u = s.priority.urgency as usize & 7;
        s.queued = true;
        if s.priority.incremental {
            self.ready.push_back(u, s.id);
        } else {
            self.ready.push_front(u, s.id);
        }
    }

    /// One DATA frame of a streamed body's queued chunk. Once the chunk is out, the end
    /// follows if the producer gave it; otherwise the stream waits for the next push.
    fn send_stream_data(&mut self, i: usize) {
        let peer_max_frame = self.peer_max_frame as usize;
        let conn_window = self.send_conn_window.max(0) as u64;
        let s = &mut self.streams[i];
        let id = s.id;
        let stream_window = s.send_window.max(0) as u64;
        let Send::Stream(o) = &mut s.send else { return };
        let n = (o.queued.len())
            .min(peer_max_frame)
            .min(usize::try_from(stream_window.min(conn_window)).unwrap_or(usize::MAX));
        if n == 0 {
            return;
        }
        let at = self.out.len();
        frame::put_head(&mut self.out, n, kind::DATA, 0, id);
        if n >= self.cfg.splice_min {
            self.spliced.push(self.out.len(), o.queued.split_to(n));
        } else {
            self.out.extend_from_slice(&o.queued[..n]);
            o.queued.advance(n);
        }
        o.sent += n as u64;
        let drained = o.queued.is_empty();
        let ended = o.tail != Tail::Open;
        s.send_window -= n as i64;
        if let Some(sent) = &mut s.sent {
            sent.body += n as u64;
        }
        self.send_conn_window -= n as i64;
        if drained && ended {
            self.write_tail(i, Some(at));
        } else if !drained && self.streams[i].send_window > 0 {
            self.requeue(i);
        }
    }

    /// Ends stream `i`'s streamed body, whose bytes are all out: END_STREAM on the DATA frame
    /// just written at `last_data` (or an empty one), or trailing HEADERS.
    fn write_tail(&mut self, i: usize, last_data: Option<usize>) {
        let id = self.streams[i].id;
        let Send::Stream(o) = &mut self.streams[i].send else {
            return;
        };
        match std::mem::replace(&mut o.tail, Tail::End) {
            Tail::Open => return,
            Tail::End => match last_data {
                Some(at) => self.out[at + 4] = flag::END_STREAM,
                None => frame::put_head(&mut self.out, 0, kind::DATA, flag::END_STREAM, id),
            },
            Tail::Trailers(t) => {
                let n = self.write_trailers(id, &t);
                self.count_head(i, n);
            }
        }
        self.sending -= 1;
        self.streaming -= 1;
        self.finish_send(i);
    }

    /// Counts header block bytes sent on stream `i`, if it is tracked.
    fn count_head(&mut self, i: usize, n: u64) {
        if let Some(sent) = &mut self.streams[i].sent {
            sent.head += n;
        }
    }

    /// Resets stream `i` from our side (a failed or inconsistent streamed body), without
    /// charging the client's reset budget.
    fn reset(&mut self, i: usize, reason: Reason) {
        let id = self.streams[i].id;
        self.put_reset(id, reason);
        self.note_reset(id);
        self.closed_unwritten += 1;
        self.remove(i);
    }

    /// END_STREAM was written for the stream at `i`. The caller took it out of the
    /// `sending`/`streaming` counts.
    fn finish_send(&mut self, i: usize) {
        let s = &mut self.streams[i];
        set_send(&mut s.send, Send::Done);
        if let Recv::Body {
            content_length,
            received,
        } = s.recv
        {
            // Answered before the request ended (an early error, a backend that did not
            // read the body). When the rest of a declared body is already allowed by our
            // window, let it come and drop it (its END_STREAM closes the stream): some
            // clients (curl 7.88) take a reset while still uploading as a failed request.
            let rest_allowed = content_length
                .is_some_and(|cl| cl.saturating_sub(received) <= u64::from(s.recv_window));
            if rest_allowed {
                return;
            }
            // Otherwise ask the client to stop.
            let id = s.id;
            self.put_reset(id, Reason::NO_ERROR);
            self.note_reset(id);
        }
        self.closed_unwritten += 1;
        self.remove(i);
    }

    /// Answers a request the connection refused itself (431, 413). A handler that had it
    /// (a streamed body) loses it: the driver drops its pending answer.
    fn respond_early(&mut self, id: u32, status: u16) {
        let Some(i) = self.index(id) else { return };
        let s = &mut self.streams[i];
        if std::mem::take(&mut s.holds_request) {
            self.drop_held(id);
        }
        let s = &mut self.streams[i];
        if std::mem::take(&mut s.with_handler) {
            self.in_handler -= 1;
            self.cancelled.push(id);
        }
        self.respond(id, Response::error(status));
    }

    fn schedule(&mut self, i: usize) {
        let s = &mut self.streams[i];
        if !s.queued && s.sendable() {
            s.queued = true;
            self.ready.push_back(s.priority.urgency as usize, s.id);
        }
    }

    // ---- errors, budgets, table ---------------------------------------------------------

    /// Resets stream `id` with `reason` (RST_STREAM) and forgets it.
    fn stream_error(&mut self, id: u32, reason: Reason, now: Instant) -> Res {
        self.put_reset(id, reason);
        self.note_reset(id);
        if let Some(i) = self.index(id) {
            self.closed_unwritten += 1;
            self.remove(i);
        }
        // Resets we are made to send cost the same budget as the client's (MadeYouReset).
        self.spend_reset(now)
    }

    /// Writes RST_STREAM(`reason`) for stream `id`, counted in the metrics.
    fn put_reset(&mut self, id: u32, reason: Reason) {
        frame::put_rst_stream(&mut self.out, id, reason);
        metrics::h2_reset(Direction::Sent, reason.0);
    }

    fn note_reset(&mut self, id: u32) {
        if self.recently_reset.len() >= RECENT_RESETS {
            self.recently_reset.pop_front();
        }
        self.recently_reset.push_back(id);
    }

    fn fail(&mut self, reason: Reason, why: &'static str) {
        frame::put_goaway(&mut self.out, self.max_client_stream, reason);
        metrics::h2_goaway(Direction::Sent, reason.0, why);
        self.closed = Some(Closed::GoAway(reason, why));
        self.partial = None;
    }

    fn spend_reset(&mut self, now: Instant) -> Res {
        if self.resets.take(now) {
            Ok(())
        } else {
            Err(Fail::Conn(
                Reason::ENHANCE_YOUR_CALM,
                "too many stream resets",
            ))
        }
    }

    fn spend_control(&mut self, now: Instant) -> Res {
        if self.control.take(now) {
            Ok(())
        } else {
            Err(Fail::Conn(
                Reason::ENHANCE_YOUR_CALM,
                "too many control frames",
            ))
        }
    }

    fn check_done(&mut self) {
        if self.closed.is_some() || !self.streams.is_empty() {
            return;
        }
        if let Phase::Final { .. } = self.phase {
            self.closed = Some(Closed::GoAway(Reason::NO_ERROR, "server stopping"));
        } else if self.peer_goaway {
            self.closed = Some(Closed::PeerGoAway);
        }
    }

    fn index(&self, id: u32) -> Option<usize> {
        self.streams.position(id)
    }

    /// Stream `id`'s held request, out of the table.
    #[inline]
    fn take_held(&mut self, id: u32) -> Option<Request> {
        if self.held.front().is_some_and(|(held, _)| *held == id) {
            return self.held.pop_front().map(|(_, req)| req);
        }
        let k = self.held_position(id)?;
        self.held.remove(k).map(|(_, req)| req)
    }

    /// Where stream `id`'s request is in `held`: mostly the first.
    #[inline]
    fn held_position(&self, id: u32) -> Option<usize> {
        if self.held.front().is_some_and(|(held, _)| *held == id) {
            return Some(0);
        }
        self.held.iter().position(|(held, _)| *held == id)
    }

    /// Drops stream `id`'s held request (the stream went away or was answered early).
    fn drop_held(&mut self, id: u32) {
        if let Some(req) = self.take_held(id) {
            req.recycle();
        }
    }

    /// Opens stream `id` in the table, made where it stays: its slot.
    #[inline]
    fn insert(&mut self, id: u32) -> usize {
        let send_window = self.peer_initial_window;
        let recv_window = self.cfg.input_window;
        self.streams
            .open(id, send_window, recv_window, REQUEST_BATCH)
    }

    fn remove(&mut self, i: usize) {
        let s = &self.streams[i];
        if s.body.is_some()
            || s.with_handler
            || s.holds_request
            || s.sent.is_some()
            || matches!(s.send, Send::Stream(_))
        {
            self.before_remove(i);
        }
        if matches!(self.streams[i].send, Send::Body(_)) {
            self.sending -= 1;
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
        let s = &mut self.streams[i];
        let id = s.id;
        if let Send::Stream(_) = s.send {
            // Counted here; `remove` counts `Send::Body` itself.
            self.sending -= 1;
            self.streaming -= 1;
            self.cancelled.push(id);
        }
        if std::mem::take(&mut s.with_handler) {
            self.in_handler -= 1;
            self.cancelled.push(id);
        }
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

/// The last response header block, when it was made of index bytes only, with what it
/// encoded: an identical response reuses the bytes without touching the encoder.
#[derive(Default)]
struct HeadersCache {
    valid: bool,
    /// Counts the blocks stored, never going back (not when the cache is emptied): an answer
    /// memo made with this block knows it by its stamp.
    stamp: u64,
    status: u16,
    date: [u8; crate::http::date::DATE_LEN],
    /// The fields, when they were a shared list (a cached file's): the same list again is
    /// known by its address, kept valid by holding it.
    shared: Option<Rc<HeaderList>>,
    /// Otherwise a copy of them.
    headers: HeaderList,
    body_len: u64,
    block: Vec<u8>,
}

impl HeadersCache {
    #[inline]
    fn matches(
        &self,
        status: u16,
        date: &[u8; crate::http::date::DATE_LEN],
        headers: &Headers,
        body_len: u64,
    ) -> bool {
        if !(self.valid && self.status == status && self.body_len == body_len && self.date == *date)
        {
            return false;
        }
        if let (Some(a), Some(b)) = (&self.shared, headers.shared_list()) {
            if Rc::ptr_eq(a, b) {
                return true;
            }
        }
        let cached: &[(Bytes, Bytes)] = match &self.shared {
            Some(list) => list,
            None => &self.headers,
        };
        cached.len() == headers.len()
            && cached
                .iter()
                .zip(headers.iter())
                .all(|(a, b)| same_bytes(&a.0, &b.0) && same_bytes(&a.1, &b.1))
    }

    fn store(
        &mut self,
        status: u16,
        date: &[u8; crate::http::date::DATE_LEN],
        headers: &Headers,
        body_len: u64,
        block: Vec<u8>,
    ) {
        self.valid = true;
        self.stamp += 1;
        self.status = status;
        self.date = *date;
        self.headers.clear();
        self.shared = headers.shared_list().cloned();
        if self.shared.is_none() {
            self.headers.extend_from_slice(headers);
        }
        self.body_len = body_len;
        self.block = block;
    }
}

/// Byte equality, answered without `memcmp` when both are views of the same bytes (a handler
/// hands out clones of its cached header values) or empty: glibc's AVX-512 `memcmp` does a
/// masked load even for length 0, which on an empty slice's dangling pointer takes a
/// fault-suppression assist costing hundreds of cycles.
fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    a.len() == b.len() && (a.is_empty() || a.as_ptr() == b.as_ptr() || a[..] == b[..])
}

/// The stream id of the frame at `at` in `input` when it repeats the run's first frame
/// exactly (`total` bytes: the same length, type and flags in `prefix`, the same `block`)
/// for a new odd stream id above `last`.
#[inline(always)]
fn next_repeat(
    input: &[u8],
    at: usize,
    total: usize,
    prefix: &[u8; 5],
    block: &[u8],
    last: u32,
) -> Option<u32> {
    let frame = input.get(at..at + total)?;
    let id = u32::from_be_bytes(word(frame, 5)) & frame::MAX_WINDOW;
    (frame.first_chunk::<5>() == Some(prefix)
        && id > last
        && id % 2 == 1
        && same_block(block, &frame[frame::HEADER_LEN..]))
    .then_some(id)
}

/// Whether two header blocks are the same bytes. A repeated request's block is a few index
/// bytes: up to 16 are compared as two overlapping words each, without a call to `memcmp`.
#[inline(always)]
fn same_block(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        _ => a == b,
    }
}

/// The `N` bytes of `s` from `at` (within `s`).
#[inline(always)]
fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    s.get(at..at + N)
        .and_then(|w| w.try_into().ok())
        .unwrap_or([0; N])
}

/// The last request decoded from a header block that left the HPACK table as it was (indexed
/// fields and literals without indexing only). The same block bytes, while no block since
/// changed the table ([`hpack::Decoder::kept_table`]), decode to the same fields: the same
/// size against the list limit, the same validation, the same request. So the request is
/// repeated instead, costing a field-list copy rather than decoding and checking each field.
/// Any block that changes the table clears it.
#[derive(Default)]
struct RequestMemo {
    block: Vec<u8>,
    /// Its field list is shared with its repeats.
    parsed: Option<Parsed>,
    /// The shared list's allocation, kept for the next request remembered when no repeat
    /// held it any more.
    spare: Option<Rc<FieldList>>,
    /// The last stream opened for this request (0: none).
    stream: u32,
    /// The answer given to it, when the handler said it repeats: given again to the next
    /// streams that send the same block, as long as nothing it depends on changed
    /// (`Connection::answer_repeat`).
    answer: Option<AnswerMemo>,
    /// The answer's HEADERS frame and the head of its DATA frame (stream ids zero), written
    /// as they are for each repeat, with the body when it is small (`AnswerMemo::frames_len`
    /// bytes), zeros after them up to [`FRAMES_COPY`]. Its allocation is kept for the next
    /// answer.
    frames: Vec<u8>,
    /// Whether `answer` is still the answer, as found by this `recv`'s first repeat (the
    /// Date second and the body's file, which a `recv` does not change).
    answer_fresh: Option<bool>,
    /// Requests left that may renew a kept answer which could not be given (see
    /// `RequestMemo::renews`).
    renew_left: u8,
}

/// A body up to this long is kept with its answer's frames and written with them.
const FRAMES_BODY_MAX: usize = 1024;
/// Kept frames up to this long are copied as this many bytes (`Connection::put_repeat`):
/// a HEADERS frame of a few indexed fields, the head of a DATA frame and a short body.
const FRAMES_COPY: usize = 64;

/// An inline answer to the memoised request, sent whole (HEADERS, one DATA with
/// END_STREAM), to give again.
struct AnswerMemo {
    status: u16,
    /// The length of `RequestMemo::frames` without its padding.
    frames_len: u32,
    /// The header block's length (in `RequestMemo::frames`).
    head_len: u32,
    body_len: u32,
    /// The body is in `RequestMemo::frames` too (up to [`FRAMES_BODY_MAX`] bytes).
    body_in_frames: bool,
    /// Bytes, or a file's contents from the open-file cache (`Body::reusable_now`).
    body: Body,
    /// Its bytes, at hand for each repeat.
    data: Bytes,
    /// The response header block is the headers cache's while it keeps this stamp (nothing
    /// else encoded since: the HPACK encoder's table is as the block found it).
    stamp: u64,
    /// The metrics count it (`respond_tracked`).
    tracked: bool,
}

/// Longer blocks are not kept: a client repeating a request sends a few dozen bytes.
const MEMO_BLOCK_MAX: usize = 256;
/// Requests that may renew a kept answer gone stale, each answered before the next is
/// decoded (`RequestMemo::renews`): one whose block indexed new fields, then one to keep.
const RENEW_TRIES: u8 = 2;

impl RequestMemo {
    /// The request `block` gives, when it is the remembered block (to repeat).
    #[inline]
    fn parsed_for(&self, block: &[u8]) -> Option<&Parsed> {
        let p = self.parsed.as_ref()?;
        if !same_block(&self.block, block) {
            return None;
        }
        Some(p)
    }

    /// Remembers `parsed`, just decoded from `block` without changing the table, for stream
    /// `id`.
    fn store(&mut self, id: u32, block: &[u8], parsed: &Parsed) {
        if block.len() > MEMO_BLOCK_MAX {
            return self.clear();
        }
        self.clear();
        self.stream = id;
        self.block.extend_from_slice(block);
        let mut kept = parsed.repeat();
        kept.req.share_fields(&mut self.spare);
        self.parsed = Some(kept);
    }

    /// Whether the request just found to be the remembered one, which could not be answered
    /// from the memo, should renew its answer: yes when an answer is kept (it went stale: a
    /// new Date second, a file to check again, or it cannot go yet), and for the next
    /// [`RENEW_TRIES`] - 1 such requests, since the first answer after a stale one may not
    /// be kept (its header block added fields to the HPACK table).
    fn renews(&mut self) -> bool {
        if self.answer.is_some() {
            self.renew_left = RENEW_TRIES;
        }
        let renews = self.renew_left > 0;
        self.renew_left = self.renew_left.saturating_sub(1);
        renews
    }

    fn clear(&mut self) {
        self.block.clear();
        self.stream = 0;
        self.answer = None;
        self.answer_fresh = None;
        self.renew_left = 0;
        if let Some(p) = self.parsed.take() {
            p.req.recycle_shared(&mut self.spare);
        }
    }
}

/// A request that passed validation, with what the connection needs to know about it.
struct Parsed {
    req: Request,
    content_length: Option<u64>,
    priority: Option<Priority>,
    expect_continue: bool,
}

/// What opening a stream needs to know of its request.
#[derive(Clone, Copy)]
struct Meta {
    content_length: Option<u64>,
    priority: Option<Priority>,
    expect_continue: bool,
    head: bool,
    tunnel: bool,
}

impl Meta {
    /// A request that declares no body and asks for no tunnel: with END_STREAM on its
    /// HEADERS, it is complete and valid as it is.
    #[inline]
    fn bodiless(&self) -> bool {
        !self.tunnel && self.content_length.is_none_or(|l| l == 0)
    }

    #[inline]
    fn of(p: &Parsed) -> Meta {
        Meta {
            content_length: p.content_length,
            priority: p.priority,
            expect_continue: p.expect_continue,
            head: p.req.is_head(),
            tunnel: p.req.protocol().is_some(),
        }
    }
}

impl Parsed {
    fn repeat(&self) -> Parsed {
        Parsed {
            req: self.req.repeat(),
            content_length: self.content_length,
            priority: self.priority,
            expect_continue: self.expect_continue,
        }
    }
}

/// A token bucket: `rate` tokens a second, holding at most `rate`. Counted in
/// token-nanoseconds so frequent small refills are not lost to rounding.
struct Budget {
    tokens: u64,
    /// Tokens a second; the bucket holds at most `rate * TOKEN`.
    rate: u64,
    last: Instant,
}

const TOKEN: u64 = 1_000_000_000;

impl Budget {
    fn new(rate: u32, now: Instant) -> Budget {
        let rate = u64::from(rate.max(1));
        Budget {
            tokens: rate * TOKEN,
            rate,
            last: now,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_nanos();
        let elapsed = u64::try_from(elapsed).unwrap_or(u64::MAX);
        self.last = now;
        self.tokens = self
            .tokens
            .saturating_add(elapsed.saturating_mul(self.rate))
            .min(self.rate * TOKEN);
        if self.tokens >= TOKEN {
            self.tokens -= TOKEN;
            true
        } else {
            false
        }
    }
}

/// Appends `data`, the bytes of `body`, to the frames in `out`, or splices `body` in after
/// them when it is `splice_min` bytes or more and shares its memory.
#[inline(always)]
fn put_body(
    out: &mut Vec<u8>,
    spliced: &mut SplicedBodies,
    splice_min: usize,
    body: &Body,
    data: &[u8],
) {
    if data.len() >= splice_min {
        if spliced.push_again(out.len(), data) {
            return;
        }
        if let Some(b) = shared_bytes(body) {
            debug_assert_eq!(&b[..], data);
            spliced.push(out.len(), b);
            return;
        }
    }
    out.extend_from_slice(data);
}

/// [`put_body`] for a body whose bytes are shared already.
#[inline(always)]
fn put_shared(out: &mut Vec<u8>, spliced: &mut SplicedBodies, splice_min: usize, data: &Bytes) {
    if data.len() < splice_min {
        out.extend_from_slice(data);
    } else if !spliced.push_again(out.len(), data) {
        spliced.push(out.len(), data.clone());
    }
}

/// A body already in memory, as bytes that share that memory.
fn shared_bytes(body: &Body) -> Option<Bytes> {
    match body {
        Body::Bytes(b) => Some(b.clone()),
        Body::File(f) => f.cached_bytes(),
        _ => None,
    }
}

/// A body already in memory (bytes, or a file the open-file cache holds), as one slice.
fn in_memory(body: &Body) -> Option<&[u8]> {
    match body {
        Body::Bytes(b) => Some(b),
        Body::File(f) => f.cached_slice(),
        _ => None,
    }
}

/// Response fields whose value is the same each time one resource is served.
fn repeats_per_resource(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"etag") || name.eq_ignore_ascii_case(b"last-modified")
}

fn itoa3(status: u16) -> [u8; 3] {
    let s = status.min(999);
    [
        b'0' + (s / 100) as u8,
        b'0' + (s / 10 % 10) as u8,
        b'0' + (s % 10) as u8,
    ]
}

fn format_u64(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests;
