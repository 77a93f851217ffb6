//! HTTP/3 over QUIC (`listen: {type: quic}`), fetched by real HTTP/3 clients.
//!
//! Sections: the first fetches (h3quic); interop with aioquic, quic-go and Chromium, and the
//! abuse tests, follow (h3tests). The Python client is aioquic from PyPI, in a venv that
//! scripts/test creates at target/aioquic-venv.

mod common;
mod tls_support;

use common::*;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

// ---- first fetches (h3quic) ----

/// One JSON line per request from tests/h3_support/aioquic_get.py.
struct Fetched {
    status: u16,
    len: usize,
    sha256: String,
    text: String,
    headers: Vec<(String, String)>,
}

fn aioquic_get(py: &Path, port: u16, paths: &[&str]) -> Vec<Fetched> {
    let out = aioquic_run(py, port, paths);
    assert!(
        out.status.success(),
        "aioquic failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let field = |name: &str| -> String {
                let key = format!("\"{name}\": ");
                let at = l.find(&key).expect(name) + key.len();
                let rest = &l[at..];
                if let Some(s) = rest.strip_prefix('"') {
                    s[..s.find('"').expect("end")].to_string()
                } else {
                    rest[..rest.find([',', '}']).expect("end")].to_string()
                }
            };
            let hstart = l.find("\"headers\": [").expect("headers") + 12;
            let hend = l[hstart..].find("]]").map_or(hstart, |e| hstart + e + 1);
            let headers = l[hstart..hend]
                .split("], [")
                .filter_map(|p| {
                    let p = p.trim_matches(['[', ']']);
                    let (n, v) = p.split_once("\", \"")?;
                    Some((
                        n.trim_matches('"').to_string(),
                        v.trim_matches('"').to_string(),
                    ))
                })
                .collect();
            Fetched {
                status: field("status").parse().expect("status"),
                len: field("len").parse().expect("len"),
                sha256: field("sha256"),
                text: field("text"),
                headers,
            }
        })
        .collect()
}

fn sha256_hex(data: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(data)?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

/// TLS and QUIC on the same port (the seed-004 form), a static site and an access log.
fn h3_server(port: u16, extra: &str) -> Spate {
    h3_server_env(port, 2, extra, &[])
}

/// As `h3_server`, with `threads` workers and extra environment variables for the server.
fn h3_server_env(port: u16, threads: usize, extra: &str, env: &[(&str, &str)]) -> Spate {
    Spate::start_in_env(&h3_yaml(port, threads, extra), h3_dir(), env)
}

/// The directory of `h3_server`: its certificate and files.
fn h3_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    write_file(dir.path(), "htdocs/index.html", b"<h1>over QUIC</h1>\n");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    write_file(dir.path(), "htdocs/big.bin", &big);
    dir
}

/// The configuration of `h3_server`.
fn h3_yaml(port: u16, threads: usize, extra: &str) -> String {
    format!(
        "
num-threads: {threads}
access-log:
  path: $DIR/access.log
  format: '%H %s %b %r'
{extra}
hosts:
  localhost:
    listen: &tls
      host: 127.0.0.1
      port: {port}
      ssl:
        certificate-file: a.crt
        key-file: a.key
    listen:
      <<: *tls
      type: quic
    paths:
      /:
        file.dir: htdocs
"
    )
}

#[test]
fn aioquic_fetches_files_over_http3() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let mut s = h3_server(0, "");
    let port = s.addr.port();
    let got = aioquic_get(
        &py,
        port,
        &["/index.html", "/big.bin", "/missing", "/index.html"],
    );
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].status, 200);
    assert_eq!(got[0].text, "<h1>over QUIC</h1>\\n");
    let big = std::fs::read(s.path().join("htdocs/big.bin")).expect("big");
    assert_eq!(got[1].status, 200);
    assert_eq!(got[1].len, big.len());
    assert_eq!(got[1].sha256, sha256_hex(&big));
    assert!(got[1]
        .headers
        .iter()
        .any(|(n, v)| n == "content-length" && v == "3000000"));
    assert_eq!(got[2].status, 404);
    assert_eq!(got[3].status, 200);
    assert!(s.stop().success());
    let log = std::fs::read_to_string(s.path().join("access.log")).expect("access log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "{log}");
    assert!(
        lines.contains(&"HTTP/3 200 3000000 GET /big.bin HTTP/3"),
        "{log}"
    );
    assert!(
        lines.contains(&"HTTP/3 404 10 GET /missing HTTP/3"),
        "{log}"
    );
}

