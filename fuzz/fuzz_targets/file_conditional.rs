//! The conditional request fields: `If-None-Match` and `If-Match` lists, the dates of
//! `If-Modified-Since` / `If-Unmodified-Since`, and `If-Range`. The input is field values, one
//! a line. Nothing may panic, and `*` always matches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::handler::file::parsers::{
    if_range_matches, match_allows, modified_after, none_match, not_modified_since,
};
use std::time::{Duration, UNIX_EPOCH};

const ETAG: &[u8] = b"\"5f3a-1b2c\"";

fuzz_target!(|data: &[u8]| {
    let modified = UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    let values = || data.split(|&b| b == b'\n');
    let star = values().any(|v| v.trim_ascii() == b"*");
    let none = none_match(values(), ETAG);
    assert!(!star || none);
    assert!(!star || match_allows(values(), None));
    let _ = match_allows(values(), Some(ETAG));
    for v in values() {
        let _ = not_modified_since(v, modified);
        let _ = modified_after(v, modified);
        let _ = if_range_matches(v, Some(ETAG), modified);
        let _ = if_range_matches(v, None, modified);
    }
});
