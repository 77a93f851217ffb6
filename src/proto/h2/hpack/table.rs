//! The static table (RFC 7541 Appendix A) and the dynamic table (section 2.3.2).
//!
//! HPACK index space: 1..=61 is the static table, 62.. the dynamic table, newest first.

use std::collections::VecDeque;

/// Entries a table makes room for on its first insertion: a response's or a request's
/// first block indexes about eight fields.
const FIRST_ENTRIES: usize = 8;

/// Number of entries in the static table.
pub const STATIC_LEN: usize = 61;

/// Size overhead RFC 7541 section 4.1 charges per entry (and RFC 9113 per header field).
pub const ENTRY_OVERHEAD: usize = 32;

/// Entry `index` (1-based) of the static table.
pub fn static_entry(index: usize) -> Option<(&'static [u8], &'static [u8])> {
    STATIC.get(index.checked_sub(1)?).copied()
}

/// First static index carrying `name`, whatever its letter case (handlers write the
/// `Content-Type` of HTTP/1.1): one slot read and one comparison, where matching every static
/// name (and first lowercasing) costs a few hundred instructions per field.
#[inline]
pub fn static_name_nocase(name: &[u8]) -> Option<usize> {
    let (&first, &last) = (name.first()?, name.last()?);
    let index = NAME_SLOTS[name_slot(name.len(), first, last)] as usize;
    let (static_name, _) = STATIC.get(index.checked_sub(1)?)?;
    lowercase_is(name, static_name).then_some(index)
}

/// Whether `name`, lowercased, is `lower` (lowercase ASCII): eight bytes a step, where
/// `eq_ignore_ascii_case` takes one.
#[inline]
fn lowercase_is(name: &[u8], lower: &[u8]) -> bool {
    if name.len() != lower.len() {
        return false;
    }
    if name.len() < 8 {
        return name.eq_ignore_ascii_case(lower);
    }
    let (mut a, mut b) = (name, lower);
    while let (Some((x, a_rest)), Some((y, b_rest))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if to_lower(u64::from_le_bytes(*x)) != u64::from_le_bytes(*y) {
            return false;
        }
        (a, b) = (a_rest, b_rest);
    }
    if a.is_empty() {
        return true;
    }
    // The last eight bytes, overlapping some compared already.
    match (name.last_chunk::<8>(), lower.last_chunk::<8>()) {
        (Some(x), Some(y)) => to_lower(u64::from_le_bytes(*x)) == u64::from_le_bytes(*y),
        _ => false,
    }
}

/// The eight bytes of `w` with their ASCII capitals lowercased. Exact for ASCII bytes (no
/// carry crosses a byte below 0x80); a byte of 0x80 or more may disturb its neighbour, but
/// is never equal to a byte of a lowercase ASCII name, so comparisons stay exact.
#[inline]
fn to_lower(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Bytes from 'A' (0x41) and below '[' (0x5b): the top bit of `b + 0x3f` and not of `b + 0x25`.
    let capitals = w.wrapping_add(ONES * 0x3f) & !w.wrapping_add(ONES * 0x25) & (ONES * 0x80);
    w | (capitals >> 2)
}

/// A name of the static table, known by its index: a field under it is encoded with no
/// name to lowercase, hash or compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticName(u8);

impl StaticName {
    pub const STATUS: StaticName = StaticName(8);
    pub const AGE: StaticName = StaticName(21);
    pub const CONTENT_LENGTH: StaticName = StaticName(28);
    pub const DATE: StaticName = StaticName(33);
    pub const ETAG: StaticName = StaticName(34);
    pub const EXPIRES: StaticName = StaticName(36);
    pub const LAST_MODIFIED: StaticName = StaticName(44);
    pub const SERVER: StaticName = StaticName(54);
    pub const TRANSFER_ENCODING: StaticName = StaticName(57);

    /// The static name `name` is, in any letter case.
    #[inline]
    pub fn of(name: &[u8]) -> Option<StaticName> {
        static_name_nocase(name).map(|i| StaticName(i as u8))
    }

