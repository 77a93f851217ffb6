//! One HTTP/3 connection, server side: the peer's unidirectional streams, request streams,
//! and the encoding of what we send.

use std::net::SocketAddr;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::{frame, Error, ErrorCode, Settings};
use crate::http::body::Trailers;
use crate::http::{Method, Request};

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
    peer_settings: Option<PeerSettings>,
    peer_goaway: Option<u64>,
}

impl Session {
    pub fn new(local: Settings) -> Session {
        Session {
            local,
            peer_settings: None,
            peer_goaway: None,
        }
    }

    /// The start of our control stream: its type (0x00) and our SETTINGS frame.
    pub fn control_stream_prelude(&self) -> Bytes {
        let mut out = BytesMut::new();
        super::varint::encode(frame::stream_type::CONTROL, &mut out);
        let _ = &self.local;
        out.freeze()
    }

    /// The start of our QPACK encoder stream (type 0x02). We never write more on it.
    pub fn encoder_stream_prelude() -> Bytes {
        Bytes::from_static(&[0x02])
    }

    /// The start of our QPACK decoder stream (type 0x03); then
    /// [`Session::take_decoder_stream_bytes`].
    pub fn decoder_stream_prelude() -> Bytes {
        Bytes::from_static(&[0x03])
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
        let _ = (stream_id, data, fin);
        Err(Error::Connection(
            ErrorCode::H3_INTERNAL_ERROR,
            "not implemented",
        ))
    }

    /// Bytes of a client-initiated bidirectional (request) stream. `data` holds what the
    /// stream delivered and the session has not consumed yet (append new bytes to it);
    /// complete frames are consumed and turned into `events`. `fin`: the stream's end is
    /// in `data` (pass it again on later calls, e.g. after the stream was unblocked).
    pub fn on_request_stream(
        &mut self,
        stream_id: u64,
        data: &mut BytesMut,
        fin: bool,
        events: &mut Vec<RequestEvent>,
    ) -> Result<(), Error> {
        let _ = (stream_id, data, fin, events);
        Err(Error::Stream(
            ErrorCode::H3_INTERNAL_ERROR,
            "not implemented",
        ))
    }

    /// A stream was reset by the peer, or we stopped reading it before its end: forget it
    /// (a blocked section included) and queue a QPACK Stream Cancellation if the peer's
    /// encoder may hold references for it. A critical stream (control, QPACK) going away is
    /// H3_CLOSED_CRITICAL_STREAM.
    pub fn stream_gone(&mut self, stream_id: u64) -> Result<(), Error> {
        let _ = stream_id;
        Ok(())
    }

    /// QPACK decoder stream instructions to write on our decoder stream, if any.
    pub fn take_decoder_stream_bytes(&mut self) -> Option<Bytes> {
        None
    }

    /// Appends a HEADERS frame with `:status` and `fields` (names lowercased;
    /// connection-specific fields dropped, as RFC 9114 section 4.2 requires).
    pub fn encode_response_head<'a, I>(&mut self, status: u16, fields: I, out: &mut BytesMut)
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let _ = (status, fields, out);
    }

    /// Appends a HEADERS frame carrying trailers.
    pub fn encode_trailers<'a, I>(&mut self, fields: I, out: &mut BytesMut)
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let _ = (fields, out);
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
}
