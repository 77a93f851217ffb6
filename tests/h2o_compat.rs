//! h2o's configurations and answers, run unchanged by a real spate: a path mapped to a list
//! of handler blocks, `!file` includes and `!env` values, and directives that only tune h2o's
//! internals (accepted with a warning).

mod common;

use common::*;
use std::io::Write;

/// A document root with `hello.txt` and `sub/index.html`, and `config` (with `$DIR`) started.
fn site_with(config: &str) -> Spate {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "htdocs/hello.txt", b"hello world\n");
    write_file(dir.path(), "htdocs/sub/index.html", b"sub index\n");
    write_file(
        dir.path(),
        "second/only-here.txt",
        b"from the second root\n",
    );
    Spate::start_in(config, dir)
}

/// h2o's `file.dir` then `proxy.reverse.url` on one path: files that exist are served, the
/// rest (a missing file, a POST) goes on to the backend, and the headers block at the top
/// applies to both.
#[test]
fn a_list_of_handler_blocks_falls_through_to_the_next() {
    let backend = backend::Backend::start();
    let s = site_with(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /:
        - header.add: "x-block: one"
        - file.dir: $DIR/htdocs
        - proxy.reverse.url: {}
"#,
        backend.url("/")
    ));
    let r = get(&s, "/hello.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
    assert_eq!(r.header("x-block"), Some("one"));
    assert_eq!(get(&s, "/sub/").text(), "sub index\n");
    assert_eq!(backend.requests(), 0, "files are not asked of the backend");

    let r = get(&s, "/missing/text");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello from the backend\n");
    assert_eq!(r.header("x-block"), Some("one"));
    assert_eq!(backend.requests(), 1);

    let r = request(
        &s,
        "POST /hello.txt/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = r.text();
    assert!(
        echo.contains("method: POST\ntarget: /hello.txt/echo\n"),
        "{echo}"
    );
}

/// Two document roots on one path: the second is looked in when the first has no such file,
/// and a name in neither is 404.
#[test]
fn two_document_roots_on_one_path_are_tried_in_order() {
    let s = site_with(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        - file.dir: $DIR/htdocs
        - file.dir: $DIR/second
"#,
    );
    assert_eq!(get(&s, "/hello.txt").text(), "hello world\n");
    assert_eq!(get(&s, "/only-here.txt").text(), "from the second root\n");
    assert_eq!(get(&s, "/in-neither.txt").status, 404);
}

/// h2o's `t/50config.t`: a path's directives in a file of their own (`!file`), which itself
/// includes another, and a header value from the environment (`!env`).
#[test]
fn file_and_env_tags_configure_a_path() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "htdocs/index.html", b"the index\n");
    let d = dir.path().display().to_string();
    write_file(
        dir.path(),
        "inner.conf",
        format!("header.add: \"foo: FOO\"\nfile.dir: {d}/htdocs\n").as_bytes(),
    );
    write_file(
        dir.path(),
        "outer.conf",
        format!("!file {d}/inner.conf\n").as_bytes(),
    );
    let s = Spate::start_in_env(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /: !file $DIR/outer.conf
      /env:
        header.add: !env SPATE_COMPAT_HEADER
        file.dir: $DIR/htdocs
"#,
        dir,
        &[("SPATE_COMPAT_HEADER", "hello: world")],
    );
    let r = get(&s, "/");
    assert_eq!((r.status, r.text().as_str()), (200, "the index\n"));
    assert_eq!(r.header("foo"), Some("FOO"));
    let r = get(&s, "/env/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("hello"), Some("world"));
}

/// An h2o tree moved over: h2o resolves relative paths against its working directory (its own
/// tests name `t/assets/doc_root` from the source tree), spate against the configuration's
/// folder unless the path is found only under the working directory, as here.
#[test]
fn a_relative_path_found_only_under_the_working_directory_is_served_from_there() {
    let cwd = tempfile::tempdir().unwrap();
    write_file(
        cwd.path(),
        "t/assets/doc_root/index.txt",
        b"from the working directory\n",
    );
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("h2o.conf");
    std::fs::write(
        &conf,
        "listen: {host: 127.0.0.1, port: 0}\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: t/assets/doc_root\n",
    )
    .unwrap();
    let child = std::process::Command::new(BIN)
        .arg("-c")
        .arg(&conf)
        .current_dir(cwd.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let s = Spate::from_child(child);
    let r = get(&s, "/");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "from the working directory\n")
    );
}

