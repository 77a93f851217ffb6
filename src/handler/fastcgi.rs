//! `fastcgi.connect` / `fastcgi.spawn`: requests answered by a FastCGI application (PHP-FPM,
//! php-cgi). This is the handler: the CGI meta-variables as h2o sets them (`params`), the
//! answer's head turned into a response, the error answers. The exchange and the pool are
//! `crate::upstream`'s; `script` routes `file.custom-handler` extensions here.

mod script;
#[cfg(test)]
mod tests;

pub use script::FileWithScripts;

use crate::config::FastcgiConf;
use crate::http::{Answer, Body, Handler, Request, Response, StreamBody};
use crate::proto::fastcgi::Params;
use crate::upstream::{self, FastcgiAnswer, FastcgiPool, FastcgiTarget};
use bytes::Bytes;
use std::net::SocketAddr;
use std::rc::Rc;

/// What the FastCGI handlers of a worker share: the pool of idle connections and the
/// `server-name` they give as SERVER_SOFTWARE.
pub struct Shared {
    pool: Rc<FastcgiPool>,
    server_software: String,
}

impl Shared {
    pub fn new(server_name: &str) -> Shared {
        Shared {
            pool: FastcgiPool::new(),
            server_software: server_name.to_owned(),
        }
    }

    pub fn handler(&self, conf: &FastcgiConf) -> FastcgiHandler {
        FastcgiHandler::new(conf, self.pool.clone(), &self.server_software)
    }
}

pub struct FastcgiHandler {
    target: Rc<FastcgiTarget>,
    pool: Rc<FastcgiPool>,
    document_root: Option<String>,
    /// SERVER_SOFTWARE: the configured `server-name`.
    server_software: String,
}

/// The script a `file.custom-handler` found for a request.
pub struct Script<'a> {
    /// SCRIPT_FILENAME: the file on disk.
    pub filename: &'a [u8],
    /// SCRIPT_NAME: its path in the URL.
    pub name: &'a [u8],
    /// PATH_INFO: what followed the script's name in the path, if anything.
    pub path_info: Option<&'a [u8]>,
}

impl FastcgiHandler {
    pub fn new(conf: &FastcgiConf, pool: Rc<FastcgiPool>, server_name: &str) -> FastcgiHandler {
        FastcgiHandler {
            target: Rc::new(FastcgiTarget::new(conf)),
            pool,
            document_root: conf.document_root.clone(),
            server_software: server_name.to_owned(),
        }
    }

    /// Sends `req` to the application, for `script` (a `file.custom-handler`) or for the
    /// whole path (`fastcgi.connect` on a path: SCRIPT_NAME empty, PATH_INFO the path).
    pub fn answer(&self, req: &Request, script: Option<Script<'_>>) -> Answer {
        let params = self.params(req, script);
        let (pool, target) = (self.pool.clone(), self.target.clone());
        let body = req.take_body();
        let head_only = req.is_head();
        Answer::Later(Box::pin(async move {
            match upstream::fastcgi_exchange(pool, target.clone(), params, body).await {
                Ok(answer) => response(answer, head_only),
                Err(e) => {
                    upstream::log_fastcgi_failure(&target, &e);
                    Response::error(e.status)
                }
            }
        }))
    }

