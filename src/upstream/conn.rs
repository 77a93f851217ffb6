//! A connection to a backend: TCP, TLS over TCP, or a Unix socket, read and written through
//! tokio.

use crate::config::UpstreamAddr;
use crate::tls::client::ClientTls;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;

pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The TLS side of a connection attempt: the path's client and whether to offer `h2`.
pub struct TlsStart<'a> {
    pub client: &'a ClientTls,
    pub offer_h2: bool,
}

/// Why a connection could not be made. A failed handshake is told apart: its message names
/// what the verification refused.
pub enum ConnectError {
    Io(io::Error),
    Handshake(io::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "cannot connect: {e}"),
            ConnectError::Handshake(e) => write!(f, "TLS handshake failed: {e}"),
        }
    }
}

impl Conn {
    /// Connects to `addr`, sends `preface` (a PROXY protocol line: before any TLS) and, with
    /// `tls`, completes the handshake, all within `timeout` (as h2o's
    /// `proxy.timeout.connect`).
    pub async fn connect(
        addr: &UpstreamAddr,
        preface: Option<&[u8]>,
        tls: Option<TlsStart<'_>>,
        timeout: Duration,
    ) -> Result<Conn, ConnectError> {
        let connect = async {
            match addr {
                UpstreamAddr::Tcp { host, port } => {
                    // A literal IPv6 address may come bracketed, as in a URL.
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    let mut s = TcpStream::connect((host, *port))
                        .await
                        .map_err(ConnectError::Io)?;
                    // The head and the body go out in separate writes: no Nagle delay.
                    s.set_nodelay(true).map_err(ConnectError::Io)?;
                    send_preface(&mut s, preface).await?;
                    match tls {
                        None => Ok(Conn::Tcp(s)),
                        Some(t) => {
                            let config = match t.offer_h2 {
                                true => &t.client.http2,
                                false => &t.client.http1,
                            };
                            let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
                            let s = connector
                                .connect(t.client.server_name.clone(), s)
                                .await
                                .map_err(ConnectError::Handshake)?;
                            Ok(Conn::Tls(Box::new(s)))
                        }
                    }
                }
                UpstreamAddr::Unix(path) => {
                    let mut s = UnixStream::connect(path).await.map_err(ConnectError::Io)?;
                    send_preface(&mut s, preface).await?;
                    Ok(Conn::Unix(s))
                }
            }
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r,
            Err(_) => Err(ConnectError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                "connect timed out (proxy.timeout.connect)",
            ))),
        }
    }

    /// Whether ALPN chose HTTP/2 (TLS connections only).
    pub fn is_h2(&self) -> bool {
        match self {
            Conn::Tls(s) => s.get_ref().1.alpn_protocol() == Some(b"h2"),
            Conn::Tcp(_) | Conn::Unix(_) => false,
        }
    }

    /// Reads what is there into `buf` (room for at least `want` more bytes), waiting until
    /// something comes.
    pub fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut bytes::BytesMut,
        want: usize,
    ) -> Poll<io::Result<usize>> {
        if let Conn::Tls(_) = self {
            // rustls decrypts into its own buffer and copies out: read through it.
            let start = buf.len();
            buf.resize(start + want, 0);
            let mut rb = ReadBuf::new(&mut buf[start..]);
            let read = Pin::new(self).poll_read(cx, &mut rb);
            let n = rb.filled().len();
            buf.truncate(start + n);
            std::task::ready!(read)?;
            return Poll::Ready(Ok(n));
        }
        // A socket: by readiness, straight into the spare capacity.
        buf.reserve(want);
        loop {
            std::task::ready!(self.poll_read_ready(cx))?;
            match self.try_read_buf(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }
}

/// Reads with `read` inside the socket's `try_io`. A read that leaves part of its room empty
/// took all the socket had: the readiness is cleared with it (tokio clears only the readiness
/// of the event it saw, and keeps a closed state), so the next read waits for the next event
/// instead of costing a syscall that finds nothing: on a kept-alive backend connection, one
/// `WouldBlock` per response.
fn read_clearing(
    buf: &mut bytes::BytesMut,
    read: impl Fn(&mut bytes::BytesMut) -> io::Result<usize>,
    try_io: impl FnOnce(&mut dyn FnMut() -> io::Result<usize>) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut got = None;
    let r = try_io(&mut || {
        let room = buf.capacity() - buf.len();
        let n = read(buf)?;
        got = Some(n);
        if n > 0 && n < room {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    got.map_or(r, Ok)
}

async fn send_preface(
    s: &mut (impl AsyncWrite + Unpin),
    preface: Option<&[u8]>,
) -> Result<(), ConnectError> {
    let Some(p) = preface else { return Ok(()) };
    s.write_all(p).await.map_err(|e| {
        ConnectError::Io(io::Error::new(
            e.kind(),
            format!("cannot send the PROXY line: {e}"),
        ))
    })
}

impl Conn {
    /// Ready when a read may find data (or the end). Not for TLS: see [`Conn::poll_read_buf`].
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Conn::Tcp(s) => s.poll_read_ready(cx),
            Conn::Unix(s) => s.poll_read_ready(cx),
            Conn::Tls(s) => s.get_ref().0.poll_read_ready(cx),
        }
    }

    /// Reads what is there without waiting; `WouldBlock` clears the readiness, and so does a
    /// read that took all the socket had (see [`read_clearing`]).
    pub fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => read_clearing(
                buf,
                |b| s.try_read_buf(b),
                |f| s.try_io(Interest::READABLE, f),
            ),
            Conn::Unix(s) => read_clearing(
                buf,
                |b| s.try_read_buf(b),
                |f| s.try_io(Interest::READABLE, f),
            ),
            Conn::Tls(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Conn::Tls(_))
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Tcp(_) | Conn::Unix(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
