//! Address validation under attack: a flood of QUIC Initial packets from many source ports
//! (made by quinn-proto's client, never completed) gets Retry packets once `retry-threshold`
//! handshakes are under way (`retry: auto`, the default), so spate keeps no more connection
//! states than that; a real client (aioquic) still connects. Stateless resets answer packets
//! for connection IDs nobody holds.

mod common;
mod tls_support;

use common::*;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A QUIC-only server of one file; `quic` is the listen's `quic:` mapping.
fn server(threads: usize, quic: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    write_file(dir.path(), "htdocs/index.html", b"still here\n");
    Spate::start_in(
        &format!(
            "
num-threads: {threads}
hosts:
  localhost:
    listen:
      host: 127.0.0.1
      port: 0
      type: quic
      ssl:
        certificate-file: a.crt
        key-file: a.key
      quic: {quic}
    paths:
      /:
        file.dir: htdocs
"
        ),
        dir,
    )
}

/// Makes client Initial packets (each a new connection, as a flood would send them).
struct Initials {
    endpoint: quinn_proto::Endpoint,
    config: quinn_proto::ClientConfig,
}

impl Initials {
    fn new() -> Initials {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            // The server's certificate is never looked at: no handshake gets that far.
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto =
            quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC client");
        Initials {
            endpoint: quinn_proto::Endpoint::new(
                Arc::new(quinn_proto::EndpointConfig::default()),
                None,
                true,
                None,
            ),
            config: quinn_proto::ClientConfig::new(Arc::new(crypto)),
        }
    }

    /// The first datagram of a new connection to `to`.
    fn next(&mut self, to: SocketAddr) -> Vec<u8> {
        let now = Instant::now();
        let (_, mut conn) = self
            .endpoint
            .connect(now, self.config.clone(), to, "localhost")
            .expect("connect");
        let mut buf = Vec::new();
        let t = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
        buf.truncate(t.size);
        buf
    }
}

/// What the server sent back to one flood socket first.
#[derive(Debug, PartialEq, Clone, Copy)]
enum Reply {
    /// A Retry packet (QUIC v1 long header, type 3): no state kept.
    Retry,
    /// Its handshake (Initial, type 0): a connection state.
    Handshake,
}

fn classify(d: &[u8]) -> Option<Reply> {
    let first = *d.first()?;
    if first & 0x80 == 0 {
        return None;
    }
    // The fixed bit (0x40) may be greased (RFC 9287): only the form and type bits count.
    match (first >> 4) & 3 {
        3 => Some(Reply::Retry),
        0 => Some(Reply::Handshake),
        _ => None,
    }
}

/// Sends `n` Initial packets to `to`, each from a socket of its own (its own source port), in
/// waves of 20 whose replies are awaited before the next (so the socket buffers drop none),
/// and returns the first reply each got.
fn flood(to: SocketAddr, n: usize) -> Vec<Reply> {
    let mut initials = Initials::new();
    let mut replies = Vec::new();
    let mut keep = Vec::new();
    for wave in 0..n.div_ceil(20) {
        let socks: Vec<UdpSocket> = (wave * 20..n.min(wave * 20 + 20))
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
                s.set_read_timeout(Some(Duration::from_millis(100)))
                    .expect("timeout");
                s.send_to(&initials.next(to), to).expect("send");
                s
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut buf = [0u8; 2048];
        for s in &socks {
            loop {
                assert!(Instant::now() < deadline, "no reply to an Initial");
                if let Ok((len, _)) = s.recv_from(&mut buf) {
                    if let Some(r) = classify(&buf[..len]) {
                        replies.push(r);
                        break;
                    }
                }
            }
        }
        // Kept open: the server's handshakes stay under way (unanswered) meanwhile.
        keep.extend(socks);
    }
    replies
}

fn count(replies: &[Reply], r: Reply) -> usize {
    replies.iter().filter(|x| **x == r).count()
}

