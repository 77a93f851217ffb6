//! `Range` header values against a file size (the first 8 input bytes). Parsing may not panic,
//! and every range it grants must lie inside the file, be non-empty, and together add up to no
//! more than the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::handler::file::parsers::{parse_range, Ranges};
use spate::handler::file::MAX_RANGES;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (size, header) = data.split_at(8);
    // Small sizes are the interesting ones; keep a few huge ones through the top bit.
    let raw = u64::from_le_bytes(size.try_into().unwrap_or_default());
    let size = if raw >> 63 == 1 { raw } else { raw % 100_000 };
    let check = |off: u64, len: u64| {
        assert!(
            len > 0 && off < size && len <= size - off,
            "{off} {len} {size}"
        );
    };
    match parse_range(header, size) {
        Ranges::Whole | Ranges::Unsatisfiable => {}
        Ranges::Single(off, len) => check(off, len),
        Ranges::Multi(ranges) => {
            assert!(ranges.len() >= 2 && ranges.len() <= MAX_RANGES);
            let mut total = 0u64;
            for &(off, len) in &ranges {
                check(off, len);
                total += len;
            }
            assert!(total <= size);
        }
    }
});
