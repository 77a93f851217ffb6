//! Soak: one spate under a mix of clients for a while (`SPATE_SOAK_SECONDS`, 60 by default;
//! `scripts/soak SECONDS` runs it longer): HTTP/1.1, h2c and TLS (h2 and HTTP/1.1) clients that
//! check every answer, h2load bursts on all four, slow readers, clients that vanish
//! mid-response, malformed requests and the HTTP/2 floods of tests/h2_attacks.rs. Then: the
//! server is still running, every well-formed request got its right answer, and once the
//! clients are gone its open descriptors and RSS are back near the baseline taken after a
//! warm-up round.

mod common;
mod tls_support;

use common::h2raw::{self, Raw};
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SMALL: &[u8] = b"hello\n";
const BIG_LEN: usize = 4 * 1024 * 1024;

/// What the clients saw: answers checked, and every wrong one described.
#[derive(Default)]
struct Tally {
    checked: AtomicU64,
    h2load: AtomicU64,
    slow: AtomicU64,
    vanished: AtomicU64,
    malformed: AtomicU64,
    attacks: AtomicU64,
    wrong: Mutex<Vec<String>>,
}

impl Tally {
    fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if ok {
            self.checked.fetch_add(1, Ordering::Relaxed);
        } else {
            let mut w = self.wrong.lock().unwrap_or_else(|e| e.into_inner());
            if w.len() < 20 {
                w.push(what());
            }
        }
    }
}

struct Target {
    plain: SocketAddr,
    tls: SocketAddr,
}

#[test]
fn soak() {
    let secs: u64 = std::env::var("SPATE_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let mut s = start();
    let t = Target {
        plain: s.addr,
        tls: tls_addr(&s),
    };
    let tally = Tally::default();

    // Warm-up: one round of every client, so caches, pools and buffers exist.
    round(&t, &tally, 0);
    std::thread::sleep(Duration::from_secs(3));
    let (fds0, rss0) = (s.open_sockets(), s.rss_kib());
    eprintln!("soak: baseline {fds0} sockets, {rss0} KiB RSS; running {secs} s");

    let end = Instant::now() + Duration::from_secs(secs);
    let mut peak = rss0;
    std::thread::scope(|scope| {
        for worker in 1..=4u64 {
            let (t, tally) = (&t, &tally);
            scope.spawn(move || {
                let mut i = worker;
                while Instant::now() < end {
                    round(t, tally, i);
                    i += 4;
                }
            });
        }
        while Instant::now() < end {
            peak = peak.max(s.rss_kib());
            std::thread::sleep(Duration::from_millis(500));
        }
    });

    assert!(
        running(&mut s),
        "spate exited during the soak: {:?}",
        s.stderr_lines()
    );
    // Clients are gone: descriptors and memory come back (idle trimming runs each second).
    let settle = Instant::now() + Duration::from_secs(20);
    let (mut fds1, mut rss1);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        (fds1, rss1) = (s.open_sockets(), s.rss_kib());
        if (fds1 <= fds0 && rss1 <= rss0 + 8 * 1024) || Instant::now() > settle {
            break;
        }
    }
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    eprintln!(
        "soak: {secs} s; {} answers checked, {} h2load runs, {} slow readers, {} vanished, \
         {} malformed, {} floods; sockets {fds0} -> {fds1}; RSS {rss0} KiB -> peak {peak} \
         KiB -> {rss1} KiB",
        n(&tally.checked),
        n(&tally.h2load),
        n(&tally.slow),
        n(&tally.vanished),
        n(&tally.malformed),
        n(&tally.attacks),
    );
    let wrong = tally.wrong.lock().unwrap_or_else(|e| e.into_inner());
    assert!(wrong.is_empty(), "wrong answers: {wrong:#?}");
    assert!(fds1 <= fds0, "sockets {fds0} -> {fds1}");
    assert!(
        rss1 <= rss0 + 16 * 1024,
        "RSS {rss0} KiB -> {rss1} KiB after the clients left"
    );
    assert!(running(&mut s), "spate exited at the end");
    let panics: Vec<_> = s
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("panicked"))
        .collect();
    assert!(panics.is_empty(), "{panics:?}");
}

