//! The QPACK decoder: dynamic table fed by the encoder stream, field section decoding,
//! blocked streams, decoder stream output.

use bytes::{Bytes, BytesMut};

use super::{HeaderField, QpackError};

/// What [`Decoder::decode_section`] did with a field section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Every field is in `fields`.
    Done,
    /// It needs dynamic table entries the encoder stream has not delivered yet: keep the
    /// section and try again once [`Decoder::on_encoder_stream`] reports the stream unblocked.
    Blocked,
    /// The decoded section is over the size limit (or field count): answer 431. The decoder's
    /// state is intact; nothing was emitted.
    TooLarge,
}

/// The decoding half of one connection's QPACK context.
#[derive(Debug)]
pub struct Decoder {
    out: BytesMut,
}

impl Decoder {
    /// `max_table_capacity` and `max_blocked_streams` are what we announce in SETTINGS;
    /// `max_section_size` bounds a decoded section (name + value + 32 per field).
    pub fn new(max_table_capacity: u64, max_blocked_streams: u64, max_section_size: u64) -> Self {
        let _ = (max_table_capacity, max_blocked_streams, max_section_size);
        Decoder {
            out: BytesMut::new(),
        }
    }

    /// Consumes bytes of the peer's encoder stream, applying every complete instruction (a
    /// partial one is kept for the next call). Streams whose blocked section can now be
    /// decoded are appended to `unblocked`.
    pub fn on_encoder_stream(
        &mut self,
        data: &[u8],
        unblocked: &mut Vec<u64>,
    ) -> Result<(), QpackError> {
        let _ = (data, unblocked);
        Err(QpackError::EncoderStream("not implemented"))
    }

    /// Decodes the complete encoded field section `section` of stream `stream_id`, appending
    /// names and values to `buf` and one [`HeaderField`] per field to `fields`.
    pub fn decode_section(
        &mut self,
        stream_id: u64,
        section: &[u8],
        buf: &mut BytesMut,
        fields: &mut Vec<HeaderField>,
    ) -> Result<Decoded, QpackError> {
        let _ = (stream_id, section, buf, fields);
        Err(QpackError::Decompression("not implemented"))
    }

    /// Stream `stream_id` was reset or abandoned: forget its blocked section and, if the
    /// peer's encoder may hold references for it, queue a Stream Cancellation.
    pub fn cancel_stream(&mut self, stream_id: u64) {
        let _ = stream_id;
    }

    /// Decoder stream instructions to send, if any.
    pub fn take_output(&mut self) -> Option<Bytes> {
        (!self.out.is_empty()).then(|| self.out.split().freeze())
    }
}
