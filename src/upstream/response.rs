//! Reading a backend's response: interim responses, the head, then the body by its framing
//! (Content-Length, chunked with trailers, or until the backend closes). Body bytes are
//! handed out as slices of the read buffer, read only when the client's codec asks for more.

use super::conn::Conn;
use super::fields::is_forbidden_trailer;
use super::read_arena::ReadArena;
use crate::http::Frame;
use crate::proto::h1::{self, ChunkedDecoder, ResponseFraming};
use bytes::{Buf, Bytes, BytesMut};
use std::io;
use std::task::{Context, Poll};

/// The first read's size: most response heads and small bodies fit, so a small response
/// costs one `recv`. Allocated only once the socket is readable, so waiting exchanges hold
/// no buffer.
const FIRST_READ: usize = 16 * 1024;

/// Why reading stopped.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    /// The backend closed the connection before the response was complete.
    Closed,
    Malformed(&'static str),
}

/// A response head, its fields slices of one buffer.
pub struct Head {
    pub status: u16,
    /// Every field but the framing ones (Content-Length, Transfer-Encoding).
    pub headers: Vec<(Bytes, Bytes)>,
    pub framing: ResponseFraming,
    pub content_length: Option<u64>,
    pub keep_alive: bool,
}

enum BodyState {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

pub struct ResponseReader {
    buf: BytesMut,
    head_request: bool,
    /// Limit on the head and the trailer section.
    max_head: usize,
    /// Limit on the fields of a head.
    max_fields: usize,
    /// How much one read may take (`proxy.max-buffer-size`, capped).
    read_size: usize,
    body: BodyState,
    /// Any byte arrived.
    received: bool,
    progressed: bool,
}

impl ResponseReader {
    pub fn new(
        head_request: bool,
        max_head: usize,
        max_fields: usize,
        read_size: usize,
    ) -> ResponseReader {
        ResponseReader {
            buf: BytesMut::new(),
            head_request,
            max_head,
            max_fields,
            read_size,
            body: BodyState::Done,
            received: false,
            progressed: false,
        }
    }

