//! Interim responses through the proxy (103 Early Hints, 102): a backend's go on to the client
//! ahead of the final answer, over HTTP/1.1 (with `send-informational: all`), HTTP/2 and
//! HTTP/3, as h2o's `send-informational` says; the malformed and endless ones get a 502.
//!
//! The backend is a small HTTP/1.1 server in this process writing raw bytes, by path:
//!
//! | path | answer |
//! |---|---|
//! | `/hints` | two 103s with Link fields, then 200 `final\n` |
//! | `/gated` | a 103, then the 200 only once the test says so |
//! | `/bare103` | a 103 without fields (not passed on, as h2o), then 200 |
//! | `/endless` | 103s until the connection closes |
//! | `/bodylen` | a 103 with `Content-Length: 5` and five bytes, then 200 |
//! | `/after` | 200 `ok`, then a 103 after it |

mod common;
mod tls_support;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

const HINTS: &[u8] =
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n\
HTTP/1.1 103 Early Hints\r\nLink: </app.js>; rel=preload; as=script\r\n\r\n";
const FINAL: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nfinal\n";

struct Backend {
    addr: SocketAddr,
    /// Connections accepted.
    connections: Arc<AtomicUsize>,
    /// Lets `/gated` send its final answer.
    release: mpsc::Sender<()>,
}

impl Backend {
    fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let gate = gate.clone();
                std::thread::spawn(move || serve(s, &gate));
            }
        });
        Backend {
            addr,
            connections,
            release,
        }
    }
}

/// Answers the requests of one connection (GETs: no bodies) by path.
fn serve(s: TcpStream, gate: &Mutex<mpsc::Receiver<()>>) {
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut w = s;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("/").to_string();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
        }
        let ok = match path.as_str() {
            "/hints" => w.write_all(HINTS).and_then(|_| w.write_all(FINAL)),
            "/gated" => {
                let hint = b"HTTP/1.1 103 Early Hints\r\nLink: </gated.css>; rel=preload\r\n\r\n";
                let sent = w.write_all(hint);
                let _ = gate.lock().map(|g| g.recv_timeout(std::time::Duration::from_secs(30)));
                sent.and_then(|_| w.write_all(FINAL))
            }
            "/bare103" => w
                .write_all(b"HTTP/1.1 103 Early Hints\r\n\r\n")
                .and_then(|_| w.write_all(FINAL)),
            "/endless" => loop {
                let hint = b"HTTP/1.1 103 Early Hints\r\nLink: </again.css>\r\n\r\n";
                if w.write_all(hint).is_err() {
                    return;
                }
            },
            "/bodylen" => w
                .write_all(b"HTTP/1.1 103 Early Hints\r\nContent-Length: 5\r\n\r\nhello")
                .and_then(|_| w.write_all(FINAL)),
            "/after" => w.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\nHTTP/1.1 103 Early Hints\r\nLink: </late.css>\r\n\r\n",
            ),
            _ => w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
        };
        if ok.is_err() {
            return;
        }
    }
}

fn spate(backend: &Backend, top: &str) -> Spate {
    Spate::start(&format!(
        "{top}listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        proxy.reverse.url: http://{}\n        proxy.max-informational-responses: 4\n",
        backend.addr
    ))
}

