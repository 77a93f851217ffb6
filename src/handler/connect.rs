//! `proxy.connect` (h2o's CONNECT proxy): `CONNECT host:port` over HTTP/1.1 or HTTP/2 opens a
//! TCP connection to the target when the path's access list allows its address, and the
//! answer's body and the request's body become the tunnel's two directions
//! (`upstream::open_connect`). A target the list refuses gets 403, one that cannot be
//! resolved or reached 502, one that does not answer in `proxy.timeout.connect` 504; each
//! with one log line.

use crate::config::ConnectConf;
use crate::http::{Answer, Handler, Method, Request, Response};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

pub struct ConnectHandler {
    conf: Rc<ConnectConf>,
}

impl ConnectHandler {
    pub fn new(conf: &ConnectConf) -> ConnectHandler {
        ConnectHandler {
            conf: Rc::new(conf.clone()),
        }
    }
}

impl Handler for ConnectHandler {
    fn handle(&self, req: &Request) -> Answer {
        // Another method on the CONNECT path finds nothing here (h2o passes it on; a path
        // has no other handler to pass it to).
        if req.method != Method::Connect || req.protocol().is_some() {
            return Answer::Now(Response::error(404));
        }
        let Some((host, port)) = req.authority().and_then(split_target) else {
            tracing::info!(peer = %req.peer, "CONNECT: the target is not host:port");
            return Answer::Now(Response::error(400));
        };
        let Some(client) = req.take_body() else {
            return Answer::Now(Response::error(400));
        };
        let conf = self.conf.clone();
        let peer = req.peer;
        Answer::Later(Box::pin(async move {
            let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
                Ok(ip) => vec![SocketAddr::new(ip, port)],
                Err(_) => match tokio::net::lookup_host((host.as_str(), port)).await {
                    Ok(a) => a.collect(),
                    Err(e) => {
                        tracing::info!(%peer, "CONNECT to {host}:{port}: cannot resolve: {e}");
                        return Response::error(502);
                    }
                },
            };
            let Some(to) = addrs.iter().copied().find(|a| conf.allows(*a)) else {
                tracing::info!(%peer, "CONNECT to {host}:{port}: refused by proxy.connect");
                return Response::error(403);
            };
            match crate::upstream::open_connect(to, client, conf.connect_timeout, conf.idle_timeout)
                .await
            {
                Ok(resp) => resp,
                Err(e) => {
                    tracing::info!(%peer, "{e}");
                    e.response()
                }
            }
        }))
    }

    fn streams_body(&self) -> bool {
        true
    }

    fn tunnels(&self) -> bool {
        true
    }
}

/// `host:port` or `[v6]:port` (a CONNECT target names its port, RFC 9110 section 9.3.6).
fn split_target(authority: &[u8]) -> Option<(String, u16)> {
    let text = std::str::from_utf8(authority).ok()?;
    let (host, port) = text.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() || host.contains(['/', '[', ']']) {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::split_target;

    #[test]
    fn targets() {
        assert_eq!(split_target(b"a.com:443"), Some(("a.com".into(), 443)));
        assert_eq!(split_target(b"[::1]:8080"), Some(("::1".into(), 8080)));
        assert_eq!(split_target(b"a.com"), None);
        assert_eq!(split_target(b":443"), None);
        assert_eq!(split_target(b"a.com:x"), None);
    }
}
