//! Arbitrary bytes as a FastCGI application's answer: the record reader and the CGI head
//! parser may not panic, a record never takes more than it said, and a parsed head never
//! claims more bytes than it was given.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use spate::proto::fastcgi::{cgi, next_record, Record, MAX_RECORD};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let mut stdout = Vec::new();
    loop {
        let before = buf.len();
        match next_record(&mut buf) {
            Ok(Some(r)) => {
                assert!(before - buf.len() <= MAX_RECORD);
                if let Record::Stdout(d) = r {
                    stdout.extend_from_slice(&d);
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    for input in [data, &stdout[..]] {
        if let Ok(Some(head)) = cgi::parse(input) {
            assert!(head.len <= input.len());
            assert!((100..=999).contains(&head.status));
        }
    }
});
