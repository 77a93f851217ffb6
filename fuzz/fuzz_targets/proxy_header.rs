//! Arbitrary bytes as the opening of a `proxy-protocol` connection (src/server/proxy_protocol.rs).
//! The parser must never panic; a whole header must lie within the bytes and within the
//! versions' bounds, and what is whole stays whole (and the same) when more bytes follow.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::server::{parse_proxy_header, ProxyHeader};

fuzz_target!(|data: &[u8]| {
    let header = parse_proxy_header(data);
    if let ProxyHeader::Whole { len, .. } = &header {
        assert!(
            *len <= data.len() && *len <= 1024,
            "{len} of {}",
            data.len()
        );
        let mut more = data.to_vec();
        more.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(parse_proxy_header(&more), header);
    }
    // Bytes that are a header, or may become one, are so in every prefix: no prefix is
    // refused.
    if let ProxyHeader::Invalid(_) = header {
        return;
    }
    for cut in 0..data.len().min(1200) {
        let part = parse_proxy_header(&data[..cut]);
        assert!(
            !matches!(part, ProxyHeader::Invalid(_)),
            "{cut}: {part:?} then {header:?}"
        );
    }
});
