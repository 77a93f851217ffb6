//! QUIC connection migration (NAT rebinding, issue 43), after the idea of h2o's test with a UDP
//! relay: an aioquic client downloads a file from spate through a relay on loopback that moves
//! its server-side socket to a new source port every 256 KiB the server sent it, closing the
//! old one, as a NAT that forgot its mapping would. The download completes byte-exact, and
//! spate's metrics count a migration for every move.
//!
//! With two worker threads the new 4-tuple lands on either worker's socket (SO_REUSEPORT
//! hashes it); a datagram that reaches the worker not owning its connection is forwarded to
//! the owner by the endpoint tag in its connection ID (`server/quic/route.rs`). Over some 30
//! moves the odds that none lands on the other worker are 2^-30, so the test also checks that
//! the forwarding path carried datagrams. A third run changes the client's IP as well
//! (127.0.0.1 and 127.0.0.2 in turn), which quinn treats as a new path rather than a rebinding.
//!
//! The other QUIC counters of the status and metrics pages are checked here too: Retry sent and
//! stateless resets (a packet for a connection nobody has).

mod common;
mod h3_support;
mod tls_support;

use common::*;
use h3_support::*;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes from the server on one relay socket after which the relay moves to a new one.
const MOVE_EVERY: u64 = 256 << 10;
/// The download: 8 MiB, about 30 moves.
const FILE_SIZE: usize = 8 << 20;

#[test]
fn a_download_survives_nat_rebinding_on_one_worker() {
    rebinding_download(1, false);
}

#[test]
fn a_download_survives_nat_rebinding_across_two_workers() {
    rebinding_download(2, false);
}

/// The client's address changes too (127.0.0.1 and 127.0.0.2 in turn): quinn starts each new
/// path afresh (RTT, congestion window) instead of keeping the old one's, as for a rebinding.
#[test]
fn a_download_survives_address_changes_across_two_workers() {
    rebinding_download(2, true);
}

fn rebinding_download(threads: usize, change_ip: bool) {
    let Some(clients) = Clients::find() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("docs/8m.bin");
    write_pattern_file(&big, FILE_SIZE);
    let want = sha256_file(&big);
    let site = "hosts:\n  default:\n    paths:\n      /metrics:\n        metrics: ON\n      /status:\n        status: ON\n      /:\n        file.dir: $DIR/docs\n";
    let s = H3Server::start(dir, &format!("num-threads: {threads}\n"), site);
    if s.is_h2o {
        // h2o has no Prometheus page to count the moves with.
        return;
    }

    let relay = Relay::start(SocketAddr::from(([127, 0, 0, 1], s.port)), change_ip);
    let url = format!("https://127.0.0.1:{}/8m.bin", relay.port);
    // A client that pings every 50 ms (see tests/h3/keepalive_get.py for why).
    let run = clients.python_script("keepalive_get.py", &[&url]);
    let moves = relay.stop();
    run.expect_all(&want);
    assert!(moves >= 8, "the relay moved only {moves} times");

    // Every move made spate send from its new address: each is a migration. Other workers
    // publish their counters every 200 ms: poll.
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let (status, text) = curl_status(&[&s.url("/metrics")]);
        assert_eq!(status, 200, "{text}");
        let m = Metrics(text);
        let done = m.get("spate_quic_migrations_total") >= moves
            && m.get("spate_quic_lost_packets_total") > 0
            && (threads == 1 || m.get("spate_quic_forwarded_datagrams_total") > 0);
        if done || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "{threads} worker(s), new IPs {change_ip}: {moves} moves; migrations {}, forwarded {}, lost {} of {} packets",
        metrics.get("spate_quic_migrations_total"),
        metrics.get("spate_quic_forwarded_datagrams_total"),
        metrics.get("spate_quic_lost_packets_total"),
        metrics.get("spate_quic_sent_packets_total"),
    );
    assert!(
        metrics.get("spate_quic_migrations_total") >= moves,
        "{moves} moves: {}",
        metrics.0
    );
    assert!(
        metrics.get("spate_quic_handshakes_total") >= 1,
        "{}",
        metrics.0
    );
    // The packets sent to a socket the relay had closed were lost, and counted when the
    // connection ended.
    assert!(
        metrics.get("spate_quic_lost_packets_total") > 0,
        "{}",
        metrics.0
    );
    if threads == 1 {
        assert_eq!(metrics.get("spate_quic_forwarded_datagrams_total"), 0);
    } else {
        assert!(
            metrics.get("spate_quic_forwarded_datagrams_total") > 0,
            "no datagram reached the other worker in {moves} moves: {}",
            metrics.0
        );
    }

    // The same counters on the status page (h2o's JSON, with a `quic` section).
    let status = QuicStatus::read(&s);
    assert!(status.get("migrations") >= moves, "{}", status.0);
    assert!(status.get("handshakes") >= 1, "{}", status.0);
    assert!(status.get("accepted") >= 1, "{}", status.0);
}

