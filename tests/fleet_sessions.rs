//! A fleet of spates sharing a TLS session cache (`ssl-session-resumption.cache-store`):
//! a TLS 1.2 session resumes by its ID on another instance through Debian's memcached and
//! redis-server (started here on ephemeral ports); and the shape of `docs/fleet.md`, Debian's
//! HAProxy in TCP mode round robin with `send-proxy-v2` in front of two instances sharing
//! ticket keys through Redis. Clients: openssl s_client with `-sess_out` / `-sess_in`.

mod common;
mod fleet_support;
mod tls_support;

use common::*;
use fleet_support::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tls_support::*;

/// `cache-store: memcached` or `redis` (no tickets): a TLS 1.2 session resumes by its ID on
/// another instance, a TLS 1.3 session by its stateful ticket; the store down, an instance
/// still resumes its own sessions and says so once; back, sessions are shared again.
fn shares_sessions_by_id(mut m: StoreProcess, kind: &str) {
    let certs = tempfile::tempdir().expect("tempdir");
    cert(certs.path(), "a", "a.example", false);
    let store = format!(
        "  cache-store: {kind}\n  {kind}: {{host: 127.0.0.1, port: {}}}",
        m.port
    );
    let a = instance_in_mode(certs.path(), "cache", &store);
    let b = instance_in_mode(certs.path(), "cache", &store);
    // Writes to the store are made in the background: poll until B finds A's session.
    let resumed = |from: &Spate, to: &Spate, version: &str| {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let line = resume_across(from.addr.port(), to.addr.port(), &[&format!("-{version}")]);
            if line.starts_with("Reused,") || Instant::now() > end {
                return line;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    for version in ["tls1_2", "tls1_3"] {
        let line = resumed(&a, &b, version);
        assert!(line.starts_with("Reused,"), "{version} A to B: {line}");
        let line = resumed(&b, &a, version);
        assert!(line.starts_with("Reused,"), "{version} B to A: {line}");
    }
    // Only the store carries sessions between instances: without it, a full handshake.
    let alone = instance_in_mode(certs.path(), "cache", "");
    let line = resume_across(a.addr.port(), alone.addr.port(), &["-tls1_2"]);
    assert!(line.starts_with("New,"), "{line}");

    m.stop();
    let line = resume_across(a.addr.port(), b.addr.port(), &["-tls1_2"]);
    assert!(line.starts_with("New,"), "{line}");
    let line = resume_across(a.addr.port(), a.addr.port(), &["-tls1_2"]);
    assert!(line.starts_with("Reused,"), "{line}");
    let what = format!("session cache: {kind}");
    let failed = a.log_lines_naming(&what, 1);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].contains("failed, sessions stay local"),
        "{failed:?}"
    );

    m.restart();
    let line = resumed(&a, &b, "tls1_2");
    assert!(line.starts_with("Reused,"), "after the restart: {line}");
    let back = a.log_lines_naming(&what, 2);
    assert!(back.iter().any(|l| l.contains("is back")), "{back:?}");
}

#[test]
fn memcached_shares_tls_sessions_by_id() {
    if need("openssl") && need(MEMCACHED) {
        shares_sessions_by_id(StoreProcess::memcached(), "memcached");
    }
}

#[test]
fn redis_shares_tls_sessions_by_id() {
    if need("openssl") && need(REDIS) {
        shares_sessions_by_id(StoreProcess::redis(), "redis");
    }
}

/// HAProxy in TCP mode, round robin with `send-proxy-v2`, in front of two instances sharing
/// ticket keys through Redis (the shape of `docs/fleet.md`): a session saved through the
/// balancer resumes on both instances (two connections in a row reach both of them).
#[test]
fn resumption_through_haproxy_round_robin() {
    if !need("openssl") || !need(REDIS) || !need("haproxy") {
        return;
    }
    let certs = tempfile::tempdir().expect("tempdir");
    cert(certs.path(), "a", "a.example", false);
    let redis = StoreProcess::redis();
    let start = |store: &str| {
        Spate::start_in(
            &format!(
                "ssl-session-resumption:
  mode: ticket
{store}
listen:
  host: 127.0.0.1
  port: 0
  proxy-protocol: ON
  ssl:
    certificate-file: a.crt
    key-file: a.key
hosts:
  a.example:
    paths:
      /:
        file.dir: htdocs
"
            ),
            instance_dir(certs.path()),
        )
    };
    let store = format!(
        "  ticket-store: redis\n  redis: {{host: 127.0.0.1, port: {}}}",
        redis.port
    );
    let (a, b) = (start(&store), start(&store));
    let (c, d) = (start(""), start(""));
    let [shared_port, alone_port] = free_ports::<2>();
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = format!(
        "global\n  maxconn 100\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend shared\n  bind 127.0.0.1:{shared_port}\n  default_backend shared\n\
         backend shared\n  balance roundrobin\n  server a {} send-proxy-v2\n  server b {} send-proxy-v2\n\
         frontend alone\n  bind 127.0.0.1:{alone_port}\n  default_backend alone\n\
         backend alone\n  balance roundrobin\n  server c {} send-proxy-v2\n  server d {} send-proxy-v2\n",
        a.addr, b.addr, c.addr, d.addr
    );
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(&cfg, conf).expect("write haproxy.cfg");
    let mut haproxy = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run haproxy");
    let end = Instant::now() + Duration::from_secs(10);
    for port in [shared_port, alone_port] {
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "haproxy did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // One session, then two resumptions in a row: round robin sends them to both instances.
    let twice = |port: u16, version: &str| {
        let sess = dir.path().join(format!("{port}{version}.pem"));
        let sess = sess.display().to_string();
        let out = s_client(
            port,
            &[version, "-sess_out", &sess],
            &get_close("/", "a.example"),
        );
        assert!(out.contains("fleet"), "{out}");
        [0, 1].map(|_| {
            let out = s_client(
                port,
                &[version, "-sess_in", &sess],
                &get_close("/", "a.example"),
            );
            assert!(out.contains("fleet"), "{out}");
            session_line(&out)
        })
    };
    for version in ["-tls1_3", "-tls1_2"] {
        let lines = twice(shared_port, version);
        assert!(
            lines.iter().all(|l| l.starts_with("Reused,")),
            "{version}: {lines:?}"
        );
        // The control: without a shared store one of the two is a full handshake.
        let lines = twice(alone_port, version);
        assert!(
            lines.iter().any(|l| l.starts_with("New,")),
            "{version}: {lines:?}"
        );
    }
    let _ = haproxy.kill();
    let _ = haproxy.wait();
}
