//! The whole request path without sockets: request bytes in, response bytes out, through the
//! sans-IO codecs, the router and the handlers, as the worker drives them per request.
//!
//! Rows: h2c 6 B and 4 KiB files (the HTTP/2 connection core with HPACK both ways, the open-file
//! cache, the file handler), HTTP/1.1 `/answer` (S6: a `respond` path) and a 612 B file (S5),
//! and `/answer` with a different head each time (`h1-varied`: no memo of the head helps).
//! Each row prints time and heap allocations per request, so a change shows what it costs.
//!
//! `cargo bench --bench request_path` (allocation counts are the same in any profile:
//! `cargo bench --bench request_path --profile dev` is a quick check). Instructions per request,
//! noise-free, under callgrind (only the measured loops are counted):
//!
//! ```text
//! cargo bench --bench request_path --no-run
//! valgrind --tool=callgrind --toggle-collect='*measured*' target/release/deps/request_path-* ROW
//! ```
//!
//! where ROW (`h2-6b`, `h2-4k`, `h1-answer`, `h1-612b`, `h1-varied`) runs just that row;
//! divide the total by the request count it prints (the warm-up is not counted).

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use spate::handler::Router;
use spate::http::request::RequestBuilder;
use spate::http::{Answer, Body};
use spate::proto::h1::{write_head, BodyLength, HeadLimits, ParseMemo, ResponseHead};
use spate::proto::h2::{self, hpack, Connection};

#[path = "common/counting.rs"]
mod counting;

/// Requests per row (after a warm-up of the same size).
const REQUESTS: usize = 20_000;
/// Requests per read on HTTP/2 (h2load `-m10`) and pipelined per read on HTTP/1.1 (one: wrk).
const H2_BATCH: usize = 10;