/// Retry sent (`quic: {retry: ON}`) and a stateless reset answering a short-header packet of a
/// connection ID nobody issued: counted on both pages, and the Prometheus text parses.
#[test]
fn retries_and_stateless_resets_are_counted() {
    let Some(clients) = Clients::find() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(&dir.path().join("docs"), "6b.txt", b"hello\n");
    let site = "hosts:\n  default:\n    paths:\n      /metrics:\n        metrics: ON\n      /status:\n        status: ON\n      /:\n        file.dir: $DIR/docs\n";
    let s = H3Server::start_with(dir, "  quic:\n    retry: ON\n", "", site);
    if s.is_h2o {
        return;
    }
    let run = clients.aioquic(&[&s.url("/6b.txt")]);
    assert_eq!(run.summary("retry"), "true", "{run}");

    // A short-header packet (fixed bit set) of 100 bytes for an unknown connection ID: quinn
    // answers with a stateless reset, shorter than what incited it. Sent again until answered
    // (quinn sends at most one reset per 20 ms; UDP may drop).
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.connect(("127.0.0.1", s.port)).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut packet = vec![0x41u8];
    packet.extend_from_slice(&[0xee, 0x77, 1, 2, 3, 4, 5, 6]);
    packet.resize(100, 0x5a);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 2048];
    let reset = loop {
        sock.send(&packet).expect("send");
        if let Ok(n) = sock.recv(&mut buf) {
            break buf[..n].to_vec();
        }
        assert!(Instant::now() < deadline, "no stateless reset came back");
    };
    assert_eq!(reset[0] & 0xc0, 0x40, "a short header: {reset:02x?}");
    assert!(
        reset.len() < packet.len() && reset.len() >= 21,
        "{}",
        reset.len()
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    let m = loop {
        let (status, text) = curl_status(&[&s.url("/metrics")]);
        assert_eq!(status, 200, "{text}");
        let m = Metrics(text);
        if (m.get("spate_quic_retries_sent_total") >= 1
            && m.get("spate_quic_stateless_resets_sent_total") >= 1)
            || Instant::now() > deadline
        {
            break m;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(m.get("spate_quic_retries_sent_total") >= 1, "{}", m.0);
    assert!(
        m.get("spate_quic_stateless_resets_sent_total") >= 1,
        "{}",
        m.0
    );
    assert!(m.get("spate_quic_handshakes_total") >= 1, "{}", m.0);
    assert_eq!(m.get("spate_quic_migrations_total"), 0, "{}", m.0);
    let samples = common::prometheus::parse_prometheus(&m.0);
    assert_eq!(
        common::prometheus::sample(&samples, "spate_quic_retries_sent_total{}"),
        m.get("spate_quic_retries_sent_total") as f64
    );

    let status = QuicStatus::read(&s);
    assert!(status.get("retries-sent") >= 1, "{}", status.0);
    assert!(status.get("stateless-resets-sent") >= 1, "{}", status.0);
    assert_eq!(status.get("0rtt-accepted"), 0, "{}", status.0);
}

/// The status page's JSON; `get` reads a number of its `quic` section.
struct QuicStatus(String);

impl QuicStatus {
    fn read(s: &H3Server) -> QuicStatus {
        let (status, json) = curl_status(&[&s.url("/status")]);
        assert_eq!(status, 200, "{json}");
        QuicStatus(json)
    }

    fn get(&self, name: &str) -> u64 {
        let json = &self.0;
        json.split_once("\"quic\": {")
            .and_then(|(_, q)| q.split_once(&format!("\"{name}\": ")))
            .and_then(|(_, v)| v.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the quic section: {json}"))
    }
}

/// The Prometheus text of the metrics page; unlabelled counters are read.
struct Metrics(String);

impl Metrics {
    fn get(&self, name: &str) -> u64 {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    }
}

/// A UDP relay between one client and the server: the client talks to `port`; the relay talks
/// to the server from a socket it replaces by a new one (a new source port) once the server sent
/// `MOVE_EVERY` bytes on the current one. The move happens as the client's next packet goes
/// out, so the server hears from the new port at once, as after a NAT rebinding under a
/// client that keeps acknowledging (a client that sent nothing after its mapping changed
/// would be unreachable). The old socket is closed: what the server still sends there is lost.
struct Relay {
    port: u16,
    stop: Arc<AtomicBool>,
    moves: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Relay {
    /// With `change_ip`, each new socket is on the other of 127.0.0.1 and 127.0.0.2.
    fn start(server: SocketAddr, change_ip: bool) -> Relay {
        let front = Arc::new(UdpSocket::bind("127.0.0.1:0").expect("bind relay"));
        let port = front.local_addr().expect("relay addr").port();
        // A short read timeout lets each thread see the stop flag and the new socket.
        let tick = Some(Duration::from_millis(20));
        front.set_read_timeout(tick).expect("timeout");
        let back = Arc::new(Mutex::new(Arc::new(connected_socket(1, server, tick))));
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let moves = Arc::new(AtomicU64::new(0));
        // Bytes the server sent since the last move.
        let since_move = Arc::new(AtomicU64::new(0));

        // Client to server, through the current socket; moves first when it is time.
        let up = {
            let (front, back, client, stop, moves, since_move) = (
                front.clone(),
                back.clone(),
                client.clone(),
                stop.clone(),
                moves.clone(),
                since_move.clone(),
            );
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = front.recv_from(&mut buf) else {
                        continue;
                    };
                    *client.lock().expect("lock") = Some(from);
                    if since_move.load(Ordering::Relaxed) >= MOVE_EVERY {
                        since_move.store(0, Ordering::Relaxed);
                        // The old socket closes once the other thread lets go of it.
                        let moved = moves.fetch_add(1, Ordering::Relaxed) + 1;
                        let host = if change_ip { 1 + moved as u8 % 2 } else { 1 };
                        *back.lock().expect("lock") =
                            Arc::new(connected_socket(host, server, tick));
                    }
                    let sock = back.lock().expect("lock").clone();
                    let _ = sock.send(&buf[..n]);
                }
            })
        };
        // Server to client, from the current socket.
        let down = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    let sock = back.lock().expect("lock").clone();
                    let Ok(n) = sock.recv(&mut buf) else {
                        continue;
                    };
                    if let Some(to) = *client.lock().expect("lock") {
                        let _ = front.send_to(&buf[..n], to);
                    }
                    since_move.fetch_add(n as u64, Ordering::Relaxed);
                }
            })
        };
        Relay {
            port,
            stop,
            moves,
            threads: vec![up, down],
        }
    }

    /// Stops the relay; returns how many times it moved.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().expect("relay thread");
        }
        self.moves.load(Ordering::Relaxed)
    }
}

/// A socket on 127.0.0.`host`, a port the kernel picks, sending to `server`.
fn connected_socket(host: u8, server: SocketAddr, timeout: Option<Duration>) -> UdpSocket {
    let s =
        UdpSocket::bind((std::net::Ipv4Addr::new(127, 0, 0, host), 0)).expect("bind relay socket");
    s.connect(server).expect("connect relay socket");
    s.set_read_timeout(timeout).expect("timeout");
    s
}
