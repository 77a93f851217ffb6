//! TLS 1.3 early data (0-RTT) over TCP, `listen.ssl.early-data: ON`: a resumed client's
//! safe requests sent in early data are answered in the server's first flight, over HTTP/1.1
//! and HTTP/2; the others wait for the handshake to complete; proxied early requests carry
//! `Early-Data: 1` and a backend's `425 Too Early` is retried after the handshake; a ticket
//! carries early data once; off by default. Clients: rustls (in the dev-dependencies) and
//! openssl s_client.

mod common;
mod tls_support;

use common::early_backend::recording_backend;
use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TLS listener (`ssl_extra` in its `ssl` mapping), a static file, a proxy to `backend`
/// and the metrics page.
fn server(ssl_extra: &str, backend: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    write_file(dir.path(), "htdocs/index.html", b"<h1>early</h1>\n");
    write_file(dir.path(), "htdocs/big.bin", &big_body());
    Spate::start_in(
        &format!(
            "
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: a.crt
    key-file: a.key
{ssl_extra}
hosts:
  localhost:
    paths:
      /proxy:
        proxy.reverse.url: {backend}/b
      /metrics:
        metrics: ON
      /:
        file.dir: htdocs
"
        ),
        dir,
    )
}

/// A rustls client that trusts the server's certificate, offers `alpn` and sends early data
/// when a ticket allows it. Its ticket store is shared by the connections made with it.
fn client_config(dir: &Path, alpn: &[u8]) -> Arc<ClientConfig> {
    let cert = CertificateDer::from_pem_file(dir.join("a.crt")).expect("a.crt");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root");
    let mut c = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = vec![alpn.to_vec()];
    c.enable_early_data = true;
    Arc::new(c)
}

/// One client connection, driven by hand so that a test chooses when the client's Finished
/// goes out.
struct Conn {
    sock: TcpStream,
    tls: ClientConnection,
    /// Plaintext received so far.
    got: Vec<u8>,
    closed: bool,
}

impl Conn {
    /// Connects and, when the client holds a ticket that allows it, writes `early` as early
    /// data. Nothing is sent yet. Returns whether the early data was written.
    fn new(s: &Spate, config: &Arc<ClientConfig>, early: &[u8]) -> (Conn, bool) {
        let sock = TcpStream::connect(s.addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let name = ServerName::try_from("localhost").expect("name");
        let mut tls = ClientConnection::new(config.clone(), name).expect("client");
        let mut sent = false;
        if !early.is_empty() {
            if let Some(mut e) = tls.early_data() {
                assert!(
                    e.bytes_left() >= early.len(),
                    "the ticket allows too little"
                );
                e.write_all(early).expect("early data");
                sent = true;
            }
        }
        let conn = Conn {
            sock,
            tls,
            got: Vec::new(),
            closed: false,
        };
        (conn, sent)
    }

    /// Writes out whatever the client has queued (its first flight, its Finished, requests).
    fn flush(&mut self) {
        while self.tls.wants_write() {
            self.tls.write_tls(&mut self.sock).expect("write");
        }
    }

    /// Reads one lot from the socket and keeps what it decrypts.
    fn read_once(&mut self) {
        match self.tls.read_tls(&mut self.sock) {
            Ok(0) => self.closed = true,
            Ok(_) => {
                self.tls.process_new_packets().expect("TLS from the server");
            }
            Err(e) => panic!("read: {e}"),
        }
        let mut buf = [0; 16 * 1024];
        loop {
            match self.tls.reader().read(&mut buf) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => self.got.extend_from_slice(&buf[..n]),
                Err(_) => return,
            }
        }
    }

    /// Runs the connection (handshake included) until the server closes it.
    fn finish(self) -> (String, ClientConnection) {
        let (text, tls, _) = self.finish_bytes();
        (text, tls)
    }

    fn finish_bytes(mut self) -> (String, ClientConnection, Vec<u8>) {
        while !self.closed {
            self.flush();
            self.read_once();
        }
        let text = String::from_utf8_lossy(&self.got).into_owned();
        (text, self.tls, self.got)
    }

    /// Reads until the server's handshake flight has been processed; the client's Finished
    /// stays queued (not written).
    fn read_server_flight(&mut self) {
        self.flush();
        while self.tls.is_handshaking() && !self.closed {
            self.read_once();
        }
    }
}