    /// Its first index in the static table.
    #[inline]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// The exact static entry of `value` under the static name at `index` (the first of its
/// name), if the table has one: only the pseudo-headers and `accept-encoding` have values
/// other than the empty one.
#[inline]
pub fn static_value(index: usize, value: &[u8]) -> Option<usize> {
    if !matches!(index, 2 | 4 | 6 | 8 | 16) {
        return value.is_empty().then_some(index);
    }
    let name = STATIC.get(index.checked_sub(1)?)?.0;
    STATIC
        .iter()
        .enumerate()
        .skip(index - 1)
        .take_while(|(_, &(n, _))| n == name)
        .find(|(_, &(_, v))| v == value)
        .map(|(i, _)| i + 1)
}

/// Where [`static_name_nocase`] looks a name up: a hash of its length and its first and last
/// letters (either case), which no two static names share (checked when the table is built).
const fn name_slot(len: usize, first: u8, last: u8) -> usize {
    (len.wrapping_mul(11) + (first | 0x20) as usize + (last | 0x20) as usize * 37) & 0xff
}

/// The static index of the name in each [`name_slot`], 0 for none.
static NAME_SLOTS: [u8; 256] = build_name_slots();

const fn build_name_slots() -> [u8; 256] {
    let mut slots = [0u8; 256];
    let mut i = 0;
    while i < STATIC_LEN {
        let name = STATIC_ENTRIES[i].0;
        if i == 0 || !const_eq(STATIC_ENTRIES[i - 1].0, name) {
            let slot = name_slot(name.len(), name[0], name[name.len() - 1]);
            assert!(slots[slot] == 0, "two static names share a slot");
            slots[slot] = (i + 1) as u8;
        }
        i += 1;
    }
    slots
}

const fn const_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Looks `name`/`value` up in the static table: `(index, true)` for an exact match,
/// `(index, false)` for a name-only match. (The encoder finds names with
/// [`static_name_nocase`] and values with [`static_value`]; this is their reference.)
#[cfg(test)]
pub fn static_find(name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
    let first = static_name_index(name)?;
    // Entries sharing a name are adjacent; only those with values can match exactly.
    for (i, &(n, v)) in STATIC.iter().enumerate().skip(first - 1) {
        if n != name {
            break;
        }
        if v == value {
            return Some((i + 1, true));
        }
    }
    Some((first, false))
}

/// The dynamic table: a ring of entries whose bytes live in one arena.
///
/// Entries are appended to the arena in insertion order, so the live bytes are always
/// `arena[base..]` with the oldest entry first; eviction just moves `base`. The arena is
/// compacted when the dead prefix is at least as big as the live part, which keeps the copying
/// amortised O(1) per inserted byte and the arena under about twice the table size.
#[derive(Debug)]
pub struct DynamicTable {
    /// Newest entry at the front (HPACK index 62).
    entries: VecDeque<Entry>,
    arena: Vec<u8>,
    // 32-bit, as the offsets in `Entry`: a parked connection keeps two tables.
    base: u32,
    size: u32,
    max_size: u32,
    /// Entries inserted since the table was made (wrapping): entry `i` (0 = newest) is
    /// insertion number `inserted - 1 - i`, which is how the index names entries.
    inserted: u32,
    /// Where entries are by hash, for [`DynamicTable::find`]: made by the first
    /// [`DynamicTable::insert_hashed`] into an empty table (an encoder's) and dropped when the
    /// table is emptied and shrunk; `None` in a decoder's table, which only looks entries up by
    /// position, and in an idle connection's, so that nothing of it stays on the heap among
    /// the freed buffers of other connections (it would keep their pages from the system).
    /// Without it, lookups scan the entries.
    index: Option<Box<Index>>,
}

/// Offsets into the arena: 32-bit, so a small table's ring costs 12 B per entry, not 24.
/// [`MAX_TABLE_SIZE`] keeps them in range.
#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u32,
    name_len: u32,
    value_len: u32,
}

impl Entry {
    fn name(&self) -> std::ops::Range<usize> {
        let start = self.start as usize;
        start..start + self.name_len as usize
    }

    fn value(&self) -> std::ops::Range<usize> {
        let name_end = self.name().end;
        name_end..name_end + self.value_len as usize
    }

    /// Size in RFC 7541 terms.
    fn size(&self) -> usize {
        self.name_len as usize + self.value_len as usize + ENTRY_OVERHEAD
    }
}

/// The largest table kept whatever the settings say (no peer gets near it: tables are sized
/// by our own settings). The arena stays within a few times this: well inside 32-bit offsets.
const MAX_TABLE_SIZE: usize = 1 << 28;

impl DynamicTable {
    /// A table looked up by position only (a decoder's): [`DynamicTable::find`] scans it.
    pub fn new(max_size: usize) -> DynamicTable {
        DynamicTable {
            entries: VecDeque::new(),
            arena: Vec::new(),
            base: 0,
            size: 0,
            max_size: clamp(max_size),
            inserted: 0,
            index: None,
        }
    }

    /// A table looked up by content (an encoder's): its first [`DynamicTable::insert_hashed`]
    /// makes an index of its entries by hash, so that [`DynamicTable::find`] costs a hash and
    /// a probe or two however full it is.
    pub fn indexed(max_size: usize) -> DynamicTable {
        DynamicTable::new(max_size)
    }

    /// Current size in RFC 7541 terms (bytes plus 32 per entry).
    pub fn size(&self) -> usize {
        self.size as usize
    }

    pub fn max_size(&self) -> usize {
        self.max_size as usize
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Changes the maximum size, evicting the oldest entries until the table fits.
    pub fn set_max_size(&mut self, max_size: usize) {
        self.max_size = clamp(max_size);
        while self.size() > max_size {
            self.evict();
        }
    }

    /// Entry `index` (0 = newest).
    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        let e = self.entries.get(index)?;
        Some((&self.arena[e.name()], &self.arena[e.value()]))
    }

