//! The client side of HTTP/2, sans-IO: one connection to a backend carrying many requests.
//! The socket side and the proxy's use of it are `upstream::h2`.
//!
//! # Lifecycle
//!
//! - **Start**: [`ClientConn::new`] puts the preface, our SETTINGS (no push, our stream
//!   window, our frame size) and a connection WINDOW_UPDATE in the output. Requests may be
//!   opened at once (RFC 9113 3.4); the backend's SETTINGS are applied when they come.
//! - **Streams**: [`ClientConn::open`] writes HEADERS (and CONTINUATION) for a new odd id when
//!   [`ClientConn::has_capacity`]: fewer streams than both `proxy.http2.max-concurrent-streams`
//!   and the backend's SETTINGS_MAX_CONCURRENT_STREAMS, and no GOAWAY or error. The request body
//!   goes out through [`ClientConn::send_data`], which takes only what both flow-control
//!   windows allow (the caller keeps the rest and waits for a WINDOW_UPDATE), then
//!   [`ClientConn::send_trailers`] or an END_STREAM. Bodies go both ways at once: the response
//!   may start before the request body ends.
//! - **Receiving**: [`ClientConn::receive`] decodes frames into per-stream state: the response
//!   head (1xx heads skipped), data chunks, trailers, the end, or a reset. The stream's reader
//!   takes them with [`ClientConn::take_head`] and [`ClientConn::take_data`]; the credit given
//!   back to the backend (WINDOW_UPDATE) is only for what the reader took, so a slow client
//!   slows the backend down, stream by stream.
//! - **End of a stream**: when both sides ended, or on [`ClientConn::reset`] (the client went
//!   away: RST_STREAM CANCEL), or a reset from the backend. The reader calls
//!   [`ClientConn::forget`] once it is done with the stream.
//! - **GOAWAY** from the backend: no new stream opens ([`ClientConn::has_capacity`] is false);
//!   streams above its last id are refused (nothing was processed, so the request may be sent
//!   again), the others finish. A connection error (ours or the peer's) ends every stream.
//! - **PING** is answered; SETTINGS are acknowledged and applied (window changes adjust every
//!   stream's send window, table size changes the HPACK encoder).
//!
//! Wakers live in the streams: whatever [`ClientConn::receive`] changes wakes the stream's
//! reader, and a window opening wakes every stream (a sender may be waiting for it).

use super::flow::{Overflow, Window};
use super::frame::{self, flag, kind, setting, Frame, FrameError, Head, Reason};
use super::hpack::{Decoder, Encoder, DEFAULT_TABLE_SIZE};
use crate::proto::request_head::{is_connection_specific, valid_field};
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::task::Waker;

/// What a client connection allows itself.
#[derive(Debug, Clone, Copy)]
pub struct ClientSettings {
    /// `proxy.http2.max-concurrent-streams`
    pub max_concurrent_streams: u32,
    /// The receive window of each stream: response bytes the backend may send ahead of the
    /// client's reading (`proxy.max-buffer-size`).
    pub stream_window: u32,
    /// The largest response header list accepted.
    pub max_header_list_size: u32,
}

/// A response head as the backend sent it.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: u16,
    /// Regular fields, names lowercase.
    pub headers: Vec<(Bytes, Bytes)>,
    pub content_length: Option<u64>,
    /// The head came with END_STREAM: there is no body.
    pub end_stream: bool,
}

/// What the reader of a stream gets next.
#[derive(Debug)]
pub enum Received {
    Data(Bytes),
    Trailers(Vec<(Bytes, Bytes)>),
    End,
    /// Nothing yet.
    Pending,
    Failed(StreamFailure),
}

/// Why a stream ended early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFailure {
    /// The backend did not process the request (REFUSED_STREAM, or above a GOAWAY's last id):
    /// it may be sent again.
    pub refused: bool,
    /// The connection ended before the response head: the backend may or may not have
    /// processed the request (an idempotent one may be sent again).
    pub connection_lost: bool,
    pub reason: String,
}

/// Why a stream could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// At the concurrency limit, after a GOAWAY, or the connection failed: use another one.
    NoCapacity,
}