/// A panic while handling one HTTP/3 connection (the debug-only trigger of src/server/panics.rs)
/// closes that connection only: the worker's QUIC endpoint, which drives all of its
/// connections in one task, goes on serving new ones, and the panic is logged once.
#[test]
fn a_panic_in_one_http3_connection_closes_only_that_one() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let s = h3_server_env(0, 1, "", &[("SPATE_DEBUG_PANIC_PATH", "/panic")]);
    let port = s.addr.port();
    let out = aioquic_run(&py, port, &["/panic"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("error code 0x102"),
        "the panicking connection is closed with H3_INTERNAL_ERROR: {said}"
    );
    for _ in 0..3 {
        let got = aioquic_get(&py, port, &["/index.html"]);
        assert_eq!(got[0].status, 200);
        assert_eq!(got[0].text, "<h1>over QUIC</h1>\\n");
    }
    let lines = s.stderr_lines();
    let hits: Vec<_> = lines.iter().filter(|l| l.contains("panicked")).collect();
    assert_eq!(hits.len(), 1, "{lines:?}");
    assert!(hits[0].contains("SPATE_DEBUG_PANIC_PATH"), "{hits:?}");
}

/// A panic inside quinn-proto's work on a datagram (the debug-only trigger: a datagram of
/// exactly 1111 bytes) is contained too: the datagram is dropped, logged once, and the
/// worker's QUIC endpoint goes on serving (uncontained, the panic ends the task that drives
/// every QUIC connection of the worker, and the next fetches fail).
#[test]
fn a_panic_inside_quinn_drops_only_its_datagram() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let s = h3_server_env(0, 1, "", &[("SPATE_DEBUG_PANIC_DATAGRAM", "1111")]);
    let port = s.addr.port();
    assert_eq!(aioquic_get(&py, port, &["/index.html"])[0].status, 200);
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    udp.send_to(&[0x40; 1111], ("127.0.0.1", port))
        .expect("send");
    // `stderr_lines` gives the lines logged since its last call.
    let mut lines = Vec::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !lines.iter().any(|l: &String| l.contains("panicked")) {
        assert!(std::time::Instant::now() < end, "the datagram was not seen");
        std::thread::sleep(std::time::Duration::from_millis(20));
        lines.extend(s.stderr_lines());
    }
    for _ in 0..2 {
        let got = aioquic_get(&py, port, &["/index.html"]);
        assert_eq!(got[0].status, 200);
        assert_eq!(got[0].text, "<h1>over QUIC</h1>\\n");
    }
    lines.extend(s.stderr_lines());
    let hits: Vec<_> = lines.iter().filter(|l| l.contains("panicked")).collect();
    assert_eq!(hits.len(), 1, "{lines:?}");
    assert!(hits[0].contains("SPATE_DEBUG_PANIC_DATAGRAM"), "{hits:?}");
}

#[test]
fn alt_svc_advertises_the_quic_port() {
    if !tls_support::need("curl") {
        return;
    }
    // A port free for both TCP and UDP (another, should something take it before spate
    // binds it), then the same one again once the first server is gone (waiting while
    // something else holds it).
    let (s, [port]) = Spate::start_on_ports(
        h3_dir(),
        || [free_tcp_udp_port()],
        |[p]| h3_yaml(p, 2, ""),
        &[],
    );
    let want = format!("alt-svc: h3=\":{port}\"");
    assert!(response_head(port, "--http1.1").contains(&want));
    assert!(response_head(port, "--http2").contains(&want));
    drop(s);
    let s = Spate::start_retrying(&h3_yaml(port, 2, "http3-alt-svc: OFF"), h3_dir(), &[]);
    assert!(!response_head(port, "--http1.1").contains("alt-svc"));
    drop(s);
}

