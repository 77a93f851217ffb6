//! The upstream client against real backends on loopback: small scripted HTTP/1.1 servers on
//! std threads, each test saying exactly what its backend sends.

use super::*;
use crate::config::UpstreamAddr;
use crate::http::body::{pipe, BodyWriter};
use crate::http::{Body, Frame, Trailers};
use crate::http::{BodyError, Method, RequestBody, Response, Side};
use bytes::Bytes;
use std::future::{poll_fn, Future};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::thread;
use std::time::Duration;

/// Runs `f` as a worker does: a current-thread runtime and a LocalSet.
pub(crate) fn run<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tokio::task::LocalSet::new().block_on(&rt, f)
}

/// A backend that runs `serve` on a thread for each connection it accepts.
pub(crate) struct TestBackend {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
}

pub(crate) fn backend(serve: impl Fn(usize, Peer) + Send + Sync + 'static) -> TestBackend {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    let serve = Arc::new(serve);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let n = count.fetch_add(1, Ordering::SeqCst);
            let serve = serve.clone();
            thread::spawn(move || serve(n, Peer::new(stream)));
        }
    });
    TestBackend { addr, connections }
}

/// One request as the backend read it.
#[derive(Debug, Default)]
pub(crate) struct Received {
    pub head: String,
    pub body: Vec<u8>,
    pub trailers: String,
}

impl Received {
    /// The value of a header field, by lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// The backend's side of a connection.
pub(crate) struct Peer {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Peer {
    fn new(s: TcpStream) -> Peer {
        Peer {
            r: BufReader::new(s.try_clone().expect("clone")),
            w: s,
        }
    }

    fn line(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l),
        }
    }

    /// The request head only (up to the empty line).
    pub fn read_head(&mut self) -> Option<Received> {
        let mut head = String::new();
        loop {
            let l = self.line()?;
            if l == "\r\n" {
                break;
            }
            head.push_str(&l);
        }
        Some(Received {
            head,
            ..Received::default()
        })
    }

    /// The body of `req` by its framing.
    pub fn read_body(&mut self, req: &mut Received) -> Option<()> {
        if let Some(n) = req.header("content-length") {
            let mut body = vec![0; n.parse().ok()?];
            self.r.read_exact(&mut body).ok()?;
            req.body = body;
        } else if req.header("transfer-encoding") == Some("chunked") {
            loop {
                let size = usize::from_str_radix(self.line()?.trim(), 16).ok()?;
                if size == 0 {
                    break;
                }
                let mut chunk = vec![0; size + 2];
                self.r.read_exact(&mut chunk).ok()?;
                req.body.extend_from_slice(&chunk[..size]);
            }
            loop {
                let l = self.line()?;
                if l == "\r\n" {
                    break;
                }
                req.trailers.push_str(&l);
            }
        }
        Some(())
    }

    pub fn read_request(&mut self) -> Option<Received> {
        let mut req = self.read_head()?;
        self.read_body(&mut req)?;
        Some(req)
    }

    pub fn write(&mut self, b: &[u8]) -> bool {
        self.w.write_all(b).is_ok()
    }
}

pub(crate) fn conf(sa: SocketAddr) -> Backend {
    let addr = UpstreamAddr::Tcp {
        host: sa.ip().to_string(),
        port: sa.port(),
    };
    Backend {
        pool_key: super::PoolKey::new(&addr, false),
        tls: None,
        http2: None,
        addr,
        name: sa.to_string(),
        connect_timeout: Duration::from_secs(2),
        first_byte_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(5),
        keepalive_timeout: Duration::from_secs(5),
        max_idle_connections: 8,
        max_connections: 0,
        queue_max: 0,
        queue_timeout: Duration::from_secs(1),
        io_size: 16 * 1024,
        expect: false,
        max_response_head: 64 * 1024,
        max_response_fields: 128,
        max_informational: 16,
        proxy_protocol: false,
    }
}

fn request(method: Method, target: &'static str, body: Option<RequestBody>) -> UpstreamRequest {
    UpstreamRequest {
        method,
        target: Bytes::from_static(target.as_bytes()),
        headers: vec![(Bytes::from_static(b"Host"), Bytes::from_static(b"backend"))],
        body,
        client_addrs: None,
        interim: false,
    }
}