    /// Entry `index`'s name and value as one slice (they are adjacent in the arena), and
    /// where the name ends: one copy for a decoder that wants both.
    pub fn get_joined(&self, index: usize) -> Option<(&[u8], usize)> {
        let e = self.entries.get(index)?;
        let joined = e.start as usize..e.value().end;
        Some((&self.arena[joined], e.name_len as usize))
    }

    /// Adds an entry, evicting as RFC 7541 section 4.4 says: an entry bigger than the whole
    /// table empties it and is not added.
    pub fn insert(&mut self, name: &[u8], value: &[u8]) {
        let hashes = if self.index.is_some() {
            Hashes::of(name, value)
        } else {
            Hashes::NONE
        };
        self.add(name, value, hashes, false);
    }

    /// [`DynamicTable::insert`] with the field's [`Hashes`], already computed for a lookup: an
    /// encoder's insert, which makes the index when the table was empty.
    pub fn insert_hashed(&mut self, name: &[u8], value: &[u8], hashes: Hashes) {
        self.add(name, value, hashes, true);
    }

    fn add(&mut self, name: &[u8], value: &[u8], hashes: Hashes, make_index: bool) {
        let bytes = name.len() + value.len();
        let cost = bytes + ENTRY_OVERHEAD;
        if cost > self.max_size() {
            self.clear();
            return;
        }
        while self.size() + cost > self.max_size() {
            self.evict();
        }
        if self.base > 0
            && self.arena.len() + bytes > self.arena.capacity()
            && self.base as usize * 2 >= self.arena.len()
        {
            self.compact();
        }
        if self.entries.capacity() == 0 {
            // A connection's first block indexes several fields at once: room for their
            // entries from the start. (Not for their bytes: what a first block needs varies,
            // and room to spare in the arena stays with every active connection.)
            self.entries.reserve(FIRST_ENTRIES);
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(name);
        self.arena.extend_from_slice(value);
        // In range: `cost` is at most `max_size`, and the arena a few times that.
        self.entries.push_front(Entry {
            start: start as u32,
            name_len: name.len() as u32,
            value_len: value.len() as u32,
        });
        // In range: the table's size stays within `max_size`.
        self.size += cost as u32;
        let seq = self.inserted;
        self.inserted = seq.wrapping_add(1);
        if make_index && self.index.is_none() && self.entries.len() == 1 {
            self.index = Some(Box::default());
        }
        if let Some(index) = self.index.take() {
            self.index = Some(self.index_insert(index, seq, name, value, hashes));
        }
    }

    /// Finds `name`/`value`: `(index, true)` for an exact match, else `(index, false)` for the
    /// newest entry with that name. Indexes are 0-based from the newest.
    pub fn find(&self, name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
        if self.index.is_some() {
            return self.find_hashed(name, value, Hashes::of(name, value), true);
        }
        let mut name_match = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.name_len as usize != name.len() || &self.arena[e.name()] != name {
                continue;
            }
            if &self.arena[e.value()] == value {
                return Some((i, true));
            }
            name_match.get_or_insert(i);
        }
        name_match.map(|i| (i, false))
    }

    /// Sets the count of insertions, as after that many.
    #[cfg(test)]
    pub fn set_inserted(&mut self, inserted: u32) {
        assert!(self.entries.is_empty());
        self.inserted = inserted;
    }

    /// Insertions since the table was made (wrapping): unchanged means no entry came or went
    /// by insertion.
    #[inline]
    pub fn insertions(&self) -> u32 {
        self.inserted
    }

    /// The insertion number of the newest entry, if any.
    #[inline]
    pub fn newest_seq(&self) -> Option<u32> {
        (!self.entries.is_empty()).then(|| self.inserted.wrapping_sub(1))
    }

    /// The insertion number of the entry at `index` (0 = newest).
    #[inline]
    pub fn seq_at(&self, index: usize) -> u32 {
        self.inserted.wrapping_sub(1).wrapping_sub(index as u32)
    }

    /// Entry `index` (0 = newest) with its index, if it is in the table.
    #[inline]
    pub fn get_with_index(&self, index: usize) -> Option<(usize, &[u8], &[u8])> {
        let e = self.entries.get(index)?;
        Some((index, &self.arena[e.name()], &self.arena[e.value()]))
    }

    /// The encoder's note in `slot` (see `Index::newest`); 0, "none", without an index.
    pub fn newest_note(&self, slot: usize) -> u16 {
        self.index.as_deref().map_or(0, |index| index.newest[slot])
    }

    /// Keeps `note` in `slot`; nothing without an index (an empty table has no newest entry).
    pub fn set_newest_note(&mut self, slot: usize, note: u16) {
        if let Some(index) = self.index.as_deref_mut() {
            index.newest[slot] = note;
        }
    }

    /// Forgets every note.
    pub fn forget_newest_notes(&mut self) {
        if let Some(index) = self.index.as_deref_mut() {
            index.newest = [0; NEWEST_NOTES];
        }
    }

    /// Whether any note is kept.
    #[cfg(test)]
    pub fn has_newest_notes(&self) -> bool {
        self.index
            .as_deref()
            .is_some_and(|index| index.newest != [0; NEWEST_NOTES])
    }

