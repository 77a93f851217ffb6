//! The parse of a request head seen before: clients that repeat one request (a load
//! generator, a health check, a poll) send the same head bytes each time, and a worker's
//! connections often all send the same one.
//!
//! Parsing is a pure function of the head's bytes and the limits: `parse_head` of a buffer
//! that starts with a complete head depends on that head alone (the bytes after it are not
//! looked at). So when the buffer starts with exactly the bytes of a head parsed before
//! under the same limits, its parse is the one kept, with every validation, limit and
//! framing decision as a full parse makes them. A changed byte anywhere in the head is a
//! miss, and the head is parsed in full. Only heads that parsed without error are kept.
//! So a kept parse never expires: unlike a kept answer (`http::repeat`), it depends on no
//! time, file or Date.

use super::parse::{parse_head, Head, HeadLimits};
use super::Error;

/// Heads longer than this are always parsed (and a peer cannot make the memo hold more).
const HEAD_MAX: usize = 1024;

/// One worker's memo; its limits never change (a reload makes new workers).
#[derive(Default)]
pub struct ParseMemo {
    /// The kept head's bytes; empty when none is kept.
    bytes: Vec<u8>,
    /// Its parse, without the field list (kept in `fields`, whose room is reused).
    head: Option<Head>,
    fields: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    /// A fingerprint of the last head parsed in full. A head is kept when the next one has
    /// the same: repeated requests do, varied ones seldom, so they do not pay for keeping
    /// every head (a fingerprint costs a third of keeping one).
    last: u64,
}

impl ParseMemo {
    pub fn new() -> ParseMemo {
        ParseMemo::default()
    }

    /// `parse_head(buf, limits)`, from the memo when `buf` starts with the kept head. `limits`
    /// must be the same on every call.
    #[inline]
    pub fn parse(&mut self, buf: &[u8], limits: &HeadLimits) -> Result<Option<Head>, Error> {
        if let Some(kept) = &self.head {
            let n = self.bytes.len();
            if buf.len() >= n && buf[..n] == self.bytes[..] {
                let mut fields = crate::http::recycle::field_list(self.fields.len());
                fields.extend_from_slice(&self.fields);
                // The kept head's own field list is empty: no allocation here.
                let mut head = kept.clone();
                head.fields = fields;
                return Ok(Some(head));
            }
        }
        let parsed = parse_head(buf, limits);
        if let Ok(Some(head)) = &parsed {
            self.parsed_in_full(buf, head);
        }
        parsed
    }

    /// Keeps `head` (the parse of `buf`'s start) when the last head looked the same.
    #[inline(never)]
    fn parsed_in_full(&mut self, buf: &[u8], head: &Head) {
        if head.len > HEAD_MAX {
            return;
        }
        let bytes = &buf[..head.len];
        let print = fingerprint(bytes);
        let repeated = print == self.last;
        self.last = print;
        if !repeated {
            return;
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
        self.fields.clear();
        self.fields.extend_from_slice(&head.fields);
        self.head = Some(Head {
            method: head.method.clone(),
            version: head.version,
            target: head.target.clone(),
            authority: head.authority.clone(),
            fields: Vec::new(),
            len: head.len,
            body: head.body,
            keep_alive: head.keep_alive,
            expect_continue: head.expect_continue,
            upgrade: head.upgrade,
        });
    }
}

/// Bytes of a head's start and of its end that its fingerprint reads.
const PRINT_START: usize = 32;
const PRINT_END: usize = 16;

/// A hash of a head's length, its first `PRINT_START` bytes (the request line, where varied
/// requests differ) and its last `PRINT_END`, eight at a time: not all of it, which cost a
/// varied request as much as keeping it would. A head that differs from the last only in
/// between is kept when it need not be (a copy); the bytes are what a hit compares.
fn fingerprint(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mix = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let start = &bytes[..bytes.len().min(PRINT_START)];
    let end = &bytes[bytes.len().saturating_sub(PRINT_END)..];
    let mut h = bytes.len() as u64;
    for part in [start, end] {
        let mut chunks = part.chunks_exact(8);
        for c in &mut chunks {
            h = mix(h, u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        for &b in chunks.remainder() {
            h = mix(h, u64::from(b));
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        head_size: 4096,
        target_size: 1024,
        fields: 16,
        body_size: 1 << 20,
    };

    /// The memo's answer, compared with a full parse of the same buffer.
    fn check(memo: &mut ParseMemo, buf: &[u8]) -> Result<Option<Head>, Error> {
        let got = memo.parse(buf, &LIMITS);
        let want = parse_head(buf, &LIMITS);
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{buf:?}");
        got
    }

    fn kept(memo: &ParseMemo) -> bool {
        memo.head.is_some()
    }

    #[test]
    fn a_repeated_head_is_kept_and_answers_as_a_full_parse() {
        let get = b"GET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        let mut memo = ParseMemo::new();
        check(&mut memo, get).unwrap();
        assert!(!kept(&memo));
        check(&mut memo, get).unwrap();
        assert!(kept(&memo));
        // A hit, with what follows the head (a body, a pipelined request) left alone.
        let mut pipelined = get.to_vec();
        pipelined.extend_from_slice(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
        let head = check(&mut memo, &pipelined).unwrap().unwrap();
        assert_eq!(head.len, get.len());
        check(&mut memo, &pipelined[head.len..]).unwrap();
    }

    #[test]
    fn a_head_that_differs_only_in_its_middle_is_kept_and_still_parsed_right() {
        let mut memo = ParseMemo::new();
        let head = |v: u32| {
            format!("GET /a HTTP/1.1\r\nHost: x\r\nUser-Agent: {v:04}\r\nAccept: */*\r\n\r\n")
        };
        for v in 0..4 {
            check(&mut memo, head(v).as_bytes()).unwrap();
        }
        assert!(kept(&memo), "the same start and end: kept");
    }

    #[test]
    fn heads_that_differ_each_time_are_not_kept() {
        let mut memo = ParseMemo::new();
        for i in 0..20 {
            let h = format!("GET /a HTTP/1.1\r\nHost: x\r\nUser-Agent: u{i:02}\r\n\r\n");
            check(&mut memo, h.as_bytes()).unwrap();
            assert!(!kept(&memo));
        }
    }

    #[test]
    fn any_changed_byte_is_parsed_in_full() {
        let get = b"GET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        let mut memo = ParseMemo::new();
        check(&mut memo, get).unwrap();
        check(&mut memo, get).unwrap();
        assert!(kept(&memo));
        // Each byte changed in turn, to something that parses or fails: same as in full.
        for i in 0..get.len() {
            for b in [b'x', b' ', b'\n', b':', 0] {
                let mut changed = get.to_vec();
                changed[i] = b;
                let _ = check(&mut memo, &changed);
            }
            // The kept head may have changed along the way: a repeat is still right.
            let _ = check(&mut memo, get);
        }
        // The same head cut short needs more bytes, as in full.
        assert!(check(&mut memo, &get[..get.len() - 1]).unwrap().is_none());
    }

    #[test]
    fn framing_and_errors_are_as_in_full() {
        let mut memo = ParseMemo::new();
        let heads: [&[u8]; 5] = [
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
            b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GET /a HTTP/1.0\r\n\r\n",
            b"GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"PURGE /a HTTP/1.1\r\nHost: x\r\n\r\n",
        ];
        for _ in 0..3 {
            for h in heads {
                let _ = check(&mut memo, h);
                let _ = check(&mut memo, h);
            }
        }
    }
}
