//! The pieces of a known response body as a protocol driver frames them: HTTP/2 DATA frames
//! (`proto/h2`) and HTTP/3 DATA frames (`server/h3`) pull from one [`BodySource`]. The file
//! reads happen here, so a sans-IO core that fills its output from a source does no IO itself.
//!
//! HTTP/1.1 does not frame a body, so it does not pull one in pieces: it writes each part
//! whole, a file range with sendfile (or, over TLS, read into one reused buffer per file).

use crate::http::response::BodyPart;
use crate::http::{Body, FileRange, OpenFile};
use bytes::Bytes;
use std::rc::Rc;

/// A known response body (bytes, file ranges, or parts of both) pulled in pieces of at most
/// `max` bytes: shared as [`Bytes`] ([`BodySource::take_bytes`]) or appended to the caller's
/// buffer ([`BodySource::fill`]: a memory copy, or a `pread` straight into it, so a large
/// file never sits in memory).
#[derive(Debug)]
pub struct BodySource {
    current: Chunk,
    /// Further pieces, last first.
    rest: Vec<Chunk>,
    remaining: u64,
}

/// One piece of the body: in memory, or a range of an open file still to be read.
#[derive(Debug)]
enum Chunk {
    Bytes(Bytes),
    File {
        file: Rc<OpenFile>,
        offset: u64,
        len: u64,
    },
}

impl Chunk {
    fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File { len, .. } => *len,
        }
    }

    fn from_file(f: FileRange) -> Chunk {
        match f.cached_bytes() {
            Some(b) => Chunk::Bytes(b),
            None => Chunk::File {
                file: f.file,
                offset: f.offset,
                len: f.len,
            },
        }
    }
}

impl BodySource {
    /// The body's source, or `None` for an empty body.
    pub fn new(body: Body) -> Option<BodySource> {
        let mut chunks: Vec<Chunk> = match body {
            // A stream is pushed by the driver (`Send::Stream`), never read through a source.
            Body::Empty | Body::Stream(_) => return None,
            Body::Bytes(b) => return BodySource::one(Chunk::Bytes(b)),
            Body::File(f) => return BodySource::one(Chunk::from_file(f)),
            Body::Parts(parts) => parts
                .into_iter()
                .map(|p| match p {
                    BodyPart::Bytes(b) => Chunk::Bytes(b),
                    BodyPart::File(f) => Chunk::from_file(f),
                })
                .filter(|c| c.len() > 0)
                .rev()
                .collect(),
        };
        let remaining = chunks.iter().map(Chunk::len).sum();
        let current = chunks.pop()?;
        Some(BodySource {
            current,
            rest: chunks,
            remaining,
        })
    }

    /// A one-chunk body (the common case) without allocating `rest`.
    fn one(c: Chunk) -> Option<BodySource> {
        (c.len() > 0).then(|| BodySource {
            remaining: c.len(),
            current: c,
            rest: Vec::new(),
        })
    }

    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Up to `max` bytes of the current chunk, shared rather than copied, when that chunk is
    /// in memory and holds at least `min` bytes (below that a copy is cheaper than one more
    /// buffer to track); `None` otherwise.
    pub fn take_bytes(&mut self, max: usize, min: usize) -> Option<Bytes> {
        let Chunk::Bytes(b) = &mut self.current else {
            return None;
        };
        if b.len() < min.max(1) {
            return None;
        }
        let out = b.split_to(max.min(b.len()));
        self.remaining -= out.len() as u64;
        if b.is_empty() {
            if let Some(next) = self.rest.pop() {
                self.current = next;
            }
        }
        Some(out)
    }

    /// The next `n` bytes as a range of an open file, when the current chunk is a file range
    /// (not in memory) of at least `n` bytes: the caller sends them from the file instead of
    /// reading them (`sendfile`). Returns the file and the offset of the range; `None` when
    /// they are not one file range.
    pub fn take_file(&mut self, n: usize) -> Option<(Rc<OpenFile>, u64)> {
        let Chunk::File { file, offset, len } = &mut self.current else {
            return None;
        };
        if n == 0 || *len < n as u64 {
            return None;
        }
        let taken = (file.clone(), *offset);
        *offset += n as u64;
        *len -= n as u64;
        self.remaining -= n as u64;
        if *len == 0 {
            if let Some(next) = self.rest.pop() {
                self.current = next;
            }
        }
        Some(taken)
    }

