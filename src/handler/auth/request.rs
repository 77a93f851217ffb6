//! `auth-request` (nginx's `auth_request`, Caddy's `forward_auth`): before the path's handler
//! runs, a `GET` goes to an authentication service with the client's header fields (no body)
//! and where the request was going (`X-Forwarded-Method`, `-Uri`, `-Host`, `-Proto`, `-For`).
//! A 2xx lets the request through with the fields of `copy-headers` taken from the service's
//! answer; a 401 or 403 goes back to the client as the service wrote it (its
//! `WWW-Authenticate`, its body); any other answer, or none, is a 500 with one log line:
//! never a pass-through.
//!
//! It wraps the path's handler, which then runs once the service has said yes: the request
//! (its body still unread) waits in the answer's future, so a path without `auth-request`
//! is not touched.

use crate::config::{AuthRequestConf, ProxyConf};
use crate::http::request::RequestBuilder;
use crate::http::{Answer, Handler, Method, Request, Response};
use crate::upstream::{self, Backend, Pool, UpstreamRequest};
use bytes::{Bytes, BytesMut};
use std::rc::Rc;

/// A path's handler behind its authentication service (per worker).
pub struct AuthRequest {
    inner: Rc<dyn Handler>,
    pool: Rc<Pool>,
    service: Rc<Backend>,
    /// The URL's authority (the Host sent) and path (the target).
    authority: Bytes,
    target: Bytes,
    /// `copy-headers`, in lower case.
    copy: Rc<[Bytes]>,
}

impl AuthRequest {
    pub fn new(conf: &AuthRequestConf, inner: Box<dyn Handler>, pool: Rc<Pool>) -> AuthRequest {
        let mut proxy = ProxyConf::new(conf.url.clone());
        proxy.connect_timeout = conf.timeout;
        proxy.first_byte_timeout = conf.timeout;
        proxy.io_timeout = conf.timeout;
        let mut service = Backend::new(&proxy, &proxy.backends[0], &[]);
        // The log line of a failure names it for what it is.
        service.name = format!("auth-request {}", service.name);
        AuthRequest {
            inner: Rc::from(inner),
            pool,
            service: Rc::new(service),
            authority: Bytes::from(conf.url.authority.clone()),
            target: Bytes::from(conf.url.path.clone()),
            copy: conf
                .copy_headers
                .iter()
                .map(|n| Bytes::from(n.clone()))
                .collect(),
        }
    }

    /// The subrequest: the client's end-to-end fields (cookies joined into one), and where
    /// the request was going.
    fn subrequest(&self, req: &Request) -> UpstreamRequest {
        let mut headers = Vec::with_capacity(req.header_count() + 6);
        headers.push((Bytes::from_static(b"Host"), self.authority.clone()));
        let mut cookie: Option<BytesMut> = None;
        for (name, value) in req.shared_headers() {
            if is_hop_by_hop(&name) || is_forwarded(&name) {
                continue;
            }
            if name.eq_ignore_ascii_case(b"cookie") {
                match &mut cookie {
                    Some(c) => {
                        c.extend_from_slice(b"; ");
                        c.extend_from_slice(&value);
                    }
                    None => cookie = Some(BytesMut::from(&value[..])),
                }
                continue;
            }
            headers.push((name, value));
        }
        if let Some(c) = cookie {
            headers.push((Bytes::from_static(b"Cookie"), c.freeze()));
        }
        let field = |name: &'static [u8], value: Bytes| (Bytes::from_static(name), value);
        headers.push(field(
            b"X-Forwarded-Method",
            Bytes::copy_from_slice(req.method.as_bytes()),
        ));
        headers.push(field(b"X-Forwarded-Uri", req.shared_target()));
        if let Some(host) = req.shared_authority() {
            headers.push(field(b"X-Forwarded-Host", host));
        }
        let proto: &'static [u8] = if req.secure { b"https" } else { b"http" };
        headers.push(field(b"X-Forwarded-Proto", Bytes::from_static(proto)));
        headers.push(field(
            b"X-Forwarded-For",
            Bytes::from(req.peer.ip().to_canonical().to_string()),
        ));
        UpstreamRequest {
            method: Method::Get,
            target: self.target.clone(),
            headers,
            body: None,
            client_addrs: None,
            // The service's interim responses are its own, not the client's.
            interim: false,
        }
    }
}

