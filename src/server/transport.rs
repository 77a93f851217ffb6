//! What a protocol driver needs from a connection beyond reading: writes with a per-progress
//! timeout, a hint that more data follows, file bodies, and a half-close. Plain TCP does these
//! with MSG_MORE and sendfile; a TLS stream (`tls_transport.rs`) reads the file into records.

use crate::proto::h2::OutputParts;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, Interest};
use tokio::net::TcpStream;

/// A connection a protocol driver reads from (through `AsyncRead`) and writes to.
pub(crate) trait Transport: AsyncRead + Unpin {
    /// Writes all of `buf`; `more` says a body follows at once, so the kernel may hold the tail.
    async fn write_all(&mut self, buf: &[u8], more: bool, timeout: Duration) -> io::Result<()>;
    /// Writes all of `parts`' pieces, as `write_all` would write them in one buffer.
    async fn write_parts(&mut self, parts: OutputParts<'_>, timeout: Duration) -> io::Result<()>;
    /// Sends `len` bytes of `file` from `offset`.
    async fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
        timeout: Duration,
    ) -> io::Result<()>;
    /// Ends the sending side; the peer reads what was sent, then end of stream.
    fn shutdown_write(&mut self) -> io::Result<()>;
    /// Whether the connection is TLS (the request's scheme is https).
    fn is_secure(&self) -> bool {
        false
    }
    /// The TLS session, for access logs; `None` in cleartext.
    fn tls_facts(&self) -> Option<crate::log::TlsFacts> {
        None
    }
    /// Whether `poll_readable` tells when a read may find data, so an idle connection can
    /// wait without holding a buffer.
    const WAITS_WITHOUT_BUFFER: bool = false;
    /// Whether an idle connection may be parked without its task (`connection/park.rs`):
    /// only a plain TCP socket, whose state is all in the kernel.
    const PARKS: bool = false;
    /// Waits until a read may find data (only used when `WAITS_WITHOUT_BUFFER`); a read that
    /// then finds none is fine, the caller goes back to waiting. A poll, not a future: it
    /// registers the task's waker in the socket's one reader slot and keeps no state for the
    /// wait (a future would join the socket's list of waiters and leave it on every wake-up).
    fn poll_readable(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    /// Whether what is read now came in TLS early data, the handshake not complete yet
    /// (`tls_early.rs`): a request then is answered only if safe to replay (RFC 8470).
    fn early(&self) -> bool {
        false
    }
    /// Waits for the client's Finished, for a request that must not be answered early.
    async fn complete_handshake(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for TcpStream {
    async fn write_all(&mut self, buf: &[u8], more: bool, timeout: Duration) -> io::Result<()> {
        write_all(self, buf, more, timeout).await
    }

    async fn write_parts(&mut self, parts: OutputParts<'_>, timeout: Duration) -> io::Result<()> {
        match parts.as_whole() {
            Some(buf) => write_all(self, buf, false, timeout).await,
            None => write_parts(self, parts, timeout).await,
        }
    }

    async fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
        timeout: Duration,
    ) -> io::Result<()> {
        sendfile(self, file, offset, len, timeout).await
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        shutdown_write(self)
    }

    const WAITS_WITHOUT_BUFFER: bool = true;

    const PARKS: bool = true;

    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }
}

/// A borrowed transport is one too: a driver that ends a connection (the HTTP/2 one) leaves
/// the socket with its caller, which may still [`drain_input`].
impl<T: Transport> Transport for &mut T {
    // The callee's futures themselves, not async wrappers around them: no extra state
    // machine to poll per read and write.
    fn write_all(
        &mut self,
        buf: &[u8],
        more: bool,
        timeout: Duration,
    ) -> impl std::future::Future<Output = io::Result<()>> {
        (**self).write_all(buf, more, timeout)
    }

    fn write_parts(
        &mut self,
        parts: OutputParts<'_>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = io::Result<()>> {
        (**self).write_parts(parts, timeout)
    }

    fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
        timeout: Duration,
    ) -> impl std::future::Future<Output = io::Result<()>> {
        (**self).send_file(file, offset, len, timeout)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        (**self).shutdown_write()
    }

    fn is_secure(&self) -> bool {
        (**self).is_secure()
    }

    fn tls_facts(&self) -> Option<crate::log::TlsFacts> {
        (**self).tls_facts()
    }

    const WAITS_WITHOUT_BUFFER: bool = T::WAITS_WITHOUT_BUFFER;

    const PARKS: bool = T::PARKS;

    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (**self).poll_readable(cx)
    }

    fn early(&self) -> bool {
        (**self).early()
    }

    fn complete_handshake(&mut self) -> impl std::future::Future<Output = io::Result<()>> {
        (**self).complete_handshake()
    }
}

/// How long to read (and drop) a peer's input after our side is done, so that what we sent
/// last is not destroyed by a reset: closing a socket with unread input sends RST, and a
/// peer receiving RST may lose the data it had not read yet.
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// At most this much input is read while lingering.
const LINGER_MAX_BYTES: usize = 256 * 1024;

/// Reads and drops input until end of stream, `LINGER` or `LINGER_MAX_BYTES`. Call after the
/// sending side is shut down.
pub(crate) async fn drain_input<T: AsyncRead + Unpin>(stream: &mut T) {
    // On the heap: an array here would enlarge every connection's future.
    drain_input_into(stream, &mut bytes::BytesMut::with_capacity(4096)).await;
}

