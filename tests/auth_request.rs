//! `auth-request`: a real small authentication service (an HTTP/1.1 server on its own
//! thread in this process, keep-alive, deciding by the `Authorization` field) in front of the
//! echo backend. Its 2xx lets a request through with the `copy-headers` fields (and never the
//! client's own of those names); its 401 / 403 reaches the client as the service wrote it;
//! anything else, a service too slow, or none at all, is a 500 with one log line.

mod common;

use common::backend::{Backend, Echo};
use common::clients::{fetch, Proto};
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The service: each request's head as it came, kept for the test to look at.
struct Service {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl Service {
    fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let kept = kept.clone();
                std::thread::spawn(move || serve(conn, &kept));
            }
        });
        Service {
            port,
            seen,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/check", self.port)
    }

    /// The last request's head, lowercased.
    fn last(&self) -> String {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }
}

/// One connection: heads (a subrequest has no body) and answers until the peer closes.
fn serve(conn: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut out = conn.try_clone().unwrap();
    let mut input = BufReader::new(conn);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match input.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let head = head.to_ascii_lowercase();
        seen.lock().unwrap().push(head.clone());
        let auth = head
            .lines()
            .find_map(|l| l.strip_prefix("authorization: "))
            .unwrap_or("")
            .trim()
            .to_string();
        let answer = match auth.as_str() {
            "bearer alice" => "HTTP/1.1 200 OK\r\nX-User: alice\r\nX-Role: admin\r\n\
                 X-Secret: not-copied\r\nContent-Length: 2\r\n\r\nok"
                .to_string(),
            "bearer banned" => "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n\
                 Content-Length: 22\r\n\r\nbanned by the service\n"
                .to_string(),
            "bearer odd" => {
                "HTTP/1.1 302 Found\r\nLocation: /login\r\nContent-Length: 0\r\n\r\n".to_string()
            }
            "bearer slow" => {
                std::thread::sleep(Duration::from_millis(1500));
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_string()
            }
            _ => "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"test\"\r\n\
                 Content-Length: 12\r\n\r\nwho are you\n"
                .to_string(),
        };
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn start(service: &Service, backend: &Backend, dead: u16) -> Spate {
    Spate::start(&format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
num-threads: 1
hosts:
  default:
    paths:
      /app:
        auth-request:
          url: {}
          copy-headers: [X-User, X-Role]
          timeout: 500
        proxy.reverse.url: {}
      /down:
        auth-request: {{url: 'http://127.0.0.1:{dead}/check'}}
        proxy.reverse.url: {}
      /open:
        proxy.reverse.url: {}
",
        service.url(),
        backend.url("/"),
        backend.url("/"),
        backend.url("/"),
    ))
}

#[test]
fn the_service_decides_and_its_headers_are_copied() {
    let service = Service::start();
    let backend = Backend::start();
    let dead = DeadPort::new();
    let s = start(&service, &backend, dead.port);
    for proto in [Proto::H1, Proto::H2c] {
        // Through, with the service's fields in place of the client's claims.
        let r = fetch(
            &s,
            proto,
            "/app/page?q=1",
            &[
                "-H",
                "Authorization: Bearer alice",
                "-H",
                "X-User: mallory",
                "-H",
                "Cookie: a=1",
            ],
        );
        assert_eq!(r.status, 200, "{proto:?}: {}", r.text());
        let echo = Echo::parse(r.text().as_bytes()).expect("an echo");
        assert_eq!(echo.headers_named("x-user"), ["alice"], "{proto:?}");
        assert_eq!(echo.header("x-role"), Some("admin"));
        assert_eq!(echo.header("x-secret"), None);
        assert_eq!(echo.target, "/page?q=1");
        // What the service was asked.
        let asked = service.last();
        assert!(asked.starts_with("get /check http/1.1\r\n"), "{asked}");
        for want in [
            "x-forwarded-method: get",
            "x-forwarded-uri: /app/page?q=1",
            "x-forwarded-for: 127.0.0.1",
            "x-forwarded-proto: http",
            "authorization: bearer alice",
            "cookie: a=1",
        ] {
            assert!(asked.contains(want), "{want} not in {asked}");
        }

        // 401 and 403 reach the client as the service wrote them.
        let r = fetch(&s, proto, "/app/page", &[]);
        assert_eq!(r.status, 401);
        assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"test\""));
        assert_eq!(r.text(), "who are you\n");
        let r = fetch(
            &s,
            proto,
            "/app/page",
            &["-H", "Authorization: Bearer banned"],
        );
        assert_eq!(r.status, 403);
        assert_eq!(r.text(), "banned by the service\n");
    }
    // A body goes to the backend once the service said yes.
    let r = fetch(
        &s,
        Proto::H1,
        "/app/post",
        &[
            "-H",
            "Authorization: Bearer alice",
            "--data-binary",
            "payload",
        ],
    );
    assert_eq!(r.status, 200);
    let echo = Echo::parse(r.text().as_bytes()).expect("an echo");
    assert_eq!(echo.method, "POST");
    assert_eq!(echo.body, b"payload");
    // The service was asked without the body.
    assert!(
        !service.last().contains("content-length"),
        "{}",
        service.last()
    );
    // A path without auth-request is not asked about.
    let before = service.seen.lock().unwrap().len();
    assert_eq!(fetch(&s, Proto::H1, "/open/x", &[]).status, 200);
    assert_eq!(service.seen.lock().unwrap().len(), before);
    // The service's connections are kept alive and reused (one worker, one at a time).
    let asked = service.seen.lock().unwrap().len();
    let opened = service
        .connections
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        opened < asked,
        "{opened} connections for {asked} subrequests"
    );
    // Denied requests never reached the backend: 2 per protocol let through, 1 POST, 1 open.
    assert_eq!(backend.requests(), 4);
}

