//! `listen: {proxy-protocol: ON}`: a PROXY header (version 1 or 2) opens each connection and
//! names the client, for the access log and the backends; a connection without one is closed.

mod common;
mod tls_support;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A cleartext and a TLS listener, both behind a balancer, logging the client's address.
fn start() -> Spate {
    let dir = tempfile::tempdir().unwrap();
    tls_support::cert(dir.path(), "a", "localhost", false);
    Spate::start_in(
        "
listen:
  - {host: 127.0.0.1, port: 0, proxy-protocol: ON}
  - host: 127.0.0.2
    port: 0
    proxy-protocol: ON
    ssl:
      certificate-file: a.crt
      key-file: a.key
num-threads: 1
access-log:
  path: $DIR/access.log
  format: \"%h %{remote}p %r %s\"
hosts:
  default:
    paths:
      /:
        respond: {body: hello}
",
        dir,
    )
}

/// The access log's lines once it has `n` of them (it is written every few hundred ms).
fn log_lines(s: &Spate, n: usize) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(s.path().join("access.log")).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() > end {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn v2_ipv4(src: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
    let mut body = src.to_vec();
    body.extend_from_slice(&[127, 0, 0, 1]);
    body.extend_from_slice(&port.to_be_bytes());
    body.extend_from_slice(&80u16.to_be_bytes());
    h.extend_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend_from_slice(&body);
    h
}

#[test]
fn the_header_names_the_client_for_every_request_of_the_connection() {
    let s = start();
    // Version 1, with two pipelined requests in the same write.
    let mut c = TcpStream::connect(s.addr).unwrap();
    let req = "GET /one HTTP/1.1\r\nHost: x\r\n\r\n";
    write_all(
        &mut c,
        format!("PROXY TCP4 203.0.113.7 127.0.0.1 56324 80\r\n{req}{req}").as_bytes(),
    );
    let mut pending = Vec::new();
    for _ in 0..2 {
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "hello");
    }
    // Version 2, the header in two writes and the request in a third, each apart.
    let mut c2 = TcpStream::connect(s.addr).unwrap();
    let h = v2_ipv4([198, 51, 100, 9], 40000);
    write_all(&mut c2, &h[..10]);
    std::thread::sleep(Duration::from_millis(30));
    write_all(&mut c2, &h[10..]);
    std::thread::sleep(Duration::from_millis(30));
    write_all(&mut c2, b"GET /two HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut c2, &mut pending, false).text(), "hello");
    // A v1 UNKNOWN leaves the connection's own address.
    let mut c3 = TcpStream::connect(s.addr).unwrap();
    let own_port = c3.local_addr().unwrap().port();
    write_all(
        &mut c3,
        b"PROXY UNKNOWN\r\nGET /three HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut c3, &mut pending, false).text(), "hello");
    let lines = log_lines(&s, 4);
    assert_eq!(
        lines,
        [
            "203.0.113.7 56324 GET /one HTTP/1.1 200",
            "203.0.113.7 56324 GET /one HTTP/1.1 200",
            "198.51.100.9 40000 GET /two HTTP/1.1 200",
            &format!("127.0.0.1 {own_port} GET /three HTTP/1.1 200"),
        ]
    );
}

#[test]
fn a_connection_without_a_valid_header_is_closed_unanswered() {
    let s = start();
    for opening in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PROXY TCP4 203.0.113.7 127.0.0.1 56324\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n",
    ] {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write_all(&mut c, opening);
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    }
    let logged = s.log_lines_naming("bad PROXY header", 3);
    assert_eq!(logged.len(), 3, "one line each: {logged:?}");
    // The listener still serves well-behaved balancers.
    let mut c = TcpStream::connect(s.addr).unwrap();
    write_all(
        &mut c,
        b"PROXY TCP4 203.0.113.7 127.0.0.1 1 2\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "hello");
}

#[test]
fn curl_through_the_header_over_h2c_tls_h2_and_tls_http1() {
    let s = start();
    let tls = s.listening[1];
    for (proto, url) in [
        ("--http2-prior-knowledge", format!("http://{}/h2c", s.addr)),
        ("--http2", format!("https://{tls}/h2")),
        ("--http1.1", format!("https://{tls}/h1")),
    ] {
        let out = curl(&["-sk", "--haproxy-protocol", proto, &url]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello", "{proto}");
    }
    let lines = log_lines(&s, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, want) in lines
        .iter()
        .zip(["/h2c HTTP/2", "/h2 HTTP/2", "/h1 HTTP/1.1"])
    {
        assert!(
            line.starts_with("127.0.0.1 ") && line.contains(want),
            "{line}"
        );
    }
}

/// spate's `proxy.proxy-protocol` in front of a spate with `proxy-protocol: ON`: the backend
/// logs the client's own port, not the port of the front's connection to it.
#[test]
fn a_front_spate_passes_the_client_to_the_back() {
    let back = start();
    let front = Spate::start(&format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
num-threads: 1
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://{}/
        proxy.proxy-protocol: ON
        proxy.timeout.keepalive: 0
",
        back.addr
    ));
    let mut c = TcpStream::connect(front.addr).unwrap();
    let port = c.local_addr().unwrap().port();
    c.write_all(b"GET /through HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "hello");
    assert_eq!(
        log_lines(&back, 1),
        [format!("127.0.0.1 {port} GET /through HTTP/1.1 200")]
    );
}
