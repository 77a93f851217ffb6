//! Feeds arbitrary bytes to the HTTP/2 frame decoder, frame by frame. It may reject anything
//! but never panic, and a decoded payload must lie inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::h2::frame::{decode, Frame, Head, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while rest.len() >= HEADER_LEN {
        let head = Head::parse(rest[..HEADER_LEN].try_into().unwrap());
        let end = (HEADER_LEN + head.len as usize).min(rest.len());
        let payload = &rest[HEADER_LEN..end];
        if let Ok(Frame::Data { data, .. }) = decode(head, payload, 1 << 24) {
            assert!(data.len() <= payload.len());
        }
        rest = &rest[end..];
    }
});
