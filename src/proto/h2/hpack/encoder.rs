//! Header block encoding (RFC 7541 sections 4.2, 6) with a response-oriented indexing policy.

use bytes::BufMut;

use super::table::{self, DynamicTable, Hashes, StaticName, ENTRY_OVERHEAD, STATIC_LEN};
use super::{huffman, integer, DEFAULT_TABLE_SIZE};

/// How to represent a field that is not already in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexing {
    /// Decide by name (see [`Encoder`]).
    Auto,
    /// Literal with incremental indexing: later blocks can refer to it by index.
    Incremental,
    /// Literal without indexing: for values that change every time.
    Without,
    /// Literal never indexed: sensitive values; intermediaries must not index them either.
    Never,
}

/// The encoding half of one HTTP/2 connection's HPACK context.
///
/// [`Indexing::Auto`] picks, by name:
/// - never indexed: `authorization`, `proxy-authorization`, `set-cookie`, and `cookie`
///   values under 20 bytes (guessable by a compression oracle, RFC 7541 section 7.1.3);
/// - without indexing: values that change per message (`content-length`, `etag`,
///   `last-modified`, `content-range`, `age`, `expires`, `location`, `:path`, conditional
///   request headers) and any field taking more than half the table;
/// - incremental indexing: everything else (`server`, `content-type`, `cache-control`, `vary`,
///   ...), including `date`, which changes only once a second.
///
/// Exact matches in the static or dynamic table are always sent as one index.
#[derive(Debug)]
pub struct Encoder {
    table: DynamicTable,
    /// Our own cap on the table size, whatever the peer allows.
    max_table_size: usize,
    /// Smallest table size since the last block, when it changed (section 4.2).
    pending_min: Option<usize>,
    huffman: bool,
    /// Huffman-code values sent as literals without indexing (or never indexed) too.
    huffman_unindexed: bool,
    /// Reused for lowercasing names, so mixed-case input costs no allocation per header.
    lower: Vec<u8>,
    // For the static names responses carry most (see [`newest_slot`]), the table keeps a
    // note of the insertion number (its low 16 bits, plus one; 0 for none) of the newest
    // entry with that name (`DynamicTable::newest_note`): a response field whose value is the
    // one sent last under its name is found with one comparison, no hash.
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new(DEFAULT_TABLE_SIZE)
    }
}

impl Encoder {
    /// An encoder that never uses more than `max_table_size` bytes of dynamic table. The
    /// peer's decoder starts at [`DEFAULT_TABLE_SIZE`]; a smaller cap is signalled in the first
    /// block.
    pub fn new(max_table_size: usize) -> Encoder {
        let size = max_table_size.min(DEFAULT_TABLE_SIZE);
        Encoder {
            table: DynamicTable::indexed(size),
            max_table_size,
            pending_min: (size != DEFAULT_TABLE_SIZE).then_some(size),
            huffman: true,
            huffman_unindexed: true,
            lower: Vec::new(),
        }
    }

    /// Frees the table's spare capacity (see `DynamicTable::shrink_to_fit`)
    /// and the scratch space for lowercasing names.
    pub fn shrink_to_fit(&mut self) {
        self.table.shrink_to_fit();
        self.lower = Vec::new();
    }

    /// Empties the dynamic table and frees it, for a connection going idle for long: the
    /// next block starts with a size update to 0 (which empties the peer's table too) and
    /// back, and indexes its fields afresh. A no-op when the table is empty.
    pub fn forget(&mut self) {
        let size = self.table.max_size();
        if self.table.size() == 0 {
            return;
        }
        self.table.set_max_size(0);
        self.table.set_max_size(size);
        self.table.shrink_to_fit();
        self.pending_min = Some(0);
    }

    /// Applies the peer's SETTINGS_HEADER_TABLE_SIZE. A resulting change of our table size is
    /// signalled at the start of the next block (the smallest size reached first, if it went
    /// down and up again).
    pub fn set_peer_max_table_size(&mut self, size: usize) {
        let size = size.min(self.max_table_size);
        if size == self.table.max_size() && self.pending_min.is_none() {
            return;
        }
        self.pending_min = Some(self.pending_min.map_or(size, |m| m.min(size)));
        self.table.set_max_size(size);
    }

