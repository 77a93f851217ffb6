//! An HTTP/1.1 backend for the early-data tests (TLS over TCP and HTTP/3): it records each
//! request with its `Early-Data` field and answers `425 Too Early` where RFC 8470 lets it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a backend request looked like: method, path and its `Early-Data` field.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub early_data: Option<String>,
}

/// An HTTP/1.1 backend that records each request and answers `backend PATH METHOD BODY`;
/// `.../too-early` with `Early-Data: 1` gets `425 Too Early`, without `200 real answer`.
pub fn recording_backend() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().map_while(Result::ok) {
            let log = log.clone();
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(60))).ok();
                let mut w = c.try_clone().expect("clone");
                let mut r = BufReader::new(c);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let method = parts.next().unwrap_or("").to_string();
                    let path = parts.next().unwrap_or("").to_string();
                    let (mut len, mut early_data) = (0usize, None);
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (n, v) = h.split_once(':').unwrap_or((h, ""));
                        match n.to_ascii_lowercase().as_str() {
                            "content-length" => len = v.trim().parse().unwrap_or(0),
                            "early-data" => early_data = Some(v.trim().to_string()),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let too_early = path.ends_with("/too-early");
                    let (status, text) = match early_data.as_deref() {
                        Some("1") if too_early => ("425 Too Early", "too early\n".to_string()),
                        _ if too_early => ("200 OK", "real answer\n".to_string()),
                        _ => (
                            "200 OK",
                            format!(
                                "backend {path} {method} {}\n",
                                String::from_utf8_lossy(&body)
                            ),
                        ),
                    };
                    log.lock().expect("log").push(Seen {
                        method,
                        path,
                        early_data,
                    });
                    let resp = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{text}",
                        text.len()
                    );
                    if w.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}
