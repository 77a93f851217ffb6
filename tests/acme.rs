//! ACME against Pebble: certificates issued by HTTP-01 and TLS-ALPN-01 on spate's own ports,
//! verified by curl against Pebble's root, renewed within the test (short-lived
//! certificates) while h2load and new handshakes keep going with no failure; and the faults
//! (CA down at start, a challenge that fails, a bad account file) each a clear log line.

mod common;
#[path = "acme/pebble.rs"]
mod pebble;

use common::Spate;
use pebble::{Options, Pebble};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const BODY: &str = "served over ACME";

/// A config for host `a.test` with `ssl: {}` on `tls_port` and, when `http_port` is given, a
/// cleartext listener there; `extra` goes into the acme block.
/// Pebble validating challenges on `http_port` and `tls_port`, issuing certificates valid for
/// `validity` seconds; `None` (the test skips, saying so) when Pebble is not installed.
fn pebble(dir: &Path, http_port: u16, tls_port: u16, validity: u64) -> Option<Pebble> {
    Pebble::start(
        dir,
        Options {
            http_port,
            tls_port,
            validity: Duration::from_secs(validity),
        },
    )
}

fn config(p: &Pebble, http_port: Option<u16>, tls_port: u16, extra: &str) -> String {
    let plain = http_port
        .map(|port| format!("listen: {{host: 127.0.0.1, port: {port}}}\n"))
        .unwrap_or_default();
    format!(
        "num-threads: 1
acme:
  email: admin@a.test
  accept-tos: YES
  directory: {dir}
  ca-file: {ca}
  storage: $DIR/acme
{extra}
{plain}hosts:
  a.test:
    listen: {{host: 127.0.0.1, port: {tls_port}, ssl: {{}}}}
    paths:
      /: {{respond: {{body: {BODY}}}}}
      /status: {{status: ON}}
      /metrics: {{metrics: ON}}
",
        dir = p.directory,
        ca = p.tls_root.display(),
    )
}

/// curl to `https://a.test:PORT/`, verifying against `root`: the body, or curl's error.
fn fetch_verified(root: &Path, port: u16) -> Result<String, String> {
    fetch_name(root, "a.test", port)
}

/// The serial number of the certificate served for `a.test`.
fn served_serial(port: u16) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername a.test </dev/null 2>/dev/null | openssl x509 -noout -serial"
        ))
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn http01_issues_serves_and_renews_under_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    let Some(p) = pebble(dir.path(), http_port, tls_port, 12) else {
        return;
    };
    let yaml = config(&p, Some(http_port), tls_port, "  challenges: http-01");
    let s = Spate::start_retrying(&yaml, dir, &[("RUST_LOG", "info,spate::acme=debug")]);
    let log = s.log_lines_naming("acme", 3);
    let issued: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("certificate issued"))
        .collect();
    assert_eq!(issued.len(), 1, "no certificate: {log:?}\n{}", p.log_text());
    assert!(issued[0].contains("a.test"), "{issued:?}");
    assert_eq!(fetch_verified(&p.issuer_root, tls_port), Ok(BODY.into()));
    let first = served_serial(tls_port);
    assert!(first.starts_with("serial="), "{first}");
    // The status pages show the certificate.
    let metrics = common::curl(&[&format!("http://127.0.0.1:{http_port}/metrics")]);
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    // (At least one: with ARI, Pebble's window is the whole lifetime, and spate renews at a
    // random time in it.)
    assert!(
        metrics.contains("spate_acme_orders_total{name=\"a.test\",result=\"issued\"} "),
        "{metrics}"
    );
    assert!(
        metrics.contains("spate_acme_orders_total{name=\"a.test\",result=\"failed\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spate_acme_certificate_expiry_seconds{name=\"a.test\"} 1"),
        "{metrics}"
    );
    let status = common::curl(&[&format!("http://127.0.0.1:{http_port}/status")]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("\"name\": \"a.test\"") && status.contains("\"last-error\": null"),
        "{status}"
    );
    let parsed = common::system_python(
        "import json,sys; d=json.load(sys.stdin); print(d['acme'][0]['issued'] >= 1)",
        status.as_bytes(),
    );
    assert_eq!(
        String::from_utf8_lossy(&parsed.stdout).trim(),
        "True",
        "{status}"
    );
    // The token path answers 404 for unknown tokens, on the cleartext port.
    let r = common::curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://127.0.0.1:{http_port}/.well-known/acme-challenge/nope"),
    ]);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "404");

    // Renewal at 2/3 of 12 s: h2load on kept connections and curl on new handshakes go on
    // across it with no failure.
    let h2load = Command::new("h2load")
        .args(["-D", "10", "-c", "2", "-m", "4"])
        .arg(format!("https://127.0.0.1:{tls_port}/"))
        .output();
    let renewed = s.log_lines_naming("acme", 1);
    // The renewal time came from Pebble's renewal information (ARI).
    assert!(
        renewed
            .iter()
            .chain(&log)
            .any(|l| l.contains("the CA's renewal window says Some(")),
        "{log:?}\n{renewed:?}"
    );
    assert!(
        renewed.iter().any(|l| l.contains("certificate issued")),
        "no renewal: {renewed:?}\n{}",
        p.log_text()
    );
    // The renewal order names the certificate it replaces (RFC 9773 §5).
    assert!(
        renewed
            .iter()
            .any(|l| l.contains("renewal order replaces the certificate in use")),
        "{renewed:?}"
    );
    for _ in 0..10 {
        assert_eq!(fetch_verified(&p.issuer_root, tls_port), Ok(BODY.into()));
    }
    assert_ne!(
        served_serial(tls_port),
        first,
        "the renewed certificate is not served"
    );
    let h2load = h2load.expect("h2load");
    let out = String::from_utf8_lossy(&h2load.stdout);
    assert!(out.contains(" 0 failed, 0 errored"), "{out}");
    assert!(!out.contains(" 0 succeeded"), "{out}");
}

