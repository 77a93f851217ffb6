//! TLS connections: the handshake (bounded by `handshake-timeout`), the ALPN protocol the
//! lifecycle (`connection.rs`) dispatches on, and the [`Transport`] a protocol driver writes
//! through.
//!
//! sendfile cannot encrypt, so file bodies are read into a buffer and written as records.
//! A response head written with `more` is held back and sent with the start of the body,
//! so small responses go out in one record.

use super::buffers::BufferPool;
use super::context::WorkerCtx;
use super::tls_socket::TlsSocket;
use super::transport::{self, Transport, GATHER_MAX};
use crate::proto::h2::OutputParts;
use bytes::BytesMut;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The maximum TLS record payload: the unit worth filling before writing.
const RECORD: usize = 16 * 1024;
/// File bodies are read in chunks of this size.
const FILE_CHUNK: usize = 64 * 1024;
/// rustls' own limit on the records it buffers (its default): a write that is not flushed at
/// once (`more`) waits for the socket beyond it, so a client that does not read holds at most
/// this much here.
const SEND_BUFFER: usize = 64 * 1024;
/// A write that is flushed at once is encrypted whole, up to this much, and goes out in one
/// `writev` of its records instead of one per `SEND_BUFFER`: the caller holds these bytes
/// until the flush anyway. It covers an HTTP/2 turn of streamed bodies (`OUTPUT_HIGH_WATER`,
/// 128 KiB, plus one frame); a larger turn of whole answers (`http2-max-write-size`) goes out
/// in parts of this size: a 528 KiB limit measured no faster, and would hold more memory per
/// blocked connection.
const FLUSHED_WRITE_MAX: usize = 160 * 1024;

/// Runs the handshake on an accepted connection; `None` when it failed, timed out or the
/// server stopped meanwhile. A failed or slow handshake is counted and logged at debug level.
/// Its state is large and short-lived: the caller (`connection::serve_tls`) boxes it apart
/// from the session's.
pub(crate) async fn handshake(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    peer: SocketAddr,
    ctx: &WorkerCtx,
) -> Option<Box<TlsStream<TlsSocket>>> {
    let timeout = ctx.routing().config.handshake_timeout;
    let stop = ctx.stop.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    if ctx.close_idle.get() {
        return None;
    }
    // With `acme.on-demand`, the ClientHello is read first and the handshake may wait for
    // its name's certificate (`acme::on_demand`), so longer; boxed apart, it adds nothing
    // to the others.
    let on_demand = crate::acme::on_demand::configured();
    let handshake = tokio::time::timeout(
        if on_demand {
            timeout + crate::acme::on_demand::wait_limit()
        } else {
            timeout
        },
        async {
            let socket = TlsSocket::new(stream);
            if on_demand {
                let accepted = crate::acme::on_demand::accept(&acceptor, socket, peer, timeout);
                Box::pin(accepted).await
            } else {
                let accepted = acceptor.accept(socket).into_fallible().await;
                accepted.map_err(|(e, socket)| (e, Some(socket)))
            }
        },
    );
    tokio::pin!(handshake);
    loop {
        let done = tokio::select! {
            r = &mut handshake => r,
            // A server stopping does not wait for handshakes: no request has started yet.
            // A reload does: the client is about to send one.
            _ = &mut stop => {
                if ctx.close_idle.get() {
                    return None;
                }
                stop.set(ctx.stop.notified());
                stop.as_mut().enable();
                continue;
            }
        };
        match done {
            Ok(Ok(mut tls)) => {
                tls.get_mut().0.open();
                let kind = tls.get_ref().1.handshake_kind();
                crate::metrics::handshake(match kind {
                    Some(rustls::HandshakeKind::Resumed) => crate::metrics::Handshake::Resumed,
                    _ => crate::metrics::Handshake::Full,
                });
                // Boxed: moved into the connection's state, it is one pointer.
                return Some(Box::new(tls));
            }
            Ok(Err((e, socket))) => {
                // The alert rustls wrote, if it was held as if it were the tickets.
                if let Some(mut socket) = socket {
                    socket.try_write_held();
                }
                crate::tls::record_handshake_failure();
                crate::metrics::handshake(crate::metrics::Handshake::Failed);
                tracing::debug!(peer = %peer, "TLS handshake failed: {e}");
                return None;
            }
            Err(_) => {
                crate::tls::record_handshake_failure();
                crate::metrics::handshake(crate::metrics::Handshake::Failed);
                tracing::debug!(peer = %peer, "TLS handshake not done within handshake-timeout");
                return None;
            }
        }
    }
}

