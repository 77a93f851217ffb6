//! TLS against a real spate: the seed's tls-web.yaml unchanged, ALPN, SNI, session
//! resumption, suites and versions, handshake-timeout, bad clients, and certificate errors
//! at `-t`. Clients: curl and openssl s_client (installed by scripts/test).

mod common;
mod tls_support;

use common::*;
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};
use tls_support::*;

const SEED_TLS_WEB: &str =
    include_str!("../src/config/testdata/seed-000-h2-benchmark-2015--tls-web.yaml");

/// A directory with `a.crt`/`a.key` (for a.example) and `b.crt`/`b.key` (for b.example),
/// and a document root `htdocs/`.
fn prepared() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    cert(dir.path(), "a", "a.example", false);
    cert(dir.path(), "b", "b.example", false);
    write_file(
        dir.path(),
        "htdocs/index.html",
        b"<h1>hello over tls</h1>\n",
    );
    dir
}

/// A one-host TLS server on 127.0.0.1 with `ssl_extra` lines in its `ssl` mapping and
/// `global` lines at the top.
fn tls_server(global: &str, ssl_extra: &str) -> Spate {
    Spate::start_in(
        &format!(
            "{global}
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: a.crt
    key-file: a.key
{ssl_extra}
hosts:
  a.example:
    paths:
      /:
        file.dir: htdocs
"
        ),
        prepared(),
    )
}

fn curl_https(s: &Spate, args: &[&str], path: &str) -> std::process::Output {
    let url = format!("https://127.0.0.1:{}{path}", s.addr.port());
    let mut all = vec!["-k"];
    all.extend_from_slice(args);
    all.push(&url);
    curl(&all)
}

#[test]
fn seed_tls_web_runs_unchanged() {
    if !need("curl") {
        return;
    }
    let dir = prepared();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    write_file(dir.path(), "htdocs/big.bin", &big);
    let root = dir.path().display().to_string();
    let yaml = SEED_TLS_WEB
        .replace("/path/to/server.crt", &format!("{root}/a.crt"))
        .replace("/path/to/server.key", &format!("{root}/a.key"))
        .replace("/path/to/htdocs", &format!("{root}/htdocs"))
        .replace("3000", "0");
    let s = Spate::start_in(&yaml, dir);

    let out = curl_https(&s, &["--http1.1", "-i"], "/");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("<h1>hello over tls</h1>\n"), "{text}");
    // No HSTS unless configured.
    assert!(!text
        .to_ascii_lowercase()
        .contains("strict-transport-security"));

    // A large file (read into TLS records, no sendfile) arrives byte for byte, twice on one
    // connection.
    let file = s.path().join("got.bin");
    let file2 = s.path().join("got2.bin");
    let url = format!("https://127.0.0.1:{}/big.bin", s.addr.port());
    let out = curl(&[
        "-k",
        "--http1.1",
        "-o",
        &file.display().to_string(),
        &url,
        "-o",
        &file2.display().to_string(),
        &url,
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(std::fs::read(&file).expect("read") == big);
    assert!(std::fs::read(&file2).expect("read") == big);

    // A range from the middle.
    let out = curl_https(&s, &["--http1.1", "-r", "1000000-1000009"], "/big.bin");
    assert_eq!(out.stdout, big[1_000_000..1_000_010]);
}

#[test]
fn a_plain_http1_client_without_alpn_is_served() {
    if !need("openssl") {
        return;
    }
    let s = tls_server("", "");
    let port = s.addr.port();
    let out = s_client(port, &["-quiet"], &get_close("/", "a.example"));
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}");
    assert!(out.contains("hello over tls"), "{out}");

    let out = s_client(port, &["-alpn", "http/1.1"], &get_close("/", "a.example"));
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
    assert!(out.contains("hello over tls"), "{out}");
}

#[test]
fn alpn_h2_is_offered_only_with_http2() {
    if !need("openssl") {
        return;
    }
    let s = tls_server("", "");
    let out = s_client(s.addr.port(), &["-alpn", "h2"], "");
    assert!(out.contains("ALPN protocol: h2"), "{out}");
    // `http2: OFF` never offers h2, but http/1.1 still works.
    let s = tls_server("", "    http2: OFF");
    let out = s_client(s.addr.port(), &["-alpn", "h2,http/1.1"], "");
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
}

