//! The client direction of the codec, for the upstream client: request heads are serialized,
//! response heads parsed, with the framing decision (RFC 9112 6.3) made once, here.

use super::framing::{self, FramingError, MessageFraming};
use super::write::itoa;
use crate::http::{Method, Version};
use std::mem::MaybeUninit;
use std::ops::Range;

/// The most header fields a response head may have (`proxy.max-response-headers` at most).
pub const MAX_RESPONSE_FIELDS: usize = 512;

/// How the body of a request sent upstream is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFraming {
    /// No body: no framing field at all.
    None,
    Length(u64),
    Chunked,
}

/// What [`write_request_head`] writes after the request line.
pub struct RequestHead<'a> {
    pub method: &'a Method,
    /// Origin form: `/path?query`.
    pub target: &'a [u8],
    /// End-to-end fields, Host first; no framing or Connection fields.
    pub headers: &'a [(bytes::Bytes, bytes::Bytes)],
    pub framing: RequestFraming,
    pub keep_alive: bool,
    /// Ask for `100 Continue` before the body is sent.
    pub expect_continue: bool,
}

/// Appends an HTTP/1.1 request head to `out`.
pub fn write_request_head(out: &mut impl bytes::BufMut, head: &RequestHead<'_>) {
    out.put_slice(head.method.as_bytes());
    out.put_u8(b' ');
    out.put_slice(head.target);
    out.put_slice(b" HTTP/1.1\r\n");
    for (name, value) in head.headers {
        out.put_slice(name);
        out.put_slice(b": ");
        out.put_slice(value);
        out.put_slice(b"\r\n");
    }
    match head.framing {
        RequestFraming::None => {}
        RequestFraming::Length(n) => {
            out.put_slice(b"Content-Length: ");
            out.put_slice(itoa(n, &mut [0; 20]));
            out.put_slice(b"\r\n");
        }
        RequestFraming::Chunked => out.put_slice(b"Transfer-Encoding: chunked\r\n"),
    }
    if head.expect_continue {
        out.put_slice(b"Expect: 100-continue\r\n");
    }
    out.put_slice(if head.keep_alive {
        b"Connection: keep-alive\r\n\r\n"
    } else {
        b"Connection: close\r\n\r\n"
    });
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    Length(u64),
    Chunked,
    /// Everything until the backend closes the connection.
    UntilClose,
}

/// A parsed response head. Ranges index the buffer given to [`parse_response_head`].
#[derive(Debug, Clone)]
pub struct ParsedResponseHead {
    pub status: u16,
    pub version: Version,
    pub fields: Vec<(Range<usize>, Range<usize>)>,
    /// Length of the head including its final empty line.
    pub len: usize,
    pub body: ResponseFraming,
    /// The Content-Length field, even when the response has no body (a HEAD response
    /// declares the length of the GET one).
    pub content_length: Option<u64>,
    /// Whether the backend allows another request on this connection.
    pub keep_alive: bool,
}

/// Why a response head was rejected (the proxy answers 502).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedResponse(pub &'static str);

/// Parses a response head from the start of `buf`. `Ok(None)` means more bytes are needed.
/// `head_request`: the request was HEAD, so the response has no body whatever it says.
/// `max_len` bounds the head; it may have `max_fields` fields (at most
/// [`MAX_RESPONSE_FIELDS`]).
pub fn parse_response_head(
    buf: &[u8],
    head_request: bool,
    max_len: usize,
    max_fields: usize,
) -> Result<Option<ParsedResponseHead>, MalformedResponse> {
    // Uninitialised stack slots: no zeroing per response, whatever the limit.
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_FIELDS];
    let slots = &mut slots[..max_fields.min(MAX_RESPONSE_FIELDS)];
    let mut resp = httparse::Response::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, slots);
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > max_len => {
            return Err(MalformedResponse("response head too large"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(MalformedResponse("too many response header fields"))
        }
        Err(_) => return Err(MalformedResponse("malformed response head")),
    };
    if len > max_len {
        return Err(MalformedResponse("response head too large"));
    }
    let (Some(status), Some(minor)) = (resp.code, resp.version) else {
        return Err(MalformedResponse("incomplete status line"));
    };
    let version = framing::version(minor);
    let range_of = |s: &[u8]| framing::span(buf, s);
    let mut framing = MessageFraming::default();
    let mut fields = crate::http::recycle::field_list(resp.headers.len());
    for h in resp.headers.iter() {
        framing
            .observe(h.name.as_bytes(), h.value)
            .map_err(response_error)?;
        fields.push((range_of(h.name.as_bytes()), range_of(h.value)));
    }
    let bodiless = head_request || status < 200 || status == 204 || status == 304;
    let body = if bodiless {
        ResponseFraming::None
    } else {
        response_body(&framing)?
    };
    let keep_alive = !framing.close
        && body != ResponseFraming::UntilClose
        && (version == Version::Http11 || framing.keep_alive);
    Ok(Some(ParsedResponseHead {
        status,
        version,
        fields,
        len,
        body,
        content_length: framing.content_length,
        keep_alive,
    }))
}

