//! HTTP/3 coverage of the `status` handler's `requests` section (an HTTP/3 request in flight
//! is listed) and of `proxy.connect` over HTTP/3 (RFC 9114 section 4.4: a CONNECT stream is
//! a tunnel), against a real spate with aioquic as the client.

mod common;
mod tls_support;

use common::backend::Backend;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// TLS and QUIC on one port: `/slow` proxied to `backend`, `/s` the status page, and
/// `proxy.connect` on `/` allowing `allowed` (with Proxy-Status on).
fn start(backend: &Backend, allowed: &[u16]) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    let mut acl = String::new();
    for p in allowed {
        acl.push_str(&format!("          - \"+127.0.0.1:{p}\"\n"));
    }
    Spate::start_in(
        &format!(
            r#"
num-threads: 2
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
      /slow:
        proxy.reverse.url: {}
      /s:
        status: ON
      /:
        proxy.connect:
{acl}          - "-*"
        proxy.connect.emit-proxy-status: ON
"#,
            backend.url("/")
        ),
        dir,
    )
}

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3_support/aioquic_connect.py")
}

/// The status page's requests, fetched over TLS.
fn requests(s: &Spate) -> String {
    let url = format!("https://localhost:{}/s/json?show=requests", s.addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", s.addr.port());
    let out = curl(&["-k", "--resolve", &resolve, &url]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A TCP server that sends back what it reads, one thread per connection.
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Runs the script's `connect` mode: its printed lines.
fn h3_connect(py: &Path, s: &Spate, authority: &str, payload: &str) -> Vec<String> {
    let out = Command::new(py)
        .arg(script())
        .args(["127.0.0.1", &s.addr.port().to_string(), "connect"])
        .args([authority, payload])
        .output()
        .expect("run aioquic");
    assert!(
        out.status.success(),
        "aioquic failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

struct Held(Child);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Holds `path` open over HTTP/3 (the client closes its connection when dropped).
fn hold(py: &Path, s: &Spate, path: &str) -> Held {
    let mut child = Command::new(py)
        .arg(script())
        .args(["127.0.0.1", &s.addr.port().to_string(), "hold", path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run aioquic");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("read");
    assert!(first.contains("\"sent\": true"), "{first}");
    Held(child)
}

/// The entry naming `needle` once it shows `state`.
fn listed(s: &Spate, needle: &str, state: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = requests(s);
        if let Some(l) = page
            .lines()
            .find(|l| l.contains(needle) && l.contains(state))
        {
            return l.to_owned();
        }
        assert!(Instant::now() < deadline, "{needle} never {state}: {page}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The client closes its connection: the request leaves the list.
fn close_and_gone(s: &Spate, held: Held, needle: &str) {
    let mut held = held;
    drop(held.0.stdin.take());
    let _ = held.0.wait();
    let deadline = Instant::now() + Duration::from_secs(20);
    while requests(s).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "still listed after the client left"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_http3_request_in_flight_is_listed() {
    let Some(py) = aioquic_python() else {
        return;
    };
    if !have("curl") {
        eprintln!("skipped: no curl");
        return;
    }
    let backend = Backend::start();
    let s = start(&backend, &[]);
    let held = hold(&py, &s, "/slow/delay?ms=60000");
    let entry = listed(&s, "\"/slow/delay\"", "\"state\": \"handling\"");
    for want in [
        "\"method\": \"GET\"",
        "\"protocol\": \"HTTP/3\"",
        "\"authority\": \"h3held.example\"",
        "\"query\": \"?ms=60000\"",
    ] {
        assert!(entry.contains(want), "{want} in {entry}");
    }
    close_and_gone(&s, held, "\"/slow/delay\"");

    // An answer whose body is still streaming: listed as sending until it ends.
    let held = hold(&py, &s, "/slow/chunked?pieces=2&delay=60000&trailers=0");
    let entry = listed(&s, "\"/slow/chunked\"", "\"state\": \"sending\"");
    assert!(entry.contains("\"protocol\": \"HTTP/3\""), "{entry}");
    close_and_gone(&s, held, "\"/slow/chunked\"");
}

#[test]
fn connect_over_http3_tunnels_and_refuses_as_over_http2() {
    let Some(py) = aioquic_python() else {
        return;
    };
    let backend = Backend::start();
    let echo = echo_server();
    let s = start(&backend, &[echo.port()]);
    // Allowed: a 200, then the stream carries bytes both ways.
    let lines = h3_connect(&py, &s, &echo.to_string(), "ping over h3");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("{\"status\": 200"), "{lines:?}");
    assert!(
        lines[0].contains("\"proxy-status\": \"spate; next-hop=\\\"127.0.0.1\\\"\""),
        "{lines:?}"
    );
    assert_eq!(lines[1], "{\"echo\": \"ping over h3\"}");
    // Refused by the list: 403, as over HTTP/1.1 and HTTP/2.
    let lines = h3_connect(&py, &s, &format!("127.0.0.1:{}", backend.port()), "x");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("{\"status\": 403"), "{lines:?}");
    assert!(
        lines[0].contains("error=destination_ip_prohibited"),
        "{lines:?}"
    );
    assert_eq!(backend.accepted(), 0);
}
