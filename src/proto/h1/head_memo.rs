//! Response heads written before, kept rendered: a server answering the same route or file
//! over and over writes the same head but for its Date, so the head is rendered once and
//! copied after, with the Date patched when the second changes. The caller reads the clock
//! and passes the Date in.
//!
//! A head is recognised by the identity of its header fields: handlers clone them from their
//! configuration or the open-file cache, so the `Bytes` of one answer point where the last
//! one's did. The memo keeps clones of the fields it was rendered from; while it holds them
//! their bytes cannot change or be freed, so the same address and length mean the same bytes
//! and a hit writes exactly what `write_head` would. Such a head never goes stale but for
//! its Date, which the one rule for repeated answers dates (`http::repeat::Dated`). A head
//! is kept the second time in a row its slot sees it, so heads written once (varied
//! traffic) cost no copy.

use super::write::{write_head_dated, BodyLength, ResponseHead};
use crate::http::clock::DATE_LEN;
use crate::http::repeat::Dated;
use bytes::Bytes;

/// Heads kept; a slot is chosen by a hash of the head, so a few answers that alternate (a
/// page and its assets) each keep theirs.
const SLOTS: usize = 8;
/// Longer heads are written as usual and not kept (many or long fields).
const HEAD_MAX: usize = 1024;

/// Rendered response heads of one worker.
pub struct HeadMemo {
    slots: Box<[Slot; SLOTS]>,
}

/// One rendered head and what it was rendered from.
#[derive(Default)]
struct Slot {
    status: u16,
    body: BodyLength,
    keep_alive: bool,
    server_line: Vec<u8>,
    /// Clones of the fields, which keep their bytes alive; empty when the slot is unused
    /// (an unused slot never matches: its `rendered` is empty).
    headers: Vec<(Bytes, Bytes)>,
    rendered: Vec<u8>,
    /// Where the Date value is in `rendered`, and the second it was written for.
    date_at: usize,
    dated: Dated,
    /// The fingerprint of the last head that came to this slot.
    seen: u64,
}

impl HeadMemo {
    pub fn new() -> HeadMemo {
        HeadMemo {
            slots: Box::default(),
        }
    }

    /// Appends the head of `head` to `out`, as `write_head` does; returns its length.
    #[inline]
    pub fn write(&mut self, out: &mut Vec<u8>, head: &ResponseHead<'_>) -> usize {
        // A head without our Date (a proxied response) has nothing to patch: not kept.
        let Some(date) = head.date else {
            return write_head_dated(out, head).0;
        };
        let print = fingerprint(head);
        let slot = &mut self.slots[print as usize % SLOTS];
        if !slot.matches(head) {
            // Kept when this slot saw the same head last time: a head written once (varied
            // traffic, each answer's fields its own) costs no copy of it and its fields.
            let repeated = slot.seen == print;
            slot.seen = print;
            return if repeated {
                slot.render(out, head, date.second)
            } else {
                write_head_dated(out, head).0
            };
        }
        if slot.dated.redate(date.second) {
            slot.rendered[slot.date_at..slot.date_at + DATE_LEN].copy_from_slice(&date.text);
        }
        out.extend_from_slice(&slot.rendered);
        slot.rendered.len()
    }
}

impl Default for HeadMemo {
    fn default() -> Self {
        Self::new()
    }
}

impl Slot {
    #[inline]
    fn matches(&self, head: &ResponseHead<'_>) -> bool {
        let same = |a: &Bytes, b: &Bytes| a.as_ptr() == b.as_ptr() && a.len() == b.len();
        !self.rendered.is_empty()
            && self.status == head.status
            && self.body == head.body
            && self.keep_alive == head.keep_alive
            && self.headers.len() == head.headers.len()
            && self.server_line == head.server_line
            && self
                .headers
                .iter()
                .zip(head.headers)
                .all(|((n, v), (hn, hv))| same(n, hn) && same(v, hv))
    }

    /// Writes the head in full and keeps it in this slot. Out of line: the miss.
    #[inline(never)]
    fn render(&mut self, out: &mut Vec<u8>, head: &ResponseHead<'_>, second: u64) -> usize {
        let start = out.len();
        let (len, date_at) = write_head_dated(out, head);
        let Some(date_at) = date_at else {
            return len;
        };
        self.rendered.clear();
        self.headers.clear();
        if len > HEAD_MAX {
            return len;
        }
        self.rendered.extend_from_slice(&out[start..]);
        self.headers.extend_from_slice(head.headers);
        self.server_line.clear();
        self.server_line.extend_from_slice(head.server_line);
        self.status = head.status;
        self.body = head.body;
        self.keep_alive = head.keep_alive;
        self.date_at = date_at;
        self.dated = Dated::at(second);
        len
    }
}

/// A hash of what tells heads apart most often (the field values' addresses, the length,
/// the status); it picks the slot.
#[inline]
fn fingerprint(head: &ResponseHead<'_>) -> u64 {
    let length = match head.body {
        BodyLength::Known(n) => n,
        BodyLength::Chunked => u64::MAX,
        BodyLength::UntilClose => u64::MAX - 1,
    };
    let mut h = u64::from(head.status) ^ length;
    for (_, v) in head.headers {
        h = h.rotate_left(7) ^ (v.as_ptr() as u64 >> 3);
    }
    h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32
}

