//! The proxy handler: targets below the prefix, header conversion both ways and error
//! answers, against real backends on loopback.

use super::*;
use crate::config::{HeaderCommand, HeaderOp, UpstreamAddr, UpstreamUrl};
use crate::http::request::RequestBuilder;
use crate::http::{Body, Method, Response};
use crate::upstream::tests::{backend, run, Received};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

fn proxy_conf(addr: SocketAddr, path: &str) -> ProxyConf {
    ProxyConf {
        preserve_host: false,
        emit_x_forwarded_headers: true,
        emit_via_header: true,
        emit_missing_date_header: true,
        preserve_x_forwarded_proto: false,
        headers: Vec::new(),
        connect_timeout: Duration::from_secs(2),
        first_byte_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(5),
        keepalive_timeout: Duration::from_secs(2),
        max_buffer_size: 64 * 1024,
        expect: false,
        forward_close_connection: false,
        max_idle_connections: 64,
        tunnel: false,
        tunnel_timeout: Duration::from_secs(5),
        ..ProxyConf::new(UpstreamUrl {
            addr: UpstreamAddr::Tcp {
                host: addr.ip().to_string(),
                port: addr.port(),
            },
            authority: addr.to_string(),
            path: path.into(),
            tls: false,
        })
    }
}

/// A client request as a codec builds it.
struct Req<'a> {
    method: Method,
    version: Version,
    secure: bool,
    target: &'a str,
    authority: Option<&'a str>,
    headers: &'a [(&'a str, &'a str)],
}

impl Req<'_> {
    fn get(target: &str) -> Req<'_> {
        Req {
            method: Method::Get,
            version: Version::Http11,
            secure: false,
            target,
            authority: None,
            headers: &[("Host", "client.example")],
        }
    }

    fn build(&self) -> Request {
        let mut head = Vec::new();
        let mut push = |s: &str| -> Range<usize> {
            head.extend_from_slice(s.as_bytes());
            head.len() - s.len()..head.len()
        };
        let target = push(self.target);
        let authority = self.authority.map(&mut push);
        let fields = self
            .headers
            .iter()
            .map(|(n, v)| (push(n), push(v)))
            .collect();
        RequestBuilder {
            method: self.method.clone(),
            version: self.version,
            secure: self.secure,
            peer: "10.1.2.3:5000".parse().unwrap(),
            local: "127.0.0.1:8080".parse().unwrap(),
            target,
            authority,
            fields,
        }
        .build(Bytes::from(head))
    }
}

/// Runs the handler's answer to completion.
fn answer(h: &ProxyHandler, req: &Request) -> Response {
    match h.handle(req) {
        Answer::Later(fut) => run(fut),
        Answer::Now(_) => panic!("a proxy answers later"),
    }
}

/// A backend that reports each request it reads and answers with `reply`.
fn capturing_backend(reply: &'static str) -> (SocketAddr, mpsc::Receiver<Received>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let b = backend(move |_, mut p| {
        while let Some(req) = p.read_request() {
            let _ = tx.lock().map(|t| t.send(req));
            if !p.write(reply.as_bytes()) {
                return;
            }
        }
    });
    (b.addr, rx)
}

fn handler(conf: &ProxyConf, prefix: &str) -> ProxyHandler {
    ProxyHandler::new(conf, prefix, Pool::new(), &[])
}

fn value<'a>(resp: &'a Response, name: &str) -> Option<&'a str> {
    resp.header(name.as_bytes())
        .map(|v| std::str::from_utf8(v).unwrap())
}

#[test]
fn targets_are_the_url_path_and_the_path_below_the_prefix() {
    let conf = proxy_conf("127.0.0.1:1".parse().unwrap(), "/x/");
    let t = |prefix: &str, url_path: &str, target: &str| {
        let mut c = conf.clone();
        c.backends[0].url.path = url_path.into();
        let h = handler(&c, prefix);
        let req = Request::for_test(Method::Get, target, &[]);
        String::from_utf8(h.conv.target(&req).to_vec()).unwrap()
    };
    assert_eq!(t("/app", "/x/", "/app/y?q"), "/x/y?q");
    assert_eq!(t("/app/", "/x/", "/app/y"), "/x/y");
    assert_eq!(t("/app", "/x/", "/app"), "/x/");
    assert_eq!(t("/app", "/x/", "/app?q"), "/x/?q");
    assert_eq!(t("/app", "/x", "/app/y"), "/x/y");
    assert_eq!(t("/", "/", "/y/z?q"), "/y/z?q");
    assert_eq!(t("/", "/base/", "/"), "/base/");
    assert_eq!(t("/", "", "/y"), "/y");
    assert_eq!(t("/", "/x/", "*"), "/x/");
    assert_eq!(t("/", "", "*"), "/");
    assert_eq!(t("", "", "/y?q"), "/y?q");
}

