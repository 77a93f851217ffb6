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

/// One instance with tickets only (no session cache, so resumption across instances can only
/// come from shared ticket keys).
fn instance(certs: &Path, resumption: &str) -> Spate {
    instance_in_mode(certs, "ticket", resumption)
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
