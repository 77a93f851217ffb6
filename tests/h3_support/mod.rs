//! Helpers for the HTTP/3 tests: a server with TLS and QUIC listens on one port number (spate,
//! or h2o with `SPATE_TESTS_H2O`), the aioquic and quic-go clients and what they printed,
//! file hashes, and the SPKI hash Chromium needs to accept the test certificate over QUIC.
#![allow(dead_code)]

use super::common::Spate;
use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// The hosts of a server of the files under its directory's `docs/`.
pub const DOCS_SITE: &str =
    "hosts:\n  default:\n    paths:\n      /:\n        file.dir: $DIR/docs\n";

/// A server listening on TCP (TLS) and UDP (QUIC) at the same port.
pub struct H3Server {
    pub s: Spate,
    pub port: u16,
    pub is_h2o: bool,
}

impl H3Server {
    /// `top` goes at the top level of the YAML, `rest` after the listens (the hosts).
    pub fn start(dir: tempfile::TempDir, top: &str, rest: &str) -> H3Server {
        H3Server::start_with(dir, "", top, rest)
    }

    /// As `start`, with `quic_extra` inside the QUIC listen (indented two spaces).
    pub fn start_with(dir: tempfile::TempDir, quic_extra: &str, top: &str, rest: &str) -> H3Server {
        super::tls_support::cert(dir.path(), "h3", "localhost", false);
        let is_h2o = std::env::var_os("SPATE_TESTS_H2O").is_some();
        let yaml = |port: u16| {
            format!(
                "{top}listen: &tls\n  host: 127.0.0.1\n  port: {port}\n  ssl:\n    certificate-file: $DIR/h3.crt\n    key-file: $DIR/h3.key\n    ocsp-update-interval: 0\nlisten:\n  <<: *tls\n  type: quic\n{quic_extra}{rest}"
            )
        };
        let s = if is_h2o {
            // Spate::start picks h2o's port itself, in place of `port: 0`.
            Spate::start_in(&yaml(0), dir)
        } else {
            // A port free for both now; another program may take it before spate binds it,
            // and then spate tries again with another.
            Spate::start_on_ports(dir, || [free_tcp_and_udp_port()], |[p]| yaml(p), &[]).0
        };
        let port = s.addr.port();
        H3Server { s, port, is_h2o }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.s.path()
    }

    /// The server's main process id.
    pub fn pid(&self) -> u32 {
        self.s.child.id()
    }
}

/// A port free on both TCP and UDP at 127.0.0.1.
fn free_tcp_and_udp_port() -> u16 {
    for _ in 0..100 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind tcp");
        let port = tcp.local_addr().expect("addr").port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no port free on both TCP and UDP");
}

/// The two QUIC clients.
pub struct Clients {
    python: PathBuf,
    go: PathBuf,
}

impl Clients {
    /// Both clients, or None (and a notice) when scripts/test has not installed them; under
    /// CI (where scripts/test has run) their absence fails the test.
    pub fn find() -> Option<Clients> {
        let (python, go) = (venv_python(), go_client());
        if let (Some(python), Some(go)) = (python.clone(), go.clone()) {
            return Some(Clients { python, go });
        }
        let missing = match python {
            None => "no aioquic venv at target/aioquic-venv (scripts/test makes it)",
            Some(_) => "the quic-go client did not build (scripts/test fetches its modules)",
        };
        assert!(std::env::var_os("CI").is_none(), "{missing}");
        eprintln!("SKIP: {missing}");
        None
    }

    /// Runs tests/h3/h3client.py with `args`.
    pub fn aioquic(&self, args: &[&str]) -> Run {
        let script = format!("{MANIFEST}/tests/h3/h3client.py");
        run(Command::new(&self.python).arg(script).args(args))
    }

    /// Runs a script of tests/h3 (the attacks) with the venv's Python.
    pub fn python_script(&self, name: &str, args: &[&str]) -> Run {
        let script = format!("{MANIFEST}/tests/h3/{name}");
        run(Command::new(&self.python).arg(script).args(args))
    }

    /// Runs the quic-go client with `args`.
    pub fn quic_go(&self, args: &[&str]) -> Run {
        run(Command::new(&self.go).args(args))
    }

    pub fn python(&self) -> &Path {
        &self.python
    }
}

