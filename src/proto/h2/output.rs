//! What a connection writes: its frames, built in one buffer, and the large body payloads
//! whose bytes are already in memory (the open-file cache's copy of a file, a response's
//! `Bytes`, a streamed chunk), which go out from that memory instead of being copied into the
//! buffer first. Each such payload is spliced in after the frame bytes that precede it (its
//! DATA frame's header); a writer gathers the pieces into one `writev` (or one run of TLS
//! records).

use bytes::Bytes;
use std::io::IoSlice;

/// A DATA payload in memory is referenced, not copied, from this size on: below it a copy
/// costs less than the reference (an atomic count) and the extra `iovec`.
pub const SPLICE_MIN: usize = 2048;

/// A body that goes out after the first `at` bytes of the frame buffer.
#[derive(Debug)]
pub struct Spliced {
    at: usize,
    /// None: the bytes of the last body before it, again (see `SplicedBodies::push_again`).
    body: Option<Bytes>,
}

/// The bodies spliced into one output, in order of `at`.
#[derive(Debug, Default)]
pub(super) struct SplicedBodies {
    list: Vec<Spliced>,
    /// The bytes of all of them.
    len: usize,
    /// Where the last body pushed (not again) is in memory, and its length: the list holds
    /// it, so bytes at that address are its bytes until `clear`.
    last: (usize, usize),
}

impl SplicedBodies {
    /// Adds `body` after the first `at` bytes of the frame buffer, which must be no earlier
    /// than the last one's.
    pub(super) fn push(&mut self, at: usize, body: Bytes) {
        debug_assert!(self.list.last().is_none_or(|s| s.at <= at));
        self.len += body.len();
        self.last = (body.as_ptr() as usize, body.len());
        self.list.push(Spliced {
            at,
            body: Some(body),
        });
    }

    /// Adds the last body pushed again after the first `at` bytes of the frame buffer when
    /// `data` is that body's very memory: a turn of repeats of one answer holds a single
    /// reference to it, instead of counting one up and down (an atomic each way) per repeat.
    /// Returns whether it did.
    pub(super) fn push_again(&mut self, at: usize, data: &[u8]) -> bool {
        if self.list.is_empty() || (data.as_ptr() as usize, data.len()) != self.last {
            return false;
        }
        debug_assert!(self.list.last().is_some_and(|s| s.at <= at));
        self.len += data.len();
        self.list.push(Spliced { at, body: None });
        true
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn clear(&mut self) {
        self.list.clear();
        self.len = 0;
        self.last = (0, 0);
    }

    /// Takes out the (empty) list, keeping its room, for another connection to use.
    pub(super) fn take_list(&mut self) -> Vec<Spliced> {
        debug_assert!(self.list.is_empty());
        self.clear();
        std::mem::take(&mut self.list)
    }

    /// Uses `list`'s room (it is emptied first), unless bodies are spliced already.
    pub(super) fn lend_list(&mut self, mut list: Vec<Spliced>) {
        if self.list.is_empty() {
            list.clear();
            self.list = list;
        }
    }
}

/// A connection's output as the pieces to write, in order: frame bytes and spliced bodies.
#[derive(Debug, Clone, Copy)]
pub struct OutputParts<'a> {
    frames: &'a [u8],
    spliced: &'a [Spliced],
    len: usize,
}

