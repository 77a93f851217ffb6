//! Request head parsing: request line, header fields, and the framing decisions
//! (Content-Length, Transfer-Encoding, keep-alive, Expect) made once, here.

use super::framing::{self, FramingError, MessageFraming};
use super::Error;
use crate::http::{Method, Version};
use std::mem::MaybeUninit;
use std::ops::Range;

/// The most header fields any configuration may allow (`max-request-headers`).
pub const MAX_FIELDS: usize = 256;

/// Limits on what a peer may send in a request head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Request line plus header fields, in bytes.
    pub head_size: usize,
    /// The request target, in bytes.
    pub target_size: usize,
    /// Number of header fields.
    pub fields: usize,
    /// Largest Content-Length accepted.
    pub body_size: u64,
}

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head. Ranges index the buffer given to [`parse_head`].
#[derive(Debug, Clone)]
pub struct Head {
    pub method: Method,
    pub version: Version,
    /// Origin-form target (`/path?query`); for an absolute-form request, its path part.
    pub target: Range<usize>,
    /// The authority of an absolute-form target, which overrides Host.
    pub authority: Option<Range<usize>>,
    pub fields: Vec<(Range<usize>, Range<usize>)>,
    /// Length of the head including its final empty line.
    pub len: usize,
    pub body: BodyFraming,
    /// Whether the connection may be kept open after the response.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// `Connection: upgrade` on HTTP/1.1 without a body: a tunnelling handler may switch
    /// protocols (the `Upgrade` field says to what).
    pub upgrade: bool,
}

/// Parses a request head from the start of `buf`. `Ok(None)` means more bytes are needed.
/// Leading empty lines (allowed before a request by RFC 9112 2.2) are skipped and counted
/// in `len` and the ranges.
pub fn parse_head(buf: &[u8], limits: &HeadLimits) -> Result<Option<Head>, Error> {
    // Uninitialised stack slots: no allocation or zeroing per request.
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let slots = &mut slots[..limits.fields.min(MAX_FIELDS)];
    let mut req = httparse::Request::new(&mut []);
    let status = match req.parse_with_uninit_headers(buf, slots) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(Error::HeadTooLarge),
        Err(httparse::Error::Version) => {
            return match later_minor_version(buf) {
                Some(at) => parse_as_http11(buf, at, limits),
                None => Err(version_error(buf)),
            }
        }
        Err(httparse::Error::Token) if !request_line_complete(buf) => {
            return Err(Error::BadRequest("invalid request line"))
        }
        Err(e) => return Err(Error::BadRequest(parse_error_reason(e))),
    };
    let len = match status {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => {
            if !request_line_complete(buf) && buf.len() > limits.target_size + 32 {
                return Err(Error::TargetTooLong);
            }
            if buf.len() > limits.head_size {
                return Err(Error::HeadTooLarge);
            }
            return Ok(None);
        }
    };
    if len > limits.head_size {
        return Err(Error::HeadTooLarge);
    }
    // httparse only reports Complete once these are all set.
    let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(Error::BadRequest("incomplete request line"));
    };
    if path.len() > limits.target_size {
        return Err(Error::TargetTooLong);
    }
    let version = framing::version(minor);
    let range_of = |s: &[u8]| framing::span(buf, s);
    let method = Method::from_bytes(method.as_bytes());
    let (target, authority) = split_target(path.as_bytes(), &method)?;
    let target = range_of(target);
    let authority = authority.map(range_of);

    let mut framing = Framing::default();
    let mut fields = crate::http::recycle::field_list(req.headers.len());
    for h in req.headers.iter() {
        framing.observe(h.name, h.value)?;
        fields.push((range_of(h.name.as_bytes()), range_of(h.value)));
    }
    if version == Version::Http11 && framing.hosts == 0 && authority.is_none() {
        return Err(Error::BadRequest("missing Host header"));
    }
    if framing.hosts > 1 {
        return Err(Error::BadRequest("more than one Host header"));
    }
    let body = framing.body(version, limits)?;
    let keep_alive = match version {
        Version::Http11 => !framing.message.close,
        _ => framing.message.keep_alive && !framing.message.close,
    };
    // A CONNECT (authority-form) asks for a tunnel as an upgrade does.
    let upgrade = framing.message.upgrade || authority.is_some() && method == Method::Connect;
    Ok(Some(Head {
        method,
        version,
        target,
        authority,
        fields,
        len,
        body,
        keep_alive,
        expect_continue: framing.expect_continue,
        upgrade: upgrade && version == Version::Http11 && body == BodyFraming::None,
    }))
}

/// Framing-relevant header fields seen while scanning the head.
#[derive(Default)]
struct Framing {
    message: MessageFraming,
    hosts: usize,
    expect_continue: bool,
}