#[test]
fn sni_chooses_the_hosts_certificate() {
    if !need("openssl") {
        return;
    }
    let s = Spate::start_in(
        "
hosts:
  a.example:
    listen: {host: 127.0.0.1, port: 0, ssl: {certificate-file: a.crt, key-file: a.key}}
    paths: {/: {respond: {body: \"host a\"}}}
  b.example:
    listen: {host: 127.0.0.1, port: 0, ssl: {certificate-file: b.crt, key-file: b.key}}
    paths: {/: {respond: {body: \"host b\"}}}
",
        prepared(),
    );
    // Both hosts' `listen` is 127.0.0.1:0, one listener: the first bound port.
    let port = s.addr.port();
    let subject = |sni: Option<&str>| {
        let mut args = vec!["-showcerts"];
        match sni {
            Some(n) => args.extend_from_slice(&["-servername", n]),
            None => args.push("-noservername"),
        }
        let out = s_client(port, &args, &get_close("/", sni.unwrap_or("x")));
        let line = out
            .lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or_else(|| panic!("no subject in {out}"))
            .to_string();
        (line, out)
    };
    let (b, out) = subject(Some("b.example"));
    assert!(b.contains("CN = b.example"), "{b}");
    assert!(out.contains("host b"), "{out}");
    let (a, _) = subject(Some("a.example"));
    assert!(a.contains("CN = a.example"), "{a}");
    // An unknown name and no SNI get the first host's certificate.
    assert!(subject(Some("c.example")).0.contains("CN = a.example"));
    assert!(subject(None).0.contains("CN = a.example"));
}

/// Connects twice, the second time offering the first session; returns both "New"/"Reused"
/// lines.
fn resume(port: u16, extra: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sess = dir.path().join("sess.pem").display().to_string();
    let line = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("New,") || l.starts_with("Reused,"))
            .unwrap_or_else(|| panic!("no session line in {out}"))
            .to_string()
    };
    let mut args = extra.to_vec();
    args.extend_from_slice(&["-sess_out", &sess]);
    let first = s_client(port, &args, &get_close("/", "a.example"));
    if !dir.path().join("sess.pem").exists() {
        // Nothing resumable was given (no ticket, no session id): the next one is new.
        return (line(&first), "New, nothing to resume".into());
    }
    let mut args = extra.to_vec();
    args.extend_from_slice(&["-sess_in", &sess]);
    let second = s_client(port, &args, &get_close("/", "a.example"));
    (line(&first), line(&second))
}

#[test]
fn sessions_resume_by_ticket_and_by_cache() {
    if !need("openssl") {
        return;
    }
    let s = tls_server("", "");
    let port = s.addr.port();
    let (first, second) = resume(port, &[]);
    assert!(first.starts_with("New, TLSv1.3"), "{first}");
    assert!(second.starts_with("Reused, TLSv1.3"), "{second}");
    // TLS 1.2 with a ticket, and without (the session cache).
    assert!(resume(port, &["-tls1_2"]).1.starts_with("Reused, TLSv1.2"));
    assert!(resume(port, &["-tls1_2", "-no_ticket"])
        .1
        .starts_with("Reused, TLSv1.2"));

    // Cache only: TLS 1.2 without tickets still resumes.
    let s = tls_server("ssl-session-resumption: {mode: cache}", "");
    let (_, second) = resume(s.addr.port(), &["-tls1_2", "-no_ticket"]);
    assert!(second.starts_with("Reused"), "{second}");

    let s = tls_server("ssl-session-resumption: {mode: off}", "");
    for extra in [&[][..], &["-tls1_2"], &["-tls1_2", "-no_ticket"]] {
        let (_, second) = resume(s.addr.port(), extra);
        assert!(second.starts_with("New,"), "{extra:?}: {second}");
    }
}

#[test]
fn versions_and_suites_follow_the_configuration() {
    if !need("openssl") {
        return;
    }
    let s = tls_server(
        "",
        "    max-version: TLSv1.2
    cipher-suite: ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256
    cipher-preference: server
    ecdh-curves: P-384:P-521",
    );
    let port = s.addr.port();
    let out = s_client(port, &[], &get_close("/", "a.example"));
    assert!(
        out.contains("New, TLSv1.2, Cipher is ECDHE-ECDSA-CHACHA20-POLY1305"),
        "{out}"
    );
    assert!(out.contains("Server Temp Key: ECDH, secp384r1"), "{out}");
    assert!(out.contains("hello over tls"), "{out}");
    let out = s_client(port, &["-tls1_3"], "");
    assert!(!out.contains("New, TLSv1.3"), "{out}");
    // TLS 1.1 is never offered.
    let out = s_client(port, &["-tls1_1"], "");
    assert!(!out.contains("New, TLSv1.1,"), "{out}");
}

#[test]
fn stalled_and_garbage_handshakes_are_dropped_and_the_server_keeps_serving() {
    if !need("openssl") {
        return;
    }
    let s = tls_server("handshake-timeout: 1", "");
    // Silent client: closed after the handshake timeout, which counts from the accept, after
    // this.
    let started = Instant::now();
    let mut silent = s.connect();
    let mut buf = [0u8; 64];
    let n = silent.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "expected the server to close");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // Cleartext HTTP on the TLS port, and a truncated ClientHello.
    for junk in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00][..],
    ] {
        let mut c = s.connect();
        c.write_all(junk).expect("write");
        let _ = c.shutdown(std::net::Shutdown::Write);
        let _ = read_to_close(&mut c);
    }
    let out = s_client(s.addr.port(), &["-quiet"], &get_close("/", "a.example"));
    assert!(out.contains("hello over tls"), "{out}");
}

#[test]
fn hsts_only_when_configured() {
    if !need("curl") {
        return;
    }
    let s = tls_server(
        "header.add: \"Strict-Transport-Security: max-age=31536000\"",
        "",
    );
    let out = curl_https(&s, &["--http1.1", "-i"], "/");
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        text.contains("strict-transport-security: max-age=31536000"),
        "{text}"
    );
}

