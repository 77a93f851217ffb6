//! On-the-fly compression (`compress`) with real clients: curl, Python's `brotli`,
//! `zstandard` and `gzip` modules decoding every variant byte for byte, raw sockets for the
//! negotiation rules and for timing a streamed proxied response, and headless Chromium.
//!
//! scripts/test installs python3-brotli and python3-zstandard.

mod common;
mod tls_support;

use common::backend::Backend;
use common::clients::{fetch, h1, Proto};
use common::h1read::{self, Input, Reply};
use common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};
use tls_support::*;

/// A page of about 100 KB: headings, paragraphs, lists and a table of varied words, as a
/// real site's HTML (deterministic).
fn page() -> Vec<u8> {
    const WORDS: &[&str] = &[
        "server",
        "request",
        "stream",
        "header",
        "brotli",
        "window",
        "proxy",
        "latency",
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
        "is",
        "for",
        "on",
        "with",
        "connection",
        "cache",
        "frame",
        "priority",
        "encoder",
        "client",
        "response",
        "body",
        "chunk",
        "table",
    ];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut word = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        WORDS[(x % WORDS.len() as u64) as usize]
    };
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>A page</title>\n<link rel=\"stylesheet\" href=\"/style.css\">\n</head>\n<body>\n",
    );
    let mut section = 0;
    while out.len() < 100_000 {
        section += 1;
        out.push_str(&format!(
            "<h2 id=\"s{section}\">Section {section}: {}</h2>\n<p>",
            word()
        ));
        for _ in 0..60 {
            out.push_str(word());
            out.push(' ');
        }
        out.push_str("</p>\n<ul>\n");
        for i in 0..5 {
            out.push_str(&format!(
                "  <li><a href=\"/docs/{}-{i}.html\">{} {}</a></li>\n",
                word(),
                word(),
                word()
            ));
        }
        out.push_str("</ul>\n<table>\n");
        for r in 0..4 {
            out.push_str(&format!(
                "  <tr><td>{r}</td><td>{}</td><td>{}</td></tr>\n",
                word(),
                section * 31 + r
            ));
        }
        out.push_str("</table>\n");
    }
    out.push_str("</body>\n</html>\n");
    out.into_bytes()
}

