//! HAProxy (Debian's `haproxy`) in TCP mode in front of spate: the L4 balancer that sends the
//! PROXY protocol in the edge and Unix-socket tests.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running HAProxy, killed when dropped.
pub struct Haproxy(Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts HAProxy with one front per route: (front port on 127.0.0.1, the server as HAProxy
/// names it: `127.0.0.1:8080` or `unix@/path/to.sock`, `send-proxy` or `send-proxy-v2`).
/// Returns once every front accepts.
pub fn start(dir: &Path, routes: &[(u16, String, &str)]) -> Haproxy {
    let mut conf = String::from(
        "global\n  maxconn 200\ndefaults\n  mode tcp\n  timeout connect 5s\n  \
         timeout client 30s\n  timeout server 30s\n",
    );
    for (i, (port, to, send)) in routes.iter().enumerate() {
        conf.push_str(&format!(
            "frontend f{i}\n  bind 127.0.0.1:{port}\n  default_backend b{i}\n\
             backend b{i}\n  server s{i} {to} {send}\n"
        ));
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, conf).expect("write haproxy.cfg");
    let child = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy (apt-get install haproxy)");
    let h = Haproxy(child);
    let end = Instant::now() + Duration::from_secs(10);
    for (port, _, _) in routes {
        while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
            assert!(Instant::now() < end, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    h
}
