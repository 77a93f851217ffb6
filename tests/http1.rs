//! HTTP/1.1 behaviour against a real spate: keep-alive, pipelining, bodies, errors, timeouts,
//! connection limits and graceful shutdown.

mod common;

use common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A server with the S6 "server core" answer on /answer and a fixed text on /.
fn answer_server(extra: &str) -> Spate {
    Spate::start(&format!(
        r#"
listen:
  host: 127.0.0.1
  port: 0
server-name: bench
{extra}
hosts:
  default:
    paths:
      /answer:
        respond:
          body: "42"
          content-type: text/plain
          methods: [GET]
      /:
        respond:
          body: "root"
"#
    ))
}

#[test]
fn answers_the_server_core_request_exactly() {
    // The S6 configuration: only GET /answer exists.
    let s = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
server-name: bench
hosts:
  default:
    paths:
      /answer:
        respond: {body: "42", content-type: text/plain, methods: [GET]}
"#,
    );
    let r = get(&s, "/answer");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "42");
    assert_eq!(r.header("server"), Some("bench"));
    assert_eq!(r.header("connection"), Some("keep-alive"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("content-length"), Some("2"));
    let date = r.header("date").expect("a Date header");
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
    // Any other method or path: 404.
    let post = "POST /answer HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(request(&s, post).status, 404);
    assert_eq!(get(&s, "/answerx").status, 404);
    assert_eq!(get(&s, "/").status, 404);
    assert_eq!(get(&s, "/other").status, 404);
}

#[test]
fn a_rust_client_gets_the_answer() {
    let s = answer_server("");
    let mut resp = agent().get(&s.url("/answer")).call().expect("request");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.body_mut().read_to_string().unwrap(), "42");
}

#[test]
fn send_server_name_off_omits_the_header() {
    let s = answer_server("send-server-name: OFF");
    let r = get(&s, "/answer");
    assert_eq!(r.status, 200);
    assert!(r.header("server").is_none(), "{:?}", r.headers);
}

#[test]
fn keeps_the_connection_alive_across_requests() {
    let s = answer_server("");
    let mut c = s.connect();
    let mut pending = Vec::new();
    for _ in 0..5 {
        c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!(r.text(), "42");
    }
}

