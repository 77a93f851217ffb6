//! A fleet of spates sharing session ticket keys (`ssl-session-resumption.ticket-store`):
//! a session from instance A resumes on instance B, through Debian's memcached (started here
//! on an ephemeral port), through Debian's redis-server, and through a shared h2o-format key
//! file; with the store down, handshakes carry on. Clients: openssl s_client with `-sess_out` / `-sess_in`.

mod common;
mod fleet_support;
mod tls_support;

use common::*;
use fleet_support::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tls_support::*;

/// A directory with the fleet's certificate `a.crt`/`a.key` (copied from `from`, so every
/// instance serves the same one) and a document root.
fn instance_dir(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["a.crt", "a.key"] {
        std::fs::copy(from.join(f), dir.path().join(f)).expect("copy certificate");
    }
    write_file(dir.path(), "htdocs/index.html", b"fleet\n");
    dir
}

/// One instance with tickets only (no session cache, so resumption across instances can only
/// come from shared ticket keys).
fn instance(certs: &Path, resumption: &str) -> Spate {
    instance_in_mode(certs, "ticket", resumption)
}

fn instance_in_mode(certs: &Path, mode: &str, resumption: &str) -> Spate {
    Spate::start_in(
        &format!(
            "ssl-session-resumption:
  mode: {mode}
{resumption}
listen:
  host: 127.0.0.1
  port: 0
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
        instance_dir(certs),
    )
}

/// The "New, ..." or "Reused, ..." line of an s_client run.
fn session_line(out: &str) -> String {
    out.lines()
        .find(|l| l.starts_with("New,") || l.starts_with("Reused,"))
        .unwrap_or_else(|| panic!("no session line in {out}"))
        .to_string()
}

/// A full handshake on `first` saving the session, then one on `second` offering it;
/// returns the second's session line.
fn resume_across(first: u16, second: u16, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let sess = dir.path().join("sess.pem").display().to_string();
    let mut args = extra.to_vec();
    args.extend_from_slice(&["-sess_out", &sess]);
    let out = s_client(first, &args, &get_close("/", "a.example"));
    assert!(session_line(&out).starts_with("New,"), "{out}");
    assert!(out.contains("fleet"), "{out}");
    let mut args = extra.to_vec();
    args.extend_from_slice(&["-sess_in", &sess]);
    let out = s_client(second, &args, &get_close("/", "a.example"));
    assert!(out.contains("fleet"), "{out}");
    session_line(&out)
}

fn assert_shared(a: &Spate, b: &Spate) {
    let (pa, pb) = (a.addr.port(), b.addr.port());
    for (extra, version) in [(&["-tls1_3"][..], "TLSv1.3"), (&["-tls1_2"][..], "TLSv1.2")] {
        let line = resume_across(pa, pb, extra);
        assert!(
            line.starts_with(&format!("Reused, {version}")),
            "A to B: {line}"
        );
        let line = resume_across(pb, pa, extra);
        assert!(
            line.starts_with(&format!("Reused, {version}")),
            "B to A: {line}"
        );
    }
}

fn tools() -> bool {
    need("openssl") && need(MEMCACHED)
}

#[test]
fn memcached_shares_ticket_keys_and_its_loss_keeps_handshakes_going() {
    if !tools() {
        return;
    }
    drop(shares_ticket_keys_and_survives_its_loss(
        StoreProcess::memcached(),
        "memcached",
    ));
}

#[test]
fn redis_shares_ticket_keys_and_its_loss_keeps_handshakes_going() {
    if !need("openssl") || !need(REDIS) || !need("redis-cli") {
        return;
    }
    let m = shares_ticket_keys_and_survives_its_loss(StoreProcess::redis(), "redis");
    let port = m.port;
    // The keys are in Redis in h2o's format, under the default key.
    let item = redis_cli(port, &["GET", "h2o:ssl-session-key"]);
    assert!(item.starts_with("- name: "), "{item}");
    assert!(item.contains("cipher: aes-256-cbc"), "{item}");
}

/// Two instances on `m` (`kind`: memcached or redis) resume each other's sessions; the store
/// stopped, they keep the keys they hold and a newcomer uses a key of its own; the store
/// back (empty), the instances seed it and sessions still move between them.
fn shares_ticket_keys_and_survives_its_loss(mut m: StoreProcess, kind: &str) -> StoreProcess {
    let certs = tempfile::tempdir().expect("tempdir");
    cert(certs.path(), "a", "a.example", false);
    let store = format!(
        "  ticket-store: {kind}\n  {kind}: {{host: 127.0.0.1, port: {}}}",
        m.port
    );
    let what = format!("session ticket keys: {kind}");
    let a = instance(certs.path(), &store);
    let b = instance(certs.path(), &store);
    assert_shared(&a, &b);

    // Without shared keys the same client gets a full handshake on the other instance.
    let alone = instance(certs.path(), "");
    let line = resume_across(a.addr.port(), alone.addr.port(), &["-tls1_3"]);
    assert!(line.starts_with("New,"), "{line}");

    // The store gone: the instances keep the keys they hold (sessions still move between
    // them), log it once, and a new instance handshakes in full with a key of its own.
    m.stop();
    let failed = a.log_lines_naming(&what, 1);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].contains("failed, keeping the keys held"),
        "{failed:?}"
    );
    assert_shared(&a, &b);
    let c = instance(certs.path(), &store);
    let logged = c.log_lines_naming(&what, 1);
    assert!(logged.iter().any(|l| l.contains("failed")), "{logged:?}");
    let line = resume_across(c.addr.port(), c.addr.port(), &["-tls1_3"]);
    assert!(line.starts_with("Reused, TLSv1.3"), "{line}");
    let line = resume_across(a.addr.port(), c.addr.port(), &["-tls1_3"]);
    assert!(line.starts_with("New, TLSv1.3"), "{line}");
    drop(c);

    // A session saved now, while the store is down, resumes across the fleet once it is back
    // (empty): the instances seed it with the keys they hold.
    let dir = tempfile::tempdir().expect("tempdir");
    let sess = dir.path().join("sess.pem").display().to_string();
    let out = s_client(
        a.addr.port(),
        &["-tls1_3", "-sess_out", &sess],
        &get_close("/", "a.example"),
    );
    assert!(session_line(&out).starts_with("New,"), "{out}");
    m.restart();
    let back = a.log_lines_naming(&what, 1);
    assert_eq!(back.len(), 1, "{back:?}");
    assert!(back[0].contains("is back"), "{back:?}");
    b.log_lines_naming("is back", 1);
    let out = s_client(
        b.addr.port(),
        &["-tls1_3", "-sess_in", &sess],
        &get_close("/", "a.example"),
    );
    assert!(session_line(&out).starts_with("Reused, TLSv1.3"), "{out}");
    assert_shared(&a, &b);
    m
}