fn get(target: &'static str) -> UpstreamRequest {
    request(Method::Get, target, None)
}

async fn send_to(
    pool: &Rc<Pool>,
    b: &Rc<Backend>,
    req: UpstreamRequest,
) -> Result<Response, UpstreamError> {
    send(pool.clone(), b.clone(), req, |r| r).await
}

/// A whole body: data, then trailers if any.
async fn collect(body: Body) -> Result<(Vec<u8>, Option<Trailers>), BodyError> {
    match body {
        Body::Empty => Ok((Vec::new(), None)),
        Body::Bytes(b) => Ok((b.to_vec(), None)),
        Body::Stream(mut s) => {
            let mut data = Vec::new();
            let mut trailers = None;
            while let Some(frame) = poll_fn(|cx| s.stream.poll_frame(cx)).await {
                match frame? {
                    Frame::Data(d) => data.extend_from_slice(&d),
                    Frame::Trailers(t) => trailers = Some(t),
                }
            }
            if let Some(len) = s.len {
                assert_eq!(len, data.len() as u64, "declared length");
            }
            Ok((data, trailers))
        }
        other => panic!("unexpected body {other:?}"),
    }
}

fn header<'a>(resp: &'a Response, name: &str) -> Option<&'a [u8]> {
    resp.header(name.as_bytes()).map(|v| &v[..])
}

use std::rc::Rc;

#[test]
fn content_length_small_and_streamed() {
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let expected = big.clone();
    let b = backend(move |_, mut p| {
        while let Some(req) = p.read_request() {
            let body: &[u8] = if req.head.starts_with("GET /big") {
                &big
            } else {
                b"hello"
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Backend: yes\r\n\r\n",
                body.len()
            );
            if !p.write(head.as_bytes()) || !p.write(body) {
                return;
            }
        }
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let resp = send_to(&pool, &be, get("/small")).await.unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(header(&resp, "x-backend"), Some(&b"yes"[..]));
        assert!(
            header(&resp, "content-length").is_none(),
            "framing is the codec's"
        );
        // Whole in memory when it came with the head; a stream when it came later.
        assert_eq!(resp.body.known_len(), Some(5));
        let (data, _) = collect(resp.body).await.unwrap();
        assert_eq!(data, b"hello");

        let resp = send_to(&pool, &be, get("/big")).await.unwrap();
        assert_eq!(resp.body.known_len(), Some(1_000_000));
        let (data, trailers) = collect(resp.body).await.unwrap();
        assert!(data == expected && trailers.is_none());
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn chunked_with_trailers() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n");
        p.write(b"5\r\nhello\r\n");
        thread::sleep(Duration::from_millis(20));
        p.write(b"6;ext=1\r\n world\r\n0\r\nX-Sum: 42\r\nContent-Length: 3\r\n\r\n");
        p.read_request();
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let resp = send_to(&pool, &be, get("/")).await.unwrap();
        assert!(header(&resp, "transfer-encoding").is_none());
        assert_eq!(resp.body.known_len(), None);
        let (data, trailers) = collect(resp.body).await.unwrap();
        assert_eq!(data, b"hello world");
        assert_eq!(
            trailers,
            Some(vec![(
                Bytes::from_static(b"X-Sum"),
                Bytes::from_static(b"42")
            )]),
            "forbidden trailer fields are dropped"
        );
        assert_eq!(
            pool.idle_count(&be.pool_key),
            1,
            "a clean chunked response frees the connection"
        );
    });
}

#[test]
fn read_until_close() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil");
        thread::sleep(Duration::from_millis(20));
        p.write(b" the end");
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let resp = send_to(&pool, &be, get("/")).await.unwrap();
        let (data, _) = collect(resp.body).await.unwrap();
        assert_eq!(data, b"until the end");
        assert_eq!(pool.idle_count(&be.pool_key), 0);
    });
}

