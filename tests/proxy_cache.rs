//! `proxy.cache` (issue 40) against a real backend: a small HTTP/1.1 origin in this file
//! whose answers say how to cache them (its query: `cc=`, `etag=`, `vary=`, `len=`,
//! `delay=`, `stall=`: that many ms after the first half of the body, `fail-after=`: 503 from
//! the request after N on, `trailer=`: a chunked body with `X-Check` of that value as its
//! trailer), and which counts the requests each path reached it with. Clients: raw
//! HTTP/1.1 over TCP.

mod common;

use common::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the origin saw: requests per path, and the last request's head per path.
#[derive(Default)]
struct Seen {
    count: HashMap<String, usize>,
    last: HashMap<String, String>,
}

struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
}

impl Origin {
    fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let seen = s2.clone();
                std::thread::spawn(move || serve(conn, seen));
            }
        });
        Origin { addr, seen, stop }
    }

    fn count(&self, path: &str) -> usize {
        *self
            .seen
            .lock()
            .expect("lock")
            .count
            .get(path)
            .unwrap_or(&0)
    }

    fn last(&self, path: &str) -> String {
        self.seen
            .lock()
            .expect("lock")
            .last
            .get(path)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn query<'a>(target: &'a str, key: &str) -> Option<&'a str> {
    let q = target.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then_some(v)
    })
}

fn decode(v: &str) -> String {
    v.replace("%20", " ")
        .replace("%3D", "=")
        .replace("%2C", ",")
}

/// One connection: requests until it closes. Answers from the query; a request whose
/// If-None-Match names the `etag` gets 304 with `X-Gen` counting the path's requests.
fn serve(mut conn: TcpStream, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or_default().split(' ');
        let method = first.next().unwrap_or_default().to_string();
        let target = first.next().unwrap_or_default().to_string();
        let header = |name: &str| {
            head.split("\r\n").skip(1).find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let body_len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < body_len {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..body_len);
        let path = target.split('?').next().unwrap_or_default().to_string();
        let n = {
            let mut s = seen.lock().expect("lock");
            let c = s.count.entry(path.clone()).or_insert(0);
            *c += 1;
            let n = *c;
            s.last.insert(path.clone(), head.clone());
            n
        };
        if let Some(ms) = query(&target, "delay").and_then(|v| v.parse().ok()) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if query(&target, "fail-after")
            .and_then(|v| v.parse::<usize>().ok())
            .is_some_and(|after| n > after)
        {
            let out = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nbusy\n";
            if conn.write_all(out.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let mut extra = String::new();
        if let Some(cc) = query(&target, "cc") {
            extra += &format!("Cache-Control: {}\r\n", decode(cc));
        }
        if let Some(v) = query(&target, "vary") {
            extra += &format!("Vary: {}\r\n", decode(v));
            let lang = header("accept-language").unwrap_or_default();
            extra += &format!("X-Lang: {lang}\r\n");
        }
        extra += &format!("X-Gen: {n}\r\n");
        let etag = query(&target, "etag").map(|e| format!("\"{e}\""));
        if let Some(e) = &etag {
            extra += &format!("ETag: {e}\r\n");
            if header("if-none-match").as_deref() == Some(e.as_str()) {
                let out = format!("HTTP/1.1 304 Not Modified\r\n{extra}\r\n");
                if conn.write_all(out.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
        }
        let len: usize = query(&target, "len")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let body: Vec<u8> = if len > 0 {
            (0..len).map(|i| b'a' + (i % 26) as u8).collect()
        } else {
            format!("{method} {path} #{n}\n").into_bytes()
        };
        if let Some(t) = query(&target, "trailer") {
            // Chunked, in two chunks, then the trailer.
            let half = body.len() / 2;
            let mut out = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Check\r\n{extra}\r\n"
            )
            .into_bytes();
            if method != "HEAD" {
                for part in [&body[..half], &body[half..]] {
                    out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                    out.extend_from_slice(part);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(format!("0\r\nX-Check: {t}\r\n\r\n").as_bytes());
            }
            if conn.write_all(&out).is_err() {
                return;
            }
            continue;
        }
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}\r\n",
            body.len()
        )
        .into_bytes();
        if method != "HEAD" {
            out.extend_from_slice(&body);
        }
        if let Some(ms) = query(&target, "stall").and_then(|v| v.parse().ok()) {
            let half = out.len() - body.len() / 2;
            if conn.write_all(&out[..half]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(ms));
            out.drain(..half);
        }
        if conn.write_all(&out).is_err() {
            return;
        }
    }
}

fn spate(origin: &Origin, cache: &str) -> Spate {
    Spate::start(&format!(
        "
listen: 0
num-threads: 2
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
        proxy.reverse.url: http://{}/
        proxy.cache: {cache}
      /plain:
        proxy.reverse.url: http://{}/
",
        origin.addr, origin.addr
    ))
}

fn send(s: &Spate, raw: &str) -> RawResponse {
    request(s, raw)
}

fn get_with(s: &Spate, path: &str, headers: &str) -> RawResponse {
    send(
        s,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n"),
    )
}

fn status_of(r: &RawResponse) -> &str {
    r.header("cache-status").unwrap_or("")
}

#[test]
fn fresh_responses_are_answered_from_the_store() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    let a = get(&s, "/fresh?cc=max-age%3D60");
    assert_eq!(a.status, 200);
    assert!(
        status_of(&a).contains("fwd=uri-miss") && status_of(&a).contains("stored"),
        "{a:?}"
    );
    let b = get(&s, "/fresh?cc=max-age%3D60");
    assert_eq!(b.status, 200);
    assert_eq!(b.text(), a.text());
    assert_eq!(status_of(&b), "spate; hit");
    assert!(b.header("age").is_some());
    // A HEAD is answered from the stored GET.
    let h = send(
        &s,
        "HEAD /fresh?cc=max-age%3D60 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!((h.status, status_of(&h)), (200, "spate; hit"));
    assert_eq!(
        h.header("content-length"),
        Some(a.body.len().to_string().as_str())
    );
    assert_eq!(origin.count("/fresh"), 1);
    // Another query is another key.
    get(&s, "/fresh?cc=max-age%3D60&x=1");
    assert_eq!(origin.count("/fresh"), 2);
    // A range of a stored response.
    let r = get_with(&s, "/fresh?cc=max-age%3D60", "Range: bytes=0-2\r\n");
    assert_eq!(
        (r.status, r.header("content-range")),
        (206, Some("bytes 0-2/14"))
    );
    assert_eq!(r.text(), "GET");
    // A path without proxy.cache says nothing of a cache.
    let p = get(&s, "/plain/fresh?cc=max-age%3D60");
    assert_eq!(p.header("cache-status"), None);
}

#[test]
fn what_must_not_be_stored_is_not() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    for (path, why) in [
        ("/nostore?cc=no-store", "detail=no-store"),
        ("/private?cc=private%2C%20max-age%3D60", "detail=private"),
        ("/nothing", "detail=no-lifetime"),
    ] {
        let a = get(&s, path);
        assert!(status_of(&a).contains(why), "{path}: {a:?}");
        get(&s, path);
    }
    assert_eq!(origin.count("/nostore"), 2);
    assert_eq!(origin.count("/private"), 2);
    assert_eq!(origin.count("/nothing"), 2);
    // Authorization: stored only with public (§3.5).
    let auth = "Authorization: Basic eDp5\r\n";
    get_with(&s, "/auth?cc=max-age%3D60", auth);
    get_with(&s, "/auth?cc=max-age%3D60", auth);
    assert_eq!(origin.count("/auth"), 2);
    get_with(&s, "/authpub?cc=public%2C%20max-age%3D60", auth);
    let b = get_with(&s, "/authpub?cc=public%2C%20max-age%3D60", auth);
    assert_eq!(status_of(&b), "spate; hit");
    assert_eq!(origin.count("/authpub"), 1);
    // The client's no-cache revalidates; only-if-cached on a miss is 504.
    get_with(
        &s,
        "/authpub?cc=public%2C%20max-age%3D60",
        "Cache-Control: no-cache\r\n",
    );
    assert_eq!(origin.count("/authpub"), 2);
    let o = get_with(&s, "/never", "Cache-Control: only-if-cached\r\n");
    assert_eq!(o.status, 504);
    assert_eq!(origin.count("/never"), 0);
}

#[test]
fn stale_responses_are_revalidated_and_a_304_updates_them() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    let path = "/reval?cc=max-age%3D0&etag=v1";
    let a = get(&s, path);
    assert_eq!((a.status, a.header("x-gen")), (200, Some("1")));
    let b = get(&s, path);
    assert_eq!(b.status, 200);
    assert_eq!(b.text(), a.text(), "the stored body");
    // The 304's fields replaced the stored ones.
    assert_eq!(b.header("x-gen"), Some("2"));
    assert_eq!(status_of(&b), "spate; fwd=stale; fwd-status=304");
    assert!(origin.last("/reval").contains("If-None-Match: \"v1\""));
    assert_eq!(origin.count("/reval"), 2);
    // The client's own validator against a fresh entry: 304 from the store.
    let fresh = "/fresh-etag?cc=max-age%3D60&etag=v2";
    get(&s, fresh);
    let c = get_with(&s, fresh, "If-None-Match: \"v2\"\r\n");
    assert_eq!((c.status, status_of(&c)), (304, "spate; hit"));
    assert_eq!(origin.count("/fresh-etag"), 1);
}