/// h2o's `t/40bad-request.t`: a request line with a later HTTP/1 minor version is read as
/// HTTP/1.1, so its broken field is a 400 (not a 505 for the version), and a bare CRLF that
/// no request follows is closed quietly (not answered 408).
#[test]
fn a_broken_request_is_400_and_a_bare_crlf_closes_quietly() {
    let s = site_with(
        r#"
listen: {host: 127.0.0.1, port: 0}
http1-request-io-timeout: 1
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
"#,
    );
    let r = s.raw(b"GET / HTTP/1.2\r\na\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    let r = s.raw(b"GET /hello.txt HTTP/1.2\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    assert!(r.ends_with("hello world\n"), "{r}");

    let mut c = s.connect();
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    write_all(&mut c, b"\r\n");
    let started = std::time::Instant::now();
    assert_eq!(read_to_close(&mut c), "");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
}

/// As h2o: a path configured as `/p3/` does not answer `/p3` (no redirect: 404 from the host's
/// other paths or none), one configured as `/p4` redirects `/p4` to `/p4/`; and `/%00` names no
/// file: 404, not 400.
#[test]
fn a_slashed_path_does_not_answer_its_bare_name_and_a_nul_is_not_found() {
    let s = site_with(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /p3/:
        file.dir: $DIR/htdocs
      /p4:
        file.dir: $DIR/htdocs
"#,
    );
    assert_eq!(get(&s, "/p3/hello.txt").text(), "hello world\n");
    assert_eq!(get(&s, "/p3").status, 404);
    let r = get(&s, "/p4");
    assert_eq!((r.status, r.header("location")), (301, Some("/p4/")));
    assert_eq!(get(&s, "/p3/%00").status, 404);
    assert_eq!(get(&s, "/p3/hello.txt%00.html").status, 404);
}

/// h2o's `strict-match: ON`: the host answers only requests that name it; a request naming no
/// host goes to the first host without it, or gets 404 when there is none.
#[test]
fn a_strict_match_host_is_never_the_fallback() {
    let s = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  strict.example:
    strict-match: ON
    paths:
      /:
        respond: {body: strict}
  other.example:
    paths:
      /:
        respond: {body: other}
"#,
    );
    let ask = |host: &str| {
        request(
            &s,
            &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
    };
    assert_eq!(ask("strict.example").text(), "strict");
    assert_eq!(ask("other.example").text(), "other");
    assert_eq!(ask("unknown.example").text(), "other");

    let s = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  only.example:
    strict-match: ON
    paths:
      /:
        respond: {body: only}
"#,
    );
    let ask = |host: &str| {
        request(
            &s,
            &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
    };
    assert_eq!(ask("only.example").text(), "only");
    assert_eq!(ask("unknown.example").status, 404);
}

/// As h2o and nginx: an access-log line is in the file once its request is answered, not up to a
/// second later (spate's `buffer-size` asks for buffering).
#[test]
fn the_access_log_line_is_written_at_the_end_of_the_request() {
    let s = site_with(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
        access-log: {path: $DIR/access.log, format: "%s %U"}
"#,
    );
    let log = s.path().join("access.log");
    for (n, path) in ["/hello.txt", "/missing", "/sub/"].iter().enumerate() {
        get(&s, path);
        let started = std::time::Instant::now();
        let lines = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.lines().count() > n || started.elapsed().as_millis() > 150 {
                break text;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(lines.lines().count(), n + 1, "{lines}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text, "200 /hello.txt\n404 /missing\n200 /sub/\n");
}

/// h2o's `send-server-name: preserve`: a proxied answer carries the backend's Server and spate
/// adds none of its own (to any answer); with the default, the backend's is replaced by spate's.
#[test]
fn send_server_name_preserve_passes_the_backends_server_on() {
    let backend = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
server-name: backend-7
hosts:
  default:
    paths:
      /:
        respond: {body: from the backend}
"#,
    );
    let front = |preserve: &str| {
        site_with(&format!(
            r#"
listen: {{host: 127.0.0.1, port: 0}}
{preserve}
hosts:
  default:
    paths:
      /app:
        proxy.reverse.url: http://{}/
      /:
        file.dir: $DIR/htdocs
"#,
            backend.addr
        ))
    };
    let s = front("send-server-name: preserve");
    let r = get(&s, "/app/x");
    assert_eq!((r.status, r.text().as_str()), (200, "from the backend"));
    assert_eq!(r.header("server"), Some("backend-7"));
    assert_eq!(get(&s, "/hello.txt").header("server"), None);

    let s = front("");
    let r = get(&s, "/app/x");
    assert!(
        r.header("server").is_some_and(|v| v.starts_with("spate/")),
        "{r:?}"
    );
}

/// As h2o, which reads a request's body before the handler answers: a chunked POST to a file
/// path whose body passes `limit-request-body` gets 413, one within it the file handler's 405.
#[test]
fn a_chunked_post_over_the_body_limit_to_a_file_gets_413_before_405() {
    let s = site_with(
        r#"
listen: {host: 127.0.0.1, port: 0}
limit-request-body: 1024
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
"#,
    );
    let chunk = "x".repeat(1000);
    let big = format!(
        "POST /hello.txt HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
         3e8\r\n{chunk}\r\n3e8\r\n{chunk}\r\n0\r\n\r\n"
    );
    let r = s.raw(big.as_bytes());
    assert!(r.starts_with("HTTP/1.1 413 "), "{r}");
    let small = format!(
        "POST /hello.txt HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         3e8\r\n{chunk}\r\n0\r\n\r\n"
    );
    let r = s.raw(small.as_bytes());
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
}

/// An HTTP/2 backend over TLS (h2 by ALPN) that answers one request per connection, then
/// closes its TCP connection without a TLS close_notify (nor GOAWAY), as many do. Its third
/// argument chooses the answer: `end` ends the body with END_STREAM, `length` sends the whole
/// body its content-length announces but no END_STREAM, `short` announces 100 bytes and
/// sends 15.
const H2_TLS_CLOSER: &str = r#"
import socket, ssl, struct, sys, time
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
ctx.set_alpn_protocols(["h2"])
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(16)
print(l.getsockname()[1], flush=True)
def frame(kind, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload
def read(s, n):
    out = b""
    while len(out) < n:
        d = s.recv(n - len(out))
        if not d:
            raise EOFError
        out += d
    return out
def content_length(n):
    # Literal with incremental indexing, name index 28 (content-length), raw value.
    return b"\x5c" + bytes([len(n)]) + n
while True:
    c, _ = l.accept()
    try:
        s = ctx.wrap_socket(c, server_side=True)
        read(s, 24)
        s.sendall(frame(4, 0, 0, b""))
        while True:
            head = read(s, 9)
            n = int.from_bytes(head[:3], "big")
            kind, flags, sid = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
            read(s, n)
            if kind == 4 and not flags & 1:
                s.sendall(frame(4, 1, 0, b""))
            if kind == 1:
                break
        # :status 200 is static index 8 (0x88).
        if sys.argv[3] == "length":
            s.sendall(frame(1, 4, sid, b"\x88" + content_length(b"15")) + frame(0, 0, sid, b"complete answer"))
        elif sys.argv[3] == "short":
            s.sendall(frame(1, 4, sid, b"\x88" + content_length(b"100")) + frame(0, 0, sid, b"complete answer"))
        else:
            s.sendall(frame(1, 4, sid, b"\x88") + frame(0, 1, sid, b"complete answer"))
        time.sleep(0.05)
        # SSLSocket.shutdown drops the TLS layer first: no close_notify goes out.
        s.shutdown(socket.SHUT_RDWR)
        s.close()
    except (EOFError, OSError, ssl.SSLError):
        c.close()
"#;

/// Kills the backend process however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// rustls reports the close without close_notify as an unexpected end; an answer that came
/// whole before it (END_STREAM, or all of its content-length) still goes to the client whole,
/// and a truncated one is an error, never a shorter body passed off as complete. The answers
/// have no content-length or a streamed body: read with a client that decodes chunked.
#[test]
fn an_h2_backend_over_tls_that_closes_without_close_notify_after_its_answer_is_not_a_502() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    write_file(dir.path(), "b.crt", cert.cert.pem().as_bytes());
    write_file(
        dir.path(),
        "b.key",
        cert.signing_key.serialize_pem().as_bytes(),
    );
    write_file(dir.path(), "closer.py", H2_TLS_CLOSER.as_bytes());
    let start = |mode: &str| -> (KillOnDrop, u16) {
        let mut child = KillOnDrop(
            std::process::Command::new("python3")
                .arg(dir.path().join("closer.py"))
                .arg(dir.path().join("b.crt"))
                .arg(dir.path().join("b.key"))
                .arg(mode)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.0.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        (child, line.trim().parse().unwrap())
    };
    let (_end, end) = start("end");
    let (_length, length) = start("length");
    let (_short, short) = start("short");
    let s = site_with(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /end:
        proxy.reverse.url: https://localhost:{end}/
        proxy.ssl.verify-peer: OFF
        proxy.http2.ratio: 100
      /length:
        proxy.reverse.url: https://localhost:{length}/
        proxy.ssl.verify-peer: OFF
        proxy.http2.ratio: 100
      /short:
        proxy.reverse.url: https://localhost:{short}/
        proxy.ssl.verify-peer: OFF
        proxy.http2.ratio: 100
"#
    ));
    let fetch = |path: &str| -> (u16, Result<String, String>) {
        let mut r = agent().get(&s.url(path)).call().unwrap();
        let body = r.body_mut().read_to_string().map_err(|e| e.to_string());
        (r.status().as_u16(), body)
    };
    for i in 0..3 {
        for path in ["/end", "/length"] {
            assert_eq!(
                fetch(path),
                (200, Ok("complete answer".to_string())),
                "{path}, request {i}"
            );
        }
        // Complete per content-length, the client's connection stays open for the next.
        let mut c = s.connect();
        let mut pending = Vec::new();
        for _ in 0..2 {
            c.write_all(b"GET /length HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap();
            let r = read_response(&mut c, &mut pending, false);
            assert_eq!((r.status, r.text().as_str()), (200, "complete answer"));
        }
        let (status, body) = fetch("/short");
        assert!(
            status == 502 || body.is_err(),
            "a truncated answer passed as whole: {status} {body:?}"
        );
    }
}

/// h2o's `proxy.header.cookie.unset` removes the named cookies from the request sent to the
/// backend, `proxy.header.cookie.unsetunless` every cookie but the named ones; a Cookie
/// field left empty is dropped.
#[test]
fn proxy_header_cookie_unset_and_unsetunless_filter_the_cookies_sent_on() {
    let b = common::backend::Backend::start();
    let s = site_with(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /unset:
        proxy.reverse.url: {url}
        proxy.header.cookie.unset: [session, tracker]
      /unless:
        proxy.reverse.url: {url}
        proxy.header.cookie.unsetunless: session
"#,
        url = b.url("/")
    ));
    let cookie_sent = |path: &str, cookie: &str| -> Option<String> {
        let r = request(
            &s,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(r.status, 200, "{r:?}");
        let echo = common::backend::Echo::parse(&r.body).unwrap();
        echo.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("cookie"))
            .map(|(_, v)| v.clone())
    };
    let all = "session=abc; theme=dark; tracker=1; lang=en";
    assert_eq!(
        cookie_sent("/unset/e", all).as_deref(),
        Some("theme=dark; lang=en")
    );
    assert_eq!(
        cookie_sent("/unless/e", all).as_deref(),
        Some("session=abc")
    );
    assert_eq!(cookie_sent("/unset/e", "session=1; tracker=2"), None);
    assert_eq!(cookie_sent("/unless/e", "theme=dark"), None);
}
