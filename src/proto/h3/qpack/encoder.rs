//! The QPACK encoder for our responses and trailers: static table references and literals,
//! never the dynamic table, so a section never blocks the peer and needs no acknowledgment.

use bytes::BufMut;

use super::memo::{self, LineMemo};
use super::section_memo::SectionMemo;
use super::{sensitive, static_table};
use crate::proto::h2::hpack::{huffman, integer};

/// Encodes field sections. It holds no connection's state (its sections never use the
/// dynamic table), only scratch buffers and memos of what it made: one encoder serves every
/// connection of a worker's endpoint, so that their answers share the memos.
#[derive(Debug, Default)]
pub struct Encoder {
    lower: Vec<u8>,
    line: Vec<u8>,
    /// Field lines made recently (`memo.rs`).
    lines: LineMemo,
    /// The last response section made, whole (`section_memo.rs`), for the session to use.
    pub(crate) last_section: SectionMemo,
}

impl Encoder {
    /// Appends an encoded field section for `fields`: the prefix (Required Insert Count 0,
    /// Base 0), then one field line per field. Names are lowercased; sensitive fields carry
    /// the N bit so intermediaries keep them out of their tables.
    pub fn encode_section<'a, I>(&mut self, fields: I, out: &mut impl BufMut)
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        put_prefix(out);
        for (name, value) in fields {
            self.field(name, value, out);
        }
    }

    /// Appends one field line: the memo has most of them (`memo.rs`), except those of a
    /// validator or length, which differ from one resource to the next.
    pub fn field(&mut self, name: &[u8], value: &[u8], out: &mut impl BufMut) {
        if let Some(index) = per_resource_name(name) {
            put_name_ref(index, value, out);
            return;
        }
        if name.len() + value.len() > memo::MAX_FIELD {
            self.encode_field(name, value, out);
            return;
        }
        if let Some(line) = self.lines.get(name, value) {
            out.put_slice(line);
            return;
        }
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let keep = self.encode_field(name, value, &mut line);
        out.put_slice(&line);
        if keep {
            self.lines.put(name, value, &line);
        }
        self.line = line;
    }

    /// Encodes one field line; false if the field is sensitive (not to be kept anywhere).
    fn encode_field(&mut self, name: &[u8], value: &[u8], out: &mut impl BufMut) -> bool {
        if name.iter().any(u8::is_ascii_uppercase) {
            let mut lower = std::mem::take(&mut self.lower);
            lower.clear();
            lower.extend(name.iter().map(u8::to_ascii_lowercase));
            let keep = put_field(&lower, value, out);
            self.lower = lower;
            keep
        } else {
            put_field(name, value, out)
        }
    }
}

/// The section prefix of a section that uses no dynamic table entry.
pub fn put_prefix(out: &mut impl BufMut) {
    out.put_slice(&[0, 0]);
}

/// Appends the `:status` field line: one byte for the statuses the static table has.
pub fn put_status(status: u16, out: &mut impl BufMut) {
    let s = status.min(999);
    let digits = [
        b'0' + (s / 100) as u8,
        b'0' + (s / 10 % 10) as u8,
        b'0' + (s % 10) as u8,
    ];
    let _ = put_field(b":status", &digits, out);
}

/// The static-table entry of the (lowercase) name of a field whose value differs from one
/// resource to the next: looking such a line up in the memo would miss, and keeping it would
/// only push out a line that repeats. None of them is sensitive.
#[inline]
fn per_resource_name(name: &[u8]) -> Option<usize> {
    match name {
        b"content-length" => Some(static_table::CONTENT_LENGTH),
        b"etag" => Some(static_table::ETAG),
        b"last-modified" => Some(static_table::LAST_MODIFIED),
        _ => None,
    }
}

/// Literal Field Line with Name Reference to static entry `index`, or the Indexed Field Line
/// when that entry holds `value` too (`content-length: 0`).
fn put_name_ref(index: usize, value: &[u8], out: &mut impl BufMut) {
    if static_table::get(index).is_some_and(|(_, v)| v == value) {
        // Indexed Field Line, static: 11xxxxxx.
        integer::encode(index, 6, 0xc0, out);
        return;
    }
    // Literal Field Line with Name Reference, static, N clear: 0101xxxx.
    integer::encode(index, 4, 0x50, out);
    put_string(value, 7, 0, out);
}

/// Appends the field line of a lowercase `name`; false if the field is sensitive.
fn put_field(name: &[u8], value: &[u8], out: &mut impl BufMut) -> bool {
    let never = sensitive::lowercase(name);
    match static_table::find(name, value) {
        Some((index, true)) => {
            // Indexed Field Line, static: 11xxxxxx.
            integer::encode(index, 6, 0xc0, out);
        }
        Some((index, false)) => {
            // Literal Field Line with Name Reference, static: 01N1xxxx.
            let n = if never { 0x20 } else { 0 };
            integer::encode(index, 4, 0x50 | n, out);
            put_string(value, 7, 0, out);
        }
        None => {
            // Literal Field Line with Literal Name: 001NHxxx.
            let n = if never { 0x10 } else { 0 };
            put_string(name, 3, 0x20 | n, out);
            put_string(value, 7, 0, out);
        }
    }
    !never
}

/// A string literal with a `prefix`-bit length; the H bit sits just above the prefix.
/// Huffman-coded when that is shorter.
fn put_string(s: &[u8], prefix: u8, flags: u8, out: &mut impl BufMut) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        integer::encode(coded, prefix, flags | (1 << prefix), out);
        huffman::encode(s, out);
    } else {
        integer::encode(s.len(), prefix, flags, out);
        out.put_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_resource_fields_encode_as_the_general_path_does() {
        let fields: &[(&[u8], &[u8])] = &[
            (b"content-length", b"0"),
            (b"content-length", b"4096"),
            (b"etag", b"\"5f2b-1000\""),
            (b"last-modified", b"Sat, 28 Nov 2026 12:00:00 GMT"),
        ];
        let mut enc = Encoder::default();
        for &(name, value) in fields {
            let mut fast = Vec::new();
            enc.field(name, value, &mut fast);
            let mut general = Vec::new();
            assert!(put_field(name, value, &mut general));
            assert_eq!(fast, general, "{}", String::from_utf8_lossy(name));
        }
        // `content-length: 0` is a static entry: one byte.
        let mut zero = Vec::new();
        enc.field(b"content-length", b"0", &mut zero);
        assert_eq!(zero, [0xc0 | 4]);
    }
}