pub struct ClientConn {
    cfg: ClientSettings,
    out: Vec<u8>,
    enc: Encoder,
    dec: Decoder,
    streams: HashMap<u32, Stream>,
    next_id: u32,
    peer_max_concurrent: u32,
    peer_initial_window: u32,
    peer_max_frame: u32,
    /// What the backend lets us send on the connection.
    send_window: Window,
    /// Connection-level bytes received and consumed (or dropped) but not yet credited back.
    recv_unacked: u32,
    /// What the backend may still send on the connection before our next WINDOW_UPDATE.
    recv_window: Window,
    conn_window: u32,
    /// A header block being continued: stream, fragments so far, END_STREAM.
    continuation: Option<(u32, Vec<u8>, bool)>,
    /// The backend's GOAWAY: the last stream it will process.
    goaway: Option<u32>,
    /// The connection failed: why (every stream has been failed).
    failed: Option<String>,
    /// Every stream must be woken (a window opened, or the connection failed).
    wake_all: bool,
    /// A sender stopped at `OUTPUT_HIGH_WATER`: wake the streams once the output is written.
    output_blocked: bool,
    /// Scratch space for encoding request heads.
    block: Vec<u8>,
}

struct Stream {
    send_window: Window,
    /// What the backend may still send before our next WINDOW_UPDATE.
    recv_window: Window,
    /// Taken by the reader but not yet credited back.
    recv_unacked: u32,
    head: Option<ResponseHead>,
    head_seen: bool,
    /// Interim (1xx) heads not yet taken, in order ([`ClientConnection::take_interim`]).
    interim: Vec<ResponseHead>,
    /// Interim heads received: beyond [`MAX_INTERIM`] the stream is reset.
    interim_count: u32,
    data: VecDeque<Bytes>,
    trailers: Option<Vec<(Bytes, Bytes)>>,
    /// END_STREAM received.
    remote_end: bool,
    /// END_STREAM sent.
    local_end: bool,
    failure: Option<StreamFailure>,
    /// Data bytes received, checked against Content-Length at the end.
    received: u64,
    content_length: Option<u64>,
    waker: Option<Waker>,
}

/// Interim (1xx) heads one stream may receive before it is reset: the proxy's own limit
/// (`proxy.max-informational-responses`) is usually lower.
pub const MAX_INTERIM: u32 = 1024;

/// Request body bytes queued in the output at most: beyond, senders wait for the socket (a
/// backend that grants large windows but does not read cannot make us hold a whole body).
pub const OUTPUT_HIGH_WATER: usize = 256 * 1024;
/// Output a backend can make us queue without reading (PING and SETTINGS answers): beyond,
/// the connection fails.
const OUTPUT_LIMIT: usize = 4 * OUTPUT_HIGH_WATER;

/// Frames on stream 0 and our own stream ids are odd; id space runs out at 2^31.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

