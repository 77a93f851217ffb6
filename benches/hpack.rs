//! HPACK throughput: `cargo bench --bench hpack`. Std only; prints ns per header block.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use spate::proto::h2::hpack::{Decoder, Encoder, HeaderField};

mod common;
use common::{Headers, REQUEST};

const RESPONSE: &Headers = &[
    (b":status", b"200"),
    (b"server", b"spate"),
    (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
    (b"content-type", b"text/css; charset=utf-8"),
    (b"content-length", b"24576"),
    (b"last-modified", b"Sun, 20 Oct 2013 10:00:00 GMT"),
    (b"etag", b"\"5f2b-18c4e2a7d10\""),
    (b"cache-control", b"public, max-age=31536000, immutable"),
    (b"vary", b"accept-encoding"),
    (b"accept-ranges", b"bytes"),
];

fn main() {
    let mut buf = BytesMut::with_capacity(4096);
    let mut fields = Vec::with_capacity(64);
    for (label, headers) in [("request", REQUEST), ("response", RESPONSE)] {
        // The first block of a connection carries literals (mostly Huffman-coded); later
        // ones refer to the dynamic table. "First block" timings include creating the
        // decoder or encoder and growing its table.
        let mut enc = Encoder::default();
        let cold = encode(&mut enc, headers);
        let warm = encode(&mut enc, headers);

        bench(
            &format!("decode {label}, first block ({} B)", cold.len()),
            headers.len(),
            || {
                let mut dec = Decoder::new(4096, 64 * 1024);
                decode(&mut dec, &cold, &mut buf, &mut fields)
            },
        );

        let mut dec = Decoder::new(4096, 64 * 1024);
        decode(&mut dec, &cold, &mut buf, &mut fields);
        bench(
            &format!("decode {label}, later block ({} B)", warm.len()),
            headers.len(),
            || decode(&mut dec, &warm, &mut buf, &mut fields),
        );

        bench(
            &format!("encode {label}, first block"),
            headers.len(),
            || {
                let mut enc = Encoder::default();
                encode(&mut enc, headers).len()
            },
        );

        let mut enc = Encoder::default();
        let mut out = Vec::with_capacity(1024);
        bench(
            &format!("encode {label}, later block"),
            headers.len(),
            || {
                out.clear();
                enc.encode(black_box(headers).iter().copied(), &mut out);
                out.len()
            },
        );
    }
}

fn encode(enc: &mut Encoder, headers: &Headers) -> Vec<u8> {
    let mut out = Vec::new();
    enc.encode(headers.iter().copied(), &mut out);
    out
}

/// Decodes into buffers reused across calls, as a connection would.
fn decode(
    dec: &mut Decoder,
    block: &[u8],
    buf: &mut BytesMut,
    fields: &mut Vec<HeaderField>,
) -> usize {
    buf.clear();
    fields.clear();
    dec.decode(black_box(block), buf, |f| fields.push(f))
        .expect("benchmark block decodes");
    black_box(&buf);
    fields.len()
}

/// Runs `f` for about half a second after a warm-up and prints the mean time per call.
fn bench(name: &str, headers: usize, mut f: impl FnMut() -> usize) {
    for _ in 0..1000 {
        black_box(f());
    }
    let budget = Duration::from_millis(500);
    let start = Instant::now();
    let mut iters = 0u64;
    while start.elapsed() < budget {
        for _ in 0..256 {
            black_box(f());
        }
        iters += 256;
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    println!(
        "{name:<42} {ns:>9.1} ns/block {:>7.1} ns/header",
        ns / headers as f64
    );
}
