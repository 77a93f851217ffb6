//! Clients for the proxy tests, each reporting what it saw without judging it: curl (any
//! protocol, headers and trailers from its `-D` dump), the `h2` crate (timings, trailers,
//! stream errors), and raw HTTP/1.1 on a socket.
#![allow(dead_code)]

use super::h1read::{self, Headers, Input, Reply};
use super::Spate;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// How a client reaches a front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 over TCP.
    H1,
    /// HTTP/2 over TCP with prior knowledge.
    H2c,
    /// HTTP/1.1 over TLS (ALPN http/1.1).
    TlsH1,
    /// HTTP/2 over TLS (ALPN h2).
    TlsH2,
}

impl Proto {
    pub fn is_tls(self) -> bool {
        matches!(self, Proto::TlsH1 | Proto::TlsH2)
    }

    pub fn is_h2(self) -> bool {
        matches!(self, Proto::H2c | Proto::TlsH2)
    }

    pub fn curl_args(self) -> &'static [&'static str] {
        match self {
            Proto::H1 => &["--http1.1"],
            Proto::H2c => &["--http2-prior-knowledge"],
            Proto::TlsH1 => &["-k", "--http1.1"],
            Proto::TlsH2 => &["-k", "--http2"],
        }
    }

    pub fn url(self, s: &Spate, path: &str) -> String {
        let scheme = if self.is_tls() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", s.addr.port())
    }
}

/// What curl saw.
#[derive(Debug)]
pub struct Fetched {
    /// curl's exit code (0: the transfer completed).
    pub exit: i32,
    /// The final status (0 when none arrived).
    pub status: u16,
    /// `HTTP/1.1` or `HTTP/2`.
    pub version: String,
    pub headers: Headers,
    pub trailers: Headers,
    pub body: Vec<u8>,
    pub stderr: String,
}

impl Fetched {
    pub fn header(&self, name: &str) -> Option<&str> {
        h1read::header(&self.headers, name)
    }