/// A client resumed on `s` over `alpn` (after a full first visit), its `early` bytes sent as
/// early data in its first flight.
fn resumed_early(s: &Spate, alpn: &[u8], early: &[u8]) -> Conn {
    let config = client_config(s.dir.path(), alpn);
    if alpn == b"h2" {
        first_visit_h2(s, &config);
    } else {
        first_visit(s, &config);
    }
    let (c, sent) = Conn::new(s, &config, early);
    assert!(sent, "the ticket allowed no early data");
    c
}

/// A full handshake that leaves the client with tickets, and the answer to `GET /`.
fn first_visit(s: &Spate, config: &Arc<ClientConfig>) {
    let (mut c, _) = Conn::new(s, config, b"");
    c.tls
        .writer()
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("request");
    let (text, tls) = c.finish();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(tls.handshake_kind(), Some(rustls::HandshakeKind::Full));
}

/// The metrics page, fetched over TLS by a client of its own (a resumed one would offer
/// early data, and count).
fn metrics(s: &Spate) -> String {
    let config = client_config(s.dir.path(), b"http/1.1");
    let (mut c, _) = Conn::new(s, &config, b"");
    c.tls
        .writer()
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("request");
    c.finish().0
}

fn counter(page: &str, name: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{page}"))
}

const GET: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

/// The GET is answered in the server's first flight: the client reads the answer while its
/// Finished is still unsent.
#[test]
fn a_resumed_client_gets_its_get_sent_in_early_data_answered_in_the_first_flight() {
    let s = server("    early-data: ON", "http://127.0.0.1:9");
    let config = client_config(s.dir.path(), b"http/1.1");
    first_visit(&s, &config);
    let (mut c, sent) = Conn::new(&s, &config, GET);
    assert!(sent, "the server's ticket allows no early data");
    c.read_server_flight();
    while !c.closed && !c.got.ends_with(b"<h1>early</h1>\n") {
        c.read_once();
    }
    assert!(
        c.got.ends_with(b"<h1>early</h1>\n"),
        "{}",
        String::from_utf8_lossy(&c.got)
    );
    let (text, tls) = c.finish();
    assert_eq!(tls.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
    assert!(tls.is_early_data_accepted(), "early data refused");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("<h1>early</h1>\n"), "{text}");
    let page = metrics(&s);
    assert_eq!(counter(&page, "spate_tls_early_data_accepted_total"), 1);
    assert_eq!(counter(&page, "spate_tls_early_data_refused_total"), 0);
}

fn big_body() -> Vec<u8> {
    (0..700_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

/// A file far larger than rustls buffers, answered to an early GET, arrives whole (the
/// client's Finished goes out as the answer comes in).
#[test]
fn a_large_file_answered_in_early_data_arrives_whole() {
    let s = server("    early-data: ON", "http://127.0.0.1:9");
    let get = b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let c = resumed_early(&s, b"http/1.1", get);
    let (_, tls, got) = c.finish_bytes();
    assert!(tls.is_early_data_accepted());
    let body = find(&got, b"\r\n\r\n").map(|at| &got[at + 4..]);
    assert!(body == Some(&big_body()[..]), "{} bytes", got.len());
}

/// HTTP/2 in early data (the preface, SETTINGS and a GET's HEADERS): the GET is answered in
/// the server's first flight, while the client's Finished is still unsent.
#[test]
fn an_http2_get_in_early_data_is_answered_in_the_first_flight() {
    let s = server("    early-data: ON", "http://127.0.0.1:9");
    let mut c = resumed_early(&s, b"h2", &h2_get("/index.html"));
    c.read_server_flight();
    assert!(c.tls.is_early_data_accepted(), "early data refused");
    c.read_h2_without_finished();
    let text = String::from_utf8_lossy(&c.got).into_owned();
    assert!(text.contains("<h1>early</h1>"), "{text:?}");
    let (_, tls) = c.finish_h2();
    assert_eq!(tls.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
    let page = metrics(&s);
    assert_eq!(counter(&page, "spate_tls_early_data_accepted_total"), 1);
}

/// An HTTP/2 POST in early data reaches its handler only once the handshake has completed:
/// while the client withholds its Finished, the backend sees nothing; after it, the POST
/// without `Early-Data`, and the client gets the backend's answer on its stream.
#[test]
fn an_http2_post_in_early_data_waits_for_the_handshake() {
    let (backend, seen) = recording_backend();
    let s = server("    early-data: ON", &backend);
    let mut c = resumed_early(&s, b"h2", &h2_post("/proxy/form", b"hello"));
    c.read_server_flight();
    assert!(c.tls.is_early_data_accepted(), "early data refused");
    // The server has everything but the Finished. What it does now it does at once; a
    // moment's wait shows that it does nothing.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        seen.lock().expect("seen").is_empty(),
        "answered before the handshake"
    );
    let (text, _) = c.finish_h2();
    assert!(text.contains("backend /b/form POST hello\n"), "{text:?}");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].early_data, None, "{seen:?}");
    let page = metrics(&s);
    assert_eq!(counter(&page, "spate_tls_early_requests_held_total"), 1);
}

