//! What a connection writes: its frames, built in one buffer, and the large body payloads
//! whose bytes are already in memory (the open-file cache's copy of a file, a response's
//! `Bytes`, a streamed chunk), which go out from that memory instead of being copied into the
//! buffer first. Each such payload is spliced in after the frame bytes that precede it (its
//! DATA frame's header); a writer gathers the pieces into one `writev` (or one run of TLS
//! records). On cleartext, a large DATA payload of a file that is not in memory is spliced in
//! as a range of that file, which the writer sends with `sendfile` behind its frame head:
//! the bytes go from the page cache to the socket without a read into the buffer and a copy
//! out of it.

use crate::http::OpenFile;
use bytes::Bytes;
use std::io::IoSlice;
use std::rc::Rc;

/// A DATA payload in memory is referenced, not copied, from this size on: below it a copy
/// costs less than the reference (an atomic count) and the extra `iovec`.
pub const SPLICE_MIN: usize = 2048;

/// A DATA payload read from a file (one not held in memory) can be sent from the file with
/// `sendfile` from this size on, instead of read into the output. The best of 4, 8 and 16 KiB
/// on a loaded machine, but off by default (`server/h2_settings.rs`): on a quiet one the
/// corked sendfile cost more kernel time than the copies it saves (`docs/bench-log.md`,
/// session 28).
pub const SENDFILE_MIN: usize = 8192;

/// A body that goes out after the first `at` bytes of the frame buffer.
#[derive(Debug)]
pub struct Spliced {
    at: usize,
    body: Piece,
}

#[derive(Debug)]
enum Piece {
    Bytes(Bytes),
    /// The bytes of the last `Bytes` body before it, again (see `SplicedBodies::push_again`).
    Again,
    /// `len` bytes of `file` from `offset`, sent from the file (see [`SENDFILE_MIN`]).
    File {
        file: Rc<OpenFile>,
        offset: u64,
        len: usize,
    },
}

