//! Arbitrary bytes as a configuration file. Loading may not panic; a rejected file must say
//! which file and which line (within the text) every problem is on.
#![no_main]

use libfuzzer_sys::fuzz_target;

const NAME: &str = "/nonexistent/spate-fuzz/spate.yaml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errors) = spate::config::load_str(text, NAME) {
        assert!(!errors.is_empty());
        let lines = line_breaks(text.as_bytes()) + 1;
        for e in &errors {
            assert_eq!(&*e.at.file, NAME);
            assert!(e.at.line >= 1 && e.at.line <= lines, "{e}");
        }
    }
});

/// Line breaks as YAML counts them: LF, CRLF, and a lone CR.
fn line_breaks(text: &[u8]) -> u32 {
    let mut n = 0;
    for (i, &b) in text.iter().enumerate() {
        if b == b'\n' || (b == b'\r' && text.get(i + 1) != Some(&b'\n')) {
            n += 1;
        }
    }
    n
}
