//! HTTP/3 over QUIC (issue 10) with clients no one here wrote: Python's aioquic
//! (tests/h3/h3client.py, in the venv scripts/test makes under target/aioquic-venv), a quic-go client
//! (tests/h3/goclient, built here with the Go toolchain) and headless Chromium forced onto QUIC.
//!
//! Every server has a TLS listen and a `type: quic` listen on the same port number, as seed-004.
//! Bodies are compared by SHA-256. The checks are grouped to start few servers: files (small,
//! 100 MB once, 100 streams on one connection, small client windows, Alt-Svc), a proxy in front
//! of a spate backend (GET and POST, a small `http3-input-window-size`), Retry with both
//! clients, and the browser. tests/h3_attacks.rs has the abuse tests.
//!
//! Against h2o (`SPATE_TESTS_H2O=.../bin/h2o`, the peers' build with QUIC) the same tests check
//! that they ask for what a real HTTP/3 server does; spate-only checks (Alt-Svc) are skipped.

mod common;
mod h3_support;
mod tls_support;

use common::backend::{Backend, Echo};
use common::*;
use h3_support::*;

/// Small files, 100 MB once, 100 concurrent streams, small client windows, resumption and a key
/// update (aioquic), and the Alt-Svc header of the TCP side: one server.
#[test]
fn files_over_h3_with_aioquic_and_quic_go() {
    let Some(clients) = Clients::find() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let docs = dir.path().join("docs");
    let small = write_file(&docs, "6b.txt", b"hello\n");
    let mid = write_file(&docs, "1m.bin", &pattern_bytes(1 << 20));
    let s = H3Server::start(dir, "", DOCS_SITE);
    let big = s.dir().join("docs/100m.bin");
    write_pattern_file(&big, 100 << 20);
    let (h_small, h_mid, h_big) = (sha256_file(&small), sha256_file(&mid), sha256_file(&big));

    // aioquic: two files at once, then a key update and a fetch under the new keys, then a
    // second connection resuming TLS with the first one's ticket.
    let run = clients.aioquic(&[
        "--resume",
        "--key-update",
        &s.url("/6b.txt"),
        &s.url("/1m.bin"),
    ]);
    run.expect_bodies(&[(&s.url("/6b.txt"), &h_small), (&s.url("/1m.bin"), &h_mid)]);
    assert_eq!(run.summary("key_updates"), "1", "{run}");
    assert_eq!(run.summary("resumed"), "true", "{run}");

    // 100 concurrent streams on one connection, each answered whole.
    let run = clients.aioquic(&["--repeat", "100", &s.url("/6b.txt")]);
    assert_eq!(run.responses().len(), 100, "{run}");
    run.expect_all(&h_small);
    let streams: std::collections::HashSet<String> = run
        .responses()
        .iter()
        .map(|r| r.get("stream").to_string())
        .collect();
    assert_eq!(streams.len(), 100, "100 distinct streams: {run}");
    let urls: Vec<String> = (0..100).map(|_| s.url("/1m.bin")).collect();
    let run = clients.quic_go(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run.responses().len(), 100, "{run}");
    run.expect_all(&h_mid);

    // Small client windows: the server sends within 16 KiB of credit at a time.
    let run = clients.aioquic(&["--window", "16384", &s.url("/1m.bin")]);
    run.expect_all(&h_mid);
    let run = clients.quic_go(&["-window", "16384", &s.url("/1m.bin")]);
    run.expect_all(&h_mid);

    // 100 MB, once, and TLS resumption with quic-go.
    let run = clients.quic_go(&["-resume", &s.url("/100m.bin")]);
    run.expect_all(&h_big);
    assert_eq!(run.responses()[0].get("proto"), "HTTP/3.0", "{run}");
    assert_eq!(run.summary("resumed"), "true", "{run}");

    // The TCP side advertises the QUIC listen on the same port (spate's behaviour, after h2o's
    // directive-less default; h2o itself sends no Alt-Svc unless configured).
    if !s.is_h2o {
        let want = format!("h3=\":{}\"", s.port);
        for args in [&["-k", "--http1.1"], &["-k", "--http2"]] {
            let f = clients::curl_url(&s.url("/6b.txt"), args);
            assert_eq!(f.status, 200, "{f:?}");
            let alt = f.header("alt-svc").unwrap_or_default();
            assert!(
                alt.contains(&want),
                "{args:?}: Alt-Svc {alt:?}, want {want}"
            );
        }
    }
}