impl<'a> OutputParts<'a> {
    pub(super) fn new(frames: &'a [u8], spliced: &'a SplicedBodies) -> OutputParts<'a> {
        OutputParts {
            frames,
            spliced: &spliced.list,
            len: frames.len() + spliced.len,
        }
    }

    /// Output that is all in one buffer.
    pub fn whole(bytes: &'a [u8]) -> OutputParts<'a> {
        OutputParts {
            frames: bytes,
            spliced: &[],
            len: bytes.len(),
        }
    }

    /// The output in one piece, when no body is spliced in: it takes the plain write path,
    /// with no `iovec`s to gather.
    #[inline]
    pub fn as_whole(&self) -> Option<&'a [u8]> {
        self.spliced.is_empty().then_some(self.frames)
    }

    /// The bytes of all the pieces.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `f` with each piece in order, empty ones left out, while it returns true.
    #[inline(always)]
    fn walk(&self, mut f: impl FnMut(&'a [u8]) -> bool) {
        let frames = self.frames;
        let mut from = 0;
        let mut last: &'a [u8] = &[];
        for s in self.spliced {
            if from < s.at {
                if !f(&frames[from..s.at]) {
                    return;
                }
                from = s.at;
            }
            if let Some(b) = &s.body {
                last = b;
            }
            if !last.is_empty() && !f(last) {
                return;
            }
        }
        if from < frames.len() {
            f(&frames[from..]);
        }
    }

    /// The pieces in order, empty ones left out.
    #[cfg(test)]
    pub fn pieces(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut v = Vec::new();
        self.walk(|piece| {
            v.push(piece);
            true
        });
        v.into_iter()
    }

    /// Fills `iov` with the pieces from byte `skip` of the output on; returns how many it
    /// filled (fewer than `iov.len()` only when the output ends).
    pub fn gather<'b>(&'b self, mut skip: usize, iov: &mut [IoSlice<'b>]) -> usize {
        if iov.is_empty() {
            return 0;
        }
        let mut n = 0;
        self.walk(|piece| {
            if skip >= piece.len() {
                skip -= piece.len();
                return true;
            }
            iov[n] = IoSlice::new(&piece[skip..]);
            skip = 0;
            n += 1;
            n < iov.len()
        });
        n
    }

    /// The output in one buffer (tests, and peers of the bytes that want them whole).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        self.walk(|piece| {
            v.extend_from_slice(piece);
            true
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spliced(at_bodies: &[(usize, &'static [u8])]) -> SplicedBodies {
        let mut s = SplicedBodies::default();
        for (at, b) in at_bodies {
            s.push(*at, Bytes::from_static(b));
        }
        s
    }

    #[test]
    fn pieces_interleave_frames_and_bodies_in_order() {
        let s = spliced(&[(2, b"XY"), (2, b"Z"), (5, b"W")]);
        let parts = OutputParts::new(b"abcdefg", &s);
        let pieces: Vec<&[u8]> = parts.pieces().collect();
        assert_eq!(
            pieces,
            vec![&b"ab"[..], b"XY", b"Z", b"cde", b"W", b"fg"],
            "a body at the end of the frames and two at one place keep their order"
        );
        assert_eq!(parts.len(), 11);
        assert_eq!(parts.to_vec(), b"abXYZcdeWfg");

        let s = spliced(&[(0, b"X"), (3, b"Y")]);
        let parts = OutputParts::new(b"abc", &s);
        assert_eq!(parts.to_vec(), b"XabcY");
        assert_eq!(parts.pieces().count(), 3);
    }

    #[test]
    fn a_body_pushed_again_goes_out_again_from_the_same_memory() {
        static W: &[u8] = b"W";
        let body = Bytes::from(b"XYZ".to_vec());
        let same_bytes_elsewhere = b"XYZ".to_vec();
        let mut s = SplicedBodies::default();
        assert!(!s.push_again(0, &body), "nothing to repeat yet");
        s.push(1, body.clone());
        assert!(s.push_again(2, &body));
        assert!(s.push_again(2, &body[..]));
        assert!(!s.push_again(3, &body[1..]), "a part is not the body");
        assert!(
            !s.push_again(3, &same_bytes_elsewhere),
            "equal bytes elsewhere are not it"
        );
        s.push(3, Bytes::from_static(W));
        assert!(!s.push_again(4, &body), "only the last body pushed repeats");
        assert!(s.push_again(4, W));
        let parts = OutputParts::new(b"abcde", &s);
        assert_eq!(parts.to_vec(), b"aXYZbXYZXYZcWdWe");
        assert_eq!(parts.len(), 16);
        let mut iov = [IoSlice::new(&[]); 16];
        let n = parts.gather(6, &mut iov);
        let got: Vec<u8> = iov[..n].iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(got, b"YZXYZcWdWe");
        s.clear();
        assert!(!s.push_again(0, &body), "a cleared list holds no body");
    }

    #[test]
    fn gather_starts_mid_piece_and_stops_at_the_array_end() {
        let s = spliced(&[(2, b"XY"), (5, b"W")]);
        let parts = OutputParts::new(b"abcdefg", &s);
        let mut iov = [IoSlice::new(&[]); 2];
        let n = parts.gather(3, &mut iov);
        assert_eq!(n, 2);
        assert_eq!(&*iov[0], b"Y");
        assert_eq!(&*iov[1], b"cde");
        let mut iov = [IoSlice::new(&[]); 8];
        let n = parts.gather(7, &mut iov);
        let got: Vec<u8> = iov[..n].iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(got, b"Wfg");
        assert_eq!(parts.gather(parts.len(), &mut iov), 0);
        assert_eq!(OutputParts::whole(b"").gather(0, &mut iov), 0);
        assert_eq!(parts.as_whole(), None);
        assert_eq!(OutputParts::whole(b"ab").as_whole(), Some(&b"ab"[..]));
    }
}
