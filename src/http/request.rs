//! A request as the codecs hand it to the router: method, target, authority and header fields. Field names and values are slices of one shared buffer, so
//! building a request costs one reference count, not an allocation per header.

use super::body::RequestBody;
use super::recycle::FieldList;
use bytes::Bytes;
use std::cell::Cell;
use std::net::SocketAddr;
use std::ops::{Deref, Range};
use std::rc::Rc;

/// The request method. Methods we do not know are kept verbatim in `Other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Connect,
    Trace,
    Patch,
    Other(Bytes),
}

impl Method {
    pub fn from_bytes(raw: &[u8]) -> Method {
        match raw {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"CONNECT" => Method::Connect,
            b"TRACE" => Method::Trace,
            b"PATCH" => Method::Patch,
            other => Method::Other(Bytes::copy_from_slice(other)),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Method::Get => b"GET",
            Method::Head => b"HEAD",
            Method::Post => b"POST",
            Method::Put => b"PUT",
            Method::Delete => b"DELETE",
            Method::Options => b"OPTIONS",
            Method::Connect => b"CONNECT",
            Method::Trace => b"TRACE",
            Method::Patch => b"PATCH",
            Method::Other(b) => b,
        }
    }

    /// The method as text for logs; an `Other` method is valid token characters, so ASCII.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("?")
    }
}

/// The protocol version a request arrived with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    Http2,
    Http3,
}

impl Version {
    /// As in an access log's `%H`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2",
            Version::Http3 => "HTTP/3",
        }
    }
}

type Span = Range<usize>;

/// Where the query of `target` starts (its `?`). Routing asks this of every request, and most
/// targets are a few dozen bytes: a plain loop is cheaper there than `memchr`'s setup.
fn query_mark(target: &[u8]) -> Option<usize> {
    const SHORT: usize = 64;
    if target.len() <= SHORT {
        target.iter().position(|&b| b == b'?')
    } else {
        memchr::memchr(b'?', target)
    }
}

/// Where a request keeps its body until a handler takes it. A clone of a request has no body.
#[derive(Default)]
struct BodySlot(Cell<Option<RequestBody>>);

impl Clone for BodySlot {
    fn clone(&self) -> BodySlot {
        BodySlot::default()
    }
}

impl std::fmt::Debug for BodySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BodySlot")
    }
}

/// A request's header fields (name and value ranges in its head): a list of its own, or one
/// shared with the request a codec repeats ([`Request::repeat`]), which then costs a count
/// rather than a copy of the list.
#[derive(Debug, Clone)]
enum Fields {
    Own(FieldList),
    Shared(Rc<FieldList>),
}

impl Fields {
    /// Keeps the list for the next request, unless a repeat still shares it.
    fn recycle(self) {
        match self {
            Fields::Own(list) => super::recycle::give_field_list(list),
            Fields::Shared(rc) => {
                if let Ok(list) = Rc::try_unwrap(rc) {
                    super::recycle::give_field_list(list);
                }
            }
        }
    }
}

impl Deref for Fields {
    type Target = FieldList;

    #[inline]
    fn deref(&self) -> &FieldList {
        match self {
            Fields::Own(list) => list,
            Fields::Shared(rc) => rc,
        }
    }
}

/// A parsed request. Built by a codec through [`RequestBuilder`].
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub version: Version,
    /// `https` when the connection is TLS.
    pub secure: bool,
    /// It came in TLS early data (0-RTT), before the handshake completed: a replay of it may
    /// come too (RFC 8470). Set by the protocol driver; the proxy sends `Early-Data: 1`.
    early_data: bool,
    /// The client's address.
    pub peer: SocketAddr,
    /// The local address the connection was accepted on.
    pub local: SocketAddr,
    /// The streamed body, for handlers that read bodies ([`crate::http::Handler::streams_body`]);
    /// taken once with [`Request::take_body`].
    body: BodySlot,
    head: Bytes,
    target: Span,
    authority: Option<Span>,
    fields: Fields,
    /// HTTP/2 `:protocol` of an extended CONNECT (RFC 8441), set by the codec.
    protocol: Option<Span>,
}

impl Request {
    /// The bytes the request was built from (its head, as received, for HTTP/1).
    pub fn raw_head(&self) -> &[u8] {
        &self.head
    }

    /// Whether it came in TLS early data (0-RTT).
    #[inline]
    pub fn is_early_data(&self) -> bool {
        self.early_data
    }

    /// Marks it as received in early data (or not).
    pub fn set_early_data(&mut self, early: bool) {
        self.early_data = early;
    }

    /// Drops the request and keeps its field list for the next one ([`super::recycle`]).
    /// Called where the fast paths are done with a request; not a `Drop` impl, which would
    /// make every move of a request (and of a stream holding one) a copy through memory.
    #[inline]
    pub fn recycle(self) {
        self.fields.recycle();
    }

