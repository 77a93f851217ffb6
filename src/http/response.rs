//! A response as a handler produces it. The codec adds the framing headers (Date, Server,
//! Content-Length or chunking, Connection) and pulls the body.

use super::body::StreamBody;
use bytes::Bytes;
use std::fs::File;
use std::rc::Rc;
use std::time::SystemTime;

/// One response. Header names are kept in the case they should have on HTTP/1.1
/// (`Content-Type`); HTTP/2 lowercases them.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(Bytes, Bytes)>,
    pub body: Body,
}

impl Response {
    pub fn new(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Body::Empty,
        }
    }

    /// A short text/plain answer, as used for errors (`404 not found`).
    pub fn text(status: u16, text: &'static str) -> Response {
        Response {
            status,
            headers: vec![(
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(b"text/plain; charset=utf-8"),
            )],
            body: Body::Bytes(Bytes::from_static(text.as_bytes())),
        }
    }

    /// An error answer with the standard reason phrase as its body.
    pub fn error(status: u16) -> Response {
        Response::text(status, reason_body(status))
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<Bytes>) -> Response {
        self.headers
            .push((Bytes::from_static(name.as_bytes()), value.into()));
        self
    }

    /// The first header with this name, ignoring ASCII case.
    pub fn header(&self, name: &[u8]) -> Option<&Bytes> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// Where a response body comes from.
#[derive(Debug, Default)]
pub enum Body {
    #[default]
    Empty,
    Bytes(Bytes),
    /// A range of an open file: sent with sendfile on plain connections.
    File(FileRange),
    /// Pieces sent in order (multipart/byteranges).
    Parts(Vec<BodyPart>),
    /// Produced over time (a proxied response): pulled by the codec as the client takes it.
    Stream(StreamBody),
}

#[derive(Debug)]
pub enum BodyPart {
    Bytes(Bytes),
    File(FileRange),
}

impl Body {
    /// The body's length in bytes, when known before it is sent: always, except for a
    /// stream without a declared length.
    pub fn known_len(&self) -> Option<u64> {
        match self {
            Body::Stream(s) => s.len,
            other => Some(other.len()),
        }
    }

    /// The body's length in bytes; a stream counts its declared length, or 0.
    pub fn len(&self) -> u64 {
        match self {
            Body::Stream(s) => s.len.unwrap_or(0),
            Body::Empty => 0,
            Body::Bytes(b) => b.len() as u64,
            Body::File(f) => f.len,
            Body::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    BodyPart::Bytes(b) => b.len() as u64,
                    BodyPart::File(f) => f.len,
                })
                .sum(),
        }
    }

    /// No bytes to send (a stream of unknown length is not empty).
    pub fn is_empty(&self) -> bool {
        self.known_len() == Some(0)
    }
}

/// `len` bytes of `file` from `offset`.
#[derive(Debug, Clone)]
pub struct FileRange {
    pub file: Rc<OpenFile>,
    pub offset: u64,
    pub len: u64,
}

impl FileRange {
    /// The bytes of this range if the file's contents are held in memory.
    pub fn cached_bytes(&self) -> Option<Bytes> {
        let c = self.file.contents.as_ref()?;
        let start = usize::try_from(self.offset).ok()?;
        let end = start.checked_add(usize::try_from(self.len).ok()?)?;
        (end <= c.len()).then(|| c.slice(start..end))
    }

    /// Like `cached_bytes`, borrowed.
    pub fn cached_slice(&self) -> Option<&[u8]> {
        let c = self.file.contents.as_ref()?;
        let start = usize::try_from(self.offset).ok()?;
        let end = start.checked_add(usize::try_from(self.len).ok()?)?;
        c.get(start..end)
    }
}

/// A file opened by the file handler and kept in the per-worker open-file cache.
#[derive(Debug)]
pub struct OpenFile {
    pub file: File,
    pub size: u64,
    pub modified: SystemTime,
    /// The whole contents, for small files: answered with one write, no sendfile.
    pub contents: Option<Bytes>,
}

/// The standard reason phrase for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

fn reason_body(status: u16) -> &'static str {
    match status {
        400 => "Bad Request\n",
        403 => "Forbidden\n",
        404 => "Not Found\n",
        405 => "Method Not Allowed\n",
        408 => "Request Timeout\n",
        411 => "Length Required\n",
        413 => "Content Too Large\n",
        414 => "URI Too Long\n",
        416 => "Range Not Satisfiable\n",
        417 => "Expectation Failed\n",
        431 => "Request Header Fields Too Large\n",
        500 => "Internal Server Error\n",
        501 => "Not Implemented\n",
        502 => "Bad Gateway\n",
        503 => "Service Unavailable\n",
        505 => "HTTP Version Not Supported\n",
        _ => "\n",
    }
}
