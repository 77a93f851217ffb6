//! Response bodies that the lane sends from where they are rather than copied into the write
//! buffer: bodies in memory (the open-file cache's copy of a file, a handler's bytes), each
//! after the head bytes before it in the write buffer, gathered into one `sendmsg`; and last,
//! at most one file the cache holds no copy of, sent with `sendfile` after them.

use crate::http::{Body, FileRange};
use std::io::{self, IoSlice};

/// A body in memory is sent from its own memory from this size on: below it, copying it
/// costs less than the extra piece.
pub(crate) const SPLICE_MIN: usize = 1024;
/// Pieces per `sendmsg`: eight answers, two pieces each (more take another call). The
/// `iovec`s are set up on each call: at 64, that cost more than the copy it saves.
const GATHER_MAX: usize = 16;

/// A body that goes out after the first `at` bytes of the write buffer.
struct Spliced {
    at: usize,
    body: Body,
}

/// The bodies spliced into one write buffer, in order of `at`.
#[derive(Default)]
pub(crate) struct SplicedBodies {
    list: Vec<Spliced>,
    /// The bytes of those in memory.
    len: usize,
}

/// Where the lane's output goes: the socket, without waiting.
pub(crate) trait Sink {
    /// Sends the pieces in order (`more`: a file follows); how many bytes went.
    fn gathered(&mut self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize>;
    /// Sends up to `len` bytes of `file` from `offset`, which it moves on; how many went.
    fn file(
        &mut self,
        file: &std::fs::File,
        offset: &mut libc::off_t,
        len: usize,
    ) -> io::Result<usize>;
}

/// The bytes of a body the lane splices from memory (see `Out::write_copied`); a file
/// without a copy in memory has none.
fn bytes_of(body: &Body) -> &[u8] {
    match body {
        Body::Bytes(b) => b,
        Body::File(f) => f.cached_slice().unwrap_or_default(),
        _ => &[],
    }
}

/// A body that is a file the open-file cache holds no copy of: sent with `sendfile`.
fn file_of(body: &Body) -> Option<&FileRange> {
    match body {
        Body::File(f) if f.cached_slice().is_none() => Some(f),
        _ => None,
    }
}

impl SplicedBodies {
    /// Takes `body` (bytes in memory, or a file without a copy in memory) to go after the
    /// first `at` bytes of the write buffer, no earlier than the last one's. Nothing may be
    /// added after a file (`ends_with_file`): it is sent first.
    pub(crate) fn push(&mut self, at: usize, body: Body) {
        debug_assert!(self.list.last().is_none_or(|s| s.at <= at));
        debug_assert!(!self.ends_with_file());
        self.len += bytes_of(&body).len();
        self.list.push(Spliced { at, body });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether the last body is a file: the output is to be sent before anything is added.
    pub(crate) fn ends_with_file(&self) -> bool {
        self.list.last().is_some_and(|s| file_of(&s.body).is_some())
    }

    /// Takes out the file that ends the output (what `send_all` left of it).
    pub(crate) fn take_file(&mut self) -> Option<FileRange> {
        if !self.ends_with_file() {
            return None;
        }
        match self.list.pop().map(|s| s.body) {
            Some(Body::File(f)) => Some(f),
            _ => None,
        }
    }

    /// Drops the bodies (and what they were to be sent after is dropped by the caller).
    pub(crate) fn clear(&mut self) {
        self.list.clear();
        self.len = 0;
    }

    /// Puts the bodies in memory into `wbuf` where they go, for whoever writes it as one
    /// buffer (a task that takes the connection over); the list is emptied. A file that ends
    /// it is taken out first (`take_file`).
    pub(crate) fn flatten_into(&mut self, wbuf: &mut Vec<u8>) {
        debug_assert!(!self.ends_with_file());
        if self.list.is_empty() {
            return;
        }
        let mut whole = Vec::with_capacity(wbuf.len() + self.len);
        self.walk(wbuf, |piece| {
            whole.extend_from_slice(piece);
            true
        });
        *wbuf = whole;
        self.clear();
    }

    /// Sends `wbuf` with the bodies spliced into it to `sink` (one gathered write, again
    /// while the socket takes all, then the file that ends it): true when all went, and both
    /// are empty then. Otherwise (a full socket, an error) what did not go of the bytes in
    /// memory is left in `wbuf` as one buffer, and what did not go of the file stays in the
    /// list (`take_file`).
    pub(crate) fn send_all(&mut self, wbuf: &mut Vec<u8>, sink: &mut impl Sink) -> bool {
        let file = self.ends_with_file();
        let total = wbuf.len() + self.len;
        let mut sent = 0;
        // The usual output, one answer with its body in memory: its three pieces at once,
        // without walking the list.
        if let [one] = &self.list[..] {
            if !file && one.at <= wbuf.len() {
                let (head, tail) = wbuf.split_at(one.at);
                let iov = [
                    IoSlice::new(head),
                    IoSlice::new(bytes_of(&one.body)),
                    IoSlice::new(tail),
                ];
                if let Ok(n) = sink.gathered(&iov, false) {
                    sent = n;
                }
            }
        }
        while sent < total {
            let mut iov = [IoSlice::new(&[]); GATHER_MAX];
            let n = self.gather(wbuf, sent, &mut iov);
            match sink.gathered(&iov[..n], file) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    let rest = self.take_file();
                    self.flatten_into(wbuf);
                    wbuf.drain(..sent.min(wbuf.len()));
                    if let Some(rest) = rest {
                        self.list.push(Spliced {
                            at: wbuf.len(),
                            body: Body::File(rest),
                        });
                    }
                    return false;
                }
            }
        }
        if file && !self.send_file(sink) {
            let rest = self.take_file();
            self.clear();
            wbuf.clear();
            if let Some(rest) = rest {
                self.list.push(Spliced {
                    at: 0,
                    body: Body::File(rest),
                });
            }
            return false;
        }
        self.clear();
        wbuf.clear();
        true
    }

