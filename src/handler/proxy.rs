//! `proxy.reverse.url`: forwards requests to an HTTP/1.1 backend and streams its response
//! back. The exchange itself is `crate::upstream`; this is the handler: the target below the
//! configured path, the header conversion both ways (`headers`) and the error answers.

mod cache;
#[doc(hidden)]
pub mod fuzzing;
mod headers;
mod reproxy;
#[cfg(test)]
mod tests;
mod tunnel;
mod websocket;

use crate::config::{ProxyConf, SendInformational};
use crate::handler::headers::HeaderRewriter;
use crate::http::{Answer, Handler, Pending, Request, Response, Version};
use crate::tls::client::TlsClient;
use crate::upstream::{self, Backend, Board, Group, Pool, TargetFor, UpstreamRequest};
use bytes::Bytes;
use std::rc::Rc;

pub struct ProxyHandler {
    /// The backend's authority, as metrics label it.
    name: std::sync::Arc<str>,
    /// The first backend: the only one unless `group` is set.
    backend: Rc<Backend>,
    /// Several backends: the balancer chooses.
    group: Option<Rc<Group>>,
    /// Their health; kept for a single backend too while an active check probes it.
    _board: Option<std::sync::Arc<Board>>,
    pool: Rc<Pool>,
    conv: Rc<Conversion>,
    /// `proxy.tunnel`: upgrades become tunnels that close after this long idle.
    tunnel_timeout: Option<std::time::Duration>,
    /// `proxy.proxy-protocol`: the client's addresses go with each request.
    proxy_protocol: bool,
    /// `proxy.cache`: the store answers first.
    cache: Option<cache::Cache>,
    /// `send-informational`: which clients the backend's interim responses go on to.
    informational: Informational,
    /// `reproxy: ON`: a backend's `X-Reproxy-URL` is followed.
    reproxy: Option<Rc<reproxy::Reproxy>>,
}

/// `send-informational` as the handler applies it to a request's protocol.
#[derive(Clone, Copy)]
pub(crate) struct Informational(SendInformational);

impl Informational {
    pub(crate) fn new(mode: SendInformational) -> Informational {
        Informational(mode)
    }

    /// Whether any client gets interim responses.
    pub(crate) fn any(self) -> bool {
        self.0 != SendInformational::None
    }

    /// Whether a client speaking `version` gets interim responses: never HTTP/1.0 (RFC 9110
    /// 15.2), HTTP/1.1 only with `all`, HTTP/2 and HTTP/3 unless `none` (h2o's rule).
    #[inline]
    pub(crate) fn reaches(self, version: Version) -> bool {
        match (self.0, version) {
            (SendInformational::None, _) | (_, Version::Http10) => false,
            (SendInformational::All, _) => true,
            (SendInformational::ExceptH1, v) => v != Version::Http11,
        }
    }
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
    /// `send-server-name: preserve`: the backend's Server field is kept.
    preserve_server_header: bool,
    /// `proxy.header.*`
    request_commands: HeaderRewriter,
    /// The added fields of the last request, for the next one.
    added: std::cell::RefCell<headers::Added>,
}

/// What the response conversion needs to know of the client's request, and with backends of
/// different paths what rebuilds its target for the one chosen.
struct Client {
    secure: bool,
    authority: Option<Bytes>,
    version: Version,
    target_for: Option<TargetFor>,
}

impl ProxyHandler {
    /// `prefix` is the path the handler is configured on; `pool` the worker's idle backend
    /// connections; `clients` the TLS clients of `https://` backends (`prepare` builds them).
    pub fn new(
        conf: &ProxyConf,
        prefix: &str,
        pool: Rc<Pool>,
        clients: &[Option<TlsClient>],
    ) -> ProxyHandler {
        let url = conf.url();
        // One backend goes straight to it; an active check still watches it (logs, metrics).
        let board = (conf.backends.len() > 1 || conf.health_check.is_some())
            .then(|| Board::for_conf(conf, clients));
        ProxyHandler {
            name: std::sync::Arc::from(url.authority.as_str()),
            backend: Rc::new(Backend::new(conf, &conf.backends[0], clients)),
            group: board
                .clone()
                .filter(|_| conf.backends.len() > 1)
                .map(|b| Group::new(conf, b, clients)),
            _board: board,
            pool,
            proxy_protocol: conf.proxy_protocol,
            conv: Rc::new(Conversion {
                upstream_authority: Bytes::from(url.authority.clone()),
                url_path: url.path.clone(),
                prefix: prefix.trim_end_matches('/').to_string(),
                preserve_host: conf.preserve_host,
                emit_x_forwarded_headers: conf.emit_x_forwarded_headers,
                emit_via_header: conf.emit_via_header,
                emit_missing_date_header: conf.emit_missing_date_header,
                preserve_x_forwarded_proto: conf.preserve_x_forwarded_proto,
                forward_close_connection: conf.forward_close_connection,
                preserve_server_header: conf.preserve_server_header,
                request_commands: HeaderRewriter::new(&conf.headers),
                added: Default::default(),
            }),
            tunnel_timeout: conf.tunnel.then_some(conf.tunnel_timeout),
            cache: conf.cache.as_deref().map(cache::Cache::new),
            informational: Informational::new(conf.send_informational),
            reproxy: reproxy::Reproxy::new(conf),
        }
    }
}

