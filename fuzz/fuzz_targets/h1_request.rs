//! Feeds arbitrary bytes to the HTTP/1 request head parser and, when a head parses, the rest
//! to the chunked decoder. Neither may panic, and every range must lie inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::h1::{parse_head, ChunkedDecoder, HeadLimits};

fuzz_target!(|data: &[u8]| {
    let limits = HeadLimits {
        head_size: 8192,
        target_size: 2048,
        fields: 64,
        body_size: 1 << 20,
    };
    if let Ok(Some(head)) = parse_head(data, &limits) {
        assert!(head.len <= data.len());
        assert!(head.target.end <= head.len);
        for (n, v) in &head.fields {
            assert!(n.end <= head.len && v.end <= head.len);
        }
        let mut rest = &data[head.len..];
        let mut dec = ChunkedDecoder::new(1024);
        while let Ok(d) = dec.decode(rest) {
            assert!(d.consumed <= rest.len() && d.data.end <= rest.len());
            if d.done || d.consumed == 0 {
                break;
            }
            rest = &rest[d.consumed..];
        }
    }
});
