//! `listen: {type: unix, path: ..., permission: ...}`: curl over the socket file, HAProxy as a
//! balancer on the same host sending PROXY v1 and v2 over it (the client's address reaches
//! the log and the backend), the file's mode, a stale socket file replaced, and each bad
//! listen with its file:line.

mod common;
mod tls_support;

use common::backend::{Backend, Echo};
use common::*;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

/// A TCP listener too: the harness waits for its address (the unix ones' lines come after it).
fn start(dir: tempfile::TempDir, backend: &Backend) -> Spate {
    Spate::start_in(
        &format!(
            "
listen:
  - {{type: unix, path: plain.sock, permission: 0660}}
  - {{host: 127.0.0.1, port: 0}}
  - {{type: unix, path: proxied.sock, proxy-protocol: ON}}
  - {{type: unix, path: tls.sock, owner: nobody, ssl: {{certificate-file: a.crt, key-file: a.key}}}}
num-threads: 2
access-log:
  path: $DIR/access.log
  format: \"%h %r %s\"
hosts:
  default:
    paths:
      /answer:
        respond: {{body: \"over the socket\\n\"}}
      /:
        proxy.reverse.url: {}
",
            backend.url("/")
        ),
        dir,
    )
}

fn curl_unix(sock: &std::path::Path, url: &str, extra: &[&str]) -> (u16, String) {
    let sock = sock.display().to_string();
    let mut args = vec!["--unix-socket", &sock];
    args.extend_from_slice(extra);
    args.push(url);
    curl_status(&args)
}

#[test]
fn curl_and_haproxy_over_unix_sockets() {
    let backend = Backend::start();
    let dir = tempfile::tempdir().unwrap();
    // A socket file left by an earlier run is replaced.
    let stale = std::os::unix::net::UnixListener::bind(dir.path().join("plain.sock")).unwrap();
    drop(stale);
    tls_support::cert(dir.path(), "a", "localhost", false);
    let s = start(dir, &backend);
    let plain = s.path().join("plain.sock");
    let meta = std::fs::metadata(&plain).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o660);

    // HTTP/1.1 and HTTP/2 (prior knowledge) over the socket, a proxied request too.
    let (status, body) = curl_unix(&plain, "http://x/answer", &[]);
    assert_eq!((status, body.as_str()), (200, "over the socket\n"));
    let (status, body) = curl_unix(&plain, "http://x/answer", &["--http2-prior-knowledge"]);
    assert_eq!((status, body.as_str()), (200, "over the socket\n"));
    let (status, body) = curl_unix(&plain, "http://x/echo", &[]);
    assert_eq!(status, 200, "{body}");
    assert!(Echo::parse(body.as_bytes()).is_some(), "{body}");
    // TLS over the socket, HTTP/2 by ALPN; the file given to `owner`.
    let tls = s.path().join("tls.sock");
    let nobody = Command::new("id").args(["-u", "nobody"]).output().unwrap();
    let nobody: u32 = String::from_utf8_lossy(&nobody.stdout)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&tls).unwrap()),
        nobody
    );
    let (status, body) = curl_unix(&tls, "https://localhost/answer", &["-k", "--http2"]);
    assert_eq!((status, body.as_str()), (200, "over the socket\n"));

    // HAProxy on the same host: TCP in front, PROXY v1 and v2 to spate's socket file.
    let proxied = s.path().join("proxied.sock");
    let [p1, p2] = free_ports::<2>();
    let sock = format!("unix@{}", proxied.display());
    let _h = haproxy::start(
        s.path(),
        &[
            (p1, sock.clone(), "send-proxy"),
            (p2, sock, "send-proxy-v2"),
        ],
    );
    for (from, port, path) in [("127.0.0.21", p1, "/v1"), ("127.0.0.22", p2, "/v2")] {
        let out = curl(&[
            "-s",
            "--max-time",
            "10",
            "--interface",
            from,
            &format!("http://127.0.0.1:{port}{path}"),
        ]);
        let body = String::from_utf8_lossy(&out.stdout).into_owned();
        let echo = Echo::parse(body.as_bytes()).expect("an echo");
        assert_eq!(echo.header("x-forwarded-for"), Some(from), "{body}");
    }
    let lines = file_lines(&s.path().join("access.log"), 6);
    for want in [
        "0.0.0.0 GET /answer HTTP/1.1 200",
        "0.0.0.0 GET /answer HTTP/2 200",
        "127.0.0.21 GET /v1 HTTP/1.1 200",
        "127.0.0.22 GET /v2 HTTP/1.1 200",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want} not in {lines:?}");
    }
    // h2c and TLS.
    let h2 = lines
        .iter()
        .filter(|l| *l == "0.0.0.0 GET /answer HTTP/2 200");
    assert_eq!(h2.count(), 2, "{lines:?}");

    // A request without its PROXY header on the proxied socket: closed unanswered, one line.
    let mut bare = std::os::unix::net::UnixStream::connect(&proxied).unwrap();
    bare.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::io::Write::write_all(&mut bare, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut bare, &mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    let bad = s.log_lines_naming("bad PROXY header", 1);
    assert_eq!(bad.len(), 1, "{bad:?}");
}

