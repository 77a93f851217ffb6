//! HTTP/3 over one QUIC connection: our control and QPACK streams, the peer's streams fed
//! into the sans-IO [`Session`], requests routed to the same handlers as HTTP/1 and HTTP/2
//! (no task per stream: the endpoint driver calls [`H3Conn::drive`] when the connection got
//! packets, a timer or a wake-up), responses written only as quinn's send streams accept
//! them. See `src/server/quic/LIFECYCLE.md`.
//!
//! Flow control: request body bytes are read from quinn's receive stream only while the
//! handler's pipe holds less than [`PIPE_HIGH_WATER`], so MAX_STREAM_DATA credit follows what
//! the handler consumes. Response bodies are pulled (file reads, `BodyStream` polls) only when
//! the stream's last frame was accepted by quinn, whose send buffer is bounded by the peer's
//! flow control and our send window.

mod frame_pool;
mod slab;
mod stream;
mod wake;

pub(crate) use wake::Wakes;

use crate::proto::h3::{self, qpack, Error, ErrorCode, RequestEvent, Session};
use crate::server::context::WorkerCtx;
use bytes::{Bytes, BytesMut};
use quinn_proto::{Connection, ConnectionError, Dir, StreamEvent, StreamId, VarInt};
use rustc_hash::FxHashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use stream::{ReqStream, Step};

/// Request body bytes a handler's pipe may hold before we stop reading the stream.
const PIPE_HIGH_WATER: usize = 64 * 1024;
/// Bytes read from one request stream per call, so one stream cannot hog a turn.
const READ_BUDGET: usize = 256 * 1024;

/// The HTTP/3 state of one QUIC connection.
pub(crate) struct H3Conn<'a> {
    ctx: &'a WorkerCtx,
    peer: SocketAddr,
    local: SocketAddr,
    /// This connection's index in the endpoint driver, for wake-ups.
    index: usize,
    wakes: Arc<Wakes>,
    session: Session,
    /// Our control, QPACK encoder and QPACK decoder streams, with bytes quinn has not
    /// accepted yet.
    uni: [Option<(StreamId, Vec<Bytes>)>; 3],
    /// Request streams with work left, by stream id. A peer cannot choose ids freely (they
    /// come in order, within the stream limits we grant), so a fast hash will do.
    streams: FxHashMap<StreamId, ReqStream<'a>>,
    /// The peer's unidirectional streams still open.
    peer_uni: Vec<StreamId>,
    /// Streams quinn said are readable since the last drive. (Every stream is driven on
    /// every drive, so writability needs no list.)
    readable: Vec<StreamId>,
    /// Accept new streams of this direction (quinn said some opened).
    opened: [bool; 2],
    events: Vec<RequestEvent>,
    /// The lowest request stream id not yet accepted: what GOAWAY names.
    next_request_id: u64,
    goaway: bool,
    /// The connection is gone: nothing more to do.
    lost: bool,
    /// Set on a connection error of ours, with the code and reason to close with.
    close: Option<(ErrorCode, &'static str)>,
}

