//! The HTTP/1 chunked body decoder alone, fed the same body whole and split into reads at
//! arbitrary points (the first input bytes pick them). It may not panic, every range must lie
//! inside its input, and both feedings must agree on the data, the end and the error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::h1::ChunkedDecoder;

/// Decoded data, whether the end was reached, whether an error was reported.
type Outcome = (Vec<u8>, bool, bool);

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let splits = usize::from(n % 8).min(rest.len());
    let (cuts, body) = rest.split_at(splits);
    let whole = decode(&[body]);
    let mut pieces = Vec::new();
    let mut at = 0;
    for &c in cuts {
        let end = (at + usize::from(c)).min(body.len());
        pieces.push(&body[at..end]);
        at = end;
    }
    pieces.push(&body[at..]);
    assert_eq!(whole, decode(&pieces));
});

/// Feeds `pieces` as successive reads, keeping what the decoder left unconsumed, as the
/// server's read loop does.
fn decode(pieces: &[&[u8]]) -> Outcome {
    let mut dec = ChunkedDecoder::new(1024);
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match dec.decode(&buf) {
                Err(_) => return (out, false, true),
                Ok(d) => {
                    assert!(d.consumed <= buf.len() && d.data.end <= d.consumed);
                    out.extend_from_slice(&buf[d.data.clone()]);
                    buf.drain(..d.consumed);
                    if d.done {
                        let _ = dec.take_trailers();
                        return (out, true, false);
                    }
                    if d.consumed == 0 || buf.is_empty() {
                        break;
                    }
                }
            }
        }
    }
    (out, false, false)
}