#[test]
fn a_file_in_the_way_stops_the_start_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("taken.sock"), b"not a socket").unwrap();
    let conf = dir.path().join("conf.yaml");
    std::fs::write(
        &conf,
        "listen:\n  - {host: 127.0.0.1, port: 0}\n  - {type: unix, path: taken.sock}\n\
         hosts: {default: {paths: {/: {respond: {body: x}}}}}\n",
    )
    .unwrap();
    let out = Command::new(BIN).arg("-c").arg(&conf).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("conf.yaml:3: cannot listen on") && err.contains("not a socket"),
        "{err}"
    );
    // An owner that is not an account.
    std::fs::write(
        &conf,
        "listen:\n  - {host: 127.0.0.1, port: 0}\n  - {type: unix, path: new.sock, owner: no-such-user}\n\
         hosts: {default: {paths: {/: {respond: {body: x}}}}}\n",
    )
    .unwrap();
    let out = Command::new(BIN).arg("-c").arg(&conf).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("conf.yaml:3: cannot listen on") && err.contains("no such user no-such-user"),
        "{err}"
    );
    // Left as it was.
    assert_eq!(
        std::fs::read(dir.path().join("taken.sock")).unwrap(),
        b"not a socket"
    );
}

#[test]
fn dash_t_names_each_bad_unix_listen() {
    assert_config_errors(
        "listen:
  - {type: unix}
  - {type: unix, path: a.sock, port: 80}
  - {type: unix, path: b.sock, permission: '0999'}
  - {type: unix, path: c.sock, proxy-protocol: ON, proxy-protocol-from: 127.0.0.1}
  - {port: 81, path: d.sock}
  - {type: pipe, port: 82}
hosts:
  default:
    paths:
      /:
        respond: {body: x}
",
        &[
        "conf.yaml:2: listen: type unix requires path (the socket file)",
        "conf.yaml:3: listen: port, quic, sndbuf, rcvbuf and reuseport do not apply to type: unix",
        "conf.yaml:4: listen.permission expects an octal mode (0600, 0660), got",
        "conf.yaml:5: listen: proxy-protocol-from applies to TCP listeners",
        "conf.yaml:6: listen: path and owner are for type: unix",
        "conf.yaml:7: listen.type expects tcp, quic or unix, got",
        ],
    );
}

/// A reload keeps the socket (the same file, nothing queued lost); a connection made before
/// it is still answered, and new ones are served by the new workers.
#[test]
fn a_reload_keeps_the_socket() {
    use std::io::{Read, Write};
    use std::os::unix::fs::MetadataExt;
    let backend = Backend::start();
    let dir = tempfile::tempdir().unwrap();
    tls_support::cert(dir.path(), "a", "localhost", false);
    let s = start(dir, &backend);
    let plain = s.path().join("plain.sock");
    let inode = std::fs::metadata(&plain).unwrap().ino();
    let mut before = std::os::unix::net::UnixStream::connect(&plain).unwrap();
    before
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    signal(&s.child, libc::SIGHUP);
    let reloaded = s.log_lines_naming("reloaded", 1);
    assert_eq!(reloaded.len(), 1, "{reloaded:?}");
    assert_eq!(std::fs::metadata(&plain).unwrap().ino(), inode);
    before
        .write_all(b"GET /answer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = before.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("over the socket\n"), "{text}");
    let (status, _) = curl_unix(&plain, "http://x/answer", &[]);
    assert_eq!(status, 200);
}