/// A spate proxy with HTTP/3 in front of a spate backend (files) and the test backend (echo):
/// proxied GETs and POST bodies byte-exact, with a small server-side input window.
#[test]
fn proxied_responses_and_post_bodies_over_h3() {
    let Some(clients) = Clients::find() else {
        return;
    };
    let back_dir = tempfile::tempdir().expect("tempdir");
    let mid = write_file(back_dir.path(), "docs/1m.bin", &pattern_bytes(1 << 20));
    let small = write_file(back_dir.path(), "docs/6b.txt", b"hello\n");
    let backend = Spate::start_in(
        "listen:\n  host: 127.0.0.1\n  port: 0\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: $DIR/docs\n",
        back_dir,
    );
    let echo = Backend::start();
    // h2o refuses a window below 417,808 bytes.
    let window = if std::env::var_os("SPATE_TESTS_H2O").is_some() {
        417_808
    } else {
        16_384
    };
    let s = H3Server::start(
        tempfile::tempdir().expect("tempdir"),
        &format!("http3-input-window-size: {window}\n"),
        &format!(
            "hosts:\n  default:\n    paths:\n      /files:\n        proxy.reverse.url: http://{}/\n      /echo:\n        proxy.reverse.url: {}\n",
            backend.addr,
            echo.url("/echo")
        ),
    );
    let (h_small, h_mid) = (sha256_file(&small), sha256_file(&mid));
    let run = clients.aioquic(&[
        "--repeat",
        "10",
        &s.url("/files/1m.bin"),
        &s.url("/files/6b.txt"),
    ]);
    assert_eq!(run.responses().len(), 20, "{run}");
    run.expect_bodies(&[
        (&s.url("/files/1m.bin"), &h_mid),
        (&s.url("/files/6b.txt"), &h_small),
    ]);
    let run = clients.quic_go(&[&s.url("/files/1m.bin"), &s.url("/files/6b.txt")]);
    run.expect_bodies(&[
        (&s.url("/files/1m.bin"), &h_mid),
        (&s.url("/files/6b.txt"), &h_small),
    ]);

    // A 3 MB POST through a small server window reaches the backend byte for byte.
    let out = s.dir().join("echo.out");
    let size = 3 << 20;
    let run = clients.aioquic(&[
        "--post",
        &size.to_string(),
        "--body-out",
        out.to_str().expect("path"),
        &s.url("/echo"),
    ]);
    assert_eq!(run.responses()[0].get("status"), "200", "{run}");
    let echoed = Echo::parse(&std::fs::read(&out).expect("echo body")).expect("an echo");
    assert_eq!(echoed.method, "POST");
    assert!(
        echoed.body == pattern_bytes(size),
        "POST body differs ({} bytes)",
        echoed.body.len()
    );
    let run = clients.quic_go(&["-post", "100000", &s.url("/echo")]);
    assert_eq!(run.responses()[0].get("status"), "200", "{run}");
}

/// `quic: {retry: ON}`: both clients see a Retry, then handshake and transfer as usual.
#[test]
fn retry_on_demand_with_both_clients() {
    let Some(clients) = Clients::find() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let small = write_file(dir.path(), "docs/6b.txt", b"hello\n");
    let s = H3Server::start_with(dir, "  quic:\n    retry: ON\n", "", DOCS_SITE);
    let h = sha256_file(&small);
    let run = clients.aioquic(&[&s.url("/6b.txt")]);
    run.expect_all(&h);
    assert_eq!(run.summary("retry"), "true", "{run}");
    let run = clients.quic_go(&[&s.url("/6b.txt")]);
    run.expect_all(&h);
    assert_eq!(run.summary("retry"), "true", "{run}");
}

/// Chromium forced onto QUIC for the test origin loads the example site; the access log shows
/// HTTP/3 for the page and every asset.
#[test]
fn chromium_loads_the_example_site_over_h3() {
    let Some(browser) = tls_support::chromium() else {
        eprintln!("SKIP: chromium is not installed (scripts/test installs it)");
        return;
    };
    let site = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/site");
    let s = H3Server::start(
        tempfile::tempdir().expect("tempdir"),
        "",
        &format!(
            "hosts:\n  default:\n    access-log:\n      path: $DIR/access.log\n      format: \"%H %s %U\"\n    paths:\n      /:\n        file.dir: {site}\n"
        ),
    );
    let spki = spki_sha256(&s.dir().join("h3.crt"));
    let origin = format!("127.0.0.1:{}", s.port);
    tls_support::chromium_screenshot_quic(browser, s.dir(), &s.url("/"), &origin, &spki);
    let fetched = ["/", "/style.css", "/logo.svg", "/app.js"];
    tls_support::expect_logged(&s.dir().join("access.log"), &fetched, "HTTP/3");
}
