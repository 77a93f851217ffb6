//! The cap on connections to a backend (`proxy.max-connections`) and the queue of requests
//! waiting for one (`proxy.queue.max`, `proxy.queue.timeout`): the cap holds under concurrent
//! clients, all of whom are served; a request that waits too long, or finds the queue full,
//! gets 503 and one log line; a client that leaves while queued frees its place.

mod common;

use common::backend::Backend;
use common::clients::h1_get;
use common::*;
use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

/// A front on one worker proxying `/` to `b` with `options` at the path level.
fn front(b: &Backend, options: &str) -> Spate {
    Spate::start(&format!(
        "
listen:
  host: 127.0.0.1
  port: 0
num-threads: 1
hosts:
  default:
    paths:
      /:
{options}
        proxy.reverse.url: {}
",
        b.url("/")
    ))
}

#[test]
fn the_cap_holds_under_concurrent_clients_and_all_are_served() {
    let b = Backend::start();
    let s = front(&b, "        proxy.max-connections: 4");
    // 40 clients at once, each answer taking 100 ms: 10 rounds on 4 connections.
    let started = Instant::now();
    let clients: Vec<_> = (0..40)
        .map(|_| {
            let addr = s.addr;
            thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(b"GET /delay?ms=100 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut out = String::new();
                std::io::Read::read_to_string(&mut c, &mut out).unwrap();
                out
            })
        })
        .collect();
    for c in clients {
        let out = c.join().unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    }
    assert!(b.accepted() <= 4, "{} backend connections", b.accepted());
    // Not one request at a time either: the queue moves as connections come back.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(b.requests(), 40);
}

#[test]
fn a_request_that_waits_too_long_gets_503_and_one_log_line() {
    let b = Backend::start();
    let s = front(
        &b,
        "        proxy.max-connections: 1\n        proxy.queue.timeout: 200",
    );
    let addr = s.addr;
    let slow = thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /delay?ms=1500 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut c, &mut out).unwrap();
        out
    });
    thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(h1_get(&s, "/text").status, 503);
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(180), "{waited:?}");
    assert!(waited < Duration::from_millis(1200), "{waited:?}");
    assert!(slow.join().unwrap().starts_with("HTTP/1.1 200"));
    let lines = s.log_lines_naming("proxy.queue.timeout", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    // The slot came back: the next request is served, on the same connection.
    assert_eq!(h1_get(&s, "/text").status, 200);
    assert_eq!(b.accepted(), 1);
}

#[test]
fn a_full_queue_answers_503_at_once() {
    let b = Backend::start();
    let s = front(
        &b,
        "        proxy.max-connections: 1\n        proxy.queue.max: 0",
    );
    let addr = s.addr;
    let slow = thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /delay?ms=1000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut c, &mut out).unwrap();
        out
    });
    thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(h1_get(&s, "/text").status, 503);
    assert!(t.elapsed() < Duration::from_millis(500));
    assert!(slow.join().unwrap().starts_with("HTTP/1.1 200"));
}

#[test]
fn a_client_that_leaves_the_queue_frees_its_place() {
    let b = Backend::start();
    let s = front(
        &b,
        "        proxy.max-connections: 1\n        proxy.queue.timeout: 3000",
    );
    let addr = s.addr;
    let slow = thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /delay?ms=800 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut c, &mut out).unwrap();
        out
    });
    thread::sleep(Duration::from_millis(200));
    // Queued behind the slow one, then gone.
    for _ in 0..5 {
        let mut c = s.connect();
        c.write_all(b"GET /text HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        thread::sleep(Duration::from_millis(50));
        drop(c);
    }
    assert!(slow.join().unwrap().starts_with("HTTP/1.1 200"));
    // Had a client gone left its place, or taken the connection with it, this would wait
    // the whole queue timeout and get 503.
    let t = Instant::now();
    assert_eq!(h1_get(&s, "/text").status, 200);
    assert!(t.elapsed() < Duration::from_millis(1000));
    assert_eq!(b.accepted(), 1);
    // The ones that left never reached the backend.
    assert_eq!(b.requests(), 2);
}