    /// Makes the field list one that [`Request::repeat`] shares instead of copying, for a
    /// request a codec keeps to repeat: its list goes into `spare`'s allocation when that is
    /// free ([`Request::recycle_shared`]), else into a new one.
    pub fn share_fields(&mut self, spare: &mut Option<Rc<FieldList>>) {
        let Fields::Own(list) = &mut self.fields else {
            return;
        };
        let mut list = std::mem::take(list);
        let mut rc = match spare.take() {
            Some(mut rc) => match Rc::get_mut(&mut rc) {
                Some(kept) => {
                    // The kept allocation's empty list goes back to the pool.
                    std::mem::swap(kept, &mut list);
                    super::recycle::give_field_list(list);
                    rc
                }
                None => Rc::new(list),
            },
            None => Rc::new(list),
        };
        debug_assert!(Rc::get_mut(&mut rc).is_some());
        self.fields = Fields::Shared(rc);
    }

    /// Drops a request made with [`Request::share_fields`]: its shared list's allocation is
    /// kept in `spare` when no repeat of it is alive any more.
    pub fn recycle_shared(self, spare: &mut Option<Rc<FieldList>>) {
        match self.fields {
            Fields::Shared(mut rc) => {
                if let Some(list) = Rc::get_mut(&mut rc) {
                    list.clear();
                    *spare = Some(rc);
                }
            }
            own @ Fields::Own(_) => own.recycle(),
        }
    }

    /// The same request again, for a codec that received the same head again (HTTP/2's
    /// repeated header block): the head is shared, the field list comes from the recycled
    /// ones ([`super::recycle`]). It has no body.
    pub fn repeat(&self) -> Request {
        let fields = match &self.fields {
            Fields::Shared(rc) => Fields::Shared(rc.clone()),
            Fields::Own(list) => {
                let mut fields = super::recycle::field_list(list.len());
                fields.extend_from_slice(list);
                Fields::Own(fields)
            }
        };
        Request {
            method: self.method.clone(),
            version: self.version,
            secure: self.secure,
            early_data: self.early_data,
            peer: self.peer,
            local: self.local,
            body: BodySlot::default(),
            head: self.head.clone(),
            target: self.target.clone(),
            authority: self.authority.clone(),
            fields,
            protocol: self.protocol.clone(),
        }
    }

    /// The request target as sent, in origin form (`/path?query`); an absolute-form target has
    /// been split into authority and this.
    pub fn target(&self) -> &[u8] {
        self.slice(&self.target)
    }

    /// [`Request::target`] as a slice of the request's own buffer.
    pub fn shared_target(&self) -> Bytes {
        self.head.slice(self.target.clone())
    }

    /// The path part of the target (before `?`), still percent-encoded.
    pub fn path(&self) -> &[u8] {
        let t = self.target();
        match query_mark(t) {
            Some(i) => &t[..i],
            None => t,
        }
    }

    /// The query string without the `?`, if any.
    pub fn query(&self) -> Option<&[u8]> {
        let t = self.target();
        query_mark(t).map(|i| &t[i + 1..])
    }

    /// The authority: HTTP/2 `:authority`, an absolute-form target's host, or the Host header.
    pub fn authority(&self) -> Option<&[u8]> {
        match &self.authority {
            Some(s) => Some(self.slice(s)),
            None => self.header(b"host"),
        }
    }

    /// The first header field with this name (compared ignoring ASCII case).
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every header field with this name, in order.
    pub fn header_all<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// All header fields in the order received.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(n, v)| (self.slice(n), self.slice(v)))
    }

    /// Header fields as slices of the request's own buffer: a handler that keeps them past
    /// the request (the proxy) gets them without a copy.
    pub fn shared_headers(&self) -> impl Iterator<Item = (Bytes, Bytes)> + '_ {
        self.fields
            .iter()
            .map(|(n, v)| (self.head.slice(n.clone()), self.head.slice(v.clone())))
    }

    /// The number of header fields.
    pub fn header_count(&self) -> usize {
        self.fields.len()
    }

    /// [`Request::authority`] as a slice of the request's own buffer.
    pub fn shared_authority(&self) -> Option<Bytes> {
        match &self.authority {
            Some(s) => Some(self.head.slice(s.clone())),
            None => self
                .fields
                .iter()
                .find(|(n, _)| self.slice(n).eq_ignore_ascii_case(b"host"))
                .map(|(_, v)| self.head.slice(v.clone())),
        }
    }

    pub fn is_head(&self) -> bool {
        self.method == Method::Head
    }

    /// The request body, when the codec streams one to this handler; `None` for requests
    /// without a body, or once taken.
    pub fn take_body(&self) -> Option<RequestBody> {
        self.body.0.take()
    }

    /// Attaches the streamed body (codecs only).
    pub fn set_body(&mut self, body: RequestBody) {
        self.body = BodySlot(Cell::new(Some(body)));
    }

    /// The `:protocol` of an HTTP/2 extended CONNECT (`websocket`), if this is one.
    pub fn protocol(&self) -> Option<&[u8]> {
        self.protocol.as_ref().map(|s| self.slice(s))
    }

    /// Records the `:protocol` pseudo-header, a range of the head (HTTP/2 codec only).
    pub fn set_protocol(&mut self, span: Range<usize>) {
        self.protocol = Some(span);
    }

    fn slice(&self, span: &Span) -> &[u8] {
        &self.head[span.clone()]
    }
}

