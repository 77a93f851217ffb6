//! HTTP/3 (RFC 9114) and QPACK (RFC 9204), server side, sans-IO: this module knows nothing of
//! QUIC, sockets or clocks. The QUIC glue (`server::h3`) hands it the bytes of each stream and
//! writes out the bytes it produces.
//!
//! - [`Session`] (one per QUIC connection) reads the peer's unidirectional streams (control,
//!   QPACK encoder and decoder; push streams refused, unknown types ignored) and its request
//!   streams, turning them into [`RequestEvent`]s, and encodes response heads, trailers and
//!   frame headers.
//! - [`qpack`] is the header compression: a decoder with a bounded dynamic table and
//!   blocked-stream limit, and a static-table-only encoder.
//! - [`frame`] and [`varint`] are the wire formats.
//!
//! See `LIFECYCLE.md` for the stream kinds and their states.
//!
//! ## How the glue drives a connection
//!
//! 1. Open our three unidirectional streams and write [`Session::control_stream_prelude`],
//!    [`Session::encoder_stream_prelude`] and [`Session::decoder_stream_prelude`] on them.
//! 2. Bytes on a peer unidirectional stream go to [`Session::on_uni_stream`]. Its
//!    [`UniOutcome`] names request streams that were blocked on the QPACK encoder stream and
//!    can now be decoded (call [`Session::on_request_stream`] again for each), and may ask
//!    to stop reading the stream (STOP_SENDING with the given code).
//! 3. Bytes on a request stream are appended to that stream's `BytesMut` and handed to
//!    [`Session::on_request_stream`], which consumes what it can and pushes events. A HEADERS
//!    frame stays in the buffer until it is complete (and, when blocked, until the encoder
//!    stream caught up); DATA payloads are split off the buffer without copying.
//! 4. After each call, write [`Session::take_decoder_stream_bytes`] (if any) on our decoder
//!    stream.
//! 5. [`Error::Connection`]: close the QUIC connection with that code.
//!    [`Error::Stream`]: reset the request stream and stop reading it with that code; the
//!    session has already forgotten the stream.
//! 6. A stream reset by the peer, or one we stop reading before its end: call
//!    [`Session::stream_gone`].

pub mod frame;
pub mod qpack;
mod session;
pub mod varint;

pub use session::{Head, PeerSettings, RequestEvent, Session, UniOutcome};

/// Our side's HTTP/3 and QPACK settings and limits, from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// SETTINGS_MAX_FIELD_SECTION_SIZE we advertise and enforce: decoded header bytes
    /// (name + value + 32 per field) per header section. A request head above it is answered
    /// 431 ([`RequestEvent::HeadTooLarge`]); a HEADERS frame whose encoded payload is over
    /// twice this is not even buffered (stream error H3_EXCESSIVE_LOAD).
    pub max_field_section_size: u64,
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY: the most the peer's encoder may size our decoder's
    /// dynamic table to (0 = static table only).
    pub qpack_max_table_capacity: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS: request streams that may wait on the encoder stream at
    /// once; one more is QPACK_DECOMPRESSION_FAILED.
    pub qpack_blocked_streams: u64,
    /// Header fields per request (431 above it), as `max_header_fields` in HTTP/2.
    pub max_header_fields: usize,
    /// Advertise SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 9220) and accept `:protocol`.
    /// Without it a request carrying `:protocol` is malformed.
    pub enable_connect_protocol: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_field_section_size: 64 * 1024,
            qpack_max_table_capacity: 4096,
            qpack_blocked_streams: 100,
            max_header_fields: 100,
            enable_connect_protocol: false,
        }
    }
}

/// An HTTP/3 or QPACK error code (RFC 9114 section 8.1, RFC 9204 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u64);

impl ErrorCode {
    pub const H3_NO_ERROR: ErrorCode = ErrorCode(0x100);
    pub const H3_GENERAL_PROTOCOL_ERROR: ErrorCode = ErrorCode(0x101);
    pub const H3_INTERNAL_ERROR: ErrorCode = ErrorCode(0x102);
    pub const H3_STREAM_CREATION_ERROR: ErrorCode = ErrorCode(0x103);
    pub const H3_CLOSED_CRITICAL_STREAM: ErrorCode = ErrorCode(0x104);
    pub const H3_FRAME_UNEXPECTED: ErrorCode = ErrorCode(0x105);
    pub const H3_FRAME_ERROR: ErrorCode = ErrorCode(0x106);
    pub const H3_EXCESSIVE_LOAD: ErrorCode = ErrorCode(0x107);
    pub const H3_ID_ERROR: ErrorCode = ErrorCode(0x108);
    pub const H3_SETTINGS_ERROR: ErrorCode = ErrorCode(0x109);
    pub const H3_MISSING_SETTINGS: ErrorCode = ErrorCode(0x10a);
    pub const H3_REQUEST_REJECTED: ErrorCode = ErrorCode(0x10b);
    pub const H3_REQUEST_CANCELLED: ErrorCode = ErrorCode(0x10c);
    pub const H3_REQUEST_INCOMPLETE: ErrorCode = ErrorCode(0x10d);
    pub const H3_MESSAGE_ERROR: ErrorCode = ErrorCode(0x10e);
    pub const H3_CONNECT_ERROR: ErrorCode = ErrorCode(0x10f);
    pub const H3_VERSION_FALLBACK: ErrorCode = ErrorCode(0x110);
    pub const QPACK_DECOMPRESSION_FAILED: ErrorCode = ErrorCode(0x200);
    pub const QPACK_ENCODER_STREAM_ERROR: ErrorCode = ErrorCode(0x201);
    pub const QPACK_DECODER_STREAM_ERROR: ErrorCode = ErrorCode(0x202);
}

/// What went wrong, and how much of the connection it takes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Close the whole connection (CONNECTION_CLOSE with this code).
    Connection(ErrorCode, &'static str),
    /// Reset this request stream and stop reading it (RESET_STREAM and STOP_SENDING with
    /// this code); the connection goes on. The session has already forgotten the stream.
    Stream(ErrorCode, &'static str),
}

impl Error {
    pub fn code(&self) -> ErrorCode {
        match *self {
            Error::Connection(c, _) | Error::Stream(c, _) => c,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Connection(c, why) => write!(f, "HTTP/3 connection error {:#x}: {why}", c.0),
            Error::Stream(c, why) => write!(f, "HTTP/3 stream error {:#x}: {why}", c.0),
        }
    }
}

impl std::error::Error for Error {}
