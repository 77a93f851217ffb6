//! Header block encoding (RFC 7541 sections 4.2, 6) with a response-oriented indexing policy.

use bytes::BufMut;

use super::table::{self, DynamicTable, ENTRY_OVERHEAD, STATIC_LEN};
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
    /// Reused for lowercasing names, so mixed-case input costs no allocation per header.
    lower: Vec<u8>,
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
            table: DynamicTable::new(size),
            max_table_size,
            pending_min: (size != DEFAULT_TABLE_SIZE).then_some(size),
            huffman: true,
            lower: Vec::new(),
        }
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

    fn encode_lowercase(
        &mut self,
        name: &[u8],
        value: &[u8],
        indexing: Indexing,
        dst: &mut impl BufMut,
    ) {
        let repr = match indexing {
            Indexing::Auto => auto_repr(name, value, self.table.max_size()),
            Indexing::Incremental => Repr::Incremental,
            Indexing::Without => Repr::Without,
            Indexing::Never => Repr::Never,
        };
        let in_static = table::static_find(name, value);
        if let Some((index, true)) = in_static {
            integer::encode(index, 7, 0x80, dst);
            return;
        }
        let in_dynamic = self
            .table
            .find(name, value)
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
        // Static name indexes are stable, so prefer them over dynamic ones.
        let name_index = in_static.or(in_dynamic).map_or(0, |(i, _)| i);
        match repr {
            Repr::Incremental => integer::encode(name_index, 6, 0x40, dst),
            Repr::Without => integer::encode(name_index, 4, 0x00, dst),
            Repr::Never => integer::encode(name_index, 4, 0x10, dst),
        }
        if name_index == 0 {
            self.put_string(name, dst);
        }
        self.put_string(value, dst);
        if repr == Repr::Incremental {
            self.table.insert(name, value);
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repr {
    Incremental,
    Without,
    Never,
}

fn auto_repr(name: &[u8], value: &[u8], table_size: usize) -> Repr {
    match name {
        b"authorization" | b"proxy-authorization" | b"set-cookie" => Repr::Never,
        b"cookie" if value.len() < 20 => Repr::Never,
        b"content-length"
        | b"etag"
        | b"last-modified"
        | b"content-range"
        | b"age"
        | b"expires"
        | b"location"
        | b":path"
        | b"if-none-match"
        | b"if-modified-since"
        | b"if-match"
        | b"if-unmodified-since"
        | b"if-range"
        | b"range" => Repr::Without,
        // Indexing a field that big would flush most of the table for one entry.
        _ if name.len() + value.len() + ENTRY_OVERHEAD > table_size / 2 => Repr::Without,
        _ => Repr::Incremental,
    }
}
