//! Debian's PHP-FPM as a FastCGI application: its own configuration in a temporary
//! directory, listening on a Unix socket or a TCP port, in the foreground, stopped when
//! dropped (never the system service).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The versioned binary Debian installs (`php-fpm8.2` on bookworm).
pub fn binary() -> Option<PathBuf> {
    let dirs = ["/usr/sbin", "/usr/bin", "/usr/local/sbin"];
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("php-fpm"))
            })
            .collect();
        found.sort();
        if let Some(p) = found.pop() {
            return Some(p);
        }
    }
    None
}

pub struct PhpFpm {
    child: Child,
    /// `unix:/path` or `127.0.0.1:PORT`, as written in its `listen`.
    pub listen: String,
    pub dir: tempfile::TempDir,
}

pub enum Listen {
    Unix,
    Tcp(u16),
}

impl PhpFpm {
    /// Starts PHP-FPM with `children` workers. None, with the reason printed, when it is not
    /// installed.
    pub fn start(listen: Listen, children: u32) -> Option<PhpFpm> {
        let Some(bin) = binary() else {
            eprintln!("SKIP: php-fpm is not installed (scripts/test installs it: apt-get install php-fpm)");
            return None;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let (listen_line, listen) = match listen {
            Listen::Unix => {
                let p = dir.path().join("fpm.sock");
                (p.display().to_string(), format!("unix:{}", p.display()))
            }
            Listen::Tcp(port) => (format!("127.0.0.1:{port}"), format!("127.0.0.1:{port}")),
        };
        let conf = format!(
            "[global]\nerror_log = /proc/self/fd/2\ndaemonize = no\npid = {dir}/fpm.pid\n\
             [app]\nlisten = {listen_line}\nlisten.mode = 0666\npm = static\n\
             pm.max_children = {children}\nclear_env = no\ncatch_workers_output = yes\n\
             php_admin_value[post_max_size] = 64M\nphp_admin_value[memory_limit] = 256M\n",
            dir = dir.path().display()
        );
        let conf_path = dir.path().join("fpm.conf");
        std::fs::write(&conf_path, conf).expect("write fpm.conf");
        let mut cmd = Command::new(bin);
        cmd.args(["-F", "-n", "-y"])
            .arg(&conf_path)
            .arg("-p")
            .arg(dir.path());
        cmd.args(["-d", "post_max_size=64M", "-d", "memory_limit=256M"]);
        // As root (the test machines), it must be told that is meant.
        if running_as_root() {
            cmd.arg("-R");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start php-fpm");
        let fpm = PhpFpm { child, listen, dir };
        fpm.wait_ready();
        Some(fpm)
    }

    fn wait_ready(&self) {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            let up = match self.listen.strip_prefix("unix:") {
                Some(p) => std::os::unix::net::UnixStream::connect(p).is_ok(),
                None => std::net::TcpStream::connect(&self.listen).is_ok(),
            };
            if up {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("php-fpm did not start listening on {}", self.listen);
    }

    /// The socket path of a Unix listener.
    pub fn socket(&self) -> &Path {
        Path::new(self.listen.strip_prefix("unix:").unwrap_or(&self.listen))
    }
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        // SIGQUIT: a graceful stop; then make sure.
        super::signal(&self.child, libc::SIGQUIT);
        if super::wait_timeout(&mut self.child, Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
