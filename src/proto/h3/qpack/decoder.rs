//! The QPACK decoder (RFC 9204 sections 2.2, 3, 4.3 - 4.5): a dynamic table fed by the peer's
//! encoder stream, field section decoding with blocked streams, and the decoder stream
//! instructions that tell the peer's encoder what we have seen.
//!
//! Absolute indexes count inserts from 0; the table (shared with HPACK) indexes entries from
//! the newest, so entry `abs` is at `inserted - 1 - abs` while it has not been evicted.

use bytes::{Bytes, BytesMut};

use super::{static_table, HeaderField, QpackError};
use crate::proto::h2::hpack::table::{DynamicTable, ENTRY_OVERHEAD};
use crate::proto::h2::hpack::{huffman, integer, DecodeError};

/// What [`Decoder::decode_section`] did with a field section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Every field is in `fields`.
    Done,
    /// It needs dynamic table entries the encoder stream has not delivered yet: keep the
    /// section and try again once [`Decoder::on_encoder_stream`] reports the stream unblocked.
    Blocked,
    /// The decoded section is over the size limit: answer 431. The decoder's state is intact
    /// (field lines never change it); `buf` and `fields` are as they were on entry.
    TooLarge,
}

/// The decoding half of one connection's QPACK context.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY we announced.
    max_capacity: usize,
    /// Inserts so far (the Insert Count).
    inserted: u64,
    /// The Insert Count the peer's encoder knows we have (Known Received Count): raised by
    /// our Section Acknowledgments and Insert Count Increments.
    known_received: u64,
    /// The encoder stream has set a capacity or inserted: from then on a stream given up may
    /// leave references behind, so it is worth a Stream Cancellation.
    table_used: bool,
    max_blocked: usize,
    /// Streams whose field section waits for inserts: (stream id, Required Insert Count).
    blocked: Vec<(u64, u64)>,
    max_section_size: usize,
    /// The start of an encoder stream instruction whose end has not arrived.
    pending: Vec<u8>,
    /// Strings of the instruction being applied (decoded, before they enter the table).
    scratch: BytesMut,
    /// Decoder stream instructions not yet taken.
    out: BytesMut,
}

/// Instruction bytes a peer may leave pending: the biggest entry the table takes, Huffman
/// coded at its worst (30 bits a byte), plus the instruction's prefixes.
fn max_pending(capacity: usize) -> usize {
    capacity.saturating_mul(4).saturating_add(64)
}

impl Decoder {
    /// `max_table_capacity` and `max_blocked_streams` are what we announce in SETTINGS;
    /// `max_section_size` bounds a decoded section (name + value + 32 per field).
    pub fn new(max_table_capacity: u64, max_blocked_streams: u64, max_section_size: u64) -> Self {
        let max_capacity = usize::try_from(max_table_capacity).unwrap_or(usize::MAX);
        Decoder {
            table: DynamicTable::new(0),
            max_capacity,
            inserted: 0,
            known_received: 0,
            table_used: false,
            max_blocked: usize::try_from(max_blocked_streams).unwrap_or(usize::MAX),
            blocked: Vec::new(),
            max_section_size: usize::try_from(max_section_size).unwrap_or(usize::MAX),
            pending: Vec::new(),
            scratch: BytesMut::new(),
            out: BytesMut::new(),
        }
    }

    /// Inserts received so far.
    pub fn insert_count(&self) -> u64 {
        self.inserted
    }

    /// Streams waiting on the encoder stream.
    pub fn blocked_streams(&self) -> usize {
        self.blocked.len()
    }

    /// Consumes bytes of the peer's encoder stream, applying every complete instruction (a
    /// partial one is kept for the next call). Streams whose blocked section can now be
    /// decoded are appended to `unblocked`. The inserts are acknowledged by the next
    /// [`Decoder::take_output`].
    pub fn on_encoder_stream(
        &mut self,
        data: &[u8],
        unblocked: &mut Vec<u64>,
    ) -> Result<(), QpackError> {
        if self.pending.is_empty() {
            let used = self.apply_instructions(data)?;
            self.pending.extend_from_slice(&data[used..]);
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            pending.extend_from_slice(data);
            let used = self.apply_instructions(&pending)?;
            pending.drain(..used);
            self.pending = pending;
        }
        if self.pending.len() > max_pending(self.max_capacity) {
            return Err(QpackError::EncoderStream("encoder instruction too long"));
        }
        let inserted = self.inserted;
        self.blocked.retain(|&(stream, required)| {
            let ready = required <= inserted;
            if ready {
                unblocked.push(stream);
            }
            !ready
        });
        Ok(())
    }