#[test]
fn anything_else_is_500_with_one_line_never_a_pass_through() {
    let service = Service::start();
    let backend = Backend::start();
    let dead = DeadPort::new();
    let s = start(&service, &backend, dead.port);
    // A redirect from the service.
    let r = fetch(
        &s,
        Proto::H1,
        "/app/x",
        &["-H", "Authorization: Bearer odd"],
    );
    assert_eq!(r.status, 500);
    let lines = s.log_lines_naming("auth-request", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("the service answered neither 2xx nor 401/403")
            && lines[0].contains("302"),
        "{lines:?}"
    );
    // Too slow (timeout: 500 ms).
    let r = fetch(
        &s,
        Proto::H1,
        "/app/x",
        &["-H", "Authorization: Bearer slow"],
    );
    assert_eq!(r.status, 500);
    let lines = s.log_lines_naming("auth-request", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    // Unreachable.
    let r = fetch(
        &s,
        Proto::H2c,
        "/down/x",
        &["-H", "Authorization: Bearer alice"],
    );
    assert_eq!(r.status, 500);
    let lines = s.log_lines_naming("auth-request", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("127.0.0.1:{}", dead.port)),
        "{lines:?}"
    );
    // Credentials never reach the log.
    let all = s.stderr_lines().join("\n");
    assert!(!all.to_ascii_lowercase().contains("bearer"), "{all}");
    assert_eq!(backend.requests(), 0);
}

#[test]
fn dash_t_names_each_bad_auth_request() {
    assert_config_errors(
        "listen: 8080
hosts:
  default:
    paths:
      /a:
        auth-request: {copy-headers: [X-User]}
        respond: {body: x}
      /b:
        auth-request: {url: 'ftp://x/check', copy-headers: ['bad name'], timeout: 0}
        respond: {body: x}
      /c:
        auth-request: {url: 'https://auth.example/check', cache: 5}
        respond: {body: x}
      /d:
        auth-request: yes please
        respond: {body: x}
",
        &[
            "conf.yaml:6: auth-request: url (the authentication service) is required",
            "conf.yaml:9: auth-request.url: unknown scheme \"ftp\"",
            "conf.yaml:9: auth-request.copy-headers: \"bad name\" is not a header name",
            "conf.yaml:9: auth-request.timeout expects an integer >= 1, got \"0\"",
            "conf.yaml:12: auth-request.url: https:// is not supported yet",
            "conf.yaml:12: unknown key cache in auth-request",
            "conf.yaml:15: auth-request expects OFF or a mapping with url",
        ],
    );
}

/// A backend of another protocol: answers one upgrade with 101 and `READY`, then sends back
/// what it reads in capitals.
fn shout_backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if c.read_exact(&mut b).is_err() {
                        return;
                    }
                    head.push(b[0]);
                }
                let _ = c.write_all(
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: shout/1\r\n\r\nREADY\n",
                );
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = c.read(&mut buf) {
                    let _ = c.write_all(&buf[..n].to_ascii_uppercase());
                }
            });
        }
    });
    port
}

/// An upgrade on a path with `auth-request` and `proxy.tunnel`: refused without the
/// service's yes, a tunnel once it said yes.
#[test]
fn an_upgrade_waits_for_the_service() {
    let service = Service::start();
    let port = shout_backend();
    let s = Spate::start(&format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /:
        auth-request: {{url: {}}}
        proxy.reverse.url: http://127.0.0.1:{port}/
        proxy.tunnel: ON
",
        service.url()
    ));
    let upgrade = |auth: &str| {
        let mut c = s.connect();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = format!(
            "GET /talk HTTP/1.1\r\nHost: x\r\n{auth}Connection: Upgrade\r\nUpgrade: shout/1\r\n\r\n"
        );
        c.write_all(req.as_bytes()).unwrap();
        c
    };
    let mut refused = upgrade("");
    let text = read_response(&mut refused, &mut Vec::new(), false);
    assert_eq!(text.status, 401);
    let mut c = upgrade("Authorization: Bearer alice\r\n");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"READY\n") {
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 101 "),
        "{}",
        String::from_utf8_lossy(&got)
    );
    c.write_all(b"hello\n").unwrap();
    let n = c.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"HELLO\n");
    // The service was not asked to upgrade.
    assert!(!service.last().contains("upgrade"), "{}", service.last());
}
