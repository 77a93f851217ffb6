//! A whole HTTP/2 server connection fed arbitrary bytes (after a valid preface and SETTINGS),
//! split into reads at arbitrary points, with every request answered, the memoised request's
//! answer as repeatable (so that repeats of it are answered from the memo, in runs). Nothing
//! may panic, and the output must always be a sequence of well-formed frames.
//!
//! The first byte picks the answer's body length (bit 1-2: kept with its frames, spliced,
//! one frame long, longer than a frame) and, with bit 0, a small `max_write`, so that runs of
//! repeats fill the output and `recv` pauses.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use spate::http::{Body, Response};
use spate::proto::h2::frame::{Head, HEADER_LEN, PREFACE};
use spate::proto::h2::{Connection, RunBuffer, Settings};
use std::time::{Duration, Instant};

static BODY: [u8; 20_000] = [b'x'; 20_000];
const BODY_LENS: [usize; 4] = [5, 1025, 4096, 20_000];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let mut cfg = Settings::default();
    if mode & 1 == 1 {
        cfg.max_write = 8 * 1024;
    }
    let body = &BODY[..BODY_LENS[usize::from(mode >> 1) % BODY_LENS.len()]];
    let addr = "127.0.0.1:1".parse().unwrap();
    let mut now = Instant::now();
    let mut conn = Connection::new(cfg, addr, addr, now);
    let mut runs = RunBuffer::default();
    let mut input = BytesMut::from(&PREFACE[..]);
    input.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    conn.recv(&mut input, now, &mut runs);
    for piece in data.chunks(97) {
        input.extend_from_slice(piece);
        conn.recv(&mut input, now, &mut runs);
        while let Some((id, _req)) = conn.next_request() {
            let mut r = Response::new(200);
            r.body = Body::Bytes(Bytes::from_static(body));
            if conn.answer_memo_wanted(id) {
                conn.respond_repeatable(id, r, None);
            } else {
                conn.respond(id, r);
            }
        }
        conn.fill(now);
        // Spliced DATA payloads follow their frame headers: check the bytes as written.
        let written = conn.output_parts().to_vec();
        let mut out = &written[..];
        while !out.is_empty() {
            assert!(out.len() >= HEADER_LEN);
            let h = Head::parse(out[..HEADER_LEN].try_into().unwrap());
            out = &out[HEADER_LEN + h.len as usize..];
        }
        conn.clear_output();
        now += Duration::from_millis(10);
        conn.handle_timeout(now);
        if conn.closed().is_some() {
            break;
        }
    }
});
