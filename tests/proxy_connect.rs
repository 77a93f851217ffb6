//! `proxy.connect` (h2o's CONNECT proxy), against a real spate: tunnels over HTTP/1.1
//! (curl `-p -x`) and HTTP/2 (a classic CONNECT stream) to a local echo server and a local
//! HTTP server; targets the access list refuses get 403, as h2o answers.

mod common;

use common::backend::Backend;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// A TCP server that sends back what it reads, one thread per connection.
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn start(allowed: &[u16]) -> Spate {
    let mut acl = String::new();
    for p in allowed {
        acl.push_str(&format!("          - \"+127.0.0.1:{p}\"\n"));
    }
    Spate::start(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      "/":
        proxy.connect:
{acl}          - "-*"
"#
    ))
}

fn curl_through(s: &Spate, url: &str) -> (String, String) {
    let proxy = format!("http://{}", s.addr);
    let out = curl(&["-sv", "-p", "-x", &proxy, url]);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn http1_connect_tunnels_to_an_allowed_http_server() {
    if !have("curl") {
        eprintln!("skipped: no curl");
        return;
    }
    let backend = Backend::start();
    let s = start(&[backend.port()]);
    let (body, verbose) = curl_through(&s, &backend.url("/text"));
    assert_eq!(body, "hello from the backend\n", "{verbose}");
    assert!(
        verbose.contains("CONNECT tunnel established, response 200")
            || verbose.contains("Proxy replied 200 to CONNECT"),
        "{verbose}"
    );
    // A name is resolved, and the list decides on the address it resolves to.
    let by_name = format!("http://localhost:{}/text", backend.port());
    let (body, verbose) = curl_through(&s, &by_name);
    assert_eq!(body, "hello from the backend\n", "{verbose}");
}

#[test]
fn http1_connect_to_a_refused_target_gets_403() {
    if !have("curl") {
        eprintln!("skipped: no curl");
        return;
    }
    let backend = Backend::start();
    let other = Backend::start();
    let s = start(&[backend.port()]);
    let (_, verbose) = curl_through(&s, &other.url("/text"));
    assert!(
        verbose.contains("CONNECT tunnel failed, response 403")
            || verbose.contains("Received HTTP code 403 from proxy after CONNECT"),
        "{verbose}"
    );
    assert_eq!(other.requests(), 0);
    // An unreachable allowed target is the gateway's failure: 502.
    let dead = DeadPort::new();
    let s = start(&[dead.port]);
    let (_, verbose) = curl_through(&s, &format!("http://127.0.0.1:{}/", dead.port));
    assert!(verbose.contains("502"), "{verbose}");
}

#[test]
fn http1_connect_carries_raw_bytes_both_ways() {
    let echo = echo_server();
    let s = start(&[echo.port()]);
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        c,
        "CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\nearly bytes|"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"early bytes|") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    let head_end = text.find("\r\n\r\n").unwrap();
    let head = text[..head_end].to_ascii_lowercase();
    assert!(
        !head.contains("content-length") && !head.contains("transfer-encoding"),
        "{head}"
    );
    c.write_all(b"later bytes").unwrap();
    let mut more = Vec::new();
    while more.len() < b"later bytes".len() {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        more.extend_from_slice(&buf[..n]);
    }
    assert_eq!(more, b"later bytes");
}

#[test]
fn http2_connect_tunnels_and_refuses_as_h2o() {
    let echo = echo_server();
    let s = start(&[echo.port()]);
    let addr = s.addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let run = async {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (client, conn) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(async move {
                let _ = conn.await;
            });
            // Allowed: 200, then the echo of what the stream carries.
            let mut client = client.ready().await.unwrap();
            let req = http::Request::builder()
                .method("CONNECT")
                .uri(echo.to_string())
                .body(())
                .unwrap();
            let (resp, mut send) = client.send_request(req, false).unwrap();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), 200);
            send.send_data(bytes::Bytes::from_static(b"over h2"), false)
                .unwrap();
            let mut body = resp.into_body();
            let mut got = Vec::new();
            while got.len() < 7 {
                let chunk = body.data().await.expect("data").unwrap();
                let _ = body.flow_control().release_capacity(chunk.len());
                got.extend_from_slice(&chunk);
            }
            assert_eq!(got, b"over h2");
            // Refused: 403.
            let mut client = client.ready().await.unwrap();
            let req = http::Request::builder()
                .method("CONNECT")
                .uri("127.0.0.1:1")
                .body(())
                .unwrap();
            let (resp, _send) = client.send_request(req, false).unwrap();
            assert_eq!(resp.await.unwrap().status(), 403);
        };
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("HTTP/2 CONNECT took over 30 s");
    });
}

#[test]
fn h2o_s_connect_configuration_runs_unchanged() {
    let (ok, _, err) = check_config(
        r#"
listen: 18571
hosts:
  default:
    paths:
      "/":
        proxy.connect:
          - "-192.168.0.0/24"
          - "+*:443"
          - "+10.0.0.0/8:80-443"
          - "+[::1]:443"
        proxy.timeout.io: 2000
"#,
    );
    assert!(ok, "{err}");
    let (ok, _, err) = check_config(
        r#"
listen: 18571
hosts:
  default:
    paths:
      "/":
        proxy.connect:
          - "127.0.0.1"
"#,
    );
    assert!(!ok);
    assert!(
        err.contains(":8: proxy.connect: \"127.0.0.1\" must start with + (allow) or - (deny)"),
        "{err}"
    );
}

