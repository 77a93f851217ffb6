//! Operations: a port already in use, reload on SIGHUP under load, readiness, status and
//! metrics, log reopening.

mod common;
mod tls_support;

use common::prometheus::{sample, scrape_until};
use common::*;
use std::process::Command;

const RESPOND: &str = "
num-threads: 2
listen:
  host: 127.0.0.1
  port: 0
hosts:
  default:
    paths:
      /:
        respond: {body: one}
";

#[test]
fn a_second_spate_on_the_same_port_exits_with_a_clear_error() {
    let first = Spate::start(RESPOND);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("second.yaml");
    let yaml = RESPOND.replace("port: 0", &format!("port: {}", first.addr.port()));
    std::fs::write(&conf, yaml).unwrap();
    let out = Command::new(BIN).arg("-c").arg(&conf).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("second.yaml:4:") && err.contains("already in use"),
        "{err}"
    );
    // The first one still answers everything.
    for _ in 0..20 {
        assert!(first
            .raw(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .ends_with("one"));
    }
}

#[test]
fn a_port_held_by_another_program_is_refused() {
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("c.yaml");
    let yaml = RESPOND.replace(
        "port: 0",
        &format!("port: {}", other.local_addr().unwrap().port()),
    );
    std::fs::write(&conf, yaml).unwrap();
    let out = Command::new(BIN).arg("-c").arg(&conf).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in use"));
}

/// A keep-alive HTTP/1.1 client that repeats GET / until `stop`, reconnecting whenever the
/// server closes after a response (`Connection: close`). Returns (answered, failed); the bodies
/// answered go into `bodies`.
fn h1_loop(
    addr: std::net::SocketAddr,
    stop: &std::sync::atomic::AtomicBool,
    bodies: &Bodies,
) -> (u64, u64) {
    use common::h1read::{read_reply, Input};
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let (mut ok, mut failed) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let Ok(s) = std::net::TcpStream::connect(addr) else {
            failed += 1;
            continue;
        };
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .ok();
        let mut input = Input::new(s);
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if input
                .get_mut()
                .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .is_err()
            {
                failed += 1;
                break;
            }
            match read_reply(&mut input, false) {
                Ok(r) if r.status == 200 => {
                    ok += 1;
                    bodies.insert(r.text());
                    if r.header("connection") == Some("close") {
                        break;
                    }
                }
                _ => {
                    failed += 1;
                    break;
                }
            }
        }
    }
    (ok, failed)
}

/// The bodies that the clients of a test under load have seen, and how many answers they
/// got, shared so that the test can wait for a configuration to answer (or for enough
/// answers) instead of guessing how long that takes.
#[derive(Default)]
struct Bodies(
    std::sync::Mutex<std::collections::BTreeSet<String>>,
    std::sync::atomic::AtomicU64,
);

impl Bodies {
    fn insert(&self, body: String) {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(body);
    }