    pub fn trailer(&self, name: &str) -> Option<&str> {
        h1read::header(&self.trailers, name)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Runs curl for `url` with `args`; the body is curl's standard output.
pub fn curl_url(url: &str, args: &[&str]) -> Fetched {
    let dump = tempfile::NamedTempFile::new().expect("temp file");
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "20", "-D"])
        .arg(dump.path())
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    let dump = std::fs::read(dump.path()).unwrap_or_default();
    let (status, version, headers, trailers) = parse_dump(&String::from_utf8_lossy(&dump));
    Fetched {
        exit: out.status.code().unwrap_or(-1),
        status,
        version,
        headers,
        trailers,
        body: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// curl to a front over `proto`.
pub fn fetch(s: &Spate, proto: Proto, path: &str, args: &[&str]) -> Fetched {
    let mut all: Vec<&str> = proto.curl_args().to_vec();
    all.extend_from_slice(args);
    curl_url(&proto.url(s, path), &all)
}

/// A `-D` dump: every head (1xx, then the final one), then the trailers, if any.
/// Returns (final status, version, final head's headers, trailers).
fn parse_dump(text: &str) -> (u16, String, Headers, Headers) {
    let (mut status, mut version) = (0u16, String::new());
    let (mut headers, mut trailers) = (Vec::new(), Vec::new());
    let mut in_final_trailers = false;
    for line in text.split("\r\n").flat_map(|l| l.split('\n')) {
        if line.starts_with("HTTP/") {
            let mut parts = line.split(' ');
            version = parts.next().unwrap_or("").to_string();
            status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            headers.clear();
            in_final_trailers = false;
            continue;
        }
        if line.is_empty() {
            if status >= 200 {
                in_final_trailers = true;
            }
            continue;
        }
        if let Some((n, v)) = line.split_once(':') {
            let field = (n.trim().to_string(), v.trim().to_string());
            if in_final_trailers {
                trailers.push(field);
            } else {
                headers.push(field);
            }
        }
    }
    (status, version, headers, trailers)
}

/// Sends `raw` on a new connection and reads the final response (1xx skipped).
pub fn h1(s: &Spate, raw: &[u8]) -> Reply {
    let mut c = s.connect();
    c.write_all(raw).expect("write request");
    let mut input = Input::new(c);
    loop {
        let r = h1read::read_reply(&mut input, raw.starts_with(b"HEAD "))
            .unwrap_or_else(|e| panic!("no response to {:?}: {e}", String::from_utf8_lossy(raw)));
        if r.status >= 200 {
            return r;
        }
    }
}

/// `GET path` over HTTP/1.1 with `Connection: close`.
pub fn h1_get(s: &Spate, path: &str) -> Reply {
    h1(
        s,
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// A request for [`h2_send`].
#[derive(Default, Clone)]
pub struct H2Req {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// Sent as separate DATA frames; none: END_STREAM on HEADERS (unless trailers).
    pub body: Vec<Vec<u8>>,
    pub trailers: Vec<(String, String)>,
    /// Wait this long before each request (on the same connection).
    pub pause: Duration,
}

impl H2Req {
    pub fn get(path: &str) -> H2Req {
        H2Req {
            method: "GET".into(),
            path: path.into(),
            ..H2Req::default()
        }
    }

    pub fn post(path: &str, body: Vec<Vec<u8>>) -> H2Req {
        H2Req {
            method: "POST".into(),
            path: path.into(),
            body,
            ..H2Req::default()
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> H2Req {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn trailer(mut self, name: &str, value: &str) -> H2Req {
        self.trailers.push((name.into(), value.into()));
        self
    }

    pub fn pause(mut self, t: Duration) -> H2Req {
        self.pause = t;
        self
    }
}

/// What the `h2` crate saw for one request.
#[derive(Debug)]
pub struct H2Reply {
    /// 0 when no response head arrived.
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    pub trailers: Option<http::HeaderMap>,
    /// The stream (or connection) failed: a reset, a GOAWAY, a protocol error.
    pub error: Option<String>,
    /// The error was a RST_STREAM from the peer.
    pub reset: bool,
    /// From sending the request to the first DATA byte.
    pub first_data: Option<Duration>,
    /// From sending the request to the end of the response.
    pub elapsed: Duration,
}

impl H2Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `reqs` one after the other on one HTTP/2 (h2c) connection to `addr`.
pub fn h2_send(addr: SocketAddr, reqs: Vec<H2Req>) -> Vec<H2Reply> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let run = async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .expect("connect h2c");
            let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let mut replies = Vec::new();
            for req in reqs {
                tokio::time::sleep(req.pause).await;
                replies.push(h2_one(client.clone(), addr, req).await);
            }
            replies
        };
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("HTTP/2 exchange took over 30 s")
    })
}

/// One request on `addr` over its own connection.
pub fn h2_fetch(addr: SocketAddr, req: H2Req) -> H2Reply {
    h2_send(addr, vec![req]).pop().expect("one reply")
}

async fn h2_one(
    client: h2::client::SendRequest<bytes::Bytes>,
    addr: SocketAddr,
    req: H2Req,
) -> H2Reply {
    let start = Instant::now();
    let mut reply = H2Reply {
        status: 0,
        headers: http::HeaderMap::new(),
        body: Vec::new(),
        trailers: None,
        error: None,
        reset: false,
        first_data: None,
        elapsed: Duration::ZERO,
    };
    let fail = |mut reply: H2Reply, e: h2::Error| {
        reply.reset = e.is_reset() && e.is_remote();
        reply.error = Some(format!("{e:?}"));
        reply.elapsed = start.elapsed();
        reply
    };
    let mut client = match client.ready().await {
        Ok(c) => c,
        Err(e) => return fail(reply, e),
    };
    let mut builder = http::Request::builder()
        .method(req.method.as_str())
        .uri(format!("http://{addr}{}", req.path));
    for (n, v) in &req.headers {
        builder = builder.header(n.as_str(), v.as_str());
    }
    let request = builder.body(()).expect("request");
    let end_on_headers = req.body.is_empty() && req.trailers.is_empty();
    let (response, mut send) = match client.send_request(request, end_on_headers) {
        Ok(x) => x,
        Err(e) => return fail(reply, e),
    };
    if !end_on_headers {
        // Errors here show in the response (an early 413, a reset): not judged here.
        let pieces = req.body.len();
        for (i, piece) in req.body.into_iter().enumerate() {
            let last = i + 1 == pieces && req.trailers.is_empty();
            let _ = send.send_data(bytes::Bytes::from(piece), last);
        }
        if !req.trailers.is_empty() {
            let mut map = http::HeaderMap::new();
            for (n, v) in &req.trailers {
                if let (Ok(n), Ok(v)) = (
                    http::header::HeaderName::from_bytes(n.as_bytes()),
                    http::HeaderValue::from_str(v),
                ) {
                    map.append(n, v);
                }
            }
            let _ = send.send_trailers(map);
        } else if pieces == 0 {
            let _ = send.send_data(bytes::Bytes::new(), true);
        }
    }
    let resp = match response.await {
        Ok(r) => r,
        Err(e) => return fail(reply, e),
    };
    reply.status = resp.status().as_u16();
    reply.headers = resp.headers().clone();
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(chunk) => {
                if reply.first_data.is_none() && !chunk.is_empty() {
                    reply.first_data = Some(start.elapsed());
                }
                let _ = body.flow_control().release_capacity(chunk.len());
                reply.body.extend_from_slice(&chunk);
            }
            Err(e) => return fail(reply, e),
        }
    }
    match body.trailers().await {
        Ok(t) => reply.trailers = t,
        Err(e) => return fail(reply, e),
    }
    reply.elapsed = start.elapsed();
    reply
}

/// A connected socket to `s` with a read timeout.
pub fn h1_conn(s: &Spate, read_timeout: Duration) -> TcpStream {
    let c = s.connect();
    c.set_read_timeout(Some(read_timeout)).ok();
    c
}

/// Over one HTTP/2 connection on `io`: GET `url` (a file of `body`), then the same request
/// conditional on its ETag (304), then twice: wait past the server's quiet trim (the
/// connection is parked), and send both again. The `h2` client's encoder refers to its
/// dynamic table for the repeated fields, so the server must have kept its decoder's table
/// across the parking, and the client decodes our responses against its own.
pub async fn h2_requests_across_parking<T>(io: T, url: &str, body: &[u8])
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, conn) = h2::client::handshake(io).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let get = |if_none_match: Option<http::HeaderValue>| {
        let client = client.clone();
        let mut req = http::Request::get(url).header("x-token", "abc123");
        if let Some(v) = if_none_match {
            req = req.header("if-none-match", v);
        }
        async move {
            let mut client = client.ready().await.expect("ready");
            let req = req.body(()).expect("request");
            let (resp, _) = client.send_request(req, true).expect("send");
            let (head, mut data) = resp.await.expect("response").into_parts();
            let mut got = Vec::new();
            while let Some(chunk) = data.data().await {
                got.extend_from_slice(&chunk.expect("body"));
            }
            (head, got)
        }
    };
    let (head, got) = get(None).await;
    assert_eq!(head.status, 200);
    assert_eq!(got, body);
    let etag = head.headers.get("etag").expect("etag").clone();
    // Indexed by both sides now: the conditional request's fields and the 304's.
    let (head, _) = get(Some(etag.clone())).await;
    assert_eq!(head.status, 304);
    for _ in 0..2 {
        // Past the quiet trim (1 s): the connection parks, and wakes for the next request.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (head, _) = get(Some(etag.clone())).await;
        assert_eq!(
            head.status, 304,
            "if-none-match decoded from the dynamic table"
        );
        assert_eq!(head.headers.get("etag"), Some(&etag));
        let (head, got) = get(None).await;
        assert_eq!(head.status, 200);
        assert_eq!(got, body);
        assert_eq!(head.headers.get("etag"), Some(&etag));
    }
}

