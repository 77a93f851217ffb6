//! The `status` handler's `requests` section (h2o's `/json?show=requests`): the requests in
//! flight on every worker, over HTTP/1.1 and HTTP/2, against a real spate and a backend that
//! holds its answer.

mod common;

use common::backend::Backend;
use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start(backend: &Backend) -> Spate {
    Spate::start(&format!(
        r#"
listen: {{host: 127.0.0.1, port: 0}}
num-threads: 2
hosts:
  default:
    paths:
      /slow:
        proxy.reverse.url: {}
      /s:
        status: ON
"#,
        backend.url("/")
    ))
}

/// The `requests` section's entry naming `needle`, once it shows (polled: the request is in
/// flight as soon as spate routed it, which the client cannot see).
fn listed(s: &Spate, needle: &str) -> String {
    listed_in(s, needle, "")
}

/// [`listed`], once its entry shows `state` too (a request moves from one to the next).
fn listed_in(s: &Spate, needle: &str, state: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = get(s, "/s/json?show=requests");
        assert_eq!(page.status, 200);
        let text = page.text();
        if let Some(entry) = text
            .lines()
            .find(|l| l.contains(needle) && l.contains(state))
        {
            return entry.to_owned();
        }
        assert!(Instant::now() < deadline, "{needle} never listed: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone(s: &Spate, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(s, "/s/json?show=requests").text().contains(needle) {
        assert!(Instant::now() < deadline, "{needle} still listed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn held_h2(s: &Spate, path: &str, host: &str) -> Child {
    Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--http2-prior-knowledge", "-H"])
        .arg(format!("Host: {host}"))
        .arg(s.url(path))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("curl")
}

#[test]
fn a_held_http1_request_is_listed_with_its_method_path_protocol_and_host() {
    let backend = Backend::start();
    let s = start(&backend);
    let mut held = TcpStream::connect(s.addr).unwrap();
    held.write_all(
        b"GET /slow/delay?ms=60000 HTTP/1.1\r\nHost: held.example\r\nUser-Agent: t/h1\r\n\r\n",
    )
    .unwrap();
    let entry = listed(&s, "\"/slow/delay\"");
    for want in [
        "\"method\": \"GET\"",
        "\"path\": \"/slow/delay\"",
        "\"query\": \"?ms=60000\"",
        "\"protocol\": \"HTTP/1.1\"",
        "\"authority\": \"held.example\"",
        "\"user-agent\": \"t/h1\"",
        "\"host\": \"127.0.0.1\"",
    ] {
        assert!(entry.contains(want), "{want} in {entry}");
    }
    // The status request itself is listed too (as h2o lists it).
    let page = get(&s, "/s/json?show=requests").text();
    assert!(page.contains("\"path\": \"/s/json\""), "{page}");
    // The client goes away: its request leaves the list.
    drop(held);
    gone(&s, "\"/slow/delay\"");
}

#[test]
fn a_held_http2_request_is_listed_with_its_protocol_and_authority() {
    if !have("curl") {
        eprintln!("skipped: no curl");
        return;
    }
    let backend = Backend::start();
    let s = start(&backend);
    let mut held = held_h2(&s, "/slow/delay?ms=60000", "h2held.example");
    let entry = listed(&s, "\"/slow/delay\"");
    let _ = held.kill();
    let _ = held.wait();
    for want in [
        "\"method\": \"GET\"",
        "\"protocol\": \"HTTP/2\"",
        "\"authority\": \"h2held.example\"",
    ] {
        assert!(entry.contains(want), "{want} in {entry}");
    }
    gone(&s, "\"/slow/delay\"");
}

#[test]
fn the_default_json_keeps_its_shape_and_other_sections_are_h2o_s() {
    let backend = Backend::start();
    let s = start(&backend);
    let default = get(&s, "/s/json").text();
    assert!(default.contains("\"requests\": "), "{default}");
    assert!(!default.contains("\"requests\": ["), "{default}");
    assert!(default.contains("\"status.2xx\": "), "{default}");
    let main = get(&s, "/s/json?show=main,events").text();
    assert!(main.contains("\"connections\": "), "{main}");
    assert!(main.contains("\"status.2xx\": "), "{main}");
    assert!(!main.contains("\"requests\""), "{main}");
    let events = get(&s, "/s/json?show=events").text();
    assert!(!events.contains("\"connections\""), "{events}");
    assert!(!events.contains("\"requests\""), "{events}");
}

#[test]
fn an_http1_request_whose_body_is_still_arriving_is_listed_as_receiving() {
    let backend = Backend::start();
    let s = start(&backend);
    // The status handler answers at once and does not read the body: the answer goes out,
    // then the body is read past, and the request is in flight until it is.
    let mut up = TcpStream::connect(s.addr).unwrap();
    up.write_all(
        b"POST /s/upload?slow=1 HTTP/1.1\r\nHost: up.example\r\nContent-Length: 100000\r\n\r\n0123456789",
    )
    .unwrap();
    let entry = listed_in(&s, "\"/s/upload\"", "\"state\": \"receiving\"");
    for want in [
        "\"method\": \"POST\"",
        "\"protocol\": \"HTTP/1.1\"",
        "\"state\": \"receiving\"",
    ] {
        assert!(entry.contains(want), "{want} in {entry}");
    }
    // The rest of the body comes: the request is over.
    up.write_all(&vec![b'x'; 100000 - 10]).unwrap();
    gone(&s, "\"/s/upload\"");
}

#[test]
fn a_response_body_still_streaming_is_listed_as_sending_over_http1_and_http2() {
    if !have("curl") {
        eprintln!("skipped: no curl");
        return;
    }
    let backend = Backend::start();
    let s = start(&backend);
    // The backend sends its head and one piece, then holds the rest for a minute: the
    // answer came, its body has not ended.
    let path = "/slow/chunked?pieces=2&delay=60000&trailers=0";
    let mut h1 = TcpStream::connect(s.addr).unwrap();
    h1.write_all(format!("GET {path} HTTP/1.1\r\nHost: h1.example\r\n\r\n").as_bytes())
        .unwrap();
    let entry = listed_in(
        &s,
        "\"authority\": \"h1.example\"",
        "\"state\": \"sending\"",
    );
    assert!(entry.contains("\"state\": \"sending\""), "{entry}");
    assert!(entry.contains("\"protocol\": \"HTTP/1.1\""), "{entry}");
    drop(h1);
    gone(&s, "\"authority\": \"h1.example\"");

    let mut h2 = held_h2(&s, path, "h2.example");
    let entry = listed_in(
        &s,
        "\"authority\": \"h2.example\"",
        "\"state\": \"sending\"",
    );
    let _ = h2.kill();
    let _ = h2.wait();
    assert!(entry.contains("\"state\": \"sending\""), "{entry}");
    assert!(entry.contains("\"protocol\": \"HTTP/2\""), "{entry}");
    gone(&s, "\"authority\": \"h2.example\"");
}

#[test]
fn a_request_waiting_for_its_answer_is_listed_as_handling() {
    let backend = Backend::start();
    let s = start(&backend);
    let mut held = TcpStream::connect(s.addr).unwrap();
    held.write_all(b"GET /slow/delay?ms=60000 HTTP/1.1\r\nHost: wait.example\r\n\r\n")
        .unwrap();
    let entry = listed(&s, "\"authority\": \"wait.example\"");
    assert!(entry.contains("\"state\": \"handling\""), "{entry}");
}