/// One round of every kind of client; `i` varies which one of a kind.
fn round(t: &Target, tally: &Tally, i: u64) {
    h1_checked(t, tally);
    curl_checked(t, tally, i);
    h2load_burst(t, tally, i);
    slow_reader(t, tally);
    vanish(t, tally, i);
    malformed(t, tally, i);
    flood(t, tally, i);
}

/// Keep-alive HTTP/1.1: small and big files, an inline answer, a pipelined pair, each checked.
fn h1_checked(t: &Target, tally: &Tally) {
    let Ok(mut c) = TcpStream::connect(t.plain) else {
        return tally.check(false, || "h1: cannot connect".into());
    };
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut pending = Vec::new();
    for (path, want) in [
        ("/6b.txt", SMALL.to_vec()),
        ("/answer", b"42".to_vec()),
        ("/big.bin", vec![b'z'; BIG_LEN]),
    ] {
        let req = format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n");
        if c.write_all(req.as_bytes()).is_err() {
            return tally.check(false, || format!("h1 {path}: write failed"));
        }
        let r = read_response(&mut c, &mut pending, false);
        tally.check(r.status == 200 && r.body == want, || {
            format!("h1 {path}: {} with {} bytes", r.status, r.body.len())
        });
    }
    let pair = "GET /answer HTTP/1.1\r\nHost: a\r\n\r\nGET /6b.txt HTTP/1.1\r\nHost: a\r\n\r\n";
    if c.write_all(pair.as_bytes()).is_ok() {
        let a = read_response(&mut c, &mut pending, false);
        let b = read_response(&mut c, &mut pending, false);
        tally.check(a.body == b"42" && b.body == SMALL, || {
            format!("h1 pipelined: {:?} {:?}", a.text(), b.text())
        });
    }
}

