//! An idle spate does not wake: each worker's periodic work (metrics published for the other
//! workers, access-log lines written out, memory given back) runs on one timer that stops once
//! the worker has no connection and nothing left to do, and starts again with the next
//! connection, with nothing lost: the counters on the status page and the log lines are exact.

mod common;

use common::prometheus::*;
use common::*;
use std::time::{Duration, Instant};

const CONFIG: &str = "
num-threads: 2
listen: {host: 127.0.0.1, port: 0}
access-log: $DIR/access.log
hosts:
  default:
    paths:
      /metrics: {metrics: ON}
      /: {file.dir: $DIR}
";

/// Voluntary context switches of each worker thread of `pid` (a wake-up each).
fn worker_wakeups(pid: u32) -> Vec<u64> {
    let mut all = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let task = task.expect("task").path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if !comm.starts_with("spate-worker") {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        let n = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("voluntary_ctxt_switches");
        all.push(n);
    }
    assert_eq!(all.len(), 2, "two workers");
    all
}

/// Sends `n` requests of `/missing`, each on its own connection (404s: the status page's
/// own requests are 2xx).
fn misses(s: &Spate, n: usize) {
    for _ in 0..n {
        assert_eq!(get(s, "/missing").status, 404);
    }
}

fn logged_misses(s: &Spate, want: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(s.path().join("access.log")).unwrap_or_default();
        let n = text.lines().filter(|l| l.contains("/missing")).count();
        if n >= want || Instant::now() > end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_idle_worker_sleeps_and_its_work_resumes_with_the_next_connection() {
    let s = Spate::start(CONFIG);
    let four = "spate_requests_total{protocol=http/1.1,status=4xx}";
    misses(&s, 20);
    let m = scrape_until(&s, "/metrics", |m| sample(m, four) == 20.0);
    assert_eq!(sample(&m, four), 20.0, "{m:?}");
    assert_eq!(logged_misses(&s, 20), 20);

    // Idle: a stretch of 2 s in which no worker wakes comes (before, each woke 5 times a
    // second to publish its metrics and twice more for the log and the allocator). Polled:
    // a slower machine does not add wake-ups, it only takes longer to settle.
    let end = Instant::now() + Duration::from_secs(60);
    let mut quiet_since = (Instant::now(), worker_wakeups(s.child.id()));
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = worker_wakeups(s.child.id());
        if now != quiet_since.1 {
            assert!(
                Instant::now() < end,
                "the idle workers keep waking: {:?} then {now:?}",
                quiet_since.1
            );
            quiet_since = (Instant::now(), now);
        } else if quiet_since.0.elapsed() >= Duration::from_secs(2) {
            break;
        }
    }

    // The next connections wake the work again: counted on the status page (whichever
    // worker serves it, the other's share is published) and logged.
    misses(&s, 5);
    let m = scrape_until(&s, "/metrics", |m| sample(m, four) == 25.0);
    assert_eq!(sample(&m, four), 25.0, "{m:?}");
    assert_eq!(logged_misses(&s, 25), 25);
}