/// A proxied HTTP/2 GET answered in early data carries `Early-Data: 1` to the backend, and
/// its answer comes before the client's Finished.
#[test]
fn a_proxied_early_http2_get_carries_early_data_1() {
    let (backend, seen) = recording_backend();
    let s = server("    early-data: ON", &backend);
    let mut c = resumed_early(&s, b"h2", &h2_get("/proxy/page"));
    c.read_server_flight();
    c.read_h2_without_finished();
    let text = String::from_utf8_lossy(&c.got).into_owned();
    assert!(text.contains("backend /b/page GET \n"), "{text:?}");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].early_data.as_deref(), Some("1"), "{seen:?}");
}

/// On an HTTP/2 connection whose early data was accepted, a request sent after the client's
/// Finished is not early: the backend sees `Early-Data: 1` on the first GET only.
#[test]
fn an_http2_request_after_the_finished_is_not_early() {
    let (backend, seen) = recording_backend();
    let s = server("    early-data: ON", &backend);
    let mut c = resumed_early(&s, b"h2", &h2_get("/proxy/first"));
    c.read_server_flight();
    c.read_h2_without_finished();
    c.tls
        .writer()
        .write_all(&h2_stream(3, "GET", "/proxy/second", None))
        .expect("request");
    c.run_h2_until(3);
    let text = String::from_utf8_lossy(&c.got).into_owned();
    assert!(text.contains("backend /b/second GET \n"), "{text:?}");
    let seen = seen.lock().expect("seen").clone();
    let early: Vec<_> = seen
        .iter()
        .map(|s| (s.path.as_str(), s.early_data.as_deref()))
        .collect();
    assert_eq!(
        early,
        [("/b/first", Some("1")), ("/b/second", None)],
        "{seen:?}"
    );
}

/// A backend's `425 Too Early` to an early HTTP/2 GET is not the client's answer: spate
/// routes the request again once the handshake has completed, and the client gets that one.
#[test]
fn a_backends_425_to_an_http2_request_is_retried_after_the_handshake() {
    let (backend, seen) = recording_backend();
    let s = server("    early-data: ON", &backend);
    let c = resumed_early(&s, b"h2", &h2_get("/proxy/too-early"));
    let (text, tls) = c.finish_h2();
    assert!(tls.is_early_data_accepted());
    assert!(text.contains("real answer\n"), "{text:?}");
    assert!(!text.contains("too early"), "{text:?}");
    let seen = seen.lock().expect("seen").clone();
    let early: Vec<_> = seen.iter().map(|s| s.early_data.as_deref()).collect();
    assert_eq!(early, [Some("1"), None], "{seen:?}");
    let page = metrics(&s);
    assert_eq!(counter(&page, "spate_tls_too_early_retried_total"), 1);
}

/// A POST sent in early data reaches its handler only once the handshake has completed: while
/// the client withholds its Finished, the backend sees nothing; after it, the POST without
/// `Early-Data` (it is not early any more), and the client gets the backend's answer.
#[test]
fn a_post_in_early_data_waits_for_the_handshake() {
    let (backend, seen) = recording_backend();
    let s = server("    early-data: ON", &backend);
    let post = b"POST /proxy/form HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    let mut c = resumed_early(&s, b"http/1.1", post);
    c.read_server_flight();
    assert!(c.tls.is_early_data_accepted(), "early data refused");
    // The server has everything but the Finished. What it does now it does at once; a
    // moment's wait shows that it does nothing.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        seen.lock().expect("seen").is_empty(),
        "answered before the handshake"
    );
    assert!(c.got.is_empty(), "{:?}", String::from_utf8_lossy(&c.got));
    let (text, _) = c.finish();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("backend /b/form POST hello\n"), "{text}");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].early_data, None, "{seen:?}");
    let page = metrics(&s);
    assert_eq!(counter(&page, "spate_tls_early_requests_held_total"), 1);
}