/// The protocol the client chose in ALPN, told apart without copying its name.
pub(crate) enum Alpn {
    H2,
    /// `http/1.1`, or no ALPN at all.
    Http1,
    Other,
}

impl Alpn {
    pub fn of(name: Option<&[u8]>) -> Alpn {
        match name {
            Some(b"h2") => Alpn::H2,
            Some(b"http/1.1") | None => Alpn::Http1,
            Some(_) => Alpn::Other,
        }
    }
}

/// A server-side TLS stream as a [`Transport`].
pub(crate) struct TlsTransport {
    inner: Box<TlsStream<TlsSocket>>,
    /// Plaintext held back because a body follows (`more`), sent with the body's start.
    held: Vec<u8>,
}

impl TlsTransport {
    pub(crate) fn new(inner: Box<TlsStream<TlsSocket>>) -> TlsTransport {
        TlsTransport {
            inner,
            held: Vec::new(),
        }
    }

    /// Whether the client's early data (`early-data`) was accepted: its bytes are then the
    /// start of what [`take_decrypted`](Self::take_decrypted) hands over.
    pub(crate) fn early_data_accepted(&mut self) -> bool {
        self.inner.get_mut().1.early_data().is_some()
    }

    /// The plaintext rustls has already decrypted, without reading the socket: in a pooled
    /// read buffer, up to its capacity (the rest stays in rustls); empty and unallocated when
    /// there is none.
    pub(crate) fn take_decrypted(&mut self, pool: &BufferPool) -> BytesMut {
        let mut buf = BytesMut::new();
        // Early data (`early-data`) comes first, all of it (at most `early-data-max-size`):
        // what is left in rustls is read only through its ordinary reader.
        if let Some(mut early) = self.inner.get_mut().1.early_data() {
            buf = pool.read_buffer();
            let mut chunk = [0; 4096];
            while let Ok(n @ 1..) = io::Read::read(&mut early, &mut chunk) {
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        let mut reader = self.inner.get_mut().1.reader();
        loop {
            // An error or the peer's close is left for the next read to report.
            let chunk = match io::BufRead::fill_buf(&mut reader) {
                Ok(chunk) if !chunk.is_empty() => chunk,
                _ => return buf,
            };
            if buf.capacity() == 0 {
                buf = pool.read_buffer();
            }
            let n = chunk.len().min(buf.capacity() - buf.len());
            if n == 0 {
                return buf;
            }
            buf.extend_from_slice(&chunk[..n]);
            io::BufRead::consume(&mut reader, n);
        }
    }

    /// Hands `buf` to rustls, waiting (bounded by `timeout` each time) while the socket is full.
    async fn write_plain(&mut self, mut buf: &[u8], timeout: Duration) -> io::Result<()> {
        while !buf.is_empty() {
            match tokio::time::timeout(timeout, self.inner.write(buf)).await {
                Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => buf = &buf[n..],
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(send_timed_out()),
            }
        }
        Ok(())
    }

    /// Encrypts the held bytes, then `parts`, and writes their records out: in one `writev`
    /// when they fit `FLUSHED_WRITE_MAX`. Returns once the socket took them all.
    async fn write_flushed(&mut self, parts: OutputParts<'_>, timeout: Duration) -> io::Result<()> {
        let len = self.held.len().saturating_add(parts.len());
        let limit = len
            .saturating_add(RECORD)
            .clamp(SEND_BUFFER, FLUSHED_WRITE_MAX);
        self.inner.get_mut().1.set_buffer_limit(Some(limit));
        // One await point: this future is part of every TLS connection's state.
        let (mut held, mut taken) = (0, 0);
        let r = loop {
            let before = (held, taken);
            if let Err(e) = self.encrypt(&mut held, &parts, &mut taken) {
                break Err(e);
            }
            let progress = (held, taken) != before;
            if let Err(e) = self.flush(timeout).await {
                break Err(e);
            }
            if held == self.held.len() && taken == parts.len() {
                break Ok(());
            }
            if !progress {
                // rustls took nothing although its buffer was just written out.
                break Err(io::ErrorKind::WriteZero.into());
            }
        };
        self.inner.get_mut().1.set_buffer_limit(Some(SEND_BUFFER));
        self.held.clear();
        r
    }

    /// Hands rustls as much as it takes of the held bytes from `held` on, then of `parts`
    /// from byte `taken` on, gathered so that records span the pieces; nothing is written to
    /// the socket here.
    fn encrypt(
        &mut self,
        held: &mut usize,
        parts: &OutputParts<'_>,
        taken: &mut usize,
    ) -> io::Result<()> {
        // File ranges are for plain sockets only (`Settings::sendfile_min`).
        debug_assert!(!parts.has_files());
        let mut writer = self.inner.get_mut().1.writer();
        // The held bytes (a response head) and the start of `parts` (its body) gathered into
        // one write, so that they share a record: written apart, the head was a record of
        // its own, one more seal and tag per response.
        while *held < self.held.len() {
            let mut iov = [io::IoSlice::new(&[]); GATHER_MAX];
            iov[0] = io::IoSlice::new(&self.held[*held..]);
            let n = parts.gather(*taken, &mut iov[1..]);
            let wrote = io::Write::write_vectored(&mut writer, &iov[..=n])?;
            if wrote == 0 {
                return Ok(());
            }
            let of_held = wrote.min(self.held.len() - *held);
            *held += of_held;
            *taken += wrote - of_held;
        }
        if let Some(buf) = parts.as_whole() {
            while *taken < buf.len() {
                match io::Write::write(&mut writer, &buf[*taken..])? {
                    0 => return Ok(()),
                    n => *taken += n,
                }
            }
            return Ok(());
        }
        while *taken < parts.len() {
            let mut iov = [io::IoSlice::new(&[]); GATHER_MAX];
            let n = parts.gather(*taken, &mut iov);
            match io::Write::write_vectored(&mut writer, &iov[..n])? {
                0 => return Ok(()),
                n => *taken += n,
            }
        }
        Ok(())
    }

    /// Writes out every record rustls still buffers.
    async fn flush(&mut self, timeout: Duration) -> io::Result<()> {
        match tokio::time::timeout(timeout, self.inner.flush()).await {
            Ok(r) => r,
            Err(_) => Err(send_timed_out()),
        }
    }
}

impl AsyncRead for TlsTransport {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_read(cx, buf)
    }
}

impl Transport for TlsTransport {
    async fn write_all(&mut self, mut buf: &[u8], more: bool, timeout: Duration) -> io::Result<()> {
        if !more {
            return self.write_flushed(OutputParts::whole(buf), timeout).await;
        }
        if !self.held.is_empty() || buf.len() < RECORD {
            // Fill the held record from the front of `buf`.
            let take = RECORD.saturating_sub(self.held.len()).min(buf.len());
            self.held.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if buf.is_empty() && self.held.len() < RECORD {
                return Ok(());
            }
            let held = std::mem::take(&mut self.held);
            let r = self.write_plain(&held, timeout).await;
            self.held = held;
            self.held.clear();
            r?;
        }
        self.write_plain(buf, timeout).await
    }