/// The files of the test site: (name, contents, compressed on the fly).
fn site_files() -> Vec<(&'static str, Vec<u8>, bool)> {
    let css = "body { margin: 0 auto; max-width: 60em; font-family: sans-serif }\n".repeat(40);
    let js = "function hello(name) { return 'hello, ' + name; }\n".repeat(40);
    let json = format!(
        "[{}{{\"id\":0}}]\n",
        "{\"id\":1,\"name\":\"entry\"},".repeat(100)
    );
    let svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\">{}</svg>\n",
        "<circle cx=\"5\" cy=\"5\" r=\"4\"/>".repeat(30)
    );
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend((0..4000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    vec![
        ("page.html", page(), true),
        ("style.css", css.into_bytes(), true),
        ("app.js", js.into_bytes(), true),
        ("data.json", json.into_bytes(), true),
        ("logo.svg", svg.into_bytes(), true),
        ("image.png", png, false),
        (
            "tiny.txt",
            b"smaller than the minimum size\n".to_vec(),
            false,
        ),
    ]
}

fn write_site(root: &Path) {
    for (name, data, _) in site_files() {
        write_file(root, &format!("site/{name}"), &data);
    }
}

/// A spate serving the test site under `/` with `compress` set to `compress`.
fn file_front(compress: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    write_site(dir.path());
    Spate::start_in(
        &format!(
            "
listen: 127.0.0.1:0
compress: {compress}
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/site
      /nope:
        compress: OFF
        file.dir: $DIR/site
"
        ),
        dir,
    )
}

/// Decodes `data` with Python's own decoder for `coding`.
fn python_decode(coding: &str, data: &[u8]) -> Vec<u8> {
    let script = match coding {
        "br" => "import sys, brotli; sys.stdout.buffer.write(brotli.decompress(sys.stdin.buffer.read()))",
        "zstd" => "import sys, zstandard; d = zstandard.ZstdDecompressor().decompressobj(); sys.stdout.buffer.write(d.decompress(sys.stdin.buffer.read()))",
        "gzip" => "import sys, gzip; sys.stdout.buffer.write(gzip.decompress(sys.stdin.buffer.read()))",
        other => panic!("no decoder for {other}"),
    };
    let out = system_python(script, data);
    assert!(
        out.status.success(),
        "python3 could not decode {coding} (scripts/test installs python3-brotli and \
         python3-zstandard): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Every compressible file in every coding, as curl receives it without decoding, decodes
/// with Python's decoders to exactly the file; the response says how it was made.
#[test]
fn every_coding_decodes_byte_exact_with_python() {
    let s = file_front("{br: 6, zstd: 3, gzip: 6}");
    for (name, data, compressible) in site_files() {
        for coding in ["br", "zstd", "gzip"] {
            let ae = format!("Accept-Encoding: {coding}");
            let r = fetch(&s, Proto::H1, &format!("/{name}"), &["-H", &ae]);
            assert_eq!(r.status, 200, "{name} {coding}: {r:?}");
            if !compressible {
                assert_eq!(r.header("content-encoding"), None, "{name}");
                same(&r.body, &data, name);
                continue;
            }
            assert_eq!(r.header("content-encoding"), Some(coding), "{name}");
            assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{name}");
            assert_eq!(r.header("content-length"), None, "{name}");
            assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{name}");
            assert_eq!(r.header("accept-ranges"), None, "{name}");
            let etag = r.header("etag").unwrap_or_default();
            assert!(etag.starts_with("W/\""), "{name}: etag {etag}");
            assert!(
                r.body.len() < data.len() / 2,
                "{name} {coding}: {}",
                r.body.len()
            );
            same(
                &python_decode(coding, &r.body),
                &data,
                &format!("{name} {coding}"),
            );
        }
    }
    // The 100 KB page at brotli 6: what the benchmark row is about.
    let r = fetch(&s, Proto::H1, "/page.html", &["-H", "Accept-Encoding: br"]);
    eprintln!(
        "page.html: {} bytes, br 6: {} bytes",
        page().len(),
        r.body.len()
    );
}

#[test]
fn curl_compressed_over_http1() {
    let s = file_front("ON");
    let page = page();
    // curl's --compressed asks for every coding it can decode and decodes the answer.
    let r = fetch(&s, Proto::H1, "/page.html", &["--compressed"]);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.version, "HTTP/1.1");
    assert_eq!(r.header("content-encoding"), Some("br"));
    same(&r.body, &page, "page");
    let r = fetch(
        &s,
        Proto::H1,
        "/page.html",
        &["--compressed", "-H", "Accept-Encoding: gzip"],
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    same(&r.body, &page, "page");
    // Compression off for the path: the page as it is, no Vary.
    let r = fetch(&s, Proto::H1, "/nope/page.html", &["--compressed"]);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), None);
    assert_eq!(
        r.header("content-length"),
        Some(page.len().to_string().as_str())
    );
    same(&r.body, &page, "page");
}

/// HTTP/2 carries the compressed body in DATA frames. Needs the h2 branch's streamed response
/// bodies (main's HTTP/2 codec sends a streamed body as an empty one).
#[test]
fn curl_compressed_over_http2() {
    let s = file_front("ON");
    let page = page();
    for coding in ["br", "zstd", "gzip"] {
        let ae = format!("Accept-Encoding: {coding}");
        let r = fetch(&s, Proto::H2c, "/page.html", &["-H", &ae]);
        assert_eq!(r.version, "HTTP/2", "{r:?}");
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(r.header("content-length"), None);
        same(&python_decode(coding, &r.body), &page, coding);
    }
    let r = fetch(&s, Proto::H2c, "/page.html", &["--compressed"]);
    assert_eq!(r.header("content-encoding"), Some("br"));
    same(&r.body, &page, "page");
}

/// One request on its own connection, its response read with its framing (chunked too).
fn raw(s: &Spate, method: &str, path: &str, headers: &str) -> Reply {
    h1(
        s,
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n").as_bytes(),
    )
}

/// Equal bodies, without printing 100 KB when they are not.
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    assert!(
        got == want,
        "{what}: {} bytes, expected {} bytes, first difference at {:?}",
        got.len(),
        want.len(),
        got.iter().zip(want).position(|(a, b)| a != b)
    );
}

