//! Limits under load from many client addresses: a small HTTP/2 client (the `h2` crate on
//! tokio) binds each connection to its own address of 127.0.0.0/8 before connecting, which
//! h2load cannot, and drives 100 addresses at once through one `limit-req` zone; a zone
//! smaller than the addresses keeps exactly its `size` keys; HTTP/3 streams count in
//! `limit-conn` as HTTP/2's do.

mod common;
mod tls_support;

use common::backend::Backend;
use common::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The `i`th client address (0-based): 127.0.1.1, 127.0.1.2, ...
fn client_ip(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, i + 1))
}

/// Statuses of `per_conn` GETs of `path` on one HTTP/2 connection from each of `clients`
/// addresses, `in_flight` streams at a time on each.
fn h2_load_from(
    addr: SocketAddr,
    clients: u8,
    per_conn: usize,
    in_flight: usize,
    path: &str,
) -> HashMap<IpAddr, Vec<u16>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let path = path.to_string();
    rt.block_on(async move {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let mut conns = Vec::new();
                for i in 0..clients {
                    let path = path.clone();
                    conns.push(tokio::task::spawn_local(async move {
                        let from = client_ip(i);
                        let sock = tokio::net::TcpSocket::new_v4().unwrap();
                        sock.bind(SocketAddr::new(from, 0)).unwrap();
                        let tcp = sock.connect(addr).await.unwrap();
                        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
                        tokio::task::spawn_local(async move {
                            let _ = conn.await;
                        });
                        // `in_flight` streams, each asking in turn for its share.
                        let mut lanes = Vec::new();
                        for lane in 0..in_flight {
                            let (client, path) = (client.clone(), path.clone());
                            let n = per_conn / in_flight + usize::from(lane < per_conn % in_flight);
                            lanes.push(tokio::task::spawn_local(async move {
                                let mut codes = Vec::new();
                                for _ in 0..n {
                                    let mut c = client.clone().ready().await.unwrap();
                                    let req = http::Request::get(format!("http://{addr}{path}"))
                                        .body(())
                                        .unwrap();
                                    let (resp, _) = c.send_request(req, true).unwrap();
                                    let resp = resp.await.unwrap();
                                    codes.push(resp.status().as_u16());
                                    let mut body = resp.into_body();
                                    while let Some(chunk) = body.data().await {
                                        let chunk = chunk.unwrap();
                                        let _ = body.flow_control().release_capacity(chunk.len());
                                    }
                                }
                                codes
                            }));
                        }
                        let mut codes = Vec::new();
                        for l in lanes {
                            codes.extend(l.await.unwrap());
                        }
                        (from, codes)
                    }));
                }
                let mut out = HashMap::new();
                for c in conns {
                    let (from, codes) = c.await.unwrap();
                    out.insert(from, codes);
                }
                out
            })
            .await
    })
}

/// One HTTP/1.1 GET from the address `from`, on its own connection: the status.
fn get_from(addr: SocketAddr, from: IpAddr, path: &str) -> u16 {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::new(from, 0).into()).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut c: std::net::TcpStream = sock.into();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    c.write_all(req.as_bytes()).unwrap();
    let mut text = String::new();
    let _ = c.read_to_string(&mut text);
    text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// 100 addresses, 50 requests each, 10 streams at a time on each connection, through one
/// zone of 1 r/m with a burst of 9 (`nodelay`): each address has exactly 10 let through, on
/// either of the two workers, whatever the interleaving.
#[test]
fn limits_hold_for_100_client_addresses_under_load() {
    let s = Spate::start(
        "
listen: {host: 127.0.0.1, port: 0}
num-threads: 2
limit-req-zones:
  load: {key: client, rate: 1r/m, size: 1000}
hosts:
  default:
    paths:
      /load:
        limit-req: {zone: load, burst: 9, nodelay: ON}
        respond: {body: ok}
",
    );
    let addr = s.connect().peer_addr().unwrap();
    let start = std::time::Instant::now();
    let seen = h2_load_from(addr, 100, 50, 10, "/load");
    let took = start.elapsed();
    // 1 r/m drains one request in 60 s: under 6 s, none.
    assert!(took < Duration::from_secs(6), "the load took {took:?}");
    eprintln!("100 addresses x 50 requests over HTTP/2 in {took:?}");
    assert_eq!(seen.len(), 100);
    for (from, codes) in &seen {
        let passed = codes.iter().filter(|&&c| c == 200).count();
        let refused = codes.iter().filter(|&&c| c == 429).count();
        assert_eq!((passed, refused), (10, 40), "{from}: {codes:?}");
    }
}

/// A zone of 50 keys driven by 100 addresses keeps the 50 seen last: they are still over
/// their rate, the 50 before them were forgotten and start afresh (the zone's memory is
/// bounded by `size`, one line says it is full).
#[test]
fn a_zone_keeps_exactly_its_size_in_keys() {
    let s = Spate::start(
        "
listen: {host: 127.0.0.1, port: 0}
num-threads: 2
limit-req-zones:
  small: {key: client, rate: 1r/m, size: 50}
hosts:
  default:
    paths:
      /:
        limit-req: {zone: small}
        respond: {body: ok}
",
    );
    let addr = s.connect().peer_addr().unwrap();
    for i in 0..100 {
        assert_eq!(get_from(addr, client_ip(i), "/"), 200, "first of {i}");
    }
    // The last 50 are remembered (a refusal changes nothing in the zone).
    for i in 50..100 {
        assert_eq!(get_from(addr, client_ip(i), "/"), 429, "second of {i}");
    }
    // The first 50 were forgotten.
    for i in 0..50 {
        assert_eq!(
            get_from(addr, client_ip(i), "/"),
            200,
            "after eviction, {i}"
        );
    }
    let full = s.log_lines_naming("zone full (50 keys)", 1);
    assert_eq!(full.len(), 1, "{full:?}");
}

/// Four streams at once on one HTTP/3 connection through `limit-conn: 2`: two in progress,
/// two refused; the places come back when the answers are done.
#[test]
fn http3_streams_count_in_limit_conn() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let backend = Backend::start();
    let dir = tempfile::tempdir().unwrap();
    tls_support::cert(dir.path(), "a", "localhost", false);
    let s = Spate::start_in(
        &format!(
            "
num-threads: 1
limit-conn-zones:
  streams: {{key: client}}
hosts:
  localhost:
    listen: &tls
      host: 127.0.0.1
      port: 0
      ssl: {{certificate-file: a.crt, key-file: a.key}}
    listen:
      <<: *tls
      type: quic
    paths:
      /:
        limit-conn: {{zone: streams, conn: 2, status: 429}}
        proxy.reverse.url: {}
",
            backend.url("/")
        ),
        dir,
    );
    let port = s.addr.port();
    let statuses = |paths: &[&str]| -> Vec<u16> {
        let out = aioquic_run(&py, port, paths);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut codes: Vec<u16> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let at = l.find("\"status\": ").unwrap() + 10;
                l[at..at + 3].parse().unwrap()
            })
            .collect();
        codes.sort_unstable();
        codes
    };
    let slow = "/delay?ms=600";
    assert_eq!(statuses(&[slow, slow, slow, slow]), [200, 200, 429, 429]);
    let refused = s.log_lines_naming("limit-conn: refused", 2);
    assert_eq!(refused.len(), 2, "{refused:?}");
    // Given back.
    assert_eq!(statuses(&["/text", "/text"]), [200, 200]);
}
