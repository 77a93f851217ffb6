//! Reloads and the connections open across them: a reload that changes only what a worker
//! routes by is applied in place (the next request of every open connection routes by it,
//! answers in progress finish by the old one, nothing is closed); one that changes what a
//! worker set up starts a new generation and says why (`src/server/reload.rs`,
//! `src/server/LIFECYCLE.md`).

mod common;
mod h3_support;
mod tls_support;

use common::backend::Backend;
use common::clients::{h2_send, H2Req};
use common::*;
use std::io::Write;
use std::net::TcpStream;

fn conf(threads: usize, paths: &str) -> String {
    format!(
        "num-threads: {threads}\nlisten: {{host: 127.0.0.1, port: 0}}\nhosts:\n  default:\n    paths:\n      /old:\n        respond: {{status: 200, body: old}}\n{paths}"
    )
}

const NEW_PATH: &str = "      /new:\n        respond: {status: 200, body: added}\n";

/// One GET on a keep-alive connection.
fn get_on(s: &mut TcpStream, pending: &mut Vec<u8>, path: &str) -> RawResponse {
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    read_response(s, pending, false)
}

/// Writes `yaml`, sends SIGHUP and returns the one new log line naming `log_needle`.
fn reload(s: &Spate, yaml: &str, log_needle: &str) -> String {
    std::fs::write(s.path().join("spate.yaml"), yaml).unwrap();
    signal(&s.child, libc::SIGHUP);
    let mut lines = s.log_lines_naming(log_needle, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines.remove(0)
}

/// A configuration that does not load changes nothing: the error is logged, a keep-alive
/// connection opened before goes on (no `Connection: close`), and it is still routed by the
/// old configuration.
#[test]
fn a_broken_reload_keeps_the_configuration_and_the_connections() {
    let s = Spate::start(&conf(1, ""));
    let mut c = s.connect();
    let mut pending = Vec::new();
    assert_eq!(get_on(&mut c, &mut pending, "/old").text(), "old");
    let broken = conf(1, NEW_PATH).replace("respond: {status: 200, body: added}", "respond: [");
    let line = reload(&s, &broken, "reload failed");
    assert!(line.contains("still serving"), "{line}");
    let again = get_on(&mut c, &mut pending, "/old");
    assert_eq!((again.status, again.text().as_str()), (200, "old"));
    assert_eq!(again.header("connection"), Some("keep-alive"), "{again:?}");
    assert_eq!(get_on(&mut c, &mut pending, "/new").status, 404);
    assert_eq!(get(&s, "/new").status, 404);
}

/// The reload's log line says how it was applied: added paths in place; a changed thread
/// count needs a new generation, and the line says so.
#[test]
fn a_reload_names_why_it_starts_a_new_generation() {
    let s = Spate::start(&conf(1, ""));
    let line = reload(&s, &conf(1, NEW_PATH), "reloaded");
    assert!(line.contains("in place: no connection closed"), "{line}");
    assert_eq!(get(&s, "/new").text(), "added");
    let line = reload(&s, &conf(2, NEW_PATH), "reloaded");
    assert!(
        line.contains("new worker generation: num-threads changed from 1 to 2"),
        "{line}"
    );
    assert_eq!(get(&s, "/new").text(), "added");
}

/// The goal (issue 43): a path added by a reload answers on a keep-alive connection opened
/// before it, which the reload neither closes nor marks `Connection: close`.
/// On two workers: each swaps its own routing.
#[test]
fn a_path_added_by_a_reload_answers_on_a_connection_opened_before() {
    let s = Spate::start(&conf(2, ""));
    let mut conns: Vec<_> = (0..4).map(|_| (s.connect(), Vec::new())).collect();
    for (c, pending) in &mut conns {
        assert_eq!(get_on(c, pending, "/new").status, 404);
    }
    let line = reload(&s, &conf(2, NEW_PATH), "reloaded");
    assert!(line.contains("in place"), "{line}");
    for (c, pending) in &mut conns {
        let added = get_on(c, pending, "/new");
        assert_eq!((added.status, added.text().as_str()), (200, "added"));
        assert_eq!(added.header("connection"), Some("keep-alive"), "{added:?}");
        assert_eq!(get_on(c, pending, "/old").text(), "old");
    }
    // A path the reload removes is gone from the next request on.
    let line = reload(&s, &conf(2, "").replace("/old:", "/other:"), "reloaded");
    assert!(line.contains("in place"), "{line}");
    for (c, pending) in &mut conns {
        assert_eq!(get_on(c, pending, "/old").status, 404);
    }
}

/// The same on an HTTP/2 connection (h2c with prior knowledge): its next stream routes by
/// the new configuration.
#[test]
fn a_path_added_by_a_reload_answers_on_an_http2_connection_opened_before() {
    let s = Spate::start(&conf(1, ""));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = s.addr;
    let mut client = rt.block_on(h2_client(addr));
    let mut get2 = |path: &str| {
        let uri = format!("http://{addr}{path}");
        rt.block_on(h2_get(&mut client, &uri))
    };
    assert_eq!(get2("/new").0, 404);
    let line = reload(&s, &conf(1, NEW_PATH), "reloaded");
    assert!(line.contains("in place"), "{line}");
    assert_eq!(get2("/new"), (200, "added".to_string()));
    assert_eq!(get2("/old"), (200, "old".to_string()));
}

/// Repeats of one request on an HTTP/2 connection, in batches of ten at once, get the new
/// answer after a reload in place, on the same connection. (The connection's memo of a
/// repeated answer, which a reload makes it forget with `Connection::forget_answers`, lives
/// only while the connection stays busy; between these batches it goes quiet and drops it, so
/// this does not show the forgetting itself.)
#[test]
fn a_repeated_request_on_an_http2_connection_gets_the_new_answer() {
    let same =
        |body: &str| format!("      /same:\n        respond: {{status: 200, body: {body}}}\n");
    let s = Spate::start(&conf(1, &same("before")));
    let addr = s.addr;
    let reloaded = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = reloaded.clone();
    // Batches of ten at once, back to back, until the new answer comes (or 30 s pass).
    let load = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = h2_client(addr).await;
            let uri = format!("http://{addr}/same");
            let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let mut seen = Vec::new();
            while std::time::Instant::now() < end {
                let after_reload = flag.load(std::sync::atomic::Ordering::SeqCst);
                let batch = (0..10).map(|_| {
                    let mut c = client.clone();
                    let uri = uri.clone();
                    async move { h2_get(&mut c, &uri).await }
                });
                let got = futures_join_all(batch).await;
                seen.extend(got.iter().cloned());
                if after_reload && got.iter().all(|r| *r == (200, "after".to_string())) {
                    return (true, seen);
                }
            }
            (false, seen)
        })
    });
    // The connection is busy with repeats before the reload comes.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let line = reload(&s, &conf(1, &same("after")), "reloaded");
    assert!(line.contains("in place"), "{line}");
    reloaded.store(true, std::sync::atomic::Ordering::SeqCst);
    let (done, seen) = load.join().unwrap();
    assert!(
        done,
        "the repeats never got the new answer: {:?}",
        seen.last()
    );
    assert!(seen.iter().all(|(status, _)| *status == 200));
}

