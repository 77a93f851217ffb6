//! The file handler's request path normaliser. It may not panic, and a path it accepts must be
//! `/seg/seg...` with no empty, `.` or `..` segment and no NUL byte, so it can never name
//! anything above `file.dir`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::handler::file::parsers::append_normalized;

fuzz_target!(|data: &[u8]| {
    let mut out = b"/srv".to_vec();
    if append_normalized(data, &mut out).is_ok() {
        let rest = &out[4..];
        assert!(rest.is_empty() || rest[0] == b'/');
        assert!(!rest.contains(&0));
        for seg in rest.split(|&b| b == b'/').skip(1) {
            assert!(!seg.is_empty() && seg != b"." && seg != b"..", "{rest:?}");
        }
    }
});
