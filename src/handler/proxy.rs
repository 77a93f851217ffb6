//! `proxy.reverse.url`: forwards requests to an HTTP/1.1 backend and streams its response
//! back. The exchange itself is `crate::upstream`; this is the handler: the target below the
//! configured path, the header conversion both ways ([`headers`]) and the error answers.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

#[doc(hidden)]
pub mod fuzzing;
mod headers;
#[cfg(test)]
mod tests;
mod tunnel;
mod websocket;

use crate::config::ProxyConf;
use crate::handler::headers::HeaderRewriter;
use crate::http::{Answer, Handler, Request, Version};
use crate::upstream::{self, Backend, Pool, UpstreamRequest};
use bytes::Bytes;
use std::rc::Rc;

pub struct ProxyHandler {
    /// The backend's authority, as metrics label it.
    name: std::sync::Arc<str>,
    backend: Rc<Backend>,
    pool: Rc<Pool>,
    conv: Rc<Conversion>,
    /// `proxy.tunnel`: upgrades become tunnels that close after this long idle.
    tunnel_timeout: Option<std::time::Duration>,
}

/// What the header conversion needs, shared by the handler and its pending answers.
struct Conversion {
    /// The URL's authority: the Host sent, and what a `Location` to rewrite names.
    upstream_authority: Bytes,
    /// The URL's path, which the path below the prefix is appended to.
    url_path: String,
    /// The matched path prefix without a trailing slash.
    prefix: String,
    preserve_host: bool,
    emit_x_forwarded_headers: bool,
    emit_via_header: bool,
    emit_missing_date_header: bool,
    preserve_x_forwarded_proto: bool,
    forward_close_connection: bool,
    /// `proxy.header.*`
    request_commands: HeaderRewriter,
}

/// What the response conversion needs to know of the client's request.
struct Client {
    secure: bool,
    authority: Option<Bytes>,
    version: Version,
}

impl ProxyHandler {
    /// `prefix` is the path the handler is configured on; `pool` the worker's idle backend
    /// connections.
    pub fn new(conf: &ProxyConf, prefix: &str, pool: Rc<Pool>) -> ProxyHandler {
        ProxyHandler {
            name: std::sync::Arc::from(conf.upstream.authority.as_str()),
            backend: Rc::new(Backend::new(conf)),
            pool,
            conv: Rc::new(Conversion {
                upstream_authority: Bytes::from(conf.upstream.authority.clone()),
                url_path: conf.upstream.path.clone(),
                prefix: prefix.trim_end_matches('/').to_string(),
                preserve_host: conf.preserve_host,
                emit_x_forwarded_headers: conf.emit_x_forwarded_headers,
                emit_via_header: conf.emit_via_header,
                emit_missing_date_header: conf.emit_missing_date_header,
                preserve_x_forwarded_proto: conf.preserve_x_forwarded_proto,
                forward_close_connection: conf.forward_close_connection,
                request_commands: HeaderRewriter::new(&conf.headers),
            }),
            tunnel_timeout: conf.tunnel.then_some(conf.tunnel_timeout),
        }
    }
}

impl Handler for ProxyHandler {
    fn handle(&self, req: &Request) -> Answer {
        if let Some(answer) = self.tunnel(req) {
            return answer;
        }
        let up = UpstreamRequest {
            method: req.method.clone(),
            target: self.conv.target(req.target()),
            headers: self.conv.request_headers(req),
            body: req.take_body(),
        };
        let client = Client {
            secure: req.secure,
            authority: req.authority().map(Bytes::copy_from_slice),
            version: req.version,
        };
        let (pool, backend, conv) = (self.pool.clone(), self.backend.clone(), self.conv.clone());
        let name = self.name.clone();
        Answer::Later(Box::pin(async move {
            let sent = upstream::send(pool, backend, up).await;
            crate::metrics::backend(&name, sent.is_err());
            match sent {
                Ok(resp) => conv.client_response(resp, &client),
                Err(e) => e.response(),
            }
        }))
    }

    fn streams_body(&self) -> bool {
        true
    }

    fn tunnels(&self) -> bool {
        self.tunnel_timeout.is_some()
    }
}

impl Conversion {
    /// The backend's request target: the URL's path followed by the request's target below
    /// the prefix (h2o's rule: prefix `/app`, URL `http://b/x/`: `/app/y?q` -> `/x/y?q`).
    fn target(&self, target: &[u8]) -> Bytes {
        let below = if target.first() == Some(&b'/') {
            target.get(self.prefix.len()..).unwrap_or_default()
        } else {
            // `OPTIONS *`: the URL's path itself.
            b""
        };
        let base = match self.url_path.as_bytes() {
            b"" => b"/",
            p => p,
        };
        let below = if base.ends_with(b"/") {
            below.strip_prefix(b"/").unwrap_or(below)
        } else {
            below
        };
        let mut out = Vec::with_capacity(base.len() + below.len() + 1);
        if base.first() != Some(&b'/') {
            out.push(b'/');
        }
        out.extend_from_slice(base);
        out.extend_from_slice(below);
        Bytes::from(out)
    }
}
