//! Header block decoding (RFC 7541 sections 3, 6).

use std::ops::Range;

use bytes::BytesMut;

use super::table::{self, DynamicTable, Stowed, ENTRY_OVERHEAD, STATIC_LEN};
use super::{huffman, integer, DecodeError};
pub use crate::proto::request_head::HeaderField;

/// The decoding half of one HTTP/2 connection's HPACK context.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// SETTINGS_HEADER_TABLE_SIZE in force: the most the peer may size its table to.
    max_table_size: usize,
    max_header_list_size: usize,
    /// We lowered `max_table_size` below the table's size; the peer owes us an update.
    update_required: bool,
    /// The last block decoded without error changed nothing in the dynamic table (no size
    /// update, no literal with incremental indexing).
    kept_table: bool,
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
            kept_table: false,
        }
    }

    /// Applies a SETTINGS_HEADER_TABLE_SIZE the peer has acknowledged. Lowering it below the
    /// current table size obliges the peer to start its next block with a size update.
    pub fn set_max_table_size(&mut self, size: usize) {
        self.max_table_size = size;
        if size < self.table.max_size() {
            self.update_required = true;
            // The next block must start with a size update: no block decodes as before.
            self.kept_table = false;
        }
    }

    pub fn set_max_header_list_size(&mut self, size: usize) {
        self.max_header_list_size = size;
    }

    /// Frees the table's spare capacity (see `DynamicTable::shrink_to_fit`).
    pub fn shrink_to_fit(&mut self) {
        self.table.shrink_to_fit();
    }

    /// Packs a small dynamic table in place for a parked connection (see
    /// `DynamicTable::stow`); `None` leaves the table as it is.
    pub fn stow_table(&mut self) -> Option<Stowed> {
        self.table.stow()
    }

    /// Puts back what [`Decoder::stow_table`] took.
    pub fn unstow_table(&mut self, stowed: &Stowed) {
        self.table.unstow(stowed);
    }

    /// Whether the last block decoded without error left the dynamic table as it was: only
    /// indexed fields and literals without indexing. Decoding the same bytes again, with no
    /// other block decoded in between, then gives the same fields.
    pub fn kept_table(&self) -> bool {
        self.kept_table
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
        self.kept_table = !self.update_required;
        let result = self.decode_block(block, buf, &mut emit);
        if result.is_err() {
            buf.truncate(entry_len);
            self.kept_table = false;
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
                self.kept_table = false;
                continue;
            }
            if self.update_required {
                return Err(DecodeError::TableSizeUpdateMissing);
            }
            fields_started = true;
            // Even an empty field costs 32; once that does not fit, nothing will.
            over |= list_size.saturating_add(ENTRY_OVERHEAD) > self.max_header_list_size;
            let budget = if over {
                0
            } else {
                self.max_header_list_size - list_size - ENTRY_OVERHEAD
            };

            if first & 0x80 != 0 {
                // Indexed field (section 6.1).
                let index = integer::decode(block, &mut pos, 7)?;
                // A dynamic entry's name and value are adjacent: copied at once.
                let (first, second, name_len) = if index <= STATIC_LEN {
                    let (name, value) = table::static_entry(index).ok_or(DecodeError::BadIndex)?;
                    (name, value, name.len())
                } else {
                    let (joined, name_len) = self
                        .table
                        .get_joined(index - STATIC_LEN - 1)
                        .ok_or(DecodeError::BadIndex)?;
                    (joined, &[][..], name_len)
                };
                let bytes = first.len() + second.len();
                if over {
                    continue;
                }
                if bytes > budget {
                    over = true;
                    continue;
                }
                let start = buf.len();
                let mid = start + name_len;
                buf.extend_from_slice(first);
                if !second.is_empty() {
                    buf.extend_from_slice(second);
                }
                list_size += bytes + ENTRY_OVERHEAD;
                emit(HeaderField {
                    name: start..mid,
                    value: mid..buf.len(),
                    never_indexed: false,
                    static_name: static_name(index),
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
            let static_index = match name {
                Name::Indexed(index) => static_name(index),
                Name::Literal(_) => 0,
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
                self.kept_table = false;
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
                static_name: static_index,
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

/// [`HeaderField::static_name`] of a name at HPACK index `index`.
#[inline]
fn static_name(index: usize) -> u8 {
    if index <= STATIC_LEN {
        index as u8
    } else {
        0
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

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, value, never indexed)
    type Field = (Vec<u8>, Vec<u8>, bool);

    /// Decodes with a fresh 4096-byte decoder and a generous list limit.
    fn decode(block: &[u8]) -> Result<Vec<Field>, DecodeError> {
        decode_with(&mut Decoder::new(4096, 1 << 20), block)
    }

    fn decode_with(dec: &mut Decoder, block: &[u8]) -> Result<Vec<Field>, DecodeError> {
        let mut buf = BytesMut::from(&b"prefix"[..]);
        let mut fields = Vec::new();
        let result = dec.decode(block, &mut buf, |f| fields.push(f));
        if result.is_err() {
            assert_eq!(&buf[..], b"prefix", "buf restored on error");
        }
        result?;
        Ok(fields
            .into_iter()
            .map(|f| (buf[f.name].to_vec(), buf[f.value].to_vec(), f.never_indexed))
            .collect())
    }

    #[test]
    fn truncated() {
        for block in [
            &[0xff][..],               // indexed, integer continuation missing
            &[0xff, 0x80],             // ... still missing
            &[0x40],                   // literal, name length missing
            &[0x40, 0x05, b'a'],       // name shorter than its length
            &[0x41],                   // indexed name, value missing
            &[0x41, 0x03, b'a', b'b'], // value shorter than its length
            &[0x41, 0x7f],             // value length continuation missing
            &[0x3f],                   // table size update, continuation missing
        ] {
            assert_eq!(decode(block), Err(DecodeError::Truncated), "{block:02x?}");
        }
    }

    #[test]
    fn integer_overflow() {
        let mut block = vec![0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(decode(&block), Err(DecodeError::IntegerOverflow));
        // A string length of 2^32 + something.
        block = vec![0x41, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(decode(&block), Err(DecodeError::IntegerOverflow));
    }

    #[test]
    fn bad_index() {
        assert_eq!(decode(&[0x80]), Err(DecodeError::BadIndex));
        assert_eq!(decode(&[0xbe]), Err(DecodeError::BadIndex)); // 62, table empty
        assert_eq!(decode(&[0x7e, 0x00]), Err(DecodeError::BadIndex)); // name index 62
        assert_eq!(decode(&[0x1f, 0x2f, 0x00]), Err(DecodeError::BadIndex)); // never, 62
                                                                             // One past the newest entry.
        let block = [0x40, 0x01, b'a', 0x01, b'b', 0xbe, 0xbf];
        assert_eq!(decode(&block), Err(DecodeError::BadIndex));
        assert_eq!(
            decode(&block[..6]).unwrap()[1],
            (b"a".to_vec(), b"b".to_vec(), false)
        );
    }

    #[test]
    fn bad_huffman() {
        // Name "0" (00000) padded with zeros.
        assert_eq!(
            decode(&[0x00, 0x81, 0x00, 0x00]),
            Err(DecodeError::BadHuffman)
        );
        // Value: 'a' then a whole byte of ones.
        assert_eq!(
            decode(&[0x41, 0x82, 0x1f, 0xff]),
            Err(DecodeError::BadHuffman)
        );
        // EOS in a value.
        assert_eq!(
            decode(&[0x41, 0x84, 0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::HuffmanEos)
        );
    }

    #[test]
    fn table_size_updates() {
        // 4097 > 4096.
        assert_eq!(
            decode(&[0x3f, 0xe2, 0x1f]),
            Err(DecodeError::TableSizeUpdateTooLarge)
        );
        assert_eq!(
            decode(&[0x82, 0x20]),
            Err(DecodeError::TableSizeUpdateNotAtStart)
        );
        // Two updates at the start are fine (RFC 7541 4.2); an update to 4096 too.
        assert!(decode(&[0x20, 0x3f, 0xe1, 0x1f, 0x82]).is_ok());

        // Shrinking evicts.
        let mut dec = Decoder::new(4096, 1 << 20);
        decode_with(&mut dec, &[0x40, 0x01, b'a', 0x01, b'b']).unwrap();
        assert_eq!(dec.table_size(), 34);
        decode_with(&mut dec, &[0x20]).unwrap();
        assert_eq!(dec.table_size(), 0);
        assert_eq!(decode_with(&mut dec, &[0xbe]), Err(DecodeError::BadIndex));
    }

    #[test]
    fn lowered_setting_requires_update() {
        let mut dec = Decoder::new(4096, 1 << 20);
        dec.set_max_table_size(100);
        assert_eq!(
            decode_with(&mut dec, &[0x82]),
            Err(DecodeError::TableSizeUpdateMissing)
        );
        // 101 is above the new limit.
        assert_eq!(
            decode_with(&mut dec, &[0x3f, 0x46, 0x82]),
            Err(DecodeError::TableSizeUpdateTooLarge)
        );
        // An update to 100 satisfies it; later blocks need none.
        assert_eq!(decode_with(&mut dec, &[0x3f, 0x45, 0x82]).unwrap().len(), 1);
        assert_eq!(decode_with(&mut dec, &[0x82]).unwrap().len(), 1);
        // Raising the limit requires nothing.
        dec.set_max_table_size(8192);
        assert_eq!(decode_with(&mut dec, &[0x82]).unwrap().len(), 1);
    }

    #[test]
    fn never_indexed_flag() {
        let fields = decode(&[0x10, 0x01, b'k', 0x01, b'v', 0x04, 0x01, b'/']).unwrap();
        assert_eq!(fields[0], (b"k".to_vec(), b"v".to_vec(), true));
        assert_eq!(fields[1], (b":path".to_vec(), b"/".to_vec(), false));
    }

    #[test]
    fn hpack_bomb_is_cut_off_and_table_stays_in_sync() {
        // One 3000-byte entry, then 10,000 one-byte references to it: 30 MB if expanded.
        let mut block = vec![0x40, 0x01, b'x', 0x7f, 0xb9, 0x16];
        block.extend(std::iter::repeat_n(b'a', 3000));
        block.extend(std::iter::repeat_n(0xbe, 10_000));
        let mut dec = Decoder::new(4096, 16 * 1024);
        let mut buf = BytesMut::new();
        let mut emitted = 0;
        let result = dec.decode(&block, &mut buf, |_| emitted += 1);
        assert_eq!(result, Err(DecodeError::HeaderListTooLarge));
        // 3033 per field: five fit in 16 KiB, the sixth stops all copying.
        assert_eq!(emitted, 5);
        assert!(buf.is_empty());
        assert!(buf.capacity() < 32 * 1024, "{}", buf.capacity());
        // The entry is still there: the next block can use it.
        assert_eq!(dec.table_size(), 3033);
        let fields = decode_with(&mut dec, &[0xbe]).unwrap();
        assert_eq!(fields[0].1.len(), 3000);
    }

    #[test]
    fn list_limit_counts_literals_and_keeps_indexing_them() {
        // Limit 40: "a: b" costs 34, a second one does not fit.
        let mut dec = Decoder::new(4096, 40);
        let block = [0x40, 0x01, b'a', 0x01, b'b', 0x40, 0x01, b'c', 0x01, b'd'];
        assert_eq!(
            decode_with(&mut dec, &block),
            Err(DecodeError::HeaderListTooLarge)
        );
        // Both literals were still inserted: c:d is index 62, a:b 63.
        assert_eq!(dec.table_size(), 68);
        assert_eq!(
            decode_with(&mut dec, &[0xbe]).unwrap()[0],
            (b"c".to_vec(), b"d".to_vec(), false)
        );
        // A Huffman value over the limit is cut off too.
        let mut dec = Decoder::new(4096, 40);
        let block = [0x04, 0x86, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3f]; // :path www.ex...
        assert_eq!(
            decode_with(&mut dec, &block),
            Err(DecodeError::HeaderListTooLarge)
        );
        // Exactly at the limit is fine: 32 + 5 (":path") + 3.
        let mut dec = Decoder::new(4096, 40);
        assert!(decode_with(&mut dec, &[0x04, 0x03, b'a', b'b', b'c']).is_ok());
        let mut dec = Decoder::new(4096, 39);
        assert_eq!(
            decode_with(&mut dec, &[0x04, 0x03, b'a', b'b', b'c']),
            Err(DecodeError::HeaderListTooLarge)
        );
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic xorshift stream: random blocks, and valid blocks with bytes flipped.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid: &[u8] = &[
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf, 0xbe, 0xbf,
        ];
        let mut dec = Decoder::new(4096, 8192);
        let mut buf = BytesMut::new();
        for i in 0..20_000 {
            let mut block: Vec<u8> = if i % 2 == 0 {
                (0..next() % 64).map(|_| next() as u8).collect()
            } else {
                valid.to_vec()
            };
            if !block.is_empty() {
                let at = next() as usize % block.len();
                block[at] ^= next() as u8;
            }
            buf.clear();
            let _ = dec.decode(&block, &mut buf, |f| {
                assert!(f.name.end <= f.value.start);
            });
            if i % 100 == 0 {
                dec = Decoder::new(4096, 8192);
            }
        }
    }
}
