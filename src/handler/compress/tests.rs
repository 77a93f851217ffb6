use super::*;
use crate::http::body::Next;
use crate::http::{Frame, Method};
use std::io::Read;
use std::task::{Context, Poll, Waker};

fn conf(br: Option<u32>, zstd: Option<u32>, gzip: Option<u32>) -> Compressor {
    Compressor::new(&CompressConf {
        br,
        zstd,
        gzip,
        minimum_size: 100,
    })
}

fn all() -> Compressor {
    conf(Some(1), Some(3), Some(1))
}

fn negotiate(c: &Compressor, ae: &str) -> Option<Coding> {
    c.negotiate(&Request::for_test(
        Method::Get,
        "/",
        &[("Accept-Encoding", ae)],
    ))
    .coding()
}

#[test]
fn negotiation_follows_weights_then_preference() {
    let c = all();
    assert_eq!(negotiate(&c, "gzip, deflate, br, zstd"), Some(Coding::Br));
    assert_eq!(negotiate(&c, "gzip, zstd"), Some(Coding::Zstd));
    assert_eq!(negotiate(&c, "gzip"), Some(Coding::Gzip));
    assert_eq!(negotiate(&c, "x-gzip"), Some(Coding::Gzip));
    assert_eq!(negotiate(&c, "br;q=0.5, gzip"), Some(Coding::Gzip));
    assert_eq!(negotiate(&c, "br;q=0, gzip;q=0.1"), Some(Coding::Gzip));
    assert_eq!(negotiate(&c, "*"), Some(Coding::Br));
    assert_eq!(negotiate(&c, "*;q=0.5, zstd"), Some(Coding::Zstd));
    assert_eq!(negotiate(&c, "*;q=0"), None);
    assert_eq!(negotiate(&c, "br;q=0, zstd;q=0, gzip;q=0"), None);
    assert_eq!(negotiate(&c, "identity"), None);
    assert_eq!(negotiate(&c, "deflate"), None);
    assert_eq!(negotiate(&c, ""), None);
    // Only what is enabled is offered.
    let gz = conf(None, None, Some(6));
    assert_eq!(negotiate(&gz, "br, zstd, gzip"), Some(Coding::Gzip));
    assert_eq!(negotiate(&gz, "br, zstd"), None);
    // No Accept-Encoding at all, and HEAD: nothing.
    let none = Request::for_test(Method::Get, "/", &[]);
    assert_eq!(c.negotiate(&none).coding(), None);
    let head = Request::for_test(Method::Head, "/", &[("Accept-Encoding", "br")]);
    assert_eq!(c.negotiate(&head).coding(), None);
}

fn page(len: usize) -> Response {
    let body: Vec<u8> = (0..len).map(|i| b"<p>hello world</p>\n"[i % 19]).collect();
    Response {
        status: 200,
        headers: vec![
            (
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(b"text/html; charset=utf-8"),
            ),
            (
                Bytes::from_static(b"ETag"),
                Bytes::from_static(b"\"abc-123\""),
            ),
            (
                Bytes::from_static(b"Accept-Ranges"),
                Bytes::from_static(b"bytes"),
            ),
        ]
        .into(),
        body: Body::Bytes(body.into()),
    }
}

fn with(mut r: Response, name: &'static str, value: &'static str) -> Response {
    r.headers
        .push((Bytes::from_static(name.as_bytes()), Bytes::from(value)));
    r
}

fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.header(name.as_bytes())
        .and_then(|v| std::str::from_utf8(v).ok())
}

fn body_bytes(r: Response) -> Vec<u8> {
    let Body::Stream(mut s) = r.body else {
        panic!("not streamed");
    };
    let mut out = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        let p: Poll<Next> = s.stream.poll_frame(&mut cx);
        match p {
            Poll::Ready(Some(Ok(Frame::Data(d)))) => out.extend_from_slice(&d),
            Poll::Ready(None) => return out,
            other => panic!("{other:?}"),
        }
    }
}

fn filtered(c: &Compressor, coding: Option<Coding>, r: Response) -> Response {
    let mut r = r;
    c.apply(Negotiated(coding), &mut r);
    r
}

#[test]
fn a_compressed_response_changes_its_headers() {
    let original = match page(5000).body {
        Body::Bytes(b) => b.to_vec(),
        _ => Vec::new(),
    };
    let r = filtered(&all(), Some(Coding::Gzip), page(5000));
    assert_eq!(header(&r, "content-encoding"), Some("gzip"));
    assert_eq!(header(&r, "vary"), Some("Accept-Encoding"));
    assert_eq!(header(&r, "etag"), Some("W/\"abc-123\""));
    assert_eq!(header(&r, "accept-ranges"), None);
    assert_eq!(header(&r, "content-type"), Some("text/html; charset=utf-8"));
    assert!(matches!(&r.body, Body::Stream(s) if s.len.is_none()));
    let gz = body_bytes(r);
    let mut plain = Vec::new();
    assert!(flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut plain)
        .is_ok());
    assert_eq!(plain, original);
}

