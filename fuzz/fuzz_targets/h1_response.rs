//! Feeds arbitrary bytes to the upstream (proxy) response head parser and, when a head parses,
//! the rest to the chunked decoder with its trailers, as the proxy reads a backend. Neither may
//! panic, and every range must lie inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::h1::{parse_response_head, ChunkedDecoder, MAX_RESPONSE_FIELDS};

fuzz_target!(|data: &[u8]| {
    // The first byte picks a response to HEAD or not; the rest is the backend's bytes.
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    if let Ok(Some(head)) = parse_response_head(data, flags & 1 == 1, 8192, MAX_RESPONSE_FIELDS) {
        assert!(head.len <= data.len());
        for (n, v) in &head.fields {
            assert!(n.end <= head.len && v.end <= head.len);
        }
        let mut rest = &data[head.len..];
        let mut dec = ChunkedDecoder::new(1024);
        while let Ok(d) = dec.decode(rest) {
            assert!(d.consumed <= rest.len() && d.data.end <= rest.len());
            if d.done {
                let _ = dec.take_trailers();
                break;
            }
            if d.consumed == 0 {
                break;
            }
            rest = &rest[d.consumed..];
        }
    }
});