/// What the client gets when a backend's framing cannot be trusted (502).
fn response_error(e: FramingError) -> MalformedResponse {
    MalformedResponse(match e {
        FramingError::InvalidLength => "invalid Content-Length",
        FramingError::ConflictingLength => "conflicting Content-Length",
        // Only `chunked` alone: another coding would reach the client undecoded.
        FramingError::ChunkedNotLast | FramingError::UnsupportedCoding => {
            "unsupported transfer coding"
        }
    })
}

/// Where a response body (one the status allows) ends.
fn response_body(m: &MessageFraming) -> Result<ResponseFraming, MalformedResponse> {
    if m.transfer_encoding {
        // RFC 9112 6.3 lets Transfer-Encoding win, but also calls the pair a sign of
        // smuggling; a proxy has no reason to trust it.
        if m.content_length.is_some() {
            return Err(MalformedResponse(
                "both Content-Length and Transfer-Encoding",
            ));
        }
        if !m.chunked {
            return Err(MalformedResponse("empty Transfer-Encoding"));
        }
        return Ok(ResponseFraming::Chunked);
    }
    Ok(match m.content_length {
        Some(n) => ResponseFraming::Length(n),
        None => ResponseFraming::UntilClose,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parse(s: &str) -> Result<Option<ParsedResponseHead>, MalformedResponse> {
        parse_response_head(s.as_bytes(), false, 4096, 128)
    }

    fn ok(s: &str) -> ParsedResponseHead {
        parse(s).expect("parses").expect("complete")
    }

    #[test]
    fn parses_a_response_with_a_length() {
        let s = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello";
        let h = ok(s);
        assert_eq!(h.status, 200);
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.len, s.len() - 5);
        assert_eq!(h.body, ResponseFraming::Length(5));
        assert_eq!(&s[h.fields[1].0.clone()], "X-A");
        assert_eq!(&s[h.fields[1].1.clone()], "b");
        assert!(h.keep_alive);
    }

    #[test]
    fn partial_heads_need_more() {
        assert!(parse("HTTP/1.1 200 OK\r\nX: y\r\n").unwrap().is_none());
        assert!(parse("HTT").unwrap().is_none());
    }

    #[test]
    fn framing_rules() {
        let chunked = ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(chunked.body, ResponseFraming::Chunked);
        let until_close = ok("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(until_close.body, ResponseFraming::UntilClose);
        assert!(!until_close.keep_alive);
        for bodiless in [
            "HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 304 Not Modified\r\n\r\n",
            "HTTP/1.1 100 Continue\r\n\r\n",
        ] {
            assert_eq!(ok(bodiless).body, ResponseFraming::None, "{bodiless}");
        }
        let head = parse_response_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
            true,
            99,
            128,
        );
        assert_eq!(head.unwrap().unwrap().body, ResponseFraming::None);
    }

    #[test]
    fn keep_alive_rules() {
        assert!(
            !ok("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").keep_alive
        );
        assert!(!ok("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keep_alive);
        assert!(
            ok("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n").keep_alive
        );
    }

    #[test]
    fn malformed_responses_are_rejected() {
        for s in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
            "SSH-2.0-OpenSSH_9.2\r\n\r\n",
        ] {
            assert!(parse(s).is_err(), "{s:?}");
        }
        let big = format!("HTTP/1.1 200 OK\r\nX: {}", "v".repeat(5000));
        assert!(parse(&big).is_err());
        let many: String = (0..=MAX_RESPONSE_FIELDS)
            .map(|i| format!("X{i}: v\r\n"))
            .collect();
        assert!(parse(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).is_err());
    }

    #[test]
    fn writes_request_heads() {
        let headers = [(Bytes::from_static(b"Host"), Bytes::from_static(b"b:8080"))];
        let mut head = RequestHead {
            method: &Method::Post,
            target: b"/x?y",
            headers: &headers,
            framing: RequestFraming::Length(12),
            keep_alive: true,
            expect_continue: false,
        };
        let mut out = Vec::new();
        write_request_head(&mut out, &head);
        assert_eq!(
            out,
            b"POST /x?y HTTP/1.1\r\nHost: b:8080\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n"
        );
        head.framing = RequestFraming::Chunked;
        head.keep_alive = false;
        head.expect_continue = true;
        out.clear();
        write_request_head(&mut out, &head);
        assert_eq!(
            out,
            &b"POST /x?y HTTP/1.1\r\nHost: b:8080\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"[..]
        );
    }
}
