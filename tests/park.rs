//! Parked HTTP/1.1 connections (`http1-idle-park-delay`): a keep-alive connection idle past the
//! delay gives up its task and waits in the worker's epoll instance. These tests check that a
//! parked connection is really parked (its socket is in the worker's parking epoll instance, read
//! from /proc) and that it behaves as an idle connection that kept its task: reused, pipelined,
//! closed by the keep-alive timeout and by a half-close, closed by a stop, answered with
//! `Connection: close` during a reload drain, counted in the metrics.

mod common;
mod tls_support;

use common::prometheus::{sample, scrape_until};
use common::*;
use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// The park delay the tests use: short, so that they wait little.
const DELAY_MS: u64 = 200;

/// One worker, parking after DELAY_MS unless `extra` sets the delay; without the lane
/// (`http1-lane`, tests/lane.rs), which would take a connection at once.
fn server(extra: &str) -> Spate {
    let delay = if extra.contains("http1-idle-park-delay") {
        String::new()
    } else {
        format!("http1-idle-park-delay: {DELAY_MS}\nhttp1-lane: OFF")
    };
    Spate::start(&format!(
        r#"
num-threads: 1
listen:
  host: 127.0.0.1
  port: 0
{delay}
{extra}
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /answer:
        respond:
          body: "42"
"#
    ))
}

/// Waits until `want(parked)` holds for the number of sockets parked in the server (up to
/// 10 s); returns the last count.
fn wait_parked(s: &Spate, want: impl Fn(usize) -> bool) -> usize {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let n = parked(s);
        if want(n) || Instant::now() > end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sockets in the server's parking epoll instances.
fn parked(s: &Spate) -> usize {
    common::parking::entries(s).len()
}

/// The server's sockets once it is serving (a first connection served and closed): its
/// listeners and their per-worker copies, which appear as the workers start. Counted with
/// the connection open, less its one socket once the server closed it (up to 10 s).
fn baseline_sockets(s: &Spate) -> usize {
    let mut c = s.connect();
    let mut pending = Vec::new();
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    let with = s.open_sockets();
    drop(c);
    let end = Instant::now() + Duration::from_secs(10);
    while s.open_sockets() >= with {
        assert!(Instant::now() < end, "the first connection was not closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.open_sockets(), with - 1);
    with - 1
}

/// A connection that made one request and is now parked, with its read-ahead buffer.
fn parked_connection(s: &Spate, parked_before: usize) -> (TcpStream, Vec<u8>) {
    let mut c = s.connect();
    let mut pending = Vec::new();
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    let want = parked_before + 1;
    assert_eq!(
        wait_parked(s, |n| n == want),
        want,
        "the idle connection parks"
    );
    (c, pending)
}

fn ask(c: &mut TcpStream, pending: &mut Vec<u8>) -> RawResponse {
    write_all(c, b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n");
    read_response(c, pending, false)
}

#[test]
fn a_parked_connection_is_reused_and_parks_again() {
    let s = server("");
    let (mut c, mut pending) = parked_connection(&s, 0);
    for _ in 0..3 {
        let r = ask(&mut c, &mut pending);
        assert_eq!((r.status, r.text().as_str()), (200, "42"));
        assert_ne!(r.header("connection"), Some("close"), "still keep-alive");
        assert_eq!(wait_parked(&s, |n| n == 1), 1, "and parks again");
    }
    // A connection that has not sent a request yet parks too, and is served when it does.
    let mut fresh = s.connect();
    assert_eq!(wait_parked(&s, |n| n == 2), 2);
    let mut pending = Vec::new();
    assert_eq!(ask(&mut fresh, &mut pending).text(), "42");
}

#[test]
fn a_connection_reused_within_the_delay_never_parks() {
    let s = server("http1-idle-park-delay: 2000\nhttp1-lane: OFF");
    let mut c = s.connect();
    let mut pending = Vec::new();
    for _ in 0..10 {
        assert_eq!(ask(&mut c, &mut pending).text(), "42");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(parked(&s), 0);
    }
}

#[test]
fn parking_off_keeps_the_task() {
    let s = server("http1-idle-park-delay: OFF\nhttp1-lane: OFF");
    let mut c = s.connect();
    let mut pending = Vec::new();
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    std::thread::sleep(Duration::from_millis(DELAY_MS * 3));
    assert_eq!(parked(&s), 0);
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
}

#[test]
fn pipelined_requests_sent_to_a_parked_connection_are_all_answered() {
    let s = server("");
    let (mut c, mut pending) = parked_connection(&s, 0);
    let three = b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n".repeat(3);
    // Split mid-request: the first bytes resume the connection, the rest follow.
    write_all(&mut c, &three[..50]);
    std::thread::sleep(Duration::from_millis(50));
    write_all(&mut c, &three[50..]);
    for _ in 0..3 {
        assert_eq!(read_response(&mut c, &mut pending, false).text(), "42");
    }
}

#[test]
fn the_keep_alive_timeout_closes_a_parked_connection() {
    let s = server("http1-keepalive-timeout: 3");
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut pending = Vec::new();
    // Before the request: the timeout counts from its answer, later.
    let start = Instant::now();
    assert_eq!(ask(&mut c, &mut pending).text(), "42");
    assert_eq!(wait_parked(&s, |n| n == 1), 1);
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "closed, nothing sent");
    // Short of the default (10 s) and of the read timeout.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(2900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    assert_eq!(parked(&s), 0);
}

#[test]
fn a_parked_client_that_half_closes_is_closed() {
    let s = server("");
    let sockets = baseline_sockets(&s);
    let (mut c, _) = parked_connection(&s, 0);
    c.shutdown(Shutdown::Write).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0);
    // Not the keep-alive timeout (10 s), which the read timeout (10 s) would end in.
    assert!(start.elapsed() < Duration::from_secs(5), "closed at once");
    assert_eq!(wait_parked(&s, |n| n == 0), 0);
    let end = Instant::now() + Duration::from_secs(5);
    while s.open_sockets() > sockets && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.open_sockets(), sockets, "the server's socket is closed");
}

#[test]
fn a_parked_connection_keeps_its_place_in_the_metrics() {
    let s = server("");
    let (c, _) = parked_connection(&s, 0);
    // The scrape's own connection is the other one.
    let samples = scrape_until(&s, "/metrics", |m| {
        sample(m, "spate_connections{transport=tcp}") == 2.0
    });
    assert_eq!(sample(&samples, "spate_connections{transport=tcp}"), 2.0);
    assert_eq!(
        sample(&samples, "spate_connections_by_protocol{protocol=http/1.1}"),
        2.0
    );
    drop(c);
    let samples = scrape_until(&s, "/metrics", |m| {
        sample(m, "spate_connections{transport=tcp}") == 1.0
    });
    assert_eq!(
        sample(&samples, "spate_connections_by_protocol{protocol=http/1.1}"),
        1.0,
        "a parked connection that closes leaves the count"
    );
}

#[test]
fn a_stop_closes_parked_connections_promptly() {
    let mut s = server("");
    let (mut c, _) = parked_connection(&s, 0);
    let start = Instant::now();
    assert!(s.stop().success());
    assert!(start.elapsed() < Duration::from_secs(5));
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0);
}

