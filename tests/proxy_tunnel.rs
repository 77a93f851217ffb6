//! WebSocket and other upgrades through the proxy (`proxy.tunnel`): a real WebSocket server
//! (Python `websockets`) behind spate, reached by a real client library over HTTP/1.1, by
//! the `h2` crate over HTTP/2 extended CONNECT (RFC 8441, with the WebSocket framing done
//! here) and by Chromium over HTTP/2 with TLS. Idle timeouts, a refused upgrade, tunnels
//! turned off, and a tunnel kept through a reload.

mod common;
mod tls_support;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The Python WebSocket echo server of tests/ws/echo_server.py.
struct WsServer {
    child: Child,
    port: u16,
    lines: mpsc::Receiver<String>,
}

impl WsServer {
    fn start() -> WsServer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ws/echo_server.py");
        let mut child = Command::new(python())
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the WebSocket echo server");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the echo server did not start (python3-websockets installed?)");
        let port = first
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        WsServer { child, port, lines }
    }

    /// Waits for the server's `closed CODE REASON` line.
    fn closed(&self) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with("closed ") => return l,
                Ok(_) => {}
                Err(_) => panic!("the echo server saw no connection close"),
            }
        }
    }
}

impl Drop for WsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// spate with `/ws` proxied to the echo server with `opts`, and `/metrics`.
fn spate(ws: &WsServer, opts: &str) -> Spate {
    Spate::start(&config(ws, opts))
}

fn config(ws: &WsServer, opts: &str) -> String {
    format!(
        "
num-threads: 1
shutdown-timeout: 20
listen:
  host: 127.0.0.1
  port: 0
hosts:
  default:
    paths:
      /ws:
        proxy.reverse.url: http://127.0.0.1:{}/
{}
      /metrics:
        metrics: ON
",
        ws.port,
        opts.lines()
            .map(|l| format!("        {l}\n"))
            .collect::<String>()
    )
}

/// Runs tests/ws/client.py (Python `websockets`) against `/ws/chat` of `s`: messages, pings
/// and both closes, on two connections.
fn python_client_echoes(s: &Spate, ws: &WsServer) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ws/client.py");
    let out = Command::new(python())
        .arg(script)
        .arg(format!("ws://{}/ws/chat", s.addr))
        .output()
        .expect("run the WebSocket client");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "client failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The server closed the first connection (4001, checked by the client); the client
    // closed the second with its own code, which reached the server.
    assert_eq!(ws.closed(), "closed 4001 server bye");
    assert_eq!(ws.closed(), "closed 4002 client bye");
}

#[test]
fn websocket_echo_over_http1_with_a_real_client() {
    let ws = WsServer::start();
    let s = spate(&ws, "proxy.tunnel: ON");
    python_client_echoes(&s, &ws);
    let metrics = get(&s, "/metrics").text();
    assert!(
        metrics.contains("spate_proxy_tunnels_total 2\n"),
        "{metrics}"
    );
    let open = wait_until(|| {
        get(&s, "/metrics")
            .text()
            .contains("spate_proxy_tunnels_open 0\n")
    });
    assert!(open, "tunnels still counted open");
}

#[test]
fn websocket_to_an_https_backend_goes_over_tls_as_http1() {
    let ws = WsServer::start();
    // The backend: spate on TLS offering h2 in ALPN, tunnelling to the echo server.
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "mid", "localhost", false);
    let mid = Spate::start_in(
        &format!(
            "
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: mid.crt
    key-file: mid.key
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{}/
        proxy.tunnel: ON
",
            ws.port
        ),
        dir,
    );
    // The front verifies it, and would send ordinary requests over HTTP/2: a tunnel still
    // goes over HTTP/1.1 (an upgrade exists only there).
    let s = Spate::start(&format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /ws:
        proxy.reverse.url: https://localhost:{}/
        proxy.ssl.cafile: {}
        proxy.http2.ratio: 100
        proxy.tunnel: ON
",
        mid.addr.port(),
        mid.path().join("mid.crt").display()
    ));
    python_client_echoes(&s, &ws);
    // And from an HTTP/2 client, by extended CONNECT.
    let addr = s.addr;
    runtime().block_on(async move {
        let mut client = h2_client(addr).await;
        let (mut send, mut recv) = h2_tunnel(&mut client, addr, "/ws/").await;
        let payload = vec![b'z'; 200_000];
        send.send_data(frame(1, &payload).into(), false).unwrap();
        assert_eq!(recv.next().await, Some((1, payload)));
    });
}

