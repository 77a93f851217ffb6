//! `reproxy: ON` (h2o): a backend's answer with `X-Reproxy-URL` is not sent; the resource
//! that URL names is fetched and its answer sent instead (so an application can hand a large
//! file on its storage servers to the proxy). With a 307 or 308 the client's method is kept,
//! otherwise it is GET; no request body goes along. At most `max-delegations` URLs are
//! followed per request; one more, or a URL that is not `http://`, is 502 with one log line.
//! Only paths with `reproxy: ON` look at the field.

use super::{Client, Conversion};
use crate::config::{BackendConf, ProxyConf};
use crate::http::{Method, Pending, Response};
use crate::upstream::{self, Backend, Pool, UpstreamRequest};
use bytes::Bytes;
use std::rc::Rc;

/// What following `X-Reproxy-URL` needs: the path's backend settings for the new backends,
/// and how many to follow.
pub(super) struct Reproxy {
    conf: ProxyConf,
}

impl Reproxy {
    pub fn new(conf: &ProxyConf) -> Option<Rc<Reproxy>> {
        conf.reproxy
            .then(|| Rc::new(Reproxy { conf: conf.clone() }))
    }
}

/// The URL of `resp`'s `X-Reproxy-URL`, when it has one.
fn reproxy_url(resp: &Response) -> Option<String> {
    resp.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"x-reproxy-url"))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

fn refuse(url: &str, why: &str) -> Response {
    if crate::log::emit_request_errors() {
        tracing::warn!(url, "reproxy: {why}");
    }
    Response::error(502)
}

/// `first` (the backend's answer), or what its `X-Reproxy-URL`s lead to.
pub(super) async fn follow(
    first: Pending,
    reproxy: Rc<Reproxy>,
    pool: Rc<Pool>,
    conv: Rc<Conversion>,
    method: Method,
    client: Client,
) -> Response {
    let mut resp = first.await;
    let mut followed = 0;
    while let Some(url) = reproxy_url(&resp) {
        if followed >= reproxy.conf.max_delegations {
            return refuse(&url, "more X-Reproxy-URLs than max-delegations");
        }
        followed += 1;
        let parsed = match crate::config::parse_upstream_url(&url, std::path::Path::new("/")) {
            Ok(u) if !u.tls && url.starts_with("http://") => u,
            Ok(_) => return refuse(&url, "only http:// URLs are fetched"),
            Err(e) => return refuse(&url, &e),
        };
        let method = match resp.status {
            307 | 308 => method.clone(),
            _ => Method::Get,
        };
        let target = Bytes::from(parsed.path.clone());
        let host = Bytes::from(parsed.authority.clone());
        let b = BackendConf {
            url: parsed,
            weight: 1,
            tls: None,
        };
        let backend = Rc::new(Backend::new(&reproxy.conf, &b, &[]));
        let up = UpstreamRequest {
            method,
            target,
            headers: vec![(Bytes::from_static(b"host"), host)],
            body: None,
            client_addrs: None,
            // The first backend's interim responses went on already; the delegated fetch's
            // are not the client's.
            interim: false,
        };
        let conv = conv.clone();
        let client = &client;
        resp = upstream::send(pool.clone(), backend, up, move |sent| match sent {
            Ok(r) => conv.client_response(r, client),
            Err(e) => e.response(),
        })
        .await;
    }
    resp
}