#[test]
fn h2o_s_masque_and_http3_ratio_are_accepted_with_a_warning() {
    // t/50connect-proxy-status.t's configuration, and t/40tunnel-udp.t's proxy.http3.ratio.
    let (ok, _, err) = check_config(
        r#"
listen: 18571
proxy.proxy-status.identity: "h2o/test"
hosts:
  default:
    paths:
      "/":
        proxy.connect:
          - "+127.0.0.1:18572"
          - "+127.0.0.1:1"
        proxy.connect.emit-proxy-status: ON
        proxy.connect.masque-draft-03: ON
      "/p":
        proxy.reverse.url: http://127.0.0.1:18572/
        proxy.http3.ratio: 100
"#,
    );
    assert!(ok, "{err}");
    for name in ["proxy.connect.masque-draft-03", "proxy.http3.ratio"] {
        assert!(
            err.contains(&format!("{name} tunes h2o's internals and is ignored")),
            "{name}: {err}"
        );
    }
    // The Proxy-Status directives are implemented now: no warning for them.
    for name in [
        "proxy.proxy-status.identity",
        "proxy.connect.emit-proxy-status",
    ] {
        assert!(!err.contains(name), "{name}: {err}");
    }
}

#[test]
fn a_proxy_status_identity_must_be_printable_ascii() {
    let (ok, _, err) = check_config(
        "listen: 18571\nproxy.proxy-status.identity: \"caf\u{e9}\"\nhosts:\n  default:\n    paths:\n      /:\n        proxy.connect: [\"-*\"]\n",
    );
    assert!(!ok);
    assert!(
        err.contains(":2:") && err.contains("printable ASCII"),
        "{err}"
    );
}

/// A spate as t/50connect-proxy-status.t's h2o: `Proxy-Status` on, with an identity.
fn start_with_proxy_status(allowed: &[u16]) -> Spate {
    let mut acl = String::new();
    for p in allowed {
        acl.push_str(&format!("          - \"+127.0.0.1:{p}\"\n"));
    }
    Spate::start(&format!(
        r#"
proxy.proxy-status.identity: "h2o/test"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      "/":
        proxy.connect:
{acl}          - "-*"
        proxy.connect.emit-proxy-status: ON
"#
    ))
}

fn proxy_status_line(verbose: &str) -> Option<&str> {
    verbose
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("< proxy-status:"))
        .map(|l| l.trim_end())
}

#[test]
fn proxy_status_names_each_outcome_as_h2o() {
    if !have("curl") {
        eprintln!("skipped: no curl");
        return;
    }
    let backend = Backend::start();
    let dead = DeadPort::new();
    let s = start_with_proxy_status(&[backend.port(), dead.port]);

    // Tunnelled: the address connected to.
    let (body, verbose) = curl_through(&s, &backend.url("/text"));
    assert_eq!(body, "hello from the backend\n", "{verbose}");
    assert_eq!(
        proxy_status_line(&verbose),
        Some("< proxy-status: h2o/test; next-hop=\"127.0.0.1\""),
        "{verbose}"
    );

    // Refused by the list.
    let (_, verbose) = curl_through(&s, "https://8.8.8.8/");
    assert!(verbose.contains("403"), "{verbose}");
    assert_eq!(
        proxy_status_line(&verbose),
        Some("< proxy-status: h2o/test; error=destination_ip_prohibited"),
        "{verbose}"
    );

    // A name that does not resolve (.invalid never does, RFC 6761).
    let (_, verbose) = curl_through(&s, "https://doesnotexist.invalid./");
    assert!(verbose.contains("502"), "{verbose}");
    let line = proxy_status_line(&verbose).unwrap_or_default();
    assert!(
        line.starts_with("< proxy-status: h2o/test; error=dns_error; rcode=\"")
            && line.contains("; details=\""),
        "{verbose}"
    );

    // Allowed, but nothing listens there.
    let (_, verbose) = curl_through(&s, &format!("https://127.0.0.1:{}/", dead.port));
    assert!(verbose.contains("502"), "{verbose}");
    assert_eq!(
        proxy_status_line(&verbose),
        Some("< proxy-status: h2o/test; error=connection_refused; next-hop=\"127.0.0.1\""),
        "{verbose}"
    );
    // A target that is not host:port is refused by the HTTP/1.1 parser before any handler
    // (400 without the field; h2o's handler answers it with error=http_request_error).
}

#[test]
fn no_proxy_status_unless_asked() {
    if !have("curl") {
        eprintln!("skipped: no curl");
        return;
    }
    let backend = Backend::start();
    let s = start(&[backend.port()]);
    let (_, verbose) = curl_through(&s, "https://8.8.8.8/");
    assert!(verbose.contains("403"), "{verbose}");
    assert_eq!(proxy_status_line(&verbose), None, "{verbose}");
}