    /// Turns Huffman coding on (the default: used only when it is shorter) or off.
    pub fn set_huffman(&mut self, on: bool) {
        self.huffman = on;
    }

    /// Whether the next block starts with a table size update (the table's size changed).
    #[inline]
    pub fn owes_size_update(&self) -> bool {
        self.pending_min.is_some()
    }

    /// Insertions into the dynamic table so far (wrapping): while it stays the same and no
    /// size update is owed, the table is as it was, and so is what each index names.
    #[inline]
    pub fn insertions(&self) -> u32 {
        self.table.insertions()
    }

    /// Whether a value sent as a literal that no table keeps (without indexing, never
    /// indexed) is Huffman-coded (the default) or sent as it is. A server's own such values
    /// (an ETag, a length) are sent once per answer: coding one costs about 20 instructions
    /// a byte to save a quarter of its bytes, a few bytes an answer.
    pub fn set_huffman_unindexed(&mut self, on: bool) {
        self.huffman_unindexed = on;
    }

    /// Starts a header block written to `dst`: emits any pending table size update, then
    /// takes fields through the returned [`BlockEncoder`].
    pub fn block<'a, B: BufMut>(&'a mut self, dst: &'a mut B) -> BlockEncoder<'a, B> {
        if let Some(min) = self.pending_min.take() {
            let size = self.table.max_size();
            if min < size {
                integer::encode(min, 5, 0x20, dst);
            }
            integer::encode(size, 5, 0x20, dst);
        }
        BlockEncoder { enc: self, dst }
    }

    /// Encodes a whole block of `(name, value)` pairs with [`Indexing::Auto`].
    pub fn encode<'h, I, B>(&mut self, headers: I, dst: &mut B)
    where
        I: IntoIterator<Item = (&'h [u8], &'h [u8])>,
        B: BufMut,
    {
        let mut block = self.block(dst);
        for (name, value) in headers {
            block.field(name, value);
        }
    }

    fn encode_field(
        &mut self,
        name: &[u8],
        value: &[u8],
        indexing: Indexing,
        dst: &mut impl BufMut,
    ) {
        if let Some(index) = table::static_name_nocase(name) {
            self.encode_static_name(index, value, indexing, dst);
            return;
        }
        if name.iter().any(u8::is_ascii_uppercase) {
            let mut lower = std::mem::take(&mut self.lower);
            lower.clear();
            lower.extend(name.iter().map(u8::to_ascii_lowercase));
            self.encode_lowercase(&lower, value, indexing, dst);
            self.lower = lower;
        } else {
            self.encode_lowercase(name, value, indexing, dst);
        }
    }

    /// A field whose name is not in the static table.
    fn encode_lowercase(
        &mut self,
        name: &[u8],
        value: &[u8],
        indexing: Indexing,
        dst: &mut impl BufMut,
    ) {
        let hashes = Hashes::of(name, value);
        let repr = match indexing {
            Indexing::Auto => auto_repr(None, name, value, self.table.max_size()),
            Indexing::Incremental => Repr::Incremental,
            Indexing::Without => Repr::Without,
            Indexing::Never => Repr::Never,
        };
        let in_dynamic = self
            .table
            .find_hashed(name, value, hashes, true)
            .map(|(i, exact)| (STATIC_LEN + 1 + i, exact));
        match in_dynamic {
            // A sensitive value is not sent as a reference even if some earlier block
            // indexed it: the representation itself carries the "never indexed" marker.
            Some((index, true)) if repr != Repr::Never => {
                integer::encode(index, 7, 0x80, dst);
                return;
            }
            _ => {}
        }
        let name_index = in_dynamic.map_or(0, |(i, _)| i);
        match repr {
            Repr::Incremental => integer::encode(name_index, 6, 0x40, dst),
            Repr::Without => integer::encode(name_index, 4, 0x00, dst),
            Repr::Never => integer::encode(name_index, 4, 0x10, dst),
        }
        if name_index == 0 {
            self.put_string(name, dst);
        }
        self.put_value(value, repr, dst);
        if repr == Repr::Incremental {
            self.table.insert_hashed(name, value, hashes);
            self.forget_newest();
        }
    }