/// `spate -t -c` on a configuration with the `ssl` mapping `ssl`; returns (success, stderr).
fn check(ssl: &str) -> (bool, String) {
    let dir = prepared();
    cert(dir.path(), "old", "old.example", true);
    let conf = dir.path().join("spate.yaml");
    std::fs::write(
        &conf,
        format!("listen:\n  port: 0\n  ssl:\n{ssl}\nhosts: {{default: {{paths: {{/: {{respond: {{}}}}}}}}}}\n"),
    )
    .expect("write");
    let out = Command::new(BIN)
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("run spate -t");
    let err = String::from_utf8_lossy(&out.stderr).replace(&dir.path().display().to_string(), "$D");
    (out.status.success(), err)
}

#[test]
fn certificate_problems_fail_the_configuration_check() {
    let (ok, err) = check("    certificate-file: a.crt\n    key-file: a.key");
    assert!(ok, "{err}");
    let (ok, err) = check("    certificate-file: old.crt\n    key-file: old.key");
    assert!(!ok);
    assert!(
        err.contains("$D/spate.yaml:4: $D/old.crt: the certificate expired"),
        "{err}"
    );
    let (ok, err) = check("    certificate-file: a.crt\n    key-file: b.key");
    assert!(!ok);
    assert!(
        err.contains("$D/spate.yaml:5: $D/b.key does not match the certificate"),
        "{err}"
    );
    let (ok, err) = check("    certificate-file: nope.crt\n    key-file: a.key");
    assert!(!ok);
    assert!(
        err.contains("$D/spate.yaml:4: $D/nope.crt: cannot read"),
        "{err}"
    );
    let (ok, err) =
        check("    certificate-file: a.crt\n    key-file: a.key\n    cipher-suite: RC4-MD5");
    assert!(!ok);
    assert!(err.contains("$D/spate.yaml:6: listen.ssl.cipher-suite: unsupported OpenSSL TLS 1.2 cipher suite(s) RC4-MD5; supported: "), "{err}");
}

