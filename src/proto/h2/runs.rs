//! A worker's buffer for runs of one repeated answer (`Connection::repeat_run`): the
//! answer's frames and body laid out again and again, back to back, so that a run of repeats
//! goes out as one piece instead of a frame piece and a body piece per answer.
//!
//! Why: the kernel copies a `writev` of 200 pieces (26 frame bytes, then a 4 KiB body, and
//! again) markedly slower than the same bytes in one piece, and the floor writes one piece.
//! Once the slots are filled for an answer, a repeat only writes its stream id into its
//! slot's two frame headers.
//!
//! The buffer is shared out as `Bytes`: a run goes into a connection's output as a slice of
//! it, and the slots are written again only when no output holds any (`Bytes::try_into_mut`).
//! While one does (its write did not finish), runs take the usual path: there is one buffer a
//! worker, whatever the number of connections, so memory stays bounded. The worker owns it
//! and lends it to each `recv` ([`RunBuffer`]); the core keeps no global.
//!
//! The slots have no expiry of their own: a run is only laid out for the connection's
//! memoised answer while the one rule for repeated answers (`http::repeat`) says it holds,
//! and slots filled with other frames or another body are filled anew.

use super::frame;
use bytes::{Bytes, BytesMut};

/// Bodies up to this long are laid out in slots: one DATA frame at the default frame size.
/// Above it the kernel's cost per piece is small next to the body's copy.
pub(super) const RUN_BODY_MAX: usize = 16_384;

/// Frames up to this long (a HEADERS frame and the head of a DATA frame) are laid out in
/// slots: a repeated request's answer has a few dozen bytes of frames.
pub(super) const RUN_FRAMES_MAX: usize = 1024;

/// The slots, and what they were filled with: one a worker, lent to each
/// [`Connection::recv_with`](super::Connection::recv_with).
#[derive(Default)]
pub struct RunBuffer {
    /// `filled` slots, back to back. Held by outputs while they write runs.
    slots: Bytes,
    /// A slot's frames, stream ids zero.
    frames: Vec<u8>,
    /// A slot's body after the frames; held so that its address stays its own.
    body: Option<Bytes>,
    filled: usize,
}

/// What a slot holds: the frames of an answer (stream ids zero) and the body that would be
/// spliced after them. `ids` are where the HEADERS and the DATA frame write their stream id.
pub(super) struct Answer<'a> {
    pub frames: &'a [u8],
    pub body: &'a Bytes,
    pub ids: [usize; 2],
}

impl Answer<'_> {
    /// Whether `buf` was filled with this answer: the same frames, and the body the same
    /// memory (`buf` holds it, so no other bytes can be there).
    fn fills(&self, buf: &RunBuffer) -> bool {
        buf.frames == self.frames
            && buf
                .body
                .as_ref()
                .is_some_and(|b| b.as_ptr() == self.body.as_ptr() && b.len() == self.body.len())
    }
}

/// A run being written into the worker's buffer: `put` each repeat, then `finish`.
pub(super) struct Run {
    slots: BytesMut,
    slot: usize,
    ids: [usize; 2],
    /// Slots filled with the answer (from the first one on).
    filled: usize,
    /// Slots written for this run.
    n: usize,
    /// Slots this run may take.
    limit: usize,
    frames: Vec<u8>,
    body: Bytes,
}

impl Run {
    /// Takes the worker's buffer for a run of at most `limit` repeats of `answer`; None when
    /// an output still holds part of it, or the answer is not one to lay out in slots.
    pub(super) fn start(buf: &mut RunBuffer, answer: Answer<'_>, limit: usize) -> Option<Run> {
        if limit == 0 || answer.frames.len() > RUN_FRAMES_MAX || answer.body.len() > RUN_BODY_MAX {
            return None;
        }
        let slot = answer.frames.len() + answer.body.len();
        {
            let same = answer.fills(buf);
            let slots = if buf.slots.is_empty() {
                BytesMut::new()
            } else {
                match std::mem::take(&mut buf.slots).try_into_mut() {
                    Ok(slots) => slots,
                    Err(held) => {
                        buf.slots = held;
                        return None;
                    }
                }
            };
            let mut run = Run {
                slots,
                slot,
                ids: answer.ids,
                filled: buf.filled,
                n: 0,
                limit,
                frames: std::mem::take(&mut buf.frames),
                body: answer.body.clone(),
            };
            if !same {
                run.slots.clear();
                run.filled = 0;
                run.frames.clear();
                run.frames.extend_from_slice(answer.frames);
            }
            buf.filled = 0;
            Some(run)
        }
    }

