//! HTTP/2 attacks performed against a running spate over raw sockets. Each asserts that the
//! abusive connection is closed (or its streams refused) with the right code, that a
//! legitimate client is answered meanwhile, and that the server's memory stays bounded.

mod common;

use bytes::BytesMut;
use common::h2raw::{self, Raw};
use common::prometheus::{sample, scrape_until};
use common::*;
use spate::proto::h2::frame::{self, flag, kind, setting};
use spate::proto::h2::hpack::{Decoder, Indexing};
use std::time::{Duration, Instant};

const ENHANCE_YOUR_CALM: u32 = 0xb;
const PROTOCOL_ERROR: u32 = 0x1;

fn start(extra: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "www/6b.txt", b"hello\n");
    write_file(dir.path(), "www/big.bin", &vec![b'z'; 4 * 1024 * 1024]);
    let conf = format!(
        "
listen:
  host: 127.0.0.1
  port: 0
num-threads: 1
{extra}
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
        file.dir: $DIR/www
"
    );
    Spate::start_in(&conf, dir)
}

/// A legitimate HTTP/2 client gets its answer.
fn assert_legit_client_served(spate: &Spate) {
    let out = curl(&["--http2-prior-knowledge", &spate.url("/6b.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
}

/// Runs `attack` on a raw connection, checks the GOAWAY code, the legit client and memory.
fn run_attack(spate: &Spate, settings: &[(u16, u32)], want: u32, attack: impl FnOnce(&mut Raw)) {
    let before = spate.rss_kib();
    let mut raw = Raw::connect(spate, settings);
    attack(&mut raw);
    assert_legit_client_served(spate);
    assert_eq!(raw.goaway(), Some(want), "expected GOAWAY {want:#x}");
    assert_legit_client_served(spate);
    let after = spate.rss_kib();
    assert!(
        after < before + 32 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
}

/// The count of GOAWAYs sent for `cause`, from the metrics endpoint (one worker: exact).
fn goaways_sent(spate: &Spate, cause: &str) -> f64 {
    let key =
        format!("spate_http2_goaways_total{{cause={cause},code=ENHANCE_YOUR_CALM,direction=sent}}");
    sample(&scrape_until(spate, "/metrics", |_| true), &key)
}

#[test]
fn rapid_reset_is_stopped() {
    let s = start("http2-max-resets-per-second: 100");
    run_attack(&s, &[], ENHANCE_YOUR_CALM, h2raw::rapid_reset);
    // The attack shows in the metrics.
    assert_eq!(goaways_sent(&s, "too many stream resets"), 1.0);
    let samples = scrape_until(&s, "/metrics", |_| true);
    let resets = sample(
        &samples,
        "spate_http2_resets_total{code=CANCEL,direction=received}",
    );
    assert!(resets > 100.0, "{resets}");
}

#[test]
fn made_you_reset_is_stopped() {
    // Each stream is made invalid after opening (WINDOW_UPDATE of 0): the server must reset
    // it, and those resets count against the same budget.
    let s = start("http2-max-resets-per-second: 100");
    run_attack(&s, &[], ENHANCE_YOUR_CALM, h2raw::made_you_reset);
}

#[test]
fn continuation_flood_is_stopped_by_size() {
    let s = start("");
    run_attack(&s, &[], ENHANCE_YOUR_CALM, h2raw::continuation_flood);
}

#[test]
fn empty_continuation_flood_is_stopped() {
    let s = start("http2-max-control-frames-per-second: 100");
    run_attack(&s, &[], ENHANCE_YOUR_CALM, h2raw::empty_continuation_flood);
}

#[test]
fn unfinished_header_block_times_out() {
    let s = start("http2-header-timeout: 1");
    let started = Instant::now();
    run_attack(&s, &[], ENHANCE_YOUR_CALM, |raw| {
        let mut out = Vec::new();
        raw.get(1, "/6b.txt", true, &mut out);
        out[4] &= !flag::END_HEADERS;
        raw.send(&out);
    });
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[test]
fn control_frame_floods_are_stopped() {
    let s = start("http2-max-control-frames-per-second: 200");
    type Put = fn(&mut Vec<u8>);
    let floods: [(&str, Put); 4] = [
        ("SETTINGS", |o| {
            frame::put_settings(o, &[(setting::ENABLE_PUSH, 0)])
        }),
        ("PING", |o| frame::put_ping(o, false, b"12345678")),
        ("PRIORITY", |o| {
            frame::put_head(o, 5, kind::PRIORITY, 0, 3);
            o.extend_from_slice(&[0, 0, 0, 0, 16]);
        }),
        ("empty DATA", |o| frame::put_head(o, 0, kind::DATA, 0, 1)),
    ];
    for (name, put) in floods {
        eprintln!("flood: {name}");
        run_attack(&s, &[], ENHANCE_YOUR_CALM, |raw| {
            let mut out = Vec::new();
            // An open stream for the empty DATA frames to land on.
            raw.get(1, "/6b.txt", false, &mut out);
            for _ in 0..5000 {
                put(&mut out);
            }
            raw.send(&out);
        });
    }
    assert_eq!(goaways_sent(&s, "too many control frames"), 4.0);
}

#[test]
fn hpack_bomb_is_refused_per_stream() {
    // One 4000-byte entry in the dynamic table, then requests referring to it 100 times:
    // 400 KB decoded from 100 bytes. The decoder's accounting refuses each with 431 and the
    // connection stays usable.
    let s = start("");
    let before = s.rss_kib();
    let mut raw = Raw::connect(&s, &[]);
    let big = vec![b'b'; 4000];
    let mut out = Vec::new();
    for i in 0..20u32 {
        let id = 1 + 2 * i;
        let mut block = Vec::new();
        {
            let mut b = raw.enc.block(&mut block);
            b.field(b":method", b"GET");
            b.field(b":scheme", b"http");
            b.field(b":path", b"/6b.txt");
            b.field(b":authority", b"localhost");
            if i == 0 {
                b.field_with(b"x-bomb", &big, Indexing::Incremental);
            }
        }
        // Index 62: the newest dynamic entry, our 4000-byte field.
        block.extend(std::iter::repeat_n(0xbe, 100));
        frame::put_head(
            &mut out,
            block.len(),
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            id,
        );
        out.extend_from_slice(&block);
    }
    raw.send(&out);
    let mut dec = Decoder::new(4096, 1 << 20);
    let mut statuses = Vec::new();
    while statuses.len() < 20 {
        let Some((h, p)) = raw.frame() else { break };
        if h.kind == kind::HEADERS {
            let mut buf = BytesMut::new();
            let mut fields = Vec::new();
            dec.decode(&p, &mut buf, |f| fields.push(f)).unwrap();
            statuses.push(buf[fields[0].value.clone()].to_vec());
        }
        assert_ne!(h.kind, kind::GOAWAY, "connection closed");
    }
    assert_eq!(statuses.len(), 20);
    assert!(statuses.iter().all(|s| s == b"431"), "{statuses:?}");
    assert_legit_client_served(&s);
    assert!(s.rss_kib() < before + 32 * 1024);
}

#[test]
fn zero_length_header_names_are_malformed() {
    // CVE-2019-9516: empty header names, each costing the server an allocation. They are
    // malformed: the stream is reset; doing it over and over spends the reset budget.
    let s = start("http2-max-resets-per-second: 50");
    let before = s.rss_kib();
    let mut raw = Raw::connect(&s, &[]);
    let mut first_rst = None;
    let mut out = Vec::new();
    for i in 0..200u32 {
        let mut block = Vec::new();
        raw.enc.encode(
            [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"http"),
                (b":path", b"/6b.txt"),
            ],
            &mut block,
        );
        for _ in 0..50 {
            block.extend_from_slice(&[0x00, 0x00, 0x00]);
        }
        frame::put_head(
            &mut out,
            block.len(),
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            1 + 2 * i,
        );
        out.extend_from_slice(&block);
    }
    raw.send(&out);
    let mut goaway = None;
    while let Some((h, p)) = raw.frame() {
        if h.kind == kind::RST_STREAM && first_rst.is_none() {
            first_rst = Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]]));
        }
        if h.kind == kind::GOAWAY {
            goaway = Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            break;
        }
    }
    assert_eq!(first_rst, Some(PROTOCOL_ERROR));
    assert_eq!(goaway, Some(ENHANCE_YOUR_CALM));
    assert_legit_client_served(&s);
    assert!(s.rss_kib() < before + 32 * 1024);
}