#[test]
fn tls_alpn01_issues_on_the_tls_port_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    let Some(p) = pebble(dir.path(), http_port, tls_port, 3600) else {
        return;
    };
    // No cleartext listener: only TLS-ALPN-01 can succeed.
    let yaml = config(
        &p,
        None,
        tls_port,
        "  challenges: tls-alpn-01\n  key-type: rsa2048",
    );
    let s = Spate::start_retrying(&yaml, dir, &[]);
    let log = s.log_lines_naming("acme", 3);
    assert!(
        log.iter().any(|l| l.contains("answering tls-alpn-01")),
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l.contains("a.test: certificate issued")),
        "{log:?}\n{}",
        p.log_text()
    );
    assert_eq!(fetch_verified(&p.issuer_root, tls_port), Ok(BODY.into()));
    // key-type: rsa2048.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{tls_port} -servername a.test </dev/null 2>/dev/null | openssl x509 -noout -text"
        ))
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rsaEncryption"), "{text}");
    // A client that offers acme-tls/1 for a name with no challenge under way gets no
    // handshake, and ordinary clients go on being served.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{tls_port} -servername a.test -alpn acme-tls/1 </dev/null 2>&1"
        ))
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("BEGIN CERTIFICATE"), "{text}");
    assert_eq!(fetch_verified(&p.issuer_root, tls_port), Ok(BODY.into()));
}

#[test]
fn a_restart_serves_the_stored_certificate_without_ordering() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    let Some(p) = pebble(dir.path(), http_port, tls_port, 3600) else {
        return;
    };
    // h2o's documented form, with only the lines that point it at Pebble.
    let yaml = format!(
        "acme: {{email: admin@a.test, accept-tos: YES, directory: {dir}, ca-file: {ca}, storage: {storage}}}
listen: {{host: 127.0.0.1, port: {http_port}}}
hosts:
  a.test:
    listen:
      host: 127.0.0.1
      port: {tls_port}
      ssl: {{}}
    paths:
      /: {{respond: {{body: {BODY}}}}}
",
        dir = p.directory,
        ca = p.tls_root.display(),
        storage = storage.path().display(),
    );
    let mut s = Spate::start_retrying(&yaml, tempfile::tempdir().expect("tempdir"), &[]);
    let log = s.log_lines_naming("certificate issued", 1);
    assert_eq!(log.len(), 1, "{}", p.log_text());
    let serial = served_serial(tls_port);
    assert!(storage.path().join("account.json").exists());
    s.stop();
    drop(s);
    let s = Spate::start_retrying(&yaml, tempfile::tempdir().expect("tempdir"), &[]);
    // Served at once, from storage, by the same certificate; nothing is ordered.
    assert_eq!(fetch_verified(&p.issuer_root, tls_port), Ok(BODY.into()));
    assert_eq!(served_serial(tls_port), serial);
    std::thread::sleep(Duration::from_millis(500));
    let lines = s.stderr_lines();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("certificate issued") || l.contains("account")),
        "{lines:?}"
    );
}