    fn seen(&self) -> std::collections::BTreeSet<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many answers the clients got so far.
    fn answered(&self) -> u64 {
        self.1.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits up to 20 s until the clients got `n` answers in all.
    fn wait_for_answers(&self, n: u64) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.answered() < n {
            assert!(
                std::time::Instant::now() < end,
                "only {} answers in 20 s, waiting for {n}",
                self.answered()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Waits up to 10 s until some client has been answered with `body`.
    fn wait_for(&self, body: &str) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.seen().contains(body) {
            assert!(
                std::time::Instant::now() < end,
                "no client answered {body:?} in 10 s: {:?}",
                self.seen()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// `conns` h2c connections with `streams` concurrent requests each, until `stop`; a connection
/// that ends (GOAWAY, close) is replaced. Returns (answered, failed, refused): a request the
/// server declared unprocessed in its GOAWAY is refused (a client may retry it), not failed.
fn h2_loop(
    addr: std::net::SocketAddr,
    conns: usize,
    streams: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> (u64, u64, u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let counts: [AtomicU64; 3] = Default::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let connection = || async {
            while !stop.load(Ordering::Relaxed) {
                let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
                    counts[1].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let Ok((client, conn)) = h2::client::handshake(tcp).await else {
                    counts[1].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let driver = tokio::spawn(conn);
                let one = |client: h2::client::SendRequest<bytes::Bytes>| async {
                    let mut client = client;
                    while !stop.load(Ordering::Relaxed) {
                        // Not ready: the connection is going away; no request was sent.
                        let Ok(ready) = client.ready().await else {
                            return;
                        };
                        client = ready;
                        let req = http::Request::get(format!("http://{addr}/"))
                            .body(())
                            .unwrap();
                        let Ok((resp, _)) = client.send_request(req, true) else {
                            return;
                        };
                        let got = async {
                            let resp = resp.await?;
                            let mut body = resp.into_body();
                            while let Some(chunk) = body.data().await {
                                chunk?;
                            }
                            Ok::<u16, h2::Error>(200)
                        };
                        match got.await {
                            Ok(_) => counts[0].fetch_add(1, Ordering::Relaxed),
                            Err(e)
                                if e.is_go_away()
                                    || e.reason() == Some(h2::Reason::REFUSED_STREAM) =>
                            {
                                counts[2].fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            Err(e) => {
                                eprintln!("HTTP/2 request failed: {e:?}");
                                counts[1].fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                        };
                    }
                };
                let tasks: Vec<_> = (0..streams).map(|_| one(client.clone())).collect();
                drop(client);
                futures_join_all(tasks).await;
                driver.abort();
            }
        };
        futures_join_all((0..conns).map(|_| connection()).collect()).await;
    });
    let [ok, failed, refused] = counts;
    (ok.into_inner(), failed.into_inner(), refused.into_inner())
}

/// Polls every future to completion on the current task.
async fn futures_join_all<F: std::future::Future<Output = ()>>(futs: Vec<F>) {
    let mut futs: Vec<_> = futs.into_iter().map(Box::pin).map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in futs.iter_mut() {
            if let Some(f) = slot {
                if f.as_mut().poll(cx).is_ready() {
                    *slot = None;
                } else {
                    pending = true;
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await
}

fn reload_config(body: &str) -> String {
    format!(
        "
num-threads: 2
shutdown-timeout: 5
listen:
  host: 127.0.0.1
  port: 0
hosts:
  default:
    paths:
      /:
        respond: {{body: {body}}}
"
    )
}

/// Rewrites the configuration with the listener's real port (a reload matches listeners by
/// their configured address, so port 0 stays port 0) and sends SIGHUP.
fn reload(s: &Spate, yaml: &str) {
    std::fs::write(s.path().join("spate.yaml"), yaml).unwrap();
    signal(&s.child, libc::SIGHUP);
}

/// The configuration of `s` with a change a reload cannot apply in place (`http3-gso`: the
/// QUIC endpoints are set up with it; there is no QUIC listener here), so that the reload
/// starts a new worker generation and the old one drains.
fn needing_a_new_generation(s: &Spate) -> String {
    let yaml = std::fs::read_to_string(s.path().join("spate.yaml")).unwrap();
    format!("{}\nhttp3-gso: OFF\n", yaml.trim_end())
}

/// Waits (up to 20 s) until standard error has a line containing `what`; returns every line
/// read.
fn wait_for_log(s: &Spate, seen: &mut Vec<String>, what: &str) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        seen.extend(s.stderr_lines());
        if seen.iter().any(|l| l.contains(what)) {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "no log line with {what:?}:\n{}",
            seen.join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The tests that load the server hard run one at a time: together they starve each other's
/// clients of CPU (2 cores) and time out.
static UNDER_LOAD: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn under_load() -> std::sync::MutexGuard<'static, ()> {
    UNDER_LOAD.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn reload_under_load_loses_no_request() {
    let _one_at_a_time = under_load();
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let s = Spate::start(&reload_config("v0"));
    let addr = s.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let bodies = Arc::new(Bodies::default());
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (stop, bodies) = (stop.clone(), bodies.clone());
            std::thread::spawn(move || h1_loop(addr, &stop, &bodies))
        })
        .collect();
    // h2c with prior knowledge alongside: each reload sends its connections a GOAWAY.
    let h2 = {
        let stop = stop.clone();
        std::thread::spawn(move || h2_loop(addr, 4, 8, &stop))
    };
    bodies.wait_for("v0");
    let mut log = Vec::new();
    for i in 1..=6 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        if i == 3 {
            // A broken configuration: the old one keeps serving, every problem is logged.
            reload(
                &s,
                "listen: 0\nnum-threads: lots\nhosts:\n  default:\n    pathz: {}\n",
            );
            wait_for_log(&s, &mut log, "reload failed");
            continue;
        }
        reload(&s, &reload_config(&format!("v{i}")));
        wait_for_log(&s, &mut log, "reloaded");
        log.retain(|l| !l.contains("reloaded"));
        // Every configuration that loaded answers the clients (on a loaded machine that can
        // take a while: each client's next connection is the first to see it).
        bodies.wait_for(&format!("v{i}"));
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        let (ok, failed) = c.join().unwrap();
        assert_eq!(failed, 0, "failed requests during reloads");
        total += ok;
    }
    assert!(total > 100, "only {total} requests answered");
    eprintln!("HTTP/1.1: {total} requests answered");
    let (ok, failed, refused) = h2.join().unwrap();
    assert_eq!(failed, 0, "failed HTTP/2 requests during reloads");
    assert!(ok > 100, "only {ok} HTTP/2 requests answered");
    eprintln!("HTTP/2: {ok} requests answered, {refused} refused by a GOAWAY (retryable)");
    let errors = log.join("\n");
    assert!(
        errors.contains("spate.yaml:2:") && errors.contains("spate.yaml:5:"),
        "every problem with file:line: {errors}"
    );
}

const OBSERVED: &str = "
num-threads: 2
listen:
  host: 127.0.0.1
  port: 0
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /server-status:
        status: ON
      /ready:
        readiness: ON
      /x:
        respond: {body: hello}
";

fn get(s: &Spate, path: &str) -> (u16, String) {
    let r = common::clients::h1_get(s, path);
    (r.status, r.text())
}

#[test]
fn metrics_count_what_was_sent_and_parse_as_prometheus_text() {
    let s = Spate::start(OBSERVED);
    for _ in 0..30 {
        assert_eq!(get(&s, "/x").0, 200);
    }
    for _ in 0..5 {
        s.raw(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc");
    }
    // Other workers publish every 200 ms: wait until every count is in.
    let scrapes = std::cell::Cell::new(0.0);
    let samples = scrape_until(&s, "/metrics", |samples| {
        scrapes.set(scrapes.get() + 1.0);
        sample(
            samples,
            "spate_requests_total{protocol=http/1.1,status=2xx}",
        ) >= 35.0
    });
    // 35 to /x plus at most the scrapes before this one.
    let ok = sample(
        &samples,
        "spate_requests_total{protocol=http/1.1,status=2xx}",
    );
    assert!(
        (35.0..35.0 + scrapes.get()).contains(&ok),
        "{} scrapes: {samples:#?}",
        scrapes.get()
    );
    assert_eq!(
        sample(
            &samples,
            "spate_requests_total{protocol=http/1.1,status=4xx}"
        ),
        0.0
    );
    assert!(sample(&samples, "spate_received_bytes_total{}") >= 35.0 * 20.0 + 15.0);
    assert!(sample(&samples, "spate_sent_bytes_total{}") >= 35.0 * 5.0);
    assert!(sample(&samples, "spate_connections_accepted_total{transport=tcp}") >= 36.0);
    // The scrape's own connection is open.
    assert!(sample(&samples, "spate_connections{transport=tcp}") >= 1.0);
    assert_eq!(
        sample(&samples, "spate_request_duration_seconds_count{}"),
        sample(&samples, "spate_request_duration_seconds_bucket{le=+Inf}")
    );
    assert!(sample(&samples, "spate_request_duration_seconds_count{}") >= 35.0);

    // A 404 is counted as 4xx.
    assert_eq!(get(&s, "/nothing-here").0, 404);
    let (_, status) = get(&s, "/server-status");
    assert!(
        status.contains("\"server-version\"") && status.contains("\"worker-threads\": 2"),
        "{status}"
    );
    assert!(status.contains("\"generation\": 1"), "{status}");
}

#[test]
fn http2_requests_connections_resets_and_goaways_are_counted() {
    let s = Spate::start(OBSERVED);
    use common::clients::{h2_send, H2Req};
    let mut reqs: Vec<H2Req> = (0..20).map(|_| H2Req::get("/x")).collect();
    reqs.extend((0..3).map(|_| H2Req::get("/nothing-here")));
    let replies = h2_send(s.addr, reqs);
    assert!(replies[..20]
        .iter()
        .all(|r| r.status == 200 && r.text() == "hello"));
    assert!(replies[20..].iter().all(|r| r.status == 404));

    // An HTTP/2 connection held open (prior knowledge) while scraping; it resets a stream.
    use spate::proto::h2::frame;
    use std::io::Write;
    let mut held = s.connect();
    let mut out = frame::PREFACE.to_vec();
    frame::put_settings(&mut out, &[]);
    let mut block = Vec::new();
    spate::proto::h2::hpack::Encoder::default().encode(
        [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":authority", b"localhost"),
            (b":path", b"/x"),
        ],
        &mut block,
    );
    frame::put_head(
        &mut out,
        block.len(),
        frame::kind::HEADERS,
        frame::flag::END_HEADERS,
        1,
    );
    out.extend_from_slice(&block);
    frame::put_rst_stream(&mut out, 1, frame::Reason::CANCEL);
    held.write_all(&out).unwrap();

    // The gauge waits for exactly the held connection: h2_send's may still be closing.
    let samples = scrape_until(&s, "/metrics", |samples| {
        sample(samples, "spate_requests_total{protocol=h2,status=2xx}") >= 20.0
            && sample(samples, "spate_requests_total{protocol=h2,status=4xx}") >= 3.0
            && sample(samples, "spate_connections_by_protocol{protocol=h2}") == 1.0
            && sample(
                samples,
                "spate_http2_resets_total{code=CANCEL,direction=received}",
            ) >= 1.0
    });
    assert_eq!(
        sample(&samples, "spate_requests_total{protocol=h2,status=2xx}"),
        20.0,
        "{samples:#?}"
    );
    assert_eq!(
        sample(&samples, "spate_requests_total{protocol=h2,status=4xx}"),
        3.0
    );
    assert_eq!(
        sample(&samples, "spate_connections_by_protocol{protocol=h2}"),
        1.0,
        "the held connection"
    );
    // The scrape's own connection.
    assert!(sample(&samples, "spate_connections_by_protocol{protocol=http/1.1}") >= 1.0);
    assert_eq!(
        sample(
            &samples,
            "spate_http2_resets_total{code=CANCEL,direction=received}"
        ),
        1.0
    );
    // HTTP/2 durations are in the histogram with HTTP/1.1's: 23 and the scrapes before.
    assert!(sample(&samples, "spate_request_duration_seconds_count{}") >= 23.0);
    // Response bytes: at least the bodies and a header block each.
    assert!(sample(&samples, "spate_sent_bytes_total{}") >= 23.0 * (5.0 + 1.0));

    // A reload that needs a new generation drains the old workers: the held connection gets
    // a GOAWAY, counted with its cause; closed, it leaves the gauge.
    reload(&s, &needing_a_new_generation(&s));
    held.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    assert!(
        read_until_goaway(&mut held),
        "no GOAWAY on the held connection"
    );
    let key = "spate_http2_goaways_total{cause=server stopping,code=NO_ERROR,direction=sent}";
    let samples = scrape_until(&s, "/metrics", |samples| sample(samples, key) >= 1.0);
    assert_eq!(sample(&samples, key), 1.0, "{samples:#?}");
    drop(held);
    let samples = scrape_until(&s, "/metrics", |samples| {
        sample(samples, "spate_connections_by_protocol{protocol=h2}") == 0.0
    });
    assert_eq!(
        sample(&samples, "spate_connections_by_protocol{protocol=h2}"),
        0.0
    );
}

/// Reads HTTP/2 frames until a GOAWAY (true) or the end of the connection.
fn read_until_goaway(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while buf.len() >= 9 {
            let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            if buf[3] == spate::proto::h2::frame::kind::GOAWAY {
                return true;
            }
            buf.drain(..9 + len);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn readiness_turns_503_on_a_draining_connection_and_reload_counts_a_generation() {
    let s = Spate::start(OBSERVED);
    // A keep-alive connection opened before the reload is served by the old workers.
    let mut old = common::clients::h1_conn(&s, std::time::Duration::from_secs(20));
    use std::io::Write;
    old.write_all(b"GET /ready HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut input = common::h1read::Input::new(old);
    let r = common::h1read::read_reply(&mut input, false).unwrap();
    assert_eq!(r.status, 200);
    let mut log = Vec::new();
    reload(&s, &needing_a_new_generation(&s));
    wait_for_log(&s, &mut log, "reloaded");
    // The old workers are told to drain just after that line: ask until they know (10 s).
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let r = loop {
        input
            .get_mut()
            .write_all(b"GET /ready HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let r = common::h1read::read_reply(&mut input, false).unwrap();
        if r.status != 200 {
            break r;
        }
        assert_ne!(
            r.header("connection"),
            Some("close"),
            "ready while draining"
        );
        assert!(
            std::time::Instant::now() < end,
            "the old worker still says ready 10 s after the reload"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    // New connections reach the new workers.
    assert_eq!(get(&s, "/ready").0, 200);
    let (_, status) = get(&s, "/server-status");
    assert!(status.contains("\"generation\": 2"), "{status}");
}

/// Waits (up to 15 s) until `path` has a line containing `what`; returns the file's text.
fn wait_for_file_line(path: &std::path::Path, what: &str) -> String {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| l.contains(what)) {
            return text;
        }
        assert!(
            std::time::Instant::now() < end,
            "no line with {what:?} in {}:\n{text}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn logging_config(emit: &str) -> String {
    format!(
        r#"
num-threads: 2
error-log: $DIR/error.log
error-log.emit-request-errors: {emit}
listen:
  host: 127.0.0.1
  port: 0
access-log:
  path: $DIR/access.log
  format: '{{"status":%s,"path":"%U","ua":"%{{user-agent}}i","ref":"%{{referer}}i","bytes":%b}}'
  escape: json
hosts:
  default:
    paths:
      /x:
        respond: {{body: hello}}
      /down:
        proxy.reverse.url: http://127.0.0.1:1/
"#
    )
}

#[test]
fn json_access_log_request_errors_and_reopen_on_sigusr1() {
    let s = Spate::start(&logging_config("ON"));
    let dir = s.path().to_path_buf();
    let r = common::clients::h1(
        &s,
        b"GET /x HTTP/1.1\r\nHost: a\r\nUser-Agent: say \"hi\" \\ \xc3\xa9\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(get(&s, "/down").0, 502);
    // Lines are written within a second; each is JSON (Python's parser), values exact.
    // Each worker flushes its own buffer: wait for both lines.
    wait_for_file_line(&dir.join("access.log"), "/down");
    let text = wait_for_file_line(&dir.join("access.log"), "\"/x\"");
    let script = r#"
import json, sys
for line in sys.stdin:
    v = json.loads(line)
    print(v["status"], v["path"], repr(v["ua"]), v["ref"], v["bytes"])
"#;
    let out = common::system_python(script, text.as_bytes());
    assert!(
        out.status.success(),
        "not JSON lines: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed = String::from_utf8_lossy(&out.stdout).into_owned();
    // Two workers: their lines may come in either order.
    let lines: Vec<&str> = parsed.lines().collect();
    // A non-UTF-8-aware escape: each byte of é as \u00NN, as h2o writes it.
    assert!(
        lines.contains(&r#"200 /x 'say "hi" \\ Ã©' None 5"#),
        "{text}"
    );
    assert!(lines.iter().any(|l| l.starts_with("502 /down ")), "{text}");
    assert_eq!(lines.len(), 2, "{text}");
    // The backend's failure is a request error: logged.
    wait_for_file_line(&dir.join("error.log"), "proxy:");

    // logrotate: rename, SIGUSR1, and new lines go to new files.
    std::fs::rename(dir.join("access.log"), dir.join("access.log.1")).unwrap();
    std::fs::rename(dir.join("error.log"), dir.join("error.log.1")).unwrap();
    signal(&s.child, libc::SIGUSR1);
    wait_for_file_line(&dir.join("error.log.1"), "reopening log files");
    // Each worker reopens on its own thread: wait until none holds the rotated file.
    let rotated = std::fs::canonicalize(dir.join("access.log.1")).unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while descriptors_of(&s, &rotated) > 0 || !dir.join("access.log").exists() {
        assert!(
            std::time::Instant::now() < end,
            "access.log not reopened by every worker"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for _ in 0..4 {
        assert_eq!(get(&s, "/x").0, 200);
    }
    assert_eq!(get(&s, "/down").0, 502);
    // Each worker writes its lines out within a second: wait for all five (15 s).
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let new = loop {
        let text = std::fs::read_to_string(dir.join("access.log")).unwrap_or_default();
        if text.lines().count() >= 5 || std::time::Instant::now() > end {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(new.lines().count(), 5, "{new}");
    assert_eq!(
        new.lines().filter(|l| l.contains("/down")).count(),
        1,
        "{new}"
    );
    let old = std::fs::read_to_string(dir.join("access.log.1")).unwrap();
    assert_eq!(
        old.lines().count(),
        2,
        "the rotated file got no more lines: {old}"
    );
    wait_for_file_line(&dir.join("error.log"), "proxy:");
}

/// How many of the server's descriptors are open on the file at `path`.
fn descriptors_of(s: &Spate, path: &std::path::Path) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", s.child.id()))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t == path)
        .count()
}

#[test]
fn request_errors_stay_out_of_the_error_log_when_emit_request_errors_is_off() {
    let s = Spate::start(&logging_config("OFF"));
    assert_eq!(get(&s, "/down").0, 502);
    // A request the server rejects is a request error too.
    let r = s.raw(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    wait_for_file_line(&s.path().join("access.log"), "/down");
    // Server-level lines still come (SIGUSR1's).
    signal(&s.child, libc::SIGUSR1);
    let text = wait_for_file_line(&s.path().join("error.log"), "reopening log files");
    assert!(
        !text.contains("proxy:") && !text.contains("rejected request"),
        "{text}"
    );
}

/// A port free now (bound, then released): the load generators and the reloaded
/// configurations need the real port.
/// A plain listener (HTTP/1.1 and h2c) and a TLS one whose certificate is `site.crt` in `dir`;
/// `/` answers `body`; `/added` exists when `added`. The shutdown and keep-alive timeouts are
/// long enough for the TLS connection made before reload 13 to wait, idle in a draining
/// generation, until it is used after reload 14, however slow the machine.
fn two_listeners(dir: &std::path::Path, plain: u16, tls: u16, body: &str, added: bool) -> String {
    let added = if added {
        "      /added:\n        respond: {body: added}\n"
    } else {
        ""
    };
    format!(
        "
num-threads: 2
shutdown-timeout: 20
http1-keepalive-timeout: 60
listen:
  - {{host: 127.0.0.1, port: {plain}}}
  - host: 127.0.0.1
    port: {tls}
    ssl:
      certificate-file: {dir}/site.crt
      key-file: {dir}/site.key
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
{added}      /:
        respond: {{body: {body}}}
",
        dir = dir.display()
    )
}

/// A TLS connection to `port` that trusts only the certificate in `trusted`.
type TlsStream = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

fn tls_connect(port: u16, trusted: &std::path::Path) -> std::io::Result<TlsStream> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(trusted).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(std::io::Error::other)?;
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// Sends GET `path` on a keep-alive connection and reads the answer.
fn get_on<S: std::io::Read + std::io::Write>(
    input: &mut common::h1read::Input<S>,
    path: &str,
) -> common::h1read::Reply {
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    input.get_mut().write_all(req.as_bytes()).unwrap();
    input.get_mut().flush().unwrap();
    common::h1read::read_reply(input, false).unwrap()
}

/// GET `path` on a new plain connection: (status, body).
fn get_at(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut input = common::h1read::Input::new(s);
    let r = get_on(&mut input, path);
    (r.status, r.text())
}

/// Reloads and returns how long it took until a new connection is answered `body` on `/`.
fn reload_until_served(s: &Spate, yaml: &str, body: &str) -> std::time::Duration {
    let start = std::time::Instant::now();
    reload(s, yaml);
    loop {
        if get_at(s.addr, "/") == (200, body.to_string()) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "the reload to {body} did not take effect"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Issue 13's test: under h2load (h2c and TLS, 100 connections of 10 streams) and wrk
/// (HTTP/1.1, 100 connections), 20 reloads, one of them broken, lose no request; a path added
/// by a reload answers; a rotated certificate is served to new connections while a
/// connection made before goes on. Every reload is applied in place (issue 43): h2load fails
/// no request, as no GOAWAY is sent.
#[test]
fn twenty_reloads_under_h2load_and_wrk_lose_no_request() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    if !tls_support::need("h2load") || !tls_support::need("wrk") {
        return;
    }
    let _one_at_a_time = under_load();
    const SECS: u32 = 8;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    tls_support::cert(&d, "site", "localhost", false);
    std::fs::copy(d.join("site.crt"), d.join("old.crt")).unwrap();
    let (s, [plain, tls]) = Spate::start_on_free_ports(dir, |[plain, tls]| {
        two_listeners(&d, plain, tls, "v0", false)
    });
    use common::load::{Load, Repeated};
    // Counted runs: a timed one waits for clients that connect late, which only a GOAWAY
    // would stop (`Repeated::h2load_counted`).
    let h2c = Repeated::h2load_counted(&format!("http://127.0.0.1:{plain}/"), SECS, 20_000);
    let h2tls = Repeated::h2load_counted(&format!("https://127.0.0.1:{tls}/"), SECS, 5_000);
    let wrk = Load::wrk(&format!("http://127.0.0.1:{plain}/"), SECS);
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(700));
    let mut log = Vec::new();
    let mut timings = Vec::new();
    let mut old_tls = None;
    for i in 1..=20 {
        let body = format!("v{i}");
        let added = i >= 10;
        match i {
            7 => {
                // A broken configuration: every problem logged, the previous one serves.
                reload(
                    &s,
                    "listen: 0\nnum-threads: lots\nhosts:\n  default:\n    pathz: {}\n",
                );
                wait_for_log(&s, &mut log, "reload failed");
                assert_eq!(get_at(s.addr, "/"), (200, "v6".to_string()));
                continue;
            }
            13 => {
                // Made with the certificate about to be replaced; idle across the rotation.
                let c = tls_connect(tls, &d.join("old.crt")).unwrap();
                let mut input = common::h1read::Input::new(c);
                assert_eq!(get_on(&mut input, "/").status, 200);
                old_tls = Some(input);
            }
            14 => {
                tls_support::cert(&d, "site", "localhost", false);
            }
            _ => {}
        }
        let yaml = two_listeners(&d, plain, tls, &body, added);
        timings.push(reload_until_served(&s, &yaml, &body));
        if i == 10 {
            // A new connection may still reach an old worker for a moment (as at 14 below):
            // the new path is served once they have seen that they drain.
            let end = Instant::now() + Duration::from_secs(20);
            loop {
                let got = get_at(s.addr, "/added");
                if got == (200, "added".to_string()) {
                    break;
                }
                assert_eq!(
                    got,
                    (200, "v9".to_string()),
                    "only the old configuration differs"
                );
                assert!(Instant::now() < end, "the added path is not served");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if i == 14 {
            // New connections get the new certificate only, once the old workers have seen
            // that they drain (they may accept for a moment after the new ones start). The
            // bound is generous: on a loaded CI machine the old workers may see it late.
            let end = Instant::now() + Duration::from_secs(20);
            while tls_connect(tls, &d.join("old.crt")).is_ok() {
                assert!(Instant::now() < end, "the old certificate is still served");
                std::thread::sleep(Duration::from_millis(5));
            }
            let c = tls_connect(tls, &d.join("site.crt")).unwrap();
            let mut input = common::h1read::Input::new(c);
            assert_eq!(get_on(&mut input, "/").text(), "v14");
            // The connection made before goes on (a reload in place closes nothing), routed
            // by the new configuration.
            let mut old = old_tls.take().unwrap();
            let r = get_on(&mut old, "/");
            assert_eq!(
                (r.status, r.header("connection")),
                (200, Some("keep-alive"))
            );
            assert_eq!(r.text(), "v14");
            let _ = old.get_mut().flush();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!("20 reloads in {:?}", started.elapsed());
    let reports = [h2c.finish(), h2tls.finish(), wrk.finish(SECS)];
    for r in &reports {
        eprintln!("{}", r.text);
        assert_eq!(r.non_2xx, 0, "{}", r.text);
        // Requests flowed (on a loaded machine, far fewer than on an idle one).
        assert!(r.succeeded > 50, "{}", r.text);
    }
    // wrk's HTTP/1.1: not one error.
    assert_eq!(reports[2].failed, 0, "{}", reports[2].text);
    // Every reload here is applied in place: no GOAWAY, so h2load (which does not retry a
    // request refused after one) fails none either.
    assert_eq!(reports[0].failed, 0, "{}", reports[0].text);
    assert_eq!(reports[1].failed, 0, "{}", reports[1].text);
    // Spate answered at least h2load's successes (more: h2load does not count requests
    // outside its measured duration), all 2xx, and reset no stream.
    let h2load_ok = (reports[0].succeeded + reports[1].succeeded) as f64;
    let samples = scrape_until(&s, "/metrics", |m| {
        sample(m, "spate_requests_total{protocol=h2,status=2xx}") >= h2load_ok
    });
    for class in ["4xx", "5xx"] {
        let key = format!("spate_requests_total{{protocol=h2,status={class}}}");
        assert_eq!(sample(&samples, &key), 0.0);
    }
    assert!(
        !samples
            .iter()
            .any(|l| l.starts_with("spate_http2_resets_total") && l.contains("direction=sent")),
        "{samples:#?}"
    );
    let errors = log.join("\n");
    assert!(errors.contains("spate.yaml:2:"), "{errors}");
    timings.sort();
    eprintln!(
        "SIGHUP to new configuration serving: min {:?}, median {:?}, max {:?}",
        timings[0],
        timings[timings.len() / 2],
        timings[timings.len() - 1]
    );
}

/// Sends SIGTERM to a process the test did not start itself (the upgraded spate) when dropped.
struct Pid(i32);

impl Drop for Pid {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the spate this test upgraded to.
        unsafe { libc::kill(self.0, libc::SIGTERM) };
    }
}

/// Waits for the log line naming the new process and returns its pid.
fn upgraded_pid(s: &Spate, log: &mut Vec<String>) -> Pid {
    wait_for_log(s, log, "binary upgrade: new process");
    let line = log
        .iter()
        .find(|l| l.contains("binary upgrade: new process"))
        .unwrap();
    let pid = line
        .split("new process ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    Pid(pid)
}

#[test]
fn binary_upgrade_under_load_loses_no_request() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let _one_at_a_time = under_load();
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = Spate::start_on_free_ports(dir, |[port]| {
        RESPOND.replace("port: 0", &format!("port: {port}"))
    });
    let addr = s.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let bodies = Arc::new(Bodies::default());
    let h1 = {
        let (stop, bodies) = (stop.clone(), bodies.clone());
        std::thread::spawn(move || h1_loop(addr, &stop, &bodies))
    };
    let h2 = {
        let stop = stop.clone();
        std::thread::spawn(move || h2_loop(addr, 8, 8, &stop))
    };
    let wrk = tls_support::need("wrk").then(|| common::load::Load::wrk(&s.url("/"), 3));
    std::thread::sleep(Duration::from_millis(500));
    signal(&s.child, libc::SIGUSR2);
    let mut log = Vec::new();
    let new = upgraded_pid(&s, &mut log);
    // The old process drains and exits on its own (its shutdown-timeout is 10 s).
    let status = wait_timeout(&mut s.child, Duration::from_secs(30)).expect("old spate exits");
    assert!(status.success(), "{status}");
    // The HTTP/1.1 client goes on with the new process: more answers after the old one
    // exited, and over 100 in all (up to 20 s).
    bodies.wait_for_answers((bodies.answered() + 20).max(101));
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = h1.join().unwrap();
    assert_eq!(failed, 0, "failed HTTP/1.1 requests across the upgrade");
    assert!(ok > 100, "{ok}");
    let (ok, failed, refused) = h2.join().unwrap();
    assert_eq!(failed, 0, "failed HTTP/2 requests across the upgrade");
    eprintln!("HTTP/2: {ok} answered, {refused} refused by a GOAWAY (retryable)");
    if let Some(w) = wrk {
        let r = w.finish(3);
        eprintln!("{}", r.text);
        assert_eq!((r.failed, r.non_2xx), (0, 0), "{}", r.text);
    }
    // The new process serves on the same port, and can itself be reloaded.
    assert_eq!(get_at(addr, "/"), (200, "one".to_string()));
    drop(new);
}

#[test]
fn a_failed_binary_upgrade_leaves_the_old_process_serving() {
    let s = Spate::start(RESPOND);
    // The new process reads the same file: made invalid, it exits at once.
    std::fs::write(
        s.path().join("spate.yaml"),
        "listen: 0\nhosts: {}\nnope: 1\n",
    )
    .unwrap();
    signal(&s.child, libc::SIGUSR2);
    let mut log = Vec::new();
    wait_for_log(&s, &mut log, "binary upgrade failed");
    let all = log.join("\n");
    assert!(all.contains("exited before it was ready"), "{all}");
    assert!(
        all.contains("spate.yaml:3:"),
        "the new process's own errors: {all}"
    );
    for _ in 0..10 {
        assert_eq!(get_at(s.addr, "/"), (200, "one".to_string()));
    }
}

/// deploy/: the Dockerfile copies files that exist, the manifest's probes and port name
/// handlers of the configuration it ships, the unit reloads with SIGHUP, and spate accepts
/// that configuration (`-t`) and serves it.
#[test]
fn the_deployment_recipe_matches_a_configuration_spate_accepts() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let docker = read("deploy/Dockerfile");
    for line in docker
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let src = line.split_whitespace().nth(1).unwrap();
        if src != "." {
            assert!(
                root.join(src).exists(),
                "Dockerfile copies {src}, which is missing"
            );
        }
    }
    assert!(docker.contains("COPY deploy/spate.yaml /etc/spate/spate.yaml"));
    assert!(docker.contains(r#"CMD ["-c", "/etc/spate/spate.yaml"]"#));
    let unit = read("deploy/spate.service");
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    assert!(unit.contains("ExecStart=/usr/local/bin/spate -c /etc/spate/spate.yaml"));
    let kube = read("deploy/kubernetes.yaml");
    assert!(kube.contains(r#"args: ["-c", "/etc/spate/spate.yaml"]"#));
    assert!(kube.contains("mountPath: /etc/spate"));
    let conf = read("deploy/spate.yaml");
    assert!(kube.contains("containerPort: 8080") && conf.contains("port: 8080"));
    // Each probe path is a handler of the shipped configuration.
    for (probe, handler) in [("/-/ready", "readiness: ON"), ("/-/status", "status: ON")] {
        assert!(kube.contains(&format!("path: {probe}")), "{probe}");
        let at = conf.find(&format!("{probe}:")).unwrap();
        assert!(
            conf[at..].lines().nth(1).unwrap().contains(handler),
            "{probe}"
        );
    }
    // The configuration as the image has it: the site at /srv/site, here the example site.
    let local = conf.replace(
        "/srv/site",
        &root.join("examples/site").display().to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spate.yaml");
    std::fs::write(&path, &local).unwrap();
    let out = Command::new(BIN)
        .arg("-t")
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And it serves: the probes answer 200 and the site is there.
    let s = Spate::start(
        &local
            .replace("host: 0.0.0.0", "host: 127.0.0.1")
            .replace("port: 8080", "port: 0"),
    );
    assert_eq!(get_at(s.addr, "/-/ready").0, 200);
    assert_eq!(get_at(s.addr, "/-/status").0, 200);
    assert_eq!(get_at(s.addr, "/hello.txt").0, 200);
}