    /// A field whose name is the static table's at `index` (the first of its name): no
    /// name to lowercase or hash, and the newest entry of the name looked at before any hash.
    fn encode_static_name(
        &mut self,
        index: usize,
        value: &[u8],
        indexing: Indexing,
        dst: &mut impl BufMut,
    ) {
        if let Some(exact) = table::static_value(index, value) {
            integer::encode(exact, 7, 0x80, dst);
            return;
        }
        let Some((name, _)) = table::static_entry(index) else {
            return;
        };
        let repr = match indexing {
            Indexing::Auto => auto_repr(Some((index, false)), name, value, self.table.max_size()),
            Indexing::Incremental => Repr::Incremental,
            Indexing::Without => Repr::Without,
            Indexing::Never => Repr::Never,
        };
        // A sensitive value is not sent as a reference even if some earlier block indexed
        // it: the representation itself carries the "never indexed" marker.
        if repr == Repr::Never {
            self.put_literal(index, value, repr, dst);
            return;
        }
        let slot = newest_slot(index);
        if let Some(slot) = slot {
            if let (Some(seq), Some(last)) = (
                self.table.newest_note(slot).checked_sub(1),
                self.table.newest_seq(),
            ) {
                // Its age: below 2^15, see `Encoder::forget_newest`.
                match self
                    .table
                    .get_with_index((last as u16).wrapping_sub(seq).into())
                {
                    // The entry of that number, with that value (an entry of another name
                    // has another number: see `Encoder::forget_newest`).
                    Some((at, _, v)) if v == value => {
                        integer::encode(STATIC_LEN + 1 + at, 7, 0x80, dst);
                        return;
                    }
                    _ => {}
                }
            }
        }
        // A value not worth indexing is looked for only as the newest of its name: one
        // indexed by an earlier block (a repeat's ETag) is that, and the hash is saved.
        if repr == Repr::Without && slot.is_some() {
            self.put_literal(index, value, repr, dst);
            return;
        }
        let hashes = Hashes::of(name, value);
        if let Some((at, true)) = self.table.find_hashed(name, value, hashes, false) {
            if let Some(slot) = slot {
                let note = (self.table.seq_at(at) as u16).wrapping_add(1);
                self.table.set_newest_note(slot, note);
            }
            integer::encode(STATIC_LEN + 1 + at, 7, 0x80, dst);
            return;
        }
        self.put_literal(index, value, repr, dst);
        if repr == Repr::Incremental {
            self.table.insert_hashed(name, value, hashes);
            self.forget_newest();
            if let (Some(slot), Some(seq)) = (slot, self.table.newest_seq()) {
                self.table
                    .set_newest_note(slot, (seq as u16).wrapping_add(1));
            }
        }
    }

    /// After each insertion: the notes keep 16 bits of each insertion number, which wrap
    /// every 2^16 insertions, when a number kept could name a newer entry of another name.
    /// Forgetting them all every 2^15 insertions keeps each younger than that, so a number
    /// still in the table names the entry it was kept for.
    fn forget_newest(&mut self) {
        if self.table.newest_seq().is_some_and(|seq| seq & 0x7fff == 0) {
            self.table.forget_newest_notes();
        }
    }

    /// A literal field with the static name at `index` (the table is the caller's business).
    fn put_literal(&self, index: usize, value: &[u8], repr: Repr, dst: &mut impl BufMut) {
        match repr {
            Repr::Incremental => integer::encode(index, 6, 0x40, dst),
            Repr::Without => integer::encode(index, 4, 0x00, dst),
            Repr::Never => integer::encode(index, 4, 0x10, dst),
        }
        self.put_value(value, repr, dst);
    }

    /// A literal's value: Huffman-coded unless it is one no table keeps and
    /// `huffman_unindexed` is off.
    #[inline(always)]
    fn put_value(&self, value: &[u8], repr: Repr, dst: &mut impl BufMut) {
        if repr == Repr::Incremental || self.huffman_unindexed {
            self.put_string(value, dst);
        } else {
            integer::encode(value.len(), 7, 0x00, dst);
            dst.put_slice(value);
        }
    }