#[test]
fn stale_entries_are_answered_while_refreshed_or_when_the_backend_fails() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    // stale-while-revalidate: the stale entry at once, one refresh behind it.
    let swr = "/swr?cc=max-age%3D0%2C%20stale-while-revalidate%3D60&etag=w";
    assert_eq!(get(&s, swr).header("x-gen"), Some("1"));
    let b = get(&s, swr);
    assert_eq!((b.status, b.header("x-gen")), (200, Some("1")));
    assert_eq!(status_of(&b), "spate; hit; detail=stale-while-revalidate");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while origin.count("/swr") < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(origin.count("/swr"), 2);
    assert!(origin.last("/swr").contains("If-None-Match: \"w\""));
    // The refresh's 304 updated the entry.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(get(&s, swr).header("x-gen"), Some("2"));
    // stale-if-error: the backend fails (503 from its second request on); the stale entry
    // answers. Without it, the failure passes.
    let sie = "/sie?cc=max-age%3D0%2C%20stale-if-error%3D60&etag=e&fail-after=1";
    get(&s, sie);
    let c = get(&s, sie);
    assert_eq!(c.status, 200);
    assert!(status_of(&c).contains("detail=stale-if-error"), "{c:?}");
    let plain = "/nosie?cc=max-age%3D0&etag=e&fail-after=1";
    get(&s, plain);
    assert_eq!(get(&s, plain).status, 503);
}

#[test]
fn vary_keeps_a_variant_per_request_value() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    let path = "/vary?cc=max-age%3D60&vary=Accept-Language";
    let en = get_with(&s, path, "Accept-Language: en\r\n");
    let de = get_with(&s, path, "Accept-Language: de\r\n");
    assert_eq!(
        status_of(&de),
        "spate; fwd=vary-miss; fwd-status=200; stored"
    );
    let en2 = get_with(&s, path, "Accept-Language: en\r\n");
    let de2 = get_with(&s, path, "Accept-Language: de\r\n");
    assert_eq!(origin.count("/vary"), 2);
    assert_eq!(
        (en2.header("x-lang"), de2.header("x-lang")),
        (Some("en"), Some("de"))
    );
    assert_eq!(en2.header("x-gen"), en.header("x-gen"));
    assert_eq!(de2.header("x-gen"), de.header("x-gen"));
    // Without the field: a third variant.
    get(&s, path);
    assert_eq!(origin.count("/vary"), 3);
}