#[test]
fn a_stalled_handshake_does_not_delay_shutdown() {
    let mut s = tls_server("handshake-timeout: 30\nshutdown-timeout: 30", "");
    let _silent = s.connect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let status = s.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Writes a CA (`{stem}-ca.crt`) and a client certificate it issued (`{stem}-client.crt`,
/// `.key`, for TLS client authentication) into `dir`.
fn client_ca_and_cert(dir: &std::path::Path, stem: &str) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{stem} test CA"));
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = rcgen::CertifiedIssuer::self_signed(ca, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut client = rcgen::CertificateParams::new(vec!["client.example".to_string()]).unwrap();
    client
        .distinguished_name
        .push(rcgen::DnType::CommonName, "client.example");
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = client.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join(format!("{stem}-ca.crt")), issuer.pem()).unwrap();
    std::fs::write(dir.join(format!("{stem}-client.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{stem}-client.key")), key.serialize_pem()).unwrap();
}

/// `client-ca-file`: a client must present a certificate issued by that CA; one without a
/// certificate, or with another CA's, fails the handshake, and the server goes on serving.
#[test]
fn client_ca_file_requires_a_client_certificate_from_that_ca() {
    let dir = prepared();
    client_ca_and_cert(dir.path(), "good");
    client_ca_and_cert(dir.path(), "other");
    let s = Spate::start_in(
        "listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: a.crt
    key-file: a.key
    client-ca-file: good-ca.crt
hosts:
  a.example:
    paths:
      /:
        file.dir: htdocs
",
        dir,
    );
    let path = |f: &str| s.path().join(f).display().to_string();
    let with = |stem: &str, version: &str| {
        let (cert, key) = (
            path(&format!("{stem}-client.crt")),
            path(&format!("{stem}-client.key")),
        );
        curl_https(
            &s,
            &[
                "-sS",
                "--cert",
                &cert,
                "--key",
                &key,
                version,
                "-w",
                "%{http_code}",
            ],
            "/index.html",
        )
    };
    for version in ["--http1.1", "--http2"] {
        let ok = with("good", version);
        assert_eq!(
            String::from_utf8_lossy(&ok.stdout),
            "<h1>hello over tls</h1>\n200",
            "{version}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
        let other = with("other", version);
        assert!(
            !other.status.success(),
            "another CA's certificate: {other:?}"
        );
        let none = curl_https(&s, &["-sS", version], "/index.html");
        assert!(!none.status.success(), "no certificate: {none:?}");
        assert!(none.stdout.is_empty());
    }
    // A missing or empty CA file is a configuration error with its line.
    let (ok, errors) = check(
        "    certificate-file: a.crt\n    key-file: a.key\n    client-ca-file: /nonexistent/ca.pem\n",
    );
    assert!(!ok);
    assert!(
        errors.contains(":6: listen.ssl.client-ca-file: /nonexistent/ca.pem: cannot read"),
        "{errors}"
    );
}

/// h2o's `%{ssl.*}x` and `%{http2.stream-id}x` log what each connection negotiated: the
/// version, the suite and its bits, whether the session was resumed, and the stream.
#[test]
fn access_log_names_the_tls_session() {
    if !need("curl") || !need("openssl") {
        return;
    }
    let mut s = tls_server(
        "access-log:\n  path: access.log\n  format: \"%H %{ssl.protocol-version}x %{ssl.session-reused}x %{ssl.cipher}x %{ssl.cipher-bits}x %{ssl.session-id}x %{http2.stream-id}x %{connect-time}x\"",
        "",
    );
    let port = s.addr.port();
    for args in [
        &["--http1.1"][..],
        &["--http2"],
        &["--http1.1", "--tlsv1.2", "--tls-max", "1.2"],
    ] {
        let out = curl_https(&s, args, "/index.html");
        assert!(out.status.success(), "{args:?}");
    }
    let (first, second) = resume(port, &[]);
    assert!(second.starts_with("Reused, TLSv1.3"), "{first} / {second}");
    assert!(s.stop().success());
    let log = std::fs::read_to_string(s.path().join("access.log")).expect("access log");
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 5, "{log}");
    let tls13 = |l: &[&str]| {
        let bits = match l[3] {
            "TLS_AES_128_GCM_SHA256" => "128",
            "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => "256",
            other => panic!("not a TLS 1.3 suite: {other}"),
        };
        assert_eq!(l[1], "TLSv1.3", "{l:?}");
        assert_eq!(l[4], bits, "{l:?}");
    };
    // Workers write their lines in turn, not in time order: each line is found by its kind.
    let h2: Vec<_> = lines.iter().filter(|l| l[0] == "HTTP/2").collect();
    assert_eq!(h2.len(), 1, "{log}");
    tls13(h2[0]);
    // curl's first stream is 1.
    assert_eq!(
        (h2[0][2], h2[0][5], h2[0][6], h2[0][7]),
        ("0", "-", "1", "-")
    );
    // TLS 1.2, with an OpenSSL suite name.
    let tls12: Vec<_> = lines.iter().filter(|l| l[1] == "TLSv1.2").collect();
    assert_eq!(tls12.len(), 1, "{log}");
    assert_eq!((tls12[0][0], tls12[0][2]), ("HTTP/1.1", "0"), "{log}");
    assert!(tls12[0][3].starts_with("ECDHE-"), "{log}");
    // curl over HTTP/1.1 and openssl s_client twice: a full handshake, then a resumed one.
    let h1: Vec<_> = lines
        .iter()
        .filter(|l| l[0] == "HTTP/1.1" && l[1] == "TLSv1.3")
        .collect();
    assert_eq!(h1.len(), 3, "{log}");
    for l in &h1 {
        tls13(l);
        assert_eq!((l[5], l[6], l[7]), ("-", "-", "-"), "{log}");
    }
    let resumed: Vec<_> = h1.iter().map(|l| l[2]).collect();
    assert_eq!(resumed.iter().filter(|r| **r == "1").count(), 1, "{log}");
    assert_eq!(resumed.iter().filter(|r| **r == "0").count(), 2, "{log}");
}
