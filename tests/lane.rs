//! The HTTP/1.1 lane (`http1-lane`): a plain keep-alive connection that answered a request waits
//! in the worker's parking epoll instance, edge-triggered, and the worker answers its next
//! inline requests there, without a task. These tests read the lane from /proc: each lane
//! connection is one entry (`tfd:` line) in the parking instance, whose `data` names its record;
//! a connection that went to a task and came back has a new record, a connection answered in
//! place keeps its entry. Anything the lane does not answer (a request body, a partial head, a
//! file the socket has no room for) goes to a task with the bytes already read (and what is
//! left to send), and nothing is lost, read twice or sent twice.

mod common;

use common::parking::{Entry, EPOLLET, EPOLLONESHOT};
use common::*;
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn server(extra: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "root/small.txt", b"small file\n");
    write_file(dir.path(), "root/large.bin", &vec![b'L'; 100_000]);
    Spate::start_in(
        &format!(
            r#"
num-threads: 1
listen:
  host: 127.0.0.1
  port: 0
{extra}
hosts:
  default:
    access-log:
      path: $DIR/access.log
      format: "%r %s %b"
    paths:
      /answer:
        respond:
          body: "42"
      /files:
        file.dir: $DIR/root
"#
        ),
        dir,
    )
}

/// The lane's connections.
fn lane(s: &Spate) -> Vec<Entry> {
    common::parking::entries(s)
}

/// Waits (up to 10 s) until the lane holds `n` connections; returns them.
fn wait_lane(s: &Spate, n: usize) -> Vec<Entry> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let entries = lane(s);
        if entries.len() == n || Instant::now() > end {
            assert_eq!(entries.len(), n, "{entries:?}");
            return entries;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

const GET: &[u8] = b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n";

fn ask(c: &mut TcpStream, pending: &mut Vec<u8>) -> RawResponse {
    write_all(c, GET);
    read_response(c, pending, false)
}

/// Asserts that no more response comes (within 300 ms) on `c`.
fn nothing_more(c: &mut TcpStream, pending: &[u8]) {
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        pending.is_empty() && c.read(&mut buf).is_err(),
        "no extra answer"
    );
}

/// A connection that answered one request and waits in the lane, with its entry.
fn in_lane(s: &Spate) -> (TcpStream, Vec<u8>, Entry) {
    let mut c = s.connect();
    let mut pending = Vec::new();
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    let entry = wait_lane(s, 1)[0];
    (c, pending, entry)
}

