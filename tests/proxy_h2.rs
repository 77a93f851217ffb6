//! The proxy's backends over TLS and HTTP/2 (issue 12): an `https://` backend verified
//! against a CA file (spate itself with TLS, its certificate signed by a CA made here with
//! rcgen), refused with a wrong CA or a wrong name, accepted with `proxy.ssl.verify-peer: OFF`;
//! bodies both ways compared by hash.

mod common;
mod tls_support;

use common::backend::Backend;
use common::clients::*;
use common::pattern;
use common::*;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tls_support::wait_output;

/// A CA and a leaf it signed for `localhost`, written to `dir` as `{stem}-ca.crt`,
/// `{stem}.crt` and `{stem}.key`.
fn ca_and_leaf(dir: &Path, stem: &str) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("spate test CA {stem}"));
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).expect("self-sign");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let mut leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).expect("sign");
    let write = |name: String, text: String| std::fs::write(dir.join(name), text).expect("write");
    write(format!("{stem}-ca.crt"), ca_cert.pem());
    write(format!("{stem}.crt"), leaf_cert.pem());
    write(format!("{stem}.key"), leaf_key.serialize_pem());
}

/// spate on TLS (certificate `b.crt`, signed by `b-ca.crt`) proxying to the test backend:
/// the `https://` backend of the fronts below.
fn tls_middle(b: &Backend) -> Spate {
    middle(b, Some(true))
}

/// spate proxying to the test backend, the backend of the fronts below: on TLS
/// (`Some(h2)`: certificate `b.crt` signed by `b-ca.crt`, offering h2 in ALPN or not) or in
/// cleartext (`None`: HTTP/1.1 and h2c with prior knowledge).
fn middle(b: &Backend, tls: Option<bool>) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    ca_and_leaf(dir.path(), "b");
    ca_and_leaf(dir.path(), "other");
    let ssl = match tls {
        None => String::new(),
        Some(h2) => format!(
            "  ssl:\n    certificate-file: $DIR/b.crt\n    key-file: $DIR/b.key\n    http2: {}\n",
            if h2 { "ON" } else { "OFF" }
        ),
    };
    Spate::start_in(
        &format!(
            "\
listen:
  host: 127.0.0.1
  port: 0
{ssl}num-threads: 1
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
        proxy.reverse.url: {}
",
            b.url("/")
        ),
        dir,
    )
}

/// A cleartext front (one worker) with `/metrics`, forwarding `/` to `url` (a YAML value)
/// with the `proxy.*` lines `extra`.
fn front_to(url: &str, extra: &str) -> Spate {
    Spate::start(&format!(
        "\
listen:
  host: 127.0.0.1
  port: 0
num-threads: 1
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
        proxy.reverse.url: {url}
{extra}"
    ))
}

fn https_url(m: &Spate, host: &str) -> String {
    format!("https://{host}:{}/", m.addr.port())
}