    /// Decodes the complete encoded field section `section` of stream `stream_id`, appending
    /// names and values to `buf` and one [`HeaderField`] per field to `fields`.
    ///
    /// A section that references the dynamic table is acknowledged on the decoder stream once
    /// decoded (or refused as too large). Errors are connection errors; on any result but
    /// `Done`, `buf` and `fields` are left as they were.
    pub fn decode_section(
        &mut self,
        stream_id: u64,
        section: &[u8],
        buf: &mut BytesMut,
        fields: &mut Vec<HeaderField>,
    ) -> Result<Decoded, QpackError> {
        let mut pos = 0;
        let encoded_required = int(section, &mut pos, 8)?;
        let required = self.required_insert_count(encoded_required)?;
        let negative = *section.get(pos).ok_or(TRUNCATED)? & 0x80 != 0;
        let delta = int(section, &mut pos, 7)?;
        let base = if negative {
            // Base = Required Insert Count - Delta Base - 1, never below 0.
            required
                .checked_sub(delta + 1)
                .ok_or(QpackError::Decompression("negative Base"))?
        } else {
            required
                .checked_add(delta)
                .ok_or(QpackError::Decompression("Base overflow"))?
        };
        if required > self.inserted {
            if !self.blocked.iter().any(|&(s, _)| s == stream_id) {
                if self.blocked.len() >= self.max_blocked {
                    return Err(QpackError::Decompression("too many blocked streams"));
                }
                self.blocked.push((stream_id, required));
            }
            return Ok(Decoded::Blocked);
        }
        self.blocked.retain(|&(s, _)| s != stream_id);

        let (buf_len, fields_len) = (buf.len(), fields.len());
        let mut lines = Lines {
            table: &self.table,
            inserted: self.inserted,
            required,
            base,
            largest_ref: None,
        };
        let result = lines.decode(&section[pos..], buf, fields, self.max_section_size);
        let largest_ref = lines.largest_ref;
        if !matches!(result, Ok(Decoded::Done)) {
            buf.truncate(buf_len);
            fields.truncate(fields_len);
        }
        let decoded = result?;
        // RFC 9204 section 2.2.3 ... a Required Insert Count above what the section needs.
        if decoded == Decoded::Done && required > 0 && largest_ref.map(|r| r + 1) != Some(required)
        {
            buf.truncate(buf_len);
            fields.truncate(fields_len);
            return Err(QpackError::Decompression(
                "Required Insert Count above the largest reference",
            ));
        }
        if required > 0 {
            // Section Acknowledgment.
            put_int(stream_id, 7, 0x80, &mut self.out);
            self.known_received = self.known_received.max(required);
        }
        Ok(decoded)
    }

    /// Stream `stream_id` was reset or abandoned before all its field sections were decoded:
    /// forget its blocked section and, once the peer's encoder has used the dynamic table,
    /// queue a Stream Cancellation so it can release any references the stream held.
    pub fn cancel_stream(&mut self, stream_id: u64) {
        let was_blocked = self.blocked.iter().any(|&(s, _)| s == stream_id);
        self.blocked.retain(|&(s, _)| s != stream_id);
        if self.max_capacity > 0 && (was_blocked || self.table_used) {
            put_int(stream_id, 6, 0x40, &mut self.out);
        }
    }

    /// Decoder stream instructions to send, if any. Inserts that no Section Acknowledgment
    /// has covered get an Insert Count Increment here, so a section decoded right after its
    /// inserts arrived costs one acknowledgment, not two instructions.
    pub fn take_output(&mut self) -> Option<Bytes> {
        if self.inserted > self.known_received {
            put_int(self.inserted - self.known_received, 6, 0x00, &mut self.out);
            self.known_received = self.inserted;
        }
        (!self.out.is_empty()).then(|| self.out.split().freeze())
    }

