//! Feeds the trailing-PADDING finder (src/server/quic/unpad.rs) arbitrary decrypted packet
//! payloads. It must never panic, and a cut it proposes must drop nothing but zero bytes at a
//! frame boundary inside the payload, so that no frame a client sent is lost.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::server::quic_padding_start;

fuzz_target!(|data: &[u8]| {
    if let Some(at) = quic_padding_start(data) {
        assert!(at < data.len(), "cut at {at} of {}", data.len());
        assert!(
            data[at..].iter().all(|&b| b == 0),
            "cut drops frame bytes at {at}"
        );
    }
});