#[test]
fn request_headers_are_converted() {
    let (addr, seen) = capturing_backend("HTTP/1.1 204 No Content\r\n\r\n");
    let mut conf = proxy_conf(addr, "/x/");
    conf.headers = vec![
        HeaderCommand {
            op: HeaderOp::Set,
            name: "X-Proxy".into(),
            value: "spate".into(),
        },
        HeaderCommand {
            op: HeaderOp::Unset,
            name: "user-agent".into(),
            value: String::new(),
        },
    ];
    let h = handler(&conf, "/app");
    // As an HTTP/2 client sends it: lowercase names, :authority, cookie crumbs.
    let req = Req {
        method: Method::Get,
        version: Version::Http2,
        secure: true,
        target: "/app/page?q=1",
        authority: Some("client.example"),
        headers: &[
            ("cookie", "a=1"),
            ("user-agent", "test"),
            ("cookie", "b=2"),
            ("te", "trailers"),
            ("x-forwarded-for", "192.0.2.7"),
            ("x-forwarded-proto", "gopher"),
            ("via", "1.1 edge"),
            ("accept", "*/*"),
        ],
    }
    .build();
    assert_eq!(answer(&h, &req).status, 204);
    let got = seen.recv().unwrap();
    assert!(
        got.head.starts_with("GET /x/page?q=1 HTTP/1.1\r\n"),
        "{}",
        got.head
    );
    assert_eq!(got.header("host"), Some(addr.to_string().as_str()));
    assert_eq!(got.header("cookie"), Some("a=1; b=2"));
    assert_eq!(got.header("te"), Some("trailers"));
    assert_eq!(got.header("x-forwarded-for"), Some("192.0.2.7, 10.1.2.3"));
    assert_eq!(got.header("x-forwarded-proto"), Some("https"));
    assert_eq!(got.header("via"), Some("1.1 edge, 2 client.example"));
    assert_eq!(got.header("x-proxy"), Some("spate"));
    assert_eq!(got.header("user-agent"), None);
    assert_eq!(got.header("accept"), Some("*/*"));
    assert_eq!(got.header("connection"), Some("keep-alive"));
    assert_eq!(got.header("content-length"), None, "no body, no framing");
    assert_eq!(got.head.matches("ookie:").count(), 1);
}

#[test]
fn hop_by_hop_request_fields_stay_behind() {
    let (addr, seen) = capturing_backend("HTTP/1.1 204 No Content\r\n\r\n");
    let mut conf = proxy_conf(addr, "/");
    conf.preserve_host = true;
    conf.emit_x_forwarded_headers = false;
    conf.emit_via_header = false;
    let h = handler(&conf, "/");
    let req = Req {
        headers: &[
            ("Host", "client.example:8080"),
            ("Connection", "keep-alive, X-Secret"),
            ("X-Secret", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Connection", "keep-alive"),
            ("TE", "gzip"),
            ("Upgrade", "h2c"),
            ("HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA"),
            ("Expect", "100-continue"),
            ("X-Forwarded-For", "192.0.2.7"),
            ("Via", "1.0 old"),
        ],
        ..Req::get("/a")
    }
    .build();
    answer(&h, &req);
    let got = seen.recv().unwrap();
    assert_eq!(
        got.header("host"),
        Some("client.example:8080"),
        "preserve-host"
    );
    for gone in [
        "x-secret",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
        "http2-settings",
        "expect",
        "x-forwarded-proto",
    ] {
        assert_eq!(got.header(gone), None, "{gone}");
    }
    // Without emit-x-forwarded-headers and emit-via-header, the client's pass untouched.
    assert_eq!(got.header("x-forwarded-for"), Some("192.0.2.7"));
    assert_eq!(got.header("via"), Some("1.0 old"));
}

#[test]
fn a_request_received_in_early_data_carries_early_data_1_once() {
    let (addr, seen) = capturing_backend("HTTP/1.1 204 No Content\r\n\r\n");
    let h = handler(&proxy_conf(addr, "/"), "/");
    let plain = Req::get("/a").build();
    answer(&h, &plain);
    assert_eq!(seen.recv().unwrap().header("early-data"), None);
    // A client (an intermediary before us) may have said it already: one field goes on.
    let mut early = Req {
        headers: &[("early-data", "1")],
        ..Req::get("/a")
    }
    .build();
    early.set_early_data(true);
    answer(&h, &early);
    let got = seen.recv().unwrap();
    assert_eq!(got.header("early-data"), Some("1"));
    assert_eq!(
        got.head.to_ascii_lowercase().matches("early-data:").count(),
        1
    );
}

#[test]
fn response_headers_are_converted_and_location_rewritten() {
    // The backend points Location at itself, by the Host it was sent.
    let b = backend(|_, mut p| {
        while let Some(req) = p.read_request() {
            let host = req.header("host").unwrap_or_default().to_string();
            let reply = format!(
                "HTTP/1.1 302 Found\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n\
                 Keep-Alive: timeout=5\r\nServer: backend/1.0\r\n\
                 Location: http://{host}/x/next?q\r\nContent-Length: 0\r\n\r\n"
            );
            p.write(reply.as_bytes());
        }
    });
    let mut conf = proxy_conf(b.addr, "/x/");
    conf.forward_close_connection = true;
    let h = handler(&conf, "/app");
    let req = Req {
        secure: true,
        ..Req::get("/app/start")
    }
    .build();
    let resp = answer(&h, &req);
    assert_eq!(resp.status, 302);
    assert_eq!(
        value(&resp, "location"),
        Some("https://client.example/app/next?q")
    );
    assert_eq!(value(&resp, "x-hop"), None);
    assert_eq!(value(&resp, "keep-alive"), None);
    assert_eq!(value(&resp, "server"), None, "the codec writes our own");
    assert!(value(&resp, "date").is_some(), "added when missing");
    assert_eq!(
        value(&resp, "connection"),
        Some("close"),
        "forward.close-connection"
    );
    assert!(matches!(resp.body, Body::Empty));

    // Not forwarded to HTTP/2 clients, nor without the directive.
    let req = Req {
        version: Version::Http2,
        authority: Some("client.example"),
        ..Req::get("/app/start")
    }
    .build();
    assert_eq!(value(&answer(&h, &req), "connection"), None);
    conf.forward_close_connection = false;
    let h = handler(&conf, "/app");
    assert_eq!(
        value(&answer(&h, &Req::get("/app").build()), "connection"),
        None
    );
}

#[test]
fn locations_elsewhere_are_left_alone_and_dates_kept() {
    let reply = "HTTP/1.1 301 Moved Permanently\r\nLocation: http://elsewhere.example/x/\r\n\
                 Date: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 0\r\n\r\n";
    let (addr, _seen) = capturing_backend(reply);
    let h = handler(&proxy_conf(addr, "/x/"), "/");
    let resp = answer(&h, &Req::get("/").build());
    assert_eq!(
        value(&resp, "location"),
        Some("http://elsewhere.example/x/")
    );
    assert_eq!(value(&resp, "date"), Some("Sun, 06 Nov 1994 08:49:37 GMT"));
    assert_eq!(
        resp.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"date"))
            .count(),
        1
    );
    assert_eq!(value(&resp, "connection"), None);
}