#[test]
fn data_dribble_window_updates_are_stopped() {
    // CVE-2019-9511: a window of 1 byte, then 1-byte WINDOW_UPDATEs, to make the server
    // produce a frame per byte.
    let s = start("http2-max-control-frames-per-second: 200");
    run_attack(
        &s,
        &[(setting::INITIAL_WINDOW_SIZE, 1)],
        ENHANCE_YOUR_CALM,
        |raw| {
            let mut out = Vec::new();
            raw.get(1, "/big.bin", true, &mut out);
            for _ in 0..5000 {
                frame::put_window_update(&mut out, 1, 1);
            }
            raw.send(&out);
        },
    );
}

#[test]
fn a_reader_returning_credit_per_frame_with_a_small_window_is_served() {
    // The pattern of the Rust h2 client (hyper, reqwest) near the end of its window: it
    // returns each DATA frame's bytes as it reads them, so a small window means a small
    // WINDOW_UPDATE (stream and connection) per DATA frame, thousands a second on loopback.
    // Those answer our own frames and are not a dribble (CVE-2019-9511).
    let s = start("http2-max-control-frames-per-second: 200");
    let mut raw = Raw::connect(&s, &[(setting::INITIAL_WINDOW_SIZE, 512)]);
    let mut out = Vec::new();
    raw.get(1, "/big.bin", true, &mut out);
    raw.send(&out);
    let (mut body, mut frames) = (0usize, 0usize);
    let mut ended = false;
    while let Some((h, p)) = raw.frame() {
        assert_ne!(h.kind, kind::GOAWAY, "GOAWAY after {body} bytes");
        if h.kind != kind::DATA {
            continue;
        }
        body += p.len();
        frames += 1;
        if h.flags & flag::END_STREAM != 0 {
            ended = true;
            break;
        }
        if !p.is_empty() {
            let mut out = Vec::new();
            frame::put_window_update(&mut out, 1, p.len() as u32);
            frame::put_window_update(&mut out, 0, p.len() as u32);
            raw.send(&out);
        }
    }
    assert!(ended, "the body ended after {body} bytes");
    assert_eq!(body, 4 * 1024 * 1024);
    assert!(frames > 8000, "{frames} DATA frames");
    assert_legit_client_served(&s);
}

#[test]
fn slow_reader_with_zero_window_times_out() {
    let s = start("send-timeout: 1");
    let started = Instant::now();
    run_attack(
        &s,
        &[(setting::INITIAL_WINDOW_SIZE, 0)],
        ENHANCE_YOUR_CALM,
        |raw| {
            let mut out = Vec::new();
            raw.get(1, "/big.bin", true, &mut out);
            raw.send(&out);
        },
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
}
