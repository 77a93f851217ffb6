//! HTTP/2 over TLS (ALPN h2): curl `--http2`, h2load on https and h2spec `-t -k`.

mod common;
mod tls_support;

use common::*;
use std::process::Command;
use std::time::Duration;
use tls_support::*;

fn server() -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    cert(dir.path(), "a", "localhost", false);
    write_file(dir.path(), "htdocs/index.html", b"<h1>h2 over tls</h1>\n");
    write_file(dir.path(), "htdocs/4k.bin", &[b'y'; 4096]);
    write_file(dir.path(), "htdocs/big.bin", &patterned(1_000_000));
    write_file(dir.path(), "htdocs/mid.bin", &patterned(150_000));
    Spate::start_in(CONF, dir)
}

const CONF: &str = "
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: a.crt
    key-file: a.key
num-threads: 1
hosts:
  localhost:
    paths:
      /:
        file.dir: htdocs
";

#[test]
fn curl_negotiates_http2_and_http11() {
    if !need("curl") {
        return;
    }
    let s = server();
    let url = format!("https://127.0.0.1:{}/", s.addr.port());
    let out = curl(&["-k", "-i", "--http2", &url]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/2 200"), "{text}");
    assert!(text.ends_with("<h1>h2 over tls</h1>\n"), "{text}");
    let out = curl(&["-k", "-i", "--http1.1", &url]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

/// Bytes that show any reordering or loss.
fn patterned(len: u32) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

/// A turn's output is encrypted whole and written at once up to a limit, and in parts beyond
/// it: bodies larger than that limit, near it and small ones, multiplexed on one connection,
/// arrive byte for byte.
#[test]
fn large_and_multiplexed_responses_arrive_intact() {
    if !need("curl") {
        return;
    }
    let s = server();
    let mut wanted = vec![
        ("big.bin", patterned(1_000_000)),
        ("mid.bin", patterned(150_000)),
    ];
    wanted.extend((0..10).map(|_| ("4k.bin", vec![b'y'; 4096])));
    let mut args: Vec<String> = ["-k", "--http2", "--parallel", "--parallel-max", "20"]
        .map(String::from)
        .to_vec();
    for (i, (name, _)) in wanted.iter().enumerate() {
        args.push("-o".into());
        args.push(s.path().join(format!("got{i}")).display().to_string());
        args.push(format!("https://127.0.0.1:{}/{name}", s.addr.port()));
    }
    let out = curl(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{out:?}");
    for (i, (name, body)) in wanted.iter().enumerate() {
        let got = std::fs::read(s.path().join(format!("got{i}"))).expect("read");
        assert!(
            got == *body,
            "{name}: {} bytes, want {}",
            got.len(),
            body.len()
        );
    }
}

#[test]
fn h2load_over_tls_has_no_errors() {
    if !need("h2load") {
        return;
    }
    let s = server();
    let url = format!("https://127.0.0.1:{}/4k.bin", s.addr.port());
    let out = Command::new("h2load")
        .args(["-n", "2000", "-c", "10", "-m", "10", &url])
        .output()
        .expect("run h2load");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2000 succeeded, 0 failed, 0 errored, 0 timeout"),
        "{text}"
    );
    assert!(text.contains("Application protocol: h2"), "{text}");
}

#[test]
fn h2spec_over_tls_passes_every_test() {
    let home = std::env::var("HOME").unwrap_or_default();
    let bin = if have("h2spec") {
        "h2spec".to_string()
    } else {
        format!("{home}/go/bin/h2spec")
    };
    if !std::path::Path::new(&bin).exists() && !have("h2spec") {
        eprintln!("h2spec not installed: skipping (scripts/test installs it)");
        return;
    }
    let s = server();
    let port = s.addr.port().to_string();
    let out = Command::new(bin)
        .args(["-t", "-k", "-h", "127.0.0.1", "-p", &port, "-o", "5"])
        .output()
        .expect("run h2spec");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().last().unwrap_or_default();
    assert!(
        summary.contains("145 passed") && summary.contains("0 failed"),
        "{summary}\n{}",
        text.lines()
            .filter(|l| !l.contains('✔'))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A parked TLS connection (see tests/h2.rs) wakes on the records the client sends and
/// decodes them against the HPACK tables it kept.
#[test]
fn a_parked_tls_connection_serves_requests_that_refer_to_its_hpack_tables() {
    let s = server();
    let addr = s.addr;
    runtime().block_on(async move {
        let tls = h2_connect(&s).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let url = format!("https://localhost:{}/index.html", addr.port());
        common::clients::h2_requests_across_parking(tls, &url, b"<h1>h2 over tls</h1>\n").await;
    });
}

/// The server's preface waits for the client's (which clients send first without waiting)
/// and goes out with the answer to it: nothing arrives before the client's preface, then the
/// server's SETTINGS, then the ACK of the client's.
#[test]
fn the_servers_settings_answer_the_clients_preface() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = server();
    runtime().block_on(async move {
        let mut tls = h2_connect(&s).await;
        let mut buf = [0u8; 256];
        let early = tokio::time::timeout(Duration::from_millis(300), tls.read(&mut buf)).await;
        assert!(
            early.is_err(),
            "nothing before the client's preface: {early:?}"
        );
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        // SETTINGS first, then (after the window update) the ACK of the client's.
        let ack = [0u8, 0, 0, 4, 1, 0, 0, 0, 0];
        let mut got = Vec::new();
        while !got.windows(9).any(|w| w == ack) {
            let n = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "closed: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!((got[3], got[4]), (4, 0), "SETTINGS first: {got:?}");
    });
}

/// As `h2::bodies_spliced_into_the_output_arrive_intact`, over TLS: the records span the
/// frames and the bodies spliced between them.
#[test]
fn bodies_spliced_into_the_output_arrive_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    cert(dir.path(), "a", "localhost", false);
    let (s, files, order) = clients::start_for_splicing(CONF, dir, "htdocs");
    let urls: Vec<String> = order
        .iter()
        .map(|&k| format!("https://localhost:{}/{}", s.addr.port(), files[k].0))
        .collect();
    let bodies = runtime().block_on(async {
        let tls = h2_connect(&s).await;
        clients::h2_get_all(tls, &urls).await
    });
    clients::assert_bodies_are_the_files(&bodies, &order, &files);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A TLS connection to `s` that trusts its certificate and offers ALPN h2 only.
async fn h2_connect(s: &Spate) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls_pki_types::pem::PemObject;
    let ca = std::fs::read(s.dir.path().join("a.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await.unwrap()
}