#[test]
fn websocket_over_http2_extended_connect() {
    let ws = WsServer::start();
    let s = spate(&ws, "proxy.tunnel: ON");
    let addr = s.addr;
    let rt = runtime();
    rt.block_on(async move {
        let mut client = h2_client(addr).await;
        assert!(client.is_extended_connect_protocol_enabled());
        let req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(format!("http://{addr}/ws/chat"))
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .extension(h2::ext::Protocol::from_static("websocket"))
            .body(())
            .unwrap();
        let (resp, mut send) = client.send_request(req, false).expect("send CONNECT");
        let resp = resp.await.expect("response");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["sec-websocket-protocol"], "chat");
        assert!(resp.headers().get("sec-websocket-accept").is_none());
        assert!(resp.headers().get("upgrade").is_none());
        let mut recv = Frames::new(resp.into_body());
        for (opcode, size) in [(1u8, 1usize), (2, 64 * 1024), (2, 1024 * 1024), (1, 5000)] {
            let mut payload = vec![0u8; size];
            pattern::fill(u64::from(opcode), &mut payload);
            if opcode == 1 {
                payload.iter_mut().for_each(|b| *b = b'a' + *b % 26);
            }
            send.send_data(frame(opcode, &payload).into(), false)
                .expect("send");
            let (op, got) = recv.next().await.expect("echo");
            assert_eq!((op, got.len()), (opcode, size));
            assert!(got == payload, "payload of {size} differs");
        }
        // A ping is answered by the server itself.
        send.send_data(frame(9, b"ping?").into(), false).unwrap();
        assert_eq!(recv.next().await, Some((10, b"ping?".to_vec())));
        // Close with our code: the server echoes it, then closes, which ends the stream.
        let mut close = 4003u16.to_be_bytes().to_vec();
        close.extend_from_slice(b"h2 bye");
        send.send_data(frame(8, &close).into(), false).unwrap();
        assert_eq!(recv.next().await, Some((8, close.clone())));
        assert_eq!(recv.next().await, None, "stream not ended after the close");
        let _ = send.send_data(bytes::Bytes::new(), true);
    });
    assert_eq!(ws.closed(), "closed 4003 h2 bye");
}