/// [`drain_input`] reading into `buf`'s spare room (not zeroed first), e.g. a pooled buffer.
/// `buf` is left empty.
pub(crate) async fn drain_input_into<T: AsyncRead + Unpin>(
    stream: &mut T,
    buf: &mut bytes::BytesMut,
) {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut drained = 0usize;
    buf.clear();
    while drained < LINGER_MAX_BYTES && buf.capacity() > 0 {
        let r = tokio::time::timeout_at(deadline, stream.read_buf(buf)).await;
        buf.clear();
        match r {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => return,
        }
    }
}

/// Writes all of `buf`. `more` sets MSG_MORE: the kernel holds the tail back for the data
/// that follows (a sendfile body). Each wait for the socket is bounded by `timeout`.
async fn write_all(
    stream: &TcpStream,
    mut buf: &[u8],
    more: bool,
    timeout: Duration,
) -> io::Result<()> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    while !buf.is_empty() {
        let r = stream.try_io(Interest::WRITABLE, || {
            crate::sys::socket::send(stream.as_raw_fd(), buf, flags)
        });
        match r {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Boxed: its timer would otherwise enlarge every connection's task.
                Box::pin(writable(stream, timeout)).await?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `iovec`s per `writev`: a turn of 100 whole answers with spliced bodies (two pieces each,
/// their frames and the body) goes out in one. At 128 it took two, and S1 4 KiB spent about
/// 2.5 % more CPU per request. 4 KiB of `IoSlice`s on the stack of the call.
pub(crate) const GATHER_MAX: usize = 256;

/// Writes all of `parts` with `writev`. Each wait for the socket is bounded by `timeout`.
async fn write_parts(
    stream: &TcpStream,
    parts: OutputParts<'_>,
    timeout: Duration,
) -> io::Result<()> {
    let mut written = 0;
    while written < parts.len() {
        match writev_from(stream, &parts, written) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Box::pin(writable(stream, timeout)).await?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One `writev` of `parts` from byte `from` on: how much the socket took. The `iovec`s live
/// on the stack of this call, not in `write_parts`' future, whose size is part of every
/// connection's task.
fn writev_from(stream: &TcpStream, parts: &OutputParts<'_>, from: usize) -> io::Result<usize> {
    let mut iov = [IoSlice::new(&[]); GATHER_MAX];
    if parts.has_files() {
        return stream.try_io(Interest::WRITABLE, || {
            send_with_files(stream, parts, from, &mut iov)
        });
    }
    let n = parts.gather(from, &mut iov);
    stream.try_write_vectored(&iov[..n])
}

/// `parts` from byte `from` on, with file ranges among them: the memory pieces before each
/// range in one `sendmsg` with MSG_MORE (the kernel puts the frame head and the file's pages
/// in one segment), the range with `sendfile`, all under TCP_CORK: sendfile pushes what it
/// queued at its end, and a turn's bodies would go out as one segment per DATA frame
/// (measured uncorked: more CPU per request than the copying path it replaced). Uncorking
/// sends the rest at once. How many bytes the socket took.
#[inline(never)]
fn send_with_files<'a>(
    stream: &TcpStream,
    parts: &OutputParts<'a>,
    from: usize,
    iov: &mut [IoSlice<'a>],
) -> io::Result<usize> {
    let fd = stream.as_raw_fd();
    let cork = |on| crate::sys::socket::set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_CORK, on);
    let corked = cork(1).is_ok();
    let sent = parts.send_with(
        from,
        iov,
        |iov, more| {
            let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
            crate::sys::socket::send_gathered_direct(fd, iov, flags)
        },
        |file, offset, len| {
            let mut off = libc::off_t::try_from(offset).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "file offset too large")
            })?;
            match crate::sys::file::sendfile(fd, file.as_raw_fd(), &mut off, len)? {
                0 => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                )),
                n => Ok(n),
            }
        },
    );
    if corked {
        // An error here leaves the tail for the next write (or the close) to push.
        let _ = cork(0);
    }
    sent
}

/// Sends `len` bytes of `file` from `offset` with sendfile(2).
async fn sendfile(
    stream: &TcpStream,
    file: &std::fs::File,
    offset: u64,
    len: u64,
    timeout: Duration,
) -> io::Result<()> {
    let mut off = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
    let mut left = len;
    while left > 0 {
        // Bounded chunks keep one connection from monopolising the worker.
        let chunk = left.min(1 << 20) as usize;
        let r = stream.try_io(Interest::WRITABLE, || {
            let n =
                crate::sys::file::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &mut off, chunk);
            n.map(|n| n as u64)
        });
        match r {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                ))
            }
            Ok(n) => {
                left -= n.min(left);
                if left > 0 {
                    // Let other connections of this worker run between chunks.
                    tokio::task::yield_now().await;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Boxed: its timer would otherwise enlarge every connection's task.
                Box::pin(writable(stream, timeout)).await?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn writable(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    match tokio::time::timeout(timeout, stream.writable()).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "peer did not read within send-timeout",
        )),
    }
}

/// Shuts down the sending side: the peer reads the rest, then sees end of stream.
pub(crate) fn shutdown_write(stream: &TcpStream) -> io::Result<()> {
    crate::sys::socket::shutdown_write(stream.as_raw_fd())
}
