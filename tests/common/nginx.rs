//! Debian's nginx as an independent backend: its own generated config in a temporary
//! directory, an ephemeral port, in the foreground (`daemon off`), stopped when dropped.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian puts it (root's PATH has /usr/sbin; other users' may not).
fn binary() -> Option<PathBuf> {
    let on_path = Command::new("sh")
        .args(["-c", "command -v nginx"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    on_path.or_else(|| {
        let p = PathBuf::from("/usr/sbin/nginx");
        p.exists().then_some(p)
    })
}

pub struct Nginx {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx serving `dir/htdocs` (files), WebDAV PUT under `/dav/` (stored in
    /// `dir/htdocs/dav/`), and `POST /post` answered with `posted` plus the request's
    /// Content-Length. None, with the reason printed, when nginx is not installed.
    pub fn start(dir: tempfile::TempDir) -> Option<Nginx> {
        let Some(bin) = binary() else {
            eprintln!(
                "SKIP: nginx is not installed (scripts/test installs it: apt-get install nginx-light)"
            );
            return None;
        };
        let root = dir.path().display().to_string();
        for sub in ["htdocs/dav", "tmp"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        // The kernel picks the port; nginx takes it right after (it cannot report port 0).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        // One process, in the foreground: nothing outlives the test, and no worker switches
        // to `nobody` (who could not read a private temporary directory).
        let conf = format!(
            "daemon off;
master_process off;
error_log {root}/error.log warn;
pid {root}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    client_max_body_size 64m;
    server {{
        listen 127.0.0.1:{port};
        root {root}/htdocs;
        location / {{ }}
        location /dav/ {{ dav_methods PUT DELETE; create_full_put_path on; }}
        location = /post {{ return 200 \"posted $content_length\\n\"; }}
    }}
}}
"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).expect("write nginx.conf");
        let child = Command::new(bin)
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nginx");
        let mut n = Nginx { child, port, dir };
        n.wait_listening();
        Some(n)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn wait_listening(&mut self) {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let log =
                    std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
                panic!("nginx exited with {status}: {log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nginx did not listen on {}", self.port);
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        super::signal(&self.child, libc::SIGTERM);
        if super::wait_timeout(&mut self.child, Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
