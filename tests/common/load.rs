//! Load generators for the operations tests: h2load and wrk, run for a fixed time, with their
//! counts of answered and failed requests read from their reports.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A load generator running in the background.
pub struct Load {
    pub name: String,
    child: Child,
    kind: Kind,
}

/// h2load runs one after another until a deadline. h2load (1.52) does not reconnect after a
/// GOAWAY: each reload ends its connections, so a single long run would load only the first
/// reload. Short consecutive runs keep 100 connections with 10 streams each busy across all
/// of them.
pub struct Repeated {
    pub name: String,
    runs: std::thread::JoinHandle<Report>,
}

impl Repeated {
    pub fn h2load(url: &str, secs: u32) -> Repeated {
        let end = std::time::Instant::now() + Duration::from_secs(u64::from(secs));
        let url = url.to_string();
        let name = format!("h2load (repeated) {url}");
        let runs = std::thread::spawn(move || {
            let mut sum = Report::default();
            let mut n = 0;
            while std::time::Instant::now() < end {
                // Allowed 30 s: a connection left open in a draining generation holds the run
                // until the server's shutdown-timeout closes it.
                let r = Load::spawn_h2load(&url, "500ms").finish(10);
                n += 1;
                sum.succeeded += r.succeeded;
                sum.failed = sum.failed.saturating_add(r.failed);
                sum.non_2xx += r.non_2xx;
                if r.failed > 0 || r.non_2xx > 0 {
                    sum.text.push_str(&r.text);
                }
            }
            sum.text.push_str(&format!("{n} runs\n"));
            sum
        });
        Repeated { name, runs }
    }

    /// As [`Repeated::h2load`], with runs of `n` requests each rather than a duration. A
    /// timed run waits for clients that connect after its end, and those send until their
    /// connection closes: under a reload in place (no GOAWAY) on a loaded machine, never. A
    /// counted run ends once each client made its share.
    pub fn h2load_counted(url: &str, secs: u32, n: u32) -> Repeated {
        let end = std::time::Instant::now() + Duration::from_secs(u64::from(secs));
        let url = url.to_string();
        let name = format!("h2load (repeated, -n {n}) {url}");
        let runs = std::thread::spawn(move || {
            let mut sum = Report::default();
            let mut runs = 0;
            while std::time::Instant::now() < end {
                let n = n.to_string();
                let args = ["-c100", "-m10", "-t1", "-n", &n];
                let r = Load::h2load_with(&url, &args).finish(10);
                runs += 1;
                sum.succeeded += r.succeeded;
                sum.failed = sum.failed.saturating_add(r.failed);
                sum.non_2xx += r.non_2xx;
                if r.failed > 0 || r.non_2xx > 0 {
                    sum.text.push_str(&r.text);
                }
            }
            sum.text.push_str(&format!("{runs} runs\n"));
            sum
        });
        Repeated { name, runs }
    }

    pub fn finish(self) -> Report {
        let mut r = self.runs.join().expect("h2load runs");
        r.text = format!("{}: {} succeeded\n{}", self.name, r.succeeded, r.text);
        r
    }
}

#[derive(Clone, Copy)]
enum Kind {
    H2load,
    Wrk,
}

/// What a load generator reported.
#[derive(Debug, Default)]
pub struct Report {
    pub succeeded: u64,
    /// Requests that got no answer or an error: h2load's "failed", wrk's socket errors.
    pub failed: u64,
    /// Answers with a status other than 2xx or 3xx.
    pub non_2xx: u64,
    pub text: String,
}

impl Load {
    /// `h2load -c100 -m10` for `secs` seconds against `url` (h2c with prior knowledge for
    /// `http://`, ALPN h2 for `https://`).
    pub fn h2load(url: &str, secs: u32) -> Load {
        Load::spawn_h2load(url, &secs.to_string())
    }

    fn spawn_h2load(url: &str, duration: &str) -> Load {
        Load::h2load_with(url, &["-c100", "-m10", "-t1", "-D", duration])
    }

    /// h2load with `args` (connections, streams, duration or count) against `url`.
    pub fn h2load_with(url: &str, args: &[&str]) -> Load {
        let child = Command::new("h2load")
            .args(args)
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run h2load");
        Load {
            name: format!("h2load {url}"),
            child,
            kind: Kind::H2load,
        }
    }