#[test]
fn negotiation_and_exclusions() {
    let s = file_front("ON");
    let enc = |r: &Reply| r.header("content-encoding").map(str::to_owned);
    let ae = |v: &str| format!("Accept-Encoding: {v}\r\n");

    // Weights: the client's first, then br > zstd > gzip.
    for (accept, want) in [
        ("gzip, deflate, br, zstd", Some("br")),
        ("gzip, zstd", Some("zstd")),
        ("br;q=0.5, gzip", Some("gzip")),
        ("br;q=0, *", Some("zstd")),
        ("*;q=0", None),
        ("identity", None),
        ("deflate", None),
    ] {
        let r = raw(&s, "GET", "/page.html", &ae(accept));
        assert_eq!(r.status, 200);
        assert_eq!(enc(&r).as_deref(), want, "{accept}");
        // Compressible: Vary whatever the client asked for.
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{accept}");
        if want.is_none() {
            same(&r.body, &page(), accept);
            assert!(!r.header("etag").unwrap_or("W/").starts_with("W/"));
        }
    }
    let r = raw(&s, "GET", "/page.html", "");
    assert_eq!(enc(&r), None);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));

    // HEAD: never compressed, but the answer varies all the same.
    let r = raw(&s, "HEAD", "/page.html", &ae("br"));
    assert_eq!(r.status, 200);
    assert_eq!(enc(&r), None);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));

    // A range: 206 of the identity bytes.
    let r = raw(
        &s,
        "GET",
        "/page.html",
        &format!("{}Range: bytes=0-99\r\n", ae("br")),
    );
    assert_eq!(r.status, 206);
    assert_eq!(enc(&r), None);
    same(&r.body, &page()[..100], "range");

    // Not compressible, or smaller than the minimum: as they are, no Vary.
    for path in ["/image.png", "/tiny.txt"] {
        let r = raw(&s, "GET", path, &ae("br, gzip"));
        assert_eq!(r.status, 200);
        assert_eq!(enc(&r), None, "{path}");
        assert_eq!(r.header("vary"), None, "{path}");
        assert!(r.header("content-length").is_some(), "{path}");
    }

    // The weak ETag of the compressed variant revalidates it.
    let r = raw(&s, "GET", "/style.css", &ae("br"));
    let etag = r.header("etag").expect("etag").to_owned();
    assert!(etag.starts_with("W/\""), "{etag}");
    let r = raw(
        &s,
        "GET",
        "/style.css",
        &format!("{}If-None-Match: {etag}\r\n", ae("br")),
    );
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
}

/// `file.send-compressed` serves a precompressed sibling as it is; compression on the fly
/// covers what has no sibling.
#[test]
fn precompressed_files_keep_priority() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_site(dir.path());
    // Not real brotli: proves that the file, not an encoder, produced the body.
    write_file(dir.path(), "site/page.html.br", b"precompressed marker");
    let s = Spate::start_in(
        "
listen: 127.0.0.1:0
compress: ON
file.send-compressed: ON
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/site
",
        dir,
    );
    let r = raw(&s, "GET", "/page.html", "Accept-Encoding: br, gzip\r\n");
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(r.body, b"precompressed marker");
    let r = raw(&s, "GET", "/page.html", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    same(&python_decode("gzip", &r.body), &page(), "gzip");
    let vary: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("vary"))
        .collect();
    assert_eq!(vary.len(), 1, "{:?}", r.headers);
}