/// Builds a [`Request`] whose strings are ranges of one buffer. A codec copies or decodes the
/// head into a `BytesMut`, records the ranges, then freezes it.
#[derive(Debug)]
pub struct RequestBuilder {
    pub method: Method,
    pub version: Version,
    pub secure: bool,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub target: Range<usize>,
    pub authority: Option<Range<usize>>,
    pub fields: Vec<(Range<usize>, Range<usize>)>,
}

impl RequestBuilder {
    /// `head` must contain every range recorded.
    pub fn build(self, head: Bytes) -> Request {
        Request {
            method: self.method,
            version: self.version,
            secure: self.secure,
            early_data: false,
            peer: self.peer,
            local: self.local,
            body: BodySlot::default(),
            target: self.target,
            authority: self.authority,
            fields: Fields::Own(self.fields),
            protocol: None,
            head,
        }
    }
}

#[cfg(test)]
impl Request {
    /// A request as a codec would build it, for unit tests.
    pub fn for_test(method: Method, target: &str, headers: &[(&str, &str)]) -> Request {
        let mut head = target.as_bytes().to_vec();
        let mut fields = Vec::new();
        for (n, v) in headers {
            let ns = head.len();
            head.extend_from_slice(n.as_bytes());
            let vs = head.len();
            head.extend_from_slice(v.as_bytes());
            fields.push((ns..vs, vs..head.len()));
        }
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        RequestBuilder {
            method,
            version: Version::Http11,
            secure: false,
            peer: addr(1),
            local: addr(2),
            target: 0..target.len(),
            authority: None,
            fields,
        }
        .build(Bytes::from(head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_request_shares_its_fields_with_its_repeats_and_keeps_their_allocation() {
        let mut spare = None;
        let mut kept = sample().repeat();
        kept.share_fields(&mut spare);
        let Fields::Shared(list) = &kept.fields else {
            panic!("not shared")
        };
        let at = Rc::as_ptr(list);
        let again = kept.repeat();
        assert!(matches!(&again.fields, Fields::Shared(rc) if Rc::as_ptr(rc) == at));
        assert_eq!(again.header(b"accept"), Some(&b"*/*"[..]));
        // A repeat still alive: the allocation is not the memo's to keep.
        kept.repeat().recycle_shared(&mut spare);
        assert!(spare.is_none());
        again.recycle();
        kept.recycle_shared(&mut spare);
        assert!(spare
            .as_ref()
            .is_some_and(|rc| Rc::as_ptr(rc) == at && rc.is_empty()));
        // The next kept request's list goes into the same allocation.
        let mut next = sample().repeat();
        next.share_fields(&mut spare);
        assert!(
            matches!(&next.fields, Fields::Shared(rc) if Rc::as_ptr(rc) == at && rc.len() == 2)
        );
        assert!(spare.is_none());
        assert_eq!(next.repeat().header(b"host"), Some(&b"example.com"[..]));
    }

    fn sample() -> Request {
        let head = Bytes::from_static(b"/a/b?x=1Hostexample.comAccept*/*");
        RequestBuilder {
            method: Method::Get,
            version: Version::Http11,
            secure: false,
            peer: "127.0.0.1:1".parse().unwrap(),
            local: "127.0.0.1:2".parse().unwrap(),
            target: 0..8,
            authority: None,
            fields: vec![(8..12, 12..23), (23..29, 29..32)],
        }
        .build(head)
    }

    #[test]
    fn splits_target_and_finds_headers() {
        let r = sample();
        assert_eq!(r.path(), b"/a/b");
        assert_eq!(r.query(), Some(&b"x=1"[..]));
        assert_eq!(r.authority(), Some(&b"example.com"[..]));
        assert_eq!(r.header(b"ACCEPT"), Some(&b"*/*"[..]));
        assert_eq!(r.header(b"missing"), None);
    }

    #[test]
    fn query_mark_in_short_and_long_targets() {
        for len in [0, 1, 63, 64, 65, 200] {
            let plain = vec![b'a'; len];
            assert_eq!(query_mark(&plain), None);
            for at in [0, len / 2, len.saturating_sub(1)]
                .into_iter()
                .filter(|&i| i < len)
            {
                let mut t = plain.clone();
                t[at] = b'?';
                t.push(b'?');
                assert_eq!(query_mark(&t), Some(at), "{len} {at}");
            }
        }
    }
}