#[test]
fn a_parked_connection_reused_during_a_reload_drain_is_answered_with_close() {
    let s = server("shutdown-timeout: 10");
    let (mut c, mut pending) = parked_connection(&s, 0);
    common::parking::reload_and_wait(&s);
    let r = ask(&mut c, &mut pending);
    assert_eq!(r.text(), "42");
    assert_eq!(r.header("connection"), Some("close"));
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "then closed");
    // The new generation serves (and parks) as before.
    let mut d = s.connect();
    let mut pending = Vec::new();
    assert_eq!(ask(&mut d, &mut pending).text(), "42");
}

#[test]
fn thousands_of_parked_connections_are_all_reused() {
    const N: usize = 3000;
    let s = server("max-connections: 4000");
    let sockets = baseline_sockets(&s);
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N {
        let mut c = s.connect();
        let mut pending = Vec::new();
        assert_eq!(ask(&mut c, &mut pending).text(), "42");
        conns.push(c);
    }
    assert_eq!(wait_parked(&s, |n| n == N), N);
    assert_eq!(
        s.open_sockets(),
        sockets + N,
        "one socket each, nothing more"
    );
    // All at once: every connection wakes in the same few epoll batches.
    for c in &mut conns {
        write_all(c, b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n");
    }
    for c in &mut conns {
        let mut pending = Vec::new();
        assert_eq!(read_response(c, &mut pending, false).text(), "42");
    }
    drop(conns);
    let end = Instant::now() + Duration::from_secs(10);
    while s.open_sockets() > sockets && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.open_sockets(), sockets);
    assert_eq!(parked(&s), 0);
}

#[test]
fn a_parked_fresh_connection_can_still_start_http2() {
    let s = server("");
    let mut c = s.connect();
    assert_eq!(
        wait_parked(&s, |n| n == 1),
        1,
        "parked before its first byte"
    );
    // The HTTP/2 preface and an empty SETTINGS frame (prior knowledge, as h2load sends).
    write_all(
        &mut c,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
    );
    let mut head = [0u8; 9];
    c.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 4, "the server's SETTINGS frame: {head:?}");
}

