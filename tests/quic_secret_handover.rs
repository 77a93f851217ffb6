//! The QUIC secret a binary upgrade hands to the new process (`SPATE_QUIC_SECRET_FD`, a pipe
//! of 64 bytes): a pipe that ends short is a failed hand-over, logged and counted in
//! `spate_quic_secret_handover_failures_total`, and the process still starts (with a fresh
//! secret); a whole one is taken and not counted. spate is started here by hand, as the old
//! process of an upgrade starts it: with the pipe's read end inherited.

mod common;

use common::BIN;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// spate on `port` with a metrics path, handed a pipe holding `secret`.
fn start(dir: &std::path::Path, port: u16, secret: &[u8]) -> Started {
    let conf = dir.join("spate.yaml");
    std::fs::write(
        &conf,
        format!(
            "listen: {{host: 127.0.0.1, port: {port}}}\nhosts:\n  default:\n    paths:\n      /metrics:\n        metrics: ON\n"
        ),
    )
    .unwrap();
    let (r, w) = spate::sys::file::pipe().unwrap();
    std::fs::File::from(w).write_all(secret).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("-c")
        .arg(&conf)
        .env("RUST_LOG", "info")
        .env("SPATE_QUIC_SECRET_FD", r.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap());
    spate::sys::process::keep_open_across_exec(&mut cmd, vec![r.as_raw_fd()]);
    let child = Started(cmd.spawn().expect("spawn spate"));
    drop(r);
    child
}

/// The metrics page, once spate answers on `port`.
fn metrics(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut page = String::new();
            if s.read_to_string(&mut page).is_ok() && page.starts_with("HTTP/1.1 200") {
                return page;
            }
        }
        assert!(Instant::now() < deadline, "spate never answered on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn failures(page: &str) -> &str {
    page.lines()
        .find(|l| l.starts_with("spate_quic_secret_handover_failures_total "))
        .unwrap_or_else(|| panic!("no counter in {page}"))
}

#[test]
fn a_short_secret_pipe_is_a_counted_failure_and_a_whole_one_is_taken() {
    let [short_port, whole_port] = common::free_ports::<2>();
    let dir = tempfile::tempdir().unwrap();
    let short = start(dir.path(), short_port, &[7u8; 10]);
    let page = metrics(short_port);
    assert_eq!(
        failures(&page),
        "spate_quic_secret_handover_failures_total 1"
    );
    drop(short);
    let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(
        log.contains("SPATE_QUIC_SECRET_FD: descriptor")
            && log.contains("the pipe ended after 10 of 64 bytes"),
        "{log}"
    );

    let dir = tempfile::tempdir().unwrap();
    let whole = start(dir.path(), whole_port, &[7u8; 64]);
    let page = metrics(whole_port);
    assert_eq!(
        failures(&page),
        "spate_quic_secret_handover_failures_total 0"
    );
    drop(whole);
    let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(!log.contains("SPATE_QUIC_SECRET_FD"), "{log}");
}