/// `curl -v`'s response lines (`< ...`), lower-cased.
fn curl_heads(args: &[&str]) -> (Vec<String>, String) {
    let out = curl(&[&["-v"], args].concat());
    let lines = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("< "))
        .map(|l| l.trim_end().to_ascii_lowercase())
        .collect();
    (lines, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn position(lines: &[String], prefix: &str) -> Option<usize> {
    lines.iter().position(|l| l.starts_with(prefix))
}

#[test]
fn http2_clients_get_the_backends_103s_in_order_before_the_final_answer() {
    let b = Backend::start();
    let s = spate(&b, "");
    let (lines, body) = curl_heads(&["--http2-prior-knowledge", &s.url("/hints")]);
    assert_eq!(body, "final\n");
    let heads: Vec<&String> = lines.iter().filter(|l| l.starts_with("http/")).collect();
    assert_eq!(
        heads,
        ["http/2 103", "http/2 103", "http/2 200"],
        "{lines:?}"
    );
    let css = position(&lines, "link: </style.css>; rel=preload; as=style").expect("first link");
    let js = position(&lines, "link: </app.js>; rel=preload; as=script").expect("second link");
    let last = position(&lines, "http/2 200").expect("final");
    assert!(css < js && js < last, "{lines:?}");
    // The final answer does not carry the hints' fields.
    assert!(
        !lines[last..].iter().any(|l| l.starts_with("link:")),
        "{lines:?}"
    );
}

#[test]
fn nghttp_sees_the_103_headers_frame_while_the_backend_has_not_answered_yet() {
    if !have("nghttp") {
        assert!(std::env::var_os("CI").is_none(), "nghttp missing");
        eprintln!("SKIP: nghttp not installed");
        return;
    }
    let b = Backend::start();
    let s = spate(&b, "");
    let mut child = Command::new("nghttp")
        .args(["-v", "-n", &s.url("/gated")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("nghttp");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    // The backend holds its final answer until the 103 has reached the client.
    let mut line = String::new();
    while out.read_line(&mut line).unwrap_or(0) > 0 {
        seen.push(line.trim().to_string());
        line.clear();
        // nghttp prints a frame's fields, then the frame.
        let hinted = seen
            .iter()
            .any(|l| l.contains("link: </gated.css>; rel=preload"));
        if hinted
            && seen
                .last()
                .is_some_and(|l| l.contains("recv HEADERS frame"))
        {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains(":status: 103")),
        "no 103 before the final answer: {seen:?}"
    );
    let frame = seen.last().expect("a HEADERS frame");
    // END_HEADERS (0x4) without END_STREAM (0x1).
    assert!(frame.contains("flags=0x04"), "{frame}");
    b.release.send(()).expect("release");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read");
    assert!(child.wait().expect("wait").success());
    assert!(rest.contains(":status: 200"), "{rest}");
}

#[test]
fn http1_clients_get_1xx_only_with_all_and_never_over_http10() {
    let b = Backend::start();
    let default = spate(&b, "");
    let (lines, body) = curl_heads(&["--http1.1", &default.url("/hints")]);
    assert_eq!(body, "final\n");
    assert!(position(&lines, "http/1.1 103").is_none(), "{lines:?}");
    assert!(position(&lines, "link:").is_none(), "{lines:?}");

    let all = spate(&b, "send-informational: all\n");
    let (lines, body) = curl_heads(&["--http1.1", &all.url("/hints")]);
    assert_eq!(body, "final\n");
    let heads: Vec<&String> = lines.iter().filter(|l| l.starts_with("http/")).collect();
    assert_eq!(
        heads,
        [
            "http/1.1 103 early hints",
            "http/1.1 103 early hints",
            "http/1.1 200 ok"
        ],
        "{lines:?}"
    );
    assert!(
        position(&lines, "link: </style.css>").is_some(),
        "{lines:?}"
    );

    // RFC 9110 15.2: never to an HTTP/1.0 client.
    let mut c = all.connect();
    write_all(&mut c, b"GET /hints HTTP/1.0\r\nHost: x\r\n\r\n");
    let text = read_to_close(&mut c);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(!text.contains("103"), "{text}");
}

#[test]
fn none_passes_nothing_on_and_a_bare_103_is_dropped() {
    let b = Backend::start();
    let none = spate(&b, "send-informational: none\n");
    let (lines, body) = curl_heads(&["--http2-prior-knowledge", &none.url("/hints")]);
    assert_eq!(body, "final\n");
    assert!(position(&lines, "http/2 103").is_none(), "{lines:?}");

    let default = spate(&b, "");
    let (lines, body) = curl_heads(&["--http2-prior-knowledge", &default.url("/bare103")]);
    assert_eq!(body, "final\n");
    assert!(position(&lines, "http/2 103").is_none(), "{lines:?}");
}

#[test]
fn endless_and_malformed_interim_responses_get_502_and_one_log_line() {
    let b = Backend::start();
    let s = spate(&b, "");
    let (lines, _) = curl_heads(&["--http2-prior-knowledge", &s.url("/endless")]);
    assert!(position(&lines, "http/2 502").is_some(), "{lines:?}");
    let logged = s.log_lines_naming("proxy.max-informational-responses (4)", 1);
    assert_eq!(logged.len(), 1, "{logged:?}");

    let (lines, _) = curl_heads(&["--http1.1", &s.url("/bodylen")]);
    assert!(position(&lines, "http/1.1 502").is_some(), "{lines:?}");
    let logged = s.log_lines_naming("interim response with a body length", 1);
    assert_eq!(logged.len(), 1, "{logged:?}");
}

#[test]
fn an_interim_after_the_final_answer_is_not_a_new_answer() {
    let b = Backend::start();
    let s = spate(&b, "send-informational: all\n");
    for _ in 0..2 {
        let (lines, body) = curl_heads(&["--http1.1", &s.url("/after")]);
        assert_eq!(body, "ok\n");
        assert!(position(&lines, "http/1.1 103").is_none(), "{lines:?}");
    }
    // The bytes after the answer made its connection unfit for another request.
    assert_eq!(b.connections.load(Ordering::SeqCst), 2);
}

#[test]
fn http3_clients_get_the_103_before_the_final_answer() {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/aioquic-venv/bin/python");
    if !py.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "target/aioquic-venv is missing"
        );
        eprintln!("SKIP: target/aioquic-venv is missing (scripts/test installs aioquic)");
        return;
    }
    let b = Backend::start();
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "h3", "localhost", false);
    let backend = b.addr;
    let (s, _) = Spate::start_on_ports(
        dir,
        || [free_ports::<1>()[0]],
        |[p]| {
            format!(
                "listen: &tls\n  host: 127.0.0.1\n  port: {p}\n  ssl:\n    certificate-file: $DIR/h3.crt\n    key-file: $DIR/h3.key\nlisten:\n  <<: *tls\n  type: quic\nhosts:\n  default:\n    paths:\n      /:\n        proxy.reverse.url: http://{backend}\n"
            )
        },
        &[],
    );
    let out = aioquic_run(&py, s.addr.port(), &["/hints"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("\"status\": 200"), "{text}");
    let interim = &text[text.find("\"interim\": ").expect("interim")..];
    let css = interim
        .find("</style.css>; rel=preload; as=style")
        .expect("first 103");
    let js = interim
        .find("</app.js>; rel=preload; as=script")
        .expect("second 103");
    assert!(css < js, "{interim}");
    assert_eq!(interim.matches("[103, ").count(), 2, "{interim}");
}

#[test]
fn header_commands_with_when_early_send_a_103_of_their_own_before_a_later_answer() {
    let b = Backend::start();
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "page.html", b"<p>page</p>\n");
    let s = Spate::start_in(
        &format!(
            "send-informational: all\nlisten: 0\nhosts:\n  default:\n    paths:\n      /app:\n        header.add:\n          header: [\"Link: </style.css>; rel=preload; as=style\", \"X-Early: yes\"]\n          when: early\n        header.set:\n          header: \"X-Both: 1\"\n          when: all\n        proxy.reverse.url: http://{}/\n      /static:\n        header.add:\n          header: \"Link: </style.css>; rel=preload; as=style\"\n          when: early\n        file.dir: $DIR\n",
            b.addr
        ),
        dir,
    );
    // The path's own 103, then the backend's bare one, which the same commands filled.
    let (lines, body) = curl_heads(&["--http1.1", &s.url("/app/bare103")]);
    assert_eq!(body, "final\n");
    let heads: Vec<&String> = lines.iter().filter(|l| l.starts_with("http/")).collect();
    assert_eq!(
        heads,
        [
            "http/1.1 103 early hints",
            "http/1.1 103 early hints",
            "http/1.1 200 ok"
        ],
        "{lines:?}"
    );
    let last = position(&lines, "http/1.1 200").expect("final");
    let early = &lines[..last];
    for want in [
        "link: </style.css>; rel=preload; as=style",
        "x-early: yes",
        "x-both: 1",
    ] {
        let n = early.iter().filter(|l| *l == want).count();
        assert_eq!(n, 2, "{want} in {lines:?}");
    }
    // `when: early` fields stay off the final answer; `when: all` ones are on both.
    let fin = &lines[last..];
    assert!(
        position(fin, "x-early").is_none() && position(fin, "link").is_none(),
        "{lines:?}"
    );
    assert!(position(fin, "x-both: 1").is_some(), "{lines:?}");

    // An answer ready now (a file) goes out at once, without a 103.
    let (lines, body) = curl_heads(&["--http1.1", &s.url("/static/page.html")]);
    assert_eq!(body, "<p>page</p>\n");
    assert!(position(&lines, "http/1.1 103").is_none(), "{lines:?}");
}

