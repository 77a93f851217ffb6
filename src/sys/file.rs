//! Files and pipes: sendfile, reading into a buffer's spare room, a pipe, waiting to read one,
//! and FIFOs.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Sends up to `count` bytes of the file `from`, starting at `*offset`, to the socket `to`
/// (sendfile(2)); `*offset` moves past what went. How many bytes went.
#[inline]
pub fn sendfile(
    to: RawFd,
    from: RawFd,
    offset: &mut libc::off_t,
    count: usize,
) -> io::Result<usize> {
    // SAFETY: `offset` is valid for reads and writes for the duration of the call.
    let n = unsafe { libc::sendfile(to, from, offset, count) };
    // A negative count is an error.
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// A new pipe (read end, write end), both closed on exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2(2) fills the two descriptors of `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Waits up to `timeout` (poll(2)) for `fd` to have something to read, or an end or error
/// to report: true when it has, false when the time ran out.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: poll(2) on one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n > 0)
    }
}

/// Makes a FIFO at `path` with `mode` (mkfifo(3)).
pub fn mkfifo(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `path` is a valid NUL-terminated string.
    if unsafe { libc::mkfifo(path.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Appends `len` bytes of `file`, from `offset`, to `out` with pread(2) straight into its
/// spare capacity: no zeroing of bytes the read overwrites at once (a body path reads up to
/// 16 KiB per frame, and zeroing it first cost as much as copying it). A file that ends
/// before `len` bytes is an `UnexpectedEof` error; on an error `out` is as it was.
pub fn pread_append(
    file: &std::fs::File,
    out: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let start = out.len();
    out.reserve(len);
    let mut done = 0;
    while done < len {
        // The spare capacity starts after what is already read (`set_len` below moves it).
        let spare = &mut out.spare_capacity_mut()[..len - done];
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `spare` is writable memory of `spare.len()` bytes owned by `out`; pread(2)
        // writes at most that many.
        let n =
            unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at) };
        match usize::try_from(n) {
            Ok(0) => {
                out.truncate(start);
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                ));
            }
            Ok(n) => {
                done += n;
                // SAFETY: pread(2) initialized the `n` bytes after the first `start + done - n`.
                unsafe { out.set_len(start + done) };
            }
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    out.truncate(start);
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::net::UnixStream;

    #[test]
    fn sendfile_sends_from_the_offset_and_moves_it() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut off: libc::off_t = 3;
        assert_eq!(
            sendfile(a.as_raw_fd(), f.as_raw_fd(), &mut off, 4).unwrap(),
            4
        );
        assert_eq!(off, 7);
        // Past the end: nothing more.
        assert_eq!(
            sendfile(a.as_raw_fd(), f.as_raw_fd(), &mut off, 100).unwrap(),
            3
        );
        assert_eq!(
            sendfile(a.as_raw_fd(), f.as_raw_fd(), &mut off, 100).unwrap(),
            0
        );
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"3456789");
        assert!(sendfile(-1, f.as_raw_fd(), &mut off, 1).is_err());
    }

    #[test]
    fn pipe_connects_its_ends_and_closes_on_exec() {
        let (r, w) = pipe().unwrap();
        for fd in [&r, &w] {
            let flags = crate::sys::process::fd_flags(fd.as_raw_fd()).unwrap();
            assert_ne!(flags & libc::FD_CLOEXEC, 0);
        }
        let (mut r, mut w) = (std::fs::File::from(r), std::fs::File::from(w));
        w.write_all(b"R").unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(r.read(&mut byte).unwrap(), 1);
        assert_eq!(&byte, b"R");
    }

    #[test]
    fn wait_readable_says_whether_something_came_in_time() {
        let (r, w) = pipe().unwrap();
        let short = Duration::from_millis(10);
        assert!(!wait_readable(r.as_raw_fd(), short).unwrap());
        std::fs::File::from(w).write_all(b"R").unwrap();
        assert!(wait_readable(r.as_raw_fd(), short).unwrap());
    }

    #[test]
    fn mkfifo_makes_a_fifo() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fifo");
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        mkfifo(&c, 0o644).unwrap();
        assert!(std::fs::metadata(&p).unwrap().file_type().is_fifo());
        assert_eq!(
            mkfifo(&c, 0o644).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
    }

    #[test]
    fn pread_append_appends_the_range_or_nothing() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let mut out = b"ab".to_vec();
        pread_append(&f, &mut out, 4, 3).unwrap();
        assert_eq!(out, b"ab3456");
        // Past the end: an error, and `out` as it was.
        let e = pread_append(&f, &mut out, 4, 8).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(out, b"ab3456");
    }
}
