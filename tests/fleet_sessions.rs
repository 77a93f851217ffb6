//! A fleet of spates sharing a TLS session cache (`ssl-session-resumption.cache-store`):
//! a TLS 1.2 session resumes by its ID on another instance through Debian's memcached and
//! redis-server (started here on ephemeral ports); and the shape of `docs/fleet.md`, Debian's
//! HAProxy in TCP mode round robin with `send-proxy-v2` in front of two instances sharing
//! ticket keys through Redis; ticket keys rolled over (a short `lifetime`) while sessions made
//! with the old key still resume across instances. Clients: openssl s_client with `-sess_out`
//! / `-sess_in`.

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

    // A session every instance could resume (B found it in the store), and a third
    // instance on the same store that has not seen it.
    let dir = tempfile::tempdir().expect("tempdir");
    let before = dir.path().join("before.pem").display().to_string();
    let out = s_client(
        a.addr.port(),
        &["-tls1_2", "-sess_out", &before],
        &get_close("/", "a.example"),
    );
    assert!(session_line(&out).starts_with("New,"), "{out}");
    let offer = |to: &Spate, sess: &str| {
        let out = s_client(
            to.addr.port(),
            &["-tls1_2", "-sess_in", sess],
            &get_close("/", "a.example"),
        );
        assert!(out.contains("fleet"), "{out}");
        session_line(&out)
    };
    let end = Instant::now() + Duration::from_secs(15);
    while !offer(&b, &before).starts_with("Reused,") {
        assert!(
            Instant::now() < end,
            "B never found A's session in the store"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let c = instance_in_mode(certs.path(), "cache", &store);

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
    // The restarted store is empty: the session made before is a full handshake on an
    // instance that did not hold it, and sessions made now are shared again.
    let line = offer(&c, &before);
    assert!(line.starts_with("New,"), "after the restart: {line}");
    let line = resumed(&a, &b, "tls1_2");
    assert!(line.starts_with("Reused,"), "after the restart: {line}");
    let line = resumed(&b, &c, "tls1_3");
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

/// `ticket-store` with a short `lifetime` (48 s: a new key every 12 s, announced 12 s ahead,
/// the old one live for 60 s): a session made with the first key resumes on the other instance
/// after both have rolled over to a new key, and sessions made with the new key move too.
fn resumes_across_a_roll_over(m: StoreProcess, kind: &str) {
    let certs = tempfile::tempdir().expect("tempdir");
    cert(certs.path(), "a", "a.example", false);
    let store = format!(
        "  lifetime: 48\n  ticket-store: {kind}\n  {kind}: {{host: 127.0.0.1, port: {}}}",
        m.port
    );
    let a = instance_in_mode(certs.path(), "ticket", &store);
    let b = instance_in_mode(certs.path(), "ticket", &store);
    let dir = tempfile::tempdir().expect("tempdir");
    let save = |on: &Spate, version: &str, name: &str| {
        let sess = dir.path().join(name);
        let arg = sess.display().to_string();
        let out = s_client(
            on.addr.port(),
            &[version, "-sess_out", &arg],
            &get_close("/", "a.example"),
        );
        assert!(session_line(&out).starts_with("New,"), "{out}");
        (arg, ticket_key_name(&sess))
    };
    let offer = |to: &Spate, version: &str, sess: &str| {
        let out = s_client(
            to.addr.port(),
            &[version, "-sess_in", sess],
            &get_close("/", "a.example"),
        );
        assert!(out.contains("fleet"), "{out}");
        session_line(&out)
    };
    let old13 = save(&a, "-tls1_3", "old13.pem");
    let old12 = save(&a, "-tls1_2", "old12.pem");
    assert_eq!(old13.1, old12.1);
    // Poll until A's tickets name another key: the roll-over (about 24 s in).
    let end = Instant::now() + Duration::from_secs(45);
    let new13 = loop {
        let s = save(&a, "-tls1_3", "new13.pem");
        if s.1 != old13.1 {
            break s;
        }
        assert!(Instant::now() < end, "no roll-over: still key {}", s.1);
        std::thread::sleep(Duration::from_millis(500));
    };
    // B encrypts with the new key too (the fleet rolled over as one)...
    let new12 = save(&b, "-tls1_2", "new12.pem");
    assert_eq!(new12.1, new13.1);
    // ...and still opens tickets of the old one, as A opens B's new ones.
    let line = offer(&b, "-tls1_3", &old13.0);
    assert!(
        line.starts_with("Reused, TLSv1.3"),
        "old key, TLS 1.3: {line}"
    );
    let line = offer(&b, "-tls1_2", &old12.0);
    assert!(
        line.starts_with("Reused, TLSv1.2"),
        "old key, TLS 1.2: {line}"
    );
    let line = offer(&b, "-tls1_3", &new13.0);
    assert!(
        line.starts_with("Reused, TLSv1.3"),
        "new key, TLS 1.3: {line}"
    );
    let line = offer(&a, "-tls1_2", &new12.0);
    assert!(
        line.starts_with("Reused, TLSv1.2"),
        "new key, TLS 1.2: {line}"
    );
}

#[test]
fn memcached_ticket_keys_roll_over_and_old_sessions_resume() {
    if need("openssl") && need(MEMCACHED) {
        resumes_across_a_roll_over(StoreProcess::memcached(), "memcached");
    }
}

#[test]
fn redis_ticket_keys_roll_over_and_old_sessions_resume() {
    if need("openssl") && need(REDIS) {
        resumes_across_a_roll_over(StoreProcess::redis(), "redis");
    }
}