#[test]
fn http10_closes_unless_keep_alive_is_asked() {
    let s = answer_server("");
    let out = s.raw(b"GET /answer HTTP/1.0\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.contains("Connection: close\r\n"), "{out}");
    assert!(out.ends_with("42"), "{out}");

    let mut c = s.connect();
    let mut pending = Vec::new();
    for _ in 0..2 {
        c.write_all(b"GET /answer HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
}

#[test]
fn connection_close_is_honoured() {
    let s = answer_server("");
    let out = s.raw(b"GET /answer HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(out.matches("HTTP/1.1 200").count(), 1, "{out}");
    assert!(out.contains("Connection: close\r\n"));
}

/// An h2c upgrade needs `upgrade` among the Connection options (RFC 9110 7.8): without it
/// the `Upgrade` field is not for this hop, and the request is answered on HTTP/1.1.
#[test]
fn h2c_upgrade_without_connection_upgrade_is_answered_on_http1() {
    let s = answer_server("");
    let settings = "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n";
    let out = s.raw(
        format!("GET /answer HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n{settings}Connection: close\r\n\r\n")
            .as_bytes(),
    );
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\n42"), "{out}");
    // With it, the upgrade happens: `curl --http2` in tests/h2.rs.
}

/// A worker keeps the parse of a repeated request head (`ParseMemo`): requests after it
/// that differ in a byte, alone or pipelined behind a repeat, are answered and logged as
/// themselves; so are repeats after them.
#[test]
fn repeated_and_changed_heads_are_each_answered_as_sent() {
    let mut s = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
num-threads: 1
hosts:
  default:
    access-log:
      path: $DIR/access.log
      format: "%r %s %b %{x-tag}i"
    paths:
      /answer:
        respond: {body: "42", methods: [GET]}
      /answex:
        respond: {body: "x"}
"#,
    );
    let head = |path: &str, tag: &str, conn: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: a\r\nX-Tag: {tag}\r\nConnection: {conn}\r\n\r\n")
    };
    let a = head("/answer", "aa", "keep-alive");
    let mut c = s.connect();
    let mut pending = Vec::new();
    // Three times the same head: parsed in full, kept, then a hit.
    for _ in 0..3 {
        c.write_all(a.as_bytes()).unwrap();
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    }
    // The same length, another path, then another method.
    c.write_all(head("/answex", "aa", "keep-alive").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "x");
    c.write_all(a.replacen("GET", "PUT", 1).as_bytes()).unwrap();
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.status, 404);
    // Kept again; then pipelined: a repeat (a hit with another head behind it), a changed
    // header value, a repeat.
    for _ in 0..2 {
        c.write_all(a.as_bytes()).unwrap();
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    }
    let batch = [a.clone(), head("/answer", "bb", "keep-alive"), a.clone()].concat();
    c.write_all(batch.as_bytes()).unwrap();
    for _ in 0..3 {
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    }
    // The same length and path, but `Connection: close`: the connection ends after it.
    c.write_all(head("/answer", "cc", "close     ").as_bytes())
        .unwrap();
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.header("connection"), Some("close"));
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty());
    let dir = s.path().to_path_buf();
    assert!(s.stop().success());
    let log = std::fs::read_to_string(dir.join("access.log")).unwrap();
    let want = [
        "GET /answer HTTP/1.1 200 2 aa",
        "GET /answer HTTP/1.1 200 2 aa",
        "GET /answer HTTP/1.1 200 2 aa",
        "GET /answex HTTP/1.1 200 1 aa",
        "PUT /answer HTTP/1.1 404 10 aa",
        "GET /answer HTTP/1.1 200 2 aa",
        "GET /answer HTTP/1.1 200 2 aa",
        "GET /answer HTTP/1.1 200 2 aa",
        "GET /answer HTTP/1.1 200 2 bb",
        "GET /answer HTTP/1.1 200 2 aa",
        "GET /answer HTTP/1.1 200 2 cc",
    ];
    assert_eq!(log.lines().collect::<Vec<_>>(), want, "{log}");
}