#[test]
fn a_challenge_that_fails_is_logged_with_the_cas_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dead = common::DeadPort::new();
    let [http_port, tls_port] = common::free_ports::<2>();
    // Pebble fetches HTTP-01 from a port nobody answers on.
    let Some(p) = pebble(dir.path(), dead.port, tls_port, 3600) else {
        return;
    };
    let yaml = config(&p, Some(http_port), tls_port, "  challenges: http-01");
    let s = Spate::start_retrying(&yaml, dir, &[]);
    let log = s.log_lines_naming("trying again", 1);
    assert_eq!(log.len(), 1, "{}", p.log_text());
    assert!(
        log[0].contains("ERROR") && log[0].contains("acme: a.test:"),
        "{log:?}"
    );
    // The CA's problem document: its type and detail.
    assert!(log[0].contains("urn:ietf:params:acme:error:"), "{log:?}");
    assert!(log[0].contains("trying again in 2 s"), "{log:?}");
    let metrics = common::curl(&[&format!("http://127.0.0.1:{http_port}/metrics")]);
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.contains("spate_acme_orders_total{name=\"a.test\",result=\"failed\"} 1"),
        "{metrics}"
    );
    // The server goes on serving (cleartext here: no certificate yet).
    let r = common::curl(&[&format!("http://127.0.0.1:{http_port}/")]);
    assert_eq!(String::from_utf8_lossy(&r.stdout), BODY);
}

/// A host with its own certificate file beside the ACME host `a.test`, on one TLS port,
/// with the CA at `directory`.
fn two_hosts(directory: &str, ca: &Path, storage: &Path, dir: &Path) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["b.test".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(dir.join("b.crt"), cert.pem()).expect("write");
    std::fs::write(dir.join("b.key"), key.serialize_pem()).expect("write");
    format!(
        "acme: {{accept-tos: YES, directory: {directory}, ca-file: {ca}, storage: {storage}, challenges: tls-alpn-01}}
hosts:
  b.test:
    listen: {{host: 127.0.0.1, port: 0, ssl: {{certificate-file: b.crt, key-file: b.key}}}}
    paths:
      /: {{respond: {{body: b}}}}
  a.test:
    listen: {{host: 127.0.0.1, port: 0, ssl: {{}}}}
    paths:
      /: {{respond: {{body: a}}}}
",
        ca = ca.display(),
        storage = storage.display(),
    )
}

fn curl_b(s: &Spate) -> String {
    curl_b_at(s.addr.port())
}

#[test]
fn the_ca_down_at_start_is_retried_while_other_hosts_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dead = common::DeadPort::new();
    let ca = dir.path().join("ca.pem");
    let key = rcgen::KeyPair::generate().expect("key");
    let root = rcgen::CertificateParams::new(vec!["localhost".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(&ca, root.pem()).expect("write");
    let storage = dir.path().join("acme");
    let yaml = two_hosts(
        &format!("https://127.0.0.1:{}/dir", dead.port),
        &ca,
        &storage,
        dir.path(),
    );
    let s = Spate::start_in(&yaml, dir);
    let log = s.log_lines_naming("trying again", 2);
    assert!(log.len() >= 2, "{log:?}");
    assert!(
        log[0].contains("ERROR") && log[0].contains(&format!("127.0.0.1:{}", dead.port)),
        "{log:?}"
    );
    assert!(
        log[0].contains("trying again in 2 s") && log[1].contains("trying again in 4 s"),
        "{log:?}"
    );
    assert_eq!(curl_b(&s), "b");
}

#[test]
fn a_bad_account_file_is_named_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = dir.path().join("acme");
    std::fs::create_dir(&storage).expect("mkdir");
    std::fs::write(storage.join("account.json"), "not json").expect("write");
    let ca = dir.path().join("ca.pem");
    let key = rcgen::KeyPair::generate().expect("key");
    let root = rcgen::CertificateParams::new(vec!["localhost".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(&ca, root.pem()).expect("write");
    let yaml = two_hosts("https://127.0.0.1:1/dir", &ca, &storage, dir.path());
    let s = Spate::start_in(&yaml, dir);
    let log = s.log_lines_naming("account.json", 1);
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].contains("not an account file"), "{log:?}");
    assert_eq!(
        std::fs::read_to_string(storage.join("account.json"))
            .ok()
            .as_deref(),
        Some("not json")
    );
    assert_eq!(curl_b(&s), "b");
}

