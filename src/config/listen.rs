//! `listen`: where the server accepts connections.
//!
//! Forms: `80`, `"127.0.0.1:80"`, `"[::1]:80"`, a mapping with `port` (required), `host`,
//! `type` (`tcp` or `quic`), `ssl` (see `tls.rs`) and `quic` (see `quic.rs`; implies
//! `type: quic`, as in h2o), or a sequence of those. Without `host` the listener
//! binds every IPv4 address (`0.0.0.0`).

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{Listen, ListenKind, SocketOptions};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Every listener of the configuration, deduplicated by address and kind.
#[derive(Debug, Default)]
pub(super) struct Listeners {
    pub list: Vec<Listen>,
    /// Whether any `listen` was written (even a bad one).
    pub seen: bool,
}

impl Listeners {
    /// Reads one `listen` value (any form) and adds its listeners. `host` is the host whose
    /// `listen` this is: its index in `hosts` (the listener serves it) and its name (its
    /// certificate is chosen by SNI).
    pub fn add(&mut self, ctx: &mut Ctx, v: &Node, host: Option<(usize, &str)>) {
        self.seen = true;
        match v.as_seq() {
            Some(items) => {
                for item in items {
                    if item.as_seq().is_some() {
                        ctx.error(item.line, "listen: a sequence inside a sequence");
                    } else {
                        self.add_one(ctx, item, host);
                    }
                }
            }
            None => self.add_one(ctx, v, host),
        }
    }

    fn add_one(&mut self, ctx: &mut Ctx, v: &Node, host: Option<(usize, &str)>) {
        let parsed = match v.as_map() {
            Some(entries) => mapping(ctx, v, entries, host.map(|(_, name)| name)),
            None => scalar(ctx, v),
        };
        if let Some(mut l) = parsed {
            l.hosts = host.map(|(index, _)| vec![index]);
            self.insert(ctx, l);
        }
    }

    /// The same address and kind given twice (say, globally and in a host) is one listener;
    /// it cannot be both cleartext and TLS. Two `ssl` mappings on one address add their
    /// certificates to the listener (chosen by SNI) and must agree on the handshake settings.
    fn insert(&mut self, ctx: &mut Ctx, l: Listen) {
        let Some(existing) = self
            .list
            .iter_mut()
            .find(|o| o.addr == l.addr && o.kind == l.kind && o.unix == l.unix)
        else {
            self.list.push(l);
            return;
        };
        let line = existing.at.line;
        let differs = if existing.proxy_protocol != l.proxy_protocol {
            Some("proxy-protocol")
        } else if existing.proxy_protocol_from != l.proxy_protocol_from {
            Some("proxy-protocol-from")
        } else {
            None
        };
        if let Some(what) = differs {
            ctx.error(
                l.at.line,
                format!(
                    "listen {}: {what} differs from the listen at line {line}",
                    l.addr
                ),
            );
        }
        if existing.socket != l.socket {
            ctx.error(
                l.at.line,
                format!(
                    "listen {}: sndbuf, rcvbuf or reuseport differ from the listen at line {line}",
                    l.addr
                ),
            );
        }
        // A global `listen` serves every host, whoever else names the address.
        match (&mut existing.hosts, l.hosts) {
            (Some(mine), Some(theirs)) => {
                for h in theirs {
                    if !mine.contains(&h) {
                        mine.push(h);
                    }
                }
            }
            (hosts, None) => *hosts = None,
            (None, Some(_)) => {}
        }
        match (&mut existing.tls, l.tls) {
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                let (tls, plain) = if existing.tls.is_none() {
                    ("TLS", "cleartext")
                } else {
                    ("cleartext", "TLS")
                };
                ctx.error(
                    l.at.line,
                    format!(
                        "listen {}: cannot accept {tls}; it already accepts {plain} (line {line})",
                        l.addr
                    ),
                );
            }
            (Some(mine), Some(theirs)) => {
                if !mine.same_handshake(&theirs) {
                    ctx.error(
                        l.at.line,
                        format!(
                            "listen {}: ssl settings differ from those at line {line}; hosts \
                             sharing an address may differ only in certificate-file, key-file \
                             and ocsp-response-file",
                            l.addr
                        ),
                    );
                }
                mine.identities.extend(theirs.identities);
                mine.warnings.extend(theirs.warnings);
            }
        }
    }
}