#[test]
fn inline_requests_are_answered_in_the_lane_without_leaving_it() {
    let s = server("");
    let (mut c, mut pending, entry) = in_lane(&s);
    assert_ne!(entry.events & EPOLLET, 0, "edge-triggered: {entry:?}");
    assert_eq!(entry.events & EPOLLONESHOT, 0, "not one-shot: {entry:?}");
    for _ in 0..5 {
        let r = ask(&mut c, &mut pending);
        assert_eq!((r.status, r.text().as_str()), (200, "42"));
        assert_ne!(r.header("connection"), Some("close"));
        assert!(r.header("date").is_some());
    }
    // Pipelined, and a file and a HEAD request, all inline.
    let mut three = GET.repeat(2);
    three.extend_from_slice(b"GET /files/small.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    write_all(&mut c, &three);
    for want in ["42", "42", "small file\n"] {
        assert_eq!(read_response(&mut c, &mut pending, false).text(), want);
    }
    write_all(&mut c, b"HEAD /answer HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = read_response(&mut c, &mut pending, true);
    assert_eq!((r.status, r.header("content-length")), (200, Some("2")));
    assert_eq!(r.text(), "");
    // Still the same entry: the connection never left the lane (a task that parks it again
    // gets a new record, so new data).
    assert_eq!(lane(&s), vec![entry]);
}

#[test]
fn a_body_pipelined_behind_an_inline_request_goes_to_a_task_with_its_bytes() {
    let s = server("");
    let (mut c, mut pending, entry) = in_lane(&s);
    // An inline request, a POST whose body looks like a request, and another inline request,
    // in one write: the lane answers the first and hands the rest to a task.
    let body = b"GET /files/small.txt HTTP/1.1\r\n\r\n";
    let mut batch = GET.to_vec();
    batch.extend_from_slice(
        format!(
            "POST /answer HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    batch.extend_from_slice(body);
    batch.extend_from_slice(GET);
    write_all(&mut c, &batch);
    for _ in 0..3 {
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!((r.status, r.text().as_str()), (200, "42"));
    }
    // Nothing more: the body was not taken for a request.
    nothing_more(&mut c, &pending);
    // Back in the lane, as a new record.
    let back = wait_lane(&s, 1)[0];
    assert_eq!(back.fd, entry.fd);
    assert_ne!(back.data, entry.data, "it went through a task");
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
}

#[test]
fn a_head_split_across_writes_is_answered_once() {
    let s = server("");
    let (mut c, mut pending, _) = in_lane(&s);
    // A complete request and the start of the next, then the rest.
    let mut two = GET.repeat(2);
    let rest = two.split_off(GET.len() + 7);
    write_all(&mut c, &two);
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    std::thread::sleep(Duration::from_millis(100));
    write_all(&mut c, &rest);
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    // A head in three pieces.
    for piece in GET.chunks(12) {
        write_all(&mut c, piece);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    nothing_more(&mut c, &pending);
    wait_lane(&s, 1);
}

/// The size of `huge.bin`.
const HUGE: usize = 24 << 20;

#[test]
fn a_large_file_is_sent_from_the_lane_between_pipelined_answers() {
    let s = server("");
    let (mut c, mut pending, _) = in_lane(&s);
    write_all(
        &mut c,
        b"GET /files/large.bin HTTP/1.1\r\nHost: a\r\n\r\nGET /answer HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 100_000);
    assert!(r.body.iter().all(|&b| b == b'L'));
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    nothing_more(&mut c, &pending);
    wait_lane(&s, 1);
}

#[test]
fn what_the_socket_did_not_take_of_a_file_is_sent_by_a_task() {
    let s = server("");
    // Larger than any socket's buffers: the lane cannot send it all at once.
    let huge: Vec<u8> = (0..HUGE).map(|i| (i % 251) as u8).collect();
    write_file(s.dir.path(), "root/huge.bin", &huge);
    let (mut c, mut pending, entry) = in_lane(&s);
    write_all(
        &mut c,
        b"GET /files/huge.bin HTTP/1.1\r\nHost: a\r\n\r\nGET /answer HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    // The client reads only once the lane had to stop sending.
    std::thread::sleep(Duration::from_millis(300));
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), HUGE);
    assert!(
        r.body
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8),
        "the rest follows what the lane sent, in order"
    );
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    nothing_more(&mut c, &pending);
    let back = wait_lane(&s, 1)[0];
    assert_ne!(back.data, entry.data, "a task sent the rest");
}

#[test]
fn the_keep_alive_deadline_of_a_lane_connection_follows_its_last_request() {
    let s = server("http1-keepalive-timeout: 3");
    let (mut c, mut pending, entry) = in_lane(&s);
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // Requests for 5 s, past the first one's deadline, each within the timeout of the one
    // before (even on a slow machine).
    let first = Instant::now();
    let mut last = first;
    while first.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(500));
        // Before the request: the timeout counts from its answer, later.
        last = Instant::now();
        assert_eq!(ask(&mut c, &mut pending).text(), "42");
    }
    assert_eq!(lane(&s), vec![entry], "answered in the lane all along");
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "closed, nothing sent");
    // Short of the default (10 s) and of the read timeout.
    let waited = last.elapsed();
    assert!(
        waited >= Duration::from_millis(2900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    assert_eq!(wait_lane(&s, 0), vec![]);
}

#[test]
fn a_stop_closes_every_lane_connection_at_once() {
    let mut s = server("");
    let mut conns: Vec<TcpStream> = (0..3).map(|_| s.connect()).collect();
    for c in &mut conns {
        let mut pending = Vec::new();
        assert_eq!(ask(c, &mut pending).text(), "42");
    }
    wait_lane(&s, 3);
    // One goes to a task (a partial head) and back.
    write_all(&mut conns[2], &GET[..10]);
    std::thread::sleep(Duration::from_millis(50));
    write_all(&mut conns[2], &GET[10..]);
    let mut pending = Vec::new();
    let r = read_response(&mut conns[2], &mut pending, false);
    assert_eq!(r.text(), "42");
    wait_lane(&s, 3);
    let start = Instant::now();
    assert!(s.stop().success());
    assert!(start.elapsed() < Duration::from_secs(5), "no drain wait");
    for c in &mut conns {
        assert_eq!(read_to_close(c), "");
    }
}

#[test]
fn a_reload_drain_answers_one_more_lane_request_with_close() {
    let s = server("shutdown-timeout: 10");
    let (mut c, mut pending, _) = in_lane(&s);
    common::parking::reload_and_wait(&s);
    // Two pipelined: the first is answered with `Connection: close`, the second never.
    write_all(&mut c, &GET.repeat(2));
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(
        (r.text().as_str(), r.header("connection")),
        ("42", Some("close"))
    );
    assert_eq!(read_to_close(&mut c), "", "then closed, nothing more");
    // The new generation answers in its own lane.
    let (mut d, mut pending, entry) = in_lane(&s);
    assert_eq!(ask(&mut d, &mut pending).text(), "42");
    assert_eq!(lane(&s), vec![entry]);
}

#[test]
fn lane_answers_are_logged() {
    let mut s = server("");
    let (mut c, mut pending, entry) = in_lane(&s);
    write_all(&mut c, b"GET /answer?lane HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    write_all(&mut c, b"GET /files/small.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(read_response(&mut c, &mut pending, false).status, 200);
    assert_eq!(lane(&s), vec![entry]);
    drop(c);
    assert!(s.stop().success());
    let log = std::fs::read_to_string(s.dir.path().join("access.log")).unwrap();
    assert!(
        log.lines().any(|l| l == "GET /answer?lane HTTP/1.1 200 2"),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l == "GET /files/small.txt HTTP/1.1 200 11"),
        "{log}"
    );
}

#[test]
fn lane_off_parks_one_shot_after_the_delay() {
    let s = server("http1-lane: OFF\nhttp1-idle-park-delay: 2000");
    let mut c = s.connect();
    let mut pending = Vec::new();
    // Before the request: the delay counts from its answer, later.
    let asked = Instant::now();
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    let parked = lane(&s);
    assert!(
        parked.is_empty() || asked.elapsed() >= Duration::from_millis(2000),
        "parked before the delay: {parked:?}"
    );
    let entry = wait_lane(&s, 1)[0];
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(1900),
        "parked before the delay: {waited:?}"
    );
    assert_ne!(entry.events & EPOLLONESHOT, 0, "{entry:?}");
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
}

#[test]
fn a_panic_in_the_lane_closes_only_its_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Spate::start_in_env(
        "num-threads: 1\nlisten: {host: 127.0.0.1, port: 0}\nhosts:\n  default:\n    paths:\n      /answer:\n        respond: {body: \"42\"}\n",
        dir,
        &[("SPATE_DEBUG_PANIC_PATH", "/answer/panic")],
    );
    let (mut other, mut other_pending, _) = in_lane(&s);
    let (mut victim, _, _) = {
        let mut c = s.connect();
        let mut pending = Vec::new();
        assert_eq!(ask(&mut c, &mut pending).text(), "42");
        wait_lane(&s, 2);
        (c, pending, ())
    };
    write_all(
        &mut victim,
        b"GET /answer/panic HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(read_to_close(&mut victim), "", "closed without an answer");
    let lines = s.log_lines_naming("panicked", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    // The other lane connection is served on, in the lane.
    assert_eq!(ask(&mut other, &mut other_pending).text(), "42");
    assert_eq!(wait_lane(&s, 1).len(), 1);
}

#[test]
fn a_new_connection_enters_the_lane_from_accept() {
    // A park delay that never passes in this test: only the lane takes a connection early.
    let s = server("http1-idle-park-delay: 5000");
    let mut c = s.connect();
    let entry = wait_lane(&s, 1)[0];
    assert_ne!(entry.events & EPOLLET, 0, "{entry:?}");
    // Its first requests are answered there.
    let mut pending = Vec::new();
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    assert_eq!(lane(&s), vec![entry]);
    // The HTTP/2 preface of a new connection goes to a task, which speaks HTTP/2.
    let out = curl(&["-s", "--http2-prior-knowledge", &s.url("/answer")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "42");
    // Bytes that are not HTTP on a new connection: closed without an answer, as by a task.
    let mut d = s.connect();
    write_all(&mut d, b"INVALID CONNECTION PREFACE\r\n\r\n");
    assert_eq!(read_to_close(&mut d), "");
}

#[test]
fn a_request_sent_with_a_half_close_is_answered_then_closed() {
    let s = server("");
    let (mut c, _, _) = in_lane(&s);
    // The request and the end of the client's side arrive together.
    write_all(&mut c, &GET.repeat(2));
    c.shutdown(std::net::Shutdown::Write).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let start = Instant::now();
    let out = read_to_close(&mut c);
    assert_eq!(out.matches("HTTP/1.1 200").count(), 2, "{out}");
    // Not the keep-alive timeout (10 s), which the read timeout would end in.
    assert!(start.elapsed() < Duration::from_secs(5), "closed at once");
    assert_eq!(wait_lane(&s, 0), vec![]);
}

#[test]
fn a_client_that_keeps_its_socket_full_is_answered_in_full() {
    let s = server("");
    let (mut c, mut pending, _) = in_lane(&s);
    // Far more pipelined requests than a lane turn reads (a task takes over), sent while the
    // answers are read.
    const N: usize = 5000;
    let mut writer = c.try_clone().unwrap();
    let sender = std::thread::spawn(move || write_all(&mut writer, &GET.repeat(N)));
    for _ in 0..N {
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    }
    sender.join().unwrap();
    nothing_more(&mut c, &pending);
    wait_lane(&s, 1);
}

/// A path with checks that decide at once (`access`, `limit-req` without a wait) is answered
/// in the lane, its checks run once per request: the same bytes again are checked again (no
/// answer is kept for them), a large file handed to a task is counted once, a refusal is
/// the lane's too. A path whose zone may make a request wait goes to a task.
#[test]
fn checked_paths_are_answered_in_the_lane_and_counted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "root/small.txt", b"small file\n");
    write_file(dir.path(), "root/large.bin", &vec![b'L'; 100_000]);
    let s = Spate::start_in(
        r#"
num-threads: 1
listen: {host: 127.0.0.1, port: 0}
limit-req-zones:
  z: {rate: 1r/m}
  w: {rate: 1r/m}
hosts:
  default:
    paths:
      /answer:
        respond: {body: "42"}
      /gated:
        limit-req: {zone: z, burst: 3, nodelay: ON}
        access: [{deny: 10.0.0.0/8}, {allow: all}]
        file.dir: $DIR/root
      /denied:
        access: [{deny: all}]
        respond: {body: "no"}
      /waits:
        limit-req: {zone: w, burst: 5}
        respond: {body: "w"}
"#,
        dir,
    );
    let (mut c, mut pending, entry) = in_lane(&s);
    let small = b"GET /gated/small.txt HTTP/1.1\r\nHost: a\r\n\r\n";
    write_all(&mut c, &small.repeat(3));
    for _ in 0..3 {
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!((r.status, r.text().as_str()), (200, "small file\n"));
    }
    for _ in 0..2 {
        write_all(&mut c, b"GET /denied HTTP/1.1\r\nHost: a\r\n\r\n");
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!(r.status, 403);
        assert_ne!(r.header("connection"), Some("close"));
    }
    // All of them in the lane.
    assert_eq!(lane(&s), vec![entry]);
    assert_eq!(s.log_lines_naming("access rule denies", 2).len(), 2);
    // The fourth within the burst, a file sent with sendfile: the zone counts it once.
    write_all(&mut c, b"GET /gated/large.bin HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!((r.status, r.body.len()), (200, 100_000));
    let back = wait_lane(&s, 1)[0];
    // The fifth is over the burst, although its bytes were answered before.
    write_all(&mut c, small);
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    assert_eq!(lane(&s), vec![back]);
    // A zone that may make requests wait: a task answers.
    write_all(&mut c, b"GET /waits HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(read_response(&mut c, &mut pending, false).text(), "w");
    let again = wait_lane(&s, 1)[0];
    assert_ne!(again.data, back.data, "it went through a task");
}
