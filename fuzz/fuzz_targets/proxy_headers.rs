//! The proxy's header conversion both ways: the input is a client's request head, a NUL, and a
//! backend's response head (the first byte picks `proxy.preserve-host`). Nothing may panic,
//! and no connection-only or framing field reaches either side.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::handler::proxy::fuzzing::convert;

/// Never forwarded either way (Connection and Upgrade are left out: an upgrade may carry them).
const HOP_BY_HOP: [&[u8]; 4] = [
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
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
        assert!(
            !HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)),
            "{name:?}"
        );
    }
    for (name, _) in &resp.headers {
        assert!(
            !HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)),
            "{name:?}"
        );
    }
});
