//! h2o's directives that change answers, against a real spate: `file.file`,
//! `file.send-compressed: gunzip`, and the rest of issue 38's list. Each test names the h2o
//! behaviour it checks (h2o's docs and its `t/` tests).

mod common;

use common::*;
use std::io::Write;
use std::process::Command;

/// `spate -t` on `yaml`: whether it passed, and its standard error.
fn check(yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conf.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .args(["-t", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// curl's answer: the head (lowercase) and the body as sent (curl decodes nothing).
fn fetch(s: &Spate, path: &str, extra: &[&str]) -> (String, Vec<u8>) {
    let url = s.url(path);
    let mut args = vec!["-D", "/dev/stderr"];
    args.extend_from_slice(extra);
    args.push(&url);
    let out = curl(&args);
    (
        String::from_utf8_lossy(&out.stderr).to_ascii_lowercase(),
        out.stdout,
    )
}

/// h2o's t/50file-file.t: `file.file` maps a path to one file; its type comes from the real
/// file's extension, and other paths are 404.
#[test]
fn file_file_serves_one_file_for_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let jpeg = vec![0xffu8; 40_000];
    write_file(dir.path(), "assets/halfdome.jpg", &jpeg);
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /favicon.ico:
        file.file: $DIR/assets/halfdome.jpg
"#,
        dir,
    );
    assert_eq!(get(&s, "/").status, 404);
    let r = get(&s, "/favicon.ico");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("image/jpeg"));
    assert_eq!(r.header("content-length"), Some("40000"));
    assert_eq!(r.body, jpeg);
    // Conditional requests work as for file.dir.
    let etag = r.header("etag").unwrap().to_owned();
    let r = request(
        &s,
        &format!("GET /favicon.ico HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n"),
    );
    assert_eq!(r.status, 304);
}

/// A `file.file` naming a missing file answers 404; one naming a directory 403.
#[test]
fn file_file_missing_or_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("somedir")).unwrap();
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /gone:
        file.file: $DIR/nothing-here.txt
      /dir:
        file.file: $DIR/somedir
"#,
        dir,
    );
    assert_eq!(get(&s, "/gone").status, 404);
    assert_eq!(get(&s, "/dir").status, 403);
}

/// h2o's `file.send-compressed: gunzip` (t/50file-config.t): a file there only as `.gz` goes
/// as it is to a client that takes gzip, and decompressed to one that does not, with
/// `Vary: Accept-Encoding` either way. Over HTTP/1.1 and HTTP/2.
#[test]
fn send_compressed_gunzip_decompresses_for_clients_without_gzip() {
    let dir = tempfile::tempdir().unwrap();
    // Several output pieces' worth, so the decompressed body streams.
    let text: Vec<u8> = (0..6000)
        .flat_map(|i| format!("line {i} of alice in wonderland\n").into_bytes())
        .collect();
    let gz = gzip(&text);
    write_file(dir.path(), "htdocs/alice2.txt.gz", &gz);
    write_file(dir.path(), "htdocs/index.txt", b"plain\n");
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
        file.send-compressed: gunzip
"#,
        dir,
    );
    for proto in [&[][..], &["--http2-prior-knowledge"][..]] {
        let (head, body) = fetch(&s, "/alice2.txt", proto);
        assert!(head.contains(" 200"), "{head}");
        assert!(head.contains("vary: accept-encoding"), "{head}");
        assert!(!head.contains("content-encoding"), "{head}");
        assert!(head.contains("content-type: text/plain"), "{head}");
        assert_eq!(body.len(), text.len(), "{proto:?}");
        assert!(body == text, "{proto:?}: decompressed body differs");

        let mut args = vec!["-H", "Accept-Encoding: gzip"];
        args.extend_from_slice(proto);
        let (head, body) = fetch(&s, "/alice2.txt", &args);
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert!(head.contains("vary: accept-encoding"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", gz.len())),
            "{head}"
        );
        assert!(body == gz, "{proto:?}: the .gz is sent as it is");
    }
    // A file with no .gz is served as usual, and one in neither form is 404.
    let (head, body) = fetch(&s, "/index.txt", &[]);
    assert!(head.contains(" 200"), "{head}");
    assert_eq!(body, b"plain\n");
    assert_eq!(get(&s, "/nothing.txt").status, 404);
    // HEAD of the decompressed file: the fields without a body.
    let (head, _) = fetch(&s, "/alice2.txt", &["-I"]);
    assert!(
        head.contains(" 200") && head.contains("vary: accept-encoding"),
        "{head}"
    );
}