    /// Gives back the spare capacity (and the evicted prefix) the ring and the arena grew:
    /// for a connection going idle, whose table stays but may not grow for a long time.
    /// A no-op when they already fit.
    pub fn shrink_to_fit(&mut self) {
        if self.base > 0 {
            self.compact();
        }
        self.arena.shrink_to_fit();
        self.entries.shrink_to_fit();
        if self.entries.is_empty() {
            self.index = None;
        } else if let Some(index) = self.index.as_deref_mut() {
            index.hashes.shrink_to_fit();
        }
    }

    fn evict(&mut self) {
        let Some(old) = self.entries.pop_back() else {
            return;
        };
        let seq = self.inserted.wrapping_sub(self.entries.len() as u32 + 1);
        if let Some(index) = self.index.as_deref_mut() {
            if let Some(hashes) = index.hashes.pop_back() {
                // `seq`: the oldest entry's insertion number.
                remove(&mut index.fields, hashes.field, seq);
                remove(&mut index.names, hashes.name, seq);
            }
        }
        self.size -= old.size() as u32;
        match self.entries.back() {
            Some(next) => self.base = next.start,
            None => {
                self.arena.clear();
                self.base = 0;
            }
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.arena.clear();
        self.base = 0;
        self.size = 0;
        if let Some(index) = self.index.as_deref_mut() {
            index.hashes.clear();
            index.fields.fill(Slot::EMPTY);
            index.names.fill(Slot::EMPTY);
        }
    }

    fn compact(&mut self) {
        let base = self.base;
        self.arena.copy_within(base as usize.., 0);
        self.arena.truncate(self.arena.len() - base as usize);
        for e in &mut self.entries {
            e.start -= base;
        }
        self.base = 0;
    }
}

/// Room for the entries of a [`Stowed`] table: a client that indexes only its `:authority`
/// (and a short `user-agent`) fits, and that is most clients' whole request-side table.
pub const STOWED_ROOM: usize = 63;

/// A small table's entries packed in place, with no allocation of their own: for a parked
/// connection, whose record lives in a slab, so that nothing of it lands among the freed
/// memory of busy connections (where it would keep whole pages from going back to the
/// system). Each entry is its name length, value length (one byte each), name and value,
/// oldest first.
#[derive(Debug)]
pub struct Stowed {
    /// Bytes used in `bytes`; never zero (an empty table is not stowed).
    len: std::num::NonZeroU8,
    bytes: [u8; STOWED_ROOM],
}

impl DynamicTable {
    /// Packs the entries in place and empties the table, freeing its memory; `None`, with
    /// the table unchanged, when it is empty or its entries do not fit [`STOWED_ROOM`].
    pub fn stow(&mut self) -> Option<Stowed> {
        let mut bytes = [0u8; STOWED_ROOM];
        let mut len = 0;
        for e in self.entries.iter().rev() {
            let name = u8::try_from(e.name_len).ok()?;
            let value = u8::try_from(e.value_len).ok()?;
            let end = len + 2 + usize::from(name) + usize::from(value);
            let to = bytes.get_mut(len..end)?;
            to[0] = name;
            to[1] = value;
            to[2..].copy_from_slice(&self.arena[e.name().start..e.value().end]);
            len = end;
        }
        let len = std::num::NonZeroU8::new(u8::try_from(len).ok()?)?;
        *self = DynamicTable::new(self.max_size());
        Some(Stowed { len, bytes })
    }

    /// Puts back the entries `stowed` took from this table (same maximum size).
    pub fn unstow(&mut self, stowed: &Stowed) {
        let mut rest = &stowed.bytes[..usize::from(stowed.len.get())];
        while let [name, value, tail @ ..] = rest {
            let (name, value) = (usize::from(*name), usize::from(*value));
            let Some((field, tail)) = tail.split_at_checked(name + value) else {
                return;
            };
            let (n, v) = field.split_at(name);
            self.insert(n, v);
            rest = tail;
        }
    }
}

/// The encoder's index of a [`DynamicTable`]: two open-addressing hash sets (linear probing,
/// at most half full) of insertion numbers. `fields` holds, for each name and value in the
/// table, its newest entry; `names`, for each name, its newest entry. Both are kept in step
/// by `insert` and `evict`: an evicted entry is the oldest, so a slot naming it has no newer
/// entry of its key to name instead, and goes.
///
/// Keys can be a peer's (a client's request headers, through the proxy): fields made to
/// collide make probes longer, but never longer than the table has entries, which is what
/// every lookup cost before there was an index.
#[derive(Debug, Default)]
struct Index {
    /// The entries' hashes, in step with `entries` (newest at the front).
    hashes: VecDeque<Hashes>,
    fields: Vec<Slot>,
    names: Vec<Slot>,
    /// The encoder's notes of the newest entry of the names responses carry most (see
    /// `Encoder::encode_static_name`): kept here, on the heap with the index they go with,
    /// so that a parked connection's encoder is no larger for them.
    newest: [u16; NEWEST_NOTES],
}

/// Slots of the encoder's newest-entry notes ([`DynamicTable::newest_note`]).
pub const NEWEST_NOTES: usize = 16;

/// Hashes of a field's name and of its name and value, top bit set (0 marks an empty slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hashes {
    name: u32,
    field: u32,
}