/// Waits (up to 10 s) for a line of `s`'s log containing every one of `words`.
fn log_line(s: &Spate, words: &[&str]) -> Option<String> {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < end {
        if let Some(l) = s
            .stderr_lines()
            .into_iter()
            .find(|l| words.iter().all(|w| l.contains(w)))
        {
            return Some(l);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn https_backend_verified_by_cafile() {
    let b = Backend::start();
    let m = tls_middle(&b);
    let ca = m.path().join("b-ca.crt").display().to_string();
    let f = front_to(
        &https_url(&m, "localhost"),
        &format!("        proxy.ssl.cafile: {ca}\n"),
    );
    // Several requests: the pooled TLS connection is reused.
    for proto in [Proto::H1, Proto::H2c, Proto::H1] {
        let r = fetch(&f, proto, "/text", &[]);
        assert_eq!(r.status, 200, "{proto:?}: {r:?}");
        assert_eq!(r.text(), "hello from the backend\n");
    }
    assert_eq!(b.accepted(), 1, "one connection from the TLS middle");
    // Big bodies both ways, compared by hash.
    let len = 8 * 1024 * 1024;
    for proto in [Proto::H1, Proto::H2c] {
        let out = curl(&[
            "-s",
            "-S",
            "--max-time",
            "30",
            if proto == Proto::H1 {
                "--http1.1"
            } else {
                "--http2-prior-knowledge"
            },
            &f.url(&format!("/pattern?len={len}")),
        ]);
        let (n, hash) = pattern::hash_reader(&mut &out.stdout[..]);
        assert_eq!((n, hash), (len, pattern::pattern_hash(len)), "{proto:?}");
        let r = upload(&f, proto, len);
        assert_eq!(r, format!("{len} {:016x}\n", pattern::pattern_hash(len)));
    }
}

/// POSTs `len` bytes of the pattern to `/upload` (chunked from a pipe over HTTP/1.1, without
/// a length over h2c); gives the backend's `LEN HASH` line.
pub fn upload(f: &Spate, proto: Proto, len: u64) -> String {
    let mut child = std::process::Command::new("curl")
        .args(["-s", "-S", "--max-time", "30", "-X", "POST", "-T", "-"])
        .arg(if proto == Proto::H1 {
            "--http1.1"
        } else {
            "--http2-prior-knowledge"
        })
        .arg(f.url("/upload"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run curl");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        let _ = std::io::copy(&mut pattern::Pattern::new(len), &mut stdin);
    });
    let out = wait_output(child, Duration::from_secs(40));
    let _ = feeder.join();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn https_backend_with_a_wrong_ca_or_name_is_a_502_with_one_log_line() {
    let b = Backend::start();
    let m = tls_middle(&b);
    let other = m.path().join("other-ca.crt").display().to_string();
    let f = front_to(
        &https_url(&m, "localhost"),
        &format!("        proxy.ssl.cafile: {other}\n"),
    );
    let r = fetch(&f, Proto::H1, "/text", &[]);
    assert_eq!(r.status, 502, "{r:?}");
    let line = log_line(&f, &["TLS handshake failed", "UnknownIssuer"]);
    assert!(line.is_some(), "no log line naming the failure");
    assert!(
        line.unwrap_or_default().contains("localhost"),
        "names the backend"
    );
    // The right CA, but the URL names 127.0.0.1, which the certificate does not.
    let ca = m.path().join("b-ca.crt").display().to_string();
    let f = front_to(
        &https_url(&m, "127.0.0.1"),
        &format!("        proxy.ssl.cafile: {ca}\n"),
    );
    let r = fetch(&f, Proto::H1, "/text", &[]);
    assert_eq!(r.status, 502, "{r:?}");
    assert!(
        log_line(&f, &["TLS handshake failed", "not valid for name"]).is_some(),
        "no log line naming the failure"
    );
    assert_eq!(b.requests(), 0);
}

/// The middle's count of TLS handshakes with `result`.
fn handshakes(m: &Spate, result: &str) -> u64 {
    let out = curl(&["-k", &format!("{}metrics", https_url(m, "127.0.0.1"))]);
    let text = String::from_utf8_lossy(&out.stdout);
    let key = format!("spate_tls_handshakes_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn tls_sessions_to_the_backend_are_resumed_unless_the_cache_is_off() {
    let b = Backend::start();
    let m = tls_middle(&b);
    let ca = m.path().join("b-ca.crt").display().to_string();
    for (cache, resumed) in [("ON", true), ("OFF", false)] {
        // No keep-alive: a handshake per request.
        let f = front_to(
            &https_url(&m, "localhost"),
            &format!(
                "        proxy.ssl.cafile: {ca}\n        proxy.timeout.keepalive: 0\n        proxy.ssl.session-cache: {cache}\n"
            ),
        );
        let before = handshakes(&m, "resumed");
        for _ in 0..4 {
            let r = fetch(&f, Proto::H1, "/text", &[]);
            assert_eq!(r.status, 200, "{r:?}");
        }
        let after = handshakes(&m, "resumed");
        if resumed {
            assert!(
                after >= before + 3,
                "session-cache {cache}: {before} -> {after}"
            );
        } else {
            assert_eq!(after, before, "session-cache {cache}");
        }
    }
}

#[test]
fn https_backend_without_verification() {
    let b = Backend::start();
    let m = tls_middle(&b);
    let f = front_to(
        &https_url(&m, "127.0.0.1"),
        "        proxy.ssl.verify-peer: OFF\n        proxy.ssl.session-cache: OFF\n",
    );
    for _ in 0..2 {
        let r = fetch(&f, Proto::H1, "/text", &[]);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.text(), "hello from the backend\n");
    }
}

// ---------------------------------------------------------------------------------------
// HTTP/2 to the backend.

/// The `proxy.*` lines sending every request over h2c.
const H2C: &str = "        proxy.http2.ratio: 100\n        proxy.http2.force-cleartext: ON\n";

/// The Via the echo backend saw: the middle's entry says which protocol the front used.
fn hop_versions(f: &Spate, proto: Proto) -> String {
    let r = fetch(f, proto, "/echo", &[]);
    assert_eq!(r.status, 200, "{r:?}");
    let e = common::backend::Echo::parse(&r.body).expect("an echo");
    e.header("via").unwrap_or_default().to_string()
}

#[test]
fn h2c_backend_carries_requests_trailers_and_bodies() {
    let b = Backend::start();
    let m = middle(&b, None);
    let f = front_to(&format!("http://127.0.0.1:{}/", m.addr.port()), H2C);
    for proto in [Proto::H1, Proto::H2c] {
        let via = hop_versions(&f, proto);
        assert!(
            via.contains(", 2 127.0.0.1:"),
            "{proto:?}: the front spoke HTTP/2: {via}"
        );
        let r = fetch(&f, proto, "/chunked?pieces=3", &[]);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.text(), "piece 0\npiece 1\npiece 2\n");
        if proto.is_h2() {
            assert_eq!(r.trailer("x-trailer-one"), Some("done"), "{r:?}");
        }
    }
    // Request trailers reach the backend (here through the middle's HTTP/1.1 chunked).
    let r = h2_fetch(
        f.addr,
        H2Req::post("/echo", vec![b"abc".to_vec(), b"def".to_vec()])
            .trailer("x-req-trailer", "yes"),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let e = common::backend::Echo::parse(&r.body).expect("an echo");
    assert_eq!(e.body, b"abcdef");
    assert_eq!(e.trailer("x-req-trailer"), Some("yes"), "{e:?}");
    let len = 8 * 1024 * 1024;
    for proto in [Proto::H1, Proto::H2c] {
        let out = curl(&[
            "-s",
            "-S",
            "--max-time",
            "30",
            proto.curl_args()[0],
            &f.url(&format!("/pattern?len={len}")),
        ]);
        let (n, hash) = pattern::hash_reader(&mut &out.stdout[..]);
        assert_eq!((n, hash), (len, pattern::pattern_hash(len)), "{proto:?}");
        let r = upload(&f, proto, len);
        assert_eq!(
            r,
            format!("{len} {:016x}\n", pattern::pattern_hash(len)),
            "{proto:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// gRPC through the proxy.

/// The system Python (Debian's python3-grpcio belongs to it).
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

const GRPC_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc_echo.py");

/// The gRPC server of `grpc_echo.py`; stops when dropped (its stdin closes).
struct GrpcServer {
    child: std::process::Child,
    port: u16,
}

impl GrpcServer {
    fn start() -> Option<GrpcServer> {
        let have = std::process::Command::new(python())
            .args(["-c", "import grpc"])
            .status()
            .is_ok_and(|s| s.success());
        if !have {
            eprintln!("SKIP: python3-grpcio is not installed (scripts/test installs it)");
            return None;
        }
        let mut child = std::process::Command::new(python())
            .args([GRPC_SCRIPT, "server"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run the gRPC server");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).expect("read port");
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("gRPC server said {line:?}"));
        Some(GrpcServer { child, port })
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the gRPC client of `grpc_echo.py` against `port` (TLS when `ca` is given).
fn grpc_client(port: u16, ca: Option<&Path>) -> String {
    let mut cmd = std::process::Command::new(python());
    cmd.args([GRPC_SCRIPT, "client", &format!("127.0.0.1:{port}")]);
    if let Some(ca) = ca {
        cmd.arg(ca);
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the gRPC client");
    let out = wait_output(child, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "gRPC client failed:\n{text}");
    text
}

/// A gRPC message: the uncompressed flag, the length, the bytes.
fn grpc_message(m: &[u8]) -> bytes::Bytes {
    let mut out = vec![0u8];
    out.extend_from_slice(&(m.len() as u32).to_be_bytes());
    out.extend_from_slice(m);
    out.into()
}

/// Reads one gRPC message from `body`, keeping what follows it in `pending`.
async fn grpc_read(body: &mut h2::RecvStream, pending: &mut Vec<u8>) -> Vec<u8> {
    loop {
        if pending.len() >= 5 {
            let len = u32::from_be_bytes([pending[1], pending[2], pending[3], pending[4]]) as usize;
            if pending.len() >= 5 + len {
                let m = pending[5..5 + len].to_vec();
                pending.drain(..5 + len);
                return m;
            }
        }
        let chunk = body
            .data()
            .await
            .expect("the stream ended before the message")
            .expect("data");
        let _ = body.flow_control().release_capacity(chunk.len());
        pending.extend_from_slice(&chunk);
    }
}

/// A gRPC bidirectional stream through the proxy (h2c front, h2c backend), opened before the
/// first of 20 reloads applied in place, exchanges a message after each; at its end the
/// backend's trailers count every message (issue 43: a reload closes nothing).
#[test]
fn a_grpc_bidi_stream_goes_on_across_20_reloads() {
    let Some(g) = GrpcServer::start() else {
        return;
    };
    let yaml = |i: usize| {
        format!(
            "listen:\n  host: 127.0.0.1\n  port: 0\nnum-threads: 1\nhosts:\n  default:\n    paths:\n      /:\n        proxy.reverse.url: http://127.0.0.1:{}/\n        header.add: \"x-reload: {i}\"\n{H2C}",
            g.port
        )
    };
    let s = Spate::start(&yaml(0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut client = client.ready().await.unwrap();
        let req = http::Request::post(format!("http://{}/test.Echo/Bidi", s.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut send) = client.send_request(req, false).unwrap();
        send.send_data(grpc_message(b"before"), false).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-reload"], "0");
        let mut body = resp.into_body();
        let mut pending = Vec::new();
        assert_eq!(grpc_read(&mut body, &mut pending).await, b"before");
        for i in 1..=20 {
            std::fs::write(s.path().join("spate.yaml"), yaml(i)).unwrap();
            signal(&s.child, libc::SIGHUP);
            let end = std::time::Instant::now() + Duration::from_secs(20);
            let line = loop {
                if let Some(l) = s
                    .stderr_lines()
                    .into_iter()
                    .find(|l| l.contains("reloaded"))
                {
                    break l;
                }
                assert!(std::time::Instant::now() < end, "no reload {i}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            assert!(line.contains("in place"), "{line}");
            let m = format!("after reload {i}");
            send.send_data(grpc_message(m.as_bytes()), false).unwrap();
            assert_eq!(grpc_read(&mut body, &mut pending).await, m.as_bytes());
        }
        send.send_data(bytes::Bytes::new(), true).unwrap();
        let trailers = body.trailers().await.unwrap().expect("trailers");
        assert_eq!(trailers["grpc-status"], "0", "{trailers:?}");
        assert_eq!(trailers["x-count"], "21", "{trailers:?}");
        // A new stream routes by the last configuration.
        let req = http::Request::post(format!("http://{}/test.Echo/Unary", s.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        client = client.ready().await.unwrap();
        let (resp, mut send) = client.send_request(req, false).unwrap();
        send.send_data(grpc_message(b"new"), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.headers()["x-reload"], "20");
    });
}

#[test]
fn grpc_through_h2c_and_tls_fronts_to_an_h2c_backend() {
    let Some(g) = GrpcServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (crt, _) = tls_support::cert(dir.path(), "a", "localhost", false);
    for tls in [false, true] {
        let listen = if tls {
            "  ssl:\n    certificate-file: $DIR/a.crt\n    key-file: $DIR/a.key\n"
        } else {
            ""
        };
        let dir2 = tempfile::tempdir().expect("tempdir");
        for f in ["a.crt", "a.key"] {
            std::fs::copy(dir.path().join(f), dir2.path().join(f)).expect("copy");
        }
        let f = Spate::start_in(
            &format!(
                "\
listen:
  host: 127.0.0.1
  port: 0
{listen}num-threads: 1
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{}/
{H2C}",
                g.port
            ),
            dir2,
        );
        let out = grpc_client(f.addr.port(), tls.then_some(crt.as_path()));
        for check in [
            "unary",
            "unary-trailer",
            "error-status",
            "error-message",
            "error-trailer",
            "bidi-all",
            "bidi-trailer",
            "deadline",
            "deadline-propagated",
            "backend-cancelled",
        ] {
            assert!(
                out.lines().any(|l| l == format!("ok {check}")),
                "tls {tls}: {check} missing:\n{out}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP/2 over TLS, ALPN, load and GOAWAY.

#[test]
fn https_backend_over_h2_by_alpn_and_http1_when_it_does_not_offer_h2() {
    let b = Backend::start();
    for h2 in [true, false] {
        let m = middle(&b, Some(h2));
        let ca = m.path().join("b-ca.crt").display().to_string();
        let f = front_to(
            &https_url(&m, "localhost"),
            &format!("        proxy.ssl.cafile: {ca}\n        proxy.http2.ratio: 100\n"),
        );
        for proto in [Proto::H1, Proto::H2c, Proto::H1] {
            let via = hop_versions(&f, proto);
            let want = if h2 {
                ", 2 localhost:"
            } else {
                ", 1.1 localhost:"
            };
            assert!(via.contains(want), "h2 offered: {h2}, {proto:?}: {via}");
        }
        let len = 3 * 1024 * 1024;
        let r = upload(&f, Proto::H2c, len);
        assert_eq!(r, format!("{len} {:016x}\n", pattern::pattern_hash(len)));
    }
}

/// h2load's (succeeded, failed, errored, 2xx) from its summary.
fn h2load_counts(text: &str) -> (u64, u64, u64, u64) {
    let find = |prefix: &str, word: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| {
                l.trim_start_matches(prefix)
                    .split(", ")
                    .find_map(|part| part.trim().strip_suffix(word)?.trim().parse().ok())
            })
            .unwrap_or(0)
    };
    (
        find("requests: ", " succeeded"),
        find("requests: ", " failed"),
        find("requests: ", " errored"),
        find("status codes: ", " 2xx"),
    )
}

/// Established TCP connections to `port` on the loopback.
fn connections_to(port: u16) -> usize {
    let out = std::process::Command::new("ss")
        .args([
            "-Htn",
            "state",
            "established",
            &format!("( dport = :{port} )"),
        ])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Runs h2load with `args` on `url` in the background while counting the connections to
/// `port`: gives h2load's summary and the most connections seen at once.
fn h2load_watching(url: &str, args: &[&str], port: u16, during: impl FnOnce()) -> (String, usize) {
    let mut cmd = std::process::Command::new("h2load");
    cmd.args(args).arg(url);
    let run = std::thread::spawn(move || {
        let out = cmd.output().expect("run h2load");
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    during();
    let mut most = 0;
    while !run.is_finished() {
        most = most.max(connections_to(port));
        std::thread::sleep(Duration::from_millis(50));
    }
    (run.join().expect("h2load"), most)
}

/// spate serving a small file over HTTP/1.1 and h2c: the HTTP/2 backend of the load tests.
fn file_backend() -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "htdocs/index.txt", &[b'x'; 1000]);
    Spate::start_in(
        "\
listen:
  host: 127.0.0.1
  port: 0
num-threads: 1
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
",
        dir,
    )
}

/// The file backend, and a front sending everything to it over h2c with at most `streams`
/// per connection.
fn h2c_to_file_backend(streams: u32) -> (Spate, Spate, u16) {
    let backend = file_backend();
    let port = backend.addr.port();
    let f = front_to(
        &format!("http://127.0.0.1:{port}/"),
        &format!("{H2C}        proxy.http2.max-concurrent-streams: {streams}\n"),
    );
    (backend, f, port)
}

#[test]
fn h2load_through_an_h2_backend_multiplexed_and_across_a_goaway() {
    if !tls_support::need("h2load") {
        return;
    }
    let (backend, f, port) = h2c_to_file_backend(64);
    let url = f.url("/index.txt");
    // 4 clients x 16 streams: all of them fit on one connection to the backend.
    let args = ["-n", "40000", "-c", "4", "-m", "16", "-t", "1"];
    let (text, most) = h2load_watching(&url, &args, port, || {});
    assert_eq!(h2load_counts(&text), (40000, 0, 0, 40000), "{text}");
    assert_eq!(
        most, 1,
        "one connection to the backend carries every stream"
    );

    // The backend reloads mid-run: its old workers send GOAWAY and finish what they have;
    // new requests go on a new connection.
    let (text, _) = h2load_watching(&url, &args, port, || {
        std::thread::sleep(Duration::from_millis(300));
        signal(&backend.child, libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(300));
        signal(&backend.child, libc::SIGHUP);
    });
    assert_eq!(h2load_counts(&text), (40000, 0, 0, 40000), "{text}");
    let reloads = backend
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("reload"))
        .count();
    assert!(reloads >= 2, "the backend reloaded twice");
}

#[test]
fn max_concurrent_streams_caps_each_backend_connection() {
    if !tls_support::need("h2load") {
        return;
    }
    let (_backend, f, port) = h2c_to_file_backend(4);
    let args = ["-n", "20000", "-c", "1", "-m", "16"];
    let (text, most) = h2load_watching(&f.url("/index.txt"), &args, port, || {});
    assert_eq!(h2load_counts(&text), (20000, 0, 0, 20000), "{text}");
    // 16 requests at once, 4 per connection.
    assert!((2..=5).contains(&most), "{most} connections to the backend");
}

#[test]
fn a_client_that_goes_away_resets_the_backend_stream() {
    let b = Backend::start();
    let m = middle(&b, None);
    let f = front_to(&format!("http://127.0.0.1:{}/", m.addr.port()), H2C);
    // 300 pieces 100 ms apart (30 s); the client gives up after 2 s.
    let out = curl(&[
        "--http2-prior-knowledge",
        "--max-time",
        "2",
        &f.url("/chunked?pieces=300&delay=100"),
    ]);
    assert!(!out.status.success(), "curl gave up");
    // The front resets its stream to the middle, which drops its exchange with the backend.
    let end = std::time::Instant::now() + Duration::from_secs(15);
    let mut aborted = b.aborted();
    while aborted == 0 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
        aborted = b.aborted();
    }
    assert_eq!(aborted, 1, "the backend's answer was cut short");
    // The connection to the middle is still good for the next request.
    let r = fetch(&f, Proto::H2c, "/text", &[]);
    assert_eq!(r.status, 200, "{r:?}");
}

/// Resident memory of `pid` in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_slow_client_holds_the_backend_back_through_http2() {
    use std::io::Write;
    let b = Backend::start();
    let m = middle(&b, None);
    let f = front_to(&format!("http://127.0.0.1:{}/", m.addr.port()), H2C);
    let r = fetch(&f, Proto::H1, "/pattern?len=4000000", &["-o", "/dev/null"]);
    assert_eq!(r.status, 200, "warm-up");
    let (fpid, mpid) = (f.child.id(), m.child.id());
    let (f0, m0) = (rss_kb(fpid), rss_kb(mpid));
    let len: u64 = 200 * 1024 * 1024;
    let mut s = f.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    write!(
        s,
        "GET /pattern?len={len} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    // Nothing is read for a second: the front's stream window to the middle fills, so the
    // middle stops reading from the backend; neither holds the body.
    std::thread::sleep(Duration::from_secs(1));
    let (f1, m1) = (rss_kb(fpid), rss_kb(mpid));
    assert!(f1 < f0 + 16 * 1024, "front RSS {f0} -> {f1} kB");
    assert!(m1 < m0 + 16 * 1024, "middle RSS {m0} -> {m1} kB");
    let mut input = common::h1read::Input::new(s);
    let head = input.read_head().expect("head").expect("a response");
    assert!(head.starts_with(b"HTTP/1.1 200"));
    let mut hash = pattern::Hash64::new();
    let mut sink = |d: &[u8]| hash.update(d);
    input.read_exact_to(len, &mut sink).expect("body");
    assert_eq!(hash.finish(), pattern::pattern_hash(len));
}

// ---------------------------------------------------------------------------------------
// Lists of backends over TLS and HTTP/2.

/// The front's count of requests answered by `backend` (a URL's authority), once it is
/// `want` (workers publish their counts every 200 ms) or after a few seconds.
fn answered_by(f: &Spate, backend: &str, want: f64) -> f64 {
    use common::prometheus::{sample, scrape_until};
    let key = format!("spate_backend_requests_total{{backend={backend}}}");
    sample(
        &scrape_until(f, "/metrics", |s| sample(s, &key) == want),
        &key,
    )
}

#[test]
fn a_list_mixes_http_and_https_backends_and_probes_the_https_one_over_tls() {
    let b = Backend::start();
    let tls = middle(&b, Some(true));
    let plain = middle(&b, None);
    let ca = tls.path().join("b-ca.crt").display().to_string();
    let (t, p) = (tls.addr.port(), plain.addr.port());
    let f = front_to(
        &format!("[http://127.0.0.1:{p}/, https://localhost:{t}/]"),
        &format!(
            "        proxy.ssl.cafile: {ca}\n        proxy.http2.ratio: 100\n        \
             proxy.health-check: {{path: /text, interval: 100, timeout: 5000, fall: 3, rise: 1}}\n"
        ),
    );
    // Round-robin: in turn over HTTP/1.1 to the cleartext one (HTTP/2 there would need
    // force-cleartext) and over HTTP/2 by ALPN to the TLS one. (Both get the first URL's
    // authority as Host, as in h2o: the Via tells them apart by the version.)
    let vias: Vec<String> = (0..4).map(|_| hop_versions(&f, Proto::H1)).collect();
    let over = |want: &str| vias.iter().filter(|v| v.contains(want)).count();
    assert_eq!(over(", 1.1 127.0.0.1:"), 2, "{vias:?}");
    assert_eq!(over(", 2 127.0.0.1:"), 2, "{vias:?}");
    assert_eq!(answered_by(&f, &format!("localhost:{t}"), 2.0), 2.0);
    // The probes of the TLS backend are TLS handshakes that pass (a cleartext probe would
    // fail, and with fall: 3 take it out within a few hundred ms; fall: 3 and the long
    // timeout keep one slow probe on a loaded machine from doing so).
    // Each look at the middle's metrics is a full handshake too (a new curl), two per
    // `passed`: they are taken off, so only the probes count.
    let passed = || handshakes(&tls, "full") + handshakes(&tls, "resumed");
    let before = passed();
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let mut looks = 0;
    let mut probes = 0;
    while probes < 4 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
        looks += 1;
        probes = passed().saturating_sub(before + 2 * looks);
    }
    assert!(probes >= 4, "probes over TLS: {probes} in {looks} looks");
    let samples = common::prometheus::scrape_until(&f, "/metrics", |_| true);
    for backend in [format!("localhost:{t}"), format!("127.0.0.1:{p}")] {
        // Health is the process's: no publishing delay.
        let key = format!("spate_backend_up{{backend={backend}}}");
        assert_eq!(common::prometheus::sample(&samples, &key), 1.0, "{key}");
    }
}

#[test]
fn least_conn_counts_a_request_in_flight_on_a_multiplexed_http2_connection() {
    let b = Backend::start();
    let tls = middle(&b, Some(true));
    let plain = middle(&b, None);
    let ca = tls.path().join("b-ca.crt").display().to_string();
    let (t, p) = (tls.addr.port(), plain.addr.port());
    let f = front_to(
        &format!(
            "\n          backends:\n            - {{url: https://localhost:{t}/, weight: 3}}\n            \
             - http://127.0.0.1:{p}/\n          balancer: least-conn"
        ),
        &format!("        proxy.ssl.cafile: {ca}\n        proxy.http2.ratio: 100\n"),
    );
    // Nothing in flight: the heavier TLS backend, over HTTP/2. While that slow request is in
    // flight on its stream, the next one goes to the other backend: 1 of 3 against 0 of 1
    // (a stream that did not count would leave a tie, which the heavier one wins).
    let url = f.url("/delay?ms=8000");
    let slow = std::thread::spawn(move || curl(&["-s", "--max-time", "30", &url]));
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while b.requests() == 0 {
        assert!(
            std::time::Instant::now() < end,
            "the slow request never arrived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // (Both get the first URL's authority as Host: the version tells them apart.)
    let via = hop_versions(&f, Proto::H1);
    assert!(via.contains(", 1.1 localhost:"), "{via}");
    let out = slow.join().expect("slow request");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "late\n");
    assert_eq!(answered_by(&f, &format!("localhost:{t}"), 1.0), 1.0);
    assert_eq!(answered_by(&f, &format!("127.0.0.1:{p}"), 1.0), 1.0);
}