#[test]
fn chromium_opens_a_websocket_over_http2_with_tls() {
    let Some(browser) = tls_support::chromium() else {
        eprintln!("SKIP: chromium is not installed (scripts/test installs it)");
        return;
    };
    let ws = WsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    tls_support::cert(dir.path(), "site", "localhost", false);
    // Chromium sends a WebSocket over an HTTP/2 connection it already has to the origin,
    // when the server's SETTINGS allow extended CONNECT: the page's own.
    write_file(
        dir.path(),
        "site/index.html",
        br#"<!doctype html><title>ws</title><p id=out>waiting</p><script>
// Virtual time does not wait for a WebSocket but does for a pending fetch: one is kept
// pending until the socket has closed. Not one fetch held for good: while it is pending
// and virtual time is paused, Chromium may hold back the socket's events (seen when the
// 101 comes after the page's load), which then wait for that fetch to end. Each /hold
// answers after a second of real time, and the next is asked at once.
let open = true;
const hold = new AbortController();
function holdOn() {
  fetch("/hold", {signal: hold.signal}).then((r) => r.text())
    .then(() => { if (open) holdOn(); }).catch(() => {});
}
holdOn();
const ws = new WebSocket("wss://" + location.host + "/ws/chat", ["chat"]);
ws.onopen = () => ws.send("hello from chromium");
ws.onmessage = (e) => {
  document.getElementById("out").textContent = "echo:" + e.data + ":" + ws.protocol;
  ws.close(4010, "chromium");
};
ws.onclose = () => { open = false; hold.abort(); };
ws.onerror = () => {
  document.getElementById("out").textContent = "error";
  open = false;
  hold.abort();
};
</script>"#,
    );
    // The page's held fetches: a backend that answers each one a second after it came.
    let hold = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let hold_port = hold.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut c in hold.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match c.read(&mut b) {
                        Ok(1) => head.push(b[0]),
                        _ => return,
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nheld",
                );
            });
        }
    });
    let s = Spate::start_in(
        &format!(
            "
listen:
  host: 127.0.0.1
  port: 0
  ssl:
    certificate-file: site.crt
    key-file: site.key
hosts:
  default:
    access-log:
      path: access.log
      format: \"%H %m %s %U\"
    paths:
      /ws:
        proxy.reverse.url: http://127.0.0.1:{}/
        proxy.tunnel: ON
      /hold:
        proxy.reverse.url: http://127.0.0.1:{hold_port}/
      /:
        file.dir: $DIR/site
",
            ws.port
        ),
        dir,
    );
    // A few tries all the same (each one a new socket), for a browser that fails to start
    // on a loaded machine.
    let mut dom = String::new();
    for _ in 0..3 {
        let out = tls_support::chromium_headless(browser, s.path())
            .args(["--virtual-time-budget=10000", "--dump-dom"])
            .arg(format!("https://127.0.0.1:{}/", s.addr.port()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let out = tls_support::wait_output(out, Duration::from_secs(90));
        dom = String::from_utf8_lossy(&out.stdout).into_owned();
        if dom.contains("echo:") {
            break;
        }
    }
    assert!(
        dom.contains("echo:hello from chromium:chat"),
        "page says: {dom}"
    );
    let end = Instant::now() + Duration::from_secs(10);
    while ws.closed() != "closed 4010 chromium" {
        assert!(
            Instant::now() < end,
            "the backend never saw close code 4010"
        );
    }
    let log_path = s.path().join("access.log");
    let seen = wait_until(|| {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .contains("HTTP/2 CONNECT 200 /ws/chat")
    });
    assert!(
        seen,
        "access log:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
}

/// Accepts one connection on `l` and reads its request head (through the blank line).
fn accept_head(l: &std::net::TcpListener) -> (std::net::TcpStream, String) {
    let (mut c, _) = l.accept().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    (c, String::from_utf8_lossy(&head).into_owned())
}

/// A backend for another protocol: answers `101` with `Upgrade: shout/1` and bytes of the
/// new protocol in the same write, then sends back what it reads in capitals; when the client
/// half-closes, it says `BYE` and closes.
fn shout_backend() -> (u16, std::thread::JoinHandle<String>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut c, head) = accept_head(&l);
        c.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: shout/1\r\n\r\nREADY\n")
            .unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => c.write_all(&buf[..n].to_ascii_uppercase()).unwrap(),
            }
        }
        c.write_all(b"BYE\n").unwrap();
        head
    });
    (port, t)
}

#[test]
fn any_protocol_upgrade_with_early_bytes_and_half_close() {
    let (port, backend) = shout_backend();
    let s = Spate::start(&format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{port}/
        proxy.tunnel: ON
"
    ));
    let mut c = s.connect();
    c.write_all(b"GET /talk HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: shout/1\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"READY\n") {
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    assert!(text.contains("\r\nUpgrade: shout/1\r\n"), "{text}");
    c.write_all(b"hello there\n").unwrap();
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0);
        line.extend_from_slice(&buf[..n]);
    }
    assert_eq!(line, b"HELLO THERE\n");
    // Our half-close reaches the backend, whose last words still reach us.
    c.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_to_close(&mut c), "BYE\n");
    let head = backend.join().unwrap().to_ascii_lowercase();
    assert!(
        head.contains("\r\nconnection: upgrade\r\nupgrade: shout/1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"),
        "{head}"
    );
}