/// A proxied answer comes later (`request_start::LaterAnswer`): on HTTP/1.1 and HTTP/2 alike
/// it is finished by its route when it comes, as an answer ready now is: compressed in the
/// coding the request allows, with the path's header commands applied.
#[test]
fn a_later_answer_is_finished_by_its_route_on_http1_and_http2() {
    let b = Backend::start();
    let s = Spate::start(&format!(
        "
listen: 127.0.0.1:0
compress: ON
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: {}
        header.set: \"X-Finished: by-route\"
",
        b.url("/")
    ));
    let path = "/chunked?pieces=3&trailers=0";
    let want = b"piece 0\npiece 1\npiece 2\n";
    for proto in [Proto::H1, Proto::H2c] {
        let r = fetch(&s, proto, path, &["-H", "Accept-Encoding: gzip"]);
        assert_eq!(r.status, 200, "{proto:?}: {r:?}");
        assert_eq!(
            r.header("content-encoding"),
            Some("gzip"),
            "{proto:?}: {r:?}"
        );
        assert_eq!(r.header("x-finished"), Some("by-route"), "{proto:?}: {r:?}");
        assert_eq!(python_decode("gzip", &r.body), want, "{proto:?}");
        // Not accepted: the same answer as it came, still with the header commands.
        let r = fetch(&s, proto, path, &[]);
        assert_eq!(r.header("content-encoding"), None, "{proto:?}: {r:?}");
        assert_eq!(r.header("x-finished"), Some("by-route"), "{proto:?}: {r:?}");
        assert_eq!(r.body, want, "{proto:?}");
    }
}

/// A slowly streamed proxied response: its first compressed bytes reach the client and decode
/// while the backend is still sending, and the backend's trailers come through.
#[test]
fn a_streamed_proxied_response_is_compressed_as_it_arrives() {
    let b = Backend::start();
    let s = Spate::start(&format!(
        "
listen: 127.0.0.1:0
compress: ON
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: {}
",
        b.url("/")
    ));
    for (coding, first_piece_decoder) in [
        ("gzip", decode_prefix_gzip as fn(&[u8]) -> Vec<u8>),
        ("br", decode_prefix_br),
        ("zstd", decode_prefix_zstd),
    ] {
        let mut c = s.connect();
        c.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let started = Instant::now();
        c.write_all(
            format!(
                "GET /chunked?pieces=2&delay=2000 HTTP/1.1\r\nHost: localhost\r\n\
                 Accept-Encoding: {coding}\r\nTE: trailers\r\n\r\n"
            )
            .as_bytes(),
        )
        .expect("write");
        let mut input = Input::new(c.try_clone().expect("clone"));
        let head = input.read_head().expect("head").expect("a response");
        let (status, headers) = h1read::parse_head(&head);
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(h1read::header(&headers, "content-encoding"), Some(coding));
        assert_eq!(h1read::header(&headers, "vary"), Some("Accept-Encoding"));
        // The first chunk: the backend's first piece, flushed while it waits 2 s.
        let line = input.read_line().expect("chunk size");
        let size = u64::from_str_radix(&String::from_utf8_lossy(&line), 16).expect("hex");
        let mut first = Vec::new();
        input
            .read_exact_to(size, &mut |d| first.extend_from_slice(d))
            .expect("chunk");
        let at = started.elapsed();
        assert_eq!(first_piece_decoder(&first), b"piece 0\n", "{coding}");
        assert!(input.read_line().expect("crlf").is_empty());
        let mut rest = first;
        let trailers = input
            .read_chunked(&mut |d| rest.extend_from_slice(d))
            .expect("rest");
        // Measured between the first bytes and the end, so that a slow machine's delays
        // before the first bytes do not count: a compressor that held them back until the
        // backend finished would pass them on at the end.
        let end = started.elapsed();
        assert!(end >= Duration::from_millis(1900), "{coding}: {end:?}");
        assert!(
            at + Duration::from_millis(1000) < end,
            "{coding}: the first bytes came after {at:?}, the end after {end:?}; \
             the backend waits 2 s before its last piece"
        );
        assert_eq!(
            python_decode(coding, &rest),
            b"piece 0\npiece 1\n",
            "{coding}"
        );
        assert_eq!(h1read::header(&trailers, "x-pieces"), Some("2"), "{coding}");
    }
}

