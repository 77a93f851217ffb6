//! The socket under a server TLS connection. At the end of a TLS 1.3 handshake rustls writes
//! the session tickets (after the client's Finished): this socket holds them back and sends
//! them in the same `writev` as the connection's first output (HTTP/2's SETTINGS, an HTTP/1.1
//! response), which saves a write, a segment and the peer's wake-up per connection.
//!
//! What is held is recognised by its record type: after the first flight (which starts with
//! a plaintext handshake record) the server writes nothing but the tickets in TLS 1.3, all in
//! `application_data` records. TLS 1.2's flights start with handshake or change-cipher-spec
//! records and always go out at once.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// TLS record content types.
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;

/// At most this many slices go to one `writev` after the held bytes.
const MAX_SLICES: usize = 64;

pub(crate) struct TlsSocket {
    tcp: TcpStream,
    phase: Phase,
    /// Bytes held back (the tickets); written before anything else once open.
    held: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Before the server's first flight: nothing is held.
    Hello,
    /// The first flight went out whole: a write of `application_data` records is held.
    Flight,
    /// A write ended inside a record: the next one cannot be told apart, nothing is held.
    Unsure,
    /// The handshake is over: the held bytes go out with the first write.
    Open,
}

impl TlsSocket {
    pub(crate) fn new(tcp: TcpStream) -> TlsSocket {
        TlsSocket {
            tcp,
            phase: Phase::Hello,
            held: Vec::new(),
        }
    }

    /// A socket whose server flight was written already (`tls_early`, which runs the
    /// handshake's first half itself): the tickets that follow are held as usual.
    pub(crate) fn after_flight(tcp: TcpStream) -> TlsSocket {
        TlsSocket {
            tcp,
            phase: Phase::Flight,
            held: Vec::new(),
        }
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The handshake is over: from now on the held bytes go out with the next write.
    pub(crate) fn open(&mut self) {
        self.phase = Phase::Open;
        if self.held.is_empty() {
            // Nothing to keep: give the (empty) allocation's slot back.
            self.held = Vec::new();
        }
    }

    #[cfg(test)]
    pub(crate) fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Writes the held bytes without waiting, as far as the socket takes them (before a
    /// close_notify, or an alert after a failed handshake).
    pub(crate) fn try_write_held(&mut self) {
        while !self.held.is_empty() {
            match self.tcp.try_write(&self.held) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    self.held.drain(..n);
                }
            }
        }
    }

    /// Whether a handshake-time write of `bufs` is the tickets, to hold.
    fn holds(&self, bufs: &[IoSlice<'_>]) -> bool {
        self.phase == Phase::Flight
            && bufs
                .iter()
                .find(|b| !b.is_empty())
                .is_some_and(|b| b[0] == APPLICATION_DATA)
    }

    /// Notes a handshake-time write of `written` bytes out of `bufs`.
    fn wrote(&mut self, bufs: &[IoSlice<'_>], written: usize) {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let first = bufs.iter().find(|b| !b.is_empty()).map(|b| b[0]);
        self.phase = match (self.phase, written == total) {
            (Phase::Open, _) => Phase::Open,
            (_, false) => Phase::Unsure,
            (Phase::Hello, true) if first == Some(HANDSHAKE) => Phase::Flight,
            (phase, true) => phase,
        };
    }

    /// Writes the held bytes followed by `bufs`; returns how much of `bufs` went out.
    fn poll_write_after_held(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        while !self.held.is_empty() {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES + 1];
            slices[0] = IoSlice::new(&self.held);
            let n = bufs.len().min(MAX_SLICES);
            slices[1..=n].copy_from_slice(&bufs[..n]);
            let written = ready!(Pin::new(&mut self.tcp).poll_write_vectored(cx, &slices[..=n]))?;
            if written == 0 {
                return Poll::Ready(Ok(0));
            }
            if written >= self.held.len() {
                let after = written - self.held.len();
                self.held = Vec::new();
                if after > 0 || bufs.iter().all(|b| b.is_empty()) {
                    return Poll::Ready(Ok(after));
                }
            } else {
                self.held.drain(..written);
            }
        }
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }
}

impl AsyncRead for TlsSocket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.phase == Phase::Open {
            return this.poll_write_after_held(cx, bufs);
        }
        if this.holds(bufs) {
            let mut n = 0;
            for b in bufs {
                this.held.extend_from_slice(b);
                n += b.len();
            }
            return Poll::Ready(Ok(n));
        }
        let written = ready!(Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs))?;
        this.wrote(bufs, written);
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// During the handshake the held bytes stay held (the handshake's last flush is the one
    /// that would send them alone); once open, a flush sends them.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase == Phase::Open && !this.held.is_empty() {
            ready!(this.poll_write_after_held(cx, &[]))?;
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
