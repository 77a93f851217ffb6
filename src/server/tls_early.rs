//! TLS 1.3 early data over TCP (`listen.ssl.early-data`): the handshake's first half run by
//! hand (tokio-rustls runs a handshake to its end), so that a resumed client's requests sent
//! in early data are read, and the safe ones answered, before its Finished arrives (RFC 8470).
//!
//! [`handshake`] reads the ClientHello and writes the server's flight. When the client's
//! early data was accepted (HTTP/1.1 or HTTP/2), the connection is served through
//! [`EarlyTls`], a plain rustls connection over the socket that reads the early data first
//! and writes answers as 0.5-RTT data; the HTTP/1 and HTTP/2 drivers ask it
//! [`Transport::early`] to hold requests that are not safe to replay until
//! [`Transport::complete_handshake`]. Otherwise (no early data) the connection goes on in
//! tokio-rustls as any other.
//!
//! Only listeners with `early-data: ON` come here; the others keep `tls_transport::handshake`.

use super::context::WorkerCtx;
use super::tls_socket::TlsSocket;
use super::transport::{self, Transport, GATHER_MAX};
use crate::proto::h2::OutputParts;
use rustls::ServerConnection;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How the first half of a handshake ended.
pub(crate) enum Handshaken {
    /// Done (or to finish) the usual way: a tokio-rustls stream after the whole handshake.
    Stream(Box<TlsStream<TlsSocket>>),
    /// Early data accepted (HTTP/1.1 or HTTP/2, [`EarlyTls::is_h2`]): served before the
    /// handshake completes.
    Early(Box<EarlyTls>),
}

/// Runs the handshake of a connection on an `early-data` listener up to the server's flight;
/// `None` when it failed, timed out or the server stopped (counted and logged as in
/// `tls_transport::handshake`).
pub(crate) async fn handshake(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    peer: SocketAddr,
    ctx: &WorkerCtx,
) -> Option<Handshaken> {
    if ctx.close_idle.get() {
        return None;
    }
    let timeout = ctx.routing().config.handshake_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let first_half = tokio::time::timeout_at(deadline, first_half(stream, &acceptor));
    tokio::pin!(first_half);
    let stop = ctx.stop.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    let done = loop {
        tokio::select! {
            r = &mut first_half => break r,
            // As `tls_transport::handshake`: a server stopping does not wait, a reload does.
            _ = &mut stop => {
                if ctx.close_idle.get() {
                    return None;
                }
                stop.set(ctx.stop.notified());
                stop.as_mut().enable();
            }
        }
    };
    let (tcp, conn, offered) = match done {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => return failed(peer, &format!("TLS handshake failed: {e}")),
        Err(_) => return failed(peer, "TLS handshake not done within handshake-timeout"),
    };
    let mut conn = conn;
    let accepted = conn.early_data().is_some();
    crate::metrics::tls_early_data::handshake(offered, accepted);
    let served_early = matches!(conn.alpn_protocol(), None | Some(b"http/1.1" | b"h2"));
    if accepted && served_early && conn.is_handshaking() {
        crate::metrics::handshake(crate::metrics::Handshake::Resumed);
        return Some(Handshaken::Early(Box::new(EarlyTls {
            tcp,
            conn,
            handshake_timeout: timeout,
        })));
    }
    // The rest the usual way: tokio-rustls takes the connection where it is.
    let rest = acceptor
        .accept_with(TlsSocket::after_flight(tcp), move |c| *c = conn)
        .into_fallible();
    match tokio::time::timeout_at(deadline, rest).await {
        Ok(Ok(mut tls)) => {
            tls.get_mut().0.open();
            crate::metrics::handshake(match tls.get_ref().1.handshake_kind() {
                Some(rustls::HandshakeKind::Resumed) => crate::metrics::Handshake::Resumed,
                _ => crate::metrics::Handshake::Full,
            });
            Some(Handshaken::Stream(Box::new(tls)))
        }
        Ok(Err((e, mut socket))) => {
            // The alert rustls wrote, if it was held as if it were the tickets.
            socket.try_write_held();
            failed(peer, &format!("TLS handshake failed: {e}"))
        }
        Err(_) => failed(peer, "TLS handshake not done within handshake-timeout"),
    }
}

fn failed<T>(peer: SocketAddr, what: &str) -> Option<T> {
    crate::tls::record_handshake_failure();
    crate::metrics::handshake(crate::metrics::Handshake::Failed);
    tracing::debug!(peer = %peer, "{what}");
    None
}

/// Reads the ClientHello and writes the server's flight; returns the connection, and whether
/// the client offered early data.
async fn first_half(
    tcp: TcpStream,
    acceptor: &TlsAcceptor,
) -> io::Result<(TcpStream, ServerConnection, bool)> {
    let mut first = vec![0; 2048];
    let n = tcp.peek(&mut first).await?;
    let offered = crate::tls::early_data::offered(&first[..n]);
    drop(first);
    let mut conn = ServerConnection::new(acceptor.config().clone()).map_err(io::Error::other)?;
    loop {
        tcp.readable().await?;
        match conn.read_tls(&mut TryRead(&tcp)) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        let processed = conn.process_new_packets();
        // A whole ClientHello makes a flight (or an alert): once written, the first half is
        // over.
        let flight = conn.wants_write();
        write_out(&tcp, &mut conn, Duration::MAX).await?;
        processed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if flight || !conn.is_handshaking() {
            return Ok((tcp, conn, offered));
        }
    }
}