/// The response head of `/` over TLS with curl's `version` flag, lowercased.
fn response_head(port: u16, version: &str) -> String {
    let url = format!("https://127.0.0.1:{port}/");
    let out = curl(&["-k", "-s", "-D-", "-o/dev/null", version, &url]);
    String::from_utf8_lossy(&out.stdout).to_lowercase()
}

#[test]
fn proxied_responses_and_request_bodies_over_http3() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let backend = backend::Backend::start();
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    let s = Spate::start_in(
        &format!(
            "
num-threads: 1
hosts:
  localhost:
    listen: &tls
      host: 127.0.0.1
      port: 0
      ssl:
        certificate-file: a.crt
        key-file: a.key
    listen:
      <<: *tls
      type: quic
    paths:
      /p:
        proxy.reverse.url: {}
",
            backend.url("/")
        ),
        dir,
    );
    let got = aioquic_get(
        &py,
        s.addr.port(),
        &[
            "/p/pattern?len=2000000",
            "/p/chunked?pieces=3&delay=20",
            "POST:/p/upload:3000000",
            "POST:/p/upload:10",
        ],
    );
    let mut want = vec![0u8; 2_000_000];
    pattern::fill(0, &mut want);
    assert_eq!((got[0].status, got[0].len), (200, want.len()));
    assert_eq!(got[0].sha256, sha256_hex(&want));
    assert_eq!(got[1].status, 200);
    assert_eq!(got[1].text, "piece 0\\npiece 1\\npiece 2\\n");
    for (r, n) in [(&got[2], 3_000_000usize), (&got[3], 10)] {
        let mut h = pattern::Hash64::new();
        h.update(&vec![b'x'; n]);
        assert_eq!(r.status, 200);
        assert_eq!(
            r.text,
            format!("{n} {:016x}\\n", h.finish()),
            "upload of {n}"
        );
    }
}

#[test]
fn a_client_that_changes_address_keeps_its_connection() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    // Two workers: after each rebinding the kernel may hand the new path to the other
    // worker's socket, which forwards the packets to the connection's owner.
    let s = h3_server(0, "");
    let mut paths = vec!["/index.html"];
    for _ in 0..6 {
        paths.extend(["REBIND", "/index.html"]);
    }
    let got = aioquic_get(&py, s.addr.port(), &paths);
    assert_eq!(got.len(), 7);
    assert!(got.iter().all(|r| r.status == 200 && r.len == 19));
}

/// A port free for both TCP and UDP on 127.0.0.1.
fn free_tcp_udp_port() -> u16 {
    loop {
        let t = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
        let p = t.local_addr().expect("addr").port();
        if std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

#[test]
fn seed_004_serves_http2_and_http3_on_one_port() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let backend = backend::Backend::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (crt, key) = tls_support::cert(dir.path(), "localhost", "localhost", false);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/seed-configs/seed-004-proxy-h2-h3/h2o.yaml"),
    )
    .expect("seed-004");
    let yaml = |port: u16| {
        text.replace("/certs/localhost.pem", &crt.display().to_string())
            .replace("/certs/localhost.key", &key.display().to_string())
            .replace("port: 443", &format!("port: {port}\n      host: 127.0.0.1"))
            .replace("http://localhost:3000/", &backend.url("/"))
            .replace("/app/log/h2o-access.log", "$DIR/access.log")
            .replace("/app/log/h2o-error.log", "$DIR/error.log")
    };
    let (_s, [port]) = Spate::start_on_ports(dir, || [free_tcp_udp_port()], |[p]| yaml(p), &[]);
    let got = aioquic_get(&py, port, &["/pattern?len=100000", "/text"]);
    assert_eq!((got[0].status, got[0].len), (200, 100_000));
    assert_eq!(got[1].text, "hello from the backend\\n");
    let out = curl(&[
        "-k",
        "-s",
        "-D-",
        "--http2",
        &format!("https://127.0.0.1:{port}/text"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/2 200"), "{text}");
    assert!(text.contains(&format!("alt-svc: h3=\":{port}\"")), "{text}");
}

#[test]
fn retry_a_small_window_and_odd_frames_still_deliver_everything() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 253) as u8).collect();
    write_file(dir.path(), "htdocs/big.bin", &big);
    let s = Spate::start_in(
        "
num-threads: 1
http3-input-window-size: 16384
# Frames of an odd size, read from the file one frame at a time (300 KB is not held in memory).
http3-data-frame-size: 5000
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: a.crt
    key-file: a.key
  quic:
    retry: ON
    max-streams-bidi: 4
hosts:
  localhost:
    paths:
      /:
        file.dir: htdocs
",
        dir,
    );
    // More requests than max-streams-bidi: the client waits for stream credit.
    let got = aioquic_get(&py, s.addr.port(), &["/big.bin"; 8]);
    assert_eq!(got.len(), 8);
    let sum = sha256_hex(&big);
    assert!(got.iter().all(|r| r.status == 200 && r.sha256 == sum));
}