impl Handler for ProxyHandler {
    fn handle(&self, req: &Request) -> Answer {
        if let Some(answer) = self.tunnel(req) {
            return answer;
        }
        if let Some(cache) = &self.cache {
            return self.through_cache(cache, req);
        }
        Answer::Later(self.forward(req))
    }

    fn streams_body(&self) -> bool {
        true
    }

    fn tunnels(&self) -> bool {
        self.tunnel_timeout.is_some()
    }

    /// The cache's fresh hits are answers ready now (the HTTP/1.1 lane asks for them).
    fn answers_now_at_times(&self) -> bool {
        self.cache.is_some()
    }

    fn answer_now(&self, req: &Request) -> Option<Response> {
        self.fresh_hit(self.cache.as_ref()?, req)
    }

    /// A fresh hit answered whole from the store, while its entry is the store's and the
    /// second its `Age` was counted in lasts (the lease `through_cache` offered with it).
    fn answer_repeats(&self, resp: &Response) -> bool {
        self.cache.is_some() && crate::http::repeat::offered(&resp.body)
    }
}

impl ProxyHandler {
    /// The request as it goes to the backend, and what the response's conversion needs of it.
    fn outgoing(&self, req: &Request) -> (UpstreamRequest, Client) {
        let up = UpstreamRequest {
            method: req.method.clone(),
            target: self.conv.target(req),
            headers: self.conv.request_headers(req),
            body: req.take_body(),
            client_addrs: self.proxy_protocol.then_some((req.peer, req.local)),
            interim: self.informational.reaches(req.version),
        };
        let client = Client {
            secure: req.secure,
            authority: req.shared_authority(),
            version: req.version,
            target_for: Conversion::target_for(&self.conv, self.group.as_ref(), req),
        };
        (up, client)
    }

    /// `req` to the backend; resolves to its response as the client gets it.
    fn forward(&self, req: &Request) -> Pending {
        let (up, client) = self.outgoing(req);
        let Some(r) = &self.reproxy else {
            return self.exchange(up, client);
        };
        let method = req.method.clone();
        let again = Client {
            secure: client.secure,
            authority: client.authority.clone(),
            version: client.version,
            target_for: None,
        };
        let first = self.exchange(up, client);
        Box::pin(reproxy::follow(
            first,
            r.clone(),
            self.pool.clone(),
            self.conv.clone(),
            method,
            again,
        ))
    }

    /// Sends `up` and resolves to the response converted for `client`.
    fn exchange(&self, up: UpstreamRequest, mut client: Client) -> Pending {
        let (pool, conv) = (self.pool.clone(), self.conv.clone());
        if let Some(group) = &self.group {
            let group = group.clone();
            let target_for = client.target_for.take();
            return Box::pin(async move {
                match upstream::send_balanced(pool, group, up, target_for).await {
                    Ok(resp) => conv.client_response(resp, &client),
                    Err(e) => e.response(),
                }
            });
        }
        let name = self.name.clone();
        Box::pin(upstream::send(
            pool,
            self.backend.clone(),
            up,
            move |sent| {
                crate::metrics::backend(&name, sent.is_err());
                match sent {
                    Ok(resp) => conv.client_response(resp, &client),
                    Err(e) => e.response(),
                }
            },
        ))
    }
}

impl Conversion {
    /// The backend's request target: the URL's path followed by the request's target below
    /// the prefix (h2o's rule: prefix `/app`, URL `http://b/x/`: `/app/y?q` -> `/x/y?q`).
    fn target(&self, req: &Request) -> Bytes {
        self.target_in(&self.url_path, req.target())
            .unwrap_or_else(|| req.shared_target())
    }

    /// With backends of different paths, what rebuilds a request's target for the one chosen.
    fn target_for(
        conv: &Rc<Conversion>,
        group: Option<&Rc<Group>>,
        req: &Request,
    ) -> Option<TargetFor> {
        if !group.is_some_and(|g| g.paths_differ()) {
            return None;
        }
        let (conv, target) = (conv.clone(), req.shared_target());
        Some(Box::new(move |path: &str| {
            conv.target_in(path, &target)
                .unwrap_or_else(|| target.clone())
        }))
    }

    /// The target for a backend URL's path `url_path` and the client's `target`; `None` when
    /// it is `target` unchanged.
    fn target_in(&self, url_path: &str, target: &[u8]) -> Option<Bytes> {
        let below = if target.first() == Some(&b'/') {
            target.get(self.prefix.len()..).unwrap_or_default()
        } else {
            // `OPTIONS *`: the URL's path itself.
            b""
        };
        let base = match url_path.as_bytes() {
            b"" => b"/",
            p => p,
        };
        let below = if base.ends_with(b"/") {
            below.strip_prefix(b"/").unwrap_or(below)
        } else {
            below
        };
        if base == b"/" && target.first() == Some(&b'/') && below.len() + 1 == target.len() {
            // The target passes unchanged (a proxy at `/` to a URL without a path).
            return None;
        }
        let slash: &[u8] = if base.first() != Some(&b'/') {
            b"/"
        } else {
            b""
        };
        let mut out = Vec::with_capacity(slash.len() + base.len() + below.len());
        out.extend_from_slice(slash);
        out.extend_from_slice(base);
        out.extend_from_slice(below);
        Some(Bytes::from(out))
    }
}
