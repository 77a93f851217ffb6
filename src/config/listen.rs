//! `listen`: where the server accepts connections.
//!
//! Forms: `80`, `"127.0.0.1:80"`, `"[::1]:80"`, a mapping with `port` (required), `host`,
//! `type` (`tcp` or `quic`) and `ssl`, or a sequence of those. Without `host` the listener
//! binds every IPv4 address (`0.0.0.0`).

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{Listen, ListenKind};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Every listener of the configuration, deduplicated by address and kind.
#[derive(Debug, Default)]
pub(super) struct Listeners {
    pub list: Vec<Listen>,
    /// Whether any `listen` was written (even a bad one).
    pub seen: bool,
}

impl Listeners {
    /// Reads one `listen` value (any form) and adds its listeners.
    pub fn add(&mut self, ctx: &mut Ctx, v: &Node) {
        self.seen = true;
        match v.as_seq() {
            Some(items) => {
                for item in items {
                    if item.as_seq().is_some() {
                        ctx.error(item.line, "listen: a sequence inside a sequence");
                    } else {
                        self.add_one(ctx, item);
                    }
                }
            }
            None => self.add_one(ctx, v),
        }
    }

    fn add_one(&mut self, ctx: &mut Ctx, v: &Node) {
        let parsed = match v.as_map() {
            Some(entries) => mapping(ctx, v, entries),
            None => scalar(ctx, v),
        };
        if let Some(l) = parsed {
            self.insert(ctx, l);
        }
    }

    /// The same address and kind given twice (say, globally and in a host) is one listener;
    /// it cannot be both cleartext and TLS.
    fn insert(&mut self, ctx: &mut Ctx, l: Listen) {
        match self
            .list
            .iter()
            .find(|o| o.addr == l.addr && o.kind == l.kind)
        {
            Some(existing) if existing.has_ssl != l.has_ssl => {
                let (tls, plain) = if l.has_ssl {
                    ("TLS", "cleartext")
                } else {
                    ("cleartext", "TLS")
                };
                ctx.error(
                    l.at.line,
                    format!(
                        "listen {}: cannot accept {tls}; it already accepts {plain} (line {})",
                        l.addr, existing.at.line
                    ),
                );
            }
            Some(_) => {}
            None => self.list.push(l),
        }
    }
}

/// Keys h2o allows in a `listen` mapping that spate does not implement.
const NOT_SUPPORTED_YET: &[&str] = &[
    "proxy-protocol",
    "owner",
    "group",
    "permission",
    "sndbuf",
    "rcvbuf",
    "quic",
    "cc",
    "initcwnd",
    "reuseport",
];

/// Keys h2o allows in a listener's `ssl` mapping.
const SSL_KEYS: &[&str] = &[
    "certificate-file",
    "key-file",
    "identity",
    "min-version",
    "minimum-version",
    "max-version",
    "maximum-version",
    "cipher-suite",
    "cipher-suite-tls1.3",
    "cipher-preference",
    "ecdh-curves",
    "key-exchange-tls1.3",
    "dh-file",
    "client-ca-file",
    "ocsp-update-interval",
    "ocsp-update-cmd",
    "ocsp-max-failures",
    "neverbleed",
    "session-ticket",
    "http2-origin-frame",
    "ech",
];

fn scalar(ctx: &mut Ctx, v: &Node) -> Option<Listen> {
    let addr = match v.as_str() {
        Some(text) => parse_addr(text),
        None => None,
    };
    let Some(addr) = addr else {
        ctx.error(
            v.line,
            format!(
                "listen expects a port, \"address:port\" or a mapping with port, got {}",
                show(v)
            ),
        );
        return None;
    };
    Some(Listen {
        addr,
        kind: ListenKind::Tcp,
        has_ssl: false,
        at: ctx.at(v.line),
    })
}