    async fn write_parts(&mut self, parts: OutputParts<'_>, timeout: Duration) -> io::Result<()> {
        self.write_flushed(parts, timeout).await
    }

    async fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
        timeout: Duration,
    ) -> io::Result<()> {
        // Allocated per file, not kept: an idle connection holds no file buffer.
        let mut buf = Vec::new();
        self.copy_file(&mut buf, file, offset, len, timeout).await
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        let (socket, conn) = self.inner.get_mut();
        socket.try_write_held();
        let tcp = socket.tcp();
        conn.send_close_notify();
        // Best effort without waiting: the alert is small and the socket usually has room.
        while conn.wants_write() {
            match conn.write_tls(&mut NonBlocking(tcp)) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        transport::shutdown_write(tcp)
    }

    fn is_secure(&self) -> bool {
        true
    }

    fn tls_facts(&self) -> Option<crate::log::TlsFacts> {
        let conn = &self.inner.get_ref().1;
        Some(crate::log::TlsFacts {
            version: conn.protocol_version()?,
            suite: conn.negotiated_cipher_suite()?.suite(),
            resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        })
    }

    const WAITS_WITHOUT_BUFFER: bool = true;

    /// Ready at once when rustls holds decrypted bytes (or the peer's close); otherwise when
    /// the socket is readable. Every read processes all the whole records it brought in
    /// (`process_new_packets` runs after each `read_tls`), so what rustls holds undecrypted
    /// is at most the start of a record, which needs the socket anyway: no need to process
    /// again here, which cost two calls per request.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (tcp, conn) = self.inner.get_mut();
        if conn.wants_read() {
            tcp.tcp().poll_read_ready(cx)
        } else {
            Poll::Ready(Ok(()))
        }
    }
}