#[test]
fn a_shared_key_file_in_h2o_format_resumes_across_instances() {
    if !need("openssl") {
        return;
    }
    let certs = tempfile::tempdir().expect("tempdir");
    cert(certs.path(), "a", "a.example", false);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    // Two keys as h2o writes them: the newer encrypts, both decrypt.
    let key = |n: u8| format!("{n:02x}").repeat(96);
    let keys = format!(
        "- name: {}\n  cipher: aes-256-cbc\n  hash: sha256\n  key: {}\n  not_before: {}\n  not_after: {}\n\
         - name: {}\n  cipher: aes-256-cbc\n  hash: sha256\n  key: {}\n  not_before: {}\n  not_after: {}\n",
        "a1".repeat(16),
        key(0x11),
        now - 60,
        now + 3600,
        "b2".repeat(16),
        key(0x22),
        now - 600,
        now + 3600,
    );
    let file = certs.path().join("ticket-keys.yaml");
    std::fs::write(&file, keys).expect("write keys");
    let store = format!("  ticket-store: file\n  ticket-file: {}", file.display());
    let a = instance(certs.path(), &store);
    let b = instance(certs.path(), &store);
    assert_shared(&a, &b);

    // A key file that is not h2o's format is refused at start with the line at fault.
    std::fs::write(&file, "- name: 00\n").expect("write keys");
    let out = Command::new(BIN)
        .arg("-t")
        .arg("-c")
        .arg(a.dir.path().join("spate.yaml"))
        .output()
        .expect("spate -t");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("line 1: `name` must be 32 hex digits"),
        "{text}"
    );
}

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
    if tools() {
        shares_sessions_by_id(StoreProcess::memcached(), "memcached");
    }
}