/// A backend named `tag` that takes any number of upgrades: each connection's bytes up to
/// the end of its head (a PROXY line included) go to `heads`, then it answers `101` with
/// `READY <tag>` and sends back what it reads in capitals until the client closes.
fn tagged_shout_backend(tag: &'static str, heads: mpsc::Sender<(&'static str, String)>) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let (Ok(mut c), heads) = (c, heads.clone()) else {
                continue;
            };
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if c.read_exact(&mut b).is_err() {
                        return;
                    }
                    head.push(b[0]);
                }
                let _ = heads.send((tag, String::from_utf8_lossy(&head).into_owned()));
                let ready = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: shout/1\r\n\r\nREADY {tag}\n"
                );
                c.write_all(ready.as_bytes()).unwrap();
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = c.read(&mut buf) {
                    if c.write_all(&buf[..n].to_ascii_uppercase()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// Opens a `shout/1` tunnel through `s` at `path`: the stream and the tag of the backend.
fn open_shout(s: &Spate, path: &str) -> (TcpStream, String) {
    let mut c = s.connect();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: shout/1\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !(got.ends_with(b"\n") && got.windows(6).any(|w| w == b"READY ")) {
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    let tag = text.rsplit("READY ").next().unwrap().trim_end().to_string();
    (c, tag)
}

#[test]
fn tunnels_go_through_the_balancer_with_the_proxy_line() {
    let (tx, heads) = mpsc::channel();
    let a = tagged_shout_backend("a", tx.clone());
    let b = tagged_shout_backend("b", tx);
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // One worker: the balancer's counts are per worker.
    let s = Spate::start(&format!(
        "
num-threads: 1
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /lc:
        proxy.tunnel: ON
        proxy.proxy-protocol: ON
        proxy.timeout.keepalive: 0
        proxy.reverse.url:
          backends:
            - {{url: http://127.0.0.1:{a}/, weight: 3}}
            - http://127.0.0.1:{b}/
          balancer: least-conn
      /rr:
        proxy.tunnel: ON
        proxy.reverse.url: [http://127.0.0.1:{dead}/, http://127.0.0.1:{a}/]
"
    ));
    // Least-conn, weights 3 and 1: the first goes to the heavier a. While it is open it
    // counts, so the next goes to b (a tunnel that did not count would leave a tie, which
    // the heavier a wins; round-robin would give a again too).
    let (mut first, tag) = open_shout(&s, "/lc/1");
    assert_eq!(tag, "a");
    let (_second, tag) = open_shout(&s, "/lc/2");
    assert_eq!(tag, "b");
    first.write_all(b"still here\n").unwrap();
    let mut buf = [0u8; 64];
    let n = first.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STILL HERE\n");
    // Each backend connection starts with the client's PROXY line.
    for _ in 0..2 {
        let (_, head) = heads.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            head.starts_with("PROXY TCP4 127.0.0.1 127.0.0.1 "),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("\r\nconnection: upgrade\r\nupgrade: shout/1\r\n"),
            "{head}"
        );
    }
    // A backend that cannot be reached is left for the next.
    for i in 0..3 {
        let (_c, tag) = open_shout(&s, &format!("/rr/{i}"));
        assert_eq!(tag, "a");
        let (_, head) = heads.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            head.starts_with(&format!("GET /{i} HTTP/1.1\r\n")),
            "{head}"
        );
    }
}

#[test]
fn http2_reset_closes_the_backend_connection() {
    let ws = WsServer::start();
    let s = spate(&ws, "proxy.tunnel: ON");
    let addr = s.addr;
    runtime().block_on(async move {
        let mut client = h2_client(addr).await;
        let (mut send, mut recv) = h2_tunnel(&mut client, addr, "/ws/").await;
        send.send_data(frame(1, b"hi").into(), false).unwrap();
        assert_eq!(recv.next().await, Some((1, b"hi".to_vec())));
        send.send_reset(h2::Reason::CANCEL);
        // The connection stays usable.
        let (resp, _send) = client
            .send_request(connect(addr, "/ws/"), false)
            .expect("second CONNECT");
        assert_eq!(resp.await.expect("response").status(), 200);
    });
    // The backend saw its connection go without a close frame (1006).
    assert!(ws.closed().starts_with("closed 1006"));
}

/// RFC 6455's accept value for the key in argv[1].
const ACCEPT_PY: &str = "import base64, hashlib, sys; print(base64.b64encode(hashlib.sha1(\
    sys.argv[1].encode() + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest()).decode())";

/// The backend answers the client's close frame with its own and closes in the same moment
/// (one write, then FIN), while the HTTP/2 client keeps its side open, as a browser does:
/// the stream still ends, with the frame and then END_STREAM.
#[test]
fn a_backend_closing_with_its_last_frame_ends_the_http2_stream() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let backend = std::thread::spawn(move || {
        let (mut c, head) = accept_head(&l);
        let key = head
            .lines()
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            .expect("a key");
        let accept = Command::new(python())
            .args(["-c", ACCEPT_PY, key])
            .output()
            .expect("python");
        let accept = String::from_utf8_lossy(&accept.stdout).trim().to_owned();
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        );
        c.write_all(answer.as_bytes()).unwrap();
        // The client's close frame (6 bytes of head and mask, 2 of code), then ours and FIN.
        let mut close = [0u8; 8];
        c.read_exact(&mut close).unwrap();
        c.write_all(&[0x88, 0x02, 0x0f, 0xaa]).unwrap();
    });
    let s = Spate::start(&format!(
        "
num-threads: 1
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /ws:
        proxy.reverse.url: http://127.0.0.1:{port}/
        proxy.tunnel: ON
"
    ));
    let addr = s.addr;
    runtime().block_on(async move {
        let mut client = h2_client(addr).await;
        let (mut send, mut recv) = h2_tunnel(&mut client, addr, "/ws/").await;
        send.send_data(frame(8, &4010u16.to_be_bytes()).into(), false)
            .unwrap();
        let ended = async {
            assert_eq!(recv.next().await, Some((8, 4010u16.to_be_bytes().to_vec())));
            recv.next().await
        };
        let ended = tokio::time::timeout(Duration::from_secs(5), ended).await;
        assert_eq!(ended, Ok(None), "stream not ended after the backend closed");
        drop(send);
    });
    backend.join().unwrap();
}

#[test]
fn refused_upgrades_are_ordinary_responses() {
    let ws = WsServer::start();
    let s = spate(&ws, "proxy.tunnel: ON");
    // HTTP/1.1: the 403 passes through and the connection stays HTTP/1.1.
    let mut c = s.connect();
    let mut pending = Vec::new();
    c.write_all(handshake("/ws/deny").as_bytes()).unwrap();
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.status, 403);
    assert_eq!(r.text(), "no tunnel for you\n");
    c.write_all(b"GET /ws/deny HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c, &mut pending, false).status, 403);
    // HTTP/2: the same.
    let addr = s.addr;
    runtime().block_on(async move {
        let mut client = h2_client(addr).await;
        let (resp, _send) = client
            .send_request(connect(addr, "/ws/deny"), false)
            .unwrap();
        assert_eq!(resp.await.expect("response").status(), 403);
    });
    // A backend that ignores the upgrade and answers 200: HTTP/1.1 clients get it as it
    // is; an HTTP/2 client would read a 2xx as an open tunnel, so it gets 502.
    let b = backend::Backend::start();
    let yaml = format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: {}
        proxy.tunnel: ON
",
        b.url("/")
    );
    let plain = Spate::start(&yaml);
    let r = request(&plain, &handshake("/x"));
    assert_eq!(r.status, 200);
    let addr = plain.addr;
    runtime().block_on(async move {
        let mut client = h2_client(addr).await;
        let (resp, _send) = client.send_request(connect(addr, "/x"), false).unwrap();
        assert_eq!(resp.await.expect("response").status(), 502);
    });
}

#[test]
fn tunnels_off_forward_the_request_without_upgrade() {
    let ws = WsServer::start();
    let s = spate(&ws, "");
    // As before proxy.tunnel: Upgrade is hop-by-hop, so the backend sees a plain GET and
    // refuses it; the client's connection stays HTTP/1.1.
    let r = request(&s, &handshake("/ws/"));
    assert_eq!(r.status, 426, "{r:?}");
    assert!(r.header("upgrade").is_none() || r.status != 101);
    // HTTP/2 does not offer extended CONNECT.
    let addr = s.addr;
    runtime().block_on(async move {
        let client = h2_client(addr).await;
        assert!(!client.is_extended_connect_protocol_enabled());
    });
}

#[test]
fn idle_tunnels_time_out() {
    let ws = WsServer::start();
    // Current h2o: proxy.timeout.io. The idle times are measured from before the client's
    // last write (the timeout runs from the last traffic, which is later); the upper bound
    // tells 2 s from the 30 s default (and from the client's 20 s read timeout).
    let s = spate(&ws, "proxy.tunnel: ON\nproxy.timeout.io: 2000");
    let (mut c, _) = open_raw(&s, "/ws/");
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    // Traffic keeps it open past the timeout: 2.4 s of echoes 400 ms apart.
    let mut started = Instant::now();
    for i in 0..6 {
        std::thread::sleep(Duration::from_millis(400));
        started = Instant::now();
        echo(&mut c, format!("tick {i}").as_bytes());
    }
    let rest = read_to_close(&mut c);
    let idle = started.elapsed();
    assert!(rest.is_empty(), "{rest:?}");
    assert!(
        idle >= Duration::from_millis(1900) && idle < Duration::from_secs(10),
        "closed after {idle:?}"
    );
    // h2o 2.2's names: proxy.websocket and proxy.websocket.timeout.
    let s = spate(&ws, "proxy.websocket: ON\nproxy.websocket.timeout: 2000");
    let started = Instant::now();
    let (mut c, _) = open_raw(&s, "/ws/");
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    read_to_close(&mut c);
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_millis(1900) && idle < Duration::from_secs(10),
        "closed after {idle:?}"
    );
}