    /// `wrk -c100` (HTTP/1.1 keep-alive) for `secs` seconds against `url`. wrk counts a
    /// request unanswered after its timeout (2 s by default) as a socket error: 30 s here, so
    /// that only a lost request counts, not a slow answer on a loaded machine.
    pub fn wrk(url: &str, secs: u32) -> Load {
        let child = Command::new("wrk")
            .args(["-c100", "-t1", "--timeout", "30s", "-d"])
            .arg(format!("{secs}s"))
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run wrk");
        Load {
            name: format!("wrk {url}"),
            child,
            kind: Kind::Wrk,
        }
    }

    /// Waits for the run to end (at most `secs` + 20 seconds) and reads its report.
    pub fn finish(self, secs: u32) -> Report {
        let out = wait_output(self.child, Duration::from_secs(u64::from(secs) + 20));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut r = match self.kind {
            Kind::H2load => parse_h2load(&text),
            Kind::Wrk => parse_wrk(&text),
        };
        r.text = format!("{}:\n{text}", self.name);
        r
    }
}

/// The child's output once it exits; killed after `limit`.
fn wait_output(child: Child, limit: Duration) -> std::process::Output {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("load generator output"),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("load generator {pid} did not finish in {limit:?}");
        }
    }
}

/// `requests: 10 total, 10 started, 10 done, 9 succeeded, 1 failed, 1 errored, 0 timeout`
/// and `status codes: 9 2xx, 0 3xx, 0 4xx, 0 5xx`.
fn parse_h2load(text: &str) -> Report {
    let mut r = Report::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("requests: ") {
            r.succeeded = count_before(rest, "succeeded").unwrap_or(0);
            // An unreadable report counts as a failure.
            r.failed = count_before(rest, "failed").unwrap_or(u64::MAX);
        } else if let Some(rest) = line.strip_prefix("status codes: ") {
            r.non_2xx =
                count_before(rest, "4xx").unwrap_or(0) + count_before(rest, "5xx").unwrap_or(0);
        }
    }
    if !text.contains("requests: ") {
        r.failed = u64::MAX;
    }
    r
}

/// `12345 requests in 5.00s, ...`, `Socket errors: connect 0, read 1, write 0, timeout 0`,
/// `Non-2xx or 3xx responses: 3`.
fn parse_wrk(text: &str) -> Report {
    let mut r = Report {
        failed: u64::MAX,
        ..Report::default()
    };
    for line in text.lines().map(str::trim) {
        if let Some((n, _)) = line.split_once(" requests in ") {
            r.succeeded = n.trim().parse().unwrap_or(0);
            if r.failed == u64::MAX {
                r.failed = 0;
            }
        } else if let Some(rest) = line.strip_prefix("Socket errors: ") {
            r.failed = rest
                .split(", ")
                .filter_map(|kv| kv.rsplit_once(' ')?.1.parse::<u64>().ok())
                .sum();
        } else if let Some(n) = line.strip_prefix("Non-2xx or 3xx responses: ") {
            r.non_2xx = n.trim().parse().unwrap_or(u64::MAX);
        }
    }
    r.succeeded = r.succeeded.saturating_sub(r.non_2xx);
    r
}

/// The number just before `word` in a comma-separated list like `9 succeeded, 1 failed`.
fn count_before(list: &str, word: &str) -> Option<u64> {
    list.split(", ")
        .find_map(|item| item.trim().strip_suffix(word))
        .and_then(|n| n.trim().parse().ok())
}

#[test]
fn reports_are_read() {
    let h = parse_h2load(
        "requests: 10 total, 10 started, 10 done, 9 succeeded, 1 failed, 1 errored, 0 timeout\n\
         status codes: 9 2xx, 0 3xx, 1 4xx, 0 5xx\n",
    );
    assert_eq!((h.succeeded, h.failed, h.non_2xx), (9, 1, 1));
    let w = parse_wrk(
        "  12345 requests in 5.00s, 1.2MB read\n  Socket errors: connect 0, read 2, write 1, \
         timeout 0\n  Non-2xx or 3xx responses: 5\n",
    );
    assert_eq!((w.succeeded, w.failed, w.non_2xx), (12340, 3, 5));
}
