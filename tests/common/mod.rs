//! Test harness: starts the real `spate` binary from inline YAML on an ephemeral port and
//! talks to it over real sockets.
#![allow(dead_code)]

pub mod backend;
pub mod clients;
pub mod early_backend;
pub mod h1read;
pub mod h2raw;
pub mod haproxy;
pub mod load;
pub mod nginx;
pub mod parking;
pub mod pattern;
pub mod php_fpm;
pub mod prometheus;
pub mod repeat;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_spate");

/// A running spate; stopped with SIGTERM (then SIGKILL) when dropped.
pub struct Spate {
    pub child: Child,
    pub addr: SocketAddr,
    /// Every listening address, in the configuration's order (`addr` is the first).
    pub listening: Vec<SocketAddr>,
    pub dir: tempfile::TempDir,
    stderr: mpsc::Receiver<String>,
}

impl Spate {
    /// Starts spate with `yaml`, after replacing `$DIR` with a fresh temporary directory
    /// (which is also the config file's directory). Use `listen: 0` (or `127.0.0.1:0`).
    pub fn start(yaml: &str) -> Spate {
        let dir = tempfile::tempdir().expect("tempdir");
        Spate::start_in(yaml, dir)
    }

    /// As `start`, with a directory prepared by the caller.
    pub fn start_in(yaml: &str, dir: tempfile::TempDir) -> Spate {
        Spate::start_in_env(yaml, dir, &[])
    }

    /// As `start_in`, with extra environment variables for the server.
    pub fn start_in_env(yaml: &str, dir: tempfile::TempDir, env: &[(&str, &str)]) -> Spate {
        let yaml = yaml.replace("$DIR", &dir.path().display().to_string());
        if let Ok(h2o) = std::env::var("SPATE_TESTS_H2O") {
            return Spate::start_h2o(&h2o, &yaml, dir);
        }
        Spate::try_start(&yaml, dir, env).unwrap_or_else(|(e, _)| panic!("{e}"))
    }

    /// Starts spate on `N` ports chosen before it starts, for a configuration that must name
    /// them (in host keys, say): `yaml` writes it for the ports. Another program may take a
    /// port between the choice and spate's bind; then it tries again with other ports.
    pub fn start_on_free_ports<const N: usize>(
        dir: tempfile::TempDir,
        yaml: impl Fn([u16; N]) -> String,
    ) -> (Spate, [u16; N]) {
        Spate::start_on_ports(dir, free_ports::<N>, yaml, &[])
    }

    /// As `start_on_free_ports`, with the ports chosen by `pick` (ports free for both TCP and
    /// UDP, say) and extra environment variables for the server.
    pub fn start_on_ports<const N: usize>(
        dir: tempfile::TempDir,
        pick: impl Fn() -> [u16; N],
        yaml: impl Fn([u16; N]) -> String,
        env: &[(&str, &str)],
    ) -> (Spate, [u16; N]) {
        let mut dir = dir;
        for _ in 0..5 {
            let ports = pick();
            let text = yaml(ports).replace("$DIR", &dir.path().display().to_string());
            match Spate::try_start(&text, dir, env) {
                Ok(s) => return (s, ports),
                Err((e, d)) if e.contains("already in use") => dir = d,
                Err((e, _)) => panic!("{e}"),
            }
        }
        panic!("spate did not start: five sets of free ports were taken before it bound them");
    }