#[test]
fn parked_connections_keep_their_max_connections_slot() {
    let s = server("max-connections: 2");
    let (a, _) = parked_connection(&s, 0);
    let (mut b, mut pending_b) = parked_connection(&s, 1);
    // A third connection waits in the kernel's queue while both slots are held by parked ones.
    let mut third = s.connect();
    write_all(&mut third, b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n");
    third
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        third.read(&mut buf).is_err(),
        "answered while two parked connections held the slots"
    );
    drop(a);
    third
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut third, &mut pending, false).text(), "42");
    // The other parked connection is still served.
    assert_eq!(ask(&mut b, &mut pending_b).text(), "42");
}

#[test]
fn a_tls_connection_is_not_parked_and_stays_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    let s = Spate::start_in(
        &format!(
            r#"
num-threads: 1
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: a.crt
    key-file: a.key
http1-idle-park-delay: {DELAY_MS}
hosts:
  default:
    paths:
      /answer:
        respond:
          body: "42"
"#
        ),
        dir,
    );
    // Python's ssl (OpenSSL): a request, an idle spell past the delay, a second request on the
    // same connection.
    let script = format!(
        r#"
import socket, ssl, time
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", {port}), timeout=10),
                    server_hostname="localhost")
def ask():
    s.sendall(b"GET /answer HTTP/1.1\r\nHost: a\r\n\r\n")
    data = b""
    while not data.endswith(b"\r\n\r\n42"):
        chunk = s.recv(4096)
        if not chunk:
            return "closed after %r" % data
        data += chunk
    return "42"
print(ask())
time.sleep({wait})
print(ask())
"#,
        port = s.addr.port(),
        wait = DELAY_MS as f64 * 4.0 / 1000.0,
    );
    let out = system_python(&script, b"");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        "42\n42",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(parked(&s), 0);
}

/// An h2c connection that made one GET of /answer and read the answer; the client's HPACK
/// decoder keeps the server's table.
fn h2c_connection(s: &Spate) -> (common::h2raw::Raw, spate::proto::h2::hpack::Decoder) {
    let mut raw = common::h2raw::Raw::connect(s, &[]);
    let mut dec = spate::proto::h2::hpack::Decoder::new(4096, 64 * 1024);
    assert_eq!(h2c_get(&mut raw, &mut dec, 1), (200, b"42".to_vec()));
    (raw, dec)
}

/// GET /answer on `stream`: the status and body. The request's `:authority` refers to the
/// client's dynamic table after the first request, the response's fields to the server's.
fn h2c_get(
    raw: &mut common::h2raw::Raw,
    dec: &mut spate::proto::h2::hpack::Decoder,
    stream: u32,
) -> (u16, Vec<u8>) {
    use spate::proto::h2::frame::{self, flag, kind};
    let mut out = Vec::new();
    raw.get(stream, "/answer", true, &mut out);
    raw.send(&out);
    let (mut status, mut body) = (0, Vec::new());
    loop {
        let (h, payload) = raw.frame().expect("the response");
        if h.kind == kind::SETTINGS && h.flags & flag::ACK == 0 {
            let mut ack = Vec::new();
            frame::put_head(&mut ack, 0, kind::SETTINGS, flag::ACK, 0);
            raw.send(&ack);
        }
        if h.kind == kind::GOAWAY {
            panic!("GOAWAY {payload:?}");
        }
        if h.stream != stream {
            continue;
        }
        if h.kind == kind::HEADERS {
            let mut buf = bytes::BytesMut::new();
            let mut fields = Vec::new();
            dec.decode(&payload, &mut buf, |f| fields.push(f))
                .expect("the response's header block");
            for f in fields {
                if &buf[f.name.clone()] == b":status" {
                    status = std::str::from_utf8(&buf[f.value]).unwrap().parse().unwrap();
                }
            }
        }
        if h.kind == kind::DATA {
            body.extend_from_slice(&payload);
        }
        if h.flags & flag::END_STREAM != 0 {
            return (status, body);
        }
    }
}

/// A quiet h2c connection (no stream, no frame for a second) parks in the worker as HTTP/1.1
/// connections do, its compact state in the record, and serves on when the client sends
/// again: its HPACK tables (both sides) and stream ids survive, and it parks again.
#[test]
fn a_quiet_h2c_connection_parks_and_serves_on() {
    let s = server("");
    let (mut raw, mut dec) = h2c_connection(&s);
    for stream in [3, 5] {
        assert_eq!(wait_parked(&s, |n| n == 1), 1, "the quiet connection parks");
        assert_eq!(h2c_get(&mut raw, &mut dec, stream), (200, b"42".to_vec()));
    }
    assert_eq!(wait_parked(&s, |n| n == 1), 1, "and parks again");
    drop(raw);
    assert_eq!(
        wait_parked(&s, |n| n == 0),
        0,
        "a client that closes is closed"
    );
}

