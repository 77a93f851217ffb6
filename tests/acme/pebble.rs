//! Pebble, Let's Encrypt's ACME test server, with its challenge test server as the DNS that
//! sends every name to 127.0.0.1: Pebble validates HTTP-01 and TLS-ALPN-01 against spate's
//! own ports, as a public CA would. Installed by `scripts/test` (`go install`); a test skips
//! with a message when it is missing.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Pebble {
    children: Vec<Child>,
    /// The ACME directory URL.
    pub directory: String,
    /// The root of Pebble's own HTTPS (the `ca-file` spate is given).
    pub tls_root: PathBuf,
    /// The root that issued certificates chain to (what clients verify against).
    pub issuer_root: PathBuf,
    pub log: PathBuf,
}

fn find(name: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let candidates = [home.join("go/bin").join(name), PathBuf::from(name)];
    candidates.into_iter().find(|p| {
        Command::new(p)
            .arg("-h")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    })
}

/// How Pebble validates and issues in a test.
pub struct Options {
    /// spate's cleartext port, where Pebble fetches HTTP-01 tokens.
    pub http_port: u16,
    /// spate's TLS port, where Pebble makes TLS-ALPN-01 handshakes.
    pub tls_port: u16,
    /// The lifetime of issued certificates.
    pub validity: Duration,
}

impl Pebble {
    /// Pebble and its DNS, configured in `dir`; `None` (with a message) when not installed.
    pub fn start(dir: &Path, opts: Options) -> Option<Pebble> {
        let (Some(pebble), Some(challtestsrv)) = (find("pebble"), find("pebble-challtestsrv"))
        else {
            eprintln!(
                "SKIP: pebble is not installed (go install github.com/letsencrypt/pebble/v2/cmd/pebble@latest and cmd/pebble-challtestsrv; scripts/test does)"
            );
            return None;
        };
        let [acme_port, management_port, dns_port, challtest_management] =
            super::common::free_ports::<4>();
        // Pebble's HTTPS: a CA of the test's and a certificate for 127.0.0.1 and localhost.
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "pebble test root");
        let ca = ca_params.self_signed(&ca_key).expect("ca cert");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("params");
        let cert = params.signed_by(&key, &issuer).expect("cert");
        let tls_root = dir.join("pebble-tls-root.pem");
        std::fs::write(&tls_root, ca.pem()).expect("write");
        std::fs::write(dir.join("pebble.crt"), cert.pem()).expect("write");
        std::fs::write(dir.join("pebble.key"), key.serialize_pem()).expect("write");
        let config = format!(
            r#"{{"pebble": {{
  "listenAddress": "127.0.0.1:{acme_port}",
  "managementListenAddress": "127.0.0.1:{management_port}",
  "certificate": "{dir}/pebble.crt",
  "privateKey": "{dir}/pebble.key",
  "httpPort": {http},
  "tlsPort": {tls},
  "ocspResponderURL": "",
  "externalAccountBindingRequired": false,
  "retryAfter": {{"authz": 1, "order": 1}},
  "profiles": {{"default": {{"description": "short", "validityPeriod": {validity}}}}}
}}}}"#,
            dir = dir.display(),
            http = opts.http_port,
            tls = opts.tls_port,
            validity = opts.validity.as_secs(),
        );
        std::fs::write(dir.join("pebble.json"), config).expect("write");
        let log = dir.join("pebble.log");
        let out = std::fs::File::create(&log).expect("log");
        let dns = Command::new(challtestsrv)
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .args(["-management", &format!("127.0.0.1:{challtest_management}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv");
        let ca_server = Command::new(pebble)
            .arg("-config")
            .arg(dir.join("pebble.json"))
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("pebble");
        let mut p = Pebble {
            children: vec![dns, ca_server],
            directory: format!("https://127.0.0.1:{acme_port}/dir"),
            tls_root,
            issuer_root: dir.join("pebble-issuer-root.pem"),
            log,
        };
        let end = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", management_port)).is_err()
            || TcpStream::connect(("127.0.0.1", acme_port)).is_err()
        {
            assert!(
                Instant::now() < end,
                "pebble did not start: {}",
                p.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let root = Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(&p.tls_root)
            .arg(format!("https://127.0.0.1:{management_port}/roots/0"))
            .output()
            .expect("curl");
        assert!(root.status.success(), "pebble's root: {root:?}");
        std::fs::write(&p.issuer_root, &root.stdout).expect("write");
        p.children.shrink_to_fit();
        Some(p)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
