//! One HTTP/3 connection, server side: the peer's unidirectional streams, request streams,
//! and the encoding of what we send.

use rustc_hash::FxHashMap;
use std::net::SocketAddr;
use std::ops::Range;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::frame::{self, setting, stream_type};
use super::qpack::{self, Decoded, HeaderField};
use super::{varint, Error, ErrorCode, Settings};
use crate::http::body::Trailers;
use crate::http::{Method, Request};
use crate::proto::h2::hpack::integer;
use crate::proto::request_head;

/// Payload cap for the frames we buffer whole on the control stream (SETTINGS, GOAWAY,
/// MAX_PUSH_ID, CANCEL_PUSH); one above it is H3_EXCESSIVE_LOAD. Unknown frames are skipped
/// as they arrive, whatever their size.
pub const MAX_CONTROL_FRAME: u64 = 16 * 1024;

/// Starting size of the decoded-header buffer (as `HBUF_CHUNK` in HTTP/2).
const HBUF_CHUNK: usize = 4 * 1024;

/// The peer's SETTINGS (RFC 9114 section 7.2.4), once its control stream delivered them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerSettings {
    /// SETTINGS_MAX_FIELD_SECTION_SIZE; `None` = unlimited.
    pub max_field_section_size: Option<u64>,
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY (we never use their table: informational).
    pub qpack_max_table_capacity: u64,
    pub qpack_blocked_streams: u64,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 9220).
    pub enable_connect_protocol: bool,
    /// SETTINGS_H3_DATAGRAM (RFC 9297).
    pub h3_datagram: bool,
}

/// What a call to [`Session::on_uni_stream`] asks of the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UniOutcome {
    /// Request streams whose header section was blocked on the QPACK encoder stream and can
    /// now be decoded: call [`Session::on_request_stream`] again for each.
    pub unblocked: Vec<u64>,
    /// Stop reading this stream: send STOP_SENDING with this code and pass no more of its
    /// bytes (a stream of an unknown or reserved type, RFC 9114 section 6.2). The session
    /// keeps nothing for it.
    pub stop_sending: Option<ErrorCode>,
}

/// What a request stream delivered, in order.
#[derive(Debug)]
pub enum RequestEvent {
    /// The request head, validated (RFC 9114 section 4.3).
    Head(Head),
    /// A piece of the request body (a DATA payload or part of one), split off the caller's
    /// buffer without copying.
    Data(Bytes),
    /// The trailer section.
    Trailers(Trailers),
    /// The request is complete (FIN after a valid message); the session forgot the stream.
    End,
    /// The HEADERS frame waits on the QPACK encoder stream; it stays in the caller's buffer
    /// until [`UniOutcome::unblocked`] names this stream.
    Blocked,
    /// The request head is over `max_field_section_size` or `max_header_fields`: answer 431
    /// and stop reading the stream (STOP_SENDING with H3_NO_ERROR, RFC 9114 section 4.1.1).
    /// The session discards anything more the stream brings.
    HeadTooLarge,
}

/// A validated request head: ranges into `bytes`.
#[derive(Debug)]
pub struct Head {
    pub method: Method,
    /// `:path` (empty for CONNECT).
    pub target: Range<usize>,
    pub authority: Option<Range<usize>>,
    /// `:protocol` of an extended CONNECT (RFC 9220); only with `enable_connect_protocol`.
    pub protocol: Option<Range<usize>>,
    /// Regular fields, in order.
    pub fields: Vec<(Range<usize>, Range<usize>)>,
    /// The content-length field, if any; the session checks the DATA against it.
    pub content_length: Option<u64>,
    /// `expect: 100-continue` was sent.
    pub expect_continue: bool,
    pub bytes: Bytes,
}

impl Head {
    /// The request as handlers see it (HTTP/3 always runs over TLS).
    pub fn into_request(self, peer: SocketAddr, local: SocketAddr) -> Request {
        crate::http::request::RequestBuilder {
            method: self.method,
            version: crate::http::Version::Http3,
            secure: true,
            peer,
            local,
            target: self.target,
            authority: self.authority,
            fields: self.fields,
        }
        .build(self.bytes)
    }
}