/// Keys h2o allows in a `listen` mapping that spate does not implement.
const NOT_SUPPORTED_YET: &[&str] = &["group", "cc", "initcwnd"];

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
        tls: None,
        quic: None,
        hosts: None,
        proxy_protocol: false,
        proxy_protocol_from: Vec::new(),
        socket: SocketOptions::default(),
        unix: None,
        at: ctx.at(v.line),
    })
}

fn mapping(
    ctx: &mut Ctx,
    v: &Node,
    entries: &[(Node, Node)],
    host_name: Option<&str>,
) -> Option<Listen> {
    let mut port = None;
    let mut host = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let mut kind = ListenKind::Tcp;
    let mut has_ssl = false;
    let mut tls = None;
    let mut quic = None;
    let mut proxy_protocol = false;
    let mut proxy_protocol_from: Option<(Vec<super::Cidr>, u32)> = None;
    let mut socket = SocketOptions::default();
    let mut path = None;
    let mut permission = None;
    let mut owner = None;
    let mut ok = true;
    for (k, _) in entries {
        if let Some(key) = k.as_str().filter(|key| NOT_SUPPORTED_YET.contains(key)) {
            ctx.error(k.line, format!("listen.{key} is not supported yet"));
            ok = false;
        }
    }
    let allowed = [
        "port",
        "host",
        "type",
        "ssl",
        "quic",
        "proxy-protocol",
        "proxy-protocol-from",
        "sndbuf",
        "rcvbuf",
        "reuseport",
        "path",
        "permission",
        "owner",
    ];
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
            // h2o names a unix socket's file with `port` (spate's own key is `path`).
            "port" if val.as_u64().is_none() && val.as_str().is_some_and(|s| s.contains('/')) => {
                match ctx.path("listen.port", val) {
                    Some(p) => path = Some((p, val.line)),
                    None => ok = false,
                }
            }
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
                Some("unix") => kind = ListenKind::Unix,
                _ => {
                    ctx.error(
                        val.line,
                        format!("listen.type expects tcp, quic or unix, got {}", show(val)),
                    );
                    ok = false;
                }
            },
            "proxy-protocol" => match ctx.bool("listen.proxy-protocol", val) {
                Some(on) => proxy_protocol = on,
                None => ok = false,
            },
            "proxy-protocol-from" => {
                match super::edge::cidrs(ctx, "listen.proxy-protocol-from", val) {
                    Some(list) => proxy_protocol_from = Some((list, val.line)),
                    None => ok = false,
                }
            }
            // The kernel doubles the value and caps it at net.core.{w,r}mem_max.
            "sndbuf" | "rcvbuf" => match ctx.int::<usize>(&format!("listen.{key}"), val, 1) {
                Some(n) if key == "sndbuf" => socket.sndbuf = Some(n),
                Some(n) => socket.rcvbuf = Some(n),
                None => ok = false,
            },
            "reuseport" => match ctx.bool("listen.reuseport", val) {
                Some(on) => socket.reuseport = on,
                None => ok = false,
            },
            "path" => match ctx.path("listen.path", val) {
                Some(p) => path = Some((p, val.line)),
                None => ok = false,
            },
            "permission" => match val
                .as_str()
                .and_then(|t| u32::from_str_radix(t.trim(), 8).ok())
                .filter(|m| *m <= 0o7777)
            {
                Some(m) => permission = Some(m),
                None => {
                    ctx.error(
                        val.line,
                        format!(
                            "listen.permission expects an octal mode (0600, 0660), got {}",
                            show(val)
                        ),
                    );
                    ok = false;
                }
            },
            "owner" => match ctx.string("listen.owner", val) {
                Some(name) => owner = Some((name, val.line)),
                None => ok = false,
            },
            "quic" => {
                quic = super::quic::parse(ctx, val);
                ok &= quic.is_some();
                kind = ListenKind::Quic;
            }
            _ => {
                has_ssl = true;
                tls = super::tls::parse(ctx, val, host_name);
                ok &= tls.is_some();
            }
        }
    }
    if kind == ListenKind::Unix || path.is_some() || owner.is_some() {
        return ok
            .then(|| {
                unix(
                    ctx, v, kind, path, permission, owner, port, &quic, socket, host_name,
                )
            })
            .flatten()
            .map(|unix| Listen {
                addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
                kind: ListenKind::Unix,
                tls,
                quic: None,
                hosts: None,
                proxy_protocol,
                proxy_protocol_from: Vec::new(),
                socket,
                unix: Some(unix),
                at: ctx.at(v.line),
            })
            .filter(|_| {
                let from = proxy_protocol_from.as_ref().map(|(_, line)| *line);
                if let Some(line) = from {
                    ctx.error(
                        line,
                        "listen: proxy-protocol-from applies to TCP listeners (on a unix \
                         socket, the file's permission says who may connect)",
                    );
                }
                from.is_none()
            });
    }
    if port.is_none() && ok {
        ctx.error(v.line, "listen: port is required");
        return None;
    }
    if kind == ListenKind::Quic && !has_ssl && ok {
        ctx.error(v.line, "listen: type quic requires ssl");
        return None;
    }
    if kind == ListenKind::Quic && socket != SocketOptions::default() {
        ctx.error(
            v.line,
            "listen: sndbuf, rcvbuf and reuseport apply to TCP listeners, not quic",
        );
        return None;
    }
    if kind == ListenKind::Quic && proxy_protocol {
        ctx.error(
            v.line,
            "listen: proxy-protocol applies to TCP listeners, not quic",
        );
        return None;
    }
    if let Some((_, line)) = proxy_protocol_from.as_ref().filter(|_| !proxy_protocol) {
        ctx.error(
            *line,
            "listen: proxy-protocol-from needs proxy-protocol: ON",
        );
        return None;
    }
    let port = port?;
    if kind == ListenKind::Quic && quic.is_none() {
        quic = Some(super::quic::QuicConf::default());
    }
    ok.then(|| Listen {
        addr: SocketAddr::new(host, port),
        kind,
        tls,
        quic,
        hosts: None,
        proxy_protocol,
        proxy_protocol_from: proxy_protocol_from.map(|(l, _)| l).unwrap_or_default(),
        socket,
        unix: None,
        at: ctx.at(v.line),
    })
}