    /// Appends up to `max` body bytes to `out`; returns how many. A file that cannot be read
    /// or has shrunk is an error: the stream must be reset.
    pub fn fill(&mut self, out: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
        let mut done = 0;
        while done < max && self.remaining > 0 {
            let want = max - done;
            let n = match &mut self.current {
                Chunk::Bytes(b) => {
                    let n = want.min(b.len());
                    out.extend_from_slice(&b[..n]);
                    bytes::Buf::advance(b, n);
                    n
                }
                Chunk::File { file, offset, len } => {
                    let n = want.min(usize::try_from(*len).unwrap_or(usize::MAX));
                    // Into the spare capacity: zeroing it first cost as much as the copy.
                    crate::sys::file::pread_append(&file.file, out, n, *offset)?;
                    *offset += n as u64;
                    *len -= n as u64;
                    n
                }
            };
            done += n;
            self.remaining -= n as u64;
            if self.current.len() == 0 {
                match self.rest.pop() {
                    Some(next) => self.current = next,
                    None => break,
                }
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn bytes_body_is_pulled_in_pieces() {
        let mut s = BodySource::new(Body::Bytes(Bytes::from_static(b"hello world"))).unwrap();
        let mut out = Vec::new();
        assert_eq!(s.fill(&mut out, 5).unwrap(), 5);
        assert_eq!(s.remaining(), 6);
        assert_eq!(s.fill(&mut out, 100).unwrap(), 6);
        assert_eq!(out, b"hello world");
        assert_eq!(s.remaining(), 0);
        assert!(BodySource::new(Body::Empty).is_none());
        assert!(BodySource::new(Body::Bytes(Bytes::new())).is_none());
    }

    #[test]
    fn a_file_range_is_taken_whole_or_not_at_all() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let open = Rc::new(OpenFile::new(f, 10, std::time::SystemTime::now(), None));
        let body = Body::Parts(vec![
            BodyPart::File(FileRange {
                file: open.clone(),
                offset: 1,
                len: 6,
            }),
            BodyPart::Bytes(Bytes::from_static(b"!")),
        ]);
        let mut s = BodySource::new(body).unwrap();
        assert!(s.take_file(7).is_none(), "past the file range");
        let (file, offset) = s.take_file(4).unwrap();
        assert!(Rc::ptr_eq(&file, &open));
        assert_eq!((offset, s.remaining()), (1, 3));
        assert_eq!(s.take_file(2).unwrap().1, 5);
        assert!(s.take_file(1).is_none(), "the bytes are in memory");
        let mut out = Vec::new();
        assert_eq!(s.fill(&mut out, 10).unwrap(), 1);
        assert_eq!(out, b"!");
    }

    #[test]
    fn file_ranges_and_parts_are_read_in_order() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let open = Rc::new(OpenFile::new(f, 10, std::time::SystemTime::now(), None));
        let body = Body::Parts(vec![
            BodyPart::Bytes(Bytes::from_static(b"<")),
            BodyPart::File(FileRange {
                file: open.clone(),
                offset: 2,
                len: 5,
            }),
            BodyPart::Bytes(Bytes::from_static(b">")),
        ]);
        let mut s = BodySource::new(body).unwrap();
        assert_eq!(s.remaining(), 7);
        let mut out = Vec::new();
        while s.remaining() > 0 {
            s.fill(&mut out, 3).unwrap();
        }
        assert_eq!(out, b"<23456>");

        let past_end = Body::File(FileRange {
            file: open,
            offset: 8,
            len: 5,
        });
        let mut s = BodySource::new(past_end).unwrap();
        let mut out = Vec::new();
        assert!(s.fill(&mut out, 100).is_err());
        assert!(out.is_empty());
    }
}
