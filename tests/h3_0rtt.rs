//! HTTP/3 0-RTT (`http3-0rtt: ON`) done as RFC 8470 asks: a resumed aioquic client sends its
//! requests in early data; safe methods are answered at once (before the handshake completes),
//! others wait for it; a proxied early request carries `Early-Data: 1` and a backend's
//! `425 Too Early` is retried after the handshake, so the client gets the real answer.

mod common;
mod tls_support;

use common::early_backend::recording_backend;
use common::*;
use std::path::Path;
use std::process::Command;

/// A QUIC listener, a static file and a proxy to `backend`; `top`: the global directives
/// (`http3-0rtt` and the like).
fn server(backend: &str, top: &str) -> Spate {
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "a", "localhost", false);
    write_file(dir.path(), "htdocs/index.html", b"<h1>early</h1>\n");
    Spate::start_in(
        &format!(
            "
num-threads: 2
{top}
hosts:
  localhost:
    listen:
      host: 127.0.0.1
      port: 0
      type: quic
      ssl:
        certificate-file: a.crt
        key-file: a.key
    paths:
      /proxy:
        proxy.reverse.url: {backend}/b
      /:
        file.dir: htdocs
"
        ),
        dir,
    )
}

struct Answer {
    status: u16,
    text: String,
    before_finished: bool,
}

/// Runs tests/h3_support/aioquic_0rtt.py: whether the server accepted the early data, and
/// the answers in the order asked.
fn resumed(py: &Path, port: u16, hold: bool, reqs: &[&str]) -> (bool, Vec<Answer>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3_support/aioquic_0rtt.py");
    let mut cmd = Command::new(py);
    cmd.arg(script).arg("127.0.0.1").arg(port.to_string());
    if hold {
        cmd.arg("--hold");
    }
    let out = cmd.args(reqs).output().expect("run aioquic");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "aioquic failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    let first = lines.next().expect("the handshake line");
    let accepted = first.contains("\"early_data_accepted\": true");
    assert!(first.contains("\"session_resumed\": true"), "{first}");
    let answers = lines
        .map(|l| {
            let field = |name: &str| -> String {
                let key = format!("\"{name}\": ");
                let at = l.find(&key).expect(name) + key.len();
                let rest = &l[at..];
                match rest.strip_prefix('"') {
                    Some(s) => s[..s.find('"').expect("end")].to_string(),
                    None => rest[..rest.find([',', '}']).expect("end")].to_string(),
                }
            };
            Answer {
                status: field("status").parse().expect("status"),
                text: field("text"),
                before_finished: field("before_finished") == "true",
            }
        })
        .collect();
    (accepted, answers)
}

#[test]
fn a_get_in_early_data_is_answered_before_the_handshake_and_a_post_waits_for_it() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let (backend, seen) = recording_backend();
    let s = server(&backend, "http3-0rtt: ON");
    // The client withholds its Finished until both GETs are answered: they are answered in
    // the server's first flight. The POST (`~`: not expected before) waits for the Finished.
    let (accepted, got) = resumed(
        &py,
        s.addr.port(),
        true,
        &["GET:/index.html", "GET:/proxy/get", "~POST:/proxy/post:100"],
    );
    assert!(accepted, "the server did not accept the early data");
    assert_eq!(
        got.iter().map(|a| a.status).collect::<Vec<_>>(),
        [200, 200, 200]
    );
    assert!(got[0].text.starts_with("<h1>early</h1>"), "{}", got[0].text);
    assert!(got[0].before_finished && got[1].before_finished);
    assert!(
        !got[2].before_finished,
        "the POST was answered before the handshake completed"
    );
    let seen = seen.lock().expect("seen").clone();
    let get = seen.iter().find(|r| r.path == "/b/get").expect("the GET");
    assert_eq!(get.early_data.as_deref(), Some("1"), "{seen:?}");
    // Routed after the handshake: no longer early, so no Early-Data.
    let post = seen.iter().find(|r| r.path == "/b/post").expect("the POST");
    assert_eq!(
        (post.method.as_str(), post.early_data.as_deref()),
        ("POST", None)
    );
}

#[test]
fn a_backends_425_is_retried_after_the_handshake() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let (backend, seen) = recording_backend();
    let s = server(&backend, "http3-0rtt: ON");
    let (accepted, got) = resumed(&py, s.addr.port(), false, &["GET:/proxy/too-early"]);
    assert!(accepted, "the server did not accept the early data");
    assert_eq!(
        (got[0].status, got[0].text.as_str()),
        (200, "real answer\\n")
    );
    let tries: Vec<Option<String>> = seen
        .lock()
        .expect("seen")
        .iter()
        .filter(|r| r.path == "/b/too-early")
        .map(|r| r.early_data.clone())
        .collect();
    // Once in early data (425), once after the handshake.
    assert_eq!(tries, [Some("1".to_string()), None]);
}

#[test]
fn a_ticket_carries_early_data_once() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let (backend, seen) = recording_backend();
    let s = server(&backend, "http3-0rtt: ON");
    // The same ticket twice, as an attacker replaying the client's first flight: rustls took
    // the ticket from the session store the first time, so the replay gets a full handshake
    // and its early data is refused; its requests are sent again in 1-RTT.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3_support/aioquic_0rtt.py");
    let out = Command::new(&py)
        .arg(script)
        .args([
            "127.0.0.1",
            &s.addr.port().to_string(),
            "--replay",
            "GET:/proxy/get",
        ])
        .output()
        .expect("run aioquic");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handshakes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("early_data"))
        .collect();
    assert_eq!(handshakes.len(), 2, "{stdout}");
    assert!(
        handshakes[0].contains("\"early_data_accepted\": true"),
        "{stdout}"
    );
    assert!(
        handshakes[1].contains("\"early_data_accepted\": false"),
        "{stdout}"
    );
    assert!(
        handshakes[1].contains("\"session_resumed\": false"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("\"status\": 200").count(), 2, "{stdout}");
    let early: Vec<Option<String>> = seen
        .lock()
        .expect("seen")
        .iter()
        .filter(|r| r.path == "/b/get")
        .map(|r| r.early_data.clone())
        .collect();
    assert_eq!(early, [Some("1".to_string()), None]);
}

#[test]
fn methods_named_by_http3_0rtt_methods_are_answered_early() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let (backend, seen) = recording_backend();
    let s = server(&backend, "http3-0rtt: ON\nhttp3-0rtt-methods: [GET, POST]");
    let (accepted, got) = resumed(&py, s.addr.port(), true, &["POST:/proxy/post:10"]);
    assert!(accepted);
    assert_eq!(got[0].status, 200);
    assert!(got[0].before_finished, "the POST waited for the handshake");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].early_data.as_deref(), Some("1"));
}

#[test]
fn without_http3_0rtt_a_resumed_client_sends_no_early_data() {
    let Some(py) = common::aioquic_python() else {
        return;
    };
    let (backend, seen) = recording_backend();
    let s = server(&backend, "http3-0rtt: OFF");
    let (accepted, got) = resumed(&py, s.addr.port(), false, &["GET:/proxy/get"]);
    assert!(!accepted);
    assert_eq!(got[0].status, 200);
    assert_eq!(seen.lock().expect("seen")[0].early_data, None);
}