/// The HTTP/3 state of one QUIC connection, server side.
#[derive(Debug)]
pub struct Session {
    local: Settings,
    decoder: qpack::Decoder,
    peer_settings: Option<PeerSettings>,
    peer_goaway: Option<u64>,
    peer_max_push_id: Option<u64>,
    /// The peer's control stream, once its type byte arrived.
    control: Option<Control>,
    /// The peer's QPACK encoder stream.
    encoder_stream: Option<u64>,
    /// The peer's QPACK decoder stream, and the start of an instruction not complete yet.
    decoder_stream: Option<(u64, Vec<u8>)>,
    /// Peer unidirectional streams whose type is not known yet, or that we ignore. (Stream
    /// ids come in order, within the stream limits we grant: a fast hash will do.)
    opening: FxHashMap<u64, Opening>,
    requests: FxHashMap<u64, RequestStream>,
    /// Decoded names and values; a request head takes its bytes with `split`.
    hbuf: BytesMut,
    fields: Vec<HeaderField>,
}

/// The peer's control stream.
#[derive(Debug)]
struct Control {
    id: u64,
    /// The start of a frame we need whole and have not got whole yet.
    pending: Vec<u8>,
    /// Payload bytes of an unknown frame still to skip.
    skip: u64,
}

/// A peer unidirectional stream before its type varint is complete, or one we ignore.
#[derive(Debug, Default)]
struct Opening {
    head: [u8; 8],
    len: u8,
    ignored: bool,
}

/// One request stream's progress.
#[derive(Debug, Default)]
struct RequestStream {
    phase: Phase,
    /// Payload bytes of the current DATA frame still to come.
    data_left: u64,
    /// Payload bytes of an unknown frame still to skip.
    skip_left: u64,
    content_length: Option<u64>,
    received: u64,
    /// The HEADERS frame at the start of the buffer waits on the encoder stream.
    blocked: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the request's HEADERS.
    #[default]
    Head,
    /// Head delivered: DATA, or trailing HEADERS.
    Body,
    /// Trailers delivered: only the end (or unknown frames).
    Trailed,
    /// Answered 431 without reading on: everything more is dropped.
    Discard,
}

fn conn(code: ErrorCode, why: &'static str) -> Error {
    Error::Connection(code, why)
}

/// A frame where RFC 9114 does not allow it: a connection error (section 7.1).
fn unexpected(why: &'static str) -> Error {
    conn(ErrorCode::H3_FRAME_UNEXPECTED, why)
}

impl Session {
    pub fn new(local: Settings) -> Session {
        let decoder = qpack::Decoder::new(
            local.qpack_max_table_capacity,
            local.qpack_blocked_streams,
            local.max_field_section_size,
        );
        Session {
            local,
            decoder,
            peer_settings: None,
            peer_goaway: None,
            peer_max_push_id: None,
            control: None,
            encoder_stream: None,
            decoder_stream: None,
            opening: FxHashMap::default(),
            requests: FxHashMap::default(),
            hbuf: BytesMut::new(),
            fields: Vec::new(),
        }
    }

    /// The start of our control stream: its type (0x00) and our SETTINGS frame.
    pub fn control_stream_prelude(&self) -> Bytes {
        let mut pairs = vec![
            (
                setting::QPACK_MAX_TABLE_CAPACITY,
                self.local.qpack_max_table_capacity,
            ),
            (
                setting::MAX_FIELD_SECTION_SIZE,
                self.local.max_field_section_size,
            ),
            (
                setting::QPACK_BLOCKED_STREAMS,
                self.local.qpack_blocked_streams,
            ),
        ];
        if self.local.enable_connect_protocol {
            pairs.push((setting::ENABLE_CONNECT_PROTOCOL, 1));
        }
        let mut out = BytesMut::with_capacity(32);
        varint::encode(stream_type::CONTROL, &mut out);
        frame::put_settings(&pairs, &mut out);
        out.freeze()
    }