/// Over one HTTP/2 connection on `io`: GET `urls` 100 at a time (the server's stream limit,
/// which the client learns only from the server's first answers), with windows large enough
/// that flow control holds nothing back; returns each body, in `urls`' order.
pub async fn h2_get_all<T>(io: T, urls: &[String]) -> Vec<Vec<u8>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 24)
        .initial_connection_window_size(1 << 30)
        .handshake::<_, bytes::Bytes>(io)
        .await
        .expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut bodies = Vec::new();
    for batch in urls.chunks(100) {
        bodies.extend(h2_get_batch(&client, batch).await);
    }
    bodies
}

async fn h2_get_batch(
    client: &h2::client::SendRequest<bytes::Bytes>,
    urls: &[String],
) -> Vec<Vec<u8>> {
    let mut answers = Vec::new();
    for url in urls {
        let mut client = client.clone().ready().await.expect("ready");
        let req = http::Request::get(url.as_str()).body(()).expect("request");
        let (resp, _) = client.send_request(req, true).expect("send");
        answers.push(tokio::spawn(async move {
            let (head, mut data) = resp.await.expect("response").into_parts();
            assert_eq!(head.status, 200);
            let mut got = Vec::new();
            while let Some(chunk) = data.data().await {
                let chunk = chunk.expect("body");
                let _ = data.flow_control().release_capacity(chunk.len());
                got.extend_from_slice(&chunk);
            }
            got
        }));
    }
    let mut bodies = Vec::new();
    for a in answers {
        bodies.push(a.await.expect("answer task"));
    }
    bodies
}