    /// The CGI meta-variables (RFC 3875 section 4.1) in h2o's order, CONTENT_LENGTH aside
    /// (the client adds it once it knows the body's length).
    fn params(&self, req: &Request, script: Option<Script<'_>>) -> Params {
        let mut p = Params::with_capacity(512 + req.raw_head().len());
        let path_info = match &script {
            Some(s) => {
                p.push(b"SCRIPT_FILENAME", s.filename);
                p.push(b"SCRIPT_NAME", s.name);
                s.path_info
            }
            None => {
                p.push(b"SCRIPT_NAME", b"");
                Some(req.path())
            }
        };
        if let Some(info) = path_info {
            p.push(b"PATH_INFO", info);
        }
        if let Some(root) = &self.document_root {
            p.push(b"DOCUMENT_ROOT", root.as_bytes());
            if let Some(info) = path_info {
                let mut translated = Vec::with_capacity(root.len() + info.len());
                translated.extend_from_slice(root.as_bytes());
                translated.extend_from_slice(info);
                p.push(b"PATH_TRANSLATED", &translated);
            }
        }
        p.push(b"QUERY_STRING", req.query().unwrap_or_default());
        push_addr(&mut p, b"REMOTE_ADDR", b"REMOTE_PORT", req.peer);
        p.push(b"REQUEST_METHOD", req.method.as_bytes());
        let authority = req.authority().unwrap_or_default();
        p.push(b"HTTP_HOST", authority);
        p.push(b"REQUEST_URI", req.target());
        push_addr(&mut p, b"SERVER_ADDR", b"SERVER_PORT", req.local);
        p.push(b"SERVER_NAME", host_of(authority));
        p.push(b"SERVER_PROTOCOL", req.version.as_str().as_bytes());
        p.push(b"SERVER_SOFTWARE", self.server_software.as_bytes());
        if req.secure {
            p.push(b"HTTPS", b"on");
        }
        let mut cookies: Option<Vec<u8>> = None;
        for (name, value) in req.headers() {
            if name.eq_ignore_ascii_case(b"content-type") {
                p.push(b"CONTENT_TYPE", value);
            } else if name.eq_ignore_ascii_case(b"cookie") {
                // Several Cookie fields (HTTP/2 splits them) become one, as h2o sends them.
                match &mut cookies {
                    Some(c) => {
                        c.push(b';');
                        c.extend_from_slice(value);
                    }
                    None => cookies = Some(value.to_vec()),
                }
            } else if !skipped_field(name) {
                p.push_http(name, value);
            }
        }
        if let Some(c) = cookies {
            p.push(b"HTTP_COOKIE", &c);
        }
        p
    }
}

impl Handler for FastcgiHandler {
    fn handle(&self, req: &Request) -> Answer {
        self.answer(req, None)
    }

    fn streams_body(&self) -> bool {
        true
    }
}

/// Fields not passed as `HTTP_*`: those given otherwise (Host, Content-Length), those of the
/// connection, and `Proxy`, which CGI programs would take for their HTTP_PROXY setting
/// ("httpoxy").
fn skipped_field(name: &[u8]) -> bool {
    const SKIPPED: [&[u8]; 7] = [
        b"host",
        b"content-length",
        b"connection",
        b"transfer-encoding",
        b"keep-alive",
        b"te",
        b"proxy",
    ];
    SKIPPED.iter().any(|s| name.eq_ignore_ascii_case(s))
}

fn push_addr(p: &mut Params, addr_name: &[u8], port_name: &[u8], addr: SocketAddr) {
    use std::io::Write;
    let ip = match addr {
        // An IPv4 client on a dual-stack socket: its IPv4 form, as CGI programs expect.
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(*v6.ip()),
        },
        SocketAddr::V4(v4) => std::net::IpAddr::V4(*v4.ip()),
    };
    // Formatted on the stack: an address is at most 45 bytes, a port 5.
    let mut buf = [0u8; 64];
    let mut at = &mut buf[..];
    let _ = write!(at, "{ip}");
    let ip_len = 64 - at.len();
    p.push(addr_name, &buf[..ip_len]);
    let mut at = &mut buf[..];
    let _ = write!(at, "{}", addr.port());
    let port_len = 64 - at.len();
    p.push(port_name, &buf[..port_len]);
}

/// The host of an authority, without its port.
fn host_of(authority: &[u8]) -> &[u8] {
    if authority.first() == Some(&b'[') {
        return match memchr::memchr(b']', authority) {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match memchr::memrchr(b':', authority) {
        Some(i) => &authority[..i],
        None => authority,
    }
}

/// The client's response from the application's: its status and fields, the body streamed.
fn response(answer: FastcgiAnswer, head_only: bool) -> Response {
    let FastcgiAnswer { head, body } = answer;
    let mut resp = Response::new(head.status);
    for (name, value) in head.fields {
        if is_connection_field(&name) {
            continue;
        }
        resp.headers.push((Bytes::from(name), Bytes::from(value)));
    }
    let len = head.content_length;
    resp.body = if head_only && len.is_none() {
        Body::Empty
    } else {
        Body::Stream(StreamBody {
            len,
            stream: Box::new(body),
        })
    };
    resp
}

fn is_connection_field(name: &[u8]) -> bool {
    const FIELDS: [&[u8]; 5] = [
        b"connection",
        b"transfer-encoding",
        b"keep-alive",
        b"upgrade",
        b"proxy-connection",
    ];
    FIELDS.iter().any(|f| name.eq_ignore_ascii_case(f))
}
