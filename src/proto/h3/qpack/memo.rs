//! Field lines the encoder made recently, by field: responses repeat most of their fields
//! (a proxied backend's `server`, `content-type`; `date` for a second), and a line made afresh
//! costs a static-table lookup, a lowercased copy of the name and a Huffman pass. The fields
//! of one resource (`content-length`, `etag`, `last-modified`) do not come here: on varied
//! traffic they would miss, and push out the lines that repeat (`encoder.rs`). Our field lines use the static table only, so a line depends on
//! nothing but its field: the connections that share an [`super::Encoder`] share its memo.
//! Bounded: a fixed number of slots, each keeping a short field only, and never a sensitive
//! one. A kept line never expires: it depends on no time, file or Date (a field with another
//! date is another key), unlike a kept answer (`http::repeat`).

/// Slots of the memo (a power of two: the slot is picked by the top bits of a hash).
const SLOTS: usize = 64;
/// Name and value bytes of the longest field kept.
pub(super) const MAX_FIELD: usize = 128;

/// Field lines by field, in slots picked by a hash.
#[derive(Debug, Default)]
pub(super) struct LineMemo {
    /// Empty until the first line is kept.
    slots: Vec<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The field's name then its value, as given.
    key: Vec<u8>,
    name_len: usize,
    /// Its encoded field line.
    line: Vec<u8>,
}

impl LineMemo {
    /// The line kept for (`name`, `value`), if there is one.
    #[inline]
    pub(super) fn get(&self, name: &[u8], value: &[u8]) -> Option<&[u8]> {
        let s = self.slots.get(slot_of(name, value))?;
        let (n, v) = s.key.split_at(s.name_len.min(s.key.len()));
        (n == name && v == value).then_some(&s.line[..])
    }

    /// Keeps `line` as the encoding of (`name`, `value`), in place of what its slot held.
    pub(super) fn put(&mut self, name: &[u8], value: &[u8], line: &[u8]) {
        if name.len() + value.len() > MAX_FIELD {
            return;
        }
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, Slot::default);
        }
        let i = slot_of(name, value);
        let Some(s) = self.slots.get_mut(i) else {
            return;
        };
        s.key.clear();
        s.key.extend_from_slice(name);
        s.key.extend_from_slice(value);
        s.name_len = name.len();
        s.line.clear();
        s.line.extend_from_slice(line);
    }
}

/// The slot of a field: a hash of the lengths, the name's first byte and the value's last
/// bytes (where dates, lengths and validators of one name differ), cheap next to encoding.
fn slot_of(name: &[u8], value: &[u8]) -> usize {
    let mut h = ((name.len() as u64) << 32) ^ value.len() as u64;
    let tail = &value[value.len().saturating_sub(8)..];
    for &b in name.iter().take(1).chain(tail) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_line_comes_back_for_its_field_only() {
        let mut memo = LineMemo::default();
        memo.put(b"server", b"memo-test", b"line-a");
        assert_eq!(memo.get(b"server", b"memo-test"), Some(&b"line-a"[..]));
        // Same bytes split elsewhere between name and value: another field.
        assert!(memo.get(b"serverm", b"emo-test").is_none());
        assert!(memo.get(b"server", b"memo-tesT").is_none());
        // Too long to keep.
        let long = vec![b'x'; MAX_FIELD];
        memo.put(b"etag", &long, b"line-b");
        assert!(memo.get(b"etag", &long).is_none());
    }
}