impl TlsTransport {
    async fn copy_file(
        &mut self,
        buf: &mut Vec<u8>,
        file: &std::fs::File,
        mut offset: u64,
        len: u64,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut left = len;
        // Read into the buffer's room as it is: zeroing it first cost as much as the copy.
        buf.reserve_exact(FILE_CHUNK.min(usize::try_from(len).unwrap_or(FILE_CHUNK)));
        while left > 0 {
            buf.clear();
            let n = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(buf.capacity().max(1));
            // A page-cache read; the file handler's own reads block the same way. A file that
            // shrank is an UnexpectedEof error.
            crate::sys::file::pread_append(file, buf, n, offset)?;
            offset += n as u64;
            left -= n as u64;
            self.write_all(&buf[..n], left > 0, timeout).await?;
            if left > 0 {
                // Let other connections of this worker run between chunks.
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }
}

/// `std::io::Write` over a non-blocking tokio socket, for the close_notify alert.
struct NonBlocking<'a>(&'a TcpStream);

impl io::Write for NonBlocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn send_timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "peer did not read within send-timeout",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;

    /// A server configuration with a fresh self-signed certificate for localhost, and a client
    /// configuration that trusts it.
    fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let der = cert.der().clone();
        let key = rustls_pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
        let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key.into())
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    }

    /// Flushed writes far beyond what rustls takes at once (`FLUSHED_WRITE_MAX`), one that
    /// follows a held head (`more`), and a small one reach a client that reads slower than
    /// they are written, whole and in order.
    #[test]
    fn large_writes_arrive_whole_and_in_order() {
        runtime().block_on(async {
            let (server, client) = configs();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let body: Vec<u8> = (0..4_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
            let expected = [&b"head"[..], &body, &body, &body[..100]].concat();
            let len = expected.len();
            let reader = tokio::spawn(async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                let connector = tokio_rustls::TlsConnector::from(client);
                let mut tls = connector.connect(name, tcp).await.unwrap();
                let mut got = vec![0; len];
                for chunk in got.chunks_mut(64 * 1024) {
                    tls.read_exact(chunk).await.unwrap();
                    tokio::task::yield_now().await;
                }
                got
            });
            let mut conn = accept(&listener, server).await;
            let t = Duration::from_secs(10);
            conn.write_all(b"head", true, t).await.unwrap();
            conn.write_all(&body, false, t).await.unwrap();
            conn.write_all(&body, false, t).await.unwrap();
            conn.write_all(&body[..100], false, t).await.unwrap();
            assert!(reader.await.unwrap() == expected);
        });
    }

    /// A response head written with `more` shares the first record of the body that follows
    /// it: a 4-byte head and a 20,000-byte body take two records (16 KiB, then the rest),
    /// not three. Counted from the bytes on the wire: 22 per TLS 1.3 record beyond its
    /// plaintext (5 of header, 1 of content type, 16 of tag).
    #[test]
    fn a_held_head_shares_the_first_record_of_its_body() {
        runtime().block_on(async {
            let (server, client) = configs();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let client = std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut sock = Counted {
                    tcp: std::net::TcpStream::connect(addr).unwrap(),
                    read: 0,
                };
                let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                let mut tls = rustls::ClientConnection::new(client, name).unwrap();
                tls.complete_io(&mut sock).unwrap();
                // The first write (with the session tickets), then the one counted.
                let mut plain = Vec::new();
                let mut wire = 0;
                for (round, want) in [1, 20_004].into_iter().enumerate() {
                    let start = sock.read;
                    plain.clear();
                    while plain.len() < want {
                        let mut buf = [0; 4096];
                        match tls.reader().read(&mut buf) {
                            Ok(n) => plain.extend_from_slice(&buf[..n]),
                            Err(_) => {
                                tls.read_tls(&mut sock).unwrap();
                                tls.process_new_packets().unwrap();
                            }
                        }
                    }
                    wire = sock.read - start;
                    if round == 0 {
                        tls.writer().write_all(b"go").unwrap();
                        tls.complete_io(&mut sock).unwrap();
                    }
                }
                (plain.len(), wire)
            });
            let mut conn = accept(&listener, server).await;
            let t = Duration::from_secs(10);
            conn.write_all(b"x", false, t).await.unwrap();
            let mut go = [0; 2];
            conn.read_exact(&mut go).await.unwrap();
            conn.write_all(b"head", true, t).await.unwrap();
            conn.write_all(&[7; 20_000], false, t).await.unwrap();
            let (plain, wire) = client.join().unwrap();
            assert_eq!(plain, 20_004);
            assert_eq!(wire - plain, 2 * 22, "two records");
        });
    }

    /// A socket that counts the bytes read from it.
    struct Counted {
        tcp: std::net::TcpStream,
        read: usize,
    }

    impl io::Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = io::Read::read(&mut self.tcp, buf)?;
            self.read += n;
            Ok(n)
        }
    }

    impl io::Write for Counted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            io::Write::write(&mut self.tcp, buf)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Request bytes sent in the same write as the client's Finished are decrypted by the
    /// handshake already: `take_decrypted` hands them over without reading the socket.
    #[test]
    fn bytes_sent_with_the_finished_are_taken_after_the_handshake() {
        runtime().block_on(async {
            let (server, client) = configs();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let client = std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut sock = std::net::TcpStream::connect(addr).unwrap();
                let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                let mut tls = rustls::ClientConnection::new(client, name).unwrap();
                while tls.is_handshaking() {
                    while tls.wants_write() {
                        tls.write_tls(&mut sock).unwrap();
                    }
                    tls.read_tls(&mut sock).unwrap();
                    tls.process_new_packets().unwrap();
                }
                // The Finished is still queued: the request goes out in the same write.
                tls.writer().write_all(b"request").unwrap();
                while tls.wants_write() {
                    tls.write_tls(&mut sock).unwrap();
                }
                let mut got = [0; 1];
                let _ = sock.read(&mut got);
            });
            let mut conn = accept(&listener, server).await;
            let pool = BufferPool::default();
            let taken = conn.take_decrypted(&pool);
            assert_eq!(&taken[..], b"request");
            assert!(
                conn.take_decrypted(&pool).capacity() == 0,
                "nothing more, no buffer"
            );
            drop(conn);
            client.join().unwrap();
        });
    }

    /// The next connection on `listener`, after its handshake.
    async fn accept(
        listener: &tokio::net::TcpListener,
        server: Arc<rustls::ServerConfig>,
    ) -> TlsTransport {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = TlsAcceptor::from(server)
            .accept(TlsSocket::new(tcp))
            .await
            .unwrap();
        tls.get_mut().0.open();
        TlsTransport::new(Box::new(tls))
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// The session tickets of a TLS 1.3 handshake wait in the socket for the first write and
    /// reach the client with it: a second connection resumes with one of them.
    #[test]
    fn tickets_go_out_with_the_first_write_and_resume() {
        runtime().block_on(async {
            let (server, client) = configs();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let connector = tokio_rustls::TlsConnector::from(client);
            for round in 0..2 {
                let connector = connector.clone();
                let reader = tokio::spawn(async move {
                    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                    let mut tls = connector.connect(name, tcp).await.unwrap();
                    let mut got = [0; 5];
                    tls.read_exact(&mut got).await.unwrap();
                    got
                });
                let (tcp, _) = listener.accept().await.unwrap();
                let mut tls = TlsAcceptor::from(Arc::clone(&server))
                    .accept(TlsSocket::new(tcp))
                    .await
                    .unwrap();
                let resumed =
                    tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                assert_eq!(resumed, round == 1);
                assert!(tls.get_ref().0.held_len() > 0, "the tickets are held");
                tls.get_mut().0.open();
                let mut conn = TlsTransport::new(Box::new(tls));
                conn.write_all(b"hello", false, Duration::from_secs(10))
                    .await
                    .unwrap();
                assert_eq!(&reader.await.unwrap(), b"hello");
            }
        });
    }
}