    /// The dynamic table's size (entries' bytes plus 32 each).
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// RFC 9204 section 4.5.1.1: the Required Insert Count from its encoded form, modulo
    /// twice the most entries our table can hold.
    fn required_insert_count(&self, encoded: u64) -> Result<u64, QpackError> {
        if encoded == 0 {
            return Ok(0);
        }
        let max_entries = (self.max_capacity / ENTRY_OVERHEAD) as u64;
        let full_range = 2 * max_entries;
        if encoded > full_range {
            return Err(QpackError::Decompression("bad Required Insert Count"));
        }
        let max_value = self.inserted + max_entries;
        let max_wrapped = (max_value / full_range) * full_range;
        let mut required = max_wrapped + encoded - 1;
        if required > max_value {
            if required <= full_range {
                return Err(QpackError::Decompression("bad Required Insert Count"));
            }
            required -= full_range;
        }
        if required == 0 {
            return Err(QpackError::Decompression("bad Required Insert Count"));
        }
        Ok(required)
    }

    /// Applies the complete instructions at the start of `data`; returns the bytes used.
    fn apply_instructions(&mut self, data: &[u8]) -> Result<usize, QpackError> {
        let mut done = 0;
        while done < data.len() {
            let mut pos = done;
            match self.apply_one(data, &mut pos) {
                Ok(()) => done = pos,
                Err(Step::Incomplete) => break,
                Err(Step::Fail(why)) => return Err(QpackError::EncoderStream(why)),
            }
        }
        Ok(done)
    }

    /// One encoder instruction (RFC 9204 section 4.3).
    fn apply_one(&mut self, data: &[u8], pos: &mut usize) -> Result<(), Step> {
        let first = data[*pos];
        self.scratch.clear();
        if first & 0x80 != 0 {
            // Insert with Name Reference: 1Txxxxxx, then the value.
            let index = step_int(data, pos, 6)?;
            let value = take_string(data, pos, 7)?;
            if first & 0x40 != 0 {
                let (name, _) = usize::try_from(index)
                    .ok()
                    .and_then(static_table::get)
                    .ok_or(Step::Fail("static index out of range"))?;
                self.scratch.extend_from_slice(name);
            } else {
                let (name, _) = relative(&self.table, index)?;
                self.scratch.extend_from_slice(name);
            }
            let name_len = self.scratch.len();
            self.decode_into_scratch(value)?;
            return self.insert_scratch(name_len);
        }
        if first & 0x40 != 0 {
            // Insert with Literal Name: 01Hxxxxx name, then the value.
            let name = take_string(data, pos, 5)?;
            let value = take_string(data, pos, 7)?;
            self.decode_into_scratch(name)?;
            let name_len = self.scratch.len();
            self.decode_into_scratch(value)?;
            return self.insert_scratch(name_len);
        }
        if first & 0x20 != 0 {
            // Set Dynamic Table Capacity: 001xxxxx.
            let capacity = step_int(data, pos, 5)?;
            let capacity = usize::try_from(capacity)
                .ok()
                .filter(|&c| c <= self.max_capacity)
                .ok_or(Step::Fail("table capacity above our SETTINGS"))?;
            self.table.set_max_size(capacity);
            self.table_used |= capacity > 0;
            return Ok(());
        }
        // Duplicate: 000xxxxx.
        let index = step_int(data, pos, 5)?;
        let (name, value) = relative(&self.table, index)?;
        self.scratch.extend_from_slice(name);
        self.scratch.extend_from_slice(value);
        self.insert_scratch(name.len())
    }

    /// Appends a string literal's bytes to `scratch`, bounded by the table capacity (an
    /// entry that does not fit is an error anyway).
    fn decode_into_scratch(&mut self, (huffman, bytes): Str<'_>) -> Result<(), Step> {
        let room = self.table.max_size().saturating_sub(self.scratch.len());
        if huffman {
            huffman::decode(bytes, &mut self.scratch, room).map_err(|e| match e {
                DecodeError::HeaderListTooLarge => Step::Fail("entry larger than the table"),
                _ => Step::Fail("bad Huffman string"),
            })
        } else if bytes.len() > room {
            Err(Step::Fail("entry larger than the table"))
        } else {
            self.scratch.extend_from_slice(bytes);
            Ok(())
        }
    }

    /// Inserts `scratch` (name, then value from `name_len`) as the newest entry.
    fn insert_scratch(&mut self, name_len: usize) -> Result<(), Step> {
        if self.scratch.len() + ENTRY_OVERHEAD > self.table.max_size() {
            return Err(Step::Fail("entry larger than the table"));
        }
        let (name, value) = self.scratch.split_at(name_len);
        self.table.insert(name, value);
        self.inserted += 1;
        self.table_used = true;
        Ok(())
    }
}

/// The entry an encoder instruction's relative index names (0 = newest).
fn relative(table: &DynamicTable, index: u64) -> Result<(&[u8], &[u8]), Step> {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .ok_or(Step::Fail("dynamic index out of range or evicted"))
}