    fn put_string(&self, s: &[u8], dst: &mut impl BufMut) {
        if self.huffman {
            let len = huffman::encoded_len(s);
            if len < s.len() {
                integer::encode(len, 7, 0x80, dst);
                huffman::encode(s, dst);
                return;
            }
        }
        integer::encode(s.len(), 7, 0x00, dst);
        dst.put_slice(s);
    }
}

/// Writes the fields of one header block; see [`Encoder::block`].
pub struct BlockEncoder<'a, B> {
    enc: &'a mut Encoder,
    dst: &'a mut B,
}

impl<B: BufMut> BlockEncoder<'_, B> {
    /// Adds a field with [`Indexing::Auto`]. Names are lowercased if needed.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        self.enc.encode_field(name, value, Indexing::Auto, self.dst);
    }

    /// Adds a field with an explicit representation.
    pub fn field_with(&mut self, name: &[u8], value: &[u8], indexing: Indexing) {
        self.enc.encode_field(name, value, indexing, self.dst);
    }

    /// Adds a field under a static name the caller has looked up already.
    pub fn static_field(&mut self, name: StaticName, value: &[u8], indexing: Indexing) {
        self.enc
            .encode_static_name(name.index(), value, indexing, self.dst);
    }
}

impl BlockEncoder<'_, Vec<u8>> {
    /// Appends bytes encoded before (fields a caller kept, valid while the table is as it
    /// was when they were encoded: see [`Encoder::insertions`]).
    #[inline]
    pub fn raw(&mut self, encoded: &[u8]) {
        self.dst.extend_from_slice(encoded);
    }

    /// Bytes in the destination so far.
    #[inline]
    pub fn written(&self) -> usize {
        self.dst.len()
    }

    /// [`Encoder::insertions`].
    #[inline]
    pub fn insertions(&self) -> u32 {
        self.enc.insertions()
    }
}

