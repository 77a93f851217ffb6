//! Feeds one QPACK decoder an interleaving of encoder stream bytes and field sections, as the
//! input says: each record is a tag byte (bit 0: 0 = encoder stream, 1 = a field section of
//! stream `tag >> 1`), a length byte, then that many bytes. Decoded ranges must lie inside
//! the buffer, and a decoded section must stay under the size limit.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use spate::proto::h3::qpack::{Decoded, Decoder};

const LIMIT: u64 = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&cap, mut rest)) = data.split_first() else {
        return;
    };
    let mut dec = Decoder::new(u64::from(cap) * 16, 4, LIMIT);
    let mut unblocked = Vec::new();
    while let [tag, len, tail @ ..] = rest {
        let n = (*len as usize).min(tail.len());
        let (chunk, next) = tail.split_at(n);
        rest = next;
        if tag & 1 == 0 {
            if dec.on_encoder_stream(chunk, &mut unblocked).is_err() {
                return;
            }
            continue;
        }
        let mut buf = BytesMut::new();
        let mut fields = Vec::new();
        match dec.decode_section(u64::from(tag >> 1) * 4, chunk, &mut buf, &mut fields) {
            Ok(Decoded::Done) => {
                let size: usize = fields
                    .iter()
                    .map(|f| {
                        assert!(f.name.end <= buf.len() && f.value.end <= buf.len());
                        f.name.len() + f.value.len() + 32
                    })
                    .sum();
                assert!(size as u64 <= LIMIT);
            }
            Ok(_) => assert!(buf.is_empty() && fields.is_empty()),
            Err(_) => return,
        }
        let _ = dec.take_output();
    }
});
