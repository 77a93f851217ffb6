//! Several backends behind one path (issue 12): round-robin and least-conn spread over live
//! backends of different weights and speeds, a backend killed and one slowed during an h2load
//! run, the active health check taking the dead one out and putting it back, passive health,
//! 502 when none answers, the PROXY protocol line and the response head limits (configuration
//! errors: tests/config.rs and src/config/proxy.rs). Backends: the small backend of `common/backend.rs` (a delay per backend, changed
//! while it runs), and raw listeners where the bytes themselves matter.

mod common;

use common::backend::{Backend, Options};
use common::clients::h1_get;
use common::load::Load;
use common::prometheus::{sample, scrape_until};
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A test backend whose answers take `delay` ms (changed while it runs).
struct Live {
    b: Backend,
    delay: Arc<AtomicU64>,
}

impl Live {
    fn start(delay_ms: u64) -> Live {
        Live::start_at(None, delay_ms)
    }

    /// On `addr`: a stopped backend comes back on its port.
    fn start_at(addr: Option<SocketAddr>, delay_ms: u64) -> Live {
        let delay = Arc::new(AtomicU64::new(delay_ms));
        let b = Backend::start_with(Options {
            delay_ms: Some(delay.clone()),
            addr,
            ..Options::default()
        });
        Live { b, delay }
    }

    fn addr(&self) -> SocketAddr {
        self.b.addr.expect("tcp backend")
    }

    fn authority(&self) -> String {
        self.addr().to_string()
    }
}

/// A front with `/metrics` and `/` proxied to `url` (the YAML value of `proxy.reverse.url`,
/// indented for a path), with `options` at the path level.
fn front(url: &str, options: &str) -> Spate {
    Spate::start(&format!(
        "
listen:
  host: 127.0.0.1
  port: 0
num-threads: 2
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
{options}
        proxy.reverse.url:
{url}
"
    ))
}

/// `proxy.reverse.url` items: `{url, weight}` for each backend.
fn weighted(backends: &[(&Live, u32)]) -> String {
    weighted_at(10, backends)
}

/// As [`weighted`], the items indented by `indent` spaces.
fn weighted_at(indent: usize, backends: &[(&Live, u32)]) -> String {
    let pad = " ".repeat(indent);
    backends
        .iter()
        .map(|(l, w)| {
            format!(
                "{pad}- url: http://{}/\n{pad}  weight: {w}\n",
                l.authority()
            )
        })
        .collect()
}

/// Runs h2load to completion with `args` (`-nN` first) and checks that all N succeeded.
fn h2load_all_ok(url: &str, args: &[&str]) {
    let r = Load::h2load_with(url, args).finish(60);
    let n: u64 = args[0][2..].parse().expect("-nN first");
    assert_eq!((r.succeeded, r.failed, r.non_2xx), (n, 0, 0), "{}", r.text);
}

/// spate's standard error, kept as it is read, to wait for a log line.
struct Log<'a> {
    spate: &'a Spate,
    lines: Vec<String>,
}