/// One piece of the output: bytes in memory, or a range of a file to send from the file.
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    Mem(&'a [u8]),
    File {
        file: &'a std::fs::File,
        offset: u64,
        len: usize,
    },
}

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Mem(b) => b.len(),
            Part::File { len, .. } => *len,
        }
    }
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
    /// How many of them are file ranges.
    files: usize,
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
            body: Piece::Bytes(body),
        });
    }

    /// Adds `len` bytes of `file` from `offset` after the first `at` bytes of the frame
    /// buffer, to be sent from the file; `at` no earlier than the last one's.
    pub(super) fn push_file(&mut self, at: usize, file: Rc<OpenFile>, offset: u64, len: usize) {
        debug_assert!(self.list.last().is_none_or(|s| s.at <= at));
        self.len += len;
        self.files += 1;
        self.list.push(Spliced {
            at,
            body: Piece::File { file, offset, len },
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
        self.list.push(Spliced {
            at,
            body: Piece::Again,
        });
        true
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn clear(&mut self) {
        self.list.clear();
        self.len = 0;
        self.last = (0, 0);
        self.files = 0;
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
    /// Whether a piece is a file range: only a writer that can send from a file may take it.
    has_files: bool,
}

impl<'a> OutputParts<'a> {
    pub(super) fn new(frames: &'a [u8], spliced: &'a SplicedBodies) -> OutputParts<'a> {
        OutputParts {
            frames,
            spliced: &spliced.list,
            len: frames.len() + spliced.len,
            has_files: spliced.files > 0,
        }
    }

    /// Output that is all in one buffer.
    pub fn whole(bytes: &'a [u8]) -> OutputParts<'a> {
        OutputParts {
            frames: bytes,
            spliced: &[],
            len: bytes.len(),
            has_files: false,
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

    /// Whether a piece is a file range ([`Part::File`]), which [`OutputParts::gather`] stops
    /// before: the writer sends it with [`OutputParts::file_at`].
    #[inline]
    pub fn has_files(&self) -> bool {
        self.has_files
    }

    /// Calls `f` with each piece in order, empty ones left out, while it returns true.
    #[inline(always)]
    fn walk(&self, mut f: impl FnMut(Part<'a>) -> bool) {
        let frames = self.frames;
        let mut from = 0;
        let mut last: &'a [u8] = &[];
        for s in self.spliced {
            if from < s.at {
                if !f(Part::Mem(&frames[from..s.at])) {
                    return;
                }
                from = s.at;
            }
            let part = match &s.body {
                Piece::Bytes(b) => {
                    last = b;
                    Part::Mem(last)
                }
                Piece::Again => Part::Mem(last),
                Piece::File { file, offset, len } => Part::File {
                    file: &file.file,
                    offset: *offset,
                    len: *len,
                },
            };
            if part.len() > 0 && !f(part) {
                return;
            }
        }
        if from < frames.len() {
            f(Part::Mem(&frames[from..]));
        }
    }

    /// The pieces in memory in order, empty ones left out (tests: panics at a file range).
    #[cfg(test)]
    pub fn pieces(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.parts().map(|p| match p {
            Part::Mem(bytes) => bytes,
            Part::File { .. } => panic!("a file range: use parts()"),
        })
    }

    /// The pieces in order, empty ones left out.
    #[cfg(test)]
    pub fn parts(&self) -> impl Iterator<Item = Part<'a>> + 'a {
        let mut v = Vec::new();
        self.walk(|piece| {
            v.push(piece);
            true
        });
        v.into_iter()
    }

    /// Fills `iov` with the pieces from byte `skip` of the output on; returns how many it
    /// filled (fewer than `iov.len()` only when the output ends, or a file range follows).
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
            let Part::Mem(bytes) = piece else {
                return false;
            };
            iov[n] = IoSlice::new(&bytes[skip..]);
            skip = 0;
            n += 1;
            n < iov.len()
        });
        n
    }

    /// Writes the pieces from byte `skip` on, in one walk over them, for output with file
    /// ranges ([`OutputParts::has_files`]): `mem` sends gathered memory pieces (at most
    /// `iov.len()` at once; `more` says more bytes follow at once, so the kernel may hold the
    /// tail for them), `file` sends a file range; each returns how many bytes it sent. Stops
    /// at the first short send; returns the bytes sent, or the first call's error when
    /// nothing was (a later error comes back on the next call).
    pub fn send_with(
        &self,
        mut skip: usize,
        iov: &mut [IoSlice<'a>],
        mut mem: impl FnMut(&[IoSlice<'a>], bool) -> std::io::Result<usize>,
        mut file: impl FnMut(&'a std::fs::File, u64, usize) -> std::io::Result<usize>,
    ) -> std::io::Result<usize> {
        if iov.is_empty() || skip >= self.len {
            return Ok(0);
        }
        let left = self.len - skip;
        let mut done = 0;
        let mut n = 0;
        let mut queued = 0;
        let mut failed = None;
        // Sends the queued memory pieces; false when the walk must stop.
        let mut flush = |n: &mut usize,
                         queued: &mut usize,
                         done: &mut usize,
                         failed: &mut Option<std::io::Error>,
                         iov: &[IoSlice<'a>]| {
            if *n == 0 {
                return true;
            }
            let more = *done + *queued < left;
            let want = *queued;
            *n = 0;
            *queued = 0;
            match mem(iov, more) {
                Ok(sent) => {
                    *done += sent;
                    sent == want
                }
                Err(e) => {
                    *failed = Some(e);
                    false
                }
            }
        };
        self.walk(|piece| {
            if skip >= piece.len() {
                skip -= piece.len();
                return true;
            }
            match piece {
                Part::Mem(bytes) => {
                    iov[n] = IoSlice::new(&bytes[skip..]);
                    queued += bytes.len() - skip;
                    skip = 0;
                    n += 1;
                    n < iov.len() || flush(&mut n, &mut queued, &mut done, &mut failed, &iov[..])
                }
                Part::File {
                    file: f,
                    offset,
                    len,
                } => {
                    let k = n;
                    if !flush(&mut n, &mut queued, &mut done, &mut failed, &iov[..k]) {
                        return false;
                    }
                    let want = len - skip;
                    let sent = file(f, offset + skip as u64, want);
                    skip = 0;
                    match sent {
                        Ok(sent) => {
                            done += sent;
                            sent == want
                        }
                        Err(e) => {
                            failed = Some(e);
                            false
                        }
                    }
                }
            }
        });
        let k = n;
        if failed.is_none() {
            flush(&mut n, &mut queued, &mut done, &mut failed, &iov[..k]);
        }
        match failed {
            Some(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }

    /// The output in one buffer, file ranges read (tests and the fuzz targets); a file range
    /// that cannot be read ends the copy there.
    pub fn to_vec(&self) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut v = Vec::with_capacity(self.len);
        self.walk(|piece| match piece {
            Part::Mem(bytes) => {
                v.extend_from_slice(bytes);
                true
            }
            Part::File { file, offset, len } => {
                let at = v.len();
                v.resize(at + len, 0);
                let read = file.read_exact_at(&mut v[at..], offset).is_ok();
                if !read {
                    v.truncate(at);
                }
                read
            }
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

    /// What `send_with` sent, as the bytes a socket would have got: memory pieces gathered
    /// (with their MORE flag), file ranges read; `take` bounds each send.
    fn sent_by(parts: &OutputParts<'_>, from: usize, take: usize) -> (Vec<u8>, Vec<bool>, usize) {
        use std::os::unix::fs::FileExt;
        let got = std::cell::RefCell::new((Vec::new(), Vec::new()));
        let mut iov = [IoSlice::new(&[]); 3];
        let n = parts
            .send_with(
                from,
                &mut iov,
                |iov, more| {
                    let mut g = got.borrow_mut();
                    let all: Vec<u8> = iov.iter().flat_map(|s| s.iter().copied()).collect();
                    let n = all.len().min(take);
                    g.0.extend_from_slice(&all[..n]);
                    g.1.push(more);
                    Ok(n)
                },
                |file, offset, len| {
                    let mut buf = vec![0; len.min(take)];
                    file.read_exact_at(&mut buf, offset).unwrap();
                    got.borrow_mut().0.extend_from_slice(&buf);
                    Ok(buf.len())
                },
            )
            .unwrap();
        let (bytes, more) = got.into_inner();
        (bytes, more, n)
    }

    #[test]
    fn file_ranges_go_between_the_memory_pieces_and_resume_mid_range() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let file = Rc::new(OpenFile::new(f, 10, std::time::SystemTime::now(), None));
        let mut s = spliced(&[(1, b"XY")]);
        s.push_file(3, file.clone(), 2, 5);
        s.push_file(4, file, 0, 1);
        let parts = OutputParts::new(b"abcdefgh", &s);
        assert!(parts.has_files());
        let whole = b"aXYbc23456d0efgh";
        assert_eq!(parts.to_vec(), whole);
        assert_eq!(parts.len(), whole.len());

        let (bytes, more, n) = sent_by(&parts, 0, usize::MAX);
        assert_eq!((&bytes[..], n), (&whole[..], whole.len()));
        assert_eq!(
            more,
            [true, true, false],
            "MSG_MORE on the pieces before a file range, not on the last"
        );

        // A short send stops the walk; the next call resumes in a file range and in memory.
        let (bytes, _, n) = sent_by(&parts, 0, 4);
        assert_eq!((&bytes[..], n), (&b"aXYb"[..], 4));
        let (bytes, _, n) = sent_by(&parts, 6, 2);
        assert_eq!((&bytes[..], n), (&b"34"[..], 2));
        let (bytes, more, n) = sent_by(&parts, 8, usize::MAX);
        assert_eq!(&bytes[..], &whole[8..]);
        assert_eq!((n, more.last()), (whole.len() - 8, Some(&false)));
        assert_eq!(sent_by(&parts, whole.len(), usize::MAX).2, 0);

        // The gathered path stops before a file range.
        let mut iov = [IoSlice::new(&[]); 8];
        assert_eq!(parts.gather(0, &mut iov), 3);
        s.clear();
        assert!(!OutputParts::new(b"ab", &s).has_files());
    }
}