const CONFIG: &str = "
listen: 8080
hosts:
  default:
    paths:
      /answer:
        respond: {body: \"42\", content-type: text/plain}
      /:
        file.dir: SITE
";

fn main() {
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let site = site();
    let text = CONFIG.replace("SITE", site.to_str().unwrap());
    let conf = spate::config::load_str(&text, "bench.yaml").unwrap();
    let router = Router::new(&conf, &[], &Default::default(), &mut Vec::new());
    type RunRow = fn(&Router, &str) -> Row;
    let rows: [(&str, RunRow, &str); 5] = [
        ("h2-6b", h2_row, "/6b.txt"),
        ("h2-4k", h2_row, "/4k.bin"),
        ("h1-answer", h1_row, "/answer"),
        ("h1-612b", h1_row, "/index.html"),
        ("h1-varied", h1_varied_row, "/answer"),
    ];
    for (name, run, path) in rows {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let r = run(&router, path);
        println!(
            "{name:10} {:7.0} ns/request  {:5.2} allocations/request  {} requests, {} bytes out",
            r.nanos as f64 / REQUESTS as f64,
            r.allocations as f64 / REQUESTS as f64,
            REQUESTS,
            r.bytes_out,
        );
    }
    let _ = std::fs::remove_dir_all(&site);
}

struct Row {
    nanos: u128,
    allocations: usize,
    bytes_out: usize,
}

/// A directory with the files the rows ask for.
fn site() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("spate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("6b.txt"), b"hello\n").unwrap();
    std::fs::write(dir.join("4k.bin"), vec![b'x'; 4096]).unwrap();
    std::fs::write(dir.join("index.html"), vec![b'i'; 612]).unwrap();
    dir
}

fn addrs() -> (SocketAddr, SocketAddr) {
    (
        "127.0.0.1:40000".parse().unwrap(),
        "127.0.0.1:8080".parse().unwrap(),
    )
}

/// Counts what `f` allocates and how long it takes.
fn counted(f: impl FnOnce() -> usize) -> Row {
    let before = counting::allocations();
    let start = Instant::now();
    let bytes_out = measured(f);
    let nanos = start.elapsed().as_nanos();
    Row {
        nanos,
        allocations: counting::allocations() - before,
        bytes_out,
    }
}

/// The part callgrind counts (`--toggle-collect='*measured*'`): the requests, not the set-up
/// or the warm-up.
#[inline(never)]
fn measured(f: impl FnOnce() -> usize) -> usize {
    f()
}

// ---- HTTP/2 ----

/// An h2c connection as h2load drives it: preface and SETTINGS, then batches of
/// `H2_BATCH` GET requests (HPACK with a dynamic table, as nghttp2 encodes) each followed by
/// a connection WINDOW_UPDATE for what the previous batch received.
fn h2_row(router: &Router, path: &str) -> Row {
    let (peer, local) = addrs();
    let settings = h2::Settings {
        server_name: Some(Bytes::from_static(b"spate")),
        ..Default::default()
    };
    let mut conn = Connection::new(settings, peer, local, Instant::now());
    let mut client = H2Client::new(path);
    let mut input = BytesMut::new();
    input.extend_from_slice(h2::frame::PREFACE);
    frame(&mut input, h2::frame::kind::SETTINGS, 0, 0, &[]);
    // The worker's run buffer, lent to each `recv`.
    let mut runs = h2::RunBuffer::default();
    conn.recv(&mut input, Instant::now(), &mut runs);
    conn.clear_output();
    // Warm-up: the HPACK tables, the open-file cache, the buffers reach their steady state.
    let batches: Vec<BytesMut> = (0..REQUESTS / H2_BATCH).map(|_| client.batch()).collect();
    h2_requests(router, &mut conn, &mut runs, batches);
    let batches: Vec<BytesMut> = (0..REQUESTS / H2_BATCH).map(|_| client.batch()).collect();
    counted(|| h2_requests(router, &mut conn, &mut runs, batches))
}

/// What the HTTP/2 driver does per read (`server::h2::run` and `answer`): decode, route,
/// answer, frame, take the output. Returns the bytes written.
#[inline(never)]
fn h2_requests(
    router: &Router,
    conn: &mut Connection,
    runs: &mut h2::RunBuffer,
    batches: Vec<BytesMut>,
) -> usize {
    let mut out = 0;
    for mut input in batches {
        let now = Instant::now();
        let coarse_ns = spate::http::clock::coarse_ns();
        spate::http::clock::with_now(|d| conn.set_now(d, coarse_ns));
        loop {
            conn.recv_with(&mut input, now, runs, &|req| router.streams_body(req));
            while let Some((id, req)) = conn.next_request_held() {
                let (answer, route) = router.handle(req);
                conn.release_request(id);
                match answer {
                    Answer::Now(resp) => {
                        let repeats = conn.answer_memo_wanted(id)
                            && route.is_some_and(|r| r.answer_repeats(&resp));
                        let body = if repeats {
                            conn.respond_repeatable(id, resp, None)
                        } else {
                            conn.respond(id, resp)
                        };
                        if body.is_some() {
                            panic!("a streamed body on the fast path");
                        }
                    }
                    Answer::Later(_) => panic!("a pending answer on the fast path"),
                }
            }
            if !conn.recv_paused() {
                break;
            }
            conn.fill(now);
        }
        conn.fill(now);
        for _ in conn.take_done() {}
        out += black_box(conn.output_parts()).len();
        conn.clear_output();
        assert!(conn.closed().is_none(), "connection closed");
    }
    out
}

/// The client side of the h2c rows: request frames, made outside the measured loop.
struct H2Client {
    enc: hpack::Encoder,
    next_id: u32,
    path: Vec<u8>,
}

impl H2Client {
    fn new(path: &str) -> H2Client {
        H2Client {
            enc: hpack::Encoder::new(4096),
            next_id: 1,
            path: path.as_bytes().to_vec(),
        }
    }

    fn batch(&mut self) -> BytesMut {
        let mut buf = BytesMut::new();
        for _ in 0..H2_BATCH {
            let mut block = Vec::new();
            let fields: [(&[u8], &[u8]); 6] = [
                (b":method", b"GET"),
                (b":path", &self.path),
                (b":scheme", b"http"),
                (b":authority", b"127.0.0.1:8080"),
                (b"accept", b"*/*"),
                (b"user-agent", b"h2load nghttp2/1.52.0"),
            ];
            self.enc.encode(fields, &mut block);
            // END_HEADERS | END_STREAM
            frame(
                &mut buf,
                h2::frame::kind::HEADERS,
                0x5,
                self.next_id,
                &block,
            );
            self.next_id += 2;
        }
        // Room for the next batch's responses on the connection (streams start with 64 KiB).
        let inc = (H2_BATCH as u32) * 8192;
        frame(
            &mut buf,
            h2::frame::kind::WINDOW_UPDATE,
            0,
            0,
            &inc.to_be_bytes(),
        );
        buf
    }
}

fn frame(buf: &mut BytesMut, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    buf.extend_from_slice(&len.to_be_bytes()[1..]);
    buf.extend_from_slice(&[kind, flags]);
    buf.extend_from_slice(&stream.to_be_bytes());
    buf.extend_from_slice(payload);
}

// ---- HTTP/1.1 ----

/// A keep-alive connection as wrk drives it: one request per read, the same each time.
fn h1_row(router: &Router, path: &str) -> Row {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n"
    );
    h1_run(router, &[request.into_bytes()])
}