#[test]
fn a_flood_of_initials_gets_retries_past_the_threshold_and_a_client_still_connects() {
    let threads = 2;
    let s = server(threads, "{retry: auto, retry-threshold: 30}");
    let replies = flood(s.addr, 120);
    let (states, retries) = (
        count(&replies, Reply::Handshake),
        count(&replies, Reply::Retry),
    );
    // Each worker reads the count before it accepts: they may both pass it at once.
    assert!(
        (30..=30 + threads).contains(&states),
        "{states} connection states for a threshold of 30 ({retries} retries)"
    );
    assert_eq!(states + retries, 120);
    let Some(py) = common::aioquic_python() else {
        return;
    };
    // While those 30 handshakes are under way, a real client is sent a Retry, answers it
    // and is served.
    let out = common::aioquic_run(&py, s.addr.port(), &["/index.html"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("\"status\": 200"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn retry_off_keeps_a_state_for_every_initial_and_on_none() {
    let off = server(1, "{retry: OFF, retry-threshold: 5}");
    let replies = flood(off.addr, 20);
    assert_eq!(count(&replies, Reply::Handshake), 20, "{replies:?}");
    let on = server(1, "{retry: ON}");
    let replies = flood(on.addr, 20);
    assert_eq!(count(&replies, Reply::Retry), 20, "{replies:?}");
}

#[test]
fn a_packet_for_an_unknown_connection_id_gets_a_stateless_reset() {
    let s = server(1, "{}");
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // A short-header packet of 100 bytes for an 8-byte connection ID nobody issued.
    let packet = |cid: u8| {
        let mut p = vec![0x40];
        p.extend_from_slice(&[cid, 0x5a, 0x17, 0x99, 0x03, 0x42, 0x61, 0x7e]);
        p.resize(100, 0x33);
        p
    };
    // The token is the reset's last 16 bytes, derived from the connection ID.
    let reset_for = |cid: u8| -> Vec<u8> {
        // quinn sends at most one reset per 20 ms: ask again until one comes.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 2048];
        loop {
            assert!(Instant::now() < deadline, "no stateless reset");
            sock.send_to(&packet(cid), s.addr).expect("send");
            if let Ok((len, _)) = sock.recv_from(&mut buf) {
                let d = &buf[..len];
                // RFC 9000 10.3: looks like a short header, shorter than what incited it,
                // at least 21 bytes.
                assert_eq!(d[0] & 0xc0, 0x40, "{d:?}");
                assert!((21..100).contains(&len), "{len}");
                return d[len - 16..].to_vec();
            }
        }
    };
    let a = reset_for(1);
    assert_eq!(reset_for(1), a, "the same connection ID, the same token");
    assert_ne!(reset_for(2), a);
}

/// `retry-rate`: with `retry: auto` and a threshold the flood never reaches, the handshakes
/// begun in one second past the rate get a Retry. No speed is assumed: however slowly the
/// Initials went out, no more states were made than the rate allows for the seconds it took;
/// Retries are required only when the whole flood took less than the seconds the rate's
/// states would need.
#[test]
fn handshakes_begun_past_retry_rate_in_a_second_get_retries() {
    let (rate, sent) = (5, 40);
    let s = server(
        1,
        &format!("{{retry: auto, retry-threshold: 1000, retry-rate: {rate}}}"),
    );
    let start = Instant::now();
    let replies = flood(s.addr, sent);
    let took = start.elapsed().as_secs() as usize;
    let states = count(&replies, Reply::Handshake);
    assert_eq!(states + count(&replies, Reply::Retry), sent);
    assert!(
        states <= rate * (took + 2),
        "{states} connection states in {took} s for a rate of {rate} a second"
    );
    if rate * (took + 2) < sent {
        assert!(states < sent, "no Retry: {replies:?}");
    }
}

/// `max-initial-handshake-packets` (h2o's): a client that never completes its handshake but
/// sends its Initial again whenever the server speaks (so the anti-amplification limit, which
/// alone stops the server after three datagrams to a silent client, keeps being lifted) keeps
/// the server repeating its first flight; past the limit the connection is dropped, said once
/// in the log. A real client's whole handshake stays under the same limit.
#[test]
fn a_handshake_that_makes_us_send_past_the_limit_is_dropped() {
    let s = server(1, "{retry: OFF, max-initial-handshake-packets: 4}");
    let mut initials = Initials::new();
    let initial = initials.next(s.addr);
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    sock.send_to(&initial, s.addr).expect("send");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 2048];
    let mut got = 0;
    let line = loop {
        assert!(
            Instant::now() < deadline,
            "not dropped ({got} datagrams from the server)"
        );
        if sock.recv_from(&mut buf).is_ok() {
            got += 1;
            sock.send_to(&initial, s.addr).expect("send");
        }
        if let Some(l) = s
            .stderr_lines()
            .into_iter()
            .find(|l| l.contains("max-initial-handshake-packets"))
        {
            break l;
        }
    };
    assert!(line.contains("QUIC connection dropped"), "{line}");
    assert!(got >= 1, "the server never answered");
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let out = common::aioquic_run(&py, s.addr.port(), &["/index.html"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("\"status\": 200"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