/// Writes what rustls has to send, waiting while the socket is full (up to `timeout`).
async fn write_out(
    tcp: &TcpStream,
    conn: &mut ServerConnection,
    timeout: Duration,
) -> io::Result<()> {
    while conn.wants_write() {
        match conn.write_tls(&mut TryWrite(tcp)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(timeout, tcp.writable()).await {
                    Ok(r) => r?,
                    Err(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "peer did not read within send-timeout",
                        ))
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A connection whose early data was accepted: rustls over the socket, from the server's
/// flight on (its handshake completes as the client's Finished is read).
pub(crate) struct EarlyTls {
    tcp: TcpStream,
    conn: ServerConnection,
    handshake_timeout: Duration,
}

/// Serves an HTTP/2 connection whose early data was accepted ([`EarlyTls::is_h2`]): as after
/// a handshake (`connection::serve_tls_session`), the driver holding early requests that are
/// not safe to replay (`h2.rs`).
pub(crate) async fn serve_h2(
    mut early: EarlyTls,
    addrs: (SocketAddr, SocketAddr),
    ctx: &WorkerCtx,
) {
    let timer = tokio::time::sleep_until(tokio::time::Instant::now());
    let stop = ctx.stop.notified();
    tokio::pin!(timer, stop);
    stop.as_mut().enable();
    let waits = super::h2::Waits { timer, stop };
    let rbuf = bytes::BytesMut::new();
    super::h2::serve(&mut early, addrs, ctx, rbuf, super::h2::Start::New, waits).await;
    let mut buf = ctx.buffers.read_buffer();
    Box::pin(transport::drain_input_into(&mut early, &mut buf)).await;
    ctx.buffers.give_read(buf);
}

impl EarlyTls {
    /// Whether the client chose HTTP/2 (ALPN `h2`); else HTTP/1.1.
    pub(crate) fn is_h2(&self) -> bool {
        self.conn.alpn_protocol() == Some(b"h2")
    }

    /// Writes what rustls holds without waiting (the tickets after the client's Finished).
    fn try_write_out(&mut self) {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut TryWrite(&self.tcp)).is_err() {
                return;
            }
        }
    }

    /// Hands `buf` to rustls and writes its records out.
    async fn send(&mut self, mut buf: &[u8], timeout: Duration) -> io::Result<()> {
        let mut stalled = false;
        while !buf.is_empty() {
            let n = io::Write::write(&mut self.conn.writer(), buf)?;
            buf = &buf[n..];
            write_out(&self.tcp, &mut self.conn, timeout).await?;
            // rustls takes nothing when its buffer is full, which was just written out: a
            // second time in a row, it takes nothing at all.
            if n == 0 && std::mem::replace(&mut stalled, true) {
                return Err(io::ErrorKind::WriteZero.into());
            }
            stalled = n == 0;
        }
        Ok(())
    }
}

impl AsyncRead for EarlyTls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            // Early data first: what follows the handshake comes after it.
            if let Some(mut early) = this.conn.early_data() {
                let n = early.read(buf.initialize_unfilled()).unwrap_or(0);
                if n > 0 {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
            }
            match this.conn.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            this.try_write_out();
            ready!(this.tcp.poll_read_ready(cx))?;
            match this.conn.read_tls(&mut TryRead(&this.tcp)) {
                Ok(_) => {
                    if let Err(e) = this.conn.process_new_packets() {
                        this.try_write_out();
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl Transport for EarlyTls {
    async fn write_all(&mut self, buf: &[u8], _more: bool, timeout: Duration) -> io::Result<()> {
        self.send(buf, timeout).await
    }

    async fn write_parts(&mut self, parts: OutputParts<'_>, timeout: Duration) -> io::Result<()> {
        let mut at = 0;
        while at < parts.len() {
            let mut iov = [io::IoSlice::new(&[]); GATHER_MAX];
            let n = parts.gather(at, &mut iov);
            if n == 0 {
                break;
            }
            for piece in &iov[..n] {
                self.send(piece, timeout).await?;
                at += piece.len();
            }
        }
        Ok(())
    }

    async fn send_file(
        &mut self,
        file: &std::fs::File,
        mut offset: u64,
        len: u64,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut left = len;
        let mut buf = Vec::new();
        while left > 0 {
            let n = usize::try_from(left).unwrap_or(usize::MAX).min(64 * 1024);
            buf.clear();
            crate::sys::file::pread_append(file, &mut buf, n, offset)?;
            self.send(&buf, timeout).await?;
            offset += n as u64;
            left -= n as u64;
        }
        Ok(())
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.conn.send_close_notify();
        self.try_write_out();
        transport::shutdown_write(&self.tcp)
    }

    fn is_secure(&self) -> bool {
        true
    }

    fn tls_facts(&self) -> Option<crate::log::TlsFacts> {
        Some(crate::log::TlsFacts {
            version: self.conn.protocol_version()?,
            suite: self.conn.negotiated_cipher_suite()?.suite(),
            resumed: true,
        })
    }

    fn early(&self) -> bool {
        self.conn.is_handshaking()
    }

    async fn complete_handshake(&mut self) -> io::Result<()> {
        let timeout = self.handshake_timeout;
        let done = tokio::time::timeout(timeout, async {
            while self.conn.is_handshaking() {
                self.tcp.readable().await?;
                match self.conn.read_tls(&mut TryRead(&self.tcp)) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
                if let Err(e) = self.conn.process_new_packets() {
                    self.try_write_out();
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            }
            Ok(())
        });
        match done.await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake not done within handshake-timeout",
            )),
        }
    }
}

/// `std::io::Read` over a non-blocking tokio socket.
struct TryRead<'a>(&'a TcpStream);

impl io::Read for TryRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// `std::io::Write` over a non-blocking tokio socket.
struct TryWrite<'a>(&'a TcpStream);

impl io::Write for TryWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
