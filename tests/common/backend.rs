//! A small HTTP/1.1 backend for the proxy tests: std threads, one per connection, on TCP or a
//! unix socket. It misbehaves on request, by the last segment of the request path (so it
//! answers the same below any prefix the proxy maps to):
//!
//! | route | answer |
//! |---|---|
//! | `text` | 200, Content-Length, `hello from the backend\n` |
//! | `hop` | 200 with hop-by-hop headers (Connection naming `X-Hop`, Keep-Alive, Proxy-Connection, Upgrade) |
//! | `pattern?len=N` | N bytes of the test pattern (see `pattern.rs`), Content-Length, made on the fly |
//! | `chunked?pieces=N&delay=MS&trailers=0` | chunked, N pieces `piece I\n` MS apart, then trailers `X-Trailer-One: done`, `X-Pieces: N` |
//! | `delay?ms=N` | nothing for N ms, then 200 `late\n` |
//! | `die-cl` | Content-Length 100000, 1000 bytes, then close |
//! | `die-chunked` | one chunk, half of the next, then close |
//! | `malformed` | a response that is not HTTP, then close |
//! | `no-answer` | close without a byte |
//! | `upload` | reads the body without keeping it: `LEN HASH\n` (see `pattern::Hash64`) |
//! | `redirect` | 302 to `http://BACKEND/base/elsewhere` |
//! | `close` | 200 with `Connection: close`, then close |
//! | `status?code=N` | status N |
//! | anything else | echo: the request as the backend saw it (see [`Echo`]) |
//!
//! The backend never sends Date (so the proxy's missing-Date rule shows), answers
//! `Expect: 100-continue` with a 100 before reading a body, counts the connections it
//! accepted, the requests it read and those cut before their answer was complete, and can
//! close connections idle for longer than `Options::idle_close` (as backends with a short
//! keep-alive timeout do).
#![allow(dead_code)]

use super::h1read::{self, Framing, Headers, Input};
use super::pattern::{self, Hash64};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a connection may wait for the next request without `idle_close`, or for any read
/// inside a request.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `die-cl` and `die-chunked` live after their first bytes.
const DYING: Duration = Duration::from_millis(300);

#[derive(Default, Clone)]
pub struct Options {
    /// Close a keep-alive connection that has been idle this long.
    pub idle_close: Option<Duration>,
    /// Wait this many ms before every answer; may change while the backend runs.
    pub delay_ms: Option<Arc<AtomicU64>>,
    /// Listen here (to come back on the port of a stopped backend) instead of a free port.
    pub addr: Option<SocketAddr>,
}

/// A TCP or unix stream.
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    fn set_read_timeout(&self, t: Duration) {
        let _ = match self {
            Sock::Tcp(s) => s.set_read_timeout(Some(t)),
            Sock::Unix(s) => s.set_read_timeout(Some(t)),
        };
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn accept(&self) -> io::Result<Sock> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Sock::Tcp(s)
            }),
            Listener::Unix(l) => l.accept().map(|(s, _)| Sock::Unix(s)),
        }
    }
}

struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    requests: AtomicUsize,
    /// Requests cut by the peer (a read or write failed) before their answer was complete.
    aborted: AtomicUsize,
    /// A clone of every open connection by its number, to cut them all at `stop`.
    open: Mutex<HashMap<usize, Sock>>,
    opts: Options,
    /// `127.0.0.1:PORT`, or `localhost` on a unix socket (for `redirect`).
    authority: String,
}