#[test]
fn two_processes_sharing_storage_order_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = tempfile::tempdir().expect("tempdir");
    let [http_a, tls_a, http_b, tls_b] = common::free_ports::<4>();
    // The CA reaches process A only; B's tokens reach it through the storage.
    let Some(p) = pebble(dir.path(), http_a, tls_a, 3600) else {
        return;
    };
    let yaml = |http: u16, tls: u16| {
        config(&p, Some(http), tls, "  challenges: http-01").replace(
            "storage: $DIR/acme",
            &format!("storage: {}", storage.path().display()),
        )
    };
    let a = Spate::start_retrying(
        &yaml(http_a, tls_a),
        tempfile::tempdir().expect("tempdir"),
        &[],
    );
    let b = Spate::start_retrying(
        &yaml(http_b, tls_b),
        tempfile::tempdir().expect("tempdir"),
        &[],
    );
    let issued = |log: &[String]| {
        log.iter()
            .filter(|l| l.contains("certificate issued"))
            .count()
    };
    let adopted = |log: &[String]| {
        log.iter()
            .filter(|l| l.contains("using the certificate in storage"))
            .count()
    };
    let (mut log_a, mut log_b) = (Vec::new(), Vec::new());
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while issued(&log_a) + issued(&log_b) + adopted(&log_a) + adopted(&log_b) < 2
        && std::time::Instant::now() < end
    {
        log_a.extend(a.stderr_lines().into_iter().filter(|l| l.contains("acme")));
        log_b.extend(b.stderr_lines().into_iter().filter(|l| l.contains("acme")));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        issued(&log_a) + issued(&log_b),
        1,
        "{log_a:?}\n{log_b:?}\n{}",
        p.log_text()
    );
    assert_eq!(adopted(&log_a) + adopted(&log_b), 1, "{log_a:?}\n{log_b:?}");
    assert_eq!(fetch_verified(&p.issuer_root, tls_a), Ok(BODY.into()));
    assert_eq!(fetch_verified(&p.issuer_root, tls_b), Ok(BODY.into()));
    assert_eq!(served_serial(tls_a), served_serial(tls_b));
    assert_eq!(
        p.log_text().matches("Issued certificate serial").count(),
        1,
        "{}",
        p.log_text()
    );
}

#[test]
fn a_certificate_that_cannot_be_stored_is_served_and_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    let Some(p) = pebble(dir.path(), http_port, tls_port, 3600) else {
        return;
    };
    // The key's file cannot be written (as on a full disk: the write fails).
    std::fs::create_dir(storage.path().join("a.test.key.tmp")).expect("mkdir");
    let yaml = config(&p, Some(http_port), tls_port, "  challenges: http-01").replace(
        "storage: $DIR/acme",
        &format!("storage: {}", storage.path().display()),
    );
    let s = Spate::start_retrying(&yaml, dir, &[]);
    let log = s.log_lines_naming("acme: a.test", 3);
    assert!(
        log.iter()
            .any(|l| l.contains("ERROR") && l.contains("in use but not stored: cannot write")),
        "{log:?}"
    );
    assert_eq!(fetch_verified(&p.issuer_root, tls_port), Ok(BODY.into()));
}

