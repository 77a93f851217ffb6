//! FastCGI (`fastcgi.connect`, `file.custom-handler`) against Debian's PHP-FPM, started by
//! each test on its own socket, and against a small FastCGI server here for what PHP-FPM
//! cannot be made to do (count connections, answer malformed).

mod common;

use common::load::Load;
use common::php_fpm::{Listen, PhpFpm};
use common::{curl, free_ports, Spate};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const INFO_PHP: &str = r#"<?php
header("X-From: php");
foreach (['SCRIPT_FILENAME','SCRIPT_NAME','PATH_INFO','DOCUMENT_ROOT','QUERY_STRING',
          'REQUEST_METHOD','CONTENT_TYPE','CONTENT_LENGTH','HTTP_X_CUSTOM','HTTP_COOKIE',
          'HTTPS','REMOTE_ADDR','SERVER_ADDR','SERVER_PORT','SERVER_NAME','SERVER_PROTOCOL',
          'SERVER_SOFTWARE','REQUEST_URI','HTTP_HOST','HTTP_PROXY'] as $k) {
    echo "$k=" . ($_SERVER[$k] ?? '(unset)') . "\n";
}
"#;

const POST_PHP: &str = r#"<?php
$body = file_get_contents('php://input');
echo "len=" . strlen($body) . " md5=" . md5($body) . " post=" . json_encode($_POST) . "\n";
"#;

fn docroot(dir: &std::path::Path) {
    let w = |rel: &str, s: &str| common::write_file(dir, rel, s.as_bytes());
    w("www/info.php", INFO_PHP);
    w("www/post.php", POST_PHP);
    w(
        "www/big.php",
        "<?php $n = (int)($_GET['mb'] ?? 5); for ($i = 0; $i < $n * 16; $i++) echo str_repeat(chr(97 + $i % 26), 65536);",
    );
    w(
        "www/status.php",
        "<?php http_response_code(404); echo 'gone';",
    );
    w(
        "www/redirect.php",
        "<?php header('Location: http://example.com/elsewhere'); ",
    );
    w(
        "www/warn.php",
        "<?php error_log('fastcgi-test-warning'); echo 'ok';",
    );
    w(
        "www/sub/index.php",
        "<?php echo 'index of sub via ' . $_SERVER['SCRIPT_NAME'];",
    );
    w("www/static.txt", "plain file\n");
}

/// spate serving `$DIR/www` with `.php` to PHP-FPM at `fpm`.
fn start(fpm: &PhpFpm, extra: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    docroot(dir.path());
    let yaml = format!(
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: $DIR/www\n        file.index: [index.php, index.html]\n        file.custom-handler:\n          extension: .php\n          fastcgi.connect: {{type: unix, port: {}}}\n{extra}",
        fpm.socket().display()
    );
    Spate::start_in(&yaml, dir)
}