impl ClientConn {
    pub fn new(cfg: ClientSettings) -> ClientConn {
        let stream_window = cfg.stream_window.clamp(1, frame::MAX_WINDOW);
        // Room for every stream's window at once, as far as the protocol allows.
        let conn_window = u64::from(stream_window)
            .saturating_mul(u64::from(cfg.max_concurrent_streams))
            .clamp(
                u64::from(frame::DEFAULT_WINDOW),
                u64::from(frame::MAX_WINDOW),
            ) as u32;
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(frame::PREFACE);
        frame::put_settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, stream_window),
                (setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list_size),
            ],
        );
        if conn_window > frame::DEFAULT_WINDOW {
            frame::put_window_update(&mut out, 0, conn_window - frame::DEFAULT_WINDOW);
        }
        ClientConn {
            cfg: ClientSettings {
                stream_window,
                ..cfg
            },
            out,
            enc: Encoder::new(DEFAULT_TABLE_SIZE),
            dec: Decoder::new(DEFAULT_TABLE_SIZE, cfg.max_header_list_size as usize),
            streams: HashMap::new(),
            next_id: 1,
            peer_max_concurrent: u32::MAX,
            peer_initial_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            send_window: Window::new(frame::DEFAULT_WINDOW),
            recv_unacked: 0,
            recv_window: Window::new(conn_window),
            conn_window,
            continuation: None,
            goaway: None,
            failed: None,
            wake_all: false,
            output_blocked: false,
            block: Vec::new(),
        }
    }

    /// Bytes to write to the backend.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of the output were written.
    pub fn consume_output(&mut self, n: usize) {
        self.out.drain(..n.min(self.out.len()));
        if self.out.is_empty() && std::mem::take(&mut self.output_blocked) {
            self.wake_all = true;
            self.wake();
        }
    }

    /// Whether a new stream may be opened here.
    pub fn has_capacity(&self) -> bool {
        let limit = self
            .cfg
            .max_concurrent_streams
            .min(self.peer_max_concurrent);
        self.failed.is_none()
            && self.goaway.is_none()
            && self.next_id <= MAX_STREAM_ID
            && (self.streams.len() as u64) < u64::from(limit)
    }

    /// No stream will ever open here again.
    pub fn is_closing(&self) -> bool {
        self.failed.is_some() || self.goaway.is_some() || self.next_id > MAX_STREAM_ID
    }

    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Whether a stream was ever opened here.
    pub fn ever_used(&self) -> bool {
        self.next_id > 1
    }

    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Opens a stream: `pseudo` are `:method`, `:scheme`, `:authority`, `:path` (in that
    /// order, empty values left out), `fields` the regular ones (already free of
    /// connection-specific fields). `end_stream`: there is no body.
    pub fn open<'f>(
        &mut self,
        pseudo: &[(&[u8], &[u8])],
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Result<u32, OpenError> {
        if !self.has_capacity() {
            return Err(OpenError::NoCapacity);
        }
        let id = self.next_id;
        self.next_id += 2;
        // Encoded into a reused buffer, then cut into frames.
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        {
            let mut b = self.enc.block(&mut block);
            for (name, value) in pseudo.iter().filter(|(_, v)| !v.is_empty()) {
                b.field(name, value);
            }
            for (name, value) in fields {
                b.field(name, value);
            }
        }
        self.put_header_block(id, &block, end_stream);
        self.block = block;
        self.streams.insert(
            id,
            Stream {
                send_window: Window::new(self.peer_initial_window),
                recv_window: Window::new(self.cfg.stream_window),
                recv_unacked: 0,
                head: None,
                head_seen: false,
                interim: Vec::new(),
                interim_count: 0,
                data: VecDeque::new(),
                trailers: None,
                remote_end: false,
                local_end: end_stream,
                failure: None,
                received: 0,
                content_length: None,
                waker: None,
            },
        );
        Ok(id)
    }

    /// Sends as much of `data` as the windows allow (taking it off the front), with
    /// END_STREAM when `end` and all of it went. Returns whether all of it went.
    pub fn send_data(&mut self, id: u32, data: &mut Bytes, end: bool) -> bool {
        let max_frame = self.peer_max_frame as usize;
        let Some(s) = self.streams.get_mut(&id) else {
            data.clear();
            return true;
        };
        if s.local_end || s.failure.is_some() {
            data.clear();
            return true;
        }
        loop {
            let room = s.send_window.available().min(self.send_window.available()) as usize;
            let queue_room = OUTPUT_HIGH_WATER.saturating_sub(self.out.len());
            let n = data.len().min(room).min(max_frame).min(queue_room);
            if n == 0 && !data.is_empty() {
                if queue_room == 0 {
                    self.output_blocked = true;
                }
                return false;
            }
            let last = n == data.len() && end;
            frame::put_head(
                &mut self.out,
                n,
                kind::DATA,
                if last { flag::END_STREAM } else { 0 },
                id,
            );
            self.out.extend_from_slice(&data[..n]);
            *data = data.slice(n..);
            s.send_window.consume(n as u64);
            self.send_window.consume(n as u64);
            if last {
                s.local_end = true;
            }
            if data.is_empty() {
                return true;
            }
        }
    }

    /// Ends the request body with trailers (`fields` lowercase-able, no pseudo-fields).
    pub fn send_trailers(&mut self, id: u32, fields: &[(Bytes, Bytes)]) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.local_end || s.failure.is_some() {
            return;
        }
        s.local_end = true;
        let mut block = Vec::with_capacity(64);
        {
            let mut b = self.enc.block(&mut block);
            for (name, value) in fields {
                b.field(name, value);
            }
        }
        self.put_header_block(id, &block, true);
    }

    /// Whether the request side of `id` may send: false once it ended or the stream failed.
    pub fn may_send(&self, id: u32) -> bool {
        self.streams
            .get(&id)
            .is_some_and(|s| !s.local_end && s.failure.is_none())
    }

    /// The client gave up on `id`: RST_STREAM(CANCEL) unless the stream already ended both
    /// ways, and the stream is forgotten.
    pub fn reset(&mut self, id: u32) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        if s.failure.is_none() && !(s.local_end && s.remote_end) && self.failed.is_none() {
            frame::put_rst_stream(&mut self.out, id, Reason::CANCEL);
        }
        self.forget(id);
    }

    /// The reader is done with `id` (it ended, failed or was reset). Bytes it never took are
    /// credited back to the connection.
    pub fn forget(&mut self, id: u32) {
        if let Some(s) = self.streams.remove(&id) {
            let unread: usize = s.data.iter().map(Bytes::len).sum();
            self.credit_conn(unread as u32);
            self.wake_all = true;
        }
    }

    /// Registers the waker of `id`'s reader (or sender).
    pub fn set_waker(&mut self, id: u32, w: &Waker) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.waker.as_ref().is_some_and(|o| o.will_wake(w)) {
                s.waker = Some(w.clone());
            }
        }
    }

    /// The interim (1xx but 100) heads of `id` received since the last call, in order.
    pub fn take_interim(&mut self, id: u32) -> Vec<ResponseHead> {
        self.streams
            .get_mut(&id)
            .map(|s| std::mem::take(&mut s.interim))
            .unwrap_or_default()
    }

    /// How many interim (1xx) heads `id` has received.
    pub fn interim_count(&self, id: u32) -> u32 {
        self.streams.get(&id).map_or(0, |s| s.interim_count)
    }

    /// The response head of `id`, once it came.
    pub fn take_head(&mut self, id: u32) -> Option<Result<ResponseHead, StreamFailure>> {
        let s = self.streams.get_mut(&id)?;
        if let Some(h) = s.head.take() {
            return Some(Ok(h));
        }
        if let Some(f) = &s.failure {
            return Some(Err(f.clone()));
        }
        None
    }

    /// The next piece of `id`'s response body. Data taken is credited back to the backend.
    pub fn take_data(&mut self, id: u32) -> Received {
        let Some(s) = self.streams.get_mut(&id) else {
            return Received::Failed(StreamFailure {
                refused: false,
                connection_lost: false,
                reason: "stream gone".into(),
            });
        };
        if let Some(d) = s.data.pop_front() {
            let n = d.len() as u32;
            s.recv_unacked += n;
            // Credit once half the window is used, so the backend is never stopped while
            // the client keeps reading.
            if !s.remote_end && s.recv_unacked >= self.cfg.stream_window / 2 {
                let inc = std::mem::take(&mut s.recv_unacked);
                s.recv_window.credit(inc);
                frame::put_window_update(&mut self.out, id, inc);
            }
            self.credit_conn(n);
            return Received::Data(d);
        }
        if let Some(f) = &s.failure {
            return Received::Failed(f.clone());
        }
        if !s.remote_end {
            return Received::Pending;
        }
        match s.trailers.take() {
            Some(t) => Received::Trailers(t),
            None => Received::End,
        }
    }

    /// Whether every event of `id` has been taken and the response ended.
    pub fn is_done(&self, id: u32) -> bool {
        self.streams
            .get(&id)
            .is_none_or(|s| s.remote_end && s.data.is_empty() && s.trailers.is_none())
    }

    fn credit_conn(&mut self, n: u32) {
        if self.failed.is_some() {
            return;
        }
        self.recv_unacked = self.recv_unacked.saturating_add(n);
        if self.recv_unacked >= self.conn_window / 2 {
            let inc = std::mem::take(&mut self.recv_unacked);
            self.recv_window.credit(inc);
            frame::put_window_update(&mut self.out, 0, inc);
        }
    }

    /// Consumes the complete frames at the front of `input`; stream readers are woken as their
    /// streams change. A connection error fails every stream and queues a GOAWAY.
    pub fn receive(&mut self, input: &mut BytesMut) {
        while self.failed.is_none() && input.len() >= frame::HEADER_LEN {
            let mut hb = [0u8; frame::HEADER_LEN];
            hb.copy_from_slice(&input[..frame::HEADER_LEN]);
            let head = Head::parse(&hb);
            if head.len > frame::DEFAULT_MAX_FRAME_SIZE {
                self.fail(Reason::FRAME_SIZE_ERROR, "frame larger than our maximum");
                break;
            }
            let total = frame::HEADER_LEN + head.len as usize;
            if input.len() < total {
                break;
            }
            let bytes = input.split_to(total).freeze();
            let payload = bytes.slice(frame::HEADER_LEN..);
            if self.out.len() > OUTPUT_LIMIT {
                self.fail(
                    Reason::ENHANCE_YOUR_CALM,
                    "the backend does not read its answers",
                );
                break;
            }
            match frame::decode(head, &payload, frame::DEFAULT_MAX_FRAME_SIZE) {
                Ok(f) => self.on_frame(f, &payload),
                Err(FrameError::Connection(r)) => self.fail(r, "malformed frame"),
                Err(FrameError::Stream(id, r)) => self.stream_error(id, r, "malformed frame"),
            }
        }
        self.wake();
    }

    /// Fails every stream (the socket broke, or the backend closed it).
    pub fn close(&mut self, why: &str) {
        if self.failed.is_none() {
            self.failed = Some(why.to_owned());
            for s in self.streams.values_mut() {
                if s.remote_end || s.failure.is_some() {
                    continue;
                }
                // All the body its Content-Length announced came, only END_STREAM is
                // missing: a backend that closed after its answer (often without GOAWAY or
                // TLS close_notify): the answer is whole.
                if s.head_seen && s.content_length == Some(s.received) {
                    s.remote_end = true;
                } else {
                    s.failure = Some(StreamFailure {
                        refused: false,
                        connection_lost: s.head.is_none() && !s.head_seen,
                        reason: why.to_owned(),
                    });
                }
            }
        }
        self.wake_all = true;
        self.wake();
    }

    /// Ends the connection politely (idle for its keep-alive time): GOAWAY, no new stream.
    pub fn shut_down(&mut self) {
        if self.failed.is_none() {
            frame::put_goaway(&mut self.out, 0, Reason::NO_ERROR);
            self.failed = Some("closed after its keep-alive time".into());
        }
    }

    fn wake(&mut self) {
        let all = std::mem::take(&mut self.wake_all);
        for s in self.streams.values_mut() {
            let changed = all
                || s.head.is_some()
                || !s.interim.is_empty()
                || !s.data.is_empty()
                || s.remote_end
                || s.failure.is_some();
            if changed {
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
            }
        }
    }

    fn fail(&mut self, reason: Reason, why: &str) {
        if self.failed.is_some() {
            return;
        }
        frame::put_goaway(&mut self.out, 0, reason);
        self.close(&format!("HTTP/2 connection error {}: {why}", reason.name()));
    }

    /// A stream error: RST_STREAM to the backend, and the reader learns why.
    fn stream_error(&mut self, id: u32, reason: Reason, why: &str) {
        frame::put_rst_stream(&mut self.out, id, reason);
        if let Some(s) = self.streams.get_mut(&id) {
            s.failure = Some(StreamFailure {
                refused: false,
                connection_lost: false,
                reason: format!("{why} (stream error {})", reason.name()),
            });
            s.local_end = true;
        }
    }

    fn on_frame(&mut self, f: Frame<'_>, payload: &Bytes) {
        if let Some((sid, _, _)) = &self.continuation {
            if !matches!(f, Frame::Continuation { stream, .. } if stream == *sid) {
                return self.fail(Reason::PROTOCOL_ERROR, "expected CONTINUATION");
            }
        }
        match f {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream, end_stream, payload.slice_ref(data), flow_len),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                if end_headers {
                    self.on_header_block(stream, block, end_stream);
                } else {
                    self.continuation = Some((stream, block.to_vec(), end_stream));
                }
            }
            Frame::Continuation {
                stream: _,
                end_headers,
                block,
            } => {
                let Some((sid, mut acc, end)) = self.continuation.take() else {
                    return self.fail(Reason::PROTOCOL_ERROR, "unexpected CONTINUATION");
                };
                acc.extend_from_slice(block);
                if acc.len() > self.cfg.max_header_list_size as usize * 2 {
                    return self.fail(Reason::ENHANCE_YOUR_CALM, "header block too large");
                }
                if end_headers {
                    self.on_header_block(sid, &acc, end);
                } else {
                    self.continuation = Some((sid, acc, end));
                }
            }
            Frame::RstStream { stream, reason } => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.failure = Some(StreamFailure {
                        refused: reason == Reason::REFUSED_STREAM,
                        connection_lost: false,
                        reason: format!("the backend reset the stream ({})", reason.name()),
                    });
                    s.local_end = true;
                }
            }
            Frame::Settings { ack: true, .. } => {}
            Frame::Settings {
                ack: false,
                settings,
            } => {
                for (id, value) in settings.iter() {
                    if self.apply_setting(id, value).is_err() {
                        return self.fail(Reason::FLOW_CONTROL_ERROR, "window above 2^31-1");
                    }
                }
                frame::put_settings_ack(&mut self.out);
                self.wake_all = true;
            }
            Frame::Ping { ack: false, data } => frame::put_ping(&mut self.out, true, &data),
            Frame::Ping { ack: true, .. } => {}
            Frame::GoAway {
                last_stream,
                reason,
            } => {
                self.goaway = Some(self.goaway.map_or(last_stream, |l| l.min(last_stream)));
                for (id, s) in self.streams.iter_mut() {
                    if *id > last_stream && s.failure.is_none() {
                        s.failure = Some(StreamFailure {
                            refused: true,
                            connection_lost: false,
                            reason: format!(
                                "the backend closed the connection (GOAWAY {})",
                                reason.name()
                            ),
                        });
                    }
                }
                self.wake_all = true;
            }
            Frame::WindowUpdate {
                stream: 0,
                increment,
            } => {
                if self.send_window.grow(increment).is_err() {
                    return self.fail(Reason::FLOW_CONTROL_ERROR, "window above 2^31-1");
                }
                self.wake_all = true;
            }
            Frame::WindowUpdate { stream, increment } => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    if s.send_window.grow(increment).is_err() {
                        return self.stream_error(
                            stream,
                            Reason::FLOW_CONTROL_ERROR,
                            "window above 2^31-1",
                        );
                    }
                    if let Some(w) = s.waker.take() {
                        w.wake();
                    }
                }
            }
            Frame::Priority { .. } | Frame::PriorityUpdate { .. } | Frame::Unknown { .. } => {}
        }
    }

    /// Applies one of the backend's settings; an error when a window change takes a
    /// stream's window above 2^31-1 (RFC 9113 section 6.9.2).
    fn apply_setting(&mut self, id: u16, value: u32) -> Result<(), Overflow> {
        match id {
            setting::HEADER_TABLE_SIZE => self.enc.set_peer_max_table_size(value as usize),
            setting::MAX_CONCURRENT_STREAMS => self.peer_max_concurrent = value,
            setting::INITIAL_WINDOW_SIZE => {
                let delta = i64::from(value) - i64::from(self.peer_initial_window);
                self.peer_initial_window = value;
                for s in self.streams.values_mut() {
                    s.send_window.adjust(delta)?;
                }
            }
            setting::MAX_FRAME_SIZE => self.peer_max_frame = value,
            _ => {}
        }
        Ok(())
    }

    fn on_data(&mut self, id: u32, end_stream: bool, data: Bytes, flow_len: u32) {
        // The connection window counts every DATA frame, whatever its stream.
        if self.recv_window.receive(flow_len).is_err() {
            return self.fail(Reason::FLOW_CONTROL_ERROR, "more data than the window");
        }
        let Some(s) = self.streams.get_mut(&id) else {
            if id >= self.next_id {
                return self.fail(Reason::PROTOCOL_ERROR, "DATA on an idle stream");
            }
            // A stream we reset: its data is dropped and credited back at once.
            return self.credit_conn(flow_len);
        };
        if !s.head_seen || s.remote_end {
            return self.stream_error(id, Reason::PROTOCOL_ERROR, "DATA before HEADERS");
        }
        if s.recv_window.receive(flow_len).is_err() {
            return self.fail(Reason::FLOW_CONTROL_ERROR, "more data than the window");
        }
        s.received += data.len() as u64;
        // Padding is credited back at once: the reader never sees it.
        let padding = flow_len - data.len() as u32;
        if !data.is_empty() && s.failure.is_none() {
            s.data.push_back(data);
        }
        if end_stream {
            s.remote_end = true;
            if s.content_length.is_some_and(|n| n != s.received) {
                self.stream_error(
                    id,
                    Reason::PROTOCOL_ERROR,
                    "body length differs from content-length",
                );
            }
        }
        if padding > 0 {
            self.credit_conn(padding);
        }
    }

    fn on_header_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let mut buf = BytesMut::new();
        let mut fields = Vec::new();
        let decoded = self.dec.decode(block, &mut buf, |f| fields.push(f));
        if let Err(e) = decoded {
            if e != super::hpack::DecodeError::HeaderListTooLarge {
                return self.fail(Reason::COMPRESSION_ERROR, "undecodable header block");
            }
            return self.stream_error(id, Reason::CANCEL, "response header list too large");
        }
        let buf = buf.freeze();
        let Some(s) = self.streams.get_mut(&id) else {
            if id >= self.next_id {
                self.fail(Reason::PROTOCOL_ERROR, "HEADERS on an idle stream");
            }
            return;
        };
        if s.remote_end {
            return self.stream_error(id, Reason::STREAM_CLOSED, "HEADERS after the end");
        }
        let mut status = None;
        let mut headers = Vec::with_capacity(fields.len());
        let mut content_length = None;
        let mut malformed = None;
        let mut regular_seen = false;
        for f in &fields {
            let name = buf.slice(f.name.clone());
            let value = buf.slice(f.value.clone());
            if let Some(pseudo) = name.strip_prefix(b":") {
                if pseudo == b"status" && status.is_none() && !regular_seen && !s.head_seen {
                    status = std::str::from_utf8(&value)
                        .ok()
                        .filter(|v| v.len() == 3)
                        .and_then(|v| v.parse::<u16>().ok())
                        .filter(|c| (100..600).contains(c));
                    if status.is_none() {
                        malformed = Some("bad :status");
                    }
                } else {
                    malformed = Some("unexpected pseudo-header");
                }
                continue;
            }
            regular_seen = true;
            if !valid_field(&name, &value) || is_connection_specific(&name) {
                malformed = Some("invalid header field");
                continue;
            }
            if &name[..] == b"content-length" {
                let n = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok());
                if n.is_none() || (content_length.is_some() && content_length != n) {
                    malformed = Some("bad content-length");
                }
                content_length = n;
            }
            headers.push((name, value));
        }
        if let Some(why) = malformed {
            return self.stream_error(id, Reason::PROTOCOL_ERROR, why);
        }
        if s.head_seen {
            // Trailers: they must end the stream.
            if !end_stream {
                return self.stream_error(
                    id,
                    Reason::PROTOCOL_ERROR,
                    "trailers without END_STREAM",
                );
            }
            s.trailers = Some(headers);
            s.remote_end = true;
            return;
        }
        let Some(status) = status else {
            return self.stream_error(id, Reason::PROTOCOL_ERROR, "no :status");
        };
        if (100..200).contains(&status) {
            if end_stream || status == 101 {
                return self.stream_error(id, Reason::PROTOCOL_ERROR, "bad 1xx response");
            }
            // Kept for the reader, who passes them on and counts them against its own
            // limit; this bound keeps a flood between two of its polls from piling up.
            s.interim_count += 1;
            if s.interim_count > MAX_INTERIM {
                return self.stream_error(id, Reason::PROTOCOL_ERROR, "too many 1xx responses");
            }
            if status != 100 {
                s.interim.push(ResponseHead {
                    status,
                    headers,
                    content_length,
                    end_stream: false,
                });
            }
            return;
        }
        s.head_seen = true;
        s.content_length = content_length;
        s.remote_end = end_stream;
        s.head = Some(ResponseHead {
            status,
            headers,
            content_length,
            end_stream,
        });
    }

    /// HEADERS then CONTINUATION frames for `block`, cut to the backend's frame size.
    fn put_header_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let max = self.peer_max_frame as usize;
        let mut chunks = block.chunks(max.max(1)).peekable();
        let mut first = true;
        if block.is_empty() {
            let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
            frame::put_head(&mut self.out, 0, kind::HEADERS, flags, id);
            return;
        }
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            let mut flags = if last { flag::END_HEADERS } else { 0 };
            let kind = if first {
                if end_stream {
                    flags |= flag::END_STREAM;
                }
                kind::HEADERS
            } else {
                kind::CONTINUATION
            };
            first = false;
            frame::put_head(&mut self.out, c.len(), kind, flags, id);
            self.out.extend_from_slice(c);
        }
    }
}

#[cfg(test)]
mod tests;
