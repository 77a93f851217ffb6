//! HTTP/3 abuse (issue 10), each by tests/h3/attacks.py on aioquic's lower-level API: streams
//! opened past MAX_STREAMS, a flood of opened-and-cancelled requests, a QPACK bomb (one
//! dynamic-table entry referenced until the headers decode to 4 MB), 128 KB of header fields,
//! and a client that never reads (no flow-control credit) while the server's memory is watched.
//! After each, a normal request on a fresh connection is served. One server for all of them.
//!
//! As tests/h3_interop.rs, h2o instead of spate with `SPATE_TESTS_H2O`.

mod common;
mod h3_support;
mod tls_support;

use common::*;
use h3_support::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// HTTP/3 and QPACK error codes a server may refuse oversized headers with (RFC 9114 8.1,
/// RFC 9204 6): H3_EXCESSIVE_LOAD, H3_REQUEST_REJECTED, H3_MESSAGE_ERROR,
/// QPACK_DECOMPRESSION_FAILED.
const REFUSALS: &[&str] = &["0x107", "0x10b", "0x10e", "0x200"];

#[test]
fn h3_abuse_is_contained() {
    let Some(clients) = Clients::find() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "docs/6b.txt", b"hello\n");
    write_file(dir.path(), "docs/1m.bin", &pattern_bytes(1 << 20));
    let s = H3Server::start(dir, "", DOCS_SITE);
    write_pattern_file(&s.dir().join("docs/20m.bin"), 20 << 20);
    let base = s.url("");
    let attack = |name: &str| {
        let run = clients.python_script("attacks.py", &[name, &base]);
        assert_eq!(run.field("attack", "fresh"), "200", "{name}: {run}");
        run
    };

    // Past the stream limit: the connection is closed with STREAM_LIMIT_ERROR.
    let run = attack("stream-flood");
    assert_eq!(run.field("attack", "outcome"), "closed", "{run}");
    assert_eq!(run.field("attack", "code"), "0x4", "{run}");

    // Open-and-cancel: served throughout, or the connection closed for excessive load.
    let run = attack("reset-flood");
    match run.field("attack", "outcome").as_str() {
        "status" => assert_eq!(run.field("attack", "status"), "200", "{run}"),
        "closed" => assert_eq!(run.field("attack", "code"), "0x107", "{run}"),
        _ => panic!("the server stalled or failed: {run}"),
    }

    // A QPACK bomb and oversized headers are refused, never answered 200.
    for name in ["qpack-bomb", "big-headers"] {
        let run = attack(name);
        let refused = match run.field("attack", "outcome").as_str() {
            "status" => run.field("attack", "status") == "431",
            "closed" => REFUSALS.contains(&run.field("attack", "code").as_str()),
            "error" => {
                let e = run.field("attack", "error");
                REFUSALS.iter().any(|c| e.ends_with(c))
            }
            _ => false,
        };
        assert!(refused, "{name} not refused: {run}");
    }

    // A client that never reads: 50 streams of 20 MB wait for credit; the server's memory
    // stays bounded and another connection is served meanwhile.
    let pid = s.pid();
    let base_rss = rss_kb(pid);
    let peak = Arc::new(AtomicU64::new(base_rss));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kb(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let run = attack("no-read");
    done.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    assert_eq!(run.field("attack", "other"), "200", "{run}");
    let received: u64 = run.field("attack", "received").parse().unwrap_or(0);
    assert!(received <= 2 << 20, "sent past the client's credit: {run}");
    let grown = peak.load(Ordering::Relaxed).saturating_sub(base_rss);
    assert!(
        grown < 64 * 1024,
        "server RSS grew {grown} KB for a client that never reads (base {base_rss} KB)"
    );
}

/// Resident set of a process, in KB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