fn vars(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn php_sees_the_cgi_variables_h2o_sets() {
    let Some(fpm) = PhpFpm::start(Listen::Unix, 2) else {
        return;
    };
    let s = start(&fpm, "");
    let port = s.addr.port();
    let out = curl(&[
        "-s",
        "-i",
        "-H",
        "X-Custom: hello",
        "-H",
        "Cookie: a=1",
        "-H",
        "Cookie: b=2",
        "-H",
        "Proxy: http://evil/",
        &s.url("/info.php/extra/path?x=1&y=2"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("X-From: php"), "{text}");
    let v = vars(&text);
    let root = s.dir.path().join("www");
    assert_eq!(v["SCRIPT_FILENAME"], format!("{}/info.php", root.display()));
    assert_eq!(v["SCRIPT_NAME"], "/info.php");
    assert_eq!(v["PATH_INFO"], "/extra/path");
    assert_eq!(v["QUERY_STRING"], "x=1&y=2");
    assert_eq!(v["REQUEST_METHOD"], "GET");
    assert_eq!(v["REQUEST_URI"], "/info.php/extra/path?x=1&y=2");
    // The test's URLs name the listener's address as it was bound.
    let host = s.addr.ip().to_string();
    assert_eq!(v["HTTP_HOST"], format!("{host}:{port}"));
    assert_eq!(v["HTTP_X_CUSTOM"], "hello");
    assert_eq!(v["HTTP_COOKIE"], "a=1;b=2");
    assert_eq!(v["HTTP_PROXY"], "(unset)", "httpoxy");
    assert_eq!(v["HTTPS"], "(unset)");
    assert_eq!(v["CONTENT_LENGTH"], "(unset)");
    assert_eq!(v["REMOTE_ADDR"], "127.0.0.1");
    assert_eq!(v["SERVER_ADDR"], "127.0.0.1");
    assert_eq!(v["SERVER_PORT"], port.to_string());
    assert_eq!(v["SERVER_NAME"], host);
    assert_eq!(v["SERVER_PROTOCOL"], "HTTP/1.1");
    assert!(v["SERVER_SOFTWARE"].starts_with("spate/"));
    assert_eq!(v["DOCUMENT_ROOT"], "(unset)");

    // A directory's index file, and a static file beside the scripts.
    let out = curl(&["-s", &s.url("/sub/")]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "index of sub via /sub/index.php"
    );
    let out = curl(&["-s", &s.url("/static.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain file\n");
}

#[test]
fn document_root_and_status_and_location() {
    let Some(fpm) = PhpFpm::start(Listen::Unix, 2) else {
        return;
    };
    let s = start(&fpm, "        fastcgi.document_root: /srv/app\n");
    let v = vars(&String::from_utf8_lossy(
        &curl(&["-s", &s.url("/info.php/p")]).stdout,
    ));
    assert_eq!(v["DOCUMENT_ROOT"], "/srv/app");
    let out = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &s.url("/status.php"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
    let out = curl(&["-s", "-i", &s.url("/redirect.php")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 302"), "{text}");
    assert!(
        text.contains("Location: http://example.com/elsewhere"),
        "{text}"
    );
    // A missing script is PHP-FPM's 404, and its complaint is logged.
    let out = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &s.url("/warn.php"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    assert_eq!(s.log_lines_naming("fastcgi-test-warning", 1).len(), 1);
}

#[test]
fn post_bodies_stream_to_php() {
    let Some(fpm) = PhpFpm::start(Listen::Unix, 2) else {
        return;
    };
    let s = start(&fpm, "");
    let out = curl(&["-s", "-d", "a=1&b=two", &s.url("/post.php")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(r#"post={"a":"1","b":"two"}"#), "{text}");
    assert!(text.starts_with("len=9 "), "{text}");

    // A few MB, with Content-Length and then chunked (buffered to give CONTENT_LENGTH).
    let big: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let file = s.dir.path().join("upload.bin");
    std::fs::write(&file, &big).expect("write upload");
    let md5 = String::from_utf8_lossy(
        &std::process::Command::new("md5sum")
            .arg(&file)
            .output()
            .expect("md5sum")
            .stdout,
    )
    .split_whitespace()
    .next()
    .unwrap_or_default()
    .to_string();
    let at = format!("@{}", file.display());
    for extra in [&[][..], &["-H", "Transfer-Encoding: chunked"][..]] {
        let mut args = vec!["-s", "-H", "Content-Type: application/octet-stream"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--data-binary", &at]);
        let url = s.url("/post.php");
        args.push(&url);
        let out = curl(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with(&format!("len={} md5={md5}", big.len())),
            "{extra:?}: {text}"
        );
    }
}

#[test]
fn large_responses_stream_over_http1_and_http2() {
    let Some(fpm) = PhpFpm::start(Listen::Unix, 2) else {
        return;
    };
    let s = start(&fpm, "");
    for proto in ["--http1.1", "--http2-prior-knowledge"] {
        let out = curl(&[
            "-s",
            proto,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download}",
            &s.url("/big.php?mb=6"),
        ]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("200 {}", 6 * 1024 * 1024),
            "{proto}"
        );
    }
}

#[test]
fn fastcgi_connect_over_tcp_on_a_path() {
    let [port] = free_ports::<1>();
    let Some(fpm) = PhpFpm::start(Listen::Tcp(port), 2) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    docroot(dir.path());
    // h2o's form: a bare port on 127.0.0.1. PHP-FPM runs the script DOCUMENT_ROOT + path
    // names when given SCRIPT_FILENAME by nobody: give it through PATH_TRANSLATED's root.
    let yaml = format!(
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        fastcgi.connect: {port}\n        fastcgi.document_root: $DIR/www\n"
    );
    let s = Spate::start_in(&yaml, dir);
    let out = curl(&["-s", "-i", &s.url("/info.php?q")]);
    let text = String::from_utf8_lossy(&out.stdout);
    // PHP-FPM resolves the script from PATH_TRANSLATED (DOCUMENT_ROOT + PATH_INFO).
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let v = vars(&text);
    assert_eq!(v["SCRIPT_NAME"], "", "{text}");
    assert_eq!(v["PATH_INFO"], "/info.php");
    assert_eq!(v["QUERY_STRING"], "q");
    drop(fpm);
}

#[test]
fn a_pool_that_is_down_gives_503_and_one_log_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    docroot(dir.path());
    let s = Spate::start_in(
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: $DIR/www\n        file.custom-handler:\n          extension: .php\n          fastcgi.connect: {type: unix, port: $DIR/nobody.sock}\n",
        dir,
    );
    let out = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &s.url("/info.php"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "503");
    let lines = s.log_lines_naming("nobody.sock", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    // Static files are still served.
    let out = curl(&["-s", &s.url("/static.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain file\n");
}

/// A FastCGI server answering each request with `answer`'s records; counts connections, and
/// those the client closed.
fn fake_app(answer: &'static [u8], keep: bool) -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    fake_app_with(answer, keep, usize::MAX)
}

/// [`fake_app`] that, on a kept connection, takes the request after `answers` answered ones
/// and closes the connection without answering it (an application worker that exits).
fn fake_app_with(
    answer: &'static [u8],
    keep: bool,
    answers: usize,
) -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let (count, closes) = (accepted.clone(), closed.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let closes = closes.clone();
            std::thread::spawn(move || {
                // Read records until the empty STDIN one, answer, and again while kept.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                for done in 0.. {
                    loop {
                        if let Some(end) = find_empty_stdin(&buf) {
                            buf.drain(..end);
                            break;
                        }
                        match c.read(&mut chunk) {
                            Ok(0) => {
                                closes.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                            Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    if done == answers {
                        return;
                    }
                    if c.write_all(answer).is_err() || !keep {
                        return;
                    }
                }
            });
        }
    });
    (port, accepted, closed)
}

/// The end of the first empty STDIN record in `buf`.
fn find_empty_stdin(buf: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at + 8 <= buf.len() {
        let len = usize::from(u16::from_be_bytes([buf[at + 4], buf[at + 5]]));
        let end = at + 8 + len + usize::from(buf[at + 6]);
        if end > buf.len() {
            return None;
        }
        if buf[at + 1] == 5 && len == 0 {
            return Some(end);
        }
        at = end;
    }
    None
}

const GOOD: &[u8] = b"\x01\x06\x00\x01\x00\x1e\x00\x00Content-Type: text/plain\r\n\r\nhi\x01\x06\x00\x01\x00\x00\x00\x00\x01\x03\x00\x01\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";

fn start_fake(port: u16, keepalive_ms: u32) -> Spate {
    Spate::start(&format!(
        "listen: 0\nnum-threads: 1\nhosts:\n  default:\n    paths:\n      /:\n        fastcgi.connect: 127.0.0.1:{port}\n        fastcgi.timeout.keepalive: {keepalive_ms}\n        fastcgi.timeout.io: 2000\n"
    ))
}

#[test]
fn keepalive_reuses_connections_and_zero_does_not() {
    for (keepalive, want) in [(5000, 1), (0, 4)] {
        let (port, accepted, _) = fake_app(GOOD, keepalive > 0);
        let s = start_fake(port, keepalive);
        for _ in 0..4 {
            let out = curl(&["-s", &s.url("/x")]);
            assert_eq!(String::from_utf8_lossy(&out.stdout), "hi");
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            want,
            "keepalive {keepalive}"
        );
    }
}

#[test]
fn keepalive_with_php_fpm_serves_many_requests() {
    let Some(fpm) = PhpFpm::start(Listen::Unix, 2) else {
        return;
    };
    let s = start(&fpm, "        fastcgi.timeout.keepalive: 10000\n");
    for i in 0..20 {
        let out = curl(&["-s", &s.url(&format!("/info.php?i={i}"))]);
        let v = vars(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(v["QUERY_STRING"], format!("i={i}"));
    }
}

#[test]
fn malformed_answers_give_502_and_silence_gives_504() {
    let cases: [(&'static [u8], &str); 3] = [
        (b"HTTP/1.1 200 OK\r\n\r\n", "502"),
        (
            b"\x01\x06\x00\x01\x00\x0b\x00\x00no colon\r\n\r\x01\x03\x00\x01\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            "502",
        ),
        (b"", "504"),
    ];
    for (answer, want) in cases {
        let (port, _, _) = fake_app(answer, answer.is_empty());
        let s = start_fake(port, 0);
        let out = curl(&["-s", "-o", "/dev/null", "-w", "%{http_code}", &s.url("/x")]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{answer:?}");
        assert!(!s.log_lines_naming("fastcgi", 1).is_empty());
    }
}

/// A FastCGI application in Python that serves on its standard input (the listening socket
/// `fastcgi.spawn` gives it), as php-cgi does: answers its pid.
const SPAWNED_APP: &str = r#"
import os, socket, struct
l = socket.socket(fileno=0)
while True:
    c, _ = l.accept()
    buf = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        buf += d
        at, done = 0, False
        while at + 8 <= len(buf):
            n = struct.unpack(">H", buf[at + 4:at + 6])[0]
            if buf[at + 1] == 5 and n == 0:
                done = True
            at += 8 + n + buf[at + 6]
        if done:
            break
    body = b"Content-Type: text/plain\r\n\r\nspawned pid=%d" % os.getpid()
    c.sendall(struct.pack(">BBHHBB", 1, 6, 1, len(body), 0, 0) + body)
    c.sendall(struct.pack(">BBHHBB", 1, 3, 1, 8, 0, 0) + bytes(8))
    c.close()
"#;

#[test]
fn fastcgi_spawn_starts_the_application_and_stops_it_at_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    common::write_file(dir.path(), "app.py", SPAWNED_APP.as_bytes());
    let mut s = Spate::start_in(
        "listen: 0\nhosts:\n  default:\n    paths:\n      /:\n        fastcgi.spawn: \"exec python3 $DIR/app.py\"\n",
        dir,
    );
    let out = curl(&["-s", &s.url("/anything")]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let pid: u32 = text
        .strip_prefix("spawned pid=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    s.stop();
    // SIGTERM at exit, waited for: the process is gone (not even a zombie).
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn bad_fastcgi_configurations_name_file_and_line() {
    let cases = [
        (
            "        fastcgi.connect: {type: udp, port: 9000}\n",
            "fastcgi.connect: type is tcp or unix",
        ),
        ("        fastcgi.connect: nowhere\n", "fastcgi.connect expects a port"),
        (
            "        fastcgi.connect: 9000\n        fastcgi.timeout.io: soon\n",
            "fastcgi.timeout.io",
        ),
        (
            "        file.dir: /tmp\n        file.custom-handler:\n          extension: php\n          fastcgi.connect: 9000\n",
            "must start with a dot",
        ),
        (
            "        file.dir: /tmp\n        file.custom-handler:\n          extension: .php\n",
            "a handler is required",
        ),
    ];
    for (paths, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("spate.yaml");
        std::fs::write(
            &conf,
            format!("listen: 0\nhosts:\n  default:\n    paths:\n      /:\n{paths}"),
        )
        .expect("write");
        let out = std::process::Command::new(common::BIN)
            .arg("-t")
            .arg("-c")
            .arg(&conf)
            .output()
            .expect("spate -t");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{paths}");
        assert!(err.contains(&format!("{}:", conf.display())), "{err}");
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn idle_connections_close_after_the_keepalive_timeout() {
    let (port, accepted, closed) = fake_app(GOOD, true);
    let s = start_fake(port, 300);
    let out = curl(&["-s", &s.url("/x")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // No further request comes to find it expired: the pool closes it itself.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while closed.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(closed.load(Ordering::SeqCst), 1);
}

#[test]
fn a_kept_connection_the_application_closed_is_sent_again_on_a_new_one() {
    // Each connection answers one request and drops the next unanswered, as a PHP-FPM child
    // at its pm.max_requests does.
    let (port, accepted, _) = fake_app_with(GOOD, true, 1);
    let s = start_fake(port, 5000);
    for i in 0..4 {
        let out = curl(&["-s", "-w", " %{http_code}", &s.url("/x")]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hi 200",
            "request {i}"
        );
    }
    // The first connection, then for each later request the lost kept one and a new one.
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
    assert!(s.log_lines_naming("fastcgi", 0).is_empty());
}

#[test]
fn requests_beyond_fastcgi_max_connections_wait_for_one() {
    let (port, accepted, _) = fake_app(GOOD, true);
    let s = Spate::start(&format!(
        "listen: 0\nnum-threads: 1\nhosts:\n  default:\n    paths:\n      /:\n        fastcgi.connect: 127.0.0.1:{port}\n        fastcgi.max-connections: 2\n"
    ));
    let url = s.url("/x");
    // 100 requests: no connection reaches the 100 after which it is closed for a new one.
    let out = Load::h2load_with(&url, &["-n", "100", "-c", "20", "-m", "5"]).finish(10);
    assert_eq!((out.succeeded, out.non_2xx), (100, 0), "{out:?}");
    let n = accepted.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&n),
        "{n} connections for fastcgi.max-connections: 2"
    );
}

#[test]
fn php_fpm_with_fewer_children_than_kept_connections_answers_every_request() {
    // Two spate workers may each keep 16 connections (the defaults); PHP-FPM has 2 children,
    // so most connections wait in its backlog behind kept ones until those are rotated.
    let Some(fpm) = PhpFpm::start(Listen::Unix, 2) else {
        return;
    };
    let s = start(&fpm, "num-threads: 2\n");
    let t = std::time::Instant::now();
    let out = Load::h2load_with(&s.url("/info.php"), &["-n", "600", "-c", "30", "-m", "4"]);
    let out = out.finish(20);
    assert_eq!((out.succeeded, out.non_2xx), (600, 0), "{out:?}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t.elapsed()
    );
}
