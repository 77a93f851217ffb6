//! A response as a handler produces it. The codec adds the framing headers (Date, Server,
//! Content-Length or chunking, Connection) and pulls the body.

use super::body::StreamBody;
use super::clock;
use super::recycle::{HeaderList, OwnHeaderList};
use bytes::Bytes;
use std::cell::Cell;
use std::fs::File;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::time::SystemTime;

/// One response. Header names are kept in the case they should have on HTTP/1.1
/// (`Content-Type`); HTTP/2 lowercases them.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Headers,
    pub body: Body,
}

impl Response {
    pub fn new(status: u16) -> Response {
        Response {
            status,
            headers: Headers::default(),
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
            )]
            .into(),
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

/// A response's header fields: a list of its own, or one built once and shared by every
/// response that carries it (a cached file's fields), so that an answer clones and drops one
/// `Rc` rather than each field's `Bytes`. It reads as a `Vec`; the first write to a shared
/// list copies it into a list of the response's own.
///
/// Codecs that memo a head by the identity of its fields (the HTTP/2 header block cache) see the same `Bytes` each time a shared list is answered.
#[derive(Debug, Default)]
pub struct Headers(Fields);

#[derive(Debug)]
enum Fields {
    Own(HeaderList),
    Shared(Rc<HeaderList>),
}

impl Default for Fields {
    fn default() -> Self {
        Fields::Own(Vec::new())
    }
}

impl Headers {
    /// Fields shared with other responses (never copied unless written to).
    pub fn shared(list: Rc<HeaderList>) -> Headers {
        Headers(Fields::Shared(list))
    }

    /// The list, copied when it is shared.
    pub fn into_vec(self) -> HeaderList {
        match self.0 {
            Fields::Own(v) => v,
            Fields::Shared(rc) => Rc::try_unwrap(rc).unwrap_or_else(|rc| copy(&rc)),
        }
    }

    /// The shared list, when the fields are one: a memo of what they encode to may know
    /// them by identity, without comparing each field.
    #[inline]
    pub fn shared_list(&self) -> Option<&Rc<HeaderList>> {
        match &self.0 {
            Fields::Own(_) => None,
            Fields::Shared(rc) => Some(rc),
        }
    }
}

impl OwnHeaderList for Headers {
    /// The list when it is the response's own (for recycling), `None` when shared.
    #[inline]
    fn into_own(self) -> Option<HeaderList> {
        match self.0 {
            Fields::Own(v) => Some(v),
            Fields::Shared(_) => None,
        }
    }
}

fn copy(fields: &[(Bytes, Bytes)]) -> HeaderList {
    let mut own = super::recycle::header_list(fields.len() + 1);
    own.extend_from_slice(fields);
    own
}

impl Deref for Headers {
    type Target = HeaderList;

    #[inline]
    fn deref(&self) -> &HeaderList {
        match &self.0 {
            Fields::Own(v) => v,
            Fields::Shared(rc) => rc,
        }
    }
}

impl DerefMut for Headers {
    /// Copy on write: a shared list becomes the response's own first.
    fn deref_mut(&mut self) -> &mut HeaderList {
        if let Fields::Shared(rc) = &self.0 {
            self.0 = Fields::Own(copy(rc));
        }
        match &mut self.0 {
            Fields::Own(v) => v,
            // Not reached: made own above.
            Fields::Shared(rc) => Rc::make_mut(rc),
        }
    }
}

impl From<HeaderList> for Headers {
    fn from(list: HeaderList) -> Headers {
        Headers(Fields::Own(list))
    }
}

impl FromIterator<(Bytes, Bytes)> for Headers {
    fn from_iter<I: IntoIterator<Item = (Bytes, Bytes)>>(iter: I) -> Headers {
        Headers(Fields::Own(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = &'a (Bytes, Bytes);
    type IntoIter = std::slice::Iter<'a, (Bytes, Bytes)>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut Headers {
    type Item = &'a mut (Bytes, Bytes);
    type IntoIter = std::slice::IterMut<'a, (Bytes, Bytes)>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
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

    /// Whether an answer with this body, once made, may still be given again now: bytes
    /// always, a file's while the open-file cache vouches for it
    /// ([`OpenFile::reusable_now`]), anything else never.
    #[inline]
    pub fn reusable_now(&self) -> bool {
        self.reusable_at(clock::coarse_ns())
    }

    /// [`Body::reusable_now`] at `now` on [`clock::coarse_ns`], for a caller that reads no
    /// clock (a sans-IO core, given the time by its driver).
    #[inline]
    pub fn reusable_at(&self, now: u64) -> bool {
        match self {
            Body::Empty | Body::Bytes(_) => true,
            Body::File(f) => f.file.reusable_at(now),
            Body::Parts(_) | Body::Stream(_) => false,
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
    /// Until when (on [`clock::coarse_ns`]) the open-file cache would answer from this file
    /// without checking it on disk: a connection may give an answer made from it again
    /// until then. Set by the cache when its entry is checked, zero once the entry is gone.
    pub reuse_until: Cell<u64>,
}

impl OpenFile {
    /// An open file that no cache vouches for (`reuse_until` zero).
    pub fn new(file: File, size: u64, modified: SystemTime, contents: Option<Bytes>) -> OpenFile {
        OpenFile {
            file,
            size,
            modified,
            contents,
            reuse_until: Cell::new(0),
        }
    }

    /// Whether the open-file cache would still answer from this file without checking it on
    /// disk: the same answer made from it may be given again now.
    #[inline]
    pub fn reusable_now(&self) -> bool {
        self.reusable_at(clock::coarse_ns())
    }

    /// [`OpenFile::reusable_now`] at `now` on [`clock::coarse_ns`].
    #[inline]
    pub fn reusable_at(&self, now: u64) -> bool {
        now < self.reuse_until.get()
    }
}

/// The standard reason phrase for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: &'static str, v: &'static str) -> (Bytes, Bytes) {
        (
            Bytes::from_static(n.as_bytes()),
            Bytes::from_static(v.as_bytes()),
        )
    }

    #[test]
    fn shared_fields_read_as_a_list_and_copy_on_write() {
        let list = Rc::new(vec![field("Content-Type", "text/plain")]);
        let mut a = Headers::shared(list.clone());
        let b = Headers::shared(list.clone());
        assert_eq!(a.len(), 1);
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert_eq!((&a).into_iter().count(), 1);
        a.push(field("Vary", "Accept-Encoding"));
        assert_eq!(a.len(), 2);
        // The shared list is untouched by the write.
        assert_eq!(list.len(), 1);
        assert_eq!(b.len(), 1);
        assert!(a.into_own().is_some());
        assert!(b.into_own().is_none());
    }

    #[test]
    fn headers_take_no_more_room_than_a_list() {
        assert_eq!(
            std::mem::size_of::<Headers>(),
            std::mem::size_of::<HeaderList>()
        );
    }

    #[test]
    fn into_vec_copies_only_a_list_still_shared() {
        let list = Rc::new(vec![field("ETag", "\"1\"")]);
        let v = Headers::shared(list.clone()).into_vec();
        assert_eq!(v, *list);
        let only = Headers::shared(Rc::new(vec![field("A", "b")])).into_vec();
        assert_eq!(only, vec![field("A", "b")]);
    }
}