#[test]
fn location_rewrites_follow_the_prefix() {
    let conf = proxy_conf("127.0.0.1:9000".parse().unwrap(), "/x/");
    let client = |secure| Client {
        secure,
        authority: Some(Bytes::from_static(b"front:8443")),
        version: Version::Http11,
        target_for: None,
    };
    let rw = |prefix: &str, loc: &str| {
        let h = handler(&conf, prefix);
        h.conv
            .rewrite_location(loc.as_bytes(), &client(false))
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
    };
    assert_eq!(
        rw("/app", "http://127.0.0.1:9000/x/y").as_deref(),
        Some("http://front:8443/app/y")
    );
    assert_eq!(
        rw("/app", "http://127.0.0.1:9000/x").as_deref(),
        Some("http://front:8443/app")
    );
    assert_eq!(
        rw("/", "http://127.0.0.1:9000/x/").as_deref(),
        Some("http://front:8443/")
    );
    assert_eq!(
        rw("/", "http://127.0.0.1:9000/x?q").as_deref(),
        Some("http://front:8443/?q")
    );
    assert_eq!(rw("/app", "http://127.0.0.1:9000/xy"), None);
    assert_eq!(rw("/app", "http://127.0.0.1:9001/x/y"), None);
    assert_eq!(rw("/app", "https://127.0.0.1:9000/x/y"), None);
    assert_eq!(rw("/app", "/x/y"), None);
}

#[test]
fn errors_become_answers() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let h = handler(
        &proxy_conf(SocketAddr::from(([127, 0, 0, 1], port)), "/"),
        "/",
    );
    assert!(h.streams_body());
    assert_eq!(answer(&h, &Req::get("/").build()).status, 502);
}

#[test]
fn request_bodies_reach_the_backend() {
    let (addr, seen) = capturing_backend("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let h = handler(&proxy_conf(addr, "/"), "/");
    let mut req = Req {
        method: Method::Post,
        ..Req::get("/upload")
    }
    .build();
    let (w, body) = crate::http::body::pipe(Some(7));
    req.set_body(body);
    w.push(Bytes::from_static(b"payload"));
    w.finish(None);
    let resp = answer(&h, &req);
    assert!(matches!(&resp.body, Body::Bytes(b) if b == "ok"));
    let got = seen.recv().unwrap();
    assert_eq!(got.header("content-length"), Some("7"));
    assert_eq!(got.body, b"payload");
}

/// The answer's future is boxed per request: it holds the HTTP/1.1 exchange's state only
/// (the HTTP/2 exchange and the connect are boxed apart, the request fields are serialized
/// before it starts, the exchange borrows them). It was 3.3 KB; glibc's per-thread cache
/// takes blocks up to 1,032 bytes, so it stays below that.
#[test]
fn the_pending_answer_is_small() {
    let (addr, _seen) = capturing_backend("HTTP/1.1 204 No Content\r\n\r\n");
    let h = handler(&proxy_conf(addr, "/"), "/");
    let Answer::Later(fut) = h.handle(&Req::get("/").build()) else {
        panic!("a proxy answers later");
    };
    let size = std::mem::size_of_val(&*fut);
    assert!(size <= 1024, "{size} bytes");
}
