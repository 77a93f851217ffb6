//! `proxy.connect` (h2o's CONNECT proxy): `CONNECT host:port` over HTTP/1.1 or HTTP/2 opens a
//! TCP connection to the target when the path's access list allows its address, and the
//! answer's body and the request's body become the tunnel's two directions
//! (`upstream::open_connect`). A target the list refuses gets 403, one that cannot be
//! resolved or reached 502, one that does not answer in `proxy.timeout.connect` 504; each
//! with one log line. With `proxy.connect.emit-proxy-status: ON` each answer also carries a
//! `Proxy-Status` field (RFC 9209) naming the failure as h2o does (`destination_ip_prohibited`,
//! `dns_error` with its `rcode`, `connection_refused`, `connection_timeout`, ...) and the
//! address connected to (`next-hop`).

use crate::config::ConnectConf;
use crate::http::{Answer, Handler, Method, Request, Response};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

pub struct ConnectHandler {
    conf: Rc<ConnectConf>,
    /// The `Proxy-Status` identity as the field carries it (an sf-token or sf-string);
    /// `None`: the field is off.
    status_identity: Option<Rc<str>>,
}

impl ConnectHandler {
    pub fn new(conf: &ConnectConf) -> ConnectHandler {
        ConnectHandler {
            conf: Rc::new(conf.clone()),
            status_identity: conf.proxy_status.as_deref().map(sf_item),
        }
    }
}

/// One failure (or success: `error` empty) as RFC 9209's `Proxy-Status` tells it.
#[derive(Default)]
struct ProxyStatus<'a> {
    error: &'a str,
    rcode: Option<&'a str>,
    details: Option<&'a str>,
    next_hop: Option<IpAddr>,
}

impl ProxyStatus<'_> {
    /// `resp` with the field when it is on, as h2o orders the parameters.
    fn add_to(&self, identity: Option<&str>, resp: Response) -> Response {
        let Some(identity) = identity else {
            return resp;
        };
        let mut v = identity.to_owned();
        if !self.error.is_empty() {
            v.push_str("; error=");
            v.push_str(self.error);
        }
        if let Some(rcode) = self.rcode {
            v.push_str("; rcode=");
            push_sf_string(&mut v, rcode);
        }
        if let Some(details) = self.details {
            v.push_str("; details=");
            push_sf_string(&mut v, details);
        }
        if let Some(ip) = self.next_hop {
            v.push_str("; next-hop=");
            push_sf_string(&mut v, &ip.to_string());
        }
        resp.with_header("proxy-status", v)
    }
}

impl Handler for ConnectHandler {
    fn handle(&self, req: &Request) -> Answer {
        // Another method on the CONNECT path finds nothing here (h2o passes it on; a path
        // has no other handler to pass it to).
        if req.method != Method::Connect || req.protocol().is_some() {
            return Answer::Now(Response::error(404));
        }
        let identity = self.status_identity.clone();
        let Some((host, port)) = req.authority().and_then(split_target) else {
            tracing::info!(peer = %req.peer, "CONNECT: the target is not host:port");
            let status = ProxyStatus {
                error: "http_request_error",
                details: Some("invalid host:port"),
                ..ProxyStatus::default()
            };
            return Answer::Now(status.add_to(identity.as_deref(), Response::error(400)));
        };
        let Some(client) = req.take_body() else {
            return Answer::Now(Response::error(400));
        };
        let conf = self.conf.clone();
        let peer = req.peer;
        Answer::Later(Box::pin(async move {
            let identity = identity.as_deref();
            let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
                Ok(ip) => vec![SocketAddr::new(ip, port)],
                Err(_) => match tokio::net::lookup_host((host.as_str(), port)).await {
                    Ok(a) => a.collect(),
                    Err(e) => {
                        tracing::info!(%peer, "CONNECT to {host}:{port}: cannot resolve: {e}");
                        let (rcode, details) = dns_failure(&e);
                        let status = ProxyStatus {
                            error: "dns_error",
                            rcode,
                            details: Some(details),
                            ..ProxyStatus::default()
                        };
                        return status.add_to(identity, Response::error(502));
                    }
                },
            };
            let Some(to) = addrs.iter().copied().find(|a| conf.allows(*a)) else {
                tracing::info!(%peer, "CONNECT to {host}:{port}: refused by proxy.connect");
                let status = ProxyStatus {
                    error: "destination_ip_prohibited",
                    ..ProxyStatus::default()
                };
                return status.add_to(identity, Response::error(403));
            };
            let next_hop = Some(to.ip());
            match crate::upstream::open_connect(to, client, conf.connect_timeout, conf.idle_timeout)
                .await
            {
                Ok(resp) => ProxyStatus {
                    next_hop,
                    ..ProxyStatus::default()
                }
                .add_to(identity, resp),
                Err(e) => {
                    tracing::info!(%peer, "{}", e.error);
                    let status = ProxyStatus {
                        error: e.proxy_error,
                        details: e.details.as_deref(),
                        next_hop,
                        ..ProxyStatus::default()
                    };
                    status.add_to(identity, e.error.response())
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

/// A failed lookup's DNS response code as h2o reports it (from getaddrinfo's error, which is
/// all the system resolver tells), and its words.
fn dns_failure(e: &std::io::Error) -> (Option<&'static str>, &'static str) {
    let text = e.to_string();
    // glibc's gai_strerror texts, which std's lookup error carries.
    const CODES: [(&str, &str, &str); 4] = [
        (
            "Name or service not known",
            "NXDOMAIN",
            "hostname does not exist",
        ),
        (
            "No address associated with hostname",
            "NODATA",
            "no address associated with hostname",
        ),
        (
            "Temporary failure in name resolution",
            "SERVFAIL",
            "temporary failure in name resolution",
        ),
        (
            "Non-recoverable failure in name resolution",
            "REFUSED",
            "non-recoverable failure in name resolution",
        ),
    ];
    CODES
        .iter()
        .find(|(said, _, _)| text.contains(said))
        .map_or((None, "name resolution failed"), |&(_, rcode, words)| {
            (Some(rcode), words)
        })
}

/// The identity as an sf-token when it is one, else as an sf-string (RFC 8941 section 3.3).
fn sf_item(identity: &str) -> Rc<str> {
    let b = identity.as_bytes();
    let token = b
        .first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'*')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(c));
    if token {
        identity.into()
    } else {
        let mut s = String::with_capacity(identity.len() + 2);
        push_sf_string(&mut s, identity);
        s.into()
    }
}

/// `text` as an sf-string: quoted, `\` and `"` escaped, and what a string may not carry
/// (controls, non-ASCII) as `?`.
fn push_sf_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::{sf_item, split_target};

    #[test]
    fn identities() {
        assert_eq!(&*sf_item("h2o/test"), "h2o/test");
        assert_eq!(&*sf_item("my proxy"), "\"my proxy\"");
        assert_eq!(&*sf_item("1st"), "\"1st\"");
        assert_eq!(&*sf_item("a\"b"), "\"a\\\"b\"");
    }

    #[test]
    fn targets() {
        assert_eq!(split_target(b"a.com:443"), Some(("a.com".into(), 443)));
        assert_eq!(split_target(b"[::1]:8080"), Some(("::1".into(), 8080)));
        assert_eq!(split_target(b"a.com"), None);
        assert_eq!(split_target(b":443"), None);
        assert_eq!(split_target(b"a.com:x"), None);
    }
}
