//! Reading into the spare capacity of a buffer without zeroing it first.

use bytes::BytesMut;
use std::io;
use std::task::{ready, Poll};
use tokio::io::ReadBuf;

/// Runs `read` (a `poll_read`) over the spare capacity of `buf`, at most `limit` bytes of
/// it, and grows `buf` by what it filled: how many bytes. An error if `read` filled another
/// buffer than the one it was given.
#[inline]
pub fn poll_fill(
    buf: &mut BytesMut,
    limit: usize,
    read: impl FnOnce(&mut ReadBuf<'_>) -> Poll<io::Result<()>>,
) -> Poll<io::Result<usize>> {
    let spare = buf.spare_capacity_mut();
    let room = spare.len().min(limit);
    let mut spare = ReadBuf::uninit(&mut spare[..room]);
    let at = spare.filled().as_ptr();
    ready!(read(&mut spare))?;
    let filled = spare.filled();
    if filled.as_ptr() != at || filled.len() > room {
        return Poll::Ready(Err(io::Error::other("read into another buffer")));
    }
    let n = filled.len();
    // SAFETY: `ReadBuf` counts as filled only bytes the read initialized, and (checked above)
    // they are the first `n` of `buf`'s spare capacity, which `spare` borrowed.
    unsafe { buf.set_len(buf.len() + n) };
    Poll::Ready(Ok(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_fill_grows_the_buffer_by_what_was_read() {
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(b"ab");
        let r = poll_fill(&mut buf, usize::MAX, |b| {
            b.put_slice(b"cde");
            Poll::Ready(Ok(()))
        });
        assert!(matches!(r, Poll::Ready(Ok(3))));
        assert_eq!(&buf[..], b"abcde");
        // At most `limit`.
        let r = poll_fill(&mut buf, 2, |b| {
            assert_eq!(b.remaining(), 2);
            Poll::Ready(Ok(()))
        });
        assert!(matches!(r, Poll::Ready(Ok(0))));
        assert!(poll_fill(&mut buf, 2, |_| Poll::Pending).is_pending());
        let r = poll_fill(&mut buf, 2, |_| {
            Poll::Ready(Err(io::ErrorKind::Other.into()))
        });
        assert!(matches!(r, Poll::Ready(Err(_))));
        assert_eq!(&buf[..], b"abcde");
    }

    #[test]
    fn poll_fill_refuses_another_buffer() {
        let mut buf = BytesMut::with_capacity(64);
        let other: &'static mut [u8] = Box::leak(Box::new([0u8; 8]));
        let r = poll_fill(&mut buf, usize::MAX, |b| {
            *b = ReadBuf::new(other);
            b.put_slice(b"xyz");
            Poll::Ready(Ok(()))
        });
        assert!(matches!(r, Poll::Ready(Err(_))));
        assert!(buf.is_empty());
    }
}