#[test]
fn unsafe_methods_invalidate() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    let path = "/inv?cc=max-age%3D60";
    get(&s, path);
    assert_eq!(status_of(&get(&s, path)), "spate; hit");
    let p = send(
        &s,
        &format!("POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\nhi"),
    );
    assert_eq!((p.status, status_of(&p)), (200, "spate; fwd=method"));
    let after = get(&s, path);
    assert!(status_of(&after).contains("fwd=uri-miss"), "{after:?}");
    assert_eq!(origin.count("/inv"), 3);
}

#[test]
fn least_recently_used_go_when_the_budget_is_full() {
    let origin = Origin::start();
    // 64 KiB hold a few 10 KB objects; 30 of them do not fit.
    let s = spate(&origin, "{memory: 64K, max-object-size: 16K}");
    let path = |i: usize| format!("/lru{i}?cc=max-age%3D60&len=10000");
    for i in 0..30 {
        let r = get(&s, &path(i));
        assert_eq!(r.body.len(), 10000);
    }
    // The newest is still there, the oldest is gone.
    assert_eq!(status_of(&get(&s, &path(29))), "spate; hit");
    assert!(status_of(&get(&s, &path(0))).contains("fwd=uri-miss"));
    assert_eq!(origin.count("/lru0"), 2);
    assert_eq!(origin.count("/lru29"), 1);
    // Bigger than max-object-size: streamed through whole, not stored.
    let big = "/big?cc=max-age%3D60&len=100000";
    let a = get(&s, big);
    assert_eq!(a.body.len(), 100000);
    assert!(status_of(&a).contains("detail=too-large"), "{a:?}");
    get(&s, big);
    assert_eq!(origin.count("/big"), 2);
    // The store's counts, by the place of its directive. The store is read directly (no
    // worker publishes it), so one scrape holds.
    let samples = common::prometheus::scrape_until(&s, "/metrics", |_| true);
    let key = |name: &str| {
        let line = samples
            .iter()
            .find(|l| l.starts_with(&format!("{name}{{cache=")))
            .unwrap_or_else(|| panic!("no {name} in {samples:?}"));
        line.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(key("spate_cache_hits_total"), 1.0);
    assert_eq!(key("spate_cache_misses_total"), 33.0);
    assert_eq!(key("spate_cache_stored_total"), 31.0);
    assert!(key("spate_cache_evicted_total") >= 24.0);
    assert!(key("spate_cache_bytes") <= 65536.0 && key("spate_cache_bytes") > 30000.0);
}

#[test]
fn concurrent_misses_of_a_cold_key_reach_the_backend_once() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    const CLIENTS: usize = 1000;
    // Each request is on the way before the backend's answer (400 ms late) comes back.
    let raw = "GET /cold?cc=max-age%3D60&delay=400&len=4096 HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut conns: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(raw.as_bytes()).expect("write");
            c
        })
        .collect();
    let mut collapsed = 0;
    for c in conns.iter_mut() {
        c.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut pending = Vec::new();
        let r = read_response(c, &mut pending, false);
        assert_eq!((r.status, r.body.len()), (200, 4096));
        collapsed += usize::from(status_of(&r).contains("collapsed"));
    }
    assert_eq!(origin.count("/cold"), 1);
    assert!(
        collapsed > CLIENTS / 2,
        "{collapsed} answered after waiting"
    );
}

#[test]
fn a_bad_cache_directive_names_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("bad.yaml");
    std::fs::write(
        &conf,
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        proxy.reverse.url: http://127.0.0.1:1/\n        proxy.cache: {memory: lots}\n",
    )
    .expect("write");
    let out = std::process::Command::new(BIN)
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("spate -t");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.yaml:7") && err.contains("proxy.cache.memory"),
        "{err}"
    );
}

#[test]
fn a_disk_store_needs_a_directory_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |paths: &str| {
        let conf = dir.path().join("disk.yaml");
        std::fs::write(
            &conf,
            format!("listen: 0\nhosts:\n  default:\n    paths:\n{paths}"),
        )
        .expect("write");
        let out = std::process::Command::new(BIN)
            .arg("-t")
            .arg("-c")
            .arg(&conf)
            .output()
            .expect("spate -t");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = check("      /:\n        proxy.reverse.url: http://127.0.0.1:1/\n        proxy.cache: {disk: {max-size: 1MB}}\n");
    assert!(
        err.contains("disk.yaml:7") && err.contains("needs a path"),
        "{err}"
    );
    let err = check("      /a:\n        proxy.reverse.url: http://127.0.0.1:1/\n        proxy.cache: {disk: {path: c}}\n      /b:\n        proxy.reverse.url: http://127.0.0.1:1/\n        proxy.cache: {disk: {path: c}}\n");
    assert!(
        err.contains("disk.yaml:10") && err.contains("disk.yaml:7 already"),
        "{err}"
    );
    std::fs::write(dir.path().join("file"), b"").expect("write");
    let err = check("      /:\n        proxy.reverse.url: http://127.0.0.1:1/\n        proxy.cache: {disk: {path: file/c}}\n");
    assert!(
        err.contains("disk.yaml:7") && err.contains("cannot use"),
        "{err}"
    );
}

