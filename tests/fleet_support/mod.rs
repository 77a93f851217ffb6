//! The stores a fleet of spates shares, from Debian's packages, each started by the test on
//! an ephemeral port of 127.0.0.1 and killed when dropped.
#![allow(dead_code)]

use super::common::free_ports;
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
