//! The proxy's header conversion both ways: the input is a client's request head, a NUL, and a
//! backend's response head (the first byte picks `proxy.preserve-host`). Nothing may panic;
//! no hop-by-hop field reaches either side, and a rewritten Location stays on the client's
//! authority.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::handler::proxy::fuzzing::convert;

const HOP_BY_HOP: [&[u8]; 6] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
    b"content-length",
];

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let Some(split) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let (request, response) = (&data[..split], &data[split + 1..]);
    let Some((fields, resp)) = convert(request, response, flags & 1 == 1) else {
        return;
    };
    for (name, _) in &fields {
        assert!(!HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)), "{name:?}");
    }
    for (name, value) in &resp.headers {
        let n = &name[..];
        assert!(!n.eq_ignore_ascii_case(b"transfer-encoding") && !n.eq_ignore_ascii_case(b"keep-alive"), "{name:?}");
        if n.eq_ignore_ascii_case(b"connection") {
            assert_eq!(&value[..], b"close");
        }
    }
});