#[test]
fn a_client_that_accepts_nothing_still_gets_vary() {
    let r = filtered(&all(), None, page(5000));
    assert_eq!(header(&r, "content-encoding"), None);
    assert_eq!(header(&r, "vary"), Some("Accept-Encoding"));
    assert_eq!(header(&r, "etag"), Some("\"abc-123\""));
    assert!(matches!(r.body, Body::Bytes(_)));
}

#[test]
fn vary_is_merged_not_repeated() {
    let r = filtered(
        &all(),
        Some(Coding::Br),
        with(page(5000), "Vary", "accept-encoding"),
    );
    let vary: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"vary"))
        .collect();
    assert_eq!(vary.len(), 1);
    let r = filtered(&all(), Some(Coding::Br), with(page(5000), "Vary", "Cookie"));
    let vary: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"vary"))
        .map(|(_, v)| v.clone())
        .collect();
    assert_eq!(vary, vec!["Cookie", "Accept-Encoding"]);
    let r = filtered(&all(), Some(Coding::Br), with(page(5000), "Vary", "*"));
    assert_eq!(header(&r, "vary"), Some("*"));
    // A weak ETag stays as it is.
    let mut p = page(5000);
    p.headers.retain(|(n, _)| n != "ETag");
    let r = filtered(&all(), Some(Coding::Br), with(p, "ETag", "W/\"w\""));
    assert_eq!(header(&r, "etag"), Some("W/\"w\""));
}

#[test]
fn exclusions() {
    let c = all();
    let untouched = |r: Response| {
        let before = header(&r, "content-encoding").map(str::to_owned);
        let r = filtered(&c, Some(Coding::Br), r);
        assert_eq!(header(&r, "content-encoding").map(str::to_owned), before);
        assert!(!matches!(r.body, Body::Stream(_)));
        r
    };
    for status in [101, 204, 206, 304] {
        let mut r = page(5000);
        r.status = status;
        let r = untouched(r);
        assert_eq!(header(&r, "vary"), None, "{status}");
    }
    // Already encoded, no-transform: left alone entirely.
    let r = untouched(with(page(5000), "Content-Encoding", "identity"));
    assert_eq!(header(&r, "vary"), None);
    let r = untouched(with(page(5000), "Cache-Control", "public, No-Transform"));
    assert_eq!(header(&r, "vary"), None);
    // Too small for the minimum: the same for every client, no Vary.
    let r = untouched(page(99));
    assert_eq!(header(&r, "vary"), None);
    // Not a compressible type.
    for ty in [
        "image/png",
        "application/wasm",
        "application/octet-stream",
        "font/woff2",
    ] {
        let mut r = page(5000);
        r.headers[0].1 = Bytes::from(ty);
        untouched(r);
    }
    let mut r = page(5000);
    r.headers.remove(0);
    untouched(r);
    // An empty body.
    let mut r = page(5000);
    r.body = Body::Empty;
    untouched(r);
    // 404 and 500 pages are compressed like any other.
    let mut r = page(5000);
    r.status = 404;
    let r = filtered(&c, Some(Coding::Zstd), r);
    assert_eq!(header(&r, "content-encoding"), Some("zstd"));
}

#[test]
fn the_hint_overrides_the_type_and_is_removed() {
    let c = all();
    let mut r = with(page(5000), "X-Compress-Hint", "on");
    r.headers[0].1 = Bytes::from_static(b"application/octet-stream");
    let r = filtered(&c, Some(Coding::Br), r);
    assert_eq!(header(&r, "content-encoding"), Some("br"));
    assert_eq!(header(&r, "x-compress-hint"), None);
    let r = filtered(
        &c,
        Some(Coding::Br),
        with(page(5000), "x-compress-hint", "OFF"),
    );
    assert_eq!(header(&r, "content-encoding"), None);
    assert_eq!(header(&r, "x-compress-hint"), None);
    let r = filtered(
        &c,
        Some(Coding::Br),
        with(page(5000), "x-compress-hint", "auto"),
    );
    assert_eq!(header(&r, "content-encoding"), Some("br"));
}

#[test]
fn compressible_types() {
    for t in [
        "text/html",
        "text/plain; charset=utf-8",
        "TEXT/CSS",
        "text/event-stream",
        "application/json",
        "application/javascript; charset=utf-8",
        "application/xml",
        "image/svg+xml",
        "application/ld+json",
        "application/atom+xml",
    ] {
        assert!(compressible(t.as_bytes()), "{t}");
    }
    for t in [
        "image/png",
        "application/wasm",
        "application/pdf",
        "video/mp4",
        "text/",
        "",
        "application/jsonx",
    ] {
        assert!(!compressible(t.as_bytes()), "{t}");
    }
}