#[test]
fn interim_responses_are_skipped() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n");
        p.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
        p.read_request();
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let resp = send_to(&pool, &be, get("/")).await.unwrap();
        assert_eq!(resp.status, 201);
        assert!(header(&resp, "link").is_none());
        assert_eq!(collect(resp.body).await.unwrap().0, b"ok");
    });
}

/// The exchange polled as a client's driver polls it, listening for interim responses.
async fn send_listening(
    pool: &Rc<Pool>,
    b: &Rc<Backend>,
    req: UpstreamRequest,
) -> (
    Result<Response, UpstreamError>,
    Vec<crate::http::interim::Interim>,
) {
    let mut fut = Box::pin(send_to(pool, b, req));
    let mut got = Vec::new();
    let resp =
        poll_fn(|cx| crate::http::interim::listen(|| fut.as_mut().poll(cx), |i| got.push(i))).await;
    (resp, got)
}

#[test]
fn interim_responses_go_on_in_order_when_the_client_takes_them() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: keep-alive\r\n\r\n");
        p.write(
            b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </b.js>\r\n\r\n",
        );
        p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        p.read_request();
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let mut req = get("/");
        req.interim = true;
        let (resp, got) = send_listening(&pool, &be, req).await;
        let resp = resp.unwrap();
        assert_eq!(resp.status, 200);
        let seen: Vec<_> = got
            .iter()
            .map(|i| {
                let fields: Vec<_> = i
                    .headers
                    .iter()
                    .map(|(n, v)| {
                        format!(
                            "{}: {}",
                            String::from_utf8_lossy(n),
                            String::from_utf8_lossy(v)
                        )
                    })
                    .collect();
                (i.status, fields)
            })
            .collect();
        assert_eq!(
            seen,
            [
                (103, vec!["Link: </a.css>; rel=preload".to_string()]),
                (102, vec![]),
                (103, vec!["Link: </b.js>".to_string()]),
            ],
            "in order, without the connection's own fields"
        );
        assert_eq!(collect(resp.body).await.unwrap().0, b"ok");
        // A request whose client does not take them: nothing posted.
        let (resp, got) = send_listening(&pool, &be, get("/")).await;
        assert!(resp.is_ok() && got.is_empty());
    });
}

#[test]
fn endless_interim_responses_are_a_bad_gateway() {
    let b = backend(|_, mut p| {
        p.read_request();
        for _ in 0..1000 {
            if !p.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n") {
                return;
            }
        }
    });
    let pool = Pool::new();
    let mut c = conf(b.addr);
    c.max_informational = 3;
    let be = Rc::new(c);
    run(async {
        let mut req = get("/");
        req.interim = true;
        let (resp, got) = send_listening(&pool, &be, req).await;
        let Err(e) = resp else {
            panic!("a failure expected")
        };
        assert_eq!(e.response().status, 502);
        assert!(
            e.to_string()
                .contains("proxy.max-informational-responses (3)"),
            "{e}"
        );
        assert_eq!(got.len(), 3, "those within the limit went on");
    });
}

#[test]
fn an_interim_response_with_a_body_length_is_a_bad_gateway() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 103 Early Hints\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        p.read_request();
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let Err(e) = send_to(&pool, &be, get("/")).await else {
            panic!("a failure expected")
        };
        assert_eq!(e.response().status, 502);
        assert!(
            e.to_string()
                .contains("interim response with a body length"),
            "{e}"
        );
    });
}

#[test]
fn switching_protocols_is_a_bad_gateway_for_now() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n");
        p.read_request();
    });
    let be = Rc::new(conf(b.addr));
    let e = run(send_to(&Pool::new(), &be, get("/"))).unwrap_err();
    assert_eq!(e.status, 502);
}

#[test]
fn slow_first_byte_is_a_gateway_timeout() {
    let b = backend(|_, mut p| {
        p.read_request();
        thread::sleep(Duration::from_millis(1500));
        p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    });
    let mut c = conf(b.addr);
    c.first_byte_timeout = Duration::from_millis(200);
    let be = Rc::new(c);
    let started = std::time::Instant::now();
    let e = run(send_to(&Pool::new(), &be, get("/"))).unwrap_err();
    assert_eq!((e.status, e.side), (504, Side::Upstream));
    assert!(e.reason.contains("first_byte"), "{e}");
    assert!(started.elapsed() < Duration::from_millis(1200));
}

