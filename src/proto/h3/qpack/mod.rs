//! QPACK (RFC 9204): header compression for HTTP/3.
//!
//! - [`Decoder`]: our decoder, fed the peer's encoder stream ([`Decoder::on_encoder_stream`])
//!   and the encoded field sections of HEADERS frames ([`Decoder::decode_section`]). Its
//!   dynamic table is bounded by the SETTINGS_QPACK_MAX_TABLE_CAPACITY we advertised, at most
//!   SETTINGS_QPACK_BLOCKED_STREAMS streams wait on the encoder stream, and a decoded section
//!   is bounded by SETTINGS_MAX_FIELD_SECTION_SIZE while it is decoded (the "QPACK bomb"
//!   defence). It writes the decoder stream instructions (Section Acknowledgment, Insert Count
//!   Increment, Stream Cancellation) for the session to send.
//! - [`Encoder`]: our encoder, which never uses the dynamic table (we announce no
//!   encoder-side state, so the peer's decoder never blocks on us): static table references
//!   and literals, Huffman-coded when that is shorter.
//!
//! Names and values are decoded into one caller-provided `BytesMut` as ranges
//! ([`HeaderField`]), as in HPACK, so a request is built without an allocation per field.

pub(crate) mod decoder;
pub(crate) mod encoder;
mod memo;
pub(crate) mod section_memo;
mod sensitive;
mod static_table;

pub use crate::proto::h2::hpack::HeaderField;
pub use decoder::{Decoded, Decoder};
pub use encoder::Encoder;

/// Why QPACK input was refused. Each maps to the connection error code RFC 9204 section 6
/// gives it ([`QpackError::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpackError {
    /// A field section could not be decoded (bad index, bad prefix, truncated...):
    /// QPACK_DECOMPRESSION_FAILED.
    Decompression(&'static str),
    /// The peer's encoder stream sent an invalid instruction: QPACK_ENCODER_STREAM_ERROR.
    EncoderStream(&'static str),
    /// The peer's decoder stream sent an invalid instruction: QPACK_DECODER_STREAM_ERROR.
    DecoderStream(&'static str),
}

impl QpackError {
    pub fn code(&self) -> super::ErrorCode {
        match self {
            QpackError::Decompression(_) => super::ErrorCode::QPACK_DECOMPRESSION_FAILED,
            QpackError::EncoderStream(_) => super::ErrorCode::QPACK_ENCODER_STREAM_ERROR,
            QpackError::DecoderStream(_) => super::ErrorCode::QPACK_DECODER_STREAM_ERROR,
        }
    }

    pub fn reason(&self) -> &'static str {
        match *self {
            QpackError::Decompression(w)
            | QpackError::EncoderStream(w)
            | QpackError::DecoderStream(w) => w,
        }
    }
}

impl From<QpackError> for super::Error {
    fn from(e: QpackError) -> super::Error {
        super::Error::Connection(e.code(), e.reason())
    }
}