/// curl over h2c, TLS h2 and TLS HTTP/1.1, checking the bodies.
fn curl_checked(t: &Target, tally: &Tally, i: u64) {
    let (proto, url) = match i % 3 {
        0 => ("--http2-prior-knowledge", format!("http://{}", t.plain)),
        1 => ("--http2", format!("https://{}", t.tls)),
        _ => ("--http1.1", format!("https://{}", t.tls)),
    };
    // One URL per run: curl 7.88 fetches only the first of several over h2c prior knowledge
    // (the same against nginx). `curl` sets --max-time 10; a later one wins, and a machine
    // busy with the soak may need longer for the big file.
    let out = curl(&["-k", "--max-time", "60", proto, &format!("{url}/6b.txt")]);
    tally.check(out.stdout == SMALL, || {
        format!(
            "curl {proto} {url}: {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let big = format!("{url}/big.bin");
    let out = curl(&[
        "-k",
        "--max-time",
        "60",
        proto,
        "-w",
        "%{http_code} %{size_download}",
        "-o",
        "/dev/null",
        &big,
    ]);
    let want = format!("200 {BIG_LEN}");
    tally.check(out.stdout == want.as_bytes(), || {
        format!(
            "curl {proto} big: {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
}

/// h2load on h2c, HTTP/1.1, TLS h2 and TLS HTTP/1.1: every request must succeed with 2xx.
fn h2load_burst(t: &Target, tally: &Tally, i: u64) {
    let (h1, url) = match i % 4 {
        0 => (false, format!("http://{}/6b.txt", t.plain)),
        1 => (true, format!("http://{}/answer", t.plain)),
        2 => (false, format!("https://{}/6b.txt", t.tls)),
        _ => (true, format!("https://{}/6b.txt", t.tls)),
    };
    let mut cmd = Command::new("h2load");
    cmd.args(["-n", "2000", "-c", "8", "-m", "4", "-T", "120"]);
    if h1 {
        cmd.arg("--h1");
    }
    let out = match cmd.arg(&url).output() {
        Ok(o) => o,
        Err(e) => return tally.check(false, || format!("h2load: {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.contains("2000 succeeded, 0 failed, 0 errored, 0 timeout")
        && text.contains("status codes: 2000 2xx");
    tally.h2load.fetch_add(1, Ordering::Relaxed);
    tally.check(ok, || {
        let summary: Vec<_> = text
            .lines()
            .filter(|l| l.starts_with("requests:") || l.starts_with("status codes:"))
            .collect();
        format!("h2load {} {url}: {summary:?}", if h1 { "--h1" } else { "" })
    });
}

/// Asks for the big file and reads it a trickle at a time for a while, then leaves.
fn slow_reader(t: &Target, tally: &Tally) {
    let Ok(mut c) = TcpStream::connect(t.plain) else {
        return;
    };
    let _ = c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n");
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut buf = [0u8; 2048];
    let mut got = 0;
    for _ in 0..40 {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    tally.slow.fetch_add(1, Ordering::Relaxed);
    tally.check(got > 0, || "slow reader got nothing".into());
}

/// Starts a big response and drops the connection part way: HTTP/1.1, h2c, or TLS.
fn vanish(t: &Target, tally: &Tally, i: u64) {
    match i % 3 {
        0 => {
            if let Ok(mut c) = TcpStream::connect(t.plain) {
                let _ = c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n");
                let mut buf = [0u8; 16384];
                let _ = c.read(&mut buf);
            }
        }
        1 => {
            let mut raw = Raw::connect_to(t.plain, &[]);
            let mut out = Vec::new();
            for id in [1, 3, 5] {
                raw.get(id, "/big.bin", true, &mut out);
            }
            raw.send(&out);
            let _ = raw.frame();
        }
        _ => {
            let _ = curl(&[
                "-k",
                "--max-time",
                "0.3",
                "--limit-rate",
                "200k",
                "-o",
                "/dev/null",
                &format!("https://{}/big.bin", t.tls),
            ]);
        }
    }
    tally.vanished.fetch_add(1, Ordering::Relaxed);
}

/// A malformed request gets a 4xx answer and a close, never a 2xx.
fn malformed(t: &Target, tally: &Tally, i: u64) {
    const BAD: [&[u8]; 6] = [
        b"GET / HTTP/1.1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01\r\n\r\n",
        b"GET /../../etc/passwd HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    ];
    let raw = BAD[i as usize % BAD.len()];
    let Ok(mut c) = TcpStream::connect(t.plain) else {
        return;
    };
    c.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let _ = c.write_all(raw);
    let out = read_to_close(&mut c);
    tally.malformed.fetch_add(1, Ordering::Relaxed);
    tally.check(
        out.starts_with("HTTP/1.1 4") || out.starts_with("HTTP/1.1 5"),
        || format!("malformed {:?} -> {out:?}", String::from_utf8_lossy(raw)),
    );
    // Garbage instead of HTTP: closed without an answer or with an error; never served.
    if let Ok(mut c) = TcpStream::connect(t.plain) {
        c.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let _ = c.write_all(b"\x16\x03\x01\x00\xff\x01garbage\r\n\r\n");
        let out = read_to_close(&mut c);
        tally.check(!out.contains(" 200 "), || format!("garbage -> {out:?}"));
    }
}

/// One of the HTTP/2 floods; the server must answer it with GOAWAY ENHANCE_YOUR_CALM.
fn flood(t: &Target, tally: &Tally, i: u64) {
    let (name, attack) = h2raw::FLOODS[i as usize % h2raw::FLOODS.len()];
    let mut raw = Raw::connect_to(t.plain, &[]);
    attack(&mut raw);
    let code = raw.goaway();
    tally.attacks.fetch_add(1, Ordering::Relaxed);
    tally.check(code == Some(0xb), || {
        format!("flood {name}: GOAWAY {code:?}")
    });
}

/// The TLS listener is on another loopback address so that both can take a port of 0 (on one
/// address they would be one listener).
fn start() -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    write_file(dir.path(), "www/6b.txt", SMALL);
    write_file(dir.path(), "www/big.bin", &vec![b'z'; BIG_LEN]);
    let conf = "
listen:
  - host: 127.0.0.1
    port: 0
  - host: 127.0.0.2
    port: 0
    ssl:
      certificate-file: a.crt
      key-file: a.key
num-threads: 2
http2-max-resets-per-second: 100
http2-max-control-frames-per-second: 200
hosts:
  default:
    paths:
      /answer:
        respond: {body: \"42\"}
      /:
        file.dir: www
";
    Spate::start_in(conf, dir)
}

/// The TLS listener's address: the second one in the configuration.
fn tls_addr(s: &Spate) -> SocketAddr {
    *s.listening.get(1).expect("a second listener")
}

fn running(s: &mut Spate) -> bool {
    matches!(s.child.try_wait(), Ok(None))
}