#[test]
fn redis_shares_tls_sessions_by_id() {
    if need("openssl") && need(REDIS) {
        shares_sessions_by_id(StoreProcess::redis(), "redis");
    }
}

/// The first line of the ticket's hex dump in `openssl sess_id -text` of a saved session: its
/// first 16 bytes are the name of the key that made it.
fn ticket_key_name(sess: &Path) -> String {
    let out = Command::new("openssl")
        .args(["sess_id", "-noout", "-text", "-in"])
        .arg(sess)
        .output()
        .expect("openssl sess_id");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let dump = text
        .split("TLS session ticket:")
        .nth(1)
        .unwrap_or_else(|| panic!("no ticket in {text}"));
    let line = dump
        .lines()
        .find(|l| l.trim_start().starts_with("0000 - "))
        .unwrap_or_else(|| panic!("no dump in {text}"));
    line.trim_start()["0000 - ".len()..]
        .chars()
        .take(47)
        .filter(char::is_ascii_hexdigit)
        .collect()
}

/// The anchor: h2o (Debian's) and spate on one memcached share one key list, so both name the
/// same key in their tickets. (The tickets themselves do not cross: each carries its TLS
/// library's own session encoding.)
#[test]
fn h2o_and_spate_use_the_same_keys_from_memcached() {
    if !tools() || !need("h2o") {
        return;
    }
    let certs = tempfile::tempdir().expect("tempdir");
    cert(certs.path(), "a", "a.example", false);
    let m = StoreProcess::memcached();
    let [h2o_port] = free_ports::<1>();
    let d = certs.path().display();
    let h2o_conf = certs.path().join("h2o.yaml");
    std::fs::write(
        &h2o_conf,
        format!(
            "ssl-session-resumption:
  mode: ticket
  ticket-store: memcached
  memcached: {{host: 127.0.0.1, port: {}}}
listen:
  host: 127.0.0.1
  port: {h2o_port}
  ssl: {{certificate-file: {d}/a.crt, key-file: {d}/a.key}}
hosts:
  default:
    paths:
      /: {{file.dir: {d}}}
",
            m.port
        ),
    )
    .expect("write h2o.yaml");
    let mut h2o = Command::new("h2o")
        .arg("-c")
        .arg(&h2o_conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run h2o");
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", h2o_port)).is_err() {
        assert!(Instant::now() < end, "h2o did not listen on {h2o_port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let store = format!(
        "  ticket-store: memcached\n  memcached: {{host: 127.0.0.1, port: {}}}",
        m.port
    );
    let s = instance(certs.path(), &store);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut names = Vec::new();
    for port in [h2o_port, s.addr.port()] {
        let sess = dir.path().join(format!("{port}.pem"));
        let sess_arg = sess.display().to_string();
        s_client(port, &["-tls1_2", "-sess_out", &sess_arg], "");
        names.push(ticket_key_name(&sess));
    }
    let _ = h2o.kill();
    let _ = h2o.wait();
    assert_eq!(names[0].len(), 32, "{names:?}");
    assert_eq!(names[0], names[1]);
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