    /// Sends the file that ends the list, moving its range on by what went: true when all of
    /// it did. A file shorter than its range is a failure too (the task that takes over
    /// finds it so and closes).
    fn send_file(&mut self, sink: &mut impl Sink) -> bool {
        let Some(Spliced {
            body: Body::File(f),
            ..
        }) = self.list.last_mut()
        else {
            return true;
        };
        let Ok(mut offset) = libc::off_t::try_from(f.offset) else {
            return false;
        };
        while f.len > 0 {
            let chunk = usize::try_from(f.len).unwrap_or(usize::MAX);
            match sink.file(&f.file.file, &mut offset, chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    f.offset += n as u64;
                    f.len -= (n as u64).min(f.len);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Fills `iov` with the pieces from byte `skip` of the output on; how many it filled.
    fn gather<'b>(&'b self, wbuf: &'b [u8], mut skip: usize, iov: &mut [IoSlice<'b>]) -> usize {
        let mut n = 0;
        self.walk(wbuf, |piece| {
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

    /// Calls `f` with each piece in order (empty ones left out) while it returns true.
    fn walk<'b>(&'b self, wbuf: &'b [u8], mut f: impl FnMut(&'b [u8]) -> bool) {
        let mut from = 0;
        for s in &self.list {
            let at = s.at.min(wbuf.len());
            if from < at {
                if !f(&wbuf[from..at]) {
                    return;
                }
                from = at;
            }
            let body = bytes_of(&s.body);
            if !body.is_empty() && !f(body) {
                return;
            }
        }
        if from < wbuf.len() {
            f(&wbuf[from..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn spliced(at_bodies: &[(usize, &'static [u8])]) -> SplicedBodies {
        let mut s = SplicedBodies::default();
        for (at, b) in at_bodies {
            s.push(*at, Body::Bytes(Bytes::from_static(b)));
        }
        s
    }

    #[test]
    fn pieces_go_in_order_and_a_flattened_buffer_holds_the_same_bytes() {
        let mut s = spliced(&[(2, b"XY"), (2, b"Z"), (5, b"W"), (7, b"V")]);
        let mut wbuf = b"abcdefg".to_vec();
        let mut iov = [IoSlice::new(&[]); GATHER_MAX];
        let n = s.gather(&wbuf, 0, &mut iov);
        let pieces: Vec<&[u8]> = iov[..n].iter().map(|p| &**p).collect();
        assert_eq!(pieces, [&b"ab"[..], b"XY", b"Z", b"cde", b"W", b"fg", b"V"]);
        let n = s.gather(&wbuf, 3, &mut iov);
        assert_eq!(&*iov[0], b"Y", "a skip starts inside a piece");
        assert_eq!(n, 6);
        s.flatten_into(&mut wbuf);
        assert_eq!(wbuf, b"abXYZcdeWfgV");
        assert!(s.is_empty());
    }

    /// A socket that takes `room` bytes a call, `calls` calls, then would block.
    struct Socket {
        out: Vec<u8>,
        room: usize,
        calls: usize,
        more: Vec<bool>,
    }

    impl Socket {
        fn new(room: usize, calls: usize) -> Socket {
            Socket {
                out: Vec::new(),
                room,
                calls,
                more: Vec::new(),
            }
        }

        fn call(&mut self) -> io::Result<()> {
            if self.calls == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.calls -= 1;
            Ok(())
        }
    }

    impl Sink for Socket {
        fn gathered(&mut self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
            self.call()?;
            self.more.push(more);
            let mut n = 0;
            for p in iov {
                let take = (self.room - n).min(p.len());
                self.out.extend_from_slice(&p[..take]);
                n += take;
            }
            Ok(n)
        }

        fn file(
            &mut self,
            file: &std::fs::File,
            offset: &mut libc::off_t,
            len: usize,
        ) -> io::Result<usize> {
            use std::os::unix::fs::FileExt;
            self.call()?;
            let mut buf = vec![0; len.min(self.room)];
            let n = file.read_at(&mut buf, *offset as u64)?;
            *offset += n as libc::off_t;
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
    }

    fn file_body(contents: &[u8], offset: u64, len: u64) -> Body {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(contents).unwrap();
        let open = crate::http::OpenFile::new(
            f,
            contents.len() as u64,
            std::time::SystemTime::UNIX_EPOCH,
            None,
        );
        Body::File(FileRange {
            file: std::rc::Rc::new(open),
            offset,
            len,
        })
    }

    #[test]
    fn a_short_send_goes_on_and_a_refused_one_leaves_the_rest_in_the_buffer() {
        let mut s = spliced(&[(2, b"XYZ")]);
        let mut wbuf = b"abcd".to_vec();
        // Three bytes a call: the pieces are resumed where the last call stopped.
        let mut socket = Socket::new(3, usize::MAX);
        let all = s.send_all(&mut wbuf, &mut socket);
        assert!(all && wbuf.is_empty() && s.is_empty());
        assert_eq!(socket.out, b"abXYZcd");

        let mut s = spliced(&[(2, b"XYZ")]);
        let mut wbuf = b"abcd".to_vec();
        let all = s.send_all(&mut wbuf, &mut Socket::new(3, 1));
        assert!(!all && s.is_empty());
        assert_eq!(wbuf, b"YZcd", "what did not go, as one buffer");
    }

    #[test]
    fn a_file_goes_last_and_what_did_not_go_of_it_stays() {
        let mut s = spliced(&[(2, b"XY")]);
        s.push(4, file_body(b"0123456789", 2, 6));
        assert!(s.ends_with_file());
        let mut wbuf = b"abcd".to_vec();
        let mut socket = Socket::new(4, usize::MAX);
        assert!(s.send_all(&mut wbuf, &mut socket));
        assert_eq!(socket.out, b"abXYcd234567");
        assert!(
            socket.more.iter().all(|&m| m),
            "the head says a file follows"
        );
        assert!(wbuf.is_empty() && s.is_empty());

        // The bytes in memory go, the file in part.
        let mut s = spliced(&[(2, b"XY")]);
        s.push(4, file_body(b"0123456789", 2, 6));
        let mut wbuf = b"abcd".to_vec();
        let mut socket = Socket::new(4, 3);
        assert!(!s.send_all(&mut wbuf, &mut socket));
        assert_eq!(socket.out, b"abXYcd2345");
        assert!(wbuf.is_empty());
        let rest = s.take_file().unwrap();
        assert_eq!((rest.offset, rest.len), (6, 2));
        assert!(s.is_empty());

        // Nothing goes: the bytes in memory stay in the buffer, the file in the list.
        let mut s = spliced(&[(2, b"XY")]);
        s.push(4, file_body(b"0123456789", 0, 10));
        let mut wbuf = b"abcd".to_vec();
        assert!(!s.send_all(&mut wbuf, &mut Socket::new(4, 0)));
        assert_eq!(wbuf, b"abXYcd");
        let rest = s.take_file().unwrap();
        assert_eq!((rest.offset, rest.len), (0, 10));
    }
}