#[test]
fn a_reload_adds_an_acme_host_and_another_removes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    // Short-lived: removed, its renewal task would order again within seconds.
    let Some(p) = pebble(dir.path(), http_port, tls_port, 12) else {
        return;
    };
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["b.test".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(dir.path().join("b.crt"), cert.pem()).expect("write");
    std::fs::write(dir.path().join("b.key"), key.serialize_pem()).expect("write");
    let b_host = format!(
        "  b.test:
    listen: {{host: 127.0.0.1, port: {tls_port}, ssl: {{certificate-file: b.crt, key-file: b.key}}}}
    paths:
      /: {{respond: {{body: b}}}}
"
    );
    let full = config(&p, Some(http_port), tls_port, "  challenges: http-01");
    // First without a.test: nothing to order.
    let (head, _) = full.split_once("hosts:\n").expect("hosts");
    let before = format!("{head}hosts:\n{b_host}");
    let s = Spate::start_retrying(&before, dir, &[]);
    std::fs::write(
        s.path().join("spate.yaml"),
        format!("{full}{b_host}").replace("$DIR", &s.path().display().to_string()),
    )
    .expect("write");
    common::signal(&s.child, libc::SIGHUP);
    let log = s.log_lines_naming("certificate issued", 1);
    assert_eq!(log.len(), 1, "{}", p.log_text());
    assert_eq!(fetch_verified(&p.issuer_root, tls_port), Ok(BODY.into()));
    // Removed again: its task stops at its next check, before it would renew.
    std::fs::write(
        s.path().join("spate.yaml"),
        before.replace("$DIR", &s.path().display().to_string()),
    )
    .expect("write");
    common::signal(&s.child, libc::SIGHUP);
    let mut log = Vec::new();
    let end = std::time::Instant::now() + Duration::from_secs(30);
    let stop_line = |log: &[String]| {
        log.iter()
            .position(|l| l.contains("a.test: no longer configured; not renewed"))
    };
    while stop_line(&log).is_none() && std::time::Instant::now() < end {
        log.extend(s.stderr_lines());
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped = stop_line(&log);
    assert!(stopped.is_some(), "{log:?}");
    assert!(
        !log[stopped.unwrap_or(0)..]
            .iter()
            .any(|l| l.contains("certificate issued")),
        "{log:?}"
    );
}

#[test]
fn quic_serves_the_acme_certificate() {
    let h2load_h3 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/peers/bin/h2load");
    if !h2load_h3.exists() {
        eprintln!("SKIP: ../shared/peers/bin/h2load (with HTTP/3) is missing");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    let Some(p) = pebble(dir.path(), http_port, tls_port, 3600) else {
        return;
    };
    let yaml = config(&p, Some(http_port), tls_port, "  challenges: http-01").replace(
        &format!("    listen: {{host: 127.0.0.1, port: {tls_port}, ssl: {{}}}}\n"),
        &format!(
            "    listen: &tls {{host: 127.0.0.1, port: {tls_port}, ssl: {{}}}}\n    listen:\n      <<: *tls\n      type: quic\n"
        ),
    );
    assert!(yaml.contains("type: quic"), "{yaml}");
    let s = Spate::start_retrying(&yaml, dir, &[]);
    let log = s.log_lines_naming("certificate issued", 1);
    assert_eq!(log.len(), 1, "{}", p.log_text());
    let out = Command::new(&h2load_h3)
        .args(["--alpn-list=h3", "-n", "20", "-c", "2"])
        .arg(format!("https://127.0.0.1:{tls_port}/"))
        .output()
        .expect("h2load");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("20 succeeded, 0 failed"), "{text}");
}

#[test]
fn spate_t_names_the_lines() {
    common::assert_config_errors(
        "acme: {email: admin@a.test, accept-tos: YES, ca-file: missing.pem}
listen: 80
hosts:
  a.test:
    listen: {port: 443, ssl: {}}
    paths:
      /: {respond: {body: x}}
",
        &["conf.yaml:1: acme.ca-file: ", "missing.pem: cannot read"],
    );
    common::assert_config_errors(
        "acme: {email: admin@a.test}
listen: {port: 443, ssl: {}}
hosts:
  a.test:
    paths:
      /: {respond: {body: x}}
",
        &[
            "conf.yaml:1: acme: accept-tos: YES is required",
            "conf.yaml:2: listen.ssl with no certificate: ACME needs the host's name",
        ],
    );
}

/// A tiny ask service for `acme.on-demand`: approves every name but those starting with
/// `no-`; a name starting with `slow` waits for `release` before its answer. Records the
/// names asked.
struct AskService {
    port: u16,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    release: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl AskService {
    fn start() -> AskService {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let release = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, r) = (asked.clone(), release.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (a, r) = (a.clone(), r.clone());
                std::thread::spawn(move || {
                    let mut line = String::new();
                    let mut reader = std::io::BufReader::new(conn.try_clone().expect("clone"));
                    let _ = reader.read_line(&mut line);
                    let domain = line
                        .split_once("domain=")
                        .map(|(_, d)| d.split(' ').next().unwrap_or("").to_owned())
                        .unwrap_or_default();
                    a.lock().expect("lock").push(domain.clone());
                    if domain.starts_with("slow") {
                        while !r.load(std::sync::atomic::Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    let status = match domain.starts_with("no-") {
                        true => "403 Forbidden",
                        false => "200 OK",
                    };
                    let _ = write!(conn, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                });
            }
        });
        AskService {
            port,
            asked,
            release,
        }
    }

    fn asked(&self, name: &str) -> usize {
        let asked = self.asked.lock().expect("lock");
        asked.iter().filter(|n| *n == name).count()
    }
}

/// curl to `https://NAME:PORT/`, verifying against `root`.
fn fetch_name(root: &Path, name: &str, port: u16) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}/"))
        .output()
        .expect("curl");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[test]
fn on_demand_issues_at_the_first_handshake_within_its_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    // Short-lived: the on-demand certificates are renewed within the test.
    let Some(p) = pebble(dir.path(), http_port, tls_port, 12) else {
        return;
    };
    let ask = AskService::start();
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["b.test".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(dir.path().join("b.crt"), cert.pem()).expect("write");
    std::fs::write(dir.path().join("b.key"), key.serialize_pem()).expect("write");
    let yaml = format!(
        "num-threads: 1
handshake-timeout: 5
acme:
  email: admin@od.test
  accept-tos: YES
  directory: {dir}
  ca-file: {ca}
  storage: $DIR/acme
  challenges: http-01
  on-demand:
    ask: http://127.0.0.1:{ask}/check
    orders-per-minute: 4
    max-certificates: 4
    timeout: 50
listen: {{host: 127.0.0.1, port: {http_port}}}
hosts:
  b.test:
    listen: {{host: 127.0.0.1, port: {tls_port}, ssl: {{certificate-file: b.crt, key-file: b.key}}}}
    paths:
      /: {{respond: {{body: b}}}}
      /metrics: {{metrics: ON}}
  \"*.od.test\":
    listen: {{host: 127.0.0.1, port: {tls_port}, ssl: {{}}}}
    paths:
      /: {{respond: {{body: {BODY}}}}}
",
        dir = p.directory,
        ca = p.tls_root.display(),
        ask = ask.port,
    );
    let s = Spate::start_retrying(&yaml, dir, &[]);
    let root = p.issuer_root.clone();

    // A client that sends no ClientHello is still bounded by handshake-timeout (5 s), not
    // by on-demand's wait (50 s); watched while the rest goes on.
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", tls_port)).expect("connect");
    let silent = std::thread::spawn(move || {
        silent
            .set_read_timeout(Some(Duration::from_secs(40)))
            .expect("timeout");
        let mut buf = [0u8; 16];
        std::io::Read::read(&mut silent, &mut buf).map_err(|e| e.kind())
    });

    // An approved name: its first handshake waits for the order and gets the certificate.
    assert_eq!(
        fetch_name(&root, "ok1.od.test", tls_port),
        Ok(BODY.into()),
        "{}",
        p.log_text()
    );
    let sclient = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{tls_port} -servername ok1.od.test -CAfile {} -verify_return_error </dev/null 2>&1",
            root.display()
        ))
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&sclient.stdout);
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    assert!(s.path().join("acme/ok1.od.test.crt").exists());
    assert_eq!(ask.asked("ok1.od.test"), 1);

    // A refused name fails at once, and is not asked again for a while.
    for _ in 0..2 {
        let refused = fetch_name(&root, "no-1.od.test", tls_port);
        assert!(refused.is_err(), "{refused:?}");
    }
    assert_eq!(ask.asked("no-1.od.test"), 1);
    let log = s.log_lines_naming("no-1.od.test: no certificate", 2);
    assert!(
        log.iter().any(|l| l.contains("the ask service refused it")),
        "{log:?}"
    );

    // While one name waits for its order, other handshakes go on.
    let waiting = {
        let root = root.clone();
        std::thread::spawn(move || fetch_name(&root, "slow.od.test", tls_port))
    };
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while ask.asked("slow.od.test") == 0 {
        assert!(std::time::Instant::now() < end, "slow.od.test not asked");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fetch_name(&root, "ok1.od.test", tls_port), Ok(BODY.into()));
    assert_eq!(curl_b_at(tls_port), "b");
    ask.release.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(waiting.join().expect("join"), Ok(BODY.into()));

    // A burst of 50 random names: two certificates are held, so at most two more are
    // ordered (max-certificates 4); the others fail fast.
    let burst: Vec<_> = (0..50)
        .map(|i| {
            let root = root.clone();
            std::thread::spawn(move || fetch_name(&root, &format!("r{i}x.od.test"), tls_port))
        })
        .collect();
    let served = burst
        .into_iter()
        .map(|t| t.join().expect("join"))
        .filter(Result::is_ok)
        .count();
    let stored = std::fs::read_dir(s.path().join("acme"))
        .expect("storage")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".od.test.crt"))
        })
        .count();
    assert!(served <= 2, "{served} burst names served");
    assert_eq!(stored, 2 + served, "{}", p.log_text());
    let log = s.log_lines_naming("reached", 48);
    assert!(log.len() >= 48, "{log:?}");
    let metrics = common::curl(&[&format!("http://127.0.0.1:{http_port}/metrics")]);
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    let refused = |reason: &str| -> u64 {
        let prefix = format!("spate_acme_on_demand_refused_total{{reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
    };
    assert_eq!(refused("ask"), 2, "{metrics}");
    // (An order of the two that got a slot may fail: then counted as failed.)
    assert!(refused("bound") >= 48, "{metrics}");
    assert_eq!(
        refused("bound") + refused("failed"),
        50 - served as u64,
        "{metrics}"
    );

    // Kept like a configured host's: renewed before it expires, and still served.
    let renewed = s.log_lines_naming("ok1.od.test: certificate issued", 1);
    assert_eq!(renewed.len(), 1, "{}", p.log_text());
    assert_eq!(fetch_name(&root, "ok1.od.test", tls_port), Ok(BODY.into()));
    let read = silent.join().expect("join");
    assert!(
        matches!(read, Ok(0) | Err(std::io::ErrorKind::ConnectionReset)),
        "{read:?}"
    );
}