/// More parked h2c connections than one chunk of the worker's slab holds (64): each one's
/// state (and its HPACK table, packed in its slot) comes back to its own connection, and the
/// slots of connections that wake or close are reused.
#[test]
fn many_parked_h2c_connections_each_serve_on_with_their_own_state() {
    let s = server("");
    let mut conns: Vec<_> = (0..70).map(|_| h2c_connection(&s)).collect();
    assert_eq!(wait_parked(&s, |n| n == 70), 70, "all park");
    // Wake every other one, close a few, then the rest serve on.
    for (raw, dec) in conns.iter_mut().step_by(2) {
        assert_eq!(h2c_get(raw, dec, 3), (200, b"42".to_vec()));
    }
    conns.truncate(60);
    assert_eq!(
        wait_parked(&s, |n| n == 60),
        60,
        "the woken park again, the closed leave"
    );
    for (raw, dec) in conns.iter_mut().skip(1).step_by(2) {
        assert_eq!(h2c_get(raw, dec, 3), (200, b"42".to_vec()));
    }
    for (raw, dec) in conns.iter_mut() {
        assert_eq!(h2c_get(raw, dec, 5), (200, b"42".to_vec()));
    }
}

/// Reads until the server closes, answering its PINGs: whether a GOAWAY(NO_ERROR) came.
fn h2c_graceful_goaway(raw: &mut common::h2raw::Raw) -> bool {
    use spate::proto::h2::frame::{self, flag, kind};
    let mut goaway = false;
    while let Some((h, payload)) = raw.frame() {
        match h.kind {
            kind::GOAWAY => goaway |= payload[4..8] == [0, 0, 0, 0],
            kind::PING if h.flags & flag::ACK == 0 => {
                let mut ack = Vec::new();
                frame::put_head(&mut ack, 8, kind::PING, flag::ACK, 0);
                ack.extend_from_slice(&payload);
                raw.send(&ack);
            }
            _ => {}
        }
    }
    goaway
}

/// A stop gives a parked h2c connection its graceful GOAWAY(NO_ERROR), then closes it: well
/// before the shutdown timeout (30 s here), which would close it anyway.
#[test]
fn a_stop_sends_a_goaway_to_parked_h2c_connections() {
    let mut s = server("shutdown-timeout: 30");
    let (mut raw, _) = h2c_connection(&s);
    assert_eq!(wait_parked(&s, |n| n == 1), 1);
    let start = Instant::now();
    signal(&s.child, libc::SIGTERM);
    assert!(
        h2c_graceful_goaway(&mut raw),
        "GOAWAY(NO_ERROR), then closed"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(s.stop().success());
}

/// A reload drains a parked h2c connection the same way, while the old generation runs on:
/// well before the shutdown timeout (30 s here).
#[test]
fn a_reload_sends_a_goaway_to_parked_h2c_connections() {
    let s = server("shutdown-timeout: 30");
    let (mut raw, _) = h2c_connection(&s);
    assert_eq!(wait_parked(&s, |n| n == 1), 1);
    let start = Instant::now();
    common::parking::needs_new_generation(&s);
    signal(&s.child, libc::SIGHUP);
    assert!(
        h2c_graceful_goaway(&mut raw),
        "GOAWAY(NO_ERROR), then closed"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// A parked h2c connection's idle timeout applies on time also when HTTP/1.1 connections
/// with a later keep-alive deadline were parked before it: GOAWAY(NO_ERROR), then closed.
#[test]
fn a_parked_h2c_connection_closes_at_its_idle_timeout_among_http1_ones() {
    let s = server("http2-idle-timeout: 2\nhttp1-keepalive-timeout: 30");
    let (_h1, _) = parked_connection(&s, 0);
    // Before the connection: its idle time counts from its last frame, later.
    let asked = Instant::now();
    let (mut raw, _) = h2c_connection(&s);
    assert_eq!(wait_parked(&s, |n| n == 2), 2);
    assert!(
        h2c_graceful_goaway(&mut raw),
        "GOAWAY(NO_ERROR), then closed"
    );
    // Well before the HTTP/1.1 connection's deadline (30 s) and the default idle timeout
    // (10 s).
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    assert_eq!(wait_parked(&s, |n| n == 1), 1, "the HTTP/1.1 one stays");
}