#[test]
fn memory_stays_within_the_budget_under_a_working_set_ten_times_larger() {
    let origin = Origin::start();
    // One worker: one allocator arena takes the churn. 4 MiB of budget, objects of 64 KB.
    let s = Spate::start(&format!(
        "
listen: 0
num-threads: 1
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
        proxy.reverse.url: http://{}/
        proxy.cache: {{memory: 4MB, max-object-size: 128K}}
",
        origin.addr
    ));
    let budget_kib = 4 * 1024;
    let path = |i: usize| format!("/rss{i}?cc=max-age%3D600&len=65536");
    let idle = s.rss_kib();
    // At start: the store filled to its budget and past it (128 objects are 8 MiB), so
    // that every buffer the path uses has grown and entries have been evicted.
    for i in 0..128 {
        assert_eq!(get(&s, &path(i)).body.len(), 65536);
    }
    let start = s.rss_kib();
    // Ten times the budget more: 640 distinct objects, 40 MiB.
    for i in 128..768 {
        let r = get(&s, &path(i));
        assert_eq!(r.body.len(), 65536);
        assert!(status_of(&r).contains("stored"), "{:?}", status_of(&r));
    }
    let end = s.rss_kib();
    let m = get(&s, "/metrics").text();
    let held = counter(&m, "spate_cache_bytes");
    assert!(held <= budget_kib * 1024, "{m}");
    assert!(counter(&m, "spate_cache_evicted_total") >= 700, "{m}");
    // The store was full at start: what it holds more now is the allocator's and, at most,
    // the budget again. Holding the working set would be 40 MiB more.
    let growth = end.saturating_sub(start);
    assert!(
        growth < budget_kib,
        "RSS grew by {growth} KiB from {start} KiB ({idle} KiB idle); {held} B held"
    );
}

#[test]
fn the_access_log_can_say_what_the_cache_did() {
    let origin = Origin::start();
    let s = Spate::start(&format!(
        "
listen: 0
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://{}/
        proxy.cache: ON
        access-log:
          path: $DIR/access.log
          format: \"%s %{{cache-status}}o\"
",
        origin.addr
    ));
    get(&s, "/logged?cc=max-age%3D60");
    get(&s, "/logged?cc=max-age%3D60");
    let log = s.dir.path().join("access.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut text = String::new();
    while std::time::Instant::now() < deadline {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Workers write their lines apart: the order between them is not kept.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "200 spate; fwd=uri-miss; fwd-status=200; stored",
            "200 spate; hit"
        ]
    );
}

#[test]
fn http2_clients_get_the_stored_response_too() {
    use common::clients::{h2_fetch, H2Req};
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    let path = "/h2?cc=max-age%3D60&len=5000";
    let a = h2_fetch(s.addr, H2Req::get(path));
    let b = h2_fetch(s.addr, H2Req::get(path));
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(b.body, a.body);
    assert_eq!(b.body.len(), 5000);
    assert_eq!(b.header("cache-status"), Some("spate; hit"));
    assert_eq!(b.header("date"), a.header("date"), "the stored Date, once");
    assert_eq!(origin.count("/h2"), 1);
}

