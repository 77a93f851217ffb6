//! A panic while handling one connection closes that connection only: the worker (here the only
//! one) keeps serving its other connections, new ones are accepted, and the panic is logged once
//! with the peer's address and counted in the metrics. The panic comes from the debug-only
//! trigger `SPATE_DEBUG_PANIC_PATH` (compiled out of release builds: src/server/panics.rs).

mod common;

use common::prometheus::{sample, scrape_until};
use common::*;
use std::io::Write;
use std::process::Command;

const CONFIG: &str = "
num-threads: 1
listen:
  host: 127.0.0.1
  port: 0
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
        respond: {body: fine}
";

fn start() -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    Spate::start_in_env(CONFIG, dir, &[("SPATE_DEBUG_PANIC_PATH", "/panic")])
}

fn get_on(c: &mut std::net::TcpStream, pending: &mut Vec<u8>, path: &str) -> RawResponse {
    write!(c, "GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").expect("write");
    read_response(c, pending, false)
}

#[test]
fn a_panic_closes_only_its_connection() {
    let s = start();
    // An HTTP/1.1 keep-alive connection opened before the panic.
    let mut before = s.connect();
    let mut pending = Vec::new();
    assert_eq!(get_on(&mut before, &mut pending, "/").text(), "fine");

    for _ in 0..2 {
        let mut victim = s.connect();
        let peer = victim.local_addr().expect("local addr").to_string();
        victim
            .write_all(b"GET /panic HTTP/1.1\r\nHost: a\r\n\r\n")
            .expect("write");
        let out = read_to_close(&mut victim);
        assert_eq!(
            out, "",
            "the panicking connection is closed without an answer"
        );
        // Logged once, with that connection's peer (the line comes a moment after the close).
        let hits = s.log_lines_naming("panicked", 1);
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert!(hits[0].contains(&peer), "{hits:?} lacks {peer}");
        assert!(hits[0].contains("SPATE_DEBUG_PANIC_PATH"), "{hits:?}");
    }

    // The connection opened before still works, and so do new ones (HTTP/1.1 and HTTP/2).
    assert_eq!(get_on(&mut before, &mut pending, "/").text(), "fine");
    assert_eq!(
        request(&s, "GET / HTTP/1.1\r\nHost: a\r\n\r\n").text(),
        "fine"
    );
    let out = Command::new("curl")
        .args(["-s", "--http2-prior-knowledge"])
        .arg(format!("http://{}/", s.addr))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fine");

    let samples = scrape_until(&s, "/metrics", |m| {
        sample(m, "spate_connection_panics_total{}") >= 2.0
    });
    assert_eq!(sample(&samples, "spate_connection_panics_total{}"), 2.0);
}