/// Names and contents of files to serve.
pub type SpliceFiles = Vec<(String, Vec<u8>)>;

/// Files of sizes around the HTTP/2 output's splice size (2048: below it a body is copied
/// into the output, from it on sent from the file cache's memory), the 16 KiB frame, and
/// files too large for the cache's memory whose frames of 8 KiB or more go from the file
/// (sendfile on cleartext) and whose short last frames are read, each with bytes of its own
/// so that a body sent in another's place or at the wrong offset shows.
pub fn splice_files() -> SpliceFiles {
    [100usize, 2047, 2048, 5000, 16_384, 16_385, 24_000, 70_001]
        .iter()
        .enumerate()
        .map(|(k, &len)| {
            let body = (0..len as u32)
                .map(|i| ((i.wrapping_mul(2_654_435_761) >> 24) as u8) ^ (k as u8).wrapping_mul(37))
                .collect();
            (format!("s{len}.bin"), body)
        })
        .collect()
}

/// The paths of 300 requests over `splice_files`, in an order that mixes sizes and repeats
/// each one many times in a row too (repeats take the answer memo's path).
pub fn splice_requests(files: &[(String, Vec<u8>)]) -> Vec<usize> {
    let n = files.len();
    (0..300)
        .map(|i| if i < 150 { i % n } else { (i / 25) % n })
        .collect()
}

/// Each of `bodies` is the file `order` asked for.
pub fn assert_bodies_are_the_files(
    bodies: &[Vec<u8>],
    order: &[usize],
    files: &[(String, Vec<u8>)],
) {
    assert_eq!(bodies.len(), order.len());
    for (got, &k) in bodies.iter().zip(order) {
        assert!(
            got == &files[k].1,
            "{}: {} bytes, differs from the file",
            files[k].0,
            got.len()
        );
    }
}

/// A spate of `conf` with `sndbuf: 4096` on its listener, serving `splice_files` from
/// `docroot` in `dir`; with the files, and the order of the requests to make for them.
pub fn start_for_splicing(
    conf: &str,
    dir: tempfile::TempDir,
    docroot: &str,
) -> (Spate, SpliceFiles, Vec<usize>) {
    let files = splice_files();
    for (name, body) in &files {
        super::write_file(dir.path(), &format!("{docroot}/{name}"), body);
    }
    let s = Spate::start_in(
        &conf.replace("  port: 0\n", "  port: 0\n  sndbuf: 4096\n"),
        dir,
    );
    let order = splice_requests(&files);
    (s, files, order)
}