#[test]
fn refused_is_a_bad_gateway() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let be = Rc::new(conf(SocketAddr::from(([127, 0, 0, 1], port))));
    let e = run(send_to(&Pool::new(), &be, get("/"))).unwrap_err();
    assert_eq!((e.status, e.side), (502, Side::Upstream));
    assert!(e.reason.starts_with("cannot connect"), "{e}");
}

#[test]
fn malformed_responses_are_bad_gateways() {
    for reply in [
        &b"SSH-2.0-OpenSSH_9.2\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
    ] {
        let b = backend(move |_, mut p| {
            p.read_request();
            p.write(reply);
            p.read_request();
        });
        let be = Rc::new(conf(b.addr));
        let e = run(send_to(&Pool::new(), &be, get("/"))).unwrap_err();
        assert_eq!(e.status, 502, "{}", String::from_utf8_lossy(reply));
        assert!(e.reason.starts_with("malformed response"), "{e}");
    }
}

#[test]
fn a_backend_dying_mid_body_ends_the_body_with_an_error() {
    for reply in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\npartial"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\npartial\r\n",
    ] {
        let b = backend(move |_, mut p| {
            p.read_request();
            p.write(reply);
            thread::sleep(Duration::from_millis(50));
        });
        let pool = Pool::new();
        let be = Rc::new(conf(b.addr));
        run(async {
            let resp = send_to(&pool, &be, get("/")).await.unwrap();
            let e = collect(resp.body).await.unwrap_err();
            assert_eq!(e.side, Side::Upstream);
            assert_eq!(pool.idle_count(&be.pool_key), 0);
        });
    }
}

#[test]
fn a_silent_backend_mid_body_times_out() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
        thread::sleep(Duration::from_millis(1500));
    });
    let mut c = conf(b.addr);
    c.io_timeout = Duration::from_millis(200);
    let be = Rc::new(c);
    run(async {
        let resp = send_to(&Pool::new(), &be, get("/")).await.unwrap();
        let e = collect(resp.body).await.unwrap_err();
        assert_eq!(e.side, Side::Upstream);
        assert!(e.reason.contains("proxy.timeout.io"), "{e}");
    });
}