#[test]
fn purge_drops_one_url_or_a_prefix() {
    let origin = Origin::start();
    let s = spate(&origin, "{purge: ON}");
    for p in [
        "/p/a?cc=max-age%3D60",
        "/p/b?cc=max-age%3D60",
        "/q?cc=max-age%3D60",
    ] {
        get(&s, p);
        assert_eq!(status_of(&get(&s, p)), "spate; hit");
    }
    let purge = |target: &str| {
        send(
            &s,
            &format!("PURGE {target} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        )
    };
    let one = purge("/p/a?cc=max-age%3D60");
    assert_eq!((one.status, one.text().as_str()), (200, "purged 1\n"));
    assert!(status_of(&get(&s, "/p/a?cc=max-age%3D60")).contains("fwd=uri-miss"));
    let prefix = purge("/p/*");
    assert_eq!((prefix.status, prefix.text().as_str()), (200, "purged 2\n"));
    assert_eq!(purge("/p/*").status, 404);
    // Other URLs stay; the backend never saw a PURGE.
    assert_eq!(status_of(&get(&s, "/q?cc=max-age%3D60")), "spate; hit");
    assert_eq!(origin.count("/p/a"), 2);
    assert_eq!(origin.count("/p/b"), 1);
}

/// `proxy.cache` with a disk store in `dir` (kept by the caller across spates).
fn disk_cache(dir: &std::path::Path, extra: &str) -> String {
    format!(
        "{{disk: {{path: {}, max-size: 256MB}}{extra}}}",
        dir.display()
    )
}

/// GETs each path on keep-alive connections (`threads` of them at once); returns each
/// answer's status, Cache-Status and body length, in the paths' order.
fn get_all(s: &Spate, paths: &[String], threads: usize) -> Vec<(u16, String, usize)> {
    let chunk = paths.len().div_ceil(threads);
    let addr = s.addr;
    std::thread::scope(|scope| {
        let parts: Vec<_> = paths
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let mut c = TcpStream::connect(addr).expect("connect");
                    c.set_read_timeout(Some(Duration::from_secs(20)))
                        .expect("timeout");
                    let mut pending = Vec::new();
                    part.iter()
                        .map(|p| {
                            let raw = format!("GET {p} HTTP/1.1\r\nHost: localhost\r\n\r\n");
                            c.write_all(raw.as_bytes()).expect("write");
                            let r = read_response(&mut c, &mut pending, false);
                            (r.status, status_of(&r).to_string(), r.body.len())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().expect("client"))
            .collect()
    })
}

/// The files of a disk store: (stored files, temporary files left).
fn disk_files(dir: &std::path::Path) -> (Vec<std::path::PathBuf>, usize) {
    let mut files = Vec::new();
    let mut temps = 0;
    for e in std::fs::read_dir(dir).expect("cache dir").flatten() {
        if e.path().is_dir() {
            files.extend(
                std::fs::read_dir(e.path())
                    .expect("sub")
                    .flatten()
                    .map(|f| f.path()),
            );
        } else {
            temps += 1;
        }
    }
    (files, temps)
}

#[test]
fn twenty_thousand_responses_on_disk_are_hits_after_a_restart_and_a_reload() {
    const N: usize = 20_000;
    let origin = Origin::start();
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let conf = disk_cache(cache_dir.path(), "");
    let paths: Vec<String> = (0..N).map(|i| format!("/d{i}?cc=max-age%3D600")).collect();
    let mut s = spate(&origin, &conf);
    for (i, (status, cs, _)) in get_all(&s, &paths, 4).into_iter().enumerate() {
        assert_eq!(status, 200);
        assert!(cs.contains("stored"), "{i}: {cs}");
    }
    assert_eq!(disk_files(cache_dir.path()).0.len(), N);
    s.stop();
    drop(s);
    // A new process: its memory is empty, every answer comes from a file.
    let s = spate(&origin, &conf);
    let answers = get_all(&s, &paths, 4);
    let hits = answers
        .iter()
        .filter(|(st, cs, _)| *st == 200 && cs == "spate; hit")
        .count();
    assert_eq!(
        hits,
        N,
        "{:?}",
        answers.iter().find(|a| a.1 != "spate; hit")
    );
    for i in [0, N / 2, N - 1] {
        assert_eq!(origin.count(&format!("/d{i}")), 1);
        assert_eq!(get(&s, &paths[i]).text(), format!("GET /d{i} #1\n"));
    }
    // A reload with other sizes makes a new store over the same directory.
    let conf2 = disk_cache(cache_dir.path(), ", memory: 32MB");
    std::fs::write(
        s.path().join("spate.yaml"),
        std::fs::read_to_string(s.path().join("spate.yaml"))
            .expect("config")
            .replace(&conf, &conf2),
    )
    .expect("write config");
    signal(&s.child, libc::SIGHUP);
    assert_eq!(s.log_lines_naming("reloaded", 1).len(), 1);
    let again = get_all(&s, &paths[..1000], 2);
    assert!(again.iter().all(|(_, cs, _)| cs == "spate; hit"));
    assert_eq!(origin.count("/d999"), 1);
}

#[test]
fn a_kill_while_storing_leaves_nothing_that_is_served() {
    let origin = Origin::start();
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let conf = disk_cache(cache_dir.path(), ", max-object-size: 2MB");
    let big = "/big?cc=max-age%3D600&len=1500000&stall=3000";
    let mut s = spate(&origin, &conf);
    let mut c = s.connect();
    c.write_all(format!("GET {big} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .expect("write");
    // Half the body is through spate when it is killed.
    let mut got = 0;
    let mut buf = [0u8; 65536];
    while got < 700_000 {
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0, "closed after {got} bytes");
        got += n;
    }
    s.child.kill().expect("kill -9");
    s.child.wait().expect("wait");
    drop(s);
    // A temporary file a kill during a write would leave.
    std::fs::write(cache_dir.path().join("tmp.1.1"), b"half a response").expect("temp");
    let s = spate(&origin, &conf);
    // Once a worker answers, its router and the store it shares are built.
    assert_eq!(get(&s, "/metrics").status, 200);
    assert_eq!(disk_files(cache_dir.path()), (Vec::new(), 0));
    let r = get(&s, big);
    assert_eq!(r.body.len(), 1_500_000);
    assert!(status_of(&r).contains("fwd=uri-miss"), "{r:?}");
    assert!(status_of(&r).contains("stored"), "{r:?}");
    assert_eq!(origin.count("/big"), 2);
    // Once whole it is one file; a restart serves it as a hit.
    drop(s);
    assert_eq!(disk_files(cache_dir.path()).0.len(), 1);
    let s = spate(&origin, &conf);
    let r = get(&s, big);
    assert_eq!((r.body.len(), status_of(&r)), (1_500_000, "spate; hit"));
    assert_eq!(origin.count("/big"), 2);
}

#[test]
fn a_corrupt_file_is_dropped_logged_and_fetched_again() {
    let origin = Origin::start();
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let conf = disk_cache(cache_dir.path(), "");
    let paths = [
        "/c1?cc=max-age%3D600&len=5000",
        "/c2?cc=max-age%3D600&len=5000",
    ];
    let mut s = spate(&origin, &conf);
    for p in paths {
        assert!(status_of(&get(&s, p)).contains("stored"));
    }
    s.stop();
    drop(s);
    // One file cut short (seen at start), one with a byte of its body changed (seen when
    // read).
    let (mut files, _) = disk_files(cache_dir.path());
    files.sort_by_key(|f| {
        std::fs::read(f)
            .expect("read")
            .windows(3)
            .any(|w| w == b"/c1")
    });
    let data = std::fs::read(&files[0]).expect("read");
    std::fs::write(&files[0], &data[..data.len() - 100]).expect("cut");
    let mut data = std::fs::read(&files[1]).expect("read");
    let at = data.len() - 10;
    data[at] ^= 0x20;
    std::fs::write(&files[1], &data).expect("flip");
    let s = spate(&origin, &conf);
    for p in paths {
        let r = get(&s, p);
        assert!(status_of(&r).contains("fwd=uri-miss"), "{r:?}");
        assert_eq!(r.body.len(), 5000);
        let r = get(&s, p);
        assert_eq!(status_of(&r), "spate; hit");
        assert_eq!(&r.body[..26], b"abcdefghijklmnopqrstuvwxyz");
    }
    assert_eq!((origin.count("/c1"), origin.count("/c2")), (2, 2));
    let lines = s.log_lines_naming("dropped a corrupt file", 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
}

#[test]
fn the_disk_store_stays_within_its_size() {
    let origin = Origin::start();
    let cache_dir = tempfile::tempdir().expect("tempdir");
    // 1 MiB of disk; 64 objects of 64 KB are 4 MB. Memory holds a few.
    let conf = format!(
        "{{memory: 256K, max-object-size: 128K, disk: {{path: {}, max-size: 1MB}}}}",
        cache_dir.path().display()
    );
    let s = spate(&origin, &conf);
    let path = |i: usize| format!("/ds{i}?cc=max-age%3D600&len=65536");
    for i in 0..64 {
        assert_eq!(get(&s, &path(i)).body.len(), 65536);
    }
    let (files, _) = disk_files(cache_dir.path());
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).expect("meta").len())
        .sum();
    assert!(
        bytes <= 1 << 20 && files.len() >= 10,
        "{} files, {bytes} bytes",
        files.len()
    );
    // The newest are still there (from disk: memory holds only three), the oldest are gone.
    assert_eq!(status_of(&get(&s, &path(56))), "spate; hit");
    assert!(status_of(&get(&s, &path(0))).contains("fwd=uri-miss"));
}

#[test]
fn concurrent_revalidations_of_a_stale_entry_reach_the_backend_once() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    // Fresh for 3 s: once revalidated, the entry stays fresh for the slowest of the 20
    // (ages are whole seconds).
    let path = "/reval?cc=max-age%3D3&etag=v1&delay=300";
    assert!(status_of(&get(&s, path)).contains("stored"));
    std::thread::sleep(Duration::from_millis(4100));
    let raw = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut conns: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(raw.as_bytes()).expect("write");
            c
        })
        .collect();
    let mut collapsed = 0;
    for c in conns.iter_mut() {
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let r = read_response(c, &mut Vec::new(), false);
        assert_eq!(r.status, 200);
        collapsed += usize::from(status_of(&r) == "spate; hit; collapsed");
    }
    // The first request and one revalidation (a 304).
    assert_eq!(origin.count("/reval"), 2);
    assert!(origin.last("/reval").contains("If-None-Match"));
    assert!(collapsed >= 15, "{collapsed} answered after waiting");
}

