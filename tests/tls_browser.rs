//! A real browser over TLS: headless Chromium opens the bundled example site from spate,
//! takes a screenshot, and spate's access log shows the page and its assets were fetched.
//!
//! Every request must have arrived over HTTP/2 (ALPN h2), as `%H` in the access log shows.

mod common;
mod tls_support;

use common::*;
use std::time::{Duration, Instant};
use tls_support::*;

/// The page and the assets it loads (see examples/site/index.html).
const FETCHED: &[&str] = &["/", "/style.css", "/logo.svg", "/app.js"];

#[test]
fn chromium_loads_the_example_site_over_tls() {
    let Some(browser) = chromium() else {
        eprintln!("SKIP: chromium is not installed (scripts/test installs it)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    cert(dir.path(), "site", "localhost", false);
    let site = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/site");
    let s = Spate::start_in(
        &format!(
            "
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: site.crt
    key-file: site.key
hosts:
  default:
    access-log:
      path: access.log
      format: \"%H %s %U\"
    paths:
      /:
        file.dir: {site}
"
        ),
        dir,
    );
    let url = format!("https://127.0.0.1:{}/", s.addr.port());
    chromium_screenshot(browser, s.path(), &url, &[]);

    // Access log lines are flushed at least every second.
    let log_path = s.path().join("access.log");
    let expected_protocol = "HTTP/2";
    let deadline = Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let all = FETCHED
            .iter()
            .all(|p| log.lines().any(|l| l.ends_with(&format!(" 200 {p}"))));
        if all || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for p in FETCHED {
        let line = log
            .lines()
            .find(|l| l.ends_with(&format!(" 200 {p}")))
            .unwrap_or_else(|| panic!("{p} was not fetched; access log:\n{log}"));
        assert_eq!(
            line,
            format!("{expected_protocol} 200 {p}"),
            "access log:\n{log}"
        );
    }
}
