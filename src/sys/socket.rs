//! Socket calls std and tokio do not make for us: reads and writes with flags, the lane's
//! bare system calls, half-close and integer options.

use bytes::BytesMut;
use std::io;
use std::os::fd::RawFd;

/// One recv(2) into `buf` with `flags`: how many bytes came (0 at end of stream).
#[inline]
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    // A negative count is an error.
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One read with `flags` into the spare capacity of `buf`, which grows by what came (0 at
/// end of stream). The system call itself: libc's `recv` is a cancellation point, which
/// costs more than the rest of its wrapper, on every request of the lane.
#[inline]
pub fn recv_direct(fd: RawFd, buf: &mut BytesMut, flags: libc::c_int) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    let room = spare.len();
    // SAFETY: `spare` is valid for writes of `room` bytes; null address arguments are
    // allowed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            spare.as_mut_ptr(),
            room,
            flags,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the kernel initialized the first `n` bytes of the spare capacity (at most
    // `room`).
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// One send(2) of `bytes` with `flags`: how many the socket took.
#[inline]
pub fn send(fd: RawFd, bytes: &[u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `bytes` is valid for reads of its length.
    let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), flags) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One send of `bytes` with `flags`, as the system call itself (see `recv_direct`): how many
/// the socket took.
#[inline]
pub fn send_direct(fd: RawFd, bytes: &[u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `bytes` is valid for reads of its length; a null address is allowed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            bytes.as_ptr(),
            bytes.len(),
            flags,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        )
    };
    // A negative count is an error; a count is at most `bytes.len()`.
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One sendmsg(2) of the pieces `iov` in order with `flags`, as the system call itself (see
/// `recv_direct`): how many bytes the socket took. A response head and a body in memory go
/// out together without first being copied into one buffer.
#[inline]
pub fn send_gathered_direct(
    fd: RawFd,
    iov: &[std::io::IoSlice<'_>],
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: a zeroed msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix; the kernel only reads
    // through the pointers, and caps the count itself (EMSGSIZE over IOV_MAX).
    msg.msg_iov = iov.as_ptr().cast_mut().cast();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` and every slice `iov` names are valid for reads for the call.
    let n = unsafe { libc::syscall(libc::SYS_sendmsg, fd, std::ptr::addr_of!(msg), flags) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Shuts down the sending side: the peer reads the rest, then sees end of stream.
pub fn shutdown_write(fd: RawFd) -> io::Result<()> {
    // SAFETY: shutdown(2) takes no pointers.
    let r = unsafe { libc::shutdown(fd, libc::SHUT_WR) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets the integer socket option `name` of `level` (setsockopt(2)).
pub fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int that outlives the call, and its size is given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::addr_of!(value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The integer socket option `name` of `level` (getsockopt(2)).
pub fn int_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for writes; `len` gives the room of `value`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            std::ptr::addr_of_mut!(value).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn recv_reads_and_peeks() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut buf = [0u8; 8];
        let would_block = recv(b.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap_err();
        assert_eq!(would_block.kind(), io::ErrorKind::WouldBlock);
        a.write_all(b"abc").unwrap();
        let peek = libc::MSG_PEEK | libc::MSG_DONTWAIT;
        assert_eq!(recv(b.as_raw_fd(), &mut buf[..1], peek).unwrap(), 1);
        assert_eq!(recv(b.as_raw_fd(), &mut buf, 0).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        drop(a);
        assert_eq!(recv(b.as_raw_fd(), &mut buf, 0).unwrap(), 0);
    }

    #[test]
    fn recv_direct_grows_the_buffer_by_what_came() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut buf = BytesMut::with_capacity(16);
        buf.extend_from_slice(b"x");
        let would_block = recv_direct(b.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap_err();
        assert_eq!(would_block.kind(), io::ErrorKind::WouldBlock);
        a.write_all(b"abc").unwrap();
        assert_eq!(
            recv_direct(b.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap(),
            3
        );
        assert_eq!(&buf[..], b"xabc");
        drop(a);
        assert_eq!(
            recv_direct(b.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap(),
            0
        );
        assert_eq!(&buf[..], b"xabc");
    }

    #[test]
    fn send_and_send_direct_write_to_the_peer() {
        let (a, mut b) = UnixStream::pair().unwrap();
        assert_eq!(send(a.as_raw_fd(), b"ab", libc::MSG_NOSIGNAL).unwrap(), 2);
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        assert_eq!(send_direct(a.as_raw_fd(), b"cd", flags).unwrap(), 2);
        let mut got = [0u8; 4];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcd");
        drop(b);
        let broken = send_direct(a.as_raw_fd(), b"e", flags).unwrap_err();
        assert_eq!(broken.raw_os_error(), Some(libc::EPIPE));
        let broken = send(a.as_raw_fd(), b"e", libc::MSG_NOSIGNAL).unwrap_err();
        assert_eq!(broken.raw_os_error(), Some(libc::EPIPE));
    }

    #[test]
    fn send_gathered_direct_sends_the_pieces_in_order() {
        use std::io::IoSlice;
        let (a, mut b) = UnixStream::pair().unwrap();
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        let iov = [IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cde")];
        assert_eq!(send_gathered_direct(a.as_raw_fd(), &iov, flags).unwrap(), 5);
        let mut got = [0u8; 5];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcde");
        drop(b);
        let broken = send_gathered_direct(a.as_raw_fd(), &iov, flags).unwrap_err();
        assert_eq!(broken.raw_os_error(), Some(libc::EPIPE));
    }

    #[test]
    fn shutdown_write_ends_the_peers_stream() {
        let (a, mut b) = UnixStream::pair().unwrap();
        shutdown_write(a.as_raw_fd()).unwrap();
        let mut rest = Vec::new();
        assert_eq!(b.read_to_end(&mut rest).unwrap(), 0);
        assert!(shutdown_write(-1).is_err());
    }

    #[test]
    fn int_options_are_set_and_read() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = l.as_raw_fd();
        set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, 16).unwrap();
        assert_eq!(
            int_option(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN).unwrap(),
            16
        );
        assert!(int_option(-1, libc::IPPROTO_TCP, libc::TCP_FASTOPEN).is_err());
        assert!(set_int_option(-1, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, 1).is_err());
    }
}