/// A backend that answers each request (one a connection) `200 ok`, the first only once
/// `release` sends (or is dropped): a client that keeps its connection for as long as the test
/// needs. Also the count of requests it has read.
fn held_backend() -> (String, mpsc::Sender<()>, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/", l.local_addr().expect("addr"));
    let (release, held) = mpsc::channel::<()>();
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    std::thread::spawn(move || {
        let mut held = Some(held);
        for mut c in l.incoming().map_while(Result::ok) {
            let held = held.take();
            let seen = seen.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
                    .ok();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                if let Some(held) = held {
                    let _ = held.recv_timeout(std::time::Duration::from_secs(60));
                }
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                );
            });
        }
    });
    (url, release, requests)
}

#[test]
fn connections_past_max_quic_connections_are_refused() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let (backend_url, release, requests) = held_backend();
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    let s = Spate::start_in(
        &format!(
            "
num-threads: 1
max-quic-connections: 1
listen:
  host: 127.0.0.1
  port: 0
  type: quic
  ssl:
    certificate-file: a.crt
    key-file: a.key
hosts:
  localhost:
    paths:
      /:
        proxy.reverse.url: {backend_url}
"
        ),
        dir,
    );
    let port = s.addr.port();
    // The first connection holds the only slot until the second client has finished.
    let first = {
        let py = py.clone();
        std::thread::spawn(move || aioquic_get(&py, port, &["/first"]))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while requests.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never came"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = aioquic_run(&py, port, &["/text"]);
    assert!(!second.status.success(), "a second connection was served");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        1,
        "the second reached the backend"
    );
    drop(release);
    assert_eq!(first.join().expect("first")[0].status, 200);
    // The slot is free again once the first connection has drained (a few round trips).
    let mut tries = 0;
    while !aioquic_run(&py, port, &["/text"]).status.success() {
        tries += 1;
        assert!(tries < 10, "the slot was not given back");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_stop_lets_in_flight_requests_finish() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let backend = backend::Backend::start();
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    let mut s = Spate::start_in(
        &format!(
            "
num-threads: 1
shutdown-timeout: 30
listen:
  host: 127.0.0.1
  port: 0
  type: quic
  ssl:
    certificate-file: a.crt
    key-file: a.key
hosts:
  localhost:
    paths:
      /:
        proxy.reverse.url: {}
",
            backend.url("/")
        ),
        dir,
    );
    let port = s.addr.port();
    let client = std::thread::spawn(move || aioquic_get(&py, port, &["/delay?ms=1500"]));
    // Stop once the request is at the backend.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while backend.requests() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never came"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let started = std::time::Instant::now();
    assert!(s.stop().success());
    let got = client.join().expect("client");
    assert_eq!((got[0].status, got[0].text.as_str()), (200, "late\\n"));
    // GOAWAY, the answer, then CONNECTION_CLOSE: the stop waited for the request only, not
    // for the 30 s shutdown-timeout.
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
}