impl<'a> Log<'a> {
    fn new(spate: &'a Spate) -> Log<'a> {
        Log {
            spate,
            lines: Vec::new(),
        }
    }

    /// Waits up to `limit` for a line containing every one of `parts`; when it came.
    fn wait(&mut self, parts: &[&str], limit: Duration) -> Option<Instant> {
        let end = Instant::now() + limit;
        loop {
            self.lines.extend(self.spate.stderr_lines());
            if self.count(parts) > 0 {
                return Some(Instant::now());
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn count(&mut self, parts: &[&str]) -> usize {
        self.lines.extend(self.spate.stderr_lines());
        self.lines
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .count()
    }
}

fn backend_up(spate: &Spate, authority: &str, want: f64) -> f64 {
    let key = format!("spate_backend_up{{backend={authority}}}");
    let samples = scrape_until(spate, "/metrics", |s| sample(s, &key) == want);
    sample(&samples, &key)
}

#[test]
fn round_robin_spreads_by_weight_whatever_the_speed() {
    let (a, b, c) = (Live::start(0), Live::start(2), Live::start(5));
    let f = front(&weighted(&[(&a, 3), (&b, 2), (&c, 1)]), "");
    h2load_all_ok(&f.url("/text"), &["-n1200", "-c4", "-m2", "-t1"]);
    let got = [a.b.requests(), b.b.requests(), c.b.requests()];
    // Each worker's smooth round-robin is exact over its own requests: off by less than the
    // total weight per worker.
    for (n, want) in got.iter().zip([600, 400, 200]) {
        assert!(n.abs_diff(want) <= 12, "spread {got:?}, want 600/400/200");
    }
    eprintln!("round-robin 3:2:1 over 1200 requests: {got:?}");
}

#[test]
fn least_conn_avoids_the_slow_backend_and_follows_weights() {
    // b answers in 200 ms, a and c at once (a few ms on a loaded machine, still far
    // faster); c weighs twice as much.
    let (a, b, c) = (Live::start(0), Live::start(200), Live::start(0));
    let url = format!(
        "          backends:\n{}          balancer: least-conn\n",
        weighted_at(12, &[(&a, 1), (&b, 1), (&c, 2)])
    );
    let f = front(&url, "");
    h2load_all_ok(&f.url("/text"), &["-n2000", "-c10", "-m1", "-t1"]);
    let got = [a.b.requests(), b.b.requests(), c.b.requests()];
    eprintln!("least-conn (1 fast, 1 slow, 2 fast) over 2000 requests: {got:?}");
    // Round-robin would give the slow one a quarter (500).
    assert!(got[1] < 200, "the slow backend got {got:?}");
    assert!(got[2] > got[0], "the heavier backend got less: {got:?}");
}

#[test]
fn a_killed_backend_and_a_slow_one_under_load_fail_no_request() {
    let (a, b, c) = (Live::start(0), Live::start(0), Live::start(0));
    let b_addr = b.addr();
    let b_name = b.authority();
    // The active check alone (no passive): it takes b out within its fall count.
    let options = "        proxy.max-fails: 0
        proxy.health-check: {path: /text, interval: 200, timeout: 500, fall: 2, rise: 2}";
    let f = front(&weighted(&[(&a, 1), (&b, 1), (&c, 1)]), options);
    let mut log = Log::new(&f);
    assert_eq!(backend_up(&f, &b_name, 1.0), 1.0);
    let load = Load::h2load_with(&f.url("/text"), &["-c8", "-m4", "-t1", "-D", "10"]);
    std::thread::sleep(Duration::from_secs(1));

    let mut b = b;
    b.b.stop();
    let killed = Instant::now();
    c.delay.store(30, Ordering::SeqCst);
    let out = log
        .wait(
            &[&b_name, "health check failed (2 in a row"],
            Duration::from_secs(10),
        )
        .expect("the active check takes the dead backend out");
    let took = out - killed;
    // Two failed probes 200 ms apart, each refused at once (the log line says "2 in a row");
    // the bound leaves room for a loaded machine.
    assert!(took < Duration::from_secs(5), "out after {took:?}");
    assert_eq!(backend_up(&f, &b_name, 0.0), 0.0);

    std::thread::sleep(Duration::from_millis(800));
    let b2 = Live::start_at(Some(b_addr), 0);
    let restarted = Instant::now();
    let back = log
        .wait(
            &[&b_name, "health check passes again"],
            Duration::from_secs(10),
        )
        .expect("the restarted backend is put back");
    assert!(
        back - restarted < Duration::from_secs(5),
        "back after {:?}",
        back - restarted
    );
    assert_eq!(backend_up(&f, &b_name, 1.0), 1.0);

    let r = load.finish(10);
    assert!(r.succeeded > 0, "{}", r.text);
    assert_eq!((r.failed, r.non_2xx), (0, 0), "{}", r.text);
    // Back without a reload: it takes its share of what is left of the run (thousands on an
    // idle machine).
    assert!(
        b2.b.requests() > 10,
        "{} requests after the restart",
        b2.b.requests()
    );
    eprintln!(
        "out {took:?} after the kill, back {:?} after the restart; {} requests, 0 failed; restarted backend got {}",
        back - restarted,
        r.succeeded,
        b2.b.requests()
    );
    // Each change logged once, not once per worker.
    assert_eq!(log.count(&[&b_name, "health check failed (2 in a row"]), 1);
    assert_eq!(log.count(&[&b_name, "health check passes again"]), 1);
}

#[test]
fn passive_health_takes_a_failing_backend_out_then_tries_it_again() {
    let a = Live::start(0);
    let dead_port = DeadPort::new();
    let port = dead_port.port;
    let dead = format!("127.0.0.1:{port}");
    let url = format!(
        "          - http://{}/\n          - http://{dead}/\n",
        a.authority()
    );
    let f = front(
        &url,
        "        proxy.max-fails: 2\n        proxy.fail-timeout: 3000",
    );
    let mut log = Log::new(&f);
    for _ in 0..10 {
        assert_eq!(h1_get(&f, "/text").status, 200);
    }
    let out = log
        .wait(
            &[&dead, "2 failures in a row; out of service for 3000 ms"],
            Duration::from_secs(10),
        )
        .expect("taken out");
    assert_eq!(backend_up(&f, &dead, 0.0), 0.0);
    // Out (for 3 s: time for these on a slow machine): no more attempts, so no more
    // connect errors.
    let errors = log.count(&[&dead, "cannot connect"]);
    for _ in 0..10 {
        assert_eq!(h1_get(&f, "/text").status, 200);
    }
    assert_eq!(log.count(&[&dead, "cannot connect"]), errors);

    // It comes up; after the back-off one trial request finds it and it is back.
    // The backend comes back on that port: let it go.
    drop(dead_port);
    let d = Live::start_at(Some(SocketAddr::from(([127, 0, 0, 1], port))), 0);
    let back_off_end = out + Duration::from_millis(3100);
    std::thread::sleep(back_off_end.saturating_duration_since(Instant::now()));
    for _ in 0..10 {
        assert_eq!(h1_get(&f, "/text").status, 200);
    }
    log.wait(&[&dead, "back in service"], Duration::from_secs(10))
        .expect("back after a trial");
    assert!(d.b.requests() >= 4, "{} requests", d.b.requests());
    assert_eq!(backend_up(&f, &dead, 1.0), 1.0);
    assert_eq!(log.count(&[&dead, "out of service"]), 1);
}

#[test]
fn bad_gateway_only_when_no_backend_answers() {
    let (d1, d2) = (DeadPort::new(), DeadPort::new());
    let (p1, p2) = (d1.port, d2.port);
    let url = format!("          - http://127.0.0.1:{p1}/\n          - http://127.0.0.1:{p2}/\n");
    let f = front(&url, "");
    let mut log = Log::new(&f);
    assert_eq!(h1_get(&f, "/text").status, 502);
    // Both were tried, once each.
    for p in [p1, p2] {
        let name = format!("127.0.0.1:{p}");
        log.wait(&[&name, "cannot connect"], Duration::from_secs(10))
            .expect("tried");
        assert_eq!(log.count(&[&name, "cannot connect"]), 1);
    }
}

/// A raw backend: for each connection, the bytes up to the end of the request head go to the
/// channel, and `answer` goes back before the connection is closed.
fn raw_backend(answer: Vec<u8>) -> (u16, mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for mut s in l.incoming().map_while(Result::ok) {
            s.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while find(&got, b"\r\n\r\n").is_none() {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(&answer);
            if tx.send(got).is_err() {
                return;
            }
        }
    });
    (port, rx)
}

#[test]
fn proxy_protocol_line_starts_each_backend_connection() {
    let (port, seen) = raw_backend(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec(),
    );
    let f = front(
        &format!("          http://127.0.0.1:{port}/"),
        "        proxy.proxy-protocol: ON\n        proxy.timeout.keepalive: 0",
    );
    for _ in 0..2 {
        let mut c = TcpStream::connect(f.addr).expect("connect");
        let client = c.local_addr().expect("client address");
        c.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let reply = read_to_close(&mut c);
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        let got = seen
            .recv_timeout(Duration::from_secs(5))
            .expect("backend saw it");
        let want = format!(
            "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\nGET /x HTTP/1.1\r\n",
            client.port(),
            f.addr.port()
        );
        assert!(
            got.starts_with(want.as_bytes()),
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
}

#[test]
fn proxy_protocol_line_goes_before_the_tls_handshake() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // The line and what follows it; then the connection closes (the handshake fails).
        while find(&got, b"\r\n").is_none_or(|i| got.len() < i + 3) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got
    });
    let f = front(
        &format!("          https://127.0.0.1:{port}/"),
        "        proxy.proxy-protocol: ON\n        proxy.timeout.keepalive: 0\n        \
         proxy.ssl.verify-peer: OFF",
    );
    assert_eq!(h1_get(&f, "/x").status, 502);
    let got = seen.join().expect("backend");
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(
        got.starts_with(b"PROXY TCP4 127.0.0.1 127.0.0.1 "),
        "{text:?}"
    );
    // In the clear, then a TLS handshake record (the ClientHello).
    let end = find(&got, b"\r\n").expect("the line") + 2;
    assert_eq!(got.get(end), Some(&0x16), "{text:?}");
}

#[test]
fn response_head_limits_are_directives() {
    let mut many = String::from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n");
    for i in 0..150 {
        many.push_str(&format!("X-F{i}: v\r\n"));
    }
    many.push_str("\r\nok");
    let (port, _seen) = raw_backend(many.into_bytes());
    let url = format!("          http://127.0.0.1:{port}/");
    // 152 fields: over the default 128, under 200; the head is about 1.7 KB.
    let f = front(&url, "");
    assert_eq!(h1_get(&f, "/").status, 502);
    let f = front(&url, "        proxy.max-response-headers: 200");
    assert_eq!(h1_get(&f, "/").status, 200);
    let f = front(
        &url,
        "        proxy.max-response-headers: 200\n        proxy.max-response-head-size: 1024",
    );
    assert_eq!(h1_get(&f, "/").status, 502);
}

/// Two backends on one host:port with different paths (h2o sends each backend's own path):
/// round-robin alternates between `/one/` and `/two/`, the path below the prefix appended to
/// each.
#[test]
fn round_robin_between_two_paths_on_one_backend_sends_each_its_own_path() {
    let b = Backend::start();
    let url = format!(
        "          - {}\n          - {}\n",
        b.url("/one/"),
        b.url("/two")
    );
    let s = front(&url, "");
    // Each of the two workers balances on its own: of 8 requests one gets 4 or more.
    let mut targets: Vec<String> = (0..8)
        .map(|_| {
            let r = h1_get(&s, "/x?q=1");
            assert_eq!(r.status, 200);
            common::backend::Echo::parse(&r.body)
                .expect("an echo")
                .target
        })
        .collect();
    targets.sort();
    targets.dedup();
    assert_eq!(targets, ["/one/x?q=1", "/two/x?q=1"]);
}