/// Why an encoder instruction was not applied.
enum Step {
    /// Its end has not arrived yet.
    Incomplete,
    Fail(&'static str),
}

const TRUNCATED: QpackError = QpackError::Decompression("field section truncated");

/// The field lines of one section, decoded against a table snapshot.
struct Lines<'t> {
    table: &'t DynamicTable,
    inserted: u64,
    required: u64,
    base: u64,
    /// The largest absolute index referenced.
    largest_ref: Option<u64>,
}

impl<'t> Lines<'t> {
    fn decode(
        &mut self,
        lines: &[u8],
        buf: &mut BytesMut,
        fields: &mut Vec<HeaderField>,
        limit: usize,
    ) -> Result<Decoded, QpackError> {
        let mut pos = 0;
        let mut size = 0usize;
        while let Some(&first) = lines.get(pos) {
            // Even an empty field costs 32; what is left for this one's name and value.
            let Some(budget) = limit.checked_sub(size + ENTRY_OVERHEAD) else {
                return Ok(Decoded::TooLarge);
            };
            let (name, value, never_indexed) = if first & 0x80 != 0 {
                // Indexed Field Line: 1Txxxxxx.
                let index = int(lines, &mut pos, 6)?;
                let (name, value) = if first & 0x40 != 0 {
                    static_entry(index)?
                } else {
                    self.dynamic(self.pre_base(index)?)?
                };
                (Part::Raw(name), Part::Raw(value), false)
            } else if first & 0x40 != 0 {
                // Literal Field Line with Name Reference: 01NTxxxx, then the value.
                let index = int(lines, &mut pos, 4)?;
                let (name, _) = if first & 0x10 != 0 {
                    static_entry(index)?
                } else {
                    self.dynamic(self.pre_base(index)?)?
                };
                let value = section_string(lines, &mut pos, 7)?;
                (Part::Raw(name), Part::Literal(value), first & 0x20 != 0)
            } else if first & 0x20 != 0 {
                // Literal Field Line with Literal Name: 001NHxxx name, then the value.
                let name = section_string(lines, &mut pos, 3)?;
                let value = section_string(lines, &mut pos, 7)?;
                (Part::Literal(name), Part::Literal(value), first & 0x10 != 0)
            } else if first & 0x10 != 0 {
                // Indexed Field Line with Post-Base Index: 0001xxxx.
                let index = int(lines, &mut pos, 4)?;
                let (name, value) = self.dynamic(self.post_base(index)?)?;
                (Part::Raw(name), Part::Raw(value), false)
            } else {
                // Literal Field Line with Post-Base Name Reference: 0000Nxxx, then the value.
                let index = int(lines, &mut pos, 3)?;
                let (name, _) = self.dynamic(self.post_base(index)?)?;
                let value = section_string(lines, &mut pos, 7)?;
                (Part::Raw(name), Part::Literal(value), first & 0x08 != 0)
            };
            // The size is checked before each copy: a reference to a big entry costs
            // nothing once it no longer fits, and `buf` does not grow for it.
            if name.min_len() + value.min_len() > budget {
                return Ok(Decoded::TooLarge);
            }
            let start = buf.len();
            if !name.put(buf, budget)? {
                return Ok(Decoded::TooLarge);
            }
            let mid = buf.len();
            if !value.put(buf, budget - (mid - start))? {
                return Ok(Decoded::TooLarge);
            }
            size += buf.len() - start + ENTRY_OVERHEAD;
            fields.push(HeaderField {
                name: start..mid,
                value: mid..buf.len(),
                never_indexed,
                // QPACK's static table is another: parse reads the name.
                static_name: 0,
            });
        }
        Ok(Decoded::Done)
    }

    /// Absolute index of a relative index (Base - 1 - index).
    fn pre_base(&self, index: u64) -> Result<u64, QpackError> {
        self.base
            .checked_sub(index + 1)
            .ok_or(QpackError::Decompression("relative index before Base"))
    }

    /// Absolute index of a post-base index (Base + index).
    fn post_base(&self, index: u64) -> Result<u64, QpackError> {
        self.base
            .checked_add(index)
            .ok_or(QpackError::Decompression("post-base index overflow"))
    }

