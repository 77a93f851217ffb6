//! Request head decoding, HTTP/3 against HTTP/2: allocations and time per request.
//! `cargo bench --bench h3_request` (allocation counts are the same in any profile:
//! `cargo bench --bench h3_request --profile dev` is a quick check).
//!
//! HTTP/2: HPACK-decode a block into a reused buffer and field list, validate and build the
//! `Request` (what `h2::conn` does per HEADERS). HTTP/3: the whole `Session::on_request_stream`
//! for a stream holding one HEADERS frame and FIN, then `Head::into_request`.

use std::hint::black_box;
use std::time::Instant;

use bytes::BytesMut;
use spate::http::request::RequestBuilder;
use spate::http::Version;
use spate::proto::h2::hpack;
use spate::proto::h3::{qpack, RequestEvent, Session, Settings};
use spate::proto::request_head;

#[path = "common/counting.rs"]
mod counting;

mod common;
use common::REQUEST;

const ROUNDS: usize = 20_000;

fn main() {
    let peer = "127.0.0.1:40000".parse().unwrap();
    let local = "127.0.0.1:443".parse().unwrap();

    // HTTP/2: literals only (no dynamic table), like QPACK below.
    let mut block = Vec::new();
    let mut enc = hpack::Encoder::new(0);
    enc.encode(REQUEST.iter().copied(), &mut block);
    let mut dec = hpack::Decoder::new(0, 64 * 1024);
    let mut hbuf = BytesMut::new();
    let mut fields = Vec::new();
    let h2 = measure(|| {
        fields.clear();
        hbuf.clear();
        if hbuf.capacity() < 4096 {
            hbuf.reserve(4096);
        }
        dec.decode(&block, &mut hbuf, |f| fields.push(f)).unwrap();
        let head = request_head::parse(&hbuf, &fields).unwrap();
        let req = RequestBuilder {
            method: head.method,
            version: Version::Http2,
            secure: true,
            peer,
            local,
            target: head.target,
            authority: head.authority,
            fields: head.fields,
        }
        .build(hbuf.split().freeze());
        black_box(req);
    });

    // HTTP/3: one HEADERS frame and FIN per stream.
    let mut section = Vec::new();
    qpack::Encoder::default().encode_section(REQUEST.iter().copied(), &mut section);
    let mut wire = Vec::new();
    spate::proto::h3::frame::put_header(1, section.len() as u64, &mut wire);
    wire.extend_from_slice(&section);
    let mut session = Session::new(Settings::default());
    let mut events = Vec::with_capacity(4);
    let mut id = 0u64;
    // The stream's receive buffer is the glue's, filled from QUIC: made outside the count
    // (for the warm-up round and the measured one).
    let mut bufs: Vec<BytesMut> = (0..2 * ROUNDS).map(|_| BytesMut::from(&wire[..])).collect();
    let mut next = bufs.iter_mut();
    let h3 = measure(|| {
        let buf = next.next().unwrap();
        events.clear();
        session
            .on_request_stream(id, buf, true, &mut events)
            .unwrap();
        id += 4;
        for e in events.drain(..) {
            if let RequestEvent::Head(h) = e {
                black_box(h.into_request(peer, local));
            }
        }
    });
    // HTTP/3 again, every field a reference to the dynamic table (a browser's later
    // requests): the inserts go on the encoder stream once.
    let mut encoder_stream = vec![0x02, 0x3f, 0xe1, 0x1f]; // type, capacity 4096
    for (name, value) in REQUEST {
        assert!(name.len() < 31 && value.len() < 127);
        encoder_stream.push(0x40 | name.len() as u8);
        encoder_stream.extend_from_slice(name);
        encoder_stream.push(value.len() as u8);
        encoder_stream.extend_from_slice(value);
    }
    session.on_uni_stream(2, &encoder_stream, false).unwrap();
    let n = REQUEST.len() as u8;
    // Required Insert Count n (encoded n + 1), Base n, then relative indexes n-1 .. 0.
    let mut indexed = vec![0x01, 2 + n, n + 1, 0x00];
    indexed.extend((0..n).rev().map(|i| 0x80 | i));
    let mut bufs: Vec<BytesMut> = (0..2 * ROUNDS)
        .map(|_| BytesMut::from(&indexed[..]))
        .collect();
    let mut next = bufs.iter_mut();
    let h3_indexed = measure(|| {
        let buf = next.next().unwrap();
        events.clear();
        session
            .on_request_stream(id, buf, true, &mut events)
            .unwrap();
        id += 4;
        for e in events.drain(..) {
            if let RequestEvent::Head(h) = e {
                black_box(h.into_request(peer, local));
            }
        }
        let _ = session.take_decoder_stream_bytes();
    });
    println!(
        "request head, {} fields, literals (HPACK {} B, QPACK {} B):",
        REQUEST.len(),
        block.len(),
        section.len()
    );
    println!("  HTTP/2 decode + validate + Request: {h2}");
    println!("  HTTP/3 on_request_stream + Request: {h3}");
    println!(
        "  HTTP/3, every field from the dynamic table ({} B): {h3_indexed}",
        indexed.len() - 2
    );
}

struct Figures {
    allocations: f64,
    nanos: f64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} allocations, {:.0} ns per request",
            self.allocations, self.nanos
        )
    }
}

/// Warms up, then counts allocations and time over `ROUNDS` calls of `f`.
fn measure(mut f: impl FnMut()) -> Figures {
    for _ in 0..ROUNDS {
        f();
    }
    let before = counting::allocations();
    let t = Instant::now();
    for _ in 0..ROUNDS {
        f();
    }
    let nanos = t.elapsed().as_nanos() as f64 / ROUNDS as f64;
    let allocations = (counting::allocations() - before) as f64 / ROUNDS as f64;
    Figures { allocations, nanos }
}