/// The slot of the newest-entry note (`DynamicTable::newest_note`) of the static name at
/// `index`: the names a response carries, which come back in every response of a connection.
fn newest_slot(index: usize) -> Option<usize> {
    Some(match index {
        8 => 0,   // :status
        54 => 1,  // server
        33 => 2,  // date
        31 => 3,  // content-type
        44 => 4,  // last-modified
        34 => 5,  // etag
        18 => 6,  // accept-ranges
        24 => 7,  // cache-control
        59 => 8,  // vary
        26 => 9,  // content-encoding
        28 => 10, // content-length
        36 => 11, // expires
        46 => 12, // location
        45 => 13, // link
        20 => 14, // access-control-allow-origin
        56 => 15, // strict-transport-security
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repr {
    Incremental,
    Without,
    Never,
}

/// The representation [`Indexing::Auto`] picks; `in_static` is the static table's entry for
/// the name (every name the policy singles out is there).
fn auto_repr(
    in_static: Option<(usize, bool)>,
    name: &[u8],
    value: &[u8],
    table_size: usize,
) -> Repr {
    match in_static.map(|(index, _)| index) {
        // authorization, proxy-authorization, set-cookie
        Some(23 | 49 | 55) => Repr::Never,
        // cookie
        Some(32) if value.len() < 20 => Repr::Never,
        // :path, if-match, if-modified-since, if-none-match, if-range, if-unmodified-since,
        // age, content-length, content-range, etag, expires, last-modified, location, range
        Some(4 | 39..=43 | 21 | 28 | 30 | 34 | 36 | 44 | 46 | 50) => Repr::Without,
        // Indexing a field that big would flush most of the table for one entry.
        _ if name.len() + value.len() + ENTRY_OVERHEAD > table_size / 2 => Repr::Without,
        _ => Repr::Incremental,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DecodeError, Decoder};
    use super::*;
    use bytes::BytesMut;

    type Field = (Vec<u8>, Vec<u8>, bool);

    fn decode(dec: &mut Decoder, block: &[u8]) -> Result<Vec<Field>, DecodeError> {
        let mut buf = BytesMut::new();
        let mut fields = Vec::new();
        dec.decode(block, &mut buf, |f| fields.push(f))?;
        Ok(fields
            .into_iter()
            .map(|f| (buf[f.name].to_vec(), buf[f.value].to_vec(), f.never_indexed))
            .collect())
    }

    fn encode(enc: &mut Encoder, fields: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        enc.encode(fields.iter().copied(), &mut out);
        out
    }

    #[test]
    fn a_forgotten_table_is_emptied_on_both_sides() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(DEFAULT_TABLE_SIZE, 16 * 1024);
        let fields: &[(&[u8], &[u8])] = &[(b"content-type", b"text/plain"), (b"etag", b"\"x\"")];
        // Indexed: `content-type`; not: the `etag`, whose values rarely repeat.
        let first = encode(&mut enc, fields);
        assert_eq!(decode(&mut dec, &first).unwrap().len(), 2);
        assert_eq!(encode(&mut enc, fields)[0], 0xbe, "indexed");
        enc.forget();
        assert_eq!(enc.table.size(), 0);
        let after = encode(&mut enc, fields);
        // A size update to 0 and back to 4096, then the fields as at first.
        assert_eq!(after[..4], [0x20, 0x3f, 0xe1, 0x1f]);
        assert_eq!(after[4..], first[..]);
        let got = decode(&mut dec, &after).unwrap();
        assert_eq!(got[1], (b"etag".to_vec(), b"\"x\"".to_vec(), false));
        assert_eq!(encode(&mut enc, fields)[0], 0xbe, "indexed again");
        enc.forget();
        enc.forget();
        assert_eq!(encode(&mut enc, &[]), [0x20, 0x3f, 0xe1, 0x1f]);
        assert_eq!(
            encode(&mut enc, &[]),
            [0u8; 0],
            "an empty table is not forgotten"
        );
        enc.forget();
        assert_eq!(encode(&mut enc, &[]), [0u8; 0]);
    }

    #[test]
    fn static_status_codes_are_one_byte() {
        let mut enc = Encoder::default();
        for (status, byte) in [
            (&b"200"[..], 0x88),
            (b"204", 0x89),
            (b"206", 0x8a),
            (b"304", 0x8b),
            (b"400", 0x8c),
            (b"404", 0x8d),
            (b"500", 0x8e),
        ] {
            assert_eq!(encode(&mut enc, &[(b":status", status)]), [byte]);
        }
        // Other codes use the static name and get indexed for next time.
        let first = encode(&mut enc, &[(b":status", b"302")]);
        assert_eq!(first[0], 0x48);
        assert_eq!(encode(&mut enc, &[(b":status", b"302")]), [0xbe]);
    }

    #[test]
    fn names_are_lowercased() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096, 1 << 16);
        let block = encode(
            &mut enc,
            &[(b"Content-Type", b"Text/HTML"), (b"X-Foo", b"1")],
        );
        let fields = decode(&mut dec, &block).unwrap();
        assert_eq!(fields[0].0, b"content-type");
        assert_eq!(fields[0].1, b"Text/HTML");
        assert_eq!(fields[1].0, b"x-foo");
        // The lowercase form is what got indexed.
        assert_eq!(encode(&mut enc, &[(b"content-type", b"Text/HTML")]), [0xbf]);
    }

    #[test]
    fn repeated_response_headers_shrink_to_indexes() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096, 1 << 16);
        let response =
            |len: &'static [u8], etag: &'static [u8]| -> Vec<(&'static [u8], &'static [u8])> {
                vec![
                    (b":status", b"200"),
                    (b"server", b"spate"),
                    (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"cache-control", b"max-age=3600"),
                    (b"content-length", len),
                    (b"etag", etag),
                    (b"last-modified", b"Sun, 20 Oct 2013 10:00:00 GMT"),
                ]
            };
        let first = encode(&mut enc, &response(b"1234", b"\"abc\""));
        decode(&mut dec, &first).unwrap();
        // server, date, content-type and cache-control are indexed; the rest is not.
        let indexed = [
            (b"server".len(), b"spate".len()),
            (4, 29),
            (12, 24),
            (13, 12),
        ];
        let want: usize = indexed.iter().map(|(n, v)| n + v + 32).sum();
        assert_eq!(dec.table_size(), want);

        let second = encode(&mut enc, &response(b"99", b"\"def\""));
        assert!(
            second.len() < first.len() / 2,
            "{} vs {}",
            second.len(),
            first.len()
        );
        // :status, server, date, content-type, cache-control: one byte each.
        assert_eq!(&second[..5], [0x88, 0xc1, 0xc0, 0xbf, 0xbe]);
        let fields = decode(&mut dec, &second).unwrap();
        assert_eq!(
            fields[5],
            (b"content-length".to_vec(), b"99".to_vec(), false)
        );
        assert_eq!(dec.table_size(), want);
    }

    #[test]
    fn static_names_in_any_case_use_their_index_and_find_their_newest_value() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096, 1 << 16);
        let mut out = Vec::new();
        {
            let mut b = enc.block(&mut out);
            b.field(b"Content-Type", b"text/html");
            b.static_field(
                StaticName::DATE,
                b"Mon, 21 Oct 2013 20:13:21 GMT",
                Indexing::Auto,
            );
        }
        // Static name index 31 with incremental indexing.
        assert_eq!(out[0], 0x40 | 31);
        let fields = decode(&mut dec, &out).unwrap();
        assert_eq!(fields[0].0, b"content-type");
        // Both values again, in any case of the name: one index byte each.
        let again = encode(
            &mut enc,
            &[
                (b"CONTENT-TYPE", b"text/html"),
                (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
            ],
        );
        assert_eq!(again, [0xbf, 0xbe]);
        // A value other than the newest of its name is still found through the hash.
        encode(&mut enc, &[(b"content-type", b"image/png")]);
        assert_eq!(encode(&mut enc, &[(b"content-type", b"text/html")]), [0xc0]);
        assert_eq!(encode(&mut enc, &[(b"content-type", b"image/png")]), [0xbe]);
        // An empty value of a static name is the static entry.
        assert_eq!(encode(&mut enc, &[(b"Content-Type", b"")]), [0x80 | 31]);
    }

    #[test]
    fn the_newest_entries_are_forgotten_before_their_numbers_wrap() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096, 1 << 16);
        // The next insertions are numbers 2^15 - 2, 2^15 - 1 and 2^15.
        enc.table.set_inserted((1 << 15) - 2);
        let a = encode(&mut enc, &[(b"content-type", b"text/html"), (b"x-a", b"1")]);
        decode(&mut dec, &a).unwrap();
        assert!(enc.table.has_newest_notes());
        let b = encode(&mut enc, &[(b"x-b", b"2")]);
        decode(&mut dec, &b).unwrap();
        assert!(!enc.table.has_newest_notes(), "forgotten at 2^15");
        // Still found, through the hash.
        let c = encode(&mut enc, &[(b"content-type", b"text/html")]);
        assert_eq!(c, [0xc0]);
        assert_eq!(decode(&mut dec, &c).unwrap()[0].1, b"text/html");
    }

    #[test]
    fn a_value_not_worth_indexing_is_found_if_it_is_the_newest_of_its_name() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096, 1 << 16);
        let mut out = Vec::new();
        enc.block(&mut out)
            .static_field(StaticName::CONTENT_LENGTH, b"4096", Indexing::Without);
        // Literal without indexing, static name 28 (4-bit prefix: 15 + 13).
        assert_eq!(out[..2], [0x0f, 0x0d]);
        decode(&mut dec, &out).unwrap();
        assert_eq!(enc.table.size(), 0);
        let mut out = Vec::new();
        enc.block(&mut out).static_field(
            StaticName::CONTENT_LENGTH,
            b"4096",
            Indexing::Incremental,
        );
        assert_eq!(out[0], 0x40 | 28);
        decode(&mut dec, &out).unwrap();
        let mut out = Vec::new();
        enc.block(&mut out)
            .static_field(StaticName::CONTENT_LENGTH, b"4096", Indexing::Without);
        assert_eq!(out, [0xbe], "the newest content-length");
        let mut out = Vec::new();
        enc.block(&mut out)
            .static_field(StaticName::CONTENT_LENGTH, b"99", Indexing::Without);
        let got = decode(&mut dec, &out).unwrap();
        assert_eq!(got[0], (b"content-length".to_vec(), b"99".to_vec(), false));
        // Never indexed stays a literal even when the table has the value.
        let mut out = Vec::new();
        enc.block(&mut out)
            .static_field(StaticName::CONTENT_LENGTH, b"4096", Indexing::Never);
        assert_eq!(out[..2], [0x1f, 0x0d]);
        assert!(decode(&mut dec, &out).unwrap()[0].2);
    }

    #[test]
    fn sensitive_fields_are_never_indexed() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096, 1 << 16);
        let block = encode(
            &mut enc,
            &[
                (b"authorization", b"Basic dXNlcjpwYXNz"),
                (b"set-cookie", b"id=42"),
                (b"cookie", b"a=1"),
                (b"cookie", b"session=a-long-cookie-value-1234"),
            ],
        );
        let fields = decode(&mut dec, &block).unwrap();
        let flags: Vec<bool> = fields.iter().map(|f| f.2).collect();
        assert_eq!(flags, [true, true, true, false]);
        // Only the long cookie entered the table.
        assert_eq!(dec.table_size(), 6 + 32 + 32);
        // An explicit request wins over the policy.
        let mut out = Vec::new();
        enc.block(&mut out)
            .field_with(b"x-secret", b"v", Indexing::Never);
        assert_eq!(out[0], 0x10);
        assert!(decode(&mut dec, &out).unwrap()[0].2);
    }

    #[test]
    fn the_policy_by_static_index_names_the_right_fields() {
        let repr = |name: &[u8], value: &[u8]| {
            auto_repr(table::static_find(name, value), name, value, 4096)
        };
        for name in [&b"authorization"[..], b"proxy-authorization", b"set-cookie"] {
            assert_eq!(repr(name, b"x"), Repr::Never);
        }
        assert_eq!(repr(b"cookie", b"short"), Repr::Never);
        assert_eq!(
            repr(b"cookie", b"a-cookie-longer-than-20"),
            Repr::Incremental
        );
        for name in [
            &b"content-length"[..],
            b"etag",
            b"last-modified",
            b"content-range",
            b"age",
            b"expires",
            b"location",
            b":path",
            b"if-none-match",
            b"if-modified-since",
            b"if-match",
            b"if-unmodified-since",
            b"if-range",
            b"range",
        ] {
            assert_eq!(repr(name, b"x"), Repr::Without, "{name:?}");
        }
        for name in [
            &b"server"[..],
            b"content-type",
            b"date",
            b"x-custom",
            b":status",
        ] {
            assert_eq!(repr(name, b"x"), Repr::Incremental, "{name:?}");
        }
        assert_eq!(repr(b"x-custom", &[b'x'; 3000]), Repr::Without);
    }

    #[test]
    fn large_values_are_not_indexed() {
        let mut enc = Encoder::default();
        let csp = vec![b'x'; 3000];
        let block = encode(&mut enc, &[(b"content-security-policy", &csp)]);
        assert_eq!(block[0], 0x00);
        assert_eq!(enc.table.size(), 0);
    }

    #[test]
    fn huffman_only_when_shorter() {
        let mut enc = Encoder::default();
        let mut out = Vec::new();
        enc.block(&mut out)
            .field_with(b"x", b"www.example.com", Indexing::Without);
        // Name "x" is 7 bits Huffman-coded, still one byte: sent raw. The value shrinks.
        assert_eq!(&out[..3], [0x00, 0x01, b'x']);
        assert_eq!(out[3], 0x80 | 12);
        let mut out = Vec::new();
        enc.block(&mut out)
            .field_with(b"x", b"\x00\x01", Indexing::Without);
        assert_eq!(&out[3..], [0x02, 0x00, 0x01]);
    }

    #[test]
    fn unindexed_values_may_go_without_huffman() {
        let mut enc = Encoder::default();
        enc.set_huffman_unindexed(false);
        let mut dec = Decoder::new(4096, 1 << 16);
        let mut out = Vec::new();
        {
            let mut b = enc.block(&mut out);
            b.static_field(StaticName::ETAG, b"\"6b0a8d1f-1000\"", Indexing::Without);
            b.field_with(b"x-a", b"www.example.com", Indexing::Never);
            b.field_with(b"content-type", b"text/html", Indexing::Incremental);
        }
        // ETag (static 34, 4-bit prefix 15 + 19): a raw 15-byte string.
        assert_eq!(out[..3], [0x0f, 0x13, 15]);
        assert_eq!(&out[3..18], b"\"6b0a8d1f-1000\"");
        // x-a, never indexed: a literal name (raw: Huffman would not be shorter), a raw value.
        assert_eq!(out[18..23], [0x10, 0x03, b'x', b'-', b'a']);
        assert_eq!(out[23], 15);
        assert_eq!(&out[24..39], b"www.example.com");
        // An indexed literal is still Huffman-coded (static name 31, incremental).
        assert_eq!(out[39], 0x40 | 31);
        assert_ne!(out[40] & 0x80, 0);
        let got = decode(&mut dec, &out).unwrap();
        assert_eq!(got[0].1, b"\"6b0a8d1f-1000\"");
        assert_eq!(got[1].1, b"www.example.com");
        assert!(got[1].2);
        assert_eq!(got[2].1, b"text/html");
    }

    #[test]
    fn table_size_updates_follow_peer_settings() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096, 1 << 16);
        let fields: &[(&[u8], &[u8])] = &[(b"server", b"spate")];
        decode(&mut dec, &encode(&mut enc, fields)).unwrap();
        // Same value again: nothing to signal.
        enc.set_peer_max_table_size(4096);
        assert_eq!(encode(&mut enc, fields), [0xbe]);

        // Peer lowers to 0: the next block starts with an update to 0, and the entry is gone.
        enc.set_peer_max_table_size(0);
        dec.set_max_table_size(0);
        let block = encode(&mut enc, fields);
        assert_eq!(block[0], 0x20);
        assert_eq!(decode(&mut dec, &block).unwrap()[0].1, b"spate");
        assert_eq!(dec.table_size(), 0);

        // Down to 100 then up to 8192 between blocks: signal 100, then our own cap (4096).
        enc.set_peer_max_table_size(100);
        enc.set_peer_max_table_size(8192);
        dec.set_max_table_size(8192);
        let block = encode(&mut enc, fields);
        assert_eq!(&block[..4], [0x3f, 0x45, 0x3f, 0xe1]);
        decode(&mut dec, &block).unwrap();
        assert_eq!(
            decode(&mut dec, &encode(&mut enc, fields)).unwrap()[0].1,
            b"spate"
        );
    }

    #[test]
    fn small_cap_is_announced_in_first_block() {
        let mut enc = Encoder::new(0);
        let block = encode(&mut enc, &[(b"server", b"spate")]);
        assert_eq!(block[0], 0x20);
        let mut dec = Decoder::new(4096, 1 << 16);
        decode(&mut dec, &block).unwrap();
        assert_eq!(dec.table_size(), 0);
        // No further updates.
        assert_ne!(encode(&mut enc, &[(b"server", b"spate")])[0], 0x20);
    }

    #[test]
    fn long_round_trip_keeps_tables_in_sync() {
        let mut enc = Encoder::new(512);
        let mut dec = Decoder::new(4096, 1 << 20);
        for i in 0..2000usize {
            let value = format!("value-{}", i % 37);
            let name = format!("x-header-{}", i % 11);
            let date = format!("Mon, 21 Oct 2013 20:{:02}:{:02} GMT", i / 60 % 60, i % 60);
            let fields: Vec<(&[u8], &[u8])> = vec![
                (b":status", b"200"),
                (name.as_bytes(), value.as_bytes()),
                (b"date", date.as_bytes()),
                (b"content-length", value.as_bytes()),
            ];
            if i % 500 == 499 {
                enc.set_peer_max_table_size(64 * (i % 7));
                dec.set_max_table_size(64 * (i % 7));
            }
            let got = decode(&mut dec, &encode(&mut enc, &fields)).unwrap();
            let got: Vec<(&[u8], &[u8])> = got.iter().map(|(n, v, _)| (&n[..], &v[..])).collect();
            assert_eq!(got, fields, "block {i}");
            assert_eq!(dec.table_size(), enc.table.size());
        }
    }
}