#[test]
fn ranges_of_a_stored_response_several_at_once_and_under_if_range() {
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    let path = "/r?cc=max-age%3D60&etag=v1&len=100";
    let whole = get(&s, path);
    assert_eq!(whole.body.len(), 100);
    // Two ranges: multipart/byteranges from the stored body.
    let multi = get_with(&s, path, "Range: bytes=0-9,20-29\r\n");
    assert_eq!(multi.status, 206);
    let ct = multi.header("content-type").unwrap_or_default().to_string();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect("a multipart answer");
    let text = multi.text();
    assert!(text.starts_with(&format!("--{boundary}\r\n")), "{text}");
    assert!(text.contains("Content-Range: bytes 0-9/100\r\n\r\nabcdefghij\r\n"));
    assert!(text.contains("Content-Range: bytes 20-29/100\r\n\r\nuvwxyzabcd\r\n"));
    assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    assert_eq!(status_of(&multi), "spate; hit");
    // If-Range naming the stored ETag: the range; another tag or a weak one: the whole.
    let named = get_with(&s, path, "Range: bytes=2-4\r\nIf-Range: \"v1\"\r\n");
    assert_eq!((named.status, named.text().as_str()), (206, "cde"));
    assert_eq!(named.header("content-range"), Some("bytes 2-4/100"));
    for other in ["\"v2\"", "W/\"v1\""] {
        let r = get_with(
            &s,
            path,
            &format!("Range: bytes=2-4\r\nIf-Range: {other}\r\n"),
        );
        assert_eq!((r.status, r.body.len()), (200, 100), "{other}");
        assert_eq!(status_of(&r), "spate; hit");
    }
    assert_eq!(origin.count("/r"), 1, "every answer from the store");
}

#[test]
fn a_chunked_response_is_stored_with_its_trailers() {
    use common::clients::{h2_fetch, H2Req};
    let origin = Origin::start();
    let s = spate(&origin, "ON");
    let path = "/t?cc=max-age%3D60&len=3000&trailer=abc";
    // Over HTTP/1.1: the miss, then the hit, each chunked with the trailer after the body.
    for want in ["fwd=uri-miss", "spate; hit"] {
        let mut c = s.connect();
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nTE: trailers\r\nConnection: close\r\n\r\n"
        );
        c.write_all(req.as_bytes()).expect("write");
        let mut raw = Vec::new();
        c.read_to_end(&mut raw).expect("read");
        let text = String::from_utf8_lossy(&raw);
        assert!(text.contains(want), "{text}");
        assert!(
            text.to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{text}"
        );
        assert!(
            text.ends_with("0\r\nX-Check: abc\r\n\r\n")
                || text.ends_with("0\r\nx-check: abc\r\n\r\n"),
            "{text}"
        );
        let body_start = find(&raw, b"\r\n\r\n").expect("a head") + 4;
        let body: Vec<u8> = dechunk(&raw[body_start..]);
        assert_eq!(body.len(), 3000);
    }
    // Over HTTP/2 (its own key: the client names the authority by address): the body, then
    // the trailers as HEADERS, on the miss and on the hit.
    for want in ["fwd=uri-miss", "spate; hit"] {
        let r = h2_fetch(s.addr, H2Req::get(path));
        assert_eq!((r.status, r.body.len()), (200, 3000));
        assert!(r.header("cache-status").unwrap_or_default().contains(want));
        let trailers = r.trailers.expect("trailers");
        assert_eq!(
            trailers.get("x-check").and_then(|v| v.to_str().ok()),
            Some("abc")
        );
    }
    assert_eq!(origin.count("/t"), 2);
    // Kept alive, an HTTP/1.1 hit is asked of the cache where a static file is answered
    // first; one with trailers is left to the connection's task there: counted once.
    let mut c = s.connect();
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nTE: trailers\r\n\r\n");
    write_all(&mut c, req.as_bytes());
    let r = read_response(&mut c, &mut Vec::new(), false);
    assert_eq!((r.status, status_of(&r)), (200, "spate; hit"));
    let m = get(&s, "/metrics").text();
    assert_eq!(counter(&m, "spate_cache_hits_total"), 3, "{m}");
}