    /// Writes the next repeat, for stream `id`; false when the run has taken its slots.
    #[inline(always)]
    pub(super) fn put(&mut self, id: u32) -> bool {
        if self.n == self.limit {
            return false;
        }
        if self.n == self.filled {
            self.fill_one();
        }
        let at = self.n * self.slot;
        let sid = (id & frame::MAX_WINDOW).to_be_bytes();
        for d in self.ids {
            self.slots[at + d..at + d + 4].copy_from_slice(&sid);
        }
        self.n += 1;
        true
    }

    #[cold]
    fn fill_one(&mut self) {
        if self.filled == 0 {
            self.slots.reserve(self.limit * self.slot);
        }
        self.slots.extend_from_slice(&self.frames);
        self.slots.extend_from_slice(&self.body);
        self.filled += 1;
    }

    /// Gives the buffer back to the worker; returns the run's bytes to write (None when it
    /// took no slot).
    pub(super) fn finish(self, buf: &mut RunBuffer) -> Option<Bytes> {
        let slots = self.slots.freeze();
        let piece = (self.n > 0).then(|| slots.slice(..self.n * self.slot));
        buf.slots = slots;
        buf.frames = self.frames;
        buf.body = Some(self.body);
        buf.filled = self.filled;
        piece
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A HEADERS frame with a 1-byte block and a DATA frame head, stream ids zero.
    fn frames(block: u8, body_len: usize) -> Vec<u8> {
        let mut f = Vec::new();
        frame::put_head(&mut f, 1, 1, 4, 0);
        f.push(block);
        frame::put_head(&mut f, body_len, 0, 1, 0);
        f
    }

    fn run(buf: &mut RunBuffer, frames: &[u8], body: &Bytes, ids: &[u32]) -> Option<Bytes> {
        let answer = Answer {
            frames,
            body,
            ids: [5, 15],
        };
        let mut r = Run::start(buf, answer, ids.len())?;
        for &id in ids {
            assert!(r.put(id));
        }
        assert!(!r.put(99), "no slot past the limit");
        r.finish(buf)
    }

    #[test]
    fn slots_take_each_stream_id_and_are_laid_out_again_for_another_answer() {
        let mut buf = RunBuffer::default();
        let body = Bytes::from_static(b"0123456789");
        let f = frames(0x88, body.len());
        let piece = run(&mut buf, &f, &body, &[1, 3, 5]).expect("the buffer is free");
        assert_eq!(piece.len(), 3 * (f.len() + body.len()));
        for (k, slot) in piece.chunks(f.len() + body.len()).enumerate() {
            let id = (1 + 2 * k as u32).to_be_bytes();
            assert_eq!(slot[5..9], id);
            assert_eq!(slot[15..19], id);
            assert_eq!(slot[f.len()..], body[..]);
        }
        assert!(
            run(&mut buf, &f, &body, &[7]).is_none(),
            "held by an unwritten output"
        );
        drop(piece);
        // Another block, then another body: the slots are filled anew.
        let g = frames(0x89, body.len());
        let piece = run(&mut buf, &g, &body, &[7, 9]).expect("free again");
        assert_eq!(piece[9], 0x89);
        assert_eq!(piece[g.len() + body.len() + 9], 0x89);
        drop(piece);
        let other = Bytes::copy_from_slice(b"abcdefghij");
        let piece = run(&mut buf, &g, &other, &[11]).expect("free");
        assert_eq!(piece[g.len()..], other[..]);
        assert_eq!(piece[5..9], 11u32.to_be_bytes());
    }
}
