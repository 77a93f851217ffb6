//! A real browser over TLS: headless Chromium opens the bundled example site from spate,
//! takes a screenshot, and spate's access log shows the page and its assets were fetched.
//!
//! Every request must have arrived over HTTP/2 (ALPN h2), as `%H` in the access log shows.

mod common;
mod tls_support;

use common::*;
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

    expect_logged(&s.path().join("access.log"), FETCHED, "HTTP/2");
}