/// A chunked body's data (`raw` from the first chunk size on).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = find(raw, b"\r\n").expect("a chunk size");
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line]).expect("hex"), 16)
            .expect("a size");
        raw = &raw[line + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

#[test]
fn a_purge_from_elsewhere_needs_the_secret() {
    let origin = Origin::start();
    // The peer is taken from X-Forwarded-For (trusted from the loopback), so a request can
    // come from another host.
    let s = Spate::start(&format!(
        "
listen: 0
num-threads: 1
hosts:
  default:
    paths:
      /metrics:
        metrics: ON
      /:
        real-ip.from: [127.0.0.1, \"::1\"]
        proxy.reverse.url: http://{}/
        proxy.cache: {{purge-secret: 0123456789abcdef-xyz}}
",
        origin.addr
    ));
    let path = "/s/a?cc=max-age%3D60";
    get(&s, path);
    assert_eq!(status_of(&get(&s, path)), "spate; hit");
    let purge = |from: &str, secret: &str| {
        send(
            &s,
            &format!(
                "PURGE /s/* HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: {from}\r\n{secret}\r\n"
            ),
        )
    };
    // Another host without the secret, or with a wrong one: refused, nothing dropped.
    assert_eq!(purge("203.0.113.7", "").status, 403);
    assert_eq!(
        purge("203.0.113.7", "Purge-Secret: 0123456789abcdef-xyZ\r\n").status,
        403
    );
    assert_eq!(status_of(&get(&s, path)), "spate; hit");
    // With it: purged, and counted.
    let ok = purge("203.0.113.7", "Purge-Secret: 0123456789abcdef-xyz\r\n");
    assert_eq!((ok.status, ok.text().as_str()), (200, "purged 1\n"));
    assert!(status_of(&get(&s, path)).contains("fwd=uri-miss"));
    // The machine itself needs no secret.
    assert_eq!(purge("127.0.0.1", "").status, 200);
    let metrics = get(&s, "/metrics").text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("spate_cache_purged_total{") && l.ends_with(" 2")),
        "{metrics}"
    );
    assert_eq!(origin.count("/s/a"), 2);
}

#[test]
fn a_short_purge_secret_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("spate.yaml");
    std::fs::write(
        &conf,
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        proxy.reverse.url: http://127.0.0.1:1/\n        proxy.cache: {purge-secret: short}\n",
    )
    .expect("write");
    let out = std::process::Command::new(BIN)
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("spate -t");
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("spate.yaml:7"), "{text}");
    assert!(text.contains("purge-secret expects at least 16"), "{text}");
}

/// The value of the counter `name` of the (one) cache in the Prometheus text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            rest.rsplit(' ').next()?.parse::<u64>().ok()
        })
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

/// `n` GETs for `path` on `raw`'s connection in one write, as streams from `id` on (as a
/// multiplexing client sends them): each answer's Cache-Status and body length (flow-control
/// credit returned for each DATA frame).
fn h2_gets(
    raw: &mut common::h2raw::Raw,
    dec: &mut spate::proto::h2::hpack::Decoder,
    id: u32,
    n: u32,
    path: &str,
) -> Vec<(String, usize)> {
    use spate::proto::h2::frame::{self, flag, kind};
    let mut out = Vec::new();
    for k in 0..n {
        raw.get(id + 2 * k, path, true, &mut out);
    }
    assert!(raw.send(&out));
    let mut got = vec![(String::new(), 0); n as usize];
    let mut ended = 0;
    while ended < n {
        let (h, payload) = raw.frame().expect("a frame");
        let k = (h.stream.wrapping_sub(id) / 2) as usize;
        let ours = h.stream >= id && k < got.len();
        let mut reply = Vec::new();
        match h.kind {
            kind::SETTINGS if h.flags & flag::ACK == 0 => {
                frame::put_head(&mut reply, 0, kind::SETTINGS, flag::ACK, 0);
            }
            kind::HEADERS if ours => {
                let mut buf = bytes::BytesMut::new();
                let mut fields = Vec::new();
                dec.decode(&payload, &mut buf, |f| fields.push(f))
                    .expect("HPACK");
                for f in fields {
                    if &buf[f.name.clone()] == b"cache-status" {
                        got[k].0 = String::from_utf8_lossy(&buf[f.value]).into_owned();
                    }
                }
            }
            kind::DATA if ours => {
                got[k].1 += payload.len();
                if !payload.is_empty() {
                    frame::put_window_update(&mut reply, 0, payload.len() as u32);
                }
            }
            kind::RST_STREAM | kind::GOAWAY => panic!("{h:?} {payload:?}"),
            _ => {}
        }
        if !reply.is_empty() {
            assert!(raw.send(&reply));
        }
        if ours && h.flags & flag::END_STREAM != 0 {
            ended += 1;
        }
    }
    got
}