/// Joins futures on the current task (the tests' runtime has no futures crate).
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futs.map(|f| Box::pin(f)).collect();
    let mut out = Vec::with_capacity(handles.len());
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.extend(results.into_iter().flatten());
    out
}

/// An h2c connection (prior knowledge) to `addr`, its driver spawned.
async fn h2_client(addr: std::net::SocketAddr) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// One GET on an HTTP/2 connection: status and body.
async fn h2_get(client: &mut h2::client::SendRequest<bytes::Bytes>, uri: &str) -> (u16, String) {
    let ready = client.clone().ready().await.unwrap();
    *client = ready;
    let req = http::Request::get(uri).body(()).unwrap();
    let (resp, _) = client.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&text).into_owned())
}

/// A request in progress when the reload comes ends by the configuration it started with (its
/// path's header commands), on HTTP/1.1 and HTTP/2; the next request takes the new one.
#[test]
fn a_request_in_progress_finishes_by_the_configuration_it_started_with() {
    let backend = Backend::start();
    let slow = |tag: &str| {
        format!(
            "      /slow:\n        proxy.reverse.url: {}\n        header.add: \"x-generation: {tag}\"\n",
            backend.url("/")
        )
    };
    let s = Spate::start(&conf(1, &slow("old")));
    let mut c = s.connect();
    // The backend answers `delay` after 2 s: the reload lands while it waits.
    c.write_all(b"GET /slow/delay?ms=2000 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let addr = s.addr;
    let h2 = std::thread::spawn(move || {
        h2_send(addr, vec![H2Req::get("/slow/delay?ms=2000")])
            .pop()
            .unwrap()
    });
    // Both requests are at the backend (routed by the old configuration) before the reload.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while backend.requests() < 2 {
        assert!(
            std::time::Instant::now() < end,
            "the requests did not reach the backend"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    reload(&s, &conf(1, &slow("new")), "reloaded");
    let mut pending = Vec::new();
    let first = read_response(&mut c, &mut pending, false);
    assert_eq!(first.text(), "late\n");
    assert_eq!(first.header("x-generation"), Some("old"), "{first:?}");
    let h2 = h2.join().unwrap();
    assert_eq!(h2.status, 200, "{:?}", h2.error);
    assert_eq!(h2.header("x-generation"), Some("old"));
    let next = get_on(&mut c, &mut pending, "/slow/delay?ms=1");
    assert_eq!(next.header("x-generation"), Some("new"), "{next:?}");
}

/// The same on an HTTP/3 connection (aioquic): its next request routes by the new
/// configuration. Skipped when the HTTP/3 clients are not installed (`h3_support::Clients`).
#[test]
fn a_path_added_by_a_reload_answers_on_an_http3_connection_opened_before() {
    use std::io::{BufRead, BufReader};
    let Some(clients) = h3_support::Clients::find() else {
        return;
    };
    let hosts =
        "hosts:\n  default:\n    paths:\n      /old:\n        respond: {status: 200, body: old}\n";
    let s = h3_support::H3Server::start(tempfile::tempdir().unwrap(), "", hosts);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3/h3client.py");
    let mut client = std::process::Command::new(clients.python())
        .args([script, "--again-after-stdin", &s.url("/new")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(client.stdout.take().unwrap()).lines();
    let mut next = || out.next().expect("a line from the client").unwrap();
    let before = next();
    assert!(
        before.starts_with("response\t") && before.contains("status=404"),
        "{before}"
    );
    let waiting = next();
    assert!(waiting.starts_with("waiting"), "{waiting}");
    let yaml = std::fs::read_to_string(s.dir().join("spate.yaml")).unwrap();
    let line = reload(
        &s.s,
        &format!("{}\n{NEW_PATH}", yaml.trim_end()),
        "reloaded",
    );
    assert!(line.contains("in place"), "{line}");
    client.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let after = next();
    assert!(
        after.contains("status=200") && after.contains("len=5") && !after.contains("error="),
        "{after}"
    );
    assert!(client.wait().unwrap().success());
}

/// Reloads in place under load lose nothing: `h2load -c20 -m10 -n 200000` (h2c) with 10
/// reloads while it runs (each changing the answer, the fifth a configuration that does not
/// load, the last adding /new) reports every request succeeded, none failed: no connection
/// gets a GOAWAY, so h2load has no request it must give up. A keep-alive connection opened
/// before the first reload gets /new after the last. (`bench/reload-soak` is the long version:
/// 2,000,000 requests on h2c and TLS at once.)
#[test]
fn ten_reloads_under_h2load_fail_no_request() {
    let answer = |v: usize| format!("      /load:\n        respond: {{status: 200, body: v{v}}}\n");
    let s = Spate::start(&conf(2, &answer(0)));
    let mut before = s.connect();
    let mut pending = Vec::new();
    assert_eq!(get_on(&mut before, &mut pending, "/new").status, 404);
    let url = s.url("/load");
    let load = common::load::Load::h2load_with(&url, &["-c20", "-m10", "-t1", "-n", "200000"]);
    // Back to back, so that most land while h2load runs (it takes a second or two here).
    let mut current = 0;
    for v in 1..=10 {
        let yaml = match v {
            5 => conf(
                2,
                &answer(v).replace("respond: {status: 200, body: v5}", "respond: ["),
            ),
            10 => conf(2, &format!("{}{NEW_PATH}", answer(v))),
            _ => conf(2, &answer(v)),
        };
        std::fs::write(s.path().join("spate.yaml"), yaml).unwrap();
        signal(&s.child, libc::SIGHUP);
        let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let line = loop {
            let lines = s.stderr_lines();
            if let Some(l) = lines
                .into_iter()
                .find(|l| l.contains("reloaded") || l.contains("reload failed"))
            {
                break l;
            }
            assert!(std::time::Instant::now() < end, "no reload");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        if v == 5 {
            assert!(line.contains("still serving"), "{line}");
        } else {
            assert!(line.contains("in place"), "{line}");
            current = v;
        }
        assert_eq!(get(&s, "/load").text(), format!("v{current}"));
    }
    let r = load.finish(100);
    eprintln!("{}", r.text);
    assert_eq!(
        (r.succeeded, r.failed, r.non_2xx),
        (200_000, 0, 0),
        "{}",
        r.text
    );
    let added = get_on(&mut before, &mut pending, "/new");
    assert_eq!((added.status, added.text().as_str()), (200, "added"));
}