/// Sends SIGHUP after writing `yaml`; returns the `reloaded` line.
fn reload_with(s: &Spate, yaml: &str) -> String {
    // The same file (a reload matches listeners by their configured address).
    std::fs::write(s.path().join("spate.yaml"), yaml).unwrap();
    signal(&s.child, libc::SIGHUP);
    let end = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        if let Some(l) = seen.iter().find(|l: &&String| l.contains("reloaded")) {
            return l.clone();
        }
        assert!(Instant::now() < end, "no reload:\n{}", seen.join("\n"));
        seen.extend(s.stderr_lines());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A WebSocket session goes on across 20 reloads applied in place (each changes the path's
/// header commands; issue 43), and across one that starts a new generation (the old one keeps
/// serving the tunnel while it drains).
#[test]
fn tunnel_survives_a_reload() {
    let ws = WsServer::start();
    let s = spate(&ws, "proxy.tunnel: ON");
    let (mut c, _) = open_raw(&s, "/ws/");
    echo(&mut c, b"before");
    // Kept open to the end: the echo server's first `closed` line is then `c`'s.
    let mut sessions = Vec::new();
    for i in 0..20 {
        let opts = format!("proxy.tunnel: ON\nheader.add: \"x-reload: {i}\"");
        let line = reload_with(&s, &config(&ws, &opts));
        assert!(line.contains("in place"), "{line}");
        echo(&mut c, format!("after reload {i}").as_bytes());
        // A new session routes by the new configuration.
        let (mut d, head) = open_raw(&s, "/ws/");
        assert!(head.contains(&format!("x-reload: {i}")), "{head}");
        echo(&mut d, b"new");
        sessions.push(d);
    }
    let line = reload_with(
        &s,
        &config(&ws, "proxy.tunnel: ON").replace("num-threads: 1", "num-threads: 2"),
    );
    assert!(
        line.contains("new worker generation: num-threads"),
        "{line}"
    );
    // The old generation keeps serving the tunnel...
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(200));
        echo(&mut c, format!("after {i}").as_bytes());
    }
    // ...while new connections go to the new one.
    let (mut d, _) = open_raw(&s, "/ws/");
    echo(&mut d, b"new");
    c.write_all(&frame(8, &1000u16.to_be_bytes())).unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_frame(&mut c, &mut buf).map(|f| f.0), Some(8));
    assert_eq!(ws.closed(), "closed 1000 ");
}