    /// The start of our QPACK encoder stream (type 0x02). We never write more on it.
    pub fn encoder_stream_prelude() -> Bytes {
        Bytes::from_static(&[stream_type::QPACK_ENCODER as u8])
    }

    /// The start of our QPACK decoder stream (type 0x03); then
    /// [`Session::take_decoder_stream_bytes`].
    pub fn decoder_stream_prelude() -> Bytes {
        Bytes::from_static(&[stream_type::QPACK_DECODER as u8])
    }

    /// Bytes of a peer-initiated unidirectional stream (control, QPACK encoder or decoder; a
    /// push stream from a client is H3_STREAM_CREATION_ERROR; other types are ignored, see
    /// [`UniOutcome::stop_sending`]). `fin`: the stream ended with these bytes (for a
    /// critical stream, H3_CLOSED_CRITICAL_STREAM).
    pub fn on_uni_stream(
        &mut self,
        stream_id: u64,
        data: &[u8],
        fin: bool,
    ) -> Result<UniOutcome, Error> {
        let mut outcome = UniOutcome::default();
        if self.control.as_ref().is_some_and(|c| c.id == stream_id) {
            self.on_control(data)?;
        } else if self.encoder_stream == Some(stream_id) {
            self.decoder
                .on_encoder_stream(data, &mut outcome.unblocked)?;
        } else if self
            .decoder_stream
            .as_ref()
            .is_some_and(|d| d.0 == stream_id)
        {
            self.on_peer_decoder_stream(data)?;
        } else {
            let Some(rest) = self.open_uni(stream_id, data, fin, &mut outcome)? else {
                return Ok(outcome);
            };
            return self.on_uni_stream(stream_id, rest, fin).map(|mut more| {
                more.unblocked.append(&mut outcome.unblocked);
                more
            });
        }
        if fin {
            return Err(conn(
                ErrorCode::H3_CLOSED_CRITICAL_STREAM,
                "critical stream closed",
            ));
        }
        Ok(outcome)
    }