/// As `h1_row`, but no two requests in a row are the same (their User-Agent differs, not
/// their length): the worst case for the worker's parse memo, which keeps each and never hits.
fn h1_varied_row(router: &Router, path: &str) -> Row {
    let requests: Vec<Vec<u8>> = (0..64)
        .map(|i| {
            format!(
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk{i:02}\r\nAccept: */*\r\n\r\n"
            )
            .into_bytes()
        })
        .collect();
    h1_run(router, &requests)
}

fn h1_run(router: &Router, requests: &[Vec<u8>]) -> Row {
    let limits = HeadLimits {
        head_size: 64 * 1024,
        target_size: 8 * 1024,
        fields: 100,
        body_size: 1 << 30,
    };
    let mut rbuf = BytesMut::with_capacity(16 * 1024);
    let mut wbuf = Vec::with_capacity(16 * 1024);
    let mut memo = ParseMemo::new();
    let mut bufs = (&mut rbuf, &mut wbuf, &mut memo);
    h1_requests(router, &limits, requests, &mut bufs);
    counted(|| h1_requests(router, &limits, requests, &mut bufs))
}

/// What the HTTP/1 fast path does per request (`server::h1` `next`, `answer`,
/// `write_copied`, with the worker's parse memo). Returns the bytes written.
#[inline(never)]
fn h1_requests(
    router: &Router,
    limits: &HeadLimits,
    requests: &[Vec<u8>],
    (rbuf, wbuf, parse_memo): &mut (&mut BytesMut, &mut Vec<u8>, &mut ParseMemo),
) -> usize {
    let (peer, local) = addrs();
    let mut out = 0;
    for i in 0..REQUESTS {
        rbuf.extend_from_slice(&requests[i % requests.len()]);
        let head = match parse_memo.parse(rbuf, limits) {
            Ok(Some(head)) => head,
            _ => panic!("bad request"),
        };
        let head_bytes = rbuf.split_to(head.len).freeze();
        let keep_alive = head.keep_alive;
        let mut req = RequestBuilder {
            method: head.method,
            version: head.version,
            secure: false,
            peer,
            local,
            target: head.target,
            authority: head.authority,
            fields: head.fields,
        }
        .build(head_bytes);
        let resp = match router.handle(&mut req).0 {
            Answer::Now(resp) => resp,
            Answer::Later(_) => panic!("a pending answer on the fast path"),
        };
        req.recycle();
        // As the server does: the clock read once per head, its Date passed in.
        spate::http::clock::with_date(|date| {
            write_head(
                wbuf,
                &ResponseHead {
                    status: resp.status,
                    headers: &resp.headers,
                    body: BodyLength::Known(resp.body.len()),
                    keep_alive,
                    server_line: b"Server: spate\r\n",
                    date: Some(date),
                },
            )
        });
        match &resp.body {
            Body::Bytes(b) => wbuf.extend_from_slice(b),
            Body::File(f) => wbuf.extend_from_slice(f.cached_slice().unwrap_or_default()),
            _ => panic!("an unexpected body"),
        }
        spate::http::recycle::give_header_list(resp.headers);
        out += black_box(&wbuf[..]).len();
        wbuf.clear();
        rbuf.clear();
    }
    out
}