impl Hashes {
    /// For a table without an index, which has no use for them.
    pub const NONE: Hashes = Hashes { name: 0, field: 0 };

    pub fn of(name: &[u8], value: &[u8]) -> Hashes {
        let name_hash = hash_bytes(0, name);
        let field_hash = hash_bytes(name_hash, value);
        Hashes {
            name: fold(name_hash),
            field: fold(field_hash),
        }
    }
}

/// Folds a hash to the 32 bits slots keep, top bit set.
fn fold(h: u64) -> u32 {
    ((h >> 32) as u32 ^ h as u32) | 0x8000_0000
}

/// A multiplicative hash of 8-byte words (after FxHash): a few instructions per word, which
/// is what a lookup per response field can afford. Its quality only decides how often a probe
/// compares bytes in vain; see [`Index`] for the worst case.
fn hash_bytes(seed: u64, s: &[u8]) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let step = |h: u64, w: u64| (h.rotate_left(26) ^ w).wrapping_mul(K);
    let mut h = step(seed, s.len() as u64);
    let mut rest = s;
    while let Some((word, tail)) = rest.split_first_chunk::<8>() {
        h = step(h, u64::from_le_bytes(*word));
        rest = tail;
    }
    if rest.is_empty() {
        return h;
    }
    // The last 8 bytes (overlapping words already taken), or the short string whole.
    let tail = if let Some(last) = s.last_chunk::<8>() {
        u64::from_le_bytes(*last)
    } else if let (Some(first), Some(last)) = (s.first_chunk::<4>(), s.last_chunk::<4>()) {
        u64::from(u32::from_le_bytes(*first)) << 32 | u64::from(u32::from_le_bytes(*last))
    } else {
        rest.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b))
    };
    step(h, tail)
}

/// An entry's insertion number and its key's hash; a hash of 0 marks an empty slot (hashes
/// keep their top bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    hash: u32,
    seq: u32,
}

impl Slot {
    const EMPTY: Slot = Slot { hash: 0, seq: 0 };
}

/// Slots an index starts with.
const FIRST_SLOTS: usize = 16;

impl DynamicTable {
    /// Position (0 = newest) of the entry with insertion number `seq`.
    fn position(&self, seq: u32) -> usize {
        self.inserted.wrapping_sub(1).wrapping_sub(seq) as usize
    }

    fn entry_by_seq(&self, seq: u32) -> Option<(&[u8], &[u8])> {
        self.get(self.position(seq))
    }

    /// Adds entry `seq` (just pushed at the front) to `index` (taken out of the table while
    /// the table's entries are read), and gives the index back.
    fn index_insert(
        &self,
        mut index: Box<Index>,
        seq: u32,
        name: &[u8],
        value: &[u8],
        hashes: Hashes,
    ) -> Box<Index> {
        index.hashes.push_front(hashes);
        if self.entries.len() * 2 > index.fields.len() {
            self.rebuild_index(&mut index);
            return index;
        }
        let Hashes {
            name: name_hash,
            field: field_hash,
        } = hashes;
        put(&mut index.fields, field_hash, seq, |old| {
            self.entry_by_seq(old) == Some((name, value))
        });
        put(&mut index.names, name_hash, seq, |old| {
            self.entry_by_seq(old).map(|(n, _)| n) == Some(name)
        });
        index
    }

    /// Makes the index again at twice the slots the entries need (on growth: amortised).
    #[cold]
    fn rebuild_index(&self, index: &mut Index) {
        let slots = (self.entries.len() * 4)
            .next_power_of_two()
            .max(FIRST_SLOTS);
        let Index {
            hashes: all,
            fields,
            names,
            ..
        } = index;
        for slots_of in [&mut *fields, &mut *names] {
            slots_of.clear();
            slots_of.resize(slots, Slot::EMPTY);
        }
        // Oldest first, so that the newest entry of each key is the one kept.
        for (i, hashes) in all.iter().enumerate().rev() {
            let seq = self.inserted.wrapping_sub(1).wrapping_sub(i as u32);
            let Some((name, value)) = self.get(i) else {
                continue;
            };
            let Hashes {
                name: name_hash,
                field: field_hash,
            } = *hashes;
            put(fields, field_hash, seq, |old| {
                self.entry_by_seq(old) == Some((name, value))
            });
            put(names, name_hash, seq, |old| {
                self.entry_by_seq(old).map(|(n, _)| n) == Some(name)
            });
        }
    }

