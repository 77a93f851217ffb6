//! Helpers for the TLS tests: certificates made with rcgen, and openssl s_client.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Writes a self-signed certificate whose CN and only SAN is `name` as `{stem}.crt` and its
/// key as `{stem}.key` in `dir`. `days_left` below zero makes it expired.
pub fn cert(dir: &Path, stem: &str, name: &str, expired: bool) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    if expired {
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let c = params.self_signed(&key).expect("sign");
    let (cp, kp) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    std::fs::write(&cp, c.pem()).expect("write cert");
    std::fs::write(&kp, key.serialize_pem()).expect("write key");
    (cp, kp)
}

/// Whether a tool is installed; prints a skip notice when not.
pub fn need(cmd: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("SKIP: {cmd} is not installed (scripts/test installs it)");
    }
    ok
}

/// Runs `openssl s_client` against `port` with `args`, writing `input` and then waiting for
/// the server to close (`-ign_eof`). Returns stdout and stderr together.
pub fn s_client(port: u16, args: &[&str], input: &str) -> String {
    let mut child = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(format!("127.0.0.1:{port}"))
        .arg("-ign_eof")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let out = wait_output(child, Duration::from_secs(15));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `wait_with_output` with a deadline, so a hung client fails the test instead of hanging it.
pub fn wait_output(child: std::process::Child, t: Duration) -> std::process::Output {
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(t) {
        Ok(r) => r.expect("wait"),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(id as i32, libc::SIGKILL);
            }
            panic!("child process {id} did not finish in {t:?}");
        }
    }
}

/// A GET that closes the connection after the response.
pub fn get_close(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// The headless browser on PATH, if any.
pub fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| super::common::have(c))
}

/// Headless `browser` over TCP (QUIC off), with a profile under `dir`, certificate errors
/// ignored, and nothing running that the test did not ask for.
pub fn chromium_headless(browser: &str, dir: &Path) -> Command {
    headless(browser, dir, &TCP.map(String::from))
}

/// Chromium's flags for TCP only, any certificate accepted.
const TCP: [&str; 2] = ["--disable-quic", "--ignore-certificate-errors"];

/// Opens `url` in headless `browser` (certificate errors ignored, `extra` flags added, its
/// profile and screenshot under `dir`) and returns the screenshot, checked to be a PNG of a
/// rendered page.
pub fn chromium_screenshot(browser: &str, dir: &Path, url: &str, extra: &[&str]) -> Vec<u8> {
    screenshot(browser, dir, url, &TCP.map(String::from), extra)
}

/// As `chromium_screenshot`, over HTTP/3: QUIC forced for `origin` (HOST:PORT), and the test
/// certificate accepted by its SPKI hash (base64 SHA-256), the one way Chromium skips
/// verification on QUIC.
pub fn chromium_screenshot_quic(
    browser: &str,
    dir: &Path,
    url: &str,
    origin: &str,
    spki: &str,
) -> Vec<u8> {
    let transport = [
        "--enable-quic".to_string(),
        format!("--origin-to-force-quic-on={origin}"),
        format!("--ignore-certificate-errors-spki-list={spki}"),
    ];
    screenshot(browser, dir, url, &transport, &[])
}

fn headless(browser: &str, dir: &Path, transport: &[String]) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
    ])
    .args(transport)
    .arg(format!("--user-data-dir={}", dir.join("profile").display()));
    cmd
}

fn screenshot(
    browser: &str,
    dir: &Path,
    url: &str,
    transport: &[String],
    extra: &[&str],
) -> Vec<u8> {
    let shot = dir.join("shot.png");
    let mut cmd = headless(browser, dir, transport);
    cmd.arg("--window-size=1024,768")
        .args(extra)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = wait_output(
        cmd.spawn().expect("start chromium"),
        Duration::from_secs(90),
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}); chromium said:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A rendered page, not a blank or error page: a real 1024x768 screenshot is several KiB.
    assert!(png.len() > 5_000, "screenshot is only {} bytes", png.len());
    png
}

/// Waits (up to 5 s: access log lines are flushed at least every second) until the `%H %s %U`
/// access log at `path` shows a 200 for every one of `paths`, then checks each was served over
/// `protocol` (`HTTP/2`, `HTTP/3`). Returns the log.
pub fn expect_logged(path: &Path, paths: &[&str], protocol: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        let all = paths
            .iter()
            .all(|p| log.lines().any(|l| l.ends_with(&format!(" 200 {p}"))));
        if all || std::time::Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for p in paths {
        let line = log
            .lines()
            .find(|l| l.ends_with(&format!(" 200 {p}")))
            .unwrap_or_else(|| panic!("{p} was not fetched; access log:\n{log}"));
        assert_eq!(line, format!("{protocol} 200 {p}"), "access log:\n{log}");
    }
    log
}