#[test]
fn a_stop_waits_for_tunnels_until_shutdown_timeout() {
    let ws = WsServer::start();
    let mut s = Spate::start(
        &config(&ws, "proxy.tunnel: ON").replace("shutdown-timeout: 20", "shutdown-timeout: 5"),
    );
    let (mut c, _) = open_raw(&s, "/ws/");
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    echo(&mut c, b"before");
    let stopped_at = Instant::now();
    signal(&s.child, libc::SIGTERM);
    // Still served after the stop began (with 4.5 s to spare on an idle machine)...
    std::thread::sleep(Duration::from_millis(500));
    echo(&mut c, b"while stopping");
    // ...until shutdown-timeout, when the connection closes and spate exits.
    let rest = read_to_close(&mut c);
    let closed = stopped_at.elapsed();
    assert!(rest.is_empty(), "{rest:?}");
    // Not before the 5 s (counted from after the signal), and long before the 20 s of
    // `config`.
    assert!(
        closed >= Duration::from_millis(4900) && closed < Duration::from_secs(15),
        "closed {closed:?} after SIGTERM"
    );
    let status = wait_timeout(&mut s.child, Duration::from_secs(20)).expect("spate exits");
    assert!(status.success(), "{status:?}");
}

// --- helpers -----------------------------------------------------------------------------

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// An HTTP/2 client whose connection has received the server's SETTINGS.
async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let client = client.ready().await.expect("ready");
    // The SETTINGS frame may still be on its way: a round trip (any request) settles it.
    let (resp, _) = client
        .clone()
        .send_request(
            http::Request::get(format!("http://{addr}/metrics"))
                .body(())
                .unwrap(),
            true,
        )
        .expect("request");
    let _ = resp.await;
    client
}

