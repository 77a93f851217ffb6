//! Reading HTTP/1.1 messages of every framing from a socket, for the test backend (requests)
//! and for the tests (responses): Content-Length, chunked with trailers, and until close. A
//! message cut short is reported as such, never as an error that hides what did arrive.
#![allow(dead_code)]

use std::io::{self, Read};

/// The longest head accepted (request or response).
const MAX_HEAD: usize = 64 * 1024;

/// A buffered reader that keeps what it read past one message for the next.
pub struct Input<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: Read> Input<R> {
    pub fn new(inner: R) -> Input<R> {
        Input {
            inner,
            buf: Vec::with_capacity(64 * 1024),
            start: 0,
        }
    }

    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// Buffered bytes not consumed yet.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads more; Ok(false) at end of stream.
    fn fill(&mut self) -> io::Result<bool> {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        let mut tmp = [0u8; 64 * 1024];
        loop {
            match self.inner.read(&mut tmp) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads a head up to and including its blank line. Ok(None) when the stream ended
    /// cleanly before any byte of it.
    pub fn read_head(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(i) = find(self.buffered(), b"\r\n\r\n") {
                let head = self.buffered()[..i + 4].to_vec();
                self.consume(i + 4);
                return Ok(Some(head));
            }
            if self.buffered().len() > MAX_HEAD {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "head too long"));
            }
            if !self.fill()? {
                if self.buffered().is_empty() {
                    return Ok(None);
                }
                return Err(eof("inside a head"));
            }
        }
    }

    /// One CRLF-terminated line, without the CRLF.
    pub fn read_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = find(self.buffered(), b"\r\n") {
                let line = self.buffered()[..i].to_vec();
                self.consume(i + 2);
                return Ok(line);
            }
            if self.buffered().len() > MAX_HEAD {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"));
            }
            if !self.fill()? {
                return Err(eof("inside a line"));
            }
        }
    }

    /// Passes exactly `n` bytes to `sink`.
    pub fn read_exact_to(&mut self, mut n: u64, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        while n > 0 {
            if self.buffered().is_empty() && !self.fill()? {
                return Err(eof("inside a body"));
            }
            let take = (self.buffered().len() as u64).min(n) as usize;
            sink(&self.buffered()[..take]);
            self.consume(take);
            n -= take as u64;
        }
        Ok(())
    }

    /// Passes everything up to the end of the stream to `sink`.
    pub fn read_to_end_to(&mut self, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        loop {
            if !self.buffered().is_empty() {
                sink(self.buffered());
                let n = self.buffered().len();
                self.consume(n);
            }
            if !self.fill()? {
                return Ok(());
            }
        }
    }

    /// A chunked body: its data to `sink`, and its trailers.
    pub fn read_chunked(&mut self, sink: &mut dyn FnMut(&[u8])) -> io::Result<Headers> {
        loop {
            let line = self.read_line()?;
            let text = String::from_utf8_lossy(&line);
            let size_text = text.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size_text, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            if size == 0 {
                let mut trailers = Vec::new();
                loop {
                    let line = self.read_line()?;
                    if line.is_empty() {
                        return Ok(trailers);
                    }
                    if let Some(h) = split_header(&String::from_utf8_lossy(&line)) {
                        trailers.push(h);
                    }
                }
            }
            self.read_exact_to(size, sink)?;
            if !self.read_line()?.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "chunk without CRLF",
                ));
            }
        }
    }
}

pub type Headers = Vec<(String, String)>;

/// Value of the first header `name` (any case).
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Every value of header `name` (any case), in order.
pub fn headers_named<'a>(headers: &'a Headers, name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

fn split_header(line: &str) -> Option<(String, String)> {
    let (n, v) = line.split_once(':')?;
    Some((n.trim().to_string(), v.trim().to_string()))
}

/// A head's first line and its header fields.
pub fn parse_head(head: &[u8]) -> (String, Headers) {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default().to_string();
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(split_header)
        .collect();
    (first, headers)
}

/// How a message body was delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The body framing of a message with `headers` (a request has no until-close body).
pub fn framing(headers: &Headers, is_request: bool) -> Framing {
    let chunked = headers_named(headers, "transfer-encoding")
        .iter()
        .any(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        return Framing::Chunked;
    }
    match header(headers, "content-length").and_then(|v| v.parse().ok()) {
        Some(n) => Framing::Length(n),
        None if is_request => Framing::None,
        None => Framing::UntilClose,
    }
}

/// One HTTP/1.1 response as a client saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Headers,
    pub framing: Framing,
    pub body: Vec<u8>,
    pub trailers: Headers,
    /// The body ended where its framing says it ends (for UntilClose: the stream ended).
    pub complete: bool,
    /// Why it is not complete.
    pub cut: Option<String>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    pub fn trailer(&self, name: &str) -> Option<&str> {
        header(&self.trailers, name)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response (an interim 1xx is returned as one). `head_request`: no body follows.
/// Err only when no head arrived.
pub fn read_reply<R: Read>(input: &mut Input<R>, head_request: bool) -> io::Result<Reply> {
    let head = input.read_head()?.ok_or_else(|| eof("before a response"))?;
    let (status_line, headers) = parse_head(&head);
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, status_line.clone()))?;
    let mut reply = Reply {
        status,
        framing: Framing::None,
        headers,
        body: Vec::new(),
        trailers: Vec::new(),
        complete: true,
        cut: None,
    };
    if head_request || status < 200 || status == 204 || status == 304 {
        return Ok(reply);
    }
    reply.framing = framing(&reply.headers, false);
    let mut body = Vec::new();
    let result = {
        let mut sink = |b: &[u8]| body.extend_from_slice(b);
        match reply.framing {
            Framing::None => Ok(()),
            Framing::Length(n) => input.read_exact_to(n, &mut sink),
            Framing::Chunked => input.read_chunked(&mut sink).map(|t| reply.trailers = t),
            Framing::UntilClose => input.read_to_end_to(&mut sink),
        }
    };
    reply.body = body;
    if let Err(e) = result {
        reply.complete = false;
        reply.cut = Some(e.to_string());
    }
    Ok(reply)
}

fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("stream ended {what}"))
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}