/// What a client can decode of a stream's first bytes (flushed, not finished).
fn decode_prefix_gzip(data: &[u8]) -> Vec<u8> {
    read_some(flate2::read::GzDecoder::new(data))
}

fn decode_prefix_br(data: &[u8]) -> Vec<u8> {
    read_some(brotlic::DecompressorReader::new(data))
}

fn decode_prefix_zstd(data: &[u8]) -> Vec<u8> {
    read_some(zstd::stream::read::Decoder::new(data).expect("zstd decoder"))
}

fn read_some(mut r: impl Read) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    // The stream is not finished: read what decodes, stop at the end of the input.
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Seed 004's shape: TLS front, `compress: {br: 6}` and `file.send-compressed` at the host
/// level, proxying to a backend (here a spate serving the site, compression off).
#[test]
fn seed_004_brotli_6_in_front_of_a_backend() {
    let origin = file_front("OFF");
    let dir = tempfile::tempdir().expect("tempdir");
    cert(dir.path(), "localhost", "localhost", false);
    let s = Spate::start_in(
        &format!(
            "
hosts:
  \"localhost\":
    listen:
      host: 127.0.0.1
      port: 0
      ssl:
        certificate-file: localhost.crt
        key-file: localhost.key
        min-version: TLSv1.2
    compress:
      br: 6
    file.send-compressed: ON
    paths:
      \"/\":
        proxy.reverse.url: \"http://127.0.0.1:{}/\"
        proxy.timeout.first_byte: 600000
",
            origin.addr.port()
        ),
        dir,
    );
    for (name, data, compressible) in site_files() {
        let r = fetch(
            &s,
            Proto::TlsH1,
            &format!("/{name}"),
            &["-H", "Accept-Encoding: gzip, deflate, br, zstd"],
        );
        assert_eq!(r.status, 200, "{name}: {r:?}");
        if compressible {
            assert_eq!(r.header("content-encoding"), Some("br"), "{name}");
            assert_eq!(r.header("content-length"), None, "{name}");
            same(&python_decode("br", &r.body), &data, name);
        } else {
            assert_eq!(r.header("content-encoding"), None, "{name}");
            same(&r.body, &data, name);
        }
    }
}

/// Headless Chromium loads the example site over TLS and takes it compressed: the access log
/// shows `br` for the page and its assets above the minimum size.
#[test]
fn chromium_takes_the_example_site_in_brotli() {
    chromium_run(false);
}

#[test]
fn chromium_takes_the_example_site_in_brotli_over_http2() {
    chromium_run(true);
}

fn chromium_run(http2: bool) {
    let Some(browser) = chromium() else {
        eprintln!("SKIP: chromium is not installed (scripts/test installs it)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    cert(dir.path(), "site", "localhost", false);
    let site = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/site");
    let s = Spate::start_in(
        &format!(
            "
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: site.crt
    key-file: site.key
compress: ON
hosts:
  default:
    access-log:
      path: access.log
      format: \"%H %s %U %{{content-encoding}}o\"
    paths:
      /:
        file.dir: {site}
"
        ),
        dir,
    );
    let url = format!("https://127.0.0.1:{}/", s.addr.port());
    let extra: &[&str] = if http2 { &[] } else { &["--disable-http2"] };
    chromium_screenshot(browser, s.path(), &url, extra);

    // The page, its style sheet and logo are compressed; app.js (97 bytes) is below the
    // minimum size of 100.
    let version = if http2 { "HTTP/2" } else { "HTTP/1.1" };
    let expected = [
        format!("{version} 200 / br"),
        format!("{version} 200 /style.css br"),
        format!("{version} 200 /logo.svg br"),
        format!("{version} 200 /app.js -"),
    ];
    let log_path = s.path().join("access.log");
    let deadline = Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if expected.iter().all(|e| log.lines().any(|l| l == e)) || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for e in &expected {
        assert!(
            log.lines().any(|l| l == e),
            "no line {e:?}; access log:\n{log}"
        );
    }
}