    /// Reads a new stream's type. `Some(rest)` once it is a critical stream now registered
    /// (`rest` are its first bytes after the type); `None` while the type is incomplete and
    /// for ignored streams.
    fn open_uni<'d>(
        &mut self,
        stream_id: u64,
        data: &'d [u8],
        fin: bool,
        outcome: &mut UniOutcome,
    ) -> Result<Option<&'d [u8]>, Error> {
        let o = self.opening.entry(stream_id).or_default();
        if o.ignored {
            if fin {
                self.opening.remove(&stream_id);
            }
            return Ok(None);
        }
        // The type varint may arrive a byte at a time: gather at most its 8 bytes.
        let had = o.len as usize;
        let take = data.len().min(8 - had);
        o.head[had..had + take].copy_from_slice(&data[..take]);
        let Some((ty, n)) = varint::decode(&o.head[..had + take]) else {
            o.len = (had + take) as u8;
            if fin {
                // Ended before saying what it is: nothing to do with it.
                self.opening.remove(&stream_id);
            }
            return Ok(None);
        };
        let rest = &data[n - had..];
        self.opening.remove(&stream_id);
        match ty {
            stream_type::CONTROL => {
                if self.control.is_some() {
                    return Err(conn(
                        ErrorCode::H3_STREAM_CREATION_ERROR,
                        "second control stream",
                    ));
                }
                self.control = Some(Control {
                    id: stream_id,
                    pending: Vec::new(),
                    skip: 0,
                });
            }
            stream_type::QPACK_ENCODER => {
                if self.encoder_stream.is_some() {
                    return Err(conn(
                        ErrorCode::H3_STREAM_CREATION_ERROR,
                        "second QPACK encoder stream",
                    ));
                }
                self.encoder_stream = Some(stream_id);
            }
            stream_type::QPACK_DECODER => {
                if self.decoder_stream.is_some() {
                    return Err(conn(
                        ErrorCode::H3_STREAM_CREATION_ERROR,
                        "second QPACK decoder stream",
                    ));
                }
                self.decoder_stream = Some((stream_id, Vec::new()));
            }
            stream_type::PUSH => {
                return Err(conn(
                    ErrorCode::H3_STREAM_CREATION_ERROR,
                    "push stream from a client",
                ));
            }
            _ => {
                // Unknown or reserved (0x1f * N + 0x21) type: stop reading (section 6.2).
                outcome.stop_sending = Some(ErrorCode::H3_STREAM_CREATION_ERROR);
                if !fin {
                    let ignored = Opening {
                        ignored: true,
                        ..Opening::default()
                    };
                    self.opening.insert(stream_id, ignored);
                }
                return Ok(None);
            }
        }
        Ok(Some(rest))
    }

    /// Control stream bytes: complete frames are applied, a partial one kept.
    fn on_control(&mut self, mut data: &[u8]) -> Result<(), Error> {
        let Some(c) = self.control.as_mut() else {
            return Ok(());
        };
        let skip = data
            .len()
            .min(usize::try_from(c.skip).unwrap_or(usize::MAX));
        c.skip -= skip as u64;
        data = &data[skip..];
        let mut pending = std::mem::take(&mut c.pending);
        if pending.is_empty() {
            let used = self.control_frames(data)?;
            pending.extend_from_slice(&data[used..]);
        } else {
            pending.extend_from_slice(data);
            let used = self.control_frames(&pending)?;
            pending.drain(..used);
        }
        if let Some(c) = self.control.as_mut() {
            c.pending = pending;
        }
        Ok(())
    }

    /// Applies the complete control frames at the start of `buf`; returns the bytes used
    /// (all of them when an unknown frame's payload is being skipped).
    fn control_frames(&mut self, buf: &[u8]) -> Result<usize, Error> {
        let mut at = 0;
        while let Some(h) = frame::parse_header(&buf[at..]) {
            if self.peer_settings.is_none() && h.ty != frame::SETTINGS {
                return Err(conn(
                    ErrorCode::H3_MISSING_SETTINGS,
                    "control stream does not start with SETTINGS",
                ));
            }
            match h.ty {
                frame::SETTINGS | frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH => {}
                frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => {
                    return Err(unexpected(
                        "DATA, HEADERS or PUSH_PROMISE on the control stream",
                    ));
                }
                ty if frame::is_http2_only(ty) => {
                    return Err(unexpected("HTTP/2 frame type on the control stream"));
                }
                _ => {
                    // Unknown or reserved: skip its payload as it comes.
                    let here = (buf.len() - at - h.size) as u64;
                    if h.len > here {
                        if let Some(c) = self.control.as_mut() {
                            c.skip = h.len - here;
                        }
                        return Ok(buf.len());
                    }
                    at += h.size + h.len as usize;
                    continue;
                }
            }
            if h.len > MAX_CONTROL_FRAME {
                return Err(conn(
                    ErrorCode::H3_EXCESSIVE_LOAD,
                    "control frame too large",
                ));
            }
            let end = at + h.size + h.len as usize;
            let Some(payload) = buf.get(at + h.size..end) else {
                break;
            };
            self.control_frame(h.ty, payload)?;
            at = end;
        }
        Ok(at)
    }

    fn control_frame(&mut self, ty: u64, payload: &[u8]) -> Result<(), Error> {
        match ty {
            frame::SETTINGS => {
                if self.peer_settings.is_some() {
                    return Err(unexpected("second SETTINGS"));
                }
                self.peer_settings = Some(parse_settings(payload)?);
            }
            frame::GOAWAY => {
                // From a client, the id is a push id; it may only go down (section 5.2).
                let id = frame::single_varint(payload)
                    .ok_or(conn(ErrorCode::H3_FRAME_ERROR, "malformed GOAWAY"))?;
                if self.peer_goaway.is_some_and(|last| id > last) {
                    return Err(conn(ErrorCode::H3_ID_ERROR, "GOAWAY id increased"));
                }
                self.peer_goaway = Some(id);
            }
            frame::MAX_PUSH_ID => {
                let id = frame::single_varint(payload)
                    .ok_or(conn(ErrorCode::H3_FRAME_ERROR, "malformed MAX_PUSH_ID"))?;
                if self.peer_max_push_id.is_some_and(|last| id < last) {
                    return Err(conn(ErrorCode::H3_ID_ERROR, "MAX_PUSH_ID decreased"));
                }
                self.peer_max_push_id = Some(id);
            }
            _ => {
                // CANCEL_PUSH: we never promised a push, so no push id is valid (7.2.3).
                frame::single_varint(payload)
                    .ok_or(conn(ErrorCode::H3_FRAME_ERROR, "malformed CANCEL_PUSH"))?;
                return Err(conn(ErrorCode::H3_ID_ERROR, "CANCEL_PUSH for no push"));
            }
        }
        Ok(())
    }

    /// The peer's decoder stream, about our encoder: we never insert into the dynamic table,
    /// so only Stream Cancellations are valid there.
    fn on_peer_decoder_stream(&mut self, data: &[u8]) -> Result<(), Error> {
        let Some((_, pending)) = self.decoder_stream.as_mut() else {
            return Ok(());
        };
        pending.extend_from_slice(data);
        let mut pos = 0;
        while let Some(&first) = pending.get(pos) {
            let mut at = pos;
            let prefix = if first & 0x80 != 0 { 7 } else { 6 };
            match integer::decode(pending, &mut at, prefix) {
                Ok(_) if first & 0xc0 == 0x40 => pos = at,
                Ok(_) if first & 0x80 != 0 => {
                    return Err(conn(
                        ErrorCode::QPACK_DECODER_STREAM_ERROR,
                        "Section Acknowledgment, but we never reference the table",
                    ));
                }
                Ok(_) => {
                    return Err(conn(
                        ErrorCode::QPACK_DECODER_STREAM_ERROR,
                        "Insert Count Increment, but we never insert",
                    ));
                }
                Err(crate::proto::h2::hpack::DecodeError::Truncated) => break,
                Err(_) => {
                    return Err(conn(
                        ErrorCode::QPACK_DECODER_STREAM_ERROR,
                        "decoder instruction overflow",
                    ));
                }
            }
        }
        pending.drain(..pos);
        Ok(())
    }

    /// Bytes of a client-initiated bidirectional (request) stream. `data` holds what the
    /// stream delivered and the session has not consumed yet (append new bytes to it);
    /// complete frames are consumed and turned into `events`. `fin`: the stream's end is
    /// in `data` (pass it again on later calls, e.g. after the stream was unblocked).
    ///
    /// After [`RequestEvent::End`], an error, or `fin` on a discarded stream, the session
    /// has forgotten the stream: do not call again for it.
    pub fn on_request_stream(
        &mut self,
        stream_id: u64,
        data: &mut BytesMut,
        fin: bool,
        events: &mut Vec<RequestEvent>,
    ) -> Result<(), Error> {
        let mut st = self.requests.remove(&stream_id).unwrap_or_default();
        match self.request_frames(stream_id, &mut st, data, events) {
            Ok(()) => {}
            Err(e) => {
                if matches!(e, Error::Stream(..)) {
                    self.decoder.cancel_stream(stream_id);
                }
                return Err(e);
            }
        }
        if !fin || st.blocked {
            self.requests.insert(stream_id, st);
            return Ok(());
        }
        if st.phase == Phase::Discard {
            return Ok(());
        }
        if !data.is_empty() || st.data_left > 0 || st.skip_left > 0 {
            return Err(conn(
                ErrorCode::H3_FRAME_ERROR,
                "request stream ends inside a frame",
            ));
        }
        if st.phase == Phase::Head {
            self.decoder.cancel_stream(stream_id);
            return Err(Error::Stream(
                ErrorCode::H3_REQUEST_INCOMPLETE,
                "request stream ended before its HEADERS",
            ));
        }
        if st.content_length.is_some_and(|cl| cl != st.received) {
            return Err(Error::Stream(
                ErrorCode::H3_MESSAGE_ERROR,
                "body shorter than its content-length",
            ));
        }
        events.push(RequestEvent::End);
        Ok(())
    }

    fn request_frames(
        &mut self,
        stream_id: u64,
        st: &mut RequestStream,
        data: &mut BytesMut,
        events: &mut Vec<RequestEvent>,
    ) -> Result<(), Error> {
        loop {
            if st.phase == Phase::Discard {
                data.clear();
                return Ok(());
            }
            if st.data_left > 0 {
                if data.is_empty() {
                    return Ok(());
                }
                let n = data
                    .len()
                    .min(usize::try_from(st.data_left).unwrap_or(usize::MAX));
                st.data_left -= n as u64;
                st.received += n as u64;
                if st.content_length.is_some_and(|cl| st.received > cl) {
                    return Err(Error::Stream(
                        ErrorCode::H3_MESSAGE_ERROR,
                        "body longer than its content-length",
                    ));
                }
                events.push(RequestEvent::Data(data.split_to(n).freeze()));
                continue;
            }
            if st.skip_left > 0 {
                let n = data
                    .len()
                    .min(usize::try_from(st.skip_left).unwrap_or(usize::MAX));
                st.skip_left -= n as u64;
                data.advance(n);
                if st.skip_left > 0 {
                    return Ok(());
                }
                continue;
            }
            let Some(h) = frame::parse_header(data) else {
                return Ok(());
            };
            match h.ty {
                frame::DATA => {
                    if st.phase != Phase::Body {
                        return Err(unexpected("DATA outside a request body"));
                    }
                    data.advance(h.size);
                    st.data_left = h.len;
                }
                frame::HEADERS => {
                    if st.phase == Phase::Trailed {
                        return Err(unexpected("HEADERS after the trailers"));
                    }
                    if h.len > self.max_headers_frame() {
                        return Err(Error::Stream(
                            ErrorCode::H3_EXCESSIVE_LOAD,
                            "HEADERS frame too large",
                        ));
                    }
                    let end = usize::try_from(h.len)
                        .ok()
                        .and_then(|len| len.checked_add(h.size))
                        .unwrap_or(usize::MAX);
                    if data.len() < end {
                        return Ok(());
                    }
                    if !self.headers_frame(stream_id, st, &data[h.size..end], events)? {
                        return Ok(());
                    }
                    data.advance(end);
                }
                frame::CANCEL_PUSH
                | frame::SETTINGS
                | frame::GOAWAY
                | frame::MAX_PUSH_ID
                | frame::PUSH_PROMISE => {
                    return Err(unexpected("control frame on a request stream"));
                }
                ty if frame::is_http2_only(ty) => {
                    return Err(unexpected("HTTP/2 frame type on a request stream"));
                }
                _ => {
                    data.advance(h.size);
                    st.skip_left = h.len;
                }
            }
        }
    }

    /// Encoded HEADERS payloads above this are refused unread (H3_EXCESSIVE_LOAD): twice the
    /// decoded limit leaves room for any sane encoding.
    fn max_headers_frame(&self) -> u64 {
        self.local
            .max_field_section_size
            .saturating_mul(2)
            .max(1024)
    }

    /// A complete HEADERS frame: the request head or the trailers. `false` if it is blocked
    /// (it stays in the caller's buffer).
    fn headers_frame(
        &mut self,
        stream_id: u64,
        st: &mut RequestStream,
        section: &[u8],
        events: &mut Vec<RequestEvent>,
    ) -> Result<bool, Error> {
        self.fields.clear();
        // Empty: the previous request took its bytes with `split`, leaving spare capacity;
        // once earlier requests are dropped, `reserve` reclaims the whole allocation.
        self.hbuf.clear();
        let need = (section.len() * 2).max(256);
        if self.hbuf.capacity() < need {
            self.hbuf.reserve(HBUF_CHUNK.max(need));
        }
        let decoded =
            self.decoder
                .decode_section(stream_id, section, &mut self.hbuf, &mut self.fields)?;
        let too_large = match decoded {
            Decoded::Blocked => {
                if !st.blocked {
                    st.blocked = true;
                    events.push(RequestEvent::Blocked);
                }
                return Ok(false);
            }
            Decoded::TooLarge => true,
            Decoded::Done => self.fields.len() > self.local.max_header_fields,
        };
        st.blocked = false;
        if st.phase == Phase::Body {
            if too_large {
                return Err(Error::Stream(
                    ErrorCode::H3_EXCESSIVE_LOAD,
                    "trailer section too large",
                ));
            }
            if !request_head::valid_trailers(&self.hbuf, &self.fields) {
                return Err(Error::Stream(
                    ErrorCode::H3_MESSAGE_ERROR,
                    "malformed trailers",
                ));
            }
            let block = self.hbuf.split().freeze();
            let trailers = self
                .fields
                .iter()
                .map(|f| (block.slice(f.name.clone()), block.slice(f.value.clone())))
                .collect();
            events.push(RequestEvent::Trailers(trailers));
            st.phase = Phase::Trailed;
            return Ok(true);
        }
        if too_large {
            events.push(RequestEvent::HeadTooLarge);
            st.phase = Phase::Discard;
            // We stop reading: the peer's encoder must not wait for trailers we will drop.
            self.decoder.cancel_stream(stream_id);
            return Ok(true);
        }
        let head = request_head::parse(&self.hbuf, &self.fields)
            .ok()
            .filter(|h| h.protocol.is_none() || self.local.enable_connect_protocol)
            .ok_or(Error::Stream(
                ErrorCode::H3_MESSAGE_ERROR,
                "malformed request head",
            ))?;
        st.content_length = head.content_length;
        st.phase = Phase::Body;
        events.push(RequestEvent::Head(Head {
            method: head.method,
            target: head.target,
            authority: head.authority,
            protocol: head.protocol,
            fields: head.fields,
            content_length: head.content_length,
            expect_continue: head.expect_continue,
            bytes: self.hbuf.split().freeze(),
        }));
        Ok(true)
    }

    /// A stream was reset by the peer, or we stopped reading it before its end: forget it
    /// (a blocked section included) and queue a QPACK Stream Cancellation if the peer's
    /// encoder may hold references for it. A critical stream (control, QPACK) going away is
    /// H3_CLOSED_CRITICAL_STREAM.
    pub fn stream_gone(&mut self, stream_id: u64) -> Result<(), Error> {
        let critical = self.control.as_ref().is_some_and(|c| c.id == stream_id)
            || self.encoder_stream == Some(stream_id)
            || self
                .decoder_stream
                .as_ref()
                .is_some_and(|d| d.0 == stream_id);
        if critical {
            return Err(conn(
                ErrorCode::H3_CLOSED_CRITICAL_STREAM,
                "critical stream reset",
            ));
        }
        self.opening.remove(&stream_id);
        if self.requests.remove(&stream_id).is_some() {
            self.decoder.cancel_stream(stream_id);
        }
        Ok(())
    }

    /// QPACK decoder stream instructions to write on our decoder stream, if any.
    pub fn take_decoder_stream_bytes(&mut self) -> Option<Bytes> {
        self.decoder.take_output()
    }

    /// Appends a HEADERS frame with `:status` and `fields` (names lowercased;
    /// connection-specific fields dropped, as RFC 9114 section 4.2 requires), encoded by
    /// `encoder`, which the caller keeps for all its connections. A head equal to the
    /// encoder's last one is copied from its section memo.
    pub fn encode_response_head<'a, I>(
        encoder: &mut qpack::Encoder,
        status: u16,
        fields: I,
        out: &mut BytesMut,
    ) where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
        I::IntoIter: Clone,
    {
        let at = begin_headers_frame(out);
        let fields = fields.into_iter();
        if !encoder.last_section.get(status, fields.clone(), out) {
            let start = out.len();
            qpack::encoder::put_prefix(out);
            qpack::encoder::put_status(status, out);
            put_fields(encoder, fields.clone(), out);
            encoder.last_section.put(status, fields, &out[start..]);
        }
        end_headers_frame(out, at);
    }

    /// Appends a HEADERS frame carrying trailers, encoded by `encoder`.
    pub fn encode_trailers<'a, I>(encoder: &mut qpack::Encoder, fields: I, out: &mut BytesMut)
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let at = begin_headers_frame(out);
        qpack::encoder::put_prefix(out);
        put_fields(encoder, fields, out);
        end_headers_frame(out, at);
    }

    /// Appends a DATA frame header for a payload of `len` bytes (the payload follows).
    pub fn data_frame_header(len: u64, out: &mut BytesMut) {
        frame::put_header(frame::DATA, len, out);
    }

    /// A GOAWAY frame for our control stream: requests on streams with ids at or above `id`
    /// will not be processed. Ids must not increase between GOAWAYs.
    pub fn goaway_frame(id: u64) -> Bytes {
        let mut out = BytesMut::with_capacity(10);
        frame::put_goaway(id, &mut out);
        out.freeze()
    }

    pub fn peer_settings(&self) -> Option<&PeerSettings> {
        self.peer_settings.as_ref()
    }

    /// The push id of the peer's latest GOAWAY, if it sent one.
    pub fn peer_goaway(&self) -> Option<u64> {
        self.peer_goaway
    }

    /// Request streams with state here (open, not yet ended): for tests and metrics.
    pub fn open_request_streams(&self) -> usize {
        self.requests.len()
    }
}