    /// [`DynamicTable::find`] with the field's [`Hashes`] (for an indexed table), and a
    /// name-only match looked for only if `by_name` (not needed when the static table has the
    /// name: its index is preferred).
    pub fn find_hashed(
        &self,
        name: &[u8],
        value: &[u8],
        hashes: Hashes,
        by_name: bool,
    ) -> Option<(usize, bool)> {
        let Some(index) = self.index.as_deref() else {
            return self.find(name, value);
        };
        if self.entries.is_empty() {
            return None;
        }
        if let Some(seq) = lookup(&index.fields, hashes.field, |seq| {
            self.entry_by_seq(seq) == Some((name, value))
        }) {
            return Some((self.position(seq), true));
        }
        if !by_name {
            return None;
        }
        let seq = lookup(&index.names, hashes.name, |seq| {
            self.entry_by_seq(seq).map(|(n, _)| n) == Some(name)
        })?;
        Some((self.position(seq), false))
    }
}

/// Points the slot of the key `same` recognises at `seq`, or fills a new one. The slots must
/// have an empty one (they are at most half full).
fn put(slots: &mut [Slot], hash: u32, seq: u32, same: impl Fn(u32) -> bool) {
    let mask = slots.len() - 1;
    let mut i = hash as usize & mask;
    while let Some(slot) = slots.get_mut(i) {
        if slot.hash == 0 {
            *slot = Slot { hash, seq };
            return;
        }
        if slot.hash == hash && same(slot.seq) {
            slot.seq = seq;
            return;
        }
        i = (i + 1) & mask;
    }
}

/// The insertion number in the slot of the key `same` recognises.
fn lookup(slots: &[Slot], hash: u32, same: impl Fn(u32) -> bool) -> Option<u32> {
    let mask = slots.len().checked_sub(1)?;
    let mut i = hash as usize & mask;
    loop {
        let slot = slots.get(i)?;
        if slot.hash == 0 {
            return None;
        }
        if slot.hash == hash && same(slot.seq) {
            return Some(slot.seq);
        }
        i = (i + 1) & mask;
    }
}

/// Empties the slot holding `hash` and `seq`, if any, moving later slots of the same run
/// back so that every key stays reachable from its home slot (backward-shift deletion).
fn remove(slots: &mut [Slot], hash: u32, seq: u32) {
    let Some(mask) = slots.len().checked_sub(1) else {
        return;
    };
    let mut hole = hash as usize & mask;
    loop {
        match slots.get(hole) {
            None => return,
            Some(s) if s.hash == 0 => return,
            Some(s) if s.hash == hash && s.seq == seq => break,
            Some(_) => hole = (hole + 1) & mask,
        }
    }
    let mut j = hole;
    loop {
        j = (j + 1) & mask;
        let Some(&slot) = slots.get(j) else {
            return;
        };
        if slot.hash == 0 {
            break;
        }
        let home = slot.hash as usize & mask;
        // It may fill the hole unless its home lies after the hole (cyclically, up to `j`).
        if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
            if let Some(h) = slots.get_mut(hole) {
                *h = slot;
            }
            hole = j;
        }
    }
    if let Some(h) = slots.get_mut(hole) {
        *h = Slot::EMPTY;
    }
}

/// `max_size` within [`MAX_TABLE_SIZE`], which fits 32 bits.
fn clamp(max_size: usize) -> u32 {
    max_size.min(MAX_TABLE_SIZE) as u32
}

/// First static index carrying `name`, exactly: the reference [`static_name_nocase`] is
/// tested against.
#[cfg(test)]
fn static_name_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

static STATIC: [(&[u8], &[u8]); STATIC_LEN] = STATIC_ENTRIES;

