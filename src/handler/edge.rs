//! The checks a path makes before its handler runs (`access`, `real-ip.*`, `limit-req`,
//! `limit-conn`, `basic-auth`):
//! who the client is and whether it may pass: the access rules first, then the credentials. Built only for a path that configures one, so a path without
//! them pays one `Option` check.

use super::limit::conn::{ConnLimit, Held, HeldStream};
use crate::config::{any_contains, AccessRule, EdgeConf, RealIpConf, RealIpHeader};
use crate::http::{Answer, Body, Request, Response, StreamBody};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A path's checks.
pub struct Gate {
    access: Vec<AccessRule>,
    real_ip: Option<RealIpConf>,
    basic_auth: Option<super::auth::BasicAuth>,
    limits: Vec<super::limit::Limit>,
    conn_limits: Vec<ConnLimit>,
}

/// What the checks say of a request.
pub enum Verdict {
    Pass,
    /// Answered after this wait (`limit-req` within its burst, over its `delay`).
    Delay(Duration),
    Refuse(Response),
}

impl Gate {
    pub fn new(conf: &EdgeConf) -> Gate {
        Gate {
            access: conf.access.clone(),
            real_ip: conf.real_ip.clone(),
            basic_auth: conf.basic_auth.as_ref().map(super::auth::BasicAuth::new),
            limits: conf.limits.iter().map(super::limit::Limit::new).collect(),
            conn_limits: conf.conn_limits.iter().map(ConnLimit::new).collect(),
        }
    }

    /// Whether a request may have to wait ([`Verdict::Delay`]): a `limit-req` with a `delay`
    /// below its `burst`. Such a path's requests are answered by the connection's task; a
    /// path whose checks decide at once may answer in the HTTP/1.1 lane.
    pub fn may_wait(&self) -> bool {
        self.limits.iter().any(super::limit::Limit::may_delay)
    }

    /// Whether `req` passes, waits or is refused: the access rules, then the rate limits
    /// (counted only for a client the rules let in), the places of `limit-conn` (into
    /// `held`: the request keeps them while it is served), then the credentials.
    /// With `real-ip.from`, the client found stands for the peer from here on (the access
    /// log's `%h`, `X-Forwarded-For` and the PROXY line to backends), as nginx's `real_ip`.
    pub fn check(&self, req: &mut Request, held: &mut Vec<Held>) -> Verdict {
        let client = self.client(req);
        if self.real_ip.is_some() && client != req.peer.ip().to_canonical() {
            // The header gave no port (one given is not kept).
            req.peer = SocketAddr::new(client, 0);
        }
        if let Some(rule) = self.access.iter().find(|r| any_contains(&r.from, client)) {
            if !rule.allow {
                tracing::info!(
                    client = %client,
                    path = %String::from_utf8_lossy(req.path()),
                    "403: an access rule denies the client"
                );
                return Verdict::Refuse(Response::error(403));
            }
        }
        // The longest wait of the zones, as nginx's.
        let mut wait = Duration::ZERO;
        for limit in &self.limits {
            match limit.check(req, client) {
                super::limit::Verdict::Pass => {}
                super::limit::Verdict::Delay(d) => wait = wait.max(d),
                super::limit::Verdict::Refuse(resp) => return Verdict::Refuse(resp),
            }
        }
        for limit in &self.conn_limits {
            match limit.acquire(req, client) {
                Ok(Some(place)) => held.push(place),
                Ok(None) => {}
                Err(resp) => return Verdict::Refuse(resp),
            }
        }
        if let Some(auth) = &self.basic_auth {
            if let super::auth::Verdict::Refuse(resp) = auth.check(req, client) {
                return Verdict::Refuse(resp);
            }
        }
        if wait.is_zero() {
            Verdict::Pass
        } else {
            Verdict::Delay(wait)
        }
    }

    /// The client's address: the connection's peer (the PROXY header's client on such a
    /// listener), or with `real-ip.from` the one the trusted proxies name.
    pub fn client(&self, req: &Request) -> IpAddr {
        let peer = req.peer.ip().to_canonical();
        match &self.real_ip {
            Some(conf) => real_ip(conf, req, peer),
            None => peer,
        }
    }
}

/// Runs a path's checks: the answer when they decide it (a refusal, or the handler's answer
/// held back for a delay), `None` to go on to the handler.
pub fn gate(gate: &Gate, handler: &dyn crate::http::Handler, req: &mut Request) -> Option<Answer> {
    let mut held = Vec::new();
    match gate.check(req, &mut held) {
        Verdict::Pass if held.is_empty() => None,
        Verdict::Pass => Some(match handler.handle(req) {
            Answer::Now(resp) => Answer::Now(keep_held(resp, held)),
            Answer::Later(pending) => {
                Answer::Later(Box::pin(async move { keep_held(pending.await, held) }))
            }
        }),
        Verdict::Refuse(resp) => Some(Answer::Now(resp)),
        Verdict::Delay(wait) => {
            // The handler runs now (it borrows the request); its answer goes out after the wait.
            let answer = handler.handle(req);
            Some(Answer::Later(Box::pin(async move {
                tokio::time::sleep(wait).await;
                let resp = match answer {
                    Answer::Now(resp) => resp,
                    Answer::Later(pending) => pending.await,
                };
                keep_held(resp, held)
            })))
        }
    }
}