/// A proxied GET answered in early data carries `Early-Data: 1` to the backend.
#[test]
fn a_proxied_early_get_carries_early_data_1() {
    let (backend, seen) = recording_backend();
    let s = server("    early-data: ON", &backend);
    let get = b"GET /proxy/page HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let mut c = resumed_early(&s, b"http/1.1", get);
    c.read_server_flight();
    while !c.closed && !c.got.ends_with(b"backend /b/page GET \n") {
        c.read_once();
    }
    let (text, tls) = c.finish();
    assert!(tls.is_early_data_accepted());
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].early_data.as_deref(), Some("1"), "{seen:?}");
}

/// A backend's `425 Too Early` to an early request is not the client's answer: spate routes
/// the request again once the handshake has completed, and the client gets that answer.
#[test]
fn a_backends_425_is_retried_after_the_handshake() {
    let (backend, seen) = recording_backend();
    let s = server("    early-data: ON", &backend);
    let get = b"GET /proxy/too-early HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let c = resumed_early(&s, b"http/1.1", get);
    let (text, tls) = c.finish();
    assert!(tls.is_early_data_accepted());
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nreal answer\n"), "{text}");
    let seen = seen.lock().expect("seen").clone();
    let early: Vec<_> = seen.iter().map(|s| s.early_data.as_deref()).collect();
    assert_eq!(early, [Some("1"), None], "{seen:?}");
    let page = metrics(&s);
    assert_eq!(counter(&page, "spate_tls_too_early_retried_total"), 1);
}

/// The same ticket twice (openssl keeps its session file): the first use carries early data,
/// the replay is refused it, and the request the client sends again after the handshake is
/// answered.
#[test]
fn a_replayed_ticket_is_refused_early_data_and_still_answered() {
    if !tls_support::need("openssl") {
        return;
    }
    let s = server("    early-data: ON", "http://127.0.0.1:9");
    let port = s.addr.port();
    let sess = s.dir.path().join("sess.pem");
    let early = s.dir.path().join("early.txt");
    std::fs::write(&early, GET).expect("early.txt");
    let sess_arg = sess.display().to_string();
    let early_arg = early.display().to_string();
    let get = String::from_utf8_lossy(GET).into_owned();
    let out = tls_support::s_client(
        port,
        &[
            "-servername",
            "localhost",
            "-sess_out",
            &sess_arg,
            "-alpn",
            "http/1.1",
        ],
        &get,
    );
    assert!(out.contains("HTTP/1.1 200"), "{out}");
    let resumed = |input: &str| {
        tls_support::s_client(
            port,
            &[
                "-servername",
                "localhost",
                "-sess_in",
                &sess_arg,
                "-early_data",
                &early_arg,
                "-alpn",
                "http/1.1",
            ],
            input,
        )
    };
    let first = resumed("");
    assert!(first.contains("Early data was accepted"), "{first}");
    assert!(first.contains("HTTP/1.1 200"), "{first}");
    let replay = resumed(&get);
    assert!(replay.contains("Early data was rejected"), "{replay}");
    assert!(replay.contains("HTTP/1.1 200"), "{replay}");
    let page = metrics(&s);
    assert_eq!(counter(&page, "spate_tls_early_data_accepted_total"), 1);
    assert_eq!(counter(&page, "spate_tls_early_data_refused_total"), 1);
}

/// Without `early-data`, tickets allow none: the client sends its request after the
/// handshake, and gets its answer.
#[test]
fn early_data_is_off_by_default() {
    let s = server("", "http://127.0.0.1:9");
    let config = client_config(s.dir.path(), b"http/1.1");
    first_visit(&s, &config);
    let (mut c, sent) = Conn::new(&s, &config, GET);
    assert!(!sent, "a ticket allowed early data");
    c.tls.writer().write_all(GET).expect("request");
    let (text, tls) = c.finish();
    assert_eq!(tls.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

/// An `early-data` listener runs the handshake's first half itself: TLS 1.2 clients, HTTP/2
/// clients and a client that sends no TLS at all are served (or closed) as on any listener.
#[test]
fn other_clients_of_an_early_data_listener() {
    let s = server("    early-data: ON", "http://127.0.0.1:9");
    if tls_support::need("curl") {
        let url = format!("https://127.0.0.1:{}/index.html", s.addr.port());
        for args in [&["--tls-max", "1.2", "--http1.1"][..], &["--http2"][..]] {
            let mut all = vec!["-sk"];
            all.extend_from_slice(args);
            all.push(&url);
            let out = curl(&all);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "<h1>early</h1>\n",
                "{args:?}"
            );
        }
    }
    let mut plain = s.connect();
    plain
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("write");
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(!got.starts_with(b"HTTP/"), "{got:?}");
    let config = client_config(s.dir.path(), b"http/1.1");
    first_visit(&s, &config);
}

#[test]
fn a_bad_early_data_size_is_a_config_error_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    let root = dir.path().display();
    let (ok, _, err) = check_config(&format!(
        "listen:\n  port: 0\n  ssl:\n    certificate-file: {root}/a.crt\n    key-file: {root}/a.key\n    early-data: ON\n    early-data-max-size: 100000000\nhosts: {{default: {{paths: {{/: {{respond: {{}}}}}}}}}}\n"
    ));
    assert!(!ok);
    assert!(
        err.contains(":7: listen.ssl.early-data-max-size: at most 65536 bytes"),
        "{err}"
    );
}