/// The checks of a `type: unix` listener (`path` given, no TCP or QUIC settings): its socket
/// file.
#[allow(clippy::too_many_arguments)]
fn unix(
    ctx: &mut Ctx,
    v: &Node,
    kind: ListenKind,
    path: Option<(std::path::PathBuf, u32)>,
    permission: Option<u32>,
    owner: Option<(String, u32)>,
    port: Option<u16>,
    quic: &Option<super::QuicConf>,
    socket: SocketOptions,
    host_name: Option<&str>,
) -> Option<super::UnixListen> {
    if kind != ListenKind::Unix {
        ctx.error(v.line, "listen: path and owner are for type: unix");
        return None;
    }
    let Some((path, line)) = path else {
        ctx.error(v.line, "listen: type unix requires path (the socket file)");
        return None;
    };
    let mut wrong = |what: &str| {
        ctx.error(v.line, format!("listen: {what}"));
        None
    };
    if port.is_some() || quic.is_some() || socket != SocketOptions::default() {
        return wrong("port, quic, sndbuf, rcvbuf and reuseport do not apply to type: unix");
    }
    if host_name.is_some() {
        return wrong("type: unix is taken at the global level only for now");
    }
    // Room in `sockaddr_un` on Linux, less the terminating NUL.
    if path.as_os_str().len() > 107 {
        ctx.error(
            line,
            "listen.path: longer than the 107 bytes a socket path may have",
        );
        return None;
    }
    Some(super::UnixListen {
        path,
        permission,
        owner: owner.map(|(name, _)| name),
    })
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