/// A streamed body keeps the request's `limit-conn` places until it ends; any other answer
/// is complete, and they are given back.
fn keep_held(mut resp: Response, held: Vec<Held>) -> Response {
    if held.is_empty() || !matches!(resp.body, Body::Stream(_)) {
        return resp;
    }
    if let Body::Stream(body) = std::mem::take(&mut resp.body) {
        resp.body = Body::Stream(StreamBody {
            len: body.len,
            stream: Box::new(HeldStream {
                inner: body.stream,
                held,
            }),
        });
    }
    resp
}

/// nginx's `real_ip` walk: while the address at hand is a trusted proxy's, the next address
/// to the left in the header replaces it; without `recursive`, one step only. An entry that
/// is not an address stops the walk at the address reached.
fn real_ip(conf: &RealIpConf, req: &Request, peer: IpAddr) -> IpAddr {
    if !any_contains(&conf.from, peer) {
        return peer;
    }
    let name: &[u8] = match &conf.header {
        RealIpHeader::List(name) => name.as_bytes(),
        RealIpHeader::Forwarded => b"forwarded",
    };
    // Several fields of the name are one list, in order.
    let fields: Vec<&[u8]> = req.header_all(name).collect();
    let mut addr = peer;
    for field in fields.iter().rev() {
        for entry in field.rsplit(|&b| b == b',') {
            let found = match conf.header {
                RealIpHeader::List(_) => parse_node(trim(entry)),
                RealIpHeader::Forwarded => forwarded_for(entry),
            };
            let Some(ip) = found else {
                return addr;
            };
            addr = ip.to_canonical();
            if !conf.recursive || !any_contains(&conf.from, addr) {
                return addr;
            }
        }
    }
    addr
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]:80` (quotes around it allowed).
fn parse_node(b: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(b).ok()?;
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = text.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    let inner = text.strip_prefix('[')?.split(']').next()?;
    inner.parse().ok()
}

/// The `for=` of one element of a `Forwarded` field (RFC 7239 section 4).
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = trim(pair);
        let (k, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
        k.eq_ignore_ascii_case(b"for")
            .then(|| parse_node(trim(&v[1..])))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Cidr;

    fn conf(header: RealIpHeader, recursive: bool) -> RealIpConf {
        RealIpConf {
            from: vec![
                Cidr::parse("127.0.0.0/8").unwrap(),
                Cidr::parse("10.0.0.0/8").unwrap(),
            ],
            header,
            recursive,
        }
    }

    fn xff() -> RealIpHeader {
        RealIpHeader::List("x-forwarded-for".into())
    }

    fn walk(conf: &RealIpConf, headers: &[(&str, &str)]) -> String {
        let req = Request::for_test(crate::http::Method::Get, "/", headers);
        // `for_test` gives the peer 127.0.0.1.
        real_ip(conf, &req, req.peer.ip()).to_string()
    }

    #[test]
    fn one_step_takes_the_last_address() {
        let c = conf(xff(), false);
        let h = [("x-forwarded-for", "203.0.113.9, 198.51.100.1, 10.0.0.2")];
        assert_eq!(walk(&c, &h), "10.0.0.2");
    }

    #[test]
    fn recursive_walks_past_trusted_proxies() {
        let c = conf(xff(), true);
        let h = [("x-forwarded-for", "203.0.113.9, 198.51.100.1, 10.0.0.2")];
        assert_eq!(walk(&c, &h), "198.51.100.1");
        // Two fields are one list.
        let h = [
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "10.0.0.3, 10.0.0.2"),
        ];
        assert_eq!(walk(&c, &h), "203.0.113.9");
        // All trusted: the leftmost.
        let h = [("x-forwarded-for", "10.0.0.7, 10.0.0.2")];
        assert_eq!(walk(&c, &h), "10.0.0.7");
    }

    #[test]
    fn garbage_stops_the_walk() {
        let c = conf(xff(), true);
        let h = [("x-forwarded-for", "203.0.113.9, nonsense, 10.0.0.2")];
        assert_eq!(walk(&c, &h), "10.0.0.2");
        let h = [("x-forwarded-for", "garbage")];
        assert_eq!(walk(&c, &h), "127.0.0.1");
    }

    #[test]
    fn forwarded_for_parameters() {
        let c = conf(RealIpHeader::Forwarded, true);
        let h = [(
            "forwarded",
            "for=192.0.2.60;proto=http, for=\"[2001:db8::17]:4711\";by=10.0.0.1, for=10.0.0.5",
        )];
        assert_eq!(walk(&c, &h), "2001:db8::17");
        let h = [("forwarded", "for=unknown, for=10.0.0.5")];
        assert_eq!(walk(&c, &h), "10.0.0.5");
    }

    #[test]
    fn untrusted_peer_keeps_its_address() {
        let mut c = conf(xff(), true);
        c.from = vec![Cidr::parse("10.0.0.0/8").unwrap()];
        let h = [("x-forwarded-for", "203.0.113.9")];
        assert_eq!(walk(&c, &h), "127.0.0.1");
    }
}
