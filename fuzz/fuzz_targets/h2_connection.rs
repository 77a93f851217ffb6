//! A whole HTTP/2 server connection fed arbitrary bytes (after a valid preface and SETTINGS),
//! split into reads at arbitrary points, with every request answered. Nothing may panic, and
//! the output must always be a sequence of well-formed frames.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use spate::http::{Body, Response};
use spate::proto::h2::frame::{Head, HEADER_LEN, PREFACE};
use spate::proto::h2::{Connection, Settings};
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let addr = "127.0.0.1:1".parse().unwrap();
    let mut now = Instant::now();
    let mut conn = Connection::new(Settings::default(), addr, addr, now);
    let mut input = BytesMut::from(&PREFACE[..]);
    input.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    conn.recv(&mut input, now);
    for piece in data.chunks(97) {
        input.extend_from_slice(piece);
        conn.recv(&mut input, now);
        while let Some((id, _req)) = conn.next_request() {
            let mut r = Response::new(200);
            r.body = Body::Bytes(Bytes::from_static(&[b'x'; 20_000]));
            conn.respond(id, r);
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
