//! The process side of an h2o configuration: `user`, `pid-file`, and logs piped to a command
//! (`access-log: "| rotatelogs ..."`), as in Debian's stock /etc/h2o/h2o.conf.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    // SAFETY: geteuid only reads process state.
    unsafe { libc::geteuid() == 0 }
}

/// The real, effective, saved and file-system ids of `pid` (the `Uid:` line of its status).
fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect()
}

/// Waits up to 10 s for `path` to contain `needle`; returns the contents.
fn wait_for_text(path: &Path, needle: &str) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) || Instant::now() > end {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Debian's h2o.conf, with the paths in a test directory and `cat` in place of rotatelogs.
/// As root it switches to nobody, who can read the site but not a file only root can.
#[test]
fn a_debian_style_config_runs_as_its_user_with_a_pid_file_and_piped_logs() {
    // In /tmp (world-traversable), wherever TMPDIR points: nobody must reach the site.
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let root = dir.path();
    chmod(root, 0o755);
    write_file(root, "www/index.html", b"debian site\n");
    write_file(root, "www/secret.txt", b"root only\n");
    chmod(&root.join("www"), 0o755);
    chmod(&root.join("www/index.html"), 0o644);
    chmod(&root.join("www/secret.txt"), 0o600);
    std::fs::create_dir(root.join("logs")).unwrap();
    // Written as root, removed at exit as the new user: a directory anyone may write.
    std::fs::create_dir(root.join("run")).unwrap();
    chmod(&root.join("run"), 0o777);
    let user = if is_root() {
        "nobody".to_string()
    } else {
        // Without root, only the account in use is possible (and changes nothing).
        spate::server::account::current_user_name().expect("the account in use")
    };
    let yaml = format!(
        r#"server-name: "h2o (Debian)"
user: {user}
access-log: "|cat >> $DIR/logs/access.log"
error-log: "|cat >> $DIR/logs/error.log"
pid-file: $DIR/run/h2o.pid
listen:
  host: 127.0.0.1
  port: 0
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/www
      /server-status:
        status: ON
"#
    );
    let mut s = Spate::start_in(&yaml, dir);
    let pid = s.child.id();
    let pid_file = s.path().join("run/h2o.pid");
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap(),
        format!("{pid}\n")
    );
    if is_root() {
        assert_eq!(uids(pid), vec![65534; 4], "every uid is nobody's");
        // nobody cannot read a file only root can: the switch governs the handlers.
        assert_eq!(get(&s, "/secret.txt").status, 403);
    }
    let r = get(&s, "/index.html");
    assert_eq!((r.status, r.text()), (200, "debian site\n".to_string()));
    // A request spate refuses writes one error line, through the error log's command.
    let bad = s.raw(b"BREW /pot HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n");
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    let errors = wait_for_text(
        &s.path().join("logs/error.log"),
        "rejected request with 400",
    );
    assert!(
        errors.contains("rejected request with 400: invalid Content-Length"),
        "error log: {errors:?}"
    );
    // Access log lines go through the command too; the last ones are written at exit.
    let access = wait_for_text(&s.path().join("logs/access.log"), "GET /index.html");
    assert!(
        access.contains("\"GET /index.html HTTP/1.1\" 200 12"),
        "{access:?}"
    );
    assert_eq!(get(&s, "/server-status/json").status, 200);
    assert!(s.stop().success());
    let access = wait_for_text(&s.path().join("logs/access.log"), "/server-status/json");
    assert!(access.contains("GET /server-status/json"), "{access:?}");
    assert!(!pid_file.exists(), "the pid file goes at exit");
}

/// After a binary upgrade the pid file names the new process, and the old one, exiting, does
/// not remove it.
#[test]
fn a_binary_upgrade_leaves_the_pid_file_to_the_new_process() {
    let mut s = Spate::start(
        "pid-file: $DIR/spate.pid\nlisten: {host: 127.0.0.1, port: 0}\nhosts:\n  default:\n    paths:\n      /:\n        respond: {status: 200, body: one}\n",
    );
    let pid_file = s.path().join("spate.pid");
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap(),
        format!("{}\n", s.child.id())
    );
    signal(&s.child, libc::SIGUSR2);
    let line = s
        .log_lines_naming("binary upgrade: new process", 1)
        .pop()
        .unwrap();
    let new: i32 = line
        .split("new process ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    let old = wait_timeout(&mut s.child, Duration::from_secs(15)).expect("old spate exits");
    assert!(old.success(), "{old}");
    let named = std::fs::read_to_string(&pid_file).unwrap_or_default();
    // SAFETY: kill(2) on the spate the upgrade started.
    unsafe { libc::kill(new, libc::SIGTERM) };
    assert_eq!(named, format!("{new}\n"));
    let end = Instant::now() + Duration::from_secs(20);
    while pid_file.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pid_file.exists(), "the new process removes it at exit");
}

/// A reload that names another log command lets the old one go: it sees the end of its input
/// once the old workers have drained, and the new one gets the lines.
#[test]
fn a_reload_closes_a_log_command_it_no_longer_names() {
    let conf = |name: &str| {
        format!(
            "access-log: \"| cat >> $DIR/{name}.log; echo ended > $DIR/{name}.ended\"\nlisten: {{host: 127.0.0.1, port: 0}}\nhosts:\n  default:\n    paths:\n      /:\n        respond: {{status: 200, body: {name}}}\n"
        )
    };
    let s = Spate::start(&conf("old"));
    assert_eq!(get(&s, "/").status, 200);
    let yaml = conf("new").replace("$DIR", &s.path().display().to_string());
    std::fs::write(s.path().join("spate.yaml"), yaml).unwrap();
    signal(&s.child, libc::SIGHUP);
    assert_eq!(s.log_lines_naming("reloaded", 1).len(), 1);
    let ended = wait_for_text(&s.path().join("old.ended"), "ended");
    assert_eq!(ended, "ended\n", "the old command saw the end of its input");
    assert!(
        wait_for_text(&s.path().join("old.log"), "GET / ").contains("GET / "),
        "the old command wrote what it got first"
    );
    assert_eq!(get(&s, "/").text(), "new");
    assert!(
        !s.path().join("new.ended").exists(),
        "the new command runs on"
    );
}
