//! What the answer-memo tests of both protocols share (tests/h1_repeat.rs, tests/h2_repeat.rs):
//! the server they ask, and the checks that a memo never serves a stale answer.

use super::{write_file, Spate};
use std::time::{Duration, Instant};

/// A `respond`, a `redirect` and a directory of files (6 B and 4 KiB), on one worker.
pub const CONF: &str = "
listen:
  host: 127.0.0.1
  port: 0
num-threads: 1
hosts:
  default:
    paths:
      /answer:
        respond: {body: \"42\", content-type: text/plain}
      /go:
        redirect: https://example.com/there
      /:
        file.dir: $DIR/www
";

/// Starts `conf` (`CONF` or a variant) with www/6b.txt ("hello\n") and www/4k.bin.
pub fn start(conf: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "www/6b.txt", b"hello\n");
    write_file(dir.path(), "www/4k.bin", &[b'x'; 4096]);
    Spate::start_in(conf, dir)
}

/// Changes www/6b.txt, then asks for it in rounds (`round` returns each answer's body and
/// Content-Length) until the new contents have come and for 2 s more (up to 8 s): they come
/// within 6 s (the open-file cache checks its entries after a second; the rest is room for a
/// loaded machine), and never the old ones after them.
pub fn assert_change_seen(s: &Spate, mut round: impl FnMut() -> Vec<(Vec<u8>, Option<String>)>) {
    std::fs::write(s.path().join("www/6b.txt"), b"changed!\n").unwrap();
    let changed = Instant::now();
    let mut seen_new = None;
    let more = Duration::from_secs(2);
    while changed.elapsed() < Duration::from_secs(8)
        && seen_new.is_none_or(|t| changed.elapsed() < t + more)
    {
        for (body, len) in round() {
            assert_eq!(len, Some(body.len().to_string()));
            match (body.as_slice(), seen_new) {
                (b"changed!\n", _) => seen_new = seen_new.or(Some(changed.elapsed())),
                (b"hello\n", None) => {}
                (body, _) => panic!("{:?} after the new contents", String::from_utf8_lossy(body)),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = seen_new.expect("the new contents");
    assert!(after < Duration::from_secs(6), "{after:?}");
}

/// A server answering `/answer` with "one", then reloaded (SIGHUP) to answer "two": `ask`
/// (on a new connection each time) sees "one" until the reload, then "two" and `repeats`
/// passes on the new configuration.
pub fn assert_reload_seen(ask: impl Fn(&Spate) -> Vec<u8>, repeats: impl Fn(&Spate)) {
    let conf = |body: &str| {
        format!(
            "
listen:
  host: 127.0.0.1
  port: 0
num-threads: 1
shutdown-timeout: 5
hosts:
  default:
    paths:
      /answer:
        respond: {{body: {body}}}
"
        )
    };
    let s = Spate::start(&conf("one"));
    assert_eq!(ask(&s), b"one");
    std::fs::write(s.path().join("spate.yaml"), conf("two")).unwrap();
    super::signal(&s.child, libc::SIGHUP);
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let body = ask(&s);
        if body == b"two" {
            repeats(&s);
            return;
        }
        assert_eq!(body, b"one");
        assert!(Instant::now() < end, "still the old configuration");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to 5 s) for the access log in the server's directory to name `last`, then
/// asserts it is `want`.
pub fn assert_log(s: &Spate, last: &str, want: &str) {
    let log = s.path().join("access.log");
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(last) || Instant::now() > end {
            assert_eq!(text, want);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