    /// The next head: an interim (1xx but 101) or the final one. After a final head, the
    /// body is read with [`ResponseReader::poll_body`].
    pub fn poll_head(
        &mut self,
        conn: &mut Conn,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Head, ReadError>> {
        loop {
            if !self.buf.is_empty() {
                let parsed = h1::parse_response_head(
                    &self.buf,
                    self.head_request,
                    self.max_head,
                    self.max_fields,
                )
                .map_err(|m| ReadError::Malformed(m.0))?;
                if let Some(p) = parsed {
                    let bytes = self.buf.split_to(p.len).freeze();
                    let mut headers = crate::http::recycle::header_list(p.fields.len());
                    headers.extend(
                        p.fields
                            .iter()
                            .filter(|(n, _)| {
                                let n = &bytes[n.clone()];
                                !n.eq_ignore_ascii_case(b"content-length")
                                    && !n.eq_ignore_ascii_case(b"transfer-encoding")
                            })
                            .map(|(n, v)| (bytes.slice(n.clone()), bytes.slice(v.clone()))),
                    );
                    crate::http::recycle::give_field_list(p.fields);
                    self.body = match p.body {
                        ResponseFraming::None => BodyState::Done,
                        ResponseFraming::Length(n) => BodyState::Length(n),
                        ResponseFraming::Chunked => {
                            BodyState::Chunked(ChunkedDecoder::new(self.max_head))
                        }
                        ResponseFraming::UntilClose => BodyState::UntilClose,
                    };
                    return Poll::Ready(Ok(Head {
                        status: p.status,
                        headers,
                        framing: p.body,
                        content_length: p.content_length,
                        keep_alive: p.keep_alive,
                    }));
                }
            }
            let want = if self.buf.is_empty() {
                FIRST_READ
            } else {
                self.buf.len()
            };
            match self.poll_read(conn, cx, want) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(ReadError::Closed)),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(ReadError::Io(e))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// The next piece of the body; `None` at its end.
    pub fn poll_body(
        &mut self,
        conn: &mut Conn,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame, ReadError>>> {
        loop {
            match &mut self.body {
                BodyState::Done => return Poll::Ready(None),
                BodyState::Length(0) => {
                    self.body = BodyState::Done;
                    return Poll::Ready(None);
                }
                BodyState::Length(left) if !self.buf.is_empty() => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(self.buf.len());
                    *left -= take as u64;
                    if *left == 0 {
                        self.body = BodyState::Done;
                    }
                    return Poll::Ready(Some(Ok(Frame::Data(self.buf.split_to(take).freeze()))));
                }
                BodyState::UntilClose if !self.buf.is_empty() => {
                    return Poll::Ready(Some(Ok(Frame::Data(self.buf.split().freeze()))));
                }
                BodyState::Chunked(dec) if !self.buf.is_empty() => {
                    let d = match dec.decode(&self.buf) {
                        Ok(d) => d,
                        Err(e) => return Poll::Ready(Some(Err(ReadError::Malformed(e.reason())))),
                    };
                    if d.done {
                        let trailers = dec.take_trailers().map(|mut t| {
                            t.retain(|(n, _)| !is_forbidden_trailer(n));
                            t
                        });
                        self.buf.advance(d.consumed);
                        self.body = BodyState::Done;
                        return Poll::Ready(
                            trailers
                                .filter(|t| !t.is_empty())
                                .map(|t| Ok(Frame::Trailers(t))),
                        );
                    }
                    if !d.data.is_empty() {
                        self.buf.advance(d.data.start);
                        let data = self.buf.split_to(d.data.len()).freeze();
                        self.buf.advance(d.consumed - d.data.end);
                        return Poll::Ready(Some(Ok(Frame::Data(data))));
                    }
                    self.buf.advance(d.consumed);
                    if d.consumed > 0 {
                        continue;
                    }
                }
                _ => {}
            }
            let want = match self.body {
                BodyState::Length(left) => usize::try_from(left).unwrap_or(usize::MAX),
                _ => self.read_size,
            };
            match self.poll_read(conn, cx, want.min(self.read_size)) {
                Poll::Ready(Ok(0)) => {
                    if matches!(self.body, BodyState::UntilClose) {
                        self.body = BodyState::Done;
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Err(ReadError::Closed)));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(ReadError::Io(e)))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// After a `101 Switching Protocols`: the new protocol's bytes that came with the head.
    pub fn take_buffered(&mut self) -> Bytes {
        self.buf.split().freeze()
    }

    /// The whole body, if it has already arrived (a small response): no stream needed.
    pub fn take_whole_body(&mut self) -> Option<Bytes> {
        match self.body {
            BodyState::Length(n) if n <= self.buf.len() as u64 => {
                self.body = BodyState::Done;
                Some(self.buf.split_to(n as usize).freeze())
            }
            _ => None,
        }
    }

    /// Whether the whole body has been read.
    pub fn is_done(&self) -> bool {
        matches!(self.body, BodyState::Done)
    }

    /// Whether the response ended and nothing followed it: the connection can carry another.
    pub fn is_clean_end(&self) -> bool {
        matches!(self.body, BodyState::Done) && self.buf.is_empty()
    }

    pub fn received_any(&self) -> bool {
        self.received
    }

    /// Whether bytes arrived since the last call.
    pub fn take_progress(&mut self) -> bool {
        std::mem::take(&mut self.progressed)
    }

    fn poll_read(
        &mut self,
        conn: &mut Conn,
        cx: &mut Context<'_>,
        want: usize,
    ) -> Poll<io::Result<usize>> {
        // TLS decrypts through rustls' own buffer: read through it.
        if conn.is_tls() {
            let n = std::task::ready!(conn.poll_read_buf(cx, &mut self.buf, want.max(1)))?;
            if n > 0 {
                self.received = true;
                self.progressed = true;
            }
            return Poll::Ready(Ok(n));
        }
        // Readiness first: nothing is allocated while the backend thinks.
        let n = loop {
            if let Err(e) = std::task::ready!(conn.poll_read_ready(cx)) {
                return Poll::Ready(Err(e));
            }
            let read = if self.buf.is_empty() {
                ReadArena::try_read(conn, &mut self.buf, want.max(1))
            } else {
                self.buf.reserve(want.max(1));
                conn.try_read_buf(&mut self.buf)
            };
            match read {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        };
        if n > 0 {
            self.received = true;
            self.progressed = true;
        }
        Poll::Ready(Ok(n))
    }
}