impl<'a> H3Conn<'a> {
    pub fn new(
        ctx: &'a WorkerCtx,
        peer: SocketAddr,
        local: SocketAddr,
        index: usize,
        wakes: Arc<Wakes>,
    ) -> H3Conn<'a> {
        H3Conn {
            ctx,
            peer,
            local,
            index,
            wakes,
            session: Session::new(settings(ctx)),
            uni: [None, None, None],
            streams: FxHashMap::default(),
            peer_uni: Vec::new(),
            readable: Vec::new(),
            opened: [true, true],
            events: Vec::new(),
            next_request_id: 0,
            goaway: false,
            lost: false,
            close: None,
        }
    }

    /// The handshake completed: open our control and QPACK streams.
    pub fn on_connected(&mut self, conn: &mut Connection) {
        let preludes = [
            self.session.control_stream_prelude(),
            Session::encoder_stream_prelude(),
            Session::decoder_stream_prelude(),
        ];
        for (slot, prelude) in self.uni.iter_mut().zip(preludes) {
            match conn.streams().open(Dir::Uni) {
                Some(id) => *slot = Some((id, vec![prelude])),
                None => {
                    self.close = Some((
                        ErrorCode::H3_STREAM_CREATION_ERROR,
                        "the client allows too few unidirectional streams",
                    ));
                    return;
                }
            }
        }
    }

    pub fn on_lost(&mut self, reason: ConnectionError) {
        if !matches!(
            reason,
            ConnectionError::ApplicationClosed(_) | ConnectionError::TimedOut
        ) && crate::log::emit_request_errors()
        {
            tracing::debug!(peer = %self.peer, "QUIC connection lost: {reason}");
        }
        self.lost = true;
        self.streams.clear();
    }

    pub fn on_stream_event(&mut self, ev: StreamEvent) {
        match ev {
            StreamEvent::Opened { dir } => self.opened[dir as usize] = true,
            StreamEvent::Readable { id } => self.readable.push(id),
            StreamEvent::Stopped { id, error_code } => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.peer_stopped(error_code);
                }
            }
            StreamEvent::Writable { .. }
            | StreamEvent::Finished { .. }
            | StreamEvent::Available { .. } => {}
        }
    }

    /// Sends GOAWAY: requests on streams not accepted yet will not be processed.
    pub fn shutdown(&mut self, conn: &mut Connection) {
        if self.goaway || self.lost {
            return;
        }
        self.goaway = true;
        if let Some((_, q)) = &mut self.uni[0] {
            q.push(Session::goaway_frame(self.next_request_id));
        }
        self.flush_uni(conn);
    }

    /// GOAWAY was sent, every request stream is done and the client acknowledged all of
    /// every response (closing earlier would drop what is still in flight): only our own
    /// unidirectional streams may still have data quinn keeps.
    pub fn is_finished(&self, conn: &mut Connection) -> bool {
        self.lost
            || (self.goaway
                && self.streams.is_empty()
                && conn.streams().send_streams() <= self.uni.iter().flatten().count())
    }

    /// Does everything that can be done now: accepts and reads streams, answers requests,
    /// polls pending answers and bodies that were woken, writes what quinn accepts.
    /// `encoder`: the endpoint's QPACK encoder, shared by its connections.
    pub fn drive(&mut self, conn: &mut Connection, encoder: &mut qpack::Encoder, now: Instant) {
        if self.lost {
            return;
        }
        self.accept_streams(conn);
        // Reading a QPACK encoder stream may unblock request streams: they join the list.
        let mut readable = std::mem::take(&mut self.readable);
        let mut k = 0;
        while k < readable.len() && self.close.is_none() {
            let id = readable[k];
            k += 1;
            if self.peer_uni.contains(&id) {
                self.read_uni(conn, id);
            } else {
                self.read_request(conn, encoder, id, now);
            }
            readable.append(&mut self.readable);
        }
        readable.clear();
        self.readable = readable;
        self.flush_decoder_stream();
        self.flush_uni(conn);
        // Poll and write every stream that was woken, got writable, or has bytes to flush;
        // read more of those whose handler made room in its pipe.
        let mut busy = false;
        self.streams.retain(|id, s| {
            let step = s.drive(conn, &mut self.session, encoder, now);
            busy |= step == Step::Busy;
            if s.wants_read() {
                self.readable.push(*id);
            }
            step != Step::Done
        });
        if !self.readable.is_empty() {
            // Pipes drained: read what quinn buffered for them, now; what that answers is
            // written on the next drive.
            let again = std::mem::take(&mut self.readable);
            for id in again {
                self.read_request(conn, encoder, id, now);
            }
            busy = true;
        }
        // Budgets ran out with work left: come back next turn, after the others.
        if busy || self.streams.values().any(|s| s.wants_read()) {
            self.wakes.wake(self.index);
        }
        if let Some((code, why)) = self.close.take() {
            if crate::log::emit_request_errors() {
                tracing::info!(peer = %self.peer, "closing HTTP/3 connection with {:#x}: {why}", code.0);
            }
            conn.close(now, varint(code), Bytes::from_static(why.as_bytes()));
            self.lost = true;
            self.streams.clear();
        }
    }

    /// Accepts the streams the peer opened.
    fn accept_streams(&mut self, conn: &mut Connection) {
        if std::mem::take(&mut self.opened[Dir::Uni as usize]) {
            while let Some(id) = conn.streams().accept(Dir::Uni) {
                self.peer_uni.push(id);
                self.readable.push(id);
            }
        }
        if std::mem::take(&mut self.opened[Dir::Bi as usize]) {
            while let Some(id) = conn.streams().accept(Dir::Bi) {
                if self.goaway {
                    // After GOAWAY: not processed, the client may retry it elsewhere.
                    let code = varint(ErrorCode::H3_REQUEST_REJECTED);
                    let _ = conn.recv_stream(id).stop(code);
                    let _ = conn.send_stream(id).reset(code);
                    continue;
                }
                self.next_request_id = u64::from(VarInt::from(id)) + 4;
                let s =
                    ReqStream::new(id, self.ctx, self.peer, self.local, self.index, &self.wakes);
                self.streams.insert(id, s);
                self.readable.push(id);
            }
        }
    }

    /// Reads a peer unidirectional stream (control, QPACK) completely.
    fn read_uni(&mut self, conn: &mut Connection, id: StreamId) {
        let mut stream = conn.recv_stream(id);
        let mut chunks = match stream.read(true) {
            Ok(c) => c,
            Err(_) => return,
        };
        let mut fin = false;
        let mut gone = false;
        let mut data = BytesMut::new();
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(c)) => data.extend_from_slice(&c.bytes),
                Ok(None) => {
                    fin = true;
                    break;
                }
                Err(quinn_proto::ReadError::Blocked) => break,
                Err(quinn_proto::ReadError::Reset(_)) => {
                    gone = true;
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        if gone {
            self.peer_uni.retain(|s| *s != id);
            if let Err(e) = self.session.stream_gone(id.into()) {
                self.on_error(e);
            }
            return;
        }
        if data.is_empty() && !fin {
            return;
        }
        match self.session.on_uni_stream(id.into(), &data, fin) {
            Ok(outcome) => {
                if let Some(code) = outcome.stop_sending {
                    let _ = conn.recv_stream(id).stop(varint(code));
                    self.peer_uni.retain(|s| *s != id);
                }
                for sid in outcome.unblocked {
                    if let Some(sid) = self.stream_id(sid) {
                        self.readable.push(sid);
                    }
                }
                if fin {
                    self.peer_uni.retain(|s| *s != id);
                }
            }
            Err(e) => self.on_error(e),
        }
    }

    /// Reads a request stream as far as its pipe has room and hands the events on.
    fn read_request(
        &mut self,
        conn: &mut Connection,
        encoder: &mut qpack::Encoder,
        id: StreamId,
        now: Instant,
    ) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let r = s.read(conn, &mut self.session, encoder, &mut self.events, now);
        self.events.clear();
        if let Err(e) = r {
            self.on_error(e);
        }
    }

    fn on_error(&mut self, e: Error) {
        match e {
            Error::Connection(code, why) => {
                if self.close.is_none() {
                    self.close = Some((code, why));
                }
            }
            // Handled by the stream itself.
            Error::Stream(..) => {}
        }
    }

    /// A request stream id from the session's numbering.
    fn stream_id(&self, raw: u64) -> Option<StreamId> {
        self.streams
            .keys()
            .find(|id| u64::from(VarInt::from(**id)) == raw)
            .copied()
    }

    fn flush_decoder_stream(&mut self) {
        if let Some(b) = self.session.take_decoder_stream_bytes() {
            if let Some((_, q)) = &mut self.uni[2] {
                q.push(b);
            }
        }
    }

    /// Writes what our unidirectional streams have queued, as far as quinn accepts.
    fn flush_uni(&mut self, conn: &mut Connection) {
        for (id, q) in self.uni.iter_mut().flatten() {
            if q.is_empty() {
                continue;
            }
            let mut send = conn.send_stream(*id);
            match send.write_chunks(q) {
                Ok(_) => q.retain(|b| !b.is_empty()),
                Err(quinn_proto::WriteError::Blocked) => {}
                Err(_) => q.clear(),
            }
        }
    }
}

/// The HTTP/3 settings of this worker's configuration.
fn settings(ctx: &WorkerCtx) -> h3::Settings {
    let routing = ctx.routing();
    let c = &routing.config;
    h3::Settings {
        max_field_section_size: c.limits.request_field_section as u64,
        qpack_max_table_capacity: u64::from(c.http3.qpack_max_table_capacity),
        qpack_blocked_streams: u64::from(c.http3.qpack_blocked_streams),
        max_header_fields: c.limits.request_headers,
        enable_connect_protocol: false,
    }
}

fn varint(code: ErrorCode) -> VarInt {
    VarInt::from_u64(code.0).unwrap_or(VarInt::from_u32(0x102))
}