#[test]
fn pipelined_requests_are_answered_in_order_in_one_write() {
    let s = answer_server("");
    let mut c = s.connect();
    let mut batch = Vec::new();
    for i in 0..10 {
        let path = if i % 2 == 0 { "/answer" } else { "/" };
        batch.extend_from_slice(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    }
    c.write_all(&batch).unwrap();
    let mut pending = Vec::new();
    for i in 0..10 {
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!(
            r.text(),
            if i % 2 == 0 { "42" } else { "root" },
            "response {i}"
        );
    }
}

#[test]
fn head_has_length_but_no_body() {
    let s = answer_server("");
    let mut c = s.connect();
    c.write_all(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut pending = Vec::new();
    let head = read_response(&mut c, &mut pending, true);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("4"));
    assert!(head.body.is_empty());
    // The next response starts right after the head: no stray body bytes.
    let get = read_response(&mut c, &mut pending, false);
    assert_eq!(get.text(), "42");
}

#[test]
fn request_bodies_are_framed_correctly() {
    let s = answer_server("");
    let mut c = s.connect();
    c.write_all(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello worldGET /answer HTTP/1.1\r\nHost: a\r\n\r\n\
          POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
          GET /answer HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .unwrap();
    let mut pending = Vec::new();
    let texts: Vec<String> = (0..4)
        .map(|_| read_response(&mut c, &mut pending, false).text())
        .collect();
    assert_eq!(texts, ["root", "42", "root", "42"]);
}

#[test]
fn a_body_sent_in_pieces_is_waited_for() {
    // As h2o, a chunked body the handler does not read is read before the answer.
    let s = answer_server("");
    let mut c = s.connect();
    c.write_all(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut early = [0u8; 64];
    assert!(
        c.read(&mut early).is_err(),
        "answered before the body ended"
    );
    c.set_read_timeout(None).unwrap();
    c.write_all(b"\r\n0\r\n\r\nGET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "root");
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
}

#[test]
fn expect_continue_gets_100_first() {
    let s = answer_server("");
    let mut c = s.connect();
    c.write_all(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let mut pending = Vec::new();
    let interim = read_response(&mut c, &mut pending, false);
    assert_eq!(interim.status, 100);
    let fin = read_response(&mut c, &mut pending, false);
    assert_eq!(fin.status, 200);
    c.write_all(b"bodyGET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
}

#[test]
fn curl_posts_with_expect_continue() {
    if !have("curl") {
        eprintln!("curl not installed; skipping");
        return;
    }
    let s = answer_server("");
    let body = s.path().join("body.bin");
    std::fs::write(&body, vec![b'x'; 2 * 1024 * 1024]).unwrap();
    let data = format!("@{}", body.display());
    let out = curl(&[
        "-H",
        "Expect: 100-continue",
        "--data-binary",
        &data,
        &s.url("/"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "root");
}

#[test]
fn absolute_form_targets_route_by_their_authority() {
    let s = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  "a.example":
    paths:
      /: {respond: {body: "a"}}
  "b.example":
    paths:
      /: {respond: {body: "b"}}
"#,
    );
    let r = request(
        &s,
        "GET http://b.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n",
    );
    assert_eq!(r.text(), "b");
    let r = request(&s, "GET /x HTTP/1.1\r\nHost: b.example\r\n\r\n");
    assert_eq!(r.text(), "b");
    // Unknown host: the first host answers.
    let r = request(&s, "GET /x HTTP/1.1\r\nHost: c.example\r\n\r\n");
    assert_eq!(r.text(), "a");
}

/// Sends `raw` and asserts the status and that the server closed the connection.
fn assert_rejected(s: &Spate, raw: &[u8], status: u16) {
    let out = s.raw(raw);
    let expected = format!("HTTP/1.1 {status} ");
    assert!(
        out.starts_with(&expected),
        "{:?} -> {out:?}",
        String::from_utf8_lossy(raw)
    );
    assert!(out.contains("Connection: close\r\n"), "{out}");
    assert_eq!(
        out.matches("HTTP/1.1 ").count(),
        1,
        "nothing after an error: {out}"
    );
}

#[test]
fn malformed_requests_get_400_and_close() {
    let s = answer_server("");
    for raw in [
        &b"GET / HTTP/1.1\r\n\r\nGET /answer HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\x01b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHo st: a\r\n\r\n",
        b"GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_rejected(&s, raw, 400);
    }
    // The server is still fine.
    assert_eq!(get(&s, "/answer").text(), "42");
}

/// A chunked body the handler does not read, malformed in what arrived with the head (a
/// non-hex or overflowing size, a bad size after good chunks, a bare CR): 400 and close, as
/// nginx answers, instead of the handler's 200.
#[test]
fn malformed_chunked_body_with_the_head_gets_400() {
    let s = answer_server("");
    let head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for body in [
        "zz\r\n",
        "10000000000000000\r\n",
        "fffffffffffffffffffffff\r\nx",
        "5\r\nhello\r\ng\r\n",
        "5\r\nhello\r\n0\rX",
        "-1\r\n",
    ] {
        let raw = format!("{head}{body}GET /answer HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_rejected(&s, raw.as_bytes(), 400);
    }
    assert_eq!(get(&s, "/answer").text(), "42");
}

/// A bad chunk that arrives after the answer went out can only end the connection: the one
/// answer, then the close, and nothing read after the bad chunk is answered.
#[test]
fn malformed_chunk_after_the_first_is_400_and_closes() {
    // The body is read before the answer (as h2o): a bad chunk is the answer, 400, then close.
    let s = answer_server("");
    let mut c = s.connect();
    c.write_all(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    c.write_all(b"zz\r\nGET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let rest = read_to_close(&mut c);
    assert!(rest.starts_with("HTTP/1.1 400 "), "{rest}");
    assert_eq!(rest.matches("HTTP/1.1").count(), 1, "{rest}");
}

/// A well-formed chunked body the handler does not read is drained, whether it came whole
/// with the head or in pieces later, and the connection then serves the next request.
#[test]
fn unread_chunked_body_is_drained_and_the_connection_reused() {
    let s = answer_server("");
    let head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    let body = "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
    let mut c = s.connect();
    let mut pending = Vec::new();
    c.write_all(format!("{head}{body}GET /answer HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "root");
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    c.write_all(head.as_bytes()).unwrap();
    for piece in ["5\r\nhel", "lo\r\n", "0\r\n", "\r\n"] {
        std::thread::sleep(Duration::from_millis(50));
        c.write_all(piece.as_bytes()).unwrap();
    }
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "root");
    c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
}

#[test]
fn rejected_requests_are_logged_once() {
    let s = answer_server("");
    assert_rejected(&s, b"GET / HTTP/1.1\r\n\r\n", 400);
    let hits = s.log_lines_naming("missing Host", 1);
    assert_eq!(hits.len(), 1, "{hits:?}");
}

#[test]
fn size_limits_have_their_own_statuses() {
    let s = answer_server("max-request-target-size: 1024\nmax-request-head-size: 8192");
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(2000));
    assert_rejected(&s, long.as_bytes(), 414);
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "v".repeat(10000)
    );
    assert_rejected(&s, big.as_bytes(), 431);
    assert_rejected(&s, b"GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505);
    assert_rejected(
        &s,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
        501,
    );
    assert_rejected(
        &s,
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: teapot\r\n\r\n",
        417,
    );
}

#[test]
fn a_body_over_the_limit_gets_413() {
    let s = answer_server("limit-request-body: 100");
    assert_rejected(
        &s,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n",
        413,
    );
    let r = request(
        &s,
        &format!(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{}",
            "x".repeat(100)
        ),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_slow_request_head_gets_408() {
    let s = answer_server("http1-request-timeout: 1");
    let mut c = s.connect();
    c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n").unwrap();
    let start = Instant::now();
    let out = read_to_close(&mut c);
    assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    let s = answer_server("http1-keepalive-timeout: 1");
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // Before the request: the timeout counts from its answer, later.
    let start = Instant::now();
    c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    let mut buf = [0u8; 16];
    assert_eq!(
        c.read(&mut buf).unwrap_or(0),
        0,
        "closed with nothing more sent"
    );
    // Well short of the default (10 s), which a loaded machine does not reach.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
}

/// The keep-alive deadline moves with each request: a connection in use past its first
/// deadline stays open (the timer set for that deadline fires and is set again), and closes
/// one timeout after its last request.
#[test]
fn the_keepalive_deadline_follows_the_last_request() {
    let s = answer_server("http1-keepalive-timeout: 3");
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut pending = Vec::new();
    // Requests every 500 ms for 5 s, well past the first request's deadline; each within the
    // timeout of the one before even on a slow machine.
    let first = Instant::now();
    while first.elapsed() < Duration::from_secs(5) {
        c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
        std::thread::sleep(Duration::from_millis(500));
    }
    // Before the last request: the timeout counts from its answer, later.
    let last = Instant::now();
    c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "closed");
    // Short of the default (10 s) and of the read timeout.
    let waited = last.elapsed();
    assert!(
        waited >= Duration::from_millis(2900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
}

#[test]
fn max_connections_pauses_accept_instead_of_failing() {
    let s = answer_server("max-connections: 2");
    let mut a = s.connect();
    let mut b = s.connect();
    let mut pending = Vec::new();
    a.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut a, &mut pending, false).text(), "42");
    b.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut b, &mut pending, false).text(), "42");
    // A third connection is queued by the kernel, not refused: it is answered once one closes.
    let mut third = s.connect();
    third
        .write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        third.read(&mut buf).is_err(),
        "answered while two connections were open"
    );
    drop(a);
    third
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut third, &mut pending, false).text(), "42");
}

#[test]
fn sigterm_lets_in_flight_requests_finish_then_exits_zero() {
    // One worker: the connections below are its.
    let mut s = answer_server("num-threads: 1");
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // Half a request is in flight when the signal arrives.
    c.write_all(b"GET /answer HTTP/1.1\r\nHo").unwrap();
    // A connection accepted after it and answered: the worker has taken `c` (accepted first)
    // and read its bytes (there before it was accepted) by then. It stays idle.
    let mut idle = s.connect();
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    idle.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut idle, &mut pending, false).text(), "42");
    signal(&s.child, libc::SIGTERM);
    // The stop took effect in the worker once it closes the idle connection; the rest of
    // the request comes after that.
    let mut buf = [0u8; 16];
    assert_eq!(
        idle.read(&mut buf).unwrap_or(0),
        0,
        "the idle one is closed"
    );
    c.write_all(b"st: a\r\n\r\n").unwrap();
    let mut pending = Vec::new();
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.text(), "42");
    assert_eq!(r.header("connection"), Some("close"));
    let status = wait_timeout(&mut s.child, Duration::from_secs(10)).expect("exited");
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigterm_closes_idle_connections_promptly() {
    let mut s = answer_server("");
    let _idle = s.connect();
    let start = Instant::now();
    let status = s.stop();
    assert!(status.success());
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// A connection idle after some requests (its wait no longer polls the stop signal each
/// time: `poll_idle`) is still woken and closed by a stop. Unparked, so that only the stop
/// can end its wait before the keep-alive timeout.
#[test]
fn sigterm_closes_a_used_idle_connection_promptly() {
    let mut s = answer_server("http1-idle-park-delay: 0\nhttp1-keepalive-timeout: 30");
    let mut c = s.connect();
    let mut pending = Vec::new();
    for _ in 0..3 {
        c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    }
    let start = Instant::now();
    let status = s.stop();
    assert!(status.success());
    assert!(start.elapsed() < Duration::from_secs(5));
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "closed");
}

#[test]
fn many_concurrent_connections_are_all_answered() {
    let s = answer_server("num-threads: 2");
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let addr = s.addr;
            std::thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut pending = Vec::new();
                for _ in 0..50 {
                    c.write_all(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
                        .unwrap();
                    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// An HTTP/1.0 client knows no chunked coding: an answer of unknown length (a file compressed
/// on the fly, a proxied chunked backend) comes as it is, with no Transfer-Encoding, and the
/// connection closes at its end, even when the client asked to keep it (RFC 9112 6.3, 7).
#[test]
fn http10_gets_an_answer_of_unknown_length_until_close() {
    let backend = common::backend::Backend::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let page: Vec<u8> = (0..4000)
        .flat_map(|i| format!("line {i} of a page compressed on the fly\n").into_bytes())
        .collect();
    write_file(dir.path(), "site/page.txt", &page);
    let s = Spate::start_in(
        &format!(
            "
listen: 127.0.0.1:0
compress: ON
hosts:
  default:
    paths:
      /files:
        file.dir: $DIR/site
      /:
        proxy.reverse.url: {}
",
            backend.url("/")
        ),
        dir,
    );

    // curl as an HTTP/1.0 client, the gzip left as it came: it decodes to the file.
    let r = common::clients::curl_url(
        &s.url("/files/page.txt"),
        &["--http1.0", "-H", "Accept-Encoding: gzip"],
    );
    assert_eq!((r.exit, r.status), (0, 200), "{r:?}");
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{r:?}");
    assert_eq!(r.header("transfer-encoding"), None, "{r:?}");
    assert_eq!(r.header("content-length"), None, "{r:?}");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_end(&mut unzipped)
        .expect("gzip");
    assert!(unzipped == page, "the page did not come back whole");

    // A proxied chunked answer to a raw HTTP/1.0 client that asks for keep-alive: the pieces
    // as they are, then the server closes (a read that waited for more would time out).
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    c.write_all(b"GET /chunked?pieces=3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .expect("write");
    let mut input = common::h1read::Input::new(c);
    let head = input.read_head().expect("head").expect("a response");
    let (status, headers) = common::h1read::parse_head(&head);
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(
        common::h1read::framing(&headers, false),
        common::h1read::Framing::UntilClose,
        "{headers:?}"
    );
    assert_eq!(
        common::h1read::header(&headers, "connection"),
        Some("close")
    );
    let mut body = Vec::new();
    input
        .read_to_end_to(&mut |d| body.extend_from_slice(d))
        .expect("the body, then the end of the connection");
    assert_eq!(
        String::from_utf8_lossy(&body),
        "piece 0\npiece 1\npiece 2\n"
    );

    // HTTP/1.1 still gets the same answer chunked, on a connection that stays open.
    let r = common::clients::curl_url(&s.url("/chunked?pieces=3"), &["--http1.1"]);
    assert_eq!((r.exit, r.status), (0, 200), "{r:?}");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{r:?}");
    assert_eq!(r.text(), "piece 0\npiece 1\npiece 2\n");
}