// HTTP/2 by hand: a request of literal fields and the frames back.

fn h2_get(path: &str) -> Vec<u8> {
    h2_request("GET", path, None)
}

/// A POST of `body` (HEADERS, then one DATA frame that ends the stream).
fn h2_post(path: &str, body: &[u8]) -> Vec<u8> {
    h2_request("POST", path, Some(body))
}

fn h2_request(method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&h2_stream(1, method, path, body));
    out
}

/// Stream `id`'s frames: HEADERS of literal fields, and a DATA frame with `body`.
fn h2_stream(id: u8, method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
    let field = |n: &str, v: &str| {
        let mut f = vec![0x00, n.len() as u8];
        f.extend_from_slice(n.as_bytes());
        f.push(v.len() as u8);
        f.extend_from_slice(v.as_bytes());
        f
    };
    let mut block: Vec<u8> = [
        field(":method", method),
        field(":scheme", "https"),
        field(":authority", "localhost"),
        field(":path", path),
    ]
    .concat();
    if let Some(body) = body {
        block.extend_from_slice(&field("content-length", &body.len().to_string()));
    }
    let mut out = Vec::new();
    let len = block.len();
    // END_HEADERS, and END_STREAM without a body.
    let flags = if body.is_some() { 0x04 } else { 0x05 };
    out.extend_from_slice(&[0, (len >> 8) as u8, len as u8, 1, flags, 0, 0, 0, id]);
    out.extend_from_slice(&block);
    if let Some(body) = body {
        let len = body.len();
        out.extend_from_slice(&[0, (len >> 8) as u8, len as u8, 0, 0x01, 0, 0, 0, id]);
        out.extend_from_slice(body);
    }
    out
}

fn first_visit_h2(s: &Spate, config: &Arc<ClientConfig>) {
    let (mut c, _) = Conn::new(s, config, b"");
    c.tls.writer().write_all(&h2_get("/")).expect("request");
    let (text, _) = c.finish_h2();
    assert!(text.contains("<h1>early</h1>"), "{text:?}");
}

impl Conn {
    /// Reads (writing nothing: the client's Finished stays queued) until stream 1 has
    /// ended. A server that waits for the Finished leaves the read to time out.
    fn read_h2_without_finished(&mut self) {
        while !self.closed && !stream_ended(&self.got, 1) {
            self.read_once();
        }
        assert!(stream_ended(&self.got, 1), "closed before stream 1 ended");
    }

    /// Runs an HTTP/2 connection until stream 1 has ended (a frame of stream 1 with
    /// END_STREAM); returns what came as text.
    fn finish_h2(mut self) -> (String, ClientConnection) {
        self.run_h2_until(1);
        (String::from_utf8_lossy(&self.got).into_owned(), self.tls)
    }

    /// Runs the connection (the handshake included) until stream `id` has ended.
    fn run_h2_until(&mut self, id: u32) {
        let end = Instant::now() + Duration::from_secs(20);
        while !self.closed && !stream_ended(&self.got, id) {
            assert!(Instant::now() < end, "no answer");
            self.flush();
            self.read_once();
        }
    }
}

/// Whether the server's frames (after nothing: a server sends no preface) end stream `id`.
fn stream_ended(mut d: &[u8], id: u32) -> bool {
    while d.len() >= 9 {
        let len = (usize::from(d[0]) << 16) | (usize::from(d[1]) << 8) | usize::from(d[2]);
        let (kind, flags) = (d[3], d[4]);
        let stream = u32::from_be_bytes([d[5], d[6], d[7], d[8]]) & 0x7fff_ffff;
        if d.len() < 9 + len {
            return false;
        }
        if stream == id && (kind == 0 || kind == 1) && flags & 1 == 1 {
            return true;
        }
        d = &d[9 + len..];
    }
    false
}
