//! `prepare`'s checks: every file the configuration names read, every error at its line.

use super::*;
use crate::config::load_str;
use crate::tls::testcert;

struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        testcert::write(dir.path(), "a", &["a.example"], false);
        testcert::write(dir.path(), "b", &["b.example"], false);
        testcert::write(dir.path(), "old", &["old.example"], true);
        Certs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `$D` in `text` becomes the certificate directory; the file lives there too. Loaded,
    /// then prepared, as `spate -t` does.
    fn load(&self, text: &str) -> Result<(Config, Prepared), Vec<String>> {
        let file = self.path().join("t.yaml");
        let text = text.replace("$D", &self.path().display().to_string());
        let shown = |e: Vec<ConfigError>| e.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let config = load_str(&text, &file.display().to_string()).map_err(shown)?;
        let prepared = prepare(&config).map_err(shown)?;
        Ok((config, prepared))
    }

    fn ok(&self, text: &str) -> (Config, Prepared) {
        self.load(text).unwrap_or_else(|e| panic!("{e:?}"))
    }

    /// Errors with the directory shown as `$D`.
    fn errors(&self, text: &str) -> Vec<String> {
        let dir = self.path().display().to_string();
        match self.load(text) {
            Ok(_) => panic!("expected errors"),
            Err(e) => e.iter().map(|e| e.replace(&dir, "$D")).collect(),
        }
    }
}

fn one_listener(text_ssl: &str) -> String {
    format!(
        "listen:\n  port: 0\n  ssl:\n{text_ssl}\nhosts: {{default: {{paths: {{/: {{respond: {{}}}}}}}}}}\n"
    )
}

const A: &str = "    certificate-file: $D/a.crt\n    key-file: $D/a.key";

#[test]
fn certificate_problems_name_the_file_and_line() {
    let c = Certs::new();
    let e = c.errors(&one_listener(
        "    certificate-file: $D/missing.crt\n    key-file: $D/a.key",
    ));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("$D/t.yaml:4: $D/missing.crt: cannot read:"),
        "{}",
        e[0]
    );

    let e = c.errors(&one_listener(
        "    certificate-file: $D/a.crt\n    key-file: $D/b.key",
    ));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("$D/t.yaml:5: $D/b.key does not match the certificate in $D/a.crt"),
        "{}",
        e[0]
    );

    let e = c.errors(&one_listener(
        "    certificate-file: $D/old.crt\n    key-file: $D/old.key",
    ));
    assert_eq!(
        e,
        vec!["$D/t.yaml:4: $D/old.crt: the certificate expired on Mon, 01 Jan 2001 00:00:00 GMT"]
    );

    // A key where the certificate should be, and no key at all.
    let e = c.errors(&one_listener(
        "    certificate-file: $D/a.key\n    key-file: $D/a.crt",
    ));
    assert_eq!(e, vec!["$D/t.yaml:4: $D/a.key: no certificate (PEM) found"]);
    let e = c.errors(&one_listener("    certificate-file: $D/a.crt"));
    assert_eq!(e, vec!["$D/t.yaml:4: listen.ssl: key-file is required"]);
}

#[test]
fn a_tls_listener_gets_its_rustls_configuration() {
    let c = Certs::new();
    let (_, p) = c.ok(&one_listener(A));
    assert!(p.tls[0].is_some() && p.quic_tls[0].is_none());
    let (_, p) = c.ok("listen: 0\nhosts: {default: {paths: {/: {respond: {}}}}}\n");
    assert!(p.tls[0].is_none());
}

#[test]
fn tls13_only_with_tls12_suites_only_is_an_error() {
    let c = Certs::new();
    // TLS 1.3 only with TLS 1.2 suites only: rustls has nothing to offer.
    let e = c.errors(&one_listener(&format!(
        "{A}\n    min-version: TLSv1.3\n    cipher-suite-tls1.3: []"
    )));
    assert_eq!(e.len(), 1, "{e:?}");
}