#[test]
fn the_pool_reuses_one_connection() {
    let b = backend(|_, mut p| {
        while let Some(req) = p.read_request() {
            let body = req.head.lines().next().unwrap_or_default().to_string();
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            p.write(head.as_bytes());
            p.write(body.as_bytes());
        }
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        for _ in 0..20 {
            let resp = send_to(&pool, &be, get("/n")).await.unwrap();
            assert_eq!(collect(resp.body).await.unwrap().0, b"GET /n HTTP/1.1");
        }
        assert_eq!(pool.idle_count(&be.pool_key), 1);
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn idle_connections_expire_and_are_capped() {
    let b = backend(|_, mut p| {
        while p.read_request().is_some() {
            p.write(b"HTTP/1.1 204 No Content\r\n\r\n");
        }
    });
    let pool = Pool::new();
    let mut c = conf(b.addr);
    c.keepalive_timeout = Duration::from_millis(100);
    c.max_idle_connections = 2;
    let be = Rc::new(c);
    run(async {
        // Three at once need three connections; only two stay idle.
        let (a, b2, c3) = tokio::join!(
            send_to(&pool, &be, get("/")),
            send_to(&pool, &be, get("/")),
            send_to(&pool, &be, get("/"))
        );
        assert!(a.is_ok() && b2.is_ok() && c3.is_ok());
        assert_eq!(pool.idle_count(&be.pool_key), 2);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(pool.idle_count(&be.pool_key), 0, "the sweeper closed them");
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 3);
}

#[test]
fn a_pooled_connection_the_backend_closed_is_not_reused() {
    // The backend says nothing about closing, then closes after each response.
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        for _ in 0..3 {
            let resp = send_to(&pool, &be, get("/")).await.unwrap();
            assert_eq!(collect(resp.body).await.unwrap().0, b"ok");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 3);
}

#[test]
fn a_request_on_a_dead_pooled_connection_is_retried_once() {
    // Connection 0 answers once, then reads the next request and closes without a word:
    // the race the liveness check cannot see.
    let b = backend(|n, mut p| {
        if n == 0 {
            p.read_request();
            p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst");
            p.read_head();
            return;
        }
        let req = p.read_request().unwrap_or_default();
        let body = format!("again:{}", String::from_utf8_lossy(&req.body));
        p.write(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        p.read_request();
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let resp = send_to(&pool, &be, get("/")).await.unwrap();
        assert_eq!(collect(resp.body).await.unwrap().0, b"first");
        // An idempotent request with a body: retried with the body sent again.
        let (w, body) = pipe(Some(4));
        w.push(Bytes::from_static(b"data"));
        w.finish(None);
        let resp = send_to(&pool, &be, request(Method::Put, "/", Some(body)))
            .await
            .unwrap();
        assert_eq!(collect(resp.body).await.unwrap().0, b"again:data");
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 2);
}

#[test]
fn a_post_whose_body_went_out_is_not_retried() {
    let b = backend(|n, mut p| {
        if n == 0 {
            p.read_request();
            p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            p.read_request();
            return;
        }
        p.read_request();
        p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        send_to(&pool, &be, get("/")).await.unwrap();
        let (w, body) = pipe(Some(4));
        w.push(Bytes::from_static(b"data"));
        w.finish(None);
        let e = send_to(&pool, &be, request(Method::Post, "/", Some(body)))
            .await
            .unwrap_err();
        assert_eq!(e.status, 502);
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 1);
}

/// Echoes each request: its framing, body and trailers.
fn echo_backend() -> TestBackend {
    backend(|_, mut p| {
        while let Some(req) = p.read_request() {
            let framing = if let Some(n) = req.header("content-length") {
                format!("length {n}")
            } else if let Some(te) = req.header("transfer-encoding") {
                te.to_string()
            } else {
                "none".into()
            };
            let expect = req.header("expect").unwrap_or("-");
            let body = format!(
                "{framing}|{expect}|{}|{}",
                String::from_utf8_lossy(&req.body),
                req.trailers.trim()
            );
            p.write(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    })
}

#[test]
fn request_bodies_are_forwarded_with_their_framing() {
    let b = echo_backend();
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let echo = |req| async {
            let resp = send_to(&pool, &be, req).await.unwrap();
            String::from_utf8(collect(resp.body).await.unwrap().0).unwrap()
        };
        assert_eq!(echo(get("/")).await, "none|-||");

        let (w, body) = pipe(Some(11));
        let sent = echo(request(Method::Post, "/", Some(body)));
        w.push(Bytes::from_static(b"hello "));
        w.push(Bytes::from_static(b"world"));
        w.finish(None);
        assert_eq!(sent.await, "length 11|-|hello world|");

        let (w, body) = pipe(None);
        w.push(Bytes::from_static(b"chunks"));
        w.push(Bytes::from_static(b" of it"));
        w.finish(Some(vec![
            (Bytes::from_static(b"X-Sum"), Bytes::from_static(b"7")),
            (Bytes::from_static(b"Host"), Bytes::from_static(b"evil")),
        ]));
        let got = echo(request(Method::Post, "/", Some(body))).await;
        assert_eq!(got, "chunked|-|chunks of it|X-Sum: 7");

        let (w, body) = pipe(Some(0));
        w.finish(None);
        assert_eq!(
            echo(request(Method::Post, "/", Some(body))).await,
            "length 0|-||"
        );
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn expect_continue_waits_for_the_backend() {
    let b = backend(|_, mut p| {
        let Some(mut req) = p.read_head() else { return };
        let expect = req.header("expect").unwrap_or("-").to_string();
        p.write(b"HTTP/1.1 100 Continue\r\n\r\n");
        p.read_body(&mut req);
        let body = format!("{expect}|{}", String::from_utf8_lossy(&req.body));
        p.write(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    });
    let mut c = conf(b.addr);
    c.expect = true;
    let be = Rc::new(c);
    run(async {
        let (w, body) = pipe(Some(3));
        w.push(Bytes::from_static(b"abc"));
        w.finish(None);
        let resp = send_to(&Pool::new(), &be, request(Method::Post, "/", Some(body)))
            .await
            .unwrap();
        assert_eq!(collect(resp.body).await.unwrap().0, b"100-continue|abc");
    });
}

#[test]
fn full_duplex_streaming() {
    // The backend answers at once and echoes each line of the body as it arrives.
    let b = backend(|_, mut p| {
        let Some(_) = p.read_head() else { return };
        p.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        loop {
            let Some(size) = p.line() else { return };
            let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if size == 0 {
                p.line();
                p.write(b"0\r\n\r\n");
                return;
            }
            let mut chunk = vec![0; size + 2];
            if p.r.read_exact(&mut chunk).is_err() {
                return;
            }
            p.write(format!("{size:x}\r\n").as_bytes());
            p.write(&chunk);
        }
    });
    let be = Rc::new(conf(b.addr));
    run(async {
        let (w, body) = pipe(None);
        let resp = send_to(&Pool::new(), &be, request(Method::Post, "/", Some(body)))
            .await
            .unwrap();
        let Body::Stream(mut s) = resp.body else {
            panic!("a stream")
        };
        for word in ["one", "two", "three"] {
            w.push(Bytes::from_static(word.as_bytes()));
            // The echo comes back only if the stream keeps sending the request body.
            let frame = poll_fn(|cx| s.stream.poll_frame(cx)).await;
            assert_eq!(
                frame,
                Some(Ok(Frame::Data(Bytes::from_static(word.as_bytes()))))
            );
        }
        w.finish(None);
        assert_eq!(poll_fn(|cx| s.stream.poll_frame(cx)).await, None);
    });
}

#[test]
fn a_client_that_aborts_its_body_is_not_a_backend_error() {
    let b = backend(|_, mut p| {
        p.read_request();
    });
    let be = Rc::new(conf(b.addr));
    run(async {
        let (w, body): (BodyWriter, _) = pipe(Some(10));
        w.push(Bytes::from_static(b"abc"));
        w.abort(BodyError::new(Side::Downstream, "client reset the stream"));
        let e = send_to(&Pool::new(), &be, request(Method::Post, "/", Some(body)))
            .await
            .unwrap_err();
        assert_eq!((e.status, e.side), (400, Side::Downstream));
    });
}

#[test]
fn head_responses_keep_their_length_and_have_no_body() {
    let b = backend(|_, mut p| {
        while p.read_request().is_some() {
            p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n");
        }
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        for _ in 0..2 {
            let resp = send_to(&pool, &be, request(Method::Head, "/", None))
                .await
                .unwrap();
            assert_eq!(resp.body.known_len(), Some(1234));
            let Body::Stream(mut s) = resp.body else {
                panic!("a stream")
            };
            assert_eq!(poll_fn(|cx| s.stream.poll_frame(cx)).await, None);
        }
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn dropping_the_body_closes_the_connection() {
    let b = backend(|_, mut p| {
        p.read_request();
        p.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nstart");
        // Blocks until the proxy closes.
        p.read_request();
    });
    let pool = Pool::new();
    let be = Rc::new(conf(b.addr));
    run(async {
        let resp = send_to(&pool, &be, get("/")).await.unwrap();
        drop(resp);
        assert_eq!(pool.idle_count(&be.pool_key), 0);
        let resp = send_to(&pool, &be, get("/")).await.unwrap();
        drop(resp);
    });
    assert_eq!(b.connections.load(Ordering::SeqCst), 2);
}

#[test]
fn unix_socket_backends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backend.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            let mut got = Vec::new();
            let mut buf = [0; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nunix");
        }
    });
    let mut c = conf(SocketAddr::from(([127, 0, 0, 1], 1)));
    c.addr = UpstreamAddr::Unix(path);
    c.pool_key = super::PoolKey::new(&c.addr, false);
    let be = Rc::new(c);
    run(async {
        let resp = send_to(&Pool::new(), &be, get("/")).await.unwrap();
        assert_eq!(collect(resp.body).await.unwrap().0, b"unix");
    });
}

#[test]
fn a_send_that_failed_is_resent_whole() {
    use super::conn::Conn;
    use super::request::{Prepared, RequestWriter};
    use crate::proto::h1::{RequestFraming, RequestHead};
    use tokio::io::AsyncReadExt;
    use tokio::net::UnixStream;

    run(async {
        let (w, body) = pipe(Some(10));
        w.push(Bytes::from_static(b"hello"));
        let head = RequestHead {
            method: &Method::Put,
            target: b"/r",
            headers: &[],
            framing: RequestFraming::Length(10),
            keep_alive: true,
            expect_continue: false,
        };
        let mut writer = RequestWriter::new(Prepared::new(&head, Some(body)), true, 1024);
        let (a, b) = UnixStream::pair().unwrap();
        let mut conn = Conn::Unix(a);
        let first = poll_fn(|cx| Poll::Ready(writer.poll_send(&mut conn, cx))).await;
        assert!(
            first.is_pending(),
            "head and the first piece sent, waiting for more"
        );
        drop(b);
        w.push(Bytes::from_static(b"wor"));
        let failed = poll_fn(|cx| writer.poll_send(&mut conn, cx)).await;
        assert!(failed.is_err());

        let again = writer
            .into_retry(true)
            .expect("idempotent, every piece kept");
        // The rest of the body comes after the failure: the retry still reads it.
        w.push(Bytes::from_static(b"ld"));
        w.finish(None);
        let mut writer = RequestWriter::new(again, false, 1024);
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut conn = Conn::Unix(a);
        poll_fn(|cx| writer.poll_send(&mut conn, cx)).await.unwrap();
        drop(conn);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        let got = String::from_utf8(got).unwrap();
        assert!(
            got.starts_with("PUT /r HTTP/1.1\r\nContent-Length: 10\r\n"),
            "{got}"
        );
        assert!(got.ends_with("\r\n\r\nhelloworld"), "{got}");
    });
}

#[test]
fn http2_ratio_is_an_exact_share_and_cleartext_needs_force_and_100() {
    use crate::config::{Location, UpstreamTls, UpstreamUrl};
    let url = UpstreamUrl {
        addr: UpstreamAddr::Tcp {
            host: "b".into(),
            port: 443,
        },
        authority: "b".into(),
        path: "/".into(),
        tls: true,
    };
    let mut conf = crate::config::ProxyConf::new(url);
    conf.backends[0].tls = Some(UpstreamTls {
        id: 0,
        verify_peer: false,
        cafile: None,
        session_cache: None,
        at: Location {
            file: Arc::from("t"),
            line: 1,
        },
    });
    let pool = Pool::new();
    let key = PoolKey::new(&conf.url().addr, true);
    for ratio in [1u8, 30, 50, 99, 100] {
        conf.http2_ratio = ratio;
        let h2 = Http2::new(&conf, true).unwrap();
        let n = (0..1000).filter(|_| h2.pick(&pool, &key)).count();
        assert_eq!(n, usize::from(ratio) * 10, "ratio {ratio}");
    }
    conf.http2_ratio = 0;
    assert!(Http2::new(&conf, true).is_none());
    // Cleartext: only 100 with force-cleartext, as h2o.
    for (ratio, force, on) in [(100, true, true), (100, false, false), (50, true, false)] {
        conf.http2_ratio = ratio;
        conf.http2_force_cleartext = force;
        assert_eq!(Http2::new(&conf, false).is_some(), on, "{ratio} {force}");
    }
}

/// The future every HTTP/1.1 proxied request is boxed in holds neither the HTTP/2 exchange's
/// state nor the connect's (each boxed on its own path): 3.1 KB before.
#[test]
fn the_exchange_future_leaves_rare_paths_out() {
    let be = Rc::new(conf("127.0.0.1:9".parse().unwrap()));
    let f = send(Pool::new(), be, get("/"), |r| r);
    assert!(
        std::mem::size_of_val(&f) <= 1600,
        "{}",
        std::mem::size_of_val(&f)
    );
}