/// Appends the field lines of the fields a response or trailers may carry.
fn put_fields<'a, I>(encoder: &mut qpack::Encoder, fields: I, out: &mut BytesMut)
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    for (name, value) in fields {
        if !name.starts_with(b":") && !request_head::is_connection_specific(name) {
            encoder.field(name, value, out);
        }
    }
}

/// Starts a HEADERS frame whose length is filled in by [`end_headers_frame`]; returns where
/// the frame starts. Two length bytes are reserved, which fits any head under 16 KiB.
fn begin_headers_frame(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_u8(frame::HEADERS as u8);
    out.put_u16(0);
    at
}

/// Writes the payload length of the frame begun at `at`, moving the payload if its length
/// takes other than two bytes.
fn end_headers_frame(out: &mut BytesMut, at: usize) {
    let start = at + 3;
    let end = out.len();
    let len = (end - start) as u64;
    let n = varint::len(len);
    if n < 2 {
        out.copy_within(start..end, at + 1 + n);
        out.truncate(end - (2 - n));
    } else if n > 2 {
        out.put_bytes(0, n - 2);
        out.copy_within(start..end, start + (n - 2));
    }
    let mut len_bytes = &mut out[at + 1..at + 1 + n];
    varint::encode(len, &mut len_bytes);
}