#[test]
fn a_connection_never_gives_a_hit_again_once_its_entry_is_gone() {
    // An HTTP/2 connection keeps the answer to a request that repeats and gives it again
    // while its entry is the store's: a purge or a newer response ends that at once.
    let origin = Origin::start();
    let s = spate(&origin, "{purge: ON}");
    let path = "/m?cc=max-age%3D60&len=4000";
    let mut raw = common::h2raw::Raw::connect(&s, &[]);
    let mut dec = spate::proto::h2::hpack::Decoder::new(4096, 1 << 20);
    let mut id = 1;
    let mut ask = |raw: &mut common::h2raw::Raw, n: u32| {
        let got = h2_gets(raw, &mut dec, id, n, path);
        id += 2 * n;
        got
    };
    let hit = ("spate; hit".to_string(), 4000);
    assert!(ask(&mut raw, 1)[0].0.contains("fwd=uri-miss"));
    // Rounds as the HTTP/2 memo tests warm it: two alone, then three at a time, until the
    // memo gave some (a round that spans the end of a second starts it again).
    let mut answered = 0;
    let mut metrics = String::new();
    for _ in 0..50 {
        for n in [1, 1, 3, 3, 3] {
            assert!(ask(&mut raw, n).iter().all(|g| *g == hit));
            answered += n as u64;
        }
        metrics = get(&s, "/metrics").text();
        if counter(&metrics, "spate_cache_hits_repeated_total") > 0 {
            break;
        }
    }
    // Every hit is counted, those the memo gave among them.
    assert!(
        counter(&metrics, "spate_cache_hits_repeated_total") > 0,
        "none given from the memo: {metrics}"
    );
    assert_eq!(
        counter(&metrics, "spate_cache_hits_total"),
        answered,
        "{metrics}"
    );
    let purged = send(
        &s,
        &format!("PURGE {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
    );
    assert_eq!(purged.status, 200);
    let after = ask(&mut raw, 1);
    assert!(after[0].0.contains("fwd=uri-miss"), "{after:?}");
    assert_eq!(origin.count("/m"), 2);
    for n in [1, 1, 3, 3, 3] {
        assert!(ask(&mut raw, n).iter().all(|g| *g == hit));
    }
    // Replaced by a newer response (an unsafe method's success drops it, §4.4).
    let post = send(
        &s,
        &format!("POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"),
    );
    assert_eq!(post.status, 200);
    assert!(ask(&mut raw, 1)[0].0.contains("fwd=uri-miss"));
    assert_eq!(origin.count("/m"), 4);
}

#[test]
fn http1_hits_repeat_from_the_workers_memo_with_the_stored_date() {
    // The HTTP/1.1 lane answers a fresh hit itself, and a worker keeps the answer to a
    // request that repeats: it is given again, with the stored Date, while its entry is
    // the store's; every such hit is counted.
    let origin = Origin::start();
    let s = spate(&origin, "{purge: ON}");
    let path = "/h1m?cc=max-age%3D60&len=4000";
    let first = get(&s, path);
    assert!(status_of(&first).contains("fwd=uri-miss"));
    let date = first.header("date").expect("a Date").to_string();
    let mut conn = s.connect();
    let mut pending = Vec::new();
    let mut ask = |conn: &mut TcpStream, head: &str| {
        write_all(conn, head.as_bytes());
        read_response(conn, &mut pending, false)
    };
    let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    // Rounds of ten on the connection (one worker) until the memo gave some: a round that
    // spans the end of a second starts the memo again.
    let mut answered = 0;
    for _ in 0..50 {
        for _ in 0..10 {
            let r = ask(&mut conn, &head);
            assert_eq!((r.status, status_of(&r)), (200, "spate; hit"));
            assert_eq!(r.body.len(), 4000);
            assert_eq!(r.header("date"), Some(date.as_str()), "the stored Date");
            assert!(r.header("age").is_some());
            answered += 1;
        }
        let m = get(&s, "/metrics").text();
        if counter(&m, "spate_cache_hits_repeated_total") > 0 {
            break;
        }
    }
    let m = get(&s, "/metrics").text();
    assert!(counter(&m, "spate_cache_hits_repeated_total") > 0, "{m}");
    assert_eq!(counter(&m, "spate_cache_hits_total"), answered, "{m}");
    assert_eq!(origin.count("/h1m"), 1);
    // Purged: the next request on the connection goes to the backend.
    let purged = send(
        &s,
        &format!("PURGE {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
    );
    assert_eq!(purged.status, 200);
    let after = ask(&mut conn, &head);
    assert!(status_of(&after).contains("fwd=uri-miss"), "{after:?}");
    assert_eq!(origin.count("/h1m"), 2);
}

#[test]
fn every_http2_hit_has_its_access_log_line() {
    // A path with an access log gives no answer from a memo: each hit is the handler's,
    // and logged with what the cache did.
    let origin = Origin::start();
    let s = Spate::start(&format!(
        "
listen: 0
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://{}/
        proxy.cache: ON
        access-log:
          path: $DIR/access.log
          format: \"%s %{{cache-status}}o\"
",
        origin.addr
    ));
    let path = "/logged2?cc=max-age%3D60&len=4000";
    let mut raw = common::h2raw::Raw::connect(&s, &[]);
    let mut dec = spate::proto::h2::hpack::Decoder::new(4096, 1 << 20);
    let mut id = 1;
    let mut answered = 0;
    for n in [1, 1, 1, 3, 3, 3] {
        let got = h2_gets(&mut raw, &mut dec, id, n, path);
        id += 2 * n;
        answered += n as usize;
        assert!(got.iter().all(|g| g.1 == 4000), "{got:?}");
    }
    let log = s.dir.path().join("access.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut lines = Vec::new();
    while std::time::Instant::now() < deadline {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        lines = text.lines().map(str::to_string).collect();
        if lines.len() >= answered {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let hits = lines.iter().filter(|l| *l == "200 spate; hit").count();
    assert_eq!((lines.len(), hits), (answered, answered - 1), "{lines:?}");
}
