//! HPACK (RFC 7541): header compression for HTTP/2.
//!
//! - [`Decoder`] turns a complete header block (HEADERS plus any CONTINUATION payloads,
//!   concatenated by the framing layer) into [`HeaderField`]s whose names and values are
//!   ranges into one caller-provided [`bytes::BytesMut`], so a request is built without an
//!   allocation per header. It enforces a header-list size limit while decoding (the "HPACK
//!   bomb" defence) and the table size we announced in SETTINGS_HEADER_TABLE_SIZE.
//! - [`Encoder`] writes response (or request) header blocks, using the static table, a dynamic
//!   table for values that repeat across responses, and Huffman coding when it is shorter.
//!
//! Both sides keep their dynamic table in a ring of entries over one byte arena: no allocation
//! per header once warmed up.
//!
//! ```
//! use bytes::BytesMut;
//! use spate::proto::h2::hpack::{Decoder, Encoder, DEFAULT_TABLE_SIZE};
//!
//! let mut enc = Encoder::default();
//! let mut block = Vec::new();
//! let fields = [(&b":status"[..], &b"200"[..]), (&b"server"[..], &b"spate"[..])];
//! enc.encode(fields, &mut block);
//! assert_eq!(block[0], 0x88); // static table entry 8
//!
//! let mut dec = Decoder::new(DEFAULT_TABLE_SIZE, 16 * 1024);
//! let mut buf = BytesMut::new();
//! let mut decoded = Vec::new();
//! dec.decode(&block, &mut buf, |f| decoded.push(f))?;
//! assert_eq!(&buf[decoded[1].name.clone()], b"server");
//! assert_eq!(&buf[decoded[1].value.clone()], b"spate");
//! # Ok::<(), spate::proto::h2::hpack::DecodeError>(())
//! ```

mod decoder;
mod encoder;
// Shared with QPACK (`proto::h3::qpack`), which uses the same integers, Huffman code and
// dynamic table ring.
pub(crate) mod huffman;
pub(crate) mod integer;
pub(crate) mod table;

pub use decoder::{Decoder, HeaderField};
pub use encoder::{BlockEncoder, Encoder, Indexing};
pub use table::{StaticName, Stowed};

/// The dynamic table size both endpoints start with (SETTINGS_HEADER_TABLE_SIZE default).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// Why a header block could not be decoded.
///
/// Every variant except [`DecodeError::HeaderListTooLarge`] leaves the decoder's dynamic table
/// out of sync with the peer: the connection must be closed with COMPRESSION_ERROR.
/// `HeaderListTooLarge` keeps the table in sync (see [`Decoder::decode`]), so only the stream
/// needs refusing (431 / RST_STREAM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ended inside an integer, a string or a field representation.
    Truncated,
    /// An integer needs more than 32 bits (or more continuation bytes than that takes).
    IntegerOverflow,
    /// An index of 0, or one past the end of the static plus dynamic table.
    BadIndex,
    /// Huffman padding longer than 7 bits or not all ones.
    BadHuffman,
    /// The Huffman EOS symbol inside a string.
    HuffmanEos,
    /// A dynamic table size update above the limit we announced in SETTINGS.
    TableSizeUpdateTooLarge,
    /// A dynamic table size update after the first field of a block.
    TableSizeUpdateNotAtStart,
    /// We lowered SETTINGS_HEADER_TABLE_SIZE below the peer's table size, and the peer's next
    /// block did not start with the size update RFC 7541 section 4.2 requires.
    TableSizeUpdateMissing,
    /// The decoded header list (name + value + 32 per field, RFC 9113 section 6.5.2) is above
    /// the limit.
    HeaderListTooLarge,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            DecodeError::Truncated => "header block truncated",
            DecodeError::IntegerOverflow => "HPACK integer overflow",
            DecodeError::BadIndex => "HPACK index out of range",
            DecodeError::BadHuffman => "invalid Huffman padding",
            DecodeError::HuffmanEos => "Huffman EOS symbol in string",
            DecodeError::TableSizeUpdateTooLarge => "dynamic table size update above the limit",
            DecodeError::TableSizeUpdateNotAtStart => {
                "dynamic table size update after the start of a block"
            }
            DecodeError::TableSizeUpdateMissing => "required dynamic table size update missing",
            DecodeError::HeaderListTooLarge => "header list too large",
        };
        f.write_str(what)
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod rfc_examples;