/// A `.gz` that is not gzip: the client gets the head and a body cut short, never a panic;
/// the server stays up.
#[test]
fn send_compressed_gunzip_with_a_broken_gz_cuts_the_body_short() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "htdocs/bad.txt.gz", &[b'x'; 50_000]);
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
        file.send-compressed: gunzip
"#,
        dir,
    );
    let out = curl(&[&s.url("/bad.txt")]);
    assert!(!out.status.success(), "curl sees an incomplete body");
    let r = get(&s, "/bad.txt.gz");
    assert_eq!(r.status, 200, "the server is still up");
    assert_eq!(s.log_lines_naming("bad .gz", 1).len(), 1);
}

/// `file.send-compressed` takes ON, OFF or gunzip; anything else is refused with its line.
#[test]
fn send_compressed_refuses_other_values_with_the_line() {
    let (ok, err) = check(
        "listen: 8080\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: /tmp\n        file.send-compressed: gunzipped\n",
    );
    assert!(!ok);
    assert!(
        err.contains("conf.yaml:7") && err.contains("ON, OFF or gunzip"),
        "{err}"
    );
    let (ok, err) = check(
        "listen: 8080\nfile.send-compressed: GUNZIP\nhosts:\n  default:\n    paths:\n      /one:\n        file.file: /etc/hostname\n",
    );
    assert!(ok, "{err}");
}

/// The `Server-Timing` lines of curl's output (headers and trailers alike), each parsed
/// into its metrics: `name; dur=MS` elements (h2o's format), every duration a number.
fn server_timings(head: &str) -> Vec<Vec<String>> {
    head.lines()
        .filter_map(|l| l.strip_prefix("server-timing:"))
        .map(|v| {
            v.trim()
                .split(", ")
                .map(|e| {
                    let (name, dur) = e.split_once("; dur=").unwrap_or_else(|| panic!("{e}"));
                    assert!(dur.parse::<f64>().is_ok(), "{e}");
                    name.to_owned()
                })
                .collect()
        })
        .collect()
}

/// nghttp's view of one HTTP/2 (h2c) exchange, as h2o's t/50server-timing.t reads it: the
/// received header fields and trailers as `name: value` lines (lowercase).
fn nghttp(s: &Spate, path: &str, extra: &[&str]) -> String {
    let out = Command::new("nghttp")
        .arg("-vn")
        .args(extra)
        .arg(s.url(path))
        .output()
        .expect("run nghttp (nghttp2-client)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_once(") ")
                .filter(|(a, _)| a.contains("recv (stream_id="))
        })
        .map(|(_, f)| f.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join("\n")
}

/// h2o's t/50server-timing.t: `server-timing: ON` gives the header always, and the trailer
/// (response, total) over HTTP/2 but not over HTTP/1.1 for a body of known length, which
/// keeps its Content-Length.
#[test]
fn server_timing_on_has_the_trailer_where_the_transport_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let page = vec![b'a'; 50_000];
    write_file(dir.path(), "htdocs/index.html", &page);
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        - server-timing: ON
        - file.dir: $DIR/htdocs
      /off:
        file.dir: $DIR/htdocs
"#,
        dir,
    );
    let (head, body) = fetch(&s, "/", &[]);
    assert_eq!(body, page);
    assert_eq!(
        server_timings(&head),
        vec![vec!["process".to_owned()]],
        "{head}"
    );
    assert!(head.contains("content-length: 50000"), "{head}");
    assert!(!head.contains("trailer:"), "{head}");

    let (_, body) = fetch(&s, "/", &["--http2-prior-knowledge"]);
    assert!(body == page);
    let head = nghttp(&s, "/", &[]);
    assert_eq!(
        server_timings(&head),
        vec![
            vec!["process".to_owned()],
            vec!["response".to_owned(), "total".to_owned()]
        ],
        "{head}"
    );
    // HEAD: the header, no trailer.
    let head = nghttp(&s, "/", &["-m1", "-H", ":method: HEAD"]);
    assert!(head.contains(":status: 200"), "{head}");
    assert_eq!(server_timings(&head).len(), 1, "{head}");
    // A path without it: nothing.
    let (head, _) = fetch(&s, "/off/", &[]);
    assert!(server_timings(&head).is_empty(), "{head}");
}

