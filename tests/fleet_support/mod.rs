//! The stores a fleet of spates shares, from Debian's packages, each started by the test on
//! an ephemeral port of 127.0.0.1 and killed when dropped.
#![allow(dead_code)]

use super::common::{free_ports, write_file, Spate};
use super::tls_support::{get_close, s_client};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const MEMCACHED: &str = "/usr/bin/memcached";
pub const REDIS: &str = "/usr/bin/redis-server";

/// A store process and its port.
pub struct StoreProcess {
    child: Child,
    pub port: u16,
    args: Vec<String>,
    program: &'static str,
}

impl StoreProcess {
    /// memcached, text protocol, 16 MB.
    pub fn memcached() -> StoreProcess {
        let [port] = free_ports::<1>();
        let args = ["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"]
            .into_iter()
            .chain(["-u", "root", "-m", "16", "-t", "1"])
            .map(String::from)
            .collect();
        StoreProcess::run(MEMCACHED, args, port)
    }

    /// redis-server without persistence.
    pub fn redis() -> StoreProcess {
        let [port] = free_ports::<1>();
        let args = [
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        StoreProcess::run(REDIS, args, port)
    }

    fn run(program: &'static str, args: Vec<String>, port: u16) -> StoreProcess {
        let child = Command::new(program)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        let end = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "{program} did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        StoreProcess {
            child,
            port,
            args,
            program,
        }
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again, empty, on the same port.
    pub fn restart(&mut self) {
        self.stop();
        *self = StoreProcess::run(self.program, self.args.clone(), self.port);
    }
}

impl Drop for StoreProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `redis-cli -p PORT ARGS...`'s output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A directory with the fleet's certificate `a.crt`/`a.key` (copied from `from`, so every
/// instance serves the same one) and a document root.
pub fn instance_dir(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["a.crt", "a.key"] {
        std::fs::copy(from.join(f), dir.path().join(f)).expect("copy certificate");
    }
    write_file(dir.path(), "htdocs/index.html", b"fleet\n");
    dir
}

pub fn instance_in_mode(certs: &Path, mode: &str, resumption: &str) -> Spate {
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
pub fn session_line(out: &str) -> String {
    out.lines()
        .find(|l| l.starts_with("New,") || l.starts_with("Reused,"))
        .unwrap_or_else(|| panic!("no session line in {out}"))
        .to_string()
}

/// A full handshake on `first` saving the session, then one on `second` offering it;
/// returns the second's session line.
pub fn resume_across(first: u16, second: u16, extra: &[&str]) -> String {
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

/// The first line of the ticket's hex dump in `openssl sess_id -text` of a saved session: its
/// first 16 bytes are the name of the key that made it.
pub fn ticket_key_name(sess: &Path) -> String {
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