    /// Dynamic entry `abs`: below the Required Insert Count and not evicted.
    fn dynamic(&mut self, abs: u64) -> Result<(&'t [u8], &'t [u8]), QpackError> {
        if abs >= self.required {
            return Err(QpackError::Decompression(
                "reference at or above Required Insert Count",
            ));
        }
        self.largest_ref = Some(self.largest_ref.map_or(abs, |r| r.max(abs)));
        let from_newest = self.inserted - 1 - abs;
        usize::try_from(from_newest)
            .ok()
            .and_then(|i| self.table.get(i))
            .ok_or(QpackError::Decompression("reference to an evicted entry"))
    }
}

fn static_entry(index: u64) -> Result<(&'static [u8], &'static [u8]), QpackError> {
    usize::try_from(index)
        .ok()
        .and_then(static_table::get)
        .ok_or(QpackError::Decompression("static index out of range"))
}

/// A string literal as sent: (Huffman-coded, bytes).
type Str<'a> = (bool, &'a [u8]);

/// Reads a string literal whose length has a `prefix`-bit prefix; the H bit is the bit just
/// above the prefix.
fn read_string<'a>(data: &'a [u8], pos: &mut usize, prefix: u8) -> Result<Str<'a>, DecodeError> {
    let huffman = *data.get(*pos).ok_or(DecodeError::Truncated)? & (1 << prefix) != 0;
    let len = integer::decode(data, pos, prefix)?;
    let end = pos
        .checked_add(len)
        .filter(|&end| end <= data.len())
        .ok_or(DecodeError::Truncated)?;
    let bytes = &data[*pos..end];
    *pos = end;
    Ok((huffman, bytes))
}

fn section_string<'a>(data: &'a [u8], pos: &mut usize, prefix: u8) -> Result<Str<'a>, QpackError> {
    read_string(data, pos, prefix).map_err(section_error)
}

fn take_string<'a>(data: &'a [u8], pos: &mut usize, prefix: u8) -> Result<Str<'a>, Step> {
    read_string(data, pos, prefix).map_err(step_error)
}

/// A field line's name or value: table bytes, or a string literal still to decode.
enum Part<'a> {
    Raw(&'a [u8]),
    Literal(Str<'a>),
}

impl Part<'_> {
    /// The fewest bytes this decodes to (a Huffman string's length is known only once
    /// decoded).
    fn min_len(&self) -> usize {
        match self {
            Part::Raw(bytes) | Part::Literal((false, bytes)) => bytes.len(),
            Part::Literal((true, _)) => 0,
        }
    }

    /// Appends the bytes to `buf`; `false` if they would pass `limit` (nothing is appended
    /// then).
    fn put(self, buf: &mut BytesMut, limit: usize) -> Result<bool, QpackError> {
        match self {
            Part::Literal((true, coded)) => match huffman::decode(coded, buf, limit) {
                Ok(()) => Ok(true),
                Err(DecodeError::HeaderListTooLarge) => Ok(false),
                Err(_) => Err(QpackError::Decompression("bad Huffman string")),
            },
            Part::Raw(bytes) | Part::Literal((false, bytes)) => {
                if bytes.len() > limit {
                    return Ok(false);
                }
                buf.extend_from_slice(bytes);
                Ok(true)
            }
        }
    }
}

fn int(data: &[u8], pos: &mut usize, prefix: u8) -> Result<u64, QpackError> {
    integer::decode(data, pos, prefix)
        .map(|v| v as u64)
        .map_err(section_error)
}

fn step_int(data: &[u8], pos: &mut usize, prefix: u8) -> Result<u64, Step> {
    integer::decode(data, pos, prefix)
        .map(|v| v as u64)
        .map_err(step_error)
}

fn section_error(e: DecodeError) -> QpackError {
    match e {
        DecodeError::Truncated => TRUNCATED,
        DecodeError::IntegerOverflow => QpackError::Decompression("integer overflow"),
        _ => QpackError::Decompression("bad field section"),
    }
}

fn step_error(e: DecodeError) -> Step {
    match e {
        DecodeError::Truncated => Step::Incomplete,
        DecodeError::IntegerOverflow => Step::Fail("integer overflow"),
        _ => Step::Fail("bad instruction"),
    }
}

/// Appends a prefixed integer (values here are stream ids and insert counts).
fn put_int(value: u64, prefix: u8, flags: u8, out: &mut BytesMut) {
    integer::encode(
        usize::try_from(value).unwrap_or(usize::MAX),
        prefix,
        flags,
        out,
    );
}

#[cfg(test)]
pub(crate) mod tests;