/// `server-timing: ENFORCE`: an HTTP/1.1 answer is made chunked so that it has the trailer;
/// the body is unchanged. A 404 gets them too (h2o's #1790 test).
#[test]
fn server_timing_enforce_makes_http1_chunked_with_the_trailer() {
    let dir = tempfile::tempdir().unwrap();
    let page: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    write_file(dir.path(), "htdocs/index.html", &page);
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        server-timing: enforce
        file.dir: $DIR/htdocs
"#,
        dir,
    );
    for path in ["/", "/missing"] {
        let (head, body) = fetch(&s, path, &[]);
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        assert!(head.contains("trailer: server-timing"), "{head}");
        assert!(!head.contains("content-length"), "{head}");
        assert_eq!(
            server_timings(&head),
            vec![
                vec!["process".to_owned()],
                vec!["response".to_owned(), "total".to_owned()]
            ],
            "{head}"
        );
        if path == "/" {
            assert!(body == page);
        }
    }
    // HTTP/1.0 has no chunked framing: the header only, the length kept.
    let (head, body) = fetch(&s, "/", &["--http1.0"]);
    assert_eq!(server_timings(&head).len(), 1, "{head}");
    assert!(body == page);
}

/// `server-timing` takes ON, OFF or ENFORCE, at every level; anything else is refused with
/// its line.
#[test]
fn server_timing_refuses_other_values_with_the_line() {
    let (ok, err) = check(
        "listen: 8080\nserver-timing: ON\nhosts:\n  default:\n    server-timing: OFF\n    paths:\n      /:\n        server-timing: always\n        file.dir: /tmp\n",
    );
    assert!(!ok);
    assert!(
        err.contains("conf.yaml:8") && err.contains("ON, OFF or ENFORCE"),
        "{err}"
    );
}

/// h2o's `error-log.emit-request-errors` at the path level: a path that says OFF logs no
/// line for a backend that is down, while the others (global ON) do; and the other way round.
#[test]
fn emit_request_errors_per_path() {
    let quiet = DeadPort::new();
    let loud = DeadPort::new();
    let s = Spate::start(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /quiet:
        error-log.emit-request-errors: OFF
        proxy.reverse.url: http://127.0.0.1:{}/
      /loud:
        proxy.reverse.url: http://127.0.0.1:{}/
"#,
        quiet.port, loud.port
    ));
    assert_eq!(get(&s, "/quiet/x").status, 502);
    assert_eq!(get(&s, "/loud/x").status, 502);
    assert_eq!(s.log_lines_naming(&loud.port.to_string(), 1).len(), 1);
    let named_quiet = s.log_lines_naming(&format!(":{}", quiet.port), 0);
    assert!(named_quiet.is_empty(), "{named_quiet:?}");

    // Global OFF, one path ON.
    let s = Spate::start(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
error-log.emit-request-errors: OFF
hosts:
  default:
    paths:
      /quiet:
        proxy.reverse.url: http://127.0.0.1:{}/
      /loud:
        error-log.emit-request-errors: ON
        proxy.reverse.url: http://127.0.0.1:{}/
"#,
        quiet.port, loud.port
    ));
    assert_eq!(get(&s, "/quiet/x").status, 502);
    assert_eq!(get(&s, "/loud/x").status, 502);
    assert_eq!(s.log_lines_naming(&loud.port.to_string(), 1).len(), 1);
    let named_quiet = s.log_lines_naming(&format!(":{}", quiet.port), 0);
    assert!(named_quiet.is_empty(), "{named_quiet:?}");
}

/// h2o's `reproxy: ON` (t/50reverse-proxy-config.t): the backend's answer with
/// `X-Reproxy-URL` is replaced by the resource the URL names, fetched by the proxy; without
/// `reproxy` the answer goes as it is; a loop of URLs ends in 502 after `max-delegations`.
/// The backend is another spate whose paths add the field.
#[test]
fn reproxy_fetches_the_x_reproxy_url() {
    let dir = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 239) as u8).collect();
    write_file(dir.path(), "files/big.bin", &big);
    write_file(dir.path(), "app/page.txt", b"from the application\n");
    let (_backend, [port]) = Spate::start_on_free_ports(dir, |[port]| {
        format!(
            r#"
listen: {{host: 127.0.0.1, port: {port}}}
hosts:
  default:
    paths:
      /files:
        file.dir: $DIR/files
      /app:
        header.add: "X-Reproxy-URL: http://127.0.0.1:{port}/files/big.bin"
        file.dir: $DIR/app
      /loop:
        header.add: "X-Reproxy-URL: http://127.0.0.1:{port}/loop/page.txt"
        file.dir: $DIR/app
      /tls:
        header.add: "X-Reproxy-URL: https://127.0.0.1:{port}/files/big.bin"
        file.dir: $DIR/app
"#
        )
    });
    let front = Spate::start(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /:
        reproxy: ON
        proxy.reverse.url: http://127.0.0.1:{port}/
      /plain:
        proxy.reverse.url: http://127.0.0.1:{port}/
"#
    ));
    let (head, body) = fetch(&front, "/app/page.txt", &[]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(body == big, "the reproxied resource is sent");
    let (head, body) = fetch(&front, "/app/page.txt", &["--http2-prior-knowledge"]);
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(body == big);

    let (head, body) = fetch(&front, "/plain/app/page.txt", &[]);
    assert!(head.contains("x-reproxy-url:"), "{head}");
    assert_eq!(body, b"from the application\n");

    let (head, _) = fetch(&front, "/loop/page.txt", &[]);
    assert!(head.starts_with("http/1.1 502"), "{head}");
    assert_eq!(front.log_lines_naming("max-delegations", 1).len(), 1);
    let (head, _) = fetch(&front, "/tls/page.txt", &[]);
    assert!(head.starts_with("http/1.1 502"), "{head}");
}

