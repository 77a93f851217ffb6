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
        for sub in ["htdocs/dav", "tmp"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        // The kernel picks the port; nginx takes it right after (it cannot report port 0).
        // Another program may take it in between: then nginx exits, and tries another.
        let mut dir = dir;
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port();
            let child = spawn(&bin, dir.path(), port);
            let mut n = Nginx { child, port, dir };
            match n.wait_listening() {
                Ok(()) => return Some(n),
                Err(log) if log.contains("Address already in use") => {
                    let _ = std::fs::remove_file(n.dir.path().join("error.log"));
                    dir = n.take_dir();
                }
                Err(log) => panic!("{log}"),
            }
        }
        panic!("nginx did not start: five free ports were taken before it bound them");
    }

    /// Ends this (exited) nginx, keeping its directory for another try.
    fn take_dir(mut self) -> tempfile::TempDir {
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
        drop(self);
        dir
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Waits until nginx answers on its port (another program that took the port does not
    /// count); what it logged when it exited instead.
    fn wait_listening(&mut self) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if answers_as_nginx(self.port) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let log =
                    std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
                return Err(format!("nginx exited with {status}: {log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nginx did not listen on {}", self.port);
    }
}

/// Whether what listens on `port` answers a request with nginx's Server field.
fn answers_as_nginx(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    if c.write_all(b"HEAD / HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut head = Vec::new();
    let _ = c.read_to_end(&mut head);
    String::from_utf8_lossy(&head)
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("server: nginx"))
}

/// Starts nginx on `port` with its configuration written to `dir`.
fn spawn(bin: &Path, dir: &Path, port: u16) -> Child {
    let root = dir.display().to_string();
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
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).expect("write nginx.conf");
    Command::new(bin)
        .arg("-c")
        .arg(&path)
        .arg("-p")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nginx")
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