/// A running test backend; stopped (listener and every connection closed) when dropped.
pub struct Backend {
    pub addr: Option<SocketAddr>,
    pub socket: Option<PathBuf>,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Backend {
    /// On 127.0.0.1, an ephemeral port.
    pub fn start() -> Backend {
        Backend::start_with(Options::default())
    }

    pub fn start_with(opts: Options) -> Backend {
        let at = opts
            .addr
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let l = TcpListener::bind(at).expect("bind backend");
        let addr = l.local_addr().expect("backend address");
        Backend::run(Listener::Tcp(l), Some(addr), None, opts)
    }

    /// On a unix socket at `path`.
    pub fn start_unix(path: &Path) -> Backend {
        let _ = std::fs::remove_file(path);
        let l = UnixListener::bind(path).expect("bind backend socket");
        Backend::run(
            Listener::Unix(l),
            None,
            Some(path.to_path_buf()),
            Options::default(),
        )
    }

    fn run(
        l: Listener,
        addr: Option<SocketAddr>,
        socket: Option<PathBuf>,
        opts: Options,
    ) -> Backend {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
            aborted: AtomicUsize::new(0),
            open: Mutex::new(HashMap::new()),
            opts,
            authority: addr.map_or("localhost".to_string(), |a| a.to_string()),
        });
        let sh = shared.clone();
        let acceptor = std::thread::spawn(move || accept_loop(l, sh));
        Backend {
            addr,
            socket,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The URL for `proxy.reverse.url`: `http://127.0.0.1:PORT{path}` or
    /// `http://[unix:SOCKET]{path}`.
    pub fn url(&self, path: &str) -> String {
        match (&self.addr, &self.socket) {
            (Some(a), _) => format!("http://{a}{path}"),
            (None, Some(p)) => format!("http://[unix:{}]{path}", p.display()),
            (None, None) => unreachable!("a backend listens somewhere"),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.map_or(0, |a| a.port())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Request heads read so far.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Requests whose connection failed before their answer was complete (the proxy gave up
    /// on them, as it should when its client left).
    pub fn aborted(&self) -> usize {
        self.shared.aborted.load(Ordering::SeqCst)
    }

    /// Stops listening and cuts every connection.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        if let Ok(open) = self.shared.open.lock() {
            for s in open.values() {
                s.shutdown();
            }
        }
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(l: Listener, shared: Arc<Shared>) {
    // Non-blocking, polled, so `stop` needs no wake-up connection.
    let _ = match &l {
        Listener::Tcp(l) => l.set_nonblocking(true),
        Listener::Unix(l) => l.set_nonblocking(true),
    };
    while !shared.stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok(sock) => {
                let blocking = match &sock {
                    Sock::Tcp(s) => s.set_nonblocking(false),
                    Sock::Unix(s) => s.set_nonblocking(false),
                };
                if blocking.is_err() {
                    continue;
                }
                let id = shared.accepted.fetch_add(1, Ordering::SeqCst);
                if let (Ok(mut open), Ok(c)) = (shared.open.lock(), sock.try_clone()) {
                    open.insert(id, c);
                }
                let sh = shared.clone();
                std::thread::spawn(move || {
                    serve(sock, &sh);
                    if let Ok(mut open) = sh.open.lock() {
                        open.remove(&id);
                    }
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// A request head as the backend read it.
struct Req {
    method: String,
    target: String,
    version: String,
    headers: Headers,
}

impl Req {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// The route: the last segment of the path.
    fn route(&self) -> &str {
        self.path().rsplit('/').next().unwrap_or("")
    }

    fn param(&self, name: &str) -> Option<&str> {
        let query = self.target.split_once('?')?.1;
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    fn num(&self, name: &str, default: u64) -> u64 {
        self.param(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    fn header(&self, name: &str) -> Option<&str> {
        h1read::header(&self.headers, name)
    }

    fn wants_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.to_ascii_lowercase().contains("close"))
            || self.version == "HTTP/1.0"
    }
}

/// Whether the connection may carry another request.
enum After {
    KeepAlive,
    Close,
}

fn serve(sock: Sock, shared: &Shared) {
    let Ok(reader) = sock.try_clone() else {
        return;
    };
    let mut input = Input::new(reader);
    let mut out = sock;
    loop {
        let idle = shared.opts.idle_close.unwrap_or(READ_TIMEOUT);
        if input.buffered().is_empty() {
            input.get_ref().set_read_timeout(idle);
        }
        let head = match input.read_head() {
            Ok(Some(h)) => h,
            _ => break,
        };
        input.get_ref().set_read_timeout(READ_TIMEOUT);
        shared.requests.fetch_add(1, Ordering::SeqCst);
        if let Some(ms) = &shared.opts.delay_ms {
            std::thread::sleep(Duration::from_millis(ms.load(Ordering::SeqCst)));
        }
        let (line, headers) = h1read::parse_head(&head);
        let mut parts = line.split(' ');
        let req = Req {
            method: parts.next().unwrap_or("").to_string(),
            target: parts.next().unwrap_or("").to_string(),
            version: parts.next().unwrap_or("").to_string(),
            headers,
        };
        match answer(&req, &mut input, &mut out, shared) {
            Ok(After::KeepAlive) if !req.wants_close() => {}
            Ok(_) => break,
            Err(_) => {
                if !shared.stop.load(Ordering::SeqCst) {
                    shared.aborted.fetch_add(1, Ordering::SeqCst);
                }
                break;
            }
        }
    }
    out.shutdown();
}

/// A request body (after the 100 Continue it asked for) to `sink`; its trailers.
fn read_body(
    req: &Req,
    input: &mut Input<Sock>,
    out: &mut Sock,
    sink: &mut dyn FnMut(&[u8]),
) -> io::Result<Headers> {
    let framing = h1read::framing(&req.headers, true);
    let expects = req
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if expects && framing != Framing::None {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    match framing {
        Framing::Chunked => input.read_chunked(sink),
        Framing::Length(n) => input.read_exact_to(n, sink).map(|_| Vec::new()),
        Framing::None | Framing::UntilClose => Ok(Vec::new()),
    }
}

fn head(status: u16, headers: &[(&str, String)]) -> Vec<u8> {
    let mut h = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (n, v) in headers {
        h.push_str(&format!("{n}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        404 => "Not Found",
        500 => "Internal Server Error",
        _ => "Whatever",
    }
}

/// A complete response with Content-Length.
fn simple(out: &mut Sock, status: u16, extra: &[(&str, String)], body: &[u8]) -> io::Result<()> {
    let mut headers: Vec<(&str, String)> = vec![
        ("Content-Length", body.len().to_string()),
        ("Content-Type", "text/plain".to_string()),
    ];
    headers.extend(extra.iter().cloned());
    let mut msg = head(status, &headers);
    msg.extend_from_slice(body);
    out.write_all(&msg)
}

fn answer(
    req: &Req,
    input: &mut Input<Sock>,
    out: &mut Sock,
    shared: &Shared,
) -> io::Result<After> {
    let route = req.route().to_string();
    if route == "upload" {
        let mut h = Hash64::new();
        read_body(req, input, out, &mut |b| h.update(b))?;
        let body = format!("{} {:016x}\n", h.len(), h.finish());
        simple(out, 200, &[], body.as_bytes())?;
        return Ok(After::KeepAlive);
    }
    if !matches!(
        route.as_str(),
        "text"
            | "hop"
            | "pattern"
            | "chunked"
            | "delay"
            | "die-cl"
            | "die-chunked"
            | "malformed"
            | "no-answer"
            | "redirect"
            | "close"
            | "status"
    ) {
        return echo(req, input, out);
    }
    read_body(req, input, out, &mut |_| {})?;
    match route.as_str() {
        "text" => simple(out, 200, &[], b"hello from the backend\n")?,
        "hop" => simple(
            out,
            200,
            &[
                ("Connection", "keep-alive, X-Hop".to_string()),
                ("Keep-Alive", "timeout=5".to_string()),
                ("X-Hop", "secret".to_string()),
                ("Proxy-Connection", "keep-alive".to_string()),
                ("Upgrade", "example/1".to_string()),
                ("X-End-To-End", "kept".to_string()),
            ],
            b"hop\n",
        )?,
        "pattern" => {
            let len = req.num("len", 1000);
            out.write_all(&head(
                200,
                &[
                    ("Content-Length", len.to_string()),
                    ("Content-Type", "application/octet-stream".to_string()),
                ],
            ))?;
            let mut buf = vec![0u8; 256 * 1024];
            let mut sent = 0u64;
            while sent < len {
                let n = (len - sent).min(buf.len() as u64) as usize;
                pattern::fill(sent, &mut buf[..n]);
                out.write_all(&buf[..n])?;
                sent += n as u64;
            }
        }
        "chunked" => {
            let pieces = req.num("pieces", 3);
            let delay = Duration::from_millis(req.num("delay", 0));
            let trailers = req.num("trailers", 1) == 1;
            let mut headers = vec![
                ("Transfer-Encoding", "chunked".to_string()),
                ("Content-Type", "text/plain".to_string()),
            ];
            if trailers {
                headers.push(("Trailer", "X-Trailer-One, X-Pieces".to_string()));
            }
            out.write_all(&head(200, &headers))?;
            for i in 0..pieces {
                if i > 0 {
                    std::thread::sleep(delay);
                }
                let piece = format!("piece {i}\n");
                out.write_all(format!("{:x}\r\n{piece}\r\n", piece.len()).as_bytes())?;
            }
            if trailers {
                let t = format!("0\r\nX-Trailer-One: done\r\nX-Pieces: {pieces}\r\n\r\n");
                out.write_all(t.as_bytes())?;
            } else {
                out.write_all(b"0\r\n\r\n")?;
            }
        }
        "delay" => {
            std::thread::sleep(Duration::from_millis(req.num("ms", 1000)));
            simple(out, 200, &[], b"late\n")?;
        }
        "die-cl" => {
            let mut body = vec![0u8; 1000];
            pattern::fill(0, &mut body);
            let mut msg = head(200, &[("Content-Length", "100000".to_string())]);
            msg.extend_from_slice(&body);
            out.write_all(&msg)?;
            // Long enough for any proxy to have passed the head on: the cut is mid-body.
            std::thread::sleep(DYING);
            return Ok(After::Close);
        }
        "die-chunked" => {
            out.write_all(&head(200, &[("Transfer-Encoding", "chunked".to_string())]))?;
            out.write_all(b"5\r\nhello\r\n")?;
            std::thread::sleep(DYING);
            out.write_all(b"10\r\nabc")?;
            std::thread::sleep(Duration::from_millis(50));
            return Ok(After::Close);
        }
        "malformed" => {
            out.write_all(b"this is not HTTP at all\r\n\x01\x02\r\n\r\n")?;
            return Ok(After::Close);
        }
        "no-answer" => return Ok(After::Close),
        "redirect" => {
            let location = format!("http://{}/base/elsewhere", shared.authority);
            simple(out, 302, &[("Location", location)], b"")?;
        }
        "close" => {
            simple(out, 200, &[("Connection", "close".to_string())], b"bye\n")?;
            return Ok(After::Close);
        }
        "status" => {
            let code = req.num("code", 404) as u16;
            simple(out, code, &[], format!("status {code}\n").as_bytes())?;
        }
        _ => unreachable!("routes are matched above"),
    }
    Ok(After::KeepAlive)
}

/// Answers with the request as the backend read it (see [`Echo`]).
fn echo(req: &Req, input: &mut Input<Sock>, out: &mut Sock) -> io::Result<After> {
    let mut body = Vec::new();
    let trailers = read_body(req, input, out, &mut |b| body.extend_from_slice(b))?;
    let mut text = format!(
        "method: {}\ntarget: {}\nversion: {}\n",
        req.method, req.target, req.version
    );
    for (n, v) in &req.headers {
        text.push_str(&format!("header: {n}: {v}\n"));
    }
    for (n, v) in &trailers {
        text.push_str(&format!("trailer: {n}: {v}\n"));
    }
    text.push_str("body:\n");
    let mut msg = text.into_bytes();
    msg.extend_from_slice(&body);
    simple(out, 200, &[], &msg)?;
    Ok(After::KeepAlive)
}

/// A request as the echo route saw it.
#[derive(Debug)]
pub struct Echo {
    pub method: String,
    pub target: String,
    pub version: String,
    pub headers: Headers,
    pub trailers: Headers,
    pub body: Vec<u8>,
}

impl Echo {
    /// Parses an echo answer's body; None when it is not one.
    pub fn parse(bytes: &[u8]) -> Option<Echo> {
        let split = h1read::find(bytes, b"body:\n")?;
        let text = String::from_utf8_lossy(&bytes[..split]);
        let mut e = Echo {
            method: String::new(),
            target: String::new(),
            version: String::new(),
            headers: Vec::new(),
            trailers: Vec::new(),
            body: bytes[split + 6..].to_vec(),
        };
        for line in text.lines() {
            let (key, rest) = line.split_once(": ")?;
            match key {
                "method" => e.method = rest.to_string(),
                "target" => e.target = rest.to_string(),
                "version" => e.version = rest.to_string(),
                "header" | "trailer" => {
                    let (n, v) = rest.split_once(':')?;
                    let field = (n.trim().to_string(), v.trim().to_string());
                    if key == "header" {
                        e.headers.push(field);
                    } else {
                        e.trailers.push(field);
                    }
                }
                _ => return None,
            }
        }
        Some(e)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        h1read::header(&self.headers, name)
    }

    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        h1read::headers_named(&self.headers, name)
    }

    pub fn trailer(&self, name: &str) -> Option<&str> {
        h1read::header(&self.trailers, name)
    }
}