/// h2o's `max-delegations: 0`: no X-Reproxy-URL is followed: 502.
#[test]
fn reproxy_with_max_delegations_zero_is_502() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "app/page.txt", b"from the application\n");
    let (_backend, [port]) = Spate::start_on_free_ports(dir, |[port]| {
        format!(
            r#"
listen: {{host: 127.0.0.1, port: {port}}}
hosts:
  default:
    paths:
      /:
        header.add: "X-Reproxy-URL: http://127.0.0.1:{port}/page.txt"
        file.dir: $DIR/app
"#
        )
    });
    let front = Spate::start(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
reproxy: ON
max-delegations: 0
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{port}/
"#
    ));
    assert_eq!(get(&front, "/page.txt").status, 502);
}

/// h2o's `throttle-response: ON` (t/50throttle-response.t): `X-Traffic: N` (here from
/// `header.add`) sends the answer at about N bytes a second, and the field is taken out.
/// Only the lower bound of the time is checked: a slow machine takes longer, never less.
#[test]
fn throttle_response_paces_the_body_by_x_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    write_file(dir.path(), "htdocs/halfdome.jpg", &data);
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
throttle-response: ON
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
        header.add: "X-Traffic: 400000"
      /off:
        throttle-response: OFF
        file.dir: $DIR/htdocs
        header.add: "X-Traffic: 400000"
"#,
        dir,
    );
    for proto in [&[][..], &["--http2-prior-knowledge"][..]] {
        let started = std::time::Instant::now();
        let (head, body) = fetch(&s, "/halfdome.jpg", proto);
        let took = started.elapsed();
        assert!(head.contains(" 200"), "{head}");
        assert!(!head.contains("x-traffic"), "{head}");
        assert!(body == data, "{proto:?}");
        // 200 000 bytes at 400 000 a second, a tenth of a second's worth let through at once.
        assert!(
            took >= std::time::Duration::from_millis(350),
            "{proto:?}: {took:?}"
        );
    }
    let (head, body) = fetch(&s, "/off/halfdome.jpg", &[]);
    assert!(head.contains("x-traffic: 400000"), "{head}");
    assert!(body == data);
}

/// h2o's unix socket listener (t/40unix-socket.t): `type: unix` with the socket's file in
/// `port`, as h2o's documentation writes it, beside a TCP listener.
#[test]
fn a_unix_listener_written_with_port_as_h2o_does() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "htdocs/index.txt", b"over the socket\n");
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
listen:
  type: unix
  port: $DIR/h2o.sock
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
"#,
        dir,
    );
    let sock = s.path().join("h2o.sock").display().to_string();
    let out = curl(&["--unix-socket", &sock, "http://x/index.txt"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "over the socket\n");
}

/// h2o's `*` host (t/40virtual-host.t, "strict match, with wildcard"): `*:PORT` answers any
/// name on that port that no other host takes, and a request without a name when the others
/// are strict.
#[test]
fn a_star_host_is_the_catch_all() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "www/index.txt", b"www\n");
    write_file(dir.path(), "alt/index.txt", b"alternate\n");
    write_file(dir.path(), "third/index.txt", b"third\n");
    let (s, _) = Spate::start_on_free_ports(dir, |[port]| {
        format!(
            r#"
listen: {{host: 127.0.0.1, port: {port}}}
hosts:
  "www.example.com:{port}":
    strict-match: ON
    paths:
      /:
        file.dir: $DIR/www
  "*.example.com:{port}":
    strict-match: ON
    paths:
      /:
        file.dir: $DIR/alt
  "*:{port}":
    paths:
      /:
        file.dir: $DIR/third
"#
        )
    });
    for (host, want) in [
        ("www.example.com", "www\n"),
        ("xxx.example.com", "alternate\n"),
        ("example.org", "third\n"),
    ] {
        let r = request(
            &s,
            &format!("GET /index.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        );
        assert_eq!((r.status, r.text().as_str()), (200, want), "{host}");
    }
    let r = request(&s, "GET /index.txt HTTP/1.0\r\n\r\n");
    assert_eq!(r.text(), "third\n", "no Host");
}
