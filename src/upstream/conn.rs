//! A connection to a backend: TCP or a Unix socket, read and written through tokio.

use crate::config::UpstreamAddr;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    /// Connects to `addr` within `timeout`.
    pub async fn connect(addr: &UpstreamAddr, timeout: Duration) -> io::Result<Conn> {
        let connect = async {
            match addr {
                UpstreamAddr::Tcp { host, port } => {
                    // A literal IPv6 address may come bracketed, as in a URL.
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    let s = TcpStream::connect((host, *port)).await?;
                    // The head and the body go out in separate writes: no Nagle delay.
                    s.set_nodelay(true)?;
                    Ok(Conn::Tcp(s))
                }
                UpstreamAddr::Unix(path) => Ok(Conn::Unix(UnixStream::connect(path).await?)),
            }
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connect timed out (proxy.timeout.connect)",
            )),
        }
    }
}

impl Conn {
    /// Ready when a read may find data (or the end).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Conn::Tcp(s) => s.poll_read_ready(cx),
            Conn::Unix(s) => s.poll_read_ready(cx),
        }
    }

    /// Reads what is there without waiting; `WouldBlock` clears the readiness.
    pub fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.try_read_buf(buf),
            Conn::Unix(s) => s.try_read_buf(buf),
        }
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
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