#[cfg(test)]
mod tests {
    use super::super::write::write_head;
    use super::*;
    use crate::http::clock::Date;

    const NOW: Date = Date {
        second: 784_111_777,
        text: *b"Sun, 06 Nov 1994 08:49:37 GMT",
    };

    fn head<'a>(headers: &'a [(Bytes, Bytes)], len: u64, keep_alive: bool) -> ResponseHead<'a> {
        ResponseHead {
            status: 200,
            headers,
            body: BodyLength::Known(len),
            keep_alive,
            server_line: b"Server: spate\r\n",
            date: Some(&NOW),
        }
    }

    fn memo_text(memo: &mut HeadMemo, h: &ResponseHead<'_>) -> Vec<u8> {
        let mut out = b"before".to_vec();
        let n = memo.write(&mut out, h);
        assert_eq!(n, out.len() - 6);
        out.split_off(6)
    }

    fn plain_text(h: &ResponseHead<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        write_head(&mut out, h);
        out
    }

    /// The memo writes what `write_head` writes (in the same second: either side of it).
    fn assert_same(memo: &mut HeadMemo, h: &ResponseHead<'_>) {
        let before = plain_text(h);
        let got = memo_text(memo, h);
        let after = plain_text(h);
        assert!(
            got == before || got == after,
            "{}",
            String::from_utf8_lossy(&got)
        );
    }

    #[test]
    fn a_hit_writes_what_write_head_writes() {
        let ct = Bytes::from(b"text/plain".to_vec());
        let fields = [(Bytes::from_static(b"Content-Type"), ct.clone())];
        let mut memo = HeadMemo::new();
        for _ in 0..3 {
            let h = head(&fields, 2, true);
            assert_same(&mut memo, &h);
        }
        // Same bytes at another address: still the same head (a miss, rendered anew).
        let other = [(
            Bytes::from_static(b"Content-Type"),
            Bytes::from(b"text/plain".to_vec()),
        )];
        let h = head(&other, 2, true);
        assert_same(&mut memo, &h);
    }

    #[test]
    fn any_difference_is_written_as_is() {
        let a = Bytes::from(b"text/plain".to_vec());
        let b = Bytes::from(b"text/html".to_vec());
        let fa = [(Bytes::from_static(b"Content-Type"), a.clone())];
        let fb = [(Bytes::from_static(b"Content-Type"), b.clone())];
        let two = [
            (Bytes::from_static(b"Content-Type"), a.clone()),
            (Bytes::from_static(b"ETag"), Bytes::from_static(b"\"x\"")),
        ];
        let mut memo = HeadMemo::new();
        let heads = [
            head(&fa, 2, true),
            head(&fb, 2, true),
            head(&fa, 3, true),
            head(&fa, 2, false),
            head(&two, 2, true),
            ResponseHead {
                status: 404,
                ..head(&fa, 2, true)
            },
            ResponseHead {
                status: 304,
                ..head(&fa, 2, true)
            },
            ResponseHead {
                server_line: b"",
                ..head(&fa, 2, true)
            },
            ResponseHead {
                body: BodyLength::Chunked,
                ..head(&fa, 2, true)
            },
            ResponseHead {
                date: None,
                ..head(&fa, 2, true)
            },
        ];
        // Twice round, each after every other: every hit and miss is checked.
        for _ in 0..2 {
            for h in &heads {
                assert_same(&mut memo, h);
            }
        }
    }

    #[test]
    fn a_head_is_kept_the_second_time_its_slot_sees_it() {
        let ct = Bytes::from(b"text/plain".to_vec());
        let fields = [(Bytes::from_static(b"Content-Type"), ct)];
        let h = head(&fields, 2, true);
        let i = fingerprint(&h) as usize % SLOTS;
        let mut memo = HeadMemo::new();
        assert_same(&mut memo, &h);
        assert!(memo.slots[i].rendered.is_empty(), "seen once: not kept");
        assert_same(&mut memo, &h);
        assert!(!memo.slots[i].rendered.is_empty(), "seen twice: kept");
        assert_same(&mut memo, &h);
    }

    #[test]
    fn a_new_second_is_patched_in() {
        let fields = [(
            Bytes::from_static(b"Content-Type"),
            Bytes::from_static(b"text/plain"),
        )];
        let mut memo = HeadMemo::new();
        let h = head(&fields, 2, true);
        assert_same(&mut memo, &h);
        let later = Date::at(NOW.second + 1);
        let h = ResponseHead {
            date: Some(&later),
            ..h
        };
        let got = memo_text(&mut memo, &h);
        assert_eq!(got, plain_text(&h));
        assert!(String::from_utf8_lossy(&got).contains("Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n"));
    }

    #[test]
    fn a_stale_date_is_patched() {
        let fields = [(
            Bytes::from_static(b"Content-Type"),
            Bytes::from_static(b"text/plain"),
        )];
        let h = head(&fields, 2, true);
        let mut memo = HeadMemo::new();
        memo_text(&mut memo, &h);
        memo_text(&mut memo, &h);
        let slot = &mut memo.slots[fingerprint(&h) as usize % SLOTS];
        // As if rendered a second earlier, with another date in it.
        slot.dated = Dated::at(1);
        let at = slot.date_at;
        slot.rendered[at..at + DATE_LEN].copy_from_slice(b"Thu, 01 Jan 1970 00:00:01 GMT");
        assert_same(&mut memo, &h);
    }
}