#[test]
fn ocsp_response_is_stapled_or_an_error_at_its_line() {
    let c = Certs::new();
    std::fs::write(c.path().join("ocsp.der"), [0x30, 0x03, 0x0a, 0x01, 0x00])
        .unwrap_or_else(|e| panic!("{e}"));
    let (config, _) = c.ok(&one_listener(
        "    identity:\n      - {certificate-file: a.crt, key-file: a.key}\n      - {certificate-file: b.crt, key-file: b.key}\n    ocsp-response-file: ocsp.der",
    ));
    let t = config.listeners[0].tls.as_ref().expect("tls");
    let keys = Keys::load(t).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(keys.identities[0].len(), 2);
    assert!(keys.identities[0]
        .iter()
        .all(|k| k.ocsp.as_deref() == Some(&[0x30, 0x03, 0x0a, 0x01, 0x00][..])));
    let e = c.errors(&one_listener(&format!(
        "{A}\n    ocsp-response-file: nope.der"
    )));
    assert!(
        e[0].starts_with("$D/t.yaml:6: $D/nope.der: cannot read"),
        "{e:?}"
    );
}

#[test]
fn a_bad_client_ca_file_is_an_error_at_its_line() {
    let c = Certs::new();
    let e = c.errors(&one_listener(&format!("{A}\n    client-ca-file: $D/a.key")));
    assert_eq!(
        e,
        vec!["$D/t.yaml:6: listen.ssl.client-ca-file: $D/a.key: no certificate (PEM) found"]
    );
    let (_, p) = c.ok(&one_listener(&format!("{A}\n    client-ca-file: $D/b.crt")));
    assert!(p.tls[0].is_some());
}

#[test]
fn a_missing_dh_file_is_an_error_at_its_line() {
    let c = Certs::new();
    let e = c.errors(&one_listener(&format!("{A}\n    dh-file: $D/dh.pem")));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("$D/t.yaml:6: listen.ssl.dh-file: $D/dh.pem: "),
        "{e:?}"
    );
    let (_, p) = c.ok(&one_listener(&format!("{A}\n    dh-file: $D/a.crt")));
    assert!(p.tls[0].is_some());
}

#[test]
fn an_unknown_user_is_an_error_at_its_line() {
    let c = Certs::new();
    let e = c.errors("user: no-such-user-of-spate\nlisten: 80\nhosts: {}\n");
    assert_eq!(
        e,
        vec!["$D/t.yaml:1: user: no such user no-such-user-of-spate"]
    );
    let (_, p) = c.ok("user: root\nlisten: 80\nhosts: {}\n");
    assert_eq!(
        p.user.map(|a| (a.name, a.uid)),
        Some(("root".to_string(), 0))
    );
}

#[test]
fn a_bad_access_log_format_is_an_error_at_its_line_once() {
    let c = Certs::new();
    let e = c.errors(
        "listen: 80\naccess-log:\n  path: /dev/null\n  format: \"%h %Q %Z\"\nhosts:\n  a: {paths: {/: {respond: {}}, /b: {respond: {}}}}\n",
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("$D/t.yaml:4: access-log.format: ") && e[0].contains("%Q"),
        "{e:?}"
    );
}

#[test]
fn https_backends_verify_their_own_names_and_cafiles_are_read() {
    let c = Certs::new();
    let (config, p) = c.ok("\
listen: 8080
proxy.ssl.cafile: $D/a.crt
hosts:
  default:
    paths:
      /mixed:
        proxy.reverse.url: [http://10.0.0.1/, https://b.internal/, https://c.internal:8443/]
");
    let crate::config::HandlerConf::Proxy(proxy) = &config.hosts[0].paths[0].handler else {
        panic!("not a proxy");
    };
    let names = proxy
        .backends
        .iter()
        .map(|b| {
            crate::upstream::tls_client(b, &p.upstream_tls)
                .map(|t| format!("{:?}", t.0.server_name))
        })
        .collect::<Vec<_>>();
    assert_eq!(names[0], None);
    assert!(names[1].as_ref().is_some_and(|n| n.contains("b.internal")));
    assert!(names[2].as_ref().is_some_and(|n| n.contains("c.internal")));

    // A cafile is read even where no backend uses it.
    let e = c.errors(
        "\
listen: 8080
hosts:
  default:
    paths:
      /a:
        proxy.ssl.cafile: /nonexistent/ca.crt
        proxy.reverse.url: http://x/
",
    );
    assert_eq!(
        e,
        vec!["$D/t.yaml:6: proxy.ssl.cafile: /nonexistent/ca.crt: cannot read: No such file or directory (os error 2)"]
    );
}

/// config keeps its own copy of the HTTP/2 engine's default (it imports nothing of it).
#[test]
fn the_default_max_write_size_is_the_engines() {
    assert_eq!(
        crate::config::Http2::DEFAULT_MAX_WRITE_SIZE,
        crate::proto::h2::DEFAULT_MAX_WRITE
    );
}