impl Handler for AuthRequest {
    fn handle(&self, req: &Request) -> Answer {
        let asked = upstream::send(
            self.pool.clone(),
            self.service.clone(),
            self.subrequest(req),
            |r| r,
        );
        // The request waits for the service's word with its body unread.
        let mut waiting = req.clone();
        if let Some(body) = req.take_body() {
            waiting.set_body(body);
        }
        let (inner, copy) = (self.inner.clone(), self.copy.clone());
        let name = self.service.name.clone();
        Answer::Later(Box::pin(async move {
            // A failure to reach the service was logged by `send`, naming it.
            let Ok(resp) = asked.await else {
                return Response::error(500);
            };
            match resp.status {
                200..=299 => {
                    let mut req = with_fields(&waiting, &copy, &resp);
                    drop(resp);
                    if let Some(body) = waiting.take_body() {
                        req.set_body(body);
                    }
                    match inner.handle(&req) {
                        Answer::Now(resp) => resp,
                        Answer::Later(pending) => pending.await,
                    }
                }
                401 | 403 => refusal(resp),
                status => {
                    tracing::warn!(
                        service = %name,
                        status,
                        path = %String::from_utf8_lossy(waiting.path()),
                        "500: auth-request: the service answered neither 2xx nor 401/403"
                    );
                    Response::error(500)
                }
            }
        }))
    }

    fn streams_body(&self) -> bool {
        self.inner.streams_body()
    }

    /// An upgrade waits for the service like any request; the tunnel opens once it said yes.
    fn tunnels(&self) -> bool {
        self.inner.tunnels()
    }
}

/// The service's 401 or 403 as the client gets it: its fields but those of its connection
/// and framing, and its body.
fn refusal(resp: Response) -> Response {
    let mut out = Response::new(resp.status);
    for (name, value) in resp.headers.iter() {
        if !is_hop_by_hop(name)
            && !name.eq_ignore_ascii_case(b"date")
            && !name.eq_ignore_ascii_case(b"server")
        {
            out.headers.push((name.clone(), value.clone()));
        }
    }
    out.body = resp.body;
    out
}

/// `req` with the client's fields named in `copy` dropped and the service's fields of those
/// names added.
fn with_fields(req: &Request, copy: &[Bytes], from: &Response) -> Request {
    let named = |n: &[u8]| copy.iter().any(|c| n.eq_ignore_ascii_case(c));
    let mut head = BytesMut::with_capacity(req.raw_head().len() + 128);
    let mut span = |b: &[u8]| {
        let start = head.len();
        head.extend_from_slice(b);
        start..head.len()
    };
    let target = span(req.target());
    let authority = req.authority().map(&mut span);
    let mut fields = Vec::with_capacity(req.header_count() + copy.len());
    for (n, v) in req.headers().filter(|(n, _)| !named(n)) {
        fields.push((span(n), span(v)));
    }
    for (n, v) in from.headers.iter().filter(|(n, _)| named(n)) {
        fields.push((span(n), span(v)));
    }
    let protocol = req.protocol().map(&mut span);
    let mut out = RequestBuilder {
        method: req.method.clone(),
        version: req.version,
        secure: req.secure,
        peer: req.peer,
        local: req.local,
        target,
        authority,
        fields,
    }
    .build(head.freeze());
    if let Some(p) = protocol {
        out.set_protocol(p);
    }
    out
}

/// Fields of one connection, and the framing of a body the subrequest does not carry.
fn is_hop_by_hop(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 11] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"content-length",
        b"expect",
        b"host",
        b"http2-settings",
    ];
    NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// The `X-Forwarded-*` fields the subrequest sets itself.
fn is_forwarded(name: &[u8]) -> bool {
    name.len() > 12 && name[..12].eq_ignore_ascii_case(b"x-forwarded-")
}