impl Framing {
    fn observe(&mut self, name: &str, value: &[u8]) -> Result<(), Error> {
        let name = name.as_bytes();
        if self.message.observe(name, value).map_err(request_error)? {
            return Ok(());
        }
        if name.eq_ignore_ascii_case(b"host") {
            self.hosts += 1;
        } else if name.eq_ignore_ascii_case(b"expect") {
            if value.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                self.expect_continue = true;
            } else {
                return Err(Error::ExpectationFailed);
            }
        }
        Ok(())
    }

    fn body(&self, version: Version, limits: &HeadLimits) -> Result<BodyFraming, Error> {
        let m = &self.message;
        if m.transfer_encoding {
            if m.content_length.is_some() {
                return Err(Error::BadRequest(
                    "both Content-Length and Transfer-Encoding",
                ));
            }
            if version == Version::Http10 {
                return Err(Error::BadRequest(
                    "Transfer-Encoding in an HTTP/1.0 request",
                ));
            }
            if !m.chunked {
                return Err(Error::BadRequest("empty Transfer-Encoding"));
            }
            return Ok(BodyFraming::Chunked);
        }
        match m.content_length {
            Some(n) if n > limits.body_size => Err(Error::BodyTooLarge),
            Some(0) | None => Ok(BodyFraming::None),
            Some(n) => Ok(BodyFraming::Length(n)),
        }
    }
}

/// What a request with untrustworthy framing gets.
fn request_error(e: FramingError) -> Error {
    match e {
        FramingError::InvalidLength => Error::BadRequest("invalid Content-Length"),
        FramingError::ConflictingLength => Error::BadRequest("conflicting Content-Length"),
        FramingError::ChunkedNotLast => {
            Error::BadRequest("chunked is not the final transfer coding")
        }
        FramingError::UnsupportedCoding => Error::NotImplemented("unsupported transfer coding"),
    }
}