fn connect(addr: SocketAddr, path: &str) -> http::Request<()> {
    http::Request::builder()
        .method(http::Method::CONNECT)
        .uri(format!("http://{addr}{path}"))
        .header("sec-websocket-version", "13")
        .extension(h2::ext::Protocol::from_static("websocket"))
        .body(())
        .unwrap()
}

/// Opens a WebSocket by extended CONNECT to `path`: the send side and the server's frames.
async fn h2_tunnel(
    client: &mut h2::client::SendRequest<bytes::Bytes>,
    addr: SocketAddr,
    path: &str,
) -> (h2::SendStream<bytes::Bytes>, Frames) {
    let (resp, send) = client
        .send_request(connect(addr, path), false)
        .expect("send CONNECT");
    let resp = resp.await.expect("response");
    assert_eq!(resp.status(), 200);
    (send, Frames::new(resp.into_body()))
}

/// An HTTP/1.1 WebSocket handshake (the key is RFC 6455's example).
fn handshake(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// Opens a WebSocket over HTTP/1.1 by hand; returns the stream and the 101's head.
fn open_raw(s: &Spate, path: &str) -> (TcpStream, String) {
    let mut c = s.connect();
    c.write_all(handshake(path).as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).expect("read the 101"), 1, "closed early");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("\r\nupgrade: websocket\r\n"), "{head}");
    assert!(lower.contains("\r\nconnection: upgrade\r\n"), "{head}");
    assert!(
        head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{head}"
    );
    (c, head)
}

/// Sends a text message and checks that it comes back.
fn echo(c: &mut TcpStream, msg: &[u8]) {
    c.write_all(&frame(1, msg)).expect("send");
    let mut buf = Vec::new();
    assert_eq!(read_frame(c, &mut buf), Some((1, msg.to_vec())));
}

/// One final, masked client frame.
fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n <= 0xffff => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// A whole unmasked server frame at the start of `buf`: opcode, payload, bytes used.
fn parse_frame(buf: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    let (&b0, &b1) = (buf.first()?, buf.get(1)?);
    let (len, at) = match b1 & 0x7f {
        126 => (
            u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?) as usize,
            4,
        ),
        127 => (
            u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?) as usize,
            10,
        ),
        n => (n as usize, 2),
    };
    assert!(b0 & 0x80 != 0, "fragmented frame");
    let payload = buf.get(at..at + len)?;
    Some((b0 & 0x0f, payload.to_vec(), at + len))
}

fn read_frame(c: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((op, payload, used)) = parse_frame(buf) {
            buf.drain(..used);
            return Some((op, payload));
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Server frames from an HTTP/2 response body, giving flow-control credit back as read.
struct Frames {
    body: h2::RecvStream,
    buf: Vec<u8>,
}

impl Frames {
    fn new(body: h2::RecvStream) -> Frames {
        Frames {
            body,
            buf: Vec::new(),
        }
    }

    async fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if let Some((op, payload, used)) = parse_frame(&self.buf) {
                self.buf.drain(..used);
                return Some((op, payload));
            }
            let fut = self.body.data();
            let chunk = tokio::time::timeout(Duration::from_secs(10), fut)
                .await
                .expect("no data in 10 s")?
                .ok()?;
            let _ = self.body.flow_control().release_capacity(chunk.len());
            self.buf.extend_from_slice(&chunk);
        }
    }
}