    /// As `start_in_env`, for a configuration naming a port chosen earlier (the port of a
    /// server that stopped, say): while another program holds it, tries again for up to 10 s.
    pub fn start_retrying(yaml: &str, dir: tempfile::TempDir, env: &[(&str, &str)]) -> Spate {
        if std::env::var_os("SPATE_TESTS_H2O").is_some() {
            return Spate::start_in_env(yaml, dir, env);
        }
        let end = std::time::Instant::now() + Duration::from_secs(10);
        let mut dir = dir;
        loop {
            let text = yaml.replace("$DIR", &dir.path().display().to_string());
            match Spate::try_start(&text, dir, env) {
                Ok(s) => return s,
                Err((e, d)) if e.contains("already in use") && std::time::Instant::now() < end => {
                    dir = d;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err((e, _)) => panic!("{e}"),
            }
        }
    }

    fn try_start(
        yaml: &str,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Result<Spate, (String, tempfile::TempDir)> {
        let conf = dir.path().join("spate.yaml");
        std::fs::write(&conf, yaml).expect("write config");
        let child = Command::new(BIN)
            .arg("-c")
            .arg(&conf)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn spate");
        Spate::try_wait_ready(child, dir)
    }

    /// The same test against h2o (`SPATE_TESTS_H2O=/path/to/bin/h2o`), to check that a test
    /// asks for h2o's behaviour where spate follows h2o: a free port replaces port 0, and
    /// `proxy.keepalive` (gone from current h2o) is dropped. Logs and stdout are not spate's.
    fn start_h2o(h2o: &str, yaml: &str, dir: tempfile::TempDir) -> Spate {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let yaml = yaml
            .replace("port: 0", &format!("port: {port}"))
            .replace("listen: 0", &format!("listen: {port}"))
            .replace("proxy.keepalive: ON", "");
        let conf = dir.path().join("h2o.yaml");
        // As root, h2o would switch to `nobody`, who cannot read a private temporary directory.
        // SAFETY: geteuid(2) has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user: root\n"
        } else {
            ""
        };
        std::fs::write(&conf, format!("{user}{yaml}")).expect("write config");
        let bin = Path::new(h2o);
        let root = bin.parent().and_then(Path::parent).unwrap_or(bin);
        let mut child = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .env("H2O_ROOT", root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn h2o");
        let stderr = child.stderr.take().expect("stderr");
        let (err_tx, err_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if err_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(std::time::Instant::now() < end, "h2o did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Spate {
            child,
            addr,
            listening: vec![addr],
            dir,
            stderr: err_rx,
        }
    }

    /// Starts `spate serve DIR` on an ephemeral port.
    pub fn serve(dir: tempfile::TempDir) -> Spate {
        let child = Command::new(BIN)
            .arg("serve")
            .arg(dir.path())
            .args(["--listen", "127.0.0.1:0", "--threads", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn spate");
        Spate::wait_ready(child, dir)
    }

    /// Wraps a spate started by the caller (with piped stdout and stderr).
    pub fn from_child(child: Child) -> Spate {
        Spate::wait_ready(child, tempfile::tempdir().expect("tempdir"))
    }

    fn wait_ready(child: Child, dir: tempfile::TempDir) -> Spate {
        Spate::try_wait_ready(child, dir).unwrap_or_else(|(e, _)| panic!("{e}"))
    }

    fn try_wait_ready(
        mut child: Child,
        dir: tempfile::TempDir,
    ) -> Result<Spate, (String, tempfile::TempDir)> {
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (err_tx, err_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if err_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // spate writes its `spate listening on http://ADDR/` (or `https://`) lines in one
            // write, so they are all in the buffer once the first is read.
            let mut reader = BufReader::new(stdout);
            let mut addrs: Vec<SocketAddr> = Vec::new();
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                // A `unix:PATH` listener has no address to note, but its line may be the last.
                if let Some(rest) = line.trim_end().strip_prefix("spate listening on ") {
                    if let Some((_, addr)) = rest.split_once("://") {
                        addrs.push(addr.trim_end_matches('/').parse().expect("address"));
                    }
                    if reader.buffer().is_empty() && !addrs.is_empty() {
                        let _ = tx.send(std::mem::take(&mut addrs));
                    }
                }
                line.clear();
            }
        });
        let listening = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                // Everything it wrote: the reader ends at the pipe's end, after the exit.
                let errs: Vec<String> =
                    std::iter::from_fn(|| err_rx.recv_timeout(Duration::from_secs(2)).ok())
                        .collect();
                return Err((format!("spate did not start:\n{}", errs.join("\n")), dir));
            }
        };
        Ok(Spate {
            child,
            addr: listening[0],
            listening,
            dir,
            stderr: err_rx,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Opens a raw connection.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        s
    }

    /// Sends `raw` on a new connection and reads until the server closes it.
    pub fn raw(&self, raw: &[u8]) -> String {
        let mut s = self.connect();
        s.write_all(raw).expect("write");
        read_to_close(&mut s)
    }

    /// The server's resident memory (VmRSS), in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// How many descriptors the server has open.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("proc fd")
            .count()
    }

    /// How many of its descriptors are sockets: what a connection leak shows in, unlike the
    /// files each worker's open-file cache keeps open once it has served them.
    pub fn open_sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("proc fd")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    }

    /// Lines spate wrote to standard error so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }

    /// The lines of the log naming `needle`, once `want` of them came (or 15 s passed), and
    /// 200 ms more for any beyond `want` (lines come a moment after what they tell of).
    pub fn log_lines_naming(&self, needle: &str, want: usize) -> Vec<String> {
        let mut seen = Vec::new();
        let take = |seen: &mut Vec<String>| {
            seen.extend(
                self.stderr_lines()
                    .into_iter()
                    .filter(|l| l.contains(needle)),
            );
        };
        let end = std::time::Instant::now() + Duration::from_secs(15);
        while seen.len() < want && std::time::Instant::now() < end {
            take(&mut seen);
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        take(&mut seen);
        seen
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        signal(&self.child, libc::SIGTERM);
        wait_timeout(&mut self.child, Duration::from_secs(20)).expect("spate did not exit")
    }
}

impl Drop for Spate {
    fn drop(&mut self) {
        let exited = self.child.try_wait().ok().flatten();
        // A failing test shows what the server said (and whether it was still running).
        if std::thread::panicking() {
            let lines: Vec<String> = self.stderr.try_iter().collect();
            eprintln!(
                "--- server on {} ({}), its standard error:\n{}",
                self.addr,
                exited.map_or("running".to_string(), |s| format!("exited: {s}")),
                lines.join("\n")
            );
        }
        if exited.is_none() {
            signal(&self.child, libc::SIGTERM);
            if wait_timeout(&mut self.child, Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

pub fn wait_timeout(child: &mut Child, t: Duration) -> Option<std::process::ExitStatus> {
    let end = std::time::Instant::now() + t;
    while std::time::Instant::now() < end {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Reads until EOF (or the read timeout), lossily as text.
pub fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A parsed HTTP/1.1 response read from a raw stream.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response (Content-Length framed, or none for HEAD/304) from a keep-alive stream.
/// `head_request` says the request was HEAD, so no body follows.
pub fn read_response(s: &mut TcpStream, pending: &mut Vec<u8>, head_request: bool) -> RawResponse {
    let mut buf = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = find(pending, b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).expect("read response head");
        assert!(
            n > 0,
            "connection closed before a response: {:?}",
            String::from_utf8_lossy(pending)
        );
        pending.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    pending.drain(..head_end);
    let len = if head_request || status == 304 || status == 204 || status < 200 {
        0
    } else {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.parse::<usize>().expect("content-length"))
            .unwrap_or(0)
    };
    while pending.len() < len {
        let n = s.read(&mut buf).expect("read body");
        assert!(n > 0, "connection closed inside a body");
        pending.extend_from_slice(&buf[..n]);
    }
    let body = pending.drain(..len).collect();
    RawResponse {
        status,
        headers,
        body,
    }
}

/// `N` distinct ports nobody listens on now (each bound at once, then released).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("free port"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().expect("local address").port())
}

/// A port on 127.0.0.1 that refuses connections for as long as this lives: a socket bound
/// there without listening, so no other program can take the port in the meantime (as one
/// could a port probed free and closed).
pub struct DeadPort {
    _socket: socket2::Socket,
    pub port: u16,
}

impl DeadPort {
    pub fn new() -> DeadPort {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("address");
        socket.bind(&any.into()).expect("bind");
        let port = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("bound address")
            .port();
        DeadPort {
            _socket: socket,
            port,
        }
    }
}

/// Sends one request on a new connection and reads one response.
pub fn request(spate: &Spate, raw: &str) -> RawResponse {
    let mut s = spate.connect();
    s.write_all(raw.as_bytes()).expect("write");
    let mut pending = Vec::new();
    read_response(&mut s, &mut pending, raw.starts_with("HEAD "))
}

/// `GET path` with Host `localhost`, as a raw request.
pub fn get(spate: &Spate, path: &str) -> RawResponse {
    request(
        spate,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
    )
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A ureq agent that reports 4xx/5xx as responses, not errors.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// Writes `contents` at `rel` under `root`, creating directories.
pub fn write_file(root: &Path, rel: &str, contents: &[u8]) -> PathBuf {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&p, contents).expect("write file");
    p
}

/// Is this command on PATH?
pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Pieces of a URL for curl.
pub fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .args(args)
        .output()
        .expect("run curl")
}

/// curl with `args` (the URL among them): the status (0 when there was none) and the body.
pub fn curl_status(args: &[&str]) -> (u16, String) {
    let mut all = vec!["-k", "-w", "\n%{http_code}"];
    all.extend_from_slice(args);
    let out = curl(&all);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The lines of the file at `path` once it has `n` of them, or what it has after 5 s (an
/// access log is written every second or so).
pub fn file_lines(path: &Path, n: usize) -> Vec<String> {
    let end = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || std::time::Instant::now() > end {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `spate -t` on `yaml`, written as `conf.yaml` in a fresh directory: whether it passed, its
/// standard output and its standard error.
pub fn check_config(yaml: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("conf.yaml");
    std::fs::write(&path, yaml).expect("write conf.yaml");
    let out = Command::new(BIN)
        .arg("-t")
        .arg("-c")
        .arg(&path)
        .output()
        .expect("run spate -t");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `spate -t` refuses `yaml` and its errors name each of `wants` (`conf.yaml:LINE: ...`).
pub fn assert_config_errors(yaml: &str, wants: &[&str]) {
    let (ok, _, err) = check_config(yaml);
    assert!(!ok, "spate -t accepted it: {err}");
    for want in wants {
        assert!(err.contains(want), "{want} not in {err}");
    }
}

#[allow(unused)]
pub fn write_all(s: &mut TcpStream, b: &[u8]) {
    s.write_all(b).expect("write");
}

/// Runs `script` with the system's Python (`/usr/bin/python3` when it exists), `input` on its
/// standard input. The modules the tests use (brotli, zstandard, prometheus_client) come from
/// Debian's packages (scripts/test installs them), which belong to the system's Python; another
/// python3 earlier on PATH (pyenv) does not see them.
pub fn system_python(script: &str, input: &[u8]) -> std::process::Output {
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    // Written from another thread: a large input would otherwise block against unread output.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("python3");
    let _ = writer.join();
    out
}

/// Runs tests/h3_support/aioquic_get.py with `py` (see [`aioquic_python`]): GETs (or the
/// script's POST forms) of `paths` over HTTP/3 to 127.0.0.1:`port`, one JSON line each.
pub fn aioquic_run(py: &Path, port: u16, paths: &[&str]) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3_support/aioquic_get.py");
    std::process::Command::new(py)
        .arg(script)
        .arg("127.0.0.1")
        .arg(port.to_string())
        .args(paths)
        .output()
        .expect("run aioquic")
}

/// The aioquic venv's python, or `None` (with a SKIP line) when scripts/test has not made it;
/// under CI (`CI` set) its absence fails the test instead.
pub fn aioquic_python() -> Option<PathBuf> {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/aioquic-venv/bin/python");
    if py.exists() {
        return Some(py);
    }
    if std::env::var_os("CI").is_some() {
        panic!("target/aioquic-venv is missing: scripts/test installs aioquic there");
    }
    eprintln!("SKIP: target/aioquic-venv is missing (scripts/test installs aioquic)");
    None
}