/// A SETTINGS payload (RFC 9114 section 7.2.4).
fn parse_settings(mut payload: &[u8]) -> Result<PeerSettings, Error> {
    let mut s = PeerSettings::default();
    let mut seen = Vec::new();
    while !payload.is_empty() {
        let (id, a) =
            varint::decode(payload).ok_or(conn(ErrorCode::H3_FRAME_ERROR, "malformed SETTINGS"))?;
        let (value, b) = varint::decode(&payload[a..])
            .ok_or(conn(ErrorCode::H3_FRAME_ERROR, "malformed SETTINGS"))?;
        payload = &payload[a + b..];
        if frame::is_http2_setting(id) {
            return Err(conn(ErrorCode::H3_SETTINGS_ERROR, "HTTP/2 setting"));
        }
        seen.push(id);
        match id {
            setting::QPACK_MAX_TABLE_CAPACITY => s.qpack_max_table_capacity = value,
            setting::MAX_FIELD_SECTION_SIZE => s.max_field_section_size = Some(value),
            setting::QPACK_BLOCKED_STREAMS => s.qpack_blocked_streams = value,
            setting::ENABLE_CONNECT_PROTOCOL | setting::H3_DATAGRAM => {
                let on = match value {
                    0 => false,
                    1 => true,
                    _ => {
                        return Err(conn(
                            ErrorCode::H3_SETTINGS_ERROR,
                            "boolean setting not 0 or 1",
                        ))
                    }
                };
                if id == setting::H3_DATAGRAM {
                    s.h3_datagram = on;
                } else {
                    s.enable_connect_protocol = on;
                }
            }
            _ => {}
        }
    }
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(conn(ErrorCode::H3_SETTINGS_ERROR, "duplicate setting"));
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
