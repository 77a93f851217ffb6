//! Feeds arbitrary header blocks to one HPACK decoder (so the dynamic table carries over
//! between blocks). Every emitted range must lie inside the buffer.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use spate::proto::h2::hpack::Decoder;

fuzz_target!(|data: &[u8]| {
    let mut dec = Decoder::new(4096, 16 * 1024);
    for block in data.split(|&b| b == 0xfe) {
        let mut buf = BytesMut::new();
        let mut fields = Vec::new();
        if dec.decode(block, &mut buf, |f| fields.push(f)).is_ok() {
            for f in &fields {
                assert!(f.name.end <= buf.len() && f.value.end <= buf.len());
            }
        }
    }
});