/// RFC 7541 Appendix A.
const STATIC_ENTRIES: [(&[u8], &[u8]); STATIC_LEN] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_table_stows_in_place_and_comes_back_the_same() {
        let mut t = DynamicTable::new(4096);
        t.insert(b":authority", b"localhost");
        t.insert(b"user-agent", b"h2load");
        let before: Vec<_> = (0..t.len())
            .map(|i| t.get(i).map(|(n, v)| (n.to_vec(), v.to_vec())))
            .collect();
        let size = t.size();
        let stowed = t.stow().expect("fits");
        assert_eq!((t.len(), t.size(), t.arena.capacity()), (0, 0, 0));
        t.unstow(&stowed);
        let after: Vec<_> = (0..t.len())
            .map(|i| t.get(i).map(|(n, v)| (n.to_vec(), v.to_vec())))
            .collect();
        assert_eq!(before, after);
        assert_eq!(t.size(), size);
        assert_eq!(t.find(b":authority", b"localhost"), Some((1, true)));
    }

    #[test]
    fn an_empty_or_large_table_is_not_stowed() {
        let mut t = DynamicTable::new(4096);
        assert!(t.stow().is_none());
        t.insert(b"cookie", &[b'x'; STOWED_ROOM]);
        assert!(t.stow().is_none());
        assert_eq!(t.len(), 1);
        let mut t = DynamicTable::new(4096);
        t.insert(b"long", &[b'y'; 300]);
        assert!(t.stow().is_none());
        assert_eq!(t.get(0).map(|(_, v)| v.len()), Some(300));
    }

    #[test]
    fn static_name_index_agrees_with_table() {
        for (i, &(name, _)) in STATIC.iter().enumerate() {
            let first = static_name_index(name).unwrap();
            assert_eq!(STATIC[first - 1].0, name);
            assert!(first <= i + 1);
            assert!(
                first == 1 || STATIC[first - 2].0 != name,
                "{first} is not the first"
            );
        }
        assert_eq!(static_name_index(b"x-unknown"), None);
    }

    #[test]
    fn static_names_are_found_in_any_case() {
        for (i, &(name, _)) in STATIC.iter().enumerate() {
            let first = static_name_index(name).unwrap();
            assert_eq!(static_name_nocase(name), Some(first), "{i}");
            let upper = name.to_ascii_uppercase();
            assert_eq!(static_name_nocase(&upper), Some(first));
        }
        assert_eq!(static_name_nocase(b"Content-Type"), Some(31));
        assert_eq!(static_name_nocase(b"ETag"), Some(34));
        for other in [
            &b""[..],
            b"x",
            b"content-typ",
            b"contentxtype",
            b"x-foo",
            b"dat",
        ] {
            assert_eq!(static_name_nocase(other), None, "{other:?}");
        }
        for (name, is) in [
            (&b"Content-Type"[..], true),
            (b"CONTENT-LENGTH", true),
            (b"Access-Control-Allow-Origin", true),
            (b"Content-Typ\xc5", false),
            (b"Content\x0dType", false),
            (b"Content-Tyqe", false),
            (b"[ontent-type", false),
            (b"@ontent-type", false),
        ] {
            assert_eq!(static_name_nocase(name).is_some(), is, "{name:?}");
        }
        // Every byte in every place of a name: only the two cases of its own letter match.
        let name = b"strict-transport-security";
        for at in 0..name.len() {
            for byte in 0..=255u8 {
                let mut other = *name;
                other[at] = byte;
                let same = byte == name[at] || byte.to_ascii_lowercase() == name[at];
                assert_eq!(lowercase_is(&other, name), same, "{at} {byte}");
            }
        }
        // Carriage return and '-' differ by the case bit only: still different.
        assert_eq!(static_name_nocase(b"content\rtype"), None);
        for (known, name) in [
            (StaticName::STATUS, &b":status"[..]),
            (StaticName::SERVER, b"server"),
            (StaticName::CONTENT_LENGTH, b"content-length"),
            (StaticName::DATE, b"date"),
            (StaticName::ETAG, b"etag"),
            (StaticName::LAST_MODIFIED, b"last-modified"),
            (StaticName::TRANSFER_ENCODING, b"transfer-encoding"),
        ] {
            assert_eq!(StaticName::of(name), Some(known));
        }
        assert_eq!(static_value(8, b"404"), Some(13));
        assert_eq!(static_value(8, b"302"), None);
        assert_eq!(static_value(16, b"gzip, deflate"), Some(16));
        assert_eq!(static_value(31, b""), Some(31));
        assert_eq!(static_value(31, b"text/html"), None);
    }

    #[test]
    fn static_lookup() {
        assert_eq!(static_find(b":status", b"200"), Some((8, true)));
        assert_eq!(static_find(b":status", b"500"), Some((14, true)));
        assert_eq!(static_find(b":status", b"302"), Some((8, false)));
        assert_eq!(static_find(b":method", b"POST"), Some((3, true)));
        assert_eq!(
            static_find(b"accept-encoding", b"gzip, deflate"),
            Some((16, true))
        );
        assert_eq!(
            static_find(b"content-type", b"text/html"),
            Some((31, false))
        );
        assert_eq!(static_find(b"x-foo", b""), None);
        assert_eq!(static_entry(0), None);
        assert_eq!(static_entry(61), Some((&b"www-authenticate"[..], &b""[..])));
        assert_eq!(static_entry(62), None);
    }

    #[test]
    fn shrinking_keeps_the_entries() {
        let mut t = DynamicTable::new(100);
        t.insert(b"a", b"1");
        t.insert(b"b", b"22");
        t.insert(b"c", b"333"); // evicts "a": a dead prefix in the arena
        t.shrink_to_fit();
        assert_eq!(t.arena.capacity(), 7);
        assert_eq!(t.entries.capacity(), 2);
        assert_eq!(t.size(), 71);
        assert_eq!(t.get(0), Some((&b"c"[..], &b"333"[..])));
        assert_eq!(t.get(1), Some((&b"b"[..], &b"22"[..])));
        t.insert(b"d", b"4");
        assert_eq!(t.get(0), Some((&b"d"[..], &b"4"[..])));
        assert_eq!(t.get(1), Some((&b"c"[..], &b"333"[..])));
    }

    #[test]
    fn insert_get_evict() {
        let mut t = DynamicTable::new(100);
        t.insert(b"a", b"1"); // 34
        t.insert(b"b", b"22"); // 35
        assert_eq!(t.size(), 69);
        assert_eq!(t.get(0), Some((&b"b"[..], &b"22"[..])));
        assert_eq!(t.get(1), Some((&b"a"[..], &b"1"[..])));
        assert_eq!(t.get(2), None);
        t.insert(b"c", b"333"); // 36: evicts "a"
        assert_eq!(t.len(), 2);
        assert_eq!(t.size(), 71);
        assert_eq!(t.get(1), Some((&b"b"[..], &b"22"[..])));
        assert_eq!(t.find(b"c", b"333"), Some((0, true)));
        assert_eq!(t.find(b"b", b"x"), Some((1, false)));
        assert_eq!(t.find(b"a", b"1"), None);
        t.set_max_size(40);
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(0), Some((&b"c"[..], &b"333"[..])));
        // Too big for the table: empties it.
        t.insert(b"big", &[b'x'; 10]);
        assert_eq!(t.len(), 0);
        assert_eq!(t.size(), 0);
        t.set_max_size(0);
        t.insert(b"", b"");
        assert_eq!(t.len(), 0);
    }

    /// A small deterministic generator (xorshift), so that a failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// The index answers every lookup as a scan of the entries does, through random runs of
    /// inserts (repeated keys, names shared by many values, entries too big for the table),
    /// evictions, size changes, shrinking, clearing and the insertion counter wrapping.
    #[test]
    fn the_index_agrees_with_a_scan() {
        let names: [&[u8]; 6] = [b"etag", b"date", b"content-length", b"server", b"x-a", b""];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for run in 0..100 {
            let max = [4096, 512, 200, 100, 64][run % 5];
            let mut indexed = DynamicTable::indexed(max);
            let mut scanned = DynamicTable::new(max);
            if run % 3 == 0 {
                // Insertion numbers about to wrap.
                indexed.inserted = u32::MAX - 40;
            }
            for step in 0..400 {
                match rng.below(100) {
                    0 => {
                        let size = [0, 64, 150, max][rng.below(4) as usize];
                        indexed.set_max_size(size);
                        scanned.set_max_size(size);
                    }
                    1 => indexed.shrink_to_fit(),
                    _ => {
                        let name = names[rng.below(names.len() as u64) as usize];
                        let value = match rng.below(20) {
                            0 => vec![b'v'; 300],
                            n => format!("{}", n + rng.below(3)).into_bytes(),
                        };
                        indexed.insert_hashed(name, &value, Hashes::of(name, &value));
                        scanned.insert(name, &value);
                    }
                }
                assert_eq!(indexed.len(), scanned.len(), "run {run} step {step}");
                for _ in 0..20 {
                    let name = match rng.below(names.len() as u64 + 1) as usize {
                        i if i < names.len() => names[i],
                        _ => b"absent",
                    };
                    let value = format!("{}", rng.below(25));
                    assert_eq!(
                        indexed.find(name, value.as_bytes()),
                        scanned.find(name, value.as_bytes()),
                        "run {run} step {step}"
                    );
                }
                let slots = indexed.index.as_ref().map_or(0, |i| i.fields.len());
                assert!(slots == 0 || indexed.len() * 2 <= slots);
            }
        }
    }

    #[test]
    fn an_emptied_index_frees_its_slots_and_comes_back() {
        let insert = |t: &mut DynamicTable, n: &[u8], v: &[u8]| {
            t.insert_hashed(n, v, Hashes::of(n, v));
        };
        let mut t = DynamicTable::indexed(4096);
        assert!(t.index.is_none(), "made by the first insert");
        insert(&mut t, b"server", b"spate");
        assert_eq!(t.index.as_ref().unwrap().fields.len(), FIRST_SLOTS);
        t.set_max_size(0);
        t.set_max_size(4096);
        t.shrink_to_fit();
        assert!(t.index.is_none(), "an idle table keeps nothing on the heap");
        assert_eq!(t.find(b"server", b"spate"), None);
        insert(&mut t, b"server", b"spate");
        assert!(t.index.is_some());
        assert_eq!(t.find(b"server", b"spate"), Some((0, true)));
        assert_eq!(t.find(b"server", b"other"), Some((0, false)));
        // A decoder's inserts make none.
        let mut d = DynamicTable::new(4096);
        d.insert(b"server", b"spate");
        assert!(d.index.is_none());
        assert_eq!(d.find(b"server", b"spate"), Some((0, true)));
    }

    #[test]
    fn arena_stays_bounded_and_consistent() {
        let mut t = DynamicTable::new(4096);
        for i in 0..20_000usize {
            let name = format!("name-{}", i % 7);
            let value = "v".repeat(i % 300);
            t.insert(name.as_bytes(), value.as_bytes());
            assert_eq!(t.get(0), Some((name.as_bytes(), value.as_bytes())));
            let joined = [name.as_bytes(), value.as_bytes()].concat();
            assert_eq!(t.get_joined(0), Some((&joined[..], name.len())));
            assert!(t.size() <= 4096);
        }
        assert!(t.arena.capacity() <= 4 * 4096, "{}", t.arena.capacity());
        // Sizes add up from what is stored.
        let sum: usize = (0..t.len())
            .map(|i| t.get(i).map_or(0, |(n, v)| n.len() + v.len() + 32))
            .sum();
        assert_eq!(sum, t.size());
    }
}