#[test]
fn an_http2_backends_103s_go_on_too() {
    let b = Backend::start();
    // The HTTP/2 backend is spate itself, passing the raw backend's 103s on over h2c after
    // one of its own.
    let back = Spate::start(&format!(
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        header.add:\n          header: \"Link: </own.css>; rel=preload\"\n          when: early\n        proxy.reverse.url: http://{}\n",
        b.addr
    ));
    let front = Spate::start(&format!(
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        proxy.reverse.url: http://{}\n        proxy.http2.ratio: 100\n        proxy.http2.force-cleartext: ON\n        proxy.max-informational-responses: 3\n",
        back.addr
    ));
    let (lines, body) = curl_heads(&["--http2-prior-knowledge", &front.url("/hints")]);
    assert_eq!(body, "final\n");
    let heads: Vec<&String> = lines.iter().filter(|l| l.starts_with("http/")).collect();
    assert_eq!(
        heads,
        ["http/2 103", "http/2 103", "http/2 103", "http/2 200"],
        "{lines:?}"
    );
    let own = position(&lines, "link: </own.css>").expect("the back's own 103");
    let css = position(&lines, "link: </style.css>").expect("first forwarded");
    let js = position(&lines, "link: </app.js>").expect("second forwarded");
    assert!(own < css && css < js, "{lines:?}");

    // More than the limit over HTTP/2 is a 502 too.
    let (lines, _) = curl_heads(&["--http2-prior-knowledge", &front.url("/endless")]);
    assert!(position(&lines, "http/2 502").is_some(), "{lines:?}");
    let logged = front.log_lines_naming("proxy.max-informational-responses (3)", 1);
    assert_eq!(logged.len(), 1, "{logged:?}");
}

#[test]
fn when_early_commands_edit_a_backends_103s_as_h2o_does() {
    let b = Backend::start();
    let s = spate(
        &b,
        "header.unset: {header: Link, when: early}\nheader.add: {header: \"X-Foo: FOO\", when: early}\n",
    );
    let (lines, body) = curl_heads(&["--http2-prior-knowledge", &s.url("/hints")]);
    assert_eq!(body, "final\n");
    let heads: Vec<&String> = lines.iter().filter(|l| l.starts_with("http/")).collect();
    assert_eq!(
        heads,
        ["http/2 103", "http/2 103", "http/2 103", "http/2 200"],
        "{lines:?}"
    );
    assert!(position(&lines, "link:").is_none(), "{lines:?}");
    let last = position(&lines, "http/2 200").expect("final");
    assert_eq!(
        lines[..last].iter().filter(|l| *l == "x-foo: foo").count(),
        3,
        "{lines:?}"
    );
    assert!(position(&lines[last..], "x-foo").is_none(), "{lines:?}");
}
