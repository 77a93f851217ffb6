//! Header block decoding (RFC 7541 sections 3, 6).

use std::ops::Range;

use bytes::BytesMut;

use super::table::{self, DynamicTable, ENTRY_OVERHEAD, STATIC_LEN};
use super::{huffman, integer, DecodeError};

/// One decoded header field: byte ranges into the buffer passed to [`Decoder::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderField {
    pub name: Range<usize>,
    pub value: Range<usize>,
    /// Sent as "never indexed" (RFC 7541 section 6.2.3): an intermediary forwarding this
    /// field must encode it the same way.
    pub never_indexed: bool,
}

/// The decoding half of one HTTP/2 connection's HPACK context.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// SETTINGS_HEADER_TABLE_SIZE in force: the most the peer may size its table to.
    max_table_size: usize,
    max_header_list_size: usize,
    /// We lowered `max_table_size` below the table's size; the peer owes us an update.
    update_required: bool,
}

impl Decoder {
    /// A decoder whose table may grow to `max_table_size` bytes, rejecting header lists above
    /// `max_header_list_size` (RFC 9113 accounting: name + value + 32 per field).
    ///
    /// At connection start pass [`super::DEFAULT_TABLE_SIZE`]: the peer may use that much
    /// until it acknowledges our SETTINGS; then call [`Decoder::set_max_table_size`].
    pub fn new(max_table_size: usize, max_header_list_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(max_table_size),
            max_table_size,
            max_header_list_size,
            update_required: false,
        }
    }

    /// Applies a SETTINGS_HEADER_TABLE_SIZE the peer has acknowledged. Lowering it below the
    /// current table size obliges the peer to start its next block with a size update.
    pub fn set_max_table_size(&mut self, size: usize) {
        self.max_table_size = size;
        if size < self.table.max_size() {
            self.update_required = true;
        }
    }

    pub fn set_max_header_list_size(&mut self, size: usize) {
        self.max_header_list_size = size;
    }

    /// The dynamic table's current size in RFC 7541 terms.
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Decodes one complete header block, appending every name and value to `buf` and
    /// calling `emit` for each field in order, with ranges into `buf`.
    ///
    /// When the header list passes the size limit, the rest of the block is still parsed
    /// to keep the dynamic table in sync with the peer, but nothing more is copied or emitted
    /// (so a block referencing a big table entry many times costs O(block length) from there),
    /// and the result is [`DecodeError::HeaderListTooLarge`]: refuse the stream, keep the
    /// connection. Any other error means the connection must be closed (COMPRESSION_ERROR).
    /// On error `buf` is truncated back to its length on entry and emitted fields are void.
    pub fn decode<F>(
        &mut self,
        block: &[u8],
        buf: &mut BytesMut,
        mut emit: F,
    ) -> Result<(), DecodeError>
    where
        F: FnMut(HeaderField),
    {
        let entry_len = buf.len();
        let result = self.decode_block(block, buf, &mut emit);
        if result.is_err() {
            buf.truncate(entry_len);
        }
        result
    }

    fn decode_block<F>(
        &mut self,
        block: &[u8],
        buf: &mut BytesMut,
        emit: &mut F,
    ) -> Result<(), DecodeError>
    where
        F: FnMut(HeaderField),
    {
        let mut pos = 0;
        let mut fields_started = false;
        let mut list_size = 0usize;
        // Past the list size limit: keep parsing for table consistency, produce nothing.
        let mut over = false;
        while let Some(&first) = block.get(pos) {
            if first & 0xe0 == 0x20 {
                // Dynamic table size update (section 6.3).
                if fields_started {
                    return Err(DecodeError::TableSizeUpdateNotAtStart);
                }
                let size = integer::decode(block, &mut pos, 5)?;
                if size > self.max_table_size {
                    return Err(DecodeError::TableSizeUpdateTooLarge);
                }
                self.table.set_max_size(size);
                self.update_required = false;
                continue;
            }
            if self.update_required {
                return Err(DecodeError::TableSizeUpdateMissing);
            }
            fields_started = true;
            // Even an empty field costs 32; once that does not fit, nothing will.
            over |= list_size + ENTRY_OVERHEAD > self.max_header_list_size;
            let budget = if over {
                0
            } else {
                self.max_header_list_size - list_size - ENTRY_OVERHEAD
            };

            if first & 0x80 != 0 {
                // Indexed field (section 6.1).
                let index = integer::decode(block, &mut pos, 7)?;
                let (name, value) = self.entry(index)?;
                if over {
                    continue;
                }
                if name.len() + value.len() > budget {
                    over = true;
                    continue;
                }
                let start = buf.len();
                buf.extend_from_slice(name);
                let mid = buf.len();
                buf.extend_from_slice(value);
                list_size += name.len() + value.len() + ENTRY_OVERHEAD;
                emit(HeaderField {
                    name: start..mid,
                    value: mid..buf.len(),
                    never_indexed: false,
                });
                continue;
            }

            // Literal field (sections 6.2.1 - 6.2.3).
            let (prefix, indexing, never_indexed) = if first & 0x40 != 0 {
                (6, true, false)
            } else {
                (4, false, first & 0x10 != 0)
            };
            let index = integer::decode(block, &mut pos, prefix)?;
            let name = if index == 0 {
                Name::Literal(take_string(block, &mut pos)?)
            } else {
                // Validate now: a bad index is an error even when the field is skipped.
                self.entry(index)?;
                Name::Indexed(index)
            };
            let value = take_string(block, &mut pos)?;
            if over && !indexing {
                continue;
            }
            let mark = buf.len();
            let limit = if over { usize::MAX } else { budget };
            let (name, value) = match self.materialize(name, value, buf, limit) {
                Ok(ranges) => ranges,
                Err(DecodeError::HeaderListTooLarge) => {
                    buf.truncate(mark);
                    over = true;
                    if !indexing {
                        continue;
                    }
                    self.materialize(name, value, buf, usize::MAX)?
                }
                Err(e) => return Err(e),
            };
            if indexing {
                self.table.insert(&buf[name.clone()], &buf[value.clone()]);
            }
            if over {
                buf.truncate(mark);
                continue;
            }
            list_size += name.len() + value.len() + ENTRY_OVERHEAD;
            emit(HeaderField {
                name,
                value,
                never_indexed,
            });
        }
        if over {
            return Err(DecodeError::HeaderListTooLarge);
        }
        Ok(())
    }

    /// Table entry `index` (1-based HPACK index space).
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), DecodeError> {
        let found = if index <= STATIC_LEN {
            table::static_entry(index)
        } else {
            self.table.get(index - STATIC_LEN - 1)
        };
        found.ok_or(DecodeError::BadIndex)
    }

    /// Writes a literal's name and value into `buf`, failing with `HeaderListTooLarge` once
    /// they pass `limit` bytes together.
    fn materialize(
        &self,
        name: Name<'_>,
        value: Str<'_>,
        buf: &mut BytesMut,
        limit: usize,
    ) -> Result<(Range<usize>, Range<usize>), DecodeError> {
        let start = buf.len();
        match name {
            Name::Indexed(index) => {
                let (n, _) = self.entry(index)?;
                if n.len() > limit {
                    return Err(DecodeError::HeaderListTooLarge);
                }
                buf.extend_from_slice(n);
            }
            Name::Literal(s) => put_string(s, buf, limit)?,
        }
        let mid = buf.len();
        put_string(value, buf, limit - (mid - start))?;
        Ok((start..mid, mid..buf.len()))
    }
}

/// A string literal's encoded form: (Huffman-coded, bytes on the wire).
type Str<'a> = (bool, &'a [u8]);

#[derive(Clone, Copy)]
enum Name<'a> {
    Indexed(usize),
    Literal(Str<'a>),
}

/// Parses a string literal's header (section 5.2) and returns its wire bytes.
fn take_string<'a>(block: &'a [u8], pos: &mut usize) -> Result<Str<'a>, DecodeError> {
    let huffman = *block.get(*pos).ok_or(DecodeError::Truncated)? & 0x80 != 0;
    let len = integer::decode(block, pos, 7)?;
    let end = pos
        .checked_add(len)
        .filter(|&end| end <= block.len())
        .ok_or(DecodeError::Truncated)?;
    let bytes = &block[*pos..end];
    *pos = end;
    Ok((huffman, bytes))
}

fn put_string(
    (huffman, bytes): Str<'_>,
    buf: &mut BytesMut,
    limit: usize,
) -> Result<(), DecodeError> {
    if huffman {
        huffman::decode(bytes, buf, limit)
    } else if bytes.len() > limit {
        Err(DecodeError::HeaderListTooLarge)
    } else {
        buf.extend_from_slice(bytes);
        Ok(())
    }
}