/// Splits an absolute-form target into its path and authority; checks the other forms.
fn split_target<'a>(
    target: &'a [u8],
    method: &Method,
) -> Result<(&'a [u8], Option<&'a [u8]>), Error> {
    match target.first() {
        Some(b'/') => Ok((target, None)),
        Some(b'*') if target.len() == 1 && *method == Method::Options => Ok((target, None)),
        // Authority-form (`CONNECT host:port`): no path; the target is the authority.
        Some(_) if *method == Method::Connect => {
            if target.contains(&b'/') || !target.contains(&b':') {
                return Err(Error::BadRequest("CONNECT target is not host:port"));
            }
            Ok((&target[..0], Some(target)))
        }
        _ => {
            let rest = strip_prefix_ignore_case(target, b"http://")
                .or_else(|| strip_prefix_ignore_case(target, b"https://"))
                .ok_or(Error::BadRequest("invalid request target"))?;
            let end = rest
                .iter()
                .position(|&b| b == b'/' || b == b'?')
                .unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            if authority.is_empty() {
                return Err(Error::BadRequest("absolute-form target without a host"));
            }
            let path = if path.first() == Some(&b'/') {
                path
            } else {
                // `http://host` or `http://host?q` means path `/`. There is no `/` byte of the
                // path to point at, so point at the last one of `://` (the codec shares the
                // head buffer and never copies). A query is then lost; h2o does the same.
                let slash = target.len() - rest.len() - 1;
                &target[slash..slash + 1]
            };
            Ok((path, Some(authority)))
        }
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

fn request_line_complete(buf: &[u8]) -> bool {
    memchr::memchr(b'\n', buf).is_some()
}

/// Where the minor digit of an `HTTP/1.2` ... `HTTP/1.9` request line is: RFC 9110 2.5 has a
/// server answer a later minor version as the highest it speaks, as h2o does.
#[cold]
fn later_minor_version(buf: &[u8]) -> Option<usize> {
    let line_end = memchr::memchr(b'\n', buf)?;
    let line = buf[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&buf[..line_end]);
    let minor = line.len().checked_sub(1)?;
    (line.len() > 9 && line[..minor].ends_with(b" HTTP/1.") && matches!(line[minor], b'2'..=b'9'))
        .then_some(minor)
}

/// The head of an `HTTP/1.x` request (x > 1) read as HTTP/1.1: the same bytes but the minor
/// digit at `at`, so every range holds for `buf`.
#[cold]
fn parse_as_http11(buf: &[u8], at: usize, limits: &HeadLimits) -> Result<Option<Head>, Error> {
    let mut copy = buf.to_vec();
    copy[at] = b'1';
    parse_head(&copy, limits)
}

/// `HTTP/2.0` in the request line is a version we don't speak; anything else is just
/// malformed.
fn version_error(buf: &[u8]) -> Error {
    let line_end = memchr::memchr(b'\n', buf).unwrap_or(buf.len());
    let line = buf[..line_end].trim_ascii_end();
    let three_parts = line.split(|&b| b == b' ').count() == 3;
    let well_formed = three_parts
        && line
            .windows(5)
            .rposition(|w| w == b"HTTP/")
            .is_some_and(|i| {
                let v = line[i + 5..].trim_ascii_end();
                v.len() == 3 && v[0].is_ascii_digit() && v[1] == b'.' && v[2].is_ascii_digit()
            });
    if well_formed {
        Error::VersionNotSupported
    } else {
        Error::BadRequest("invalid HTTP version")
    }
}

fn parse_error_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name (or obsolete line folding)",
        httparse::Error::HeaderValue => "invalid character in a header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token",
        _ => "malformed request",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        head_size: 4096,
        target_size: 256,
        fields: 16,
        body_size: 1 << 20,
    };

    fn parse(s: &str) -> Result<Option<Head>, Error> {
        parse_head(s.as_bytes(), &LIMITS)
    }

    fn ok(s: &str) -> Head {
        parse(s).expect("parses").expect("complete")
    }

    #[test]
    fn parses_a_simple_get() {
        let s = "GET /a?b HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\nNEXT";
        let h = ok(s);
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.version, Version::Http11);
        assert_eq!(&s[h.target.clone()], "/a?b");
        assert_eq!(h.len, s.len() - 4);
        assert_eq!(h.fields.len(), 2);
        assert_eq!(&s[h.fields[1].1.clone()], "*/*");
        assert!(h.keep_alive);
        assert_eq!(h.body, BodyFraming::None);
    }

    #[test]
    fn partial_heads_need_more() {
        assert!(parse("GET / HTTP/1.1\r\nHost: x\r\n").unwrap().is_none());
        assert!(parse("GE").unwrap().is_none());
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!ok("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(ok("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, Close\r\n\r\n").keep_alive);
    }

    #[test]
    fn missing_or_repeated_host_is_400() {
        assert_eq!(parse("GET / HTTP/1.1\r\n\r\n").unwrap_err().status(), 400);
        let two = "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
        assert_eq!(parse(two).unwrap_err().status(), 400);
        // HTTP/1.0 may omit Host.
        assert!(parse("GET / HTTP/1.0\r\n\r\n").unwrap().is_some());
    }

    #[test]
    fn body_framing() {
        let h = ok("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(h.body, BodyFraming::Length(5));
        let h = ok("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n");
        assert_eq!(h.body, BodyFraming::Length(5));
        let h = ok("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.body, BodyFraming::Chunked);
    }

    #[test]
    fn smuggling_shapes_are_rejected() {
        for s in [
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n  folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nBad Name: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",
            "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET x HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            let e = parse(s).expect_err(s);
            assert_eq!(e.status(), 400, "{s:?}: {e:?}");
        }
    }

    #[test]
    fn unsupported_things_get_their_own_status() {
        let gzip = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n";
        assert_eq!(parse(gzip).unwrap_err().status(), 501);
        let expect = "POST / HTTP/1.1\r\nHost: x\r\nExpect: something\r\n\r\n";
        assert_eq!(parse(expect).unwrap_err().status(), 417);
        assert_eq!(parse("GET / HTTP/2.0\r\n\r\n").unwrap_err().status(), 505);
        // A later HTTP/1 minor version is read as HTTP/1.1 (RFC 9110 2.5, as h2o): a broken
        // field after it is a 400, not a 505.
        let h = ok("GET / HTTP/1.2\r\nHost: a\r\n\r\n");
        assert_eq!(h.version, Version::Http11);
        assert_eq!(
            parse("GET / HTTP/1.2\r\na\r\n\r\n").unwrap_err().status(),
            400
        );
        let big = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n";
        assert_eq!(parse(big).unwrap_err().status(), 413);
    }

    #[test]
    fn size_limits() {
        let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(300));
        assert_eq!(parse(&long_target).unwrap_err().status(), 414);
        let partial_long = format!("GET /{}", "a".repeat(400));
        assert_eq!(parse(&partial_long).unwrap_err().status(), 414);
        let big_head = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
            "v".repeat(5000)
        );
        assert_eq!(parse(&big_head).unwrap_err().status(), 431);
        let partial_big = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}", "v".repeat(5000));
        assert_eq!(parse(&partial_big).unwrap_err().status(), 431);
        let many: String = (0..20).map(|i| format!("X{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
        assert_eq!(parse(&many).unwrap_err().status(), 431);
    }

    #[test]
    fn absolute_form_overrides_host() {
        let s = "GET http://example.com:8080/p?q HTTP/1.1\r\nHost: other\r\n\r\n";
        let h = ok(s);
        assert_eq!(&s[h.target.clone()], "/p?q");
        assert_eq!(&s[h.authority.clone().unwrap()], "example.com:8080");
        let s = "GET http://example.com HTTP/1.1\r\n\r\n";
        let h = ok(s);
        assert_eq!(&s[h.target.clone()], "/");
        assert_eq!(&s[h.authority.unwrap()], "example.com");
    }

    #[test]
    fn asterisk_form_only_for_options() {
        assert!(parse("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").is_ok());
        assert_eq!(
            parse("GET * HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap_err()
                .status(),
            400
        );
    }

    #[test]
    fn expect_continue() {
        let h =
            ok("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n");
        assert!(h.expect_continue);
    }
}