fn curl_b_at(port: u16) -> String {
    let out = common::curl(&[
        "-k",
        "--resolve",
        &format!("b.test:{port}:127.0.0.1"),
        &format!("https://b.test:{port}/"),
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// TLS-ALPN-01 for an on-demand name: the CA's validation handshake (ALPN `acme-tls/1`, the
/// name being ordered) is answered by the challenge certificate, not made to wait for the
/// order it validates.
#[test]
fn on_demand_with_tls_alpn01() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [http_port, tls_port] = common::free_ports::<2>();
    let Some(p) = pebble(dir.path(), http_port, tls_port, 3600) else {
        return;
    };
    let ask = AskService::start();
    let yaml = format!(
        "num-threads: 1
acme:
  accept-tos: YES
  directory: {dir}
  ca-file: {ca}
  storage: $DIR/acme
  challenges: tls-alpn-01
  on-demand: {{ask: 'http://127.0.0.1:{ask}/'}}
hosts:
  \"*.od.test\":
    listen: {{host: 127.0.0.1, port: {tls_port}, ssl: {{}}}}
    paths:
      /: {{respond: {{body: {BODY}}}}}
",
        dir = p.directory,
        ca = p.tls_root.display(),
        ask = ask.port,
    );
    let s = Spate::start_retrying(&yaml, dir, &[]);
    assert_eq!(
        fetch_name(&p.issuer_root, "alpn.od.test", tls_port),
        Ok(BODY.into()),
        "{}",
        p.log_text()
    );
    let log = s.log_lines_naming("alpn.od.test: answering tls-alpn-01", 1);
    assert_eq!(log.len(), 1, "{log:?}");
}