fn mapping(ctx: &mut Ctx, v: &Node, entries: &[(Node, Node)]) -> Option<Listen> {
    let mut port = None;
    let mut host = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let mut kind = ListenKind::Tcp;
    let mut has_ssl = false;
    let mut ok = true;
    for (k, _) in entries {
        if let Some(key) = k.as_str().filter(|key| NOT_SUPPORTED_YET.contains(key)) {
            ctx.error(k.line, format!("listen.{key} is not supported yet"));
            ok = false;
        }
    }
    let allowed = ["port", "host", "type", "ssl"];
    let relevant: Vec<(Node, Node)> = entries
        .iter()
        .filter(|(k, _)| {
            !k.as_str()
                .is_some_and(|key| NOT_SUPPORTED_YET.contains(&key))
        })
        .cloned()
        .collect();
    for (key, val) in ctx.known_keys("listen", &relevant, &allowed) {
        match key {
            "port" => match ctx.int::<u16>("listen.port", val, 0) {
                Some(p) => port = Some(p),
                None => ok = false,
            },
            "host" => match val.as_str().and_then(parse_ip) {
                Some(ip) => host = ip,
                None => {
                    ctx.error(
                        val.line,
                        format!("listen.host expects an IP address, got {}", show(val)),
                    );
                    ok = false;
                }
            },
            "type" => match val.as_str() {
                Some("tcp") => kind = ListenKind::Tcp,
                Some("quic") => kind = ListenKind::Quic,
                Some("unix") => {
                    ctx.error(val.line, "listen.type unix is not supported yet");
                    ok = false;
                }
                _ => {
                    ctx.error(
                        val.line,
                        format!("listen.type expects tcp or quic, got {}", show(val)),
                    );
                    ok = false;
                }
            },
            _ => {
                has_ssl = true;
                ok &= ssl(ctx, val);
            }
        }
    }
    if port.is_none() && ok {
        ctx.error(v.line, "listen: port is required");
        return None;
    }
    if kind == ListenKind::Quic && !has_ssl && ok {
        ctx.error(v.line, "listen: type quic requires ssl");
        return None;
    }
    let port = port?;
    ok.then(|| Listen {
        addr: SocketAddr::new(host, port),
        kind,
        has_ssl,
        at: ctx.at(v.line),
    })
}

/// Checks an `ssl` mapping's keys; what they mean is for the TLS work.
fn ssl(ctx: &mut Ctx, v: &Node) -> bool {
    let Some(entries) = ctx.map("listen.ssl", v) else {
        return false;
    };
    let before = ctx.errors.len();
    let known = ctx.known_keys("listen.ssl", entries, SSL_KEYS);
    let has = |k: &str| known.iter().any(|(key, _)| *key == k);
    if !has("identity") {
        for required in ["certificate-file", "key-file"] {
            if !has(required) {
                ctx.error(v.line, format!("listen.ssl: {required} is required"));
            }
        }
    }
    ctx.errors.len() == before
}

/// `80`, `127.0.0.1:80`, `[::1]:80`.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr);
    }
    let (host, port) = text.rsplit_once(':')?;
    Some(SocketAddr::new(parse_ip(host)?, port.parse().ok()?))
}

/// An IP literal (IPv6 with or without brackets), or `localhost` as 127.0.0.1: spate does not
/// resolve names when it binds.
fn parse_ip(text: &str) -> Option<IpAddr> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("localhost") {
        return Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let t = t
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(t);
    t.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_forms() {
        assert_eq!(parse_addr("80"), "0.0.0.0:80".parse().ok());
        assert_eq!(parse_addr("127.0.0.1:8080"), "127.0.0.1:8080".parse().ok());
        assert_eq!(parse_addr("[::1]:443"), "[::1]:443".parse().ok());
        assert_eq!(parse_addr("localhost:81"), "127.0.0.1:81".parse().ok());
        assert_eq!(parse_addr("example.com:80"), None);
        assert_eq!(parse_addr("70000"), None);
        assert_eq!(parse_addr("1.2.3.4"), None);
    }
}