fn venv_python() -> Option<PathBuf> {
    let python = PathBuf::from(format!("{MANIFEST}/target/aioquic-venv/bin/python"));
    let ok = Command::new(&python)
        .args(["-c", "import aioquic"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(python)
}

/// Builds tests/h3/goclient once per test process (Go's cache makes it quick after the first).
fn go_client() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = PathBuf::from(format!("{MANIFEST}/target/h3client"));
            let path = format!(
                "/usr/local/go/bin:{}",
                std::env::var("PATH").unwrap_or_default()
            );
            let built = Command::new("go")
                .args(["build", "-buildvcs=false", "-o"])
                .arg(&out)
                .arg(".")
                .current_dir(format!("{MANIFEST}/tests/h3/goclient"))
                .env("PATH", path)
                .output();
            match built {
                Ok(o) if o.status.success() => Some(out),
                Ok(o) => {
                    eprintln!("go build: {}", String::from_utf8_lossy(&o.stderr));
                    None
                }
                Err(e) => {
                    eprintln!("go build: {e}");
                    None
                }
            }
        })
        .clone()
}

/// What a client printed: `response` lines, a `summary` line, tab-separated `key=value`.
pub struct Run {
    pub exit: i32,
    pub stdout: String,
    pub stderr: String,
    lines: Vec<(String, HashMap<String, String>)>,
}

/// One printed line's fields.
pub struct Fields<'a>(&'a HashMap<String, String>);

impl Fields<'_> {
    pub fn get(&self, key: &str) -> &str {
        self.0.get(key).map_or("", String::as_str)
    }
}

impl Run {
    pub fn responses(&self) -> Vec<Fields<'_>> {
        self.of_kind("response")
    }

    pub fn of_kind(&self, kind: &str) -> Vec<Fields<'_>> {
        self.lines
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, f)| Fields(f))
            .collect()
    }

    /// A field of the first line of `kind`.
    pub fn field(&self, kind: &str, key: &str) -> String {
        self.of_kind(kind)
            .first()
            .map_or(String::new(), |f| f.get(key).to_string())
    }

    pub fn summary(&self, key: &str) -> String {
        self.field("summary", key)
    }

    /// Every response is a 200 whose body has this hash.
    pub fn expect_all(&self, sha256: &str) {
        assert!(self.exit == 0 && !self.responses().is_empty(), "{self}");
        for r in self.responses() {
            assert_eq!(r.get("error"), "", "{self}");
            assert_eq!(r.get("status"), "200", "{self}");
            assert_eq!(r.get("sha256"), sha256, "{self}");
        }
    }

    /// Every response for each URL is a 200 whose body has that URL's hash.
    pub fn expect_bodies(&self, want: &[(&str, &str)]) {
        assert!(self.exit == 0 && !self.responses().is_empty(), "{self}");
        for r in self.responses() {
            let (_, sha) = want
                .iter()
                .find(|(u, _)| *u == r.get("url"))
                .unwrap_or_else(|| panic!("unexpected URL {}: {self}", r.get("url")));
            assert_eq!(r.get("error"), "", "{self}");
            assert_eq!(r.get("status"), "200", "{self}");
            assert_eq!(r.get("sha256"), *sha, "{}: {self}", r.get("url"));
        }
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<&str> = self.stdout.lines().collect();
        // 100 response lines say little more than 5.
        let shown = if lines.len() > 12 {
            format!(
                "{}\n...\n{}",
                lines[..5].join("\n"),
                lines[lines.len() - 5..].join("\n")
            )
        } else {
            lines.join("\n")
        };
        write!(
            f,
            "client exit {}; output:\n{shown}\nstderr:\n{}",
            self.exit, self.stderr
        )
    }
}

/// Runs a client with a time limit and parses its output.
fn run(cmd: &mut Command) -> Run {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start client");
    let out = super::tls_support::wait_output(child, Duration::from_secs(150));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines = stdout
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('\t');
            let kind = parts.next()?.to_string();
            let fields = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Some((kind, fields))
        })
        .collect();
    Run {
        exit: out.status.code().unwrap_or(-1),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        lines,
    }
}

/// The test bodies: byte i is i*7 mod 251 (as the clients' POST bodies).
pub fn pattern_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251 * 7 % 251) as u8).collect()
}

/// Writes `n` pattern bytes to `path` without holding them all.
pub fn write_pattern_file(path: &Path, n: usize) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    let block = pattern_bytes(251 * 4096);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len());
        f.write_all(&block[..k]).expect("write");
        left -= k;
    }
    f.flush().expect("flush");
}

/// SHA-256 of a file, in hex (coreutils' sha256sum).
pub fn sha256_file(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("run sha256sum");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Base64 of the SHA-256 of a certificate's SubjectPublicKeyInfo: what Chromium's
/// `--ignore-certificate-errors-spki-list` takes.
pub fn spki_sha256(cert: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(
            "openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | openssl base64 -A",
        )
        .arg("sh")
        .arg(cert)
        .output()
        .expect("run openssl");
    let spki = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!spki.is_empty(), "no SPKI hash: {out:?}");
    spki
}
