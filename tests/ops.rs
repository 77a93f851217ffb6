//! Operations: a port already in use, reload on SIGHUP under load, readiness, status and
//! metrics, log reopening.

mod common;

use common::*;
use std::process::Command;

const RESPOND: &str = "
num-threads: 2
listen:
  host: 127.0.0.1
  port: 0
hosts:
  default:
    paths:
      /:
        respond: {body: one}
";

#[test]
fn a_second_spate_on_the_same_port_exits_with_a_clear_error() {
    let first = Spate::start(RESPOND);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("second.yaml");
    let yaml = RESPOND.replace("port: 0", &format!("port: {}", first.addr.port()));
    std::fs::write(&conf, yaml).unwrap();
    let out = Command::new(BIN).arg("-c").arg(&conf).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("second.yaml:4:") && err.contains("already in use"),
        "{err}"
    );
    // The first one still answers everything.
    for _ in 0..20 {
        assert!(first
            .raw(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .ends_with("one"));
    }
}

#[test]
fn a_port_held_by_another_program_is_refused() {
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("c.yaml");
    let yaml = RESPOND.replace(
        "port: 0",
        &format!("port: {}", other.local_addr().unwrap().port()),
    );
    std::fs::write(&conf, yaml).unwrap();
    let out = Command::new(BIN).arg("-c").arg(&conf).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in use"));
}
