//! `proxy.reverse.url` (a path's handler) and the `proxy.*` options every level may set.

use super::headers;
use super::value::{show, Ctx};
use super::yaml::Node;
use super::{
    BackendConf, Balancer, HeaderCommand, HealthCheck, ProxyConf, UpstreamAddr, UpstreamTls,
    UpstreamUrl,
};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `proxy.*` options as set so far at some level; `None` means "not set here or above".
#[derive(Debug, Clone, Default)]
pub(super) struct ProxyOpts {
    preserve_host: Option<bool>,
    emit_x_forwarded_headers: Option<bool>,
    emit_via_header: Option<bool>,
    emit_missing_date_header: Option<bool>,
    preserve_x_forwarded_proto: Option<bool>,
    /// Outer commands first; each level appends its own.
    headers: Vec<HeaderCommand>,
    connect_timeout: Option<Duration>,
    first_byte_timeout: Option<Duration>,
    io_timeout: Option<Duration>,
    keepalive_timeout: Option<Duration>,
    max_buffer_size: Option<usize>,
    expect: Option<bool>,
    forward_close_connection: Option<bool>,
    max_idle_connections: Option<usize>,
    max_connections: Option<u32>,
    queue_max: Option<usize>,
    queue_timeout: Option<Duration>,
    tunnel: Option<bool>,
    websocket_timeout: Option<Duration>,
    max_response_head_size: Option<usize>,
    max_response_headers: Option<usize>,
    max_informational: Option<u32>,
    proxy_protocol: Option<bool>,
    max_fails: Option<u32>,
    fail_timeout: Option<Duration>,
    /// `Some(None)`: turned OFF here.
    health_check: Option<Option<HealthCheck>>,
    ssl_verify_peer: Option<bool>,
    /// `proxy.ssl.cafile` (also kept in `Ctx::proxy_ca_files`, so its errors name its line).
    ssl_cafile: Option<PathBuf>,
    /// `Some(None)`: `proxy.ssl.session-cache: OFF`.
    ssl_session_cache: Option<Option<usize>>,
    http2_ratio: Option<u8>,
    http2_max_concurrent_streams: Option<u32>,
    http2_force_cleartext: Option<bool>,
    reproxy: Option<bool>,
    max_delegations: Option<u32>,
    /// `Some(None)`: `proxy.cache: OFF`.
    cache: Option<Option<super::CacheConf>>,
    connect_proxy_status: Option<bool>,
    proxy_status_identity: Option<String>,
}

/// What `proxy.reverse.url` names: its backends and how to choose among them.
#[derive(Debug)]
pub(super) struct Backends {
    list: Vec<BackendConf>,
    balancer: Balancer,
}

impl ProxyOpts {
    /// Applies one `proxy.*` option. Returns false when `name` is not one of them.
    pub fn apply(&mut self, ctx: &mut Ctx, name: &str, v: &Node) -> bool {
        if headers::commands(ctx, "proxy.header.", name, v, &mut self.headers) {
            return true;
        }
        match name {
            "proxy.preserve-host" => set(&mut self.preserve_host, ctx.bool(name, v)),
            "reproxy" => set(&mut self.reproxy, ctx.bool(name, v)),
            "max-delegations" => {
                let n = ctx
                    .uint(name, v, 0)
                    .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
                set(&mut self.max_delegations, n)
            }
            "proxy.emit-x-forwarded-headers" => {
                set(&mut self.emit_x_forwarded_headers, ctx.bool(name, v))
            }
            "proxy.emit-via-header" => set(&mut self.emit_via_header, ctx.bool(name, v)),
            "proxy.emit-missing-date-header" => {
                set(&mut self.emit_missing_date_header, ctx.bool(name, v))
            }
            "proxy.preserve-x-forwarded-proto" => {
                set(&mut self.preserve_x_forwarded_proto, ctx.bool(name, v))
            }
            // A zero timeout would fail every request at once, so these start at 1 ms.
            "proxy.timeout.connect" => set(&mut self.connect_timeout, millis(ctx, name, v, 1)),
            "proxy.timeout.first_byte" => {
                set(&mut self.first_byte_timeout, millis(ctx, name, v, 1))
            }
            "proxy.timeout.io" => set(&mut self.io_timeout, millis(ctx, name, v, 1)),
            "proxy.timeout.keepalive" => set(&mut self.keepalive_timeout, millis(ctx, name, v, 0)),
            // The old switch: OFF is a keep-alive timeout of 0; ON undoes an inherited OFF.
            "proxy.keepalive" => match ctx.bool(name, v) {
                Some(false) => self.keepalive_timeout = Some(Duration::ZERO),
                Some(true) if self.keepalive_timeout == Some(Duration::ZERO) => {
                    self.keepalive_timeout = None
                }
                Some(true) | None => {}
            },
            "proxy.max-buffer-size" => set(&mut self.max_buffer_size, ctx.int(name, v, 1)),
            "proxy.expect" => set(&mut self.expect, ctx.bool(name, v)),
            "proxy.forward.close-connection" => {
                set(&mut self.forward_close_connection, ctx.bool(name, v))
            }
            "proxy.max-idle-connections" => {
                set(&mut self.max_idle_connections, ctx.int(name, v, 0))
            }
            "proxy.max-connections" => set(&mut self.max_connections, ctx.int(name, v, 0)),
            "proxy.queue.max" => set(&mut self.queue_max, ctx.int(name, v, 0)),
            "proxy.queue.timeout" => set(&mut self.queue_timeout, millis(ctx, name, v, 1)),
            // h2o 2.2 named the switch `proxy.websocket`; current h2o `proxy.tunnel`.
            "proxy.tunnel" | "proxy.websocket" => set(&mut self.tunnel, ctx.bool(name, v)),
            "proxy.websocket.timeout" => set(&mut self.websocket_timeout, millis(ctx, name, v, 1)),
            // A head must hold at least a status line; more fields than the parser has slots
            // for would be refused anyway.
            "proxy.max-response-head-size" => {
                set(&mut self.max_response_head_size, ctx.int(name, v, 256))
            }
            "proxy.max-response-headers" => match ctx.int::<usize>(name, v, 1) {
                Some(n) if n > ProxyConf::MAX_RESPONSE_HEADERS_LIMIT => ctx.error(
                    v.line,
                    format!(
                        "{name}: at most {}, got {n}",
                        ProxyConf::MAX_RESPONSE_HEADERS_LIMIT
                    ),
                ),
                n => set(&mut self.max_response_headers, n),
            },
            "proxy.max-informational-responses" => {
                set(&mut self.max_informational, ctx.int(name, v, 0))
            }
            "proxy.proxy-protocol" => set(&mut self.proxy_protocol, ctx.bool(name, v)),
            "proxy.max-fails" => set(&mut self.max_fails, ctx.int(name, v, 0)),
            "proxy.fail-timeout" => set(&mut self.fail_timeout, millis(ctx, name, v, 1)),
            "proxy.health-check" => {
                if let Some(check) = health_check(ctx, name, v) {
                    self.health_check = Some(check);
                }
            }
            "proxy.ssl.verify-peer" => set(&mut self.ssl_verify_peer, ctx.bool(name, v)),
            "proxy.ssl.cafile" => {
                if let Some(file) = ctx.path_at(name, v) {
                    self.ssl_cafile = Some(file.path.clone());
                    ctx.proxy_ca_files.push(file);
                }
            }
            "proxy.ssl.session-cache" => {
                set(&mut self.ssl_session_cache, session_cache(ctx, name, v))
            }
            "proxy.http2.ratio" => set(
                &mut self.http2_ratio,
                ctx.int::<u8>(name, v, 0).filter(|r| {
                    let ok = *r <= 100;
                    if !ok {
                        ctx.error(v.line, format!("{name} expects a percentage (0 to 100)"));
                    }
                    ok
                }),
            ),
            "proxy.http2.max-concurrent-streams" | "proxy.http2.max-concurrent_streams" => {
                set(&mut self.http2_max_concurrent_streams, ctx.int(name, v, 1))
            }
            "proxy.http2.force-cleartext" => {
                set(&mut self.http2_force_cleartext, ctx.bool(name, v))
            }
            "proxy.cache" => set(&mut self.cache, super::cache::parse(ctx, name, v)),
            // h2o's older name for the switch, still registered there.
            "proxy.connect.emit-proxy-status" | "proxy.connect.proxy-status" => {
                set(&mut self.connect_proxy_status, ctx.bool(name, v))
            }
            "proxy.proxy-status.identity" | "proxy-status.identity" => {
                set(&mut self.proxy_status_identity, identity(ctx, name, v))
            }
            _ => return false,
        }
        true
    }

    /// The proxy handler of a path forwarding to `backends` (`proxy.reverse.url` at `line`),
    /// with the defaults for what is unset.
    /// `proxy.connect`'s settings: its list, and the timeouts as the other proxies take them.
    pub fn connect(&self, acl: Vec<super::AclRule>) -> super::ConnectConf {
        let io = self.io_timeout.unwrap_or(ProxyConf::DEFAULT_IO_TIMEOUT);
        super::ConnectConf {
            acl,
            connect_timeout: self.connect_timeout.unwrap_or(io),
            idle_timeout: self.websocket_timeout.unwrap_or(io),
            proxy_status: self.connect_proxy_status.unwrap_or(false).then(|| {
                self.proxy_status_identity
                    .clone()
                    .unwrap_or_else(|| super::ConnectConf::DEFAULT_PROXY_STATUS_IDENTITY.to_owned())
            }),
        }
    }

    pub fn build(&self, ctx: &mut Ctx, line: u32, backends: Backends) -> Option<ProxyConf> {
        let Backends { mut list, balancer } = backends;
        // Each `https://` backend gets its TLS client, verifying its own host name.
        for b in list.iter_mut().filter(|b| b.url.tls) {
            match self.tls_client(ctx, line, &b.url) {
                Ok(t) => b.tls = Some(t),
                Err(e) => {
                    ctx.error(line, format!("proxy.reverse.url: {e}"));
                    return None;
                }
            }
        }
        let mut d = ProxyConf::new(list[0].url.clone());
        d.backends = list;
        // As in h2o, `proxy.timeout.io` is also the connect and first-byte timeout unless
        // those are set.
        let io = self.io_timeout.unwrap_or(d.io_timeout);
        let keepalive_timeout = self.keepalive_timeout.unwrap_or(d.keepalive_timeout);
        let proxy_protocol = self.proxy_protocol.unwrap_or(d.proxy_protocol);
        if proxy_protocol && !keepalive_timeout.is_zero() {
            // h2o's rule: a kept connection would carry later clients' requests under the
            // first client's addresses.
            ctx.error(
                line,
                "proxy.proxy-protocol: ON needs proxy.timeout.keepalive: 0 (a kept connection \
                 would carry other clients' requests under the first client's addresses)",
            );
            return None;
        }
        let http2_ratio = self.http2_ratio.unwrap_or(d.http2_ratio);
        let http2_force_cleartext = self
            .http2_force_cleartext
            .unwrap_or(d.http2_force_cleartext);
        let http2_used = d
            .backends
            .iter()
            .any(|b| ProxyConf::speaks_http2(b.url.tls, http2_ratio, http2_force_cleartext));
        if proxy_protocol && http2_used {
            // One HTTP/2 connection carries many clients' requests at once.
            ctx.error(
                line,
                "proxy.proxy-protocol: ON cannot go with HTTP/2 to the backend (one HTTP/2 \
                 connection carries many clients' requests under the first client's addresses)",
            );
            return None;
        }
        Some(ProxyConf {
            balancer,
            preserve_host: self.preserve_host.unwrap_or(d.preserve_host),
            emit_x_forwarded_headers: self
                .emit_x_forwarded_headers
                .unwrap_or(d.emit_x_forwarded_headers),
            emit_via_header: self.emit_via_header.unwrap_or(d.emit_via_header),
            emit_missing_date_header: self
                .emit_missing_date_header
                .unwrap_or(d.emit_missing_date_header),
            preserve_x_forwarded_proto: self
                .preserve_x_forwarded_proto
                .unwrap_or(d.preserve_x_forwarded_proto),
            headers: self.headers.clone(),
            connect_timeout: self.connect_timeout.unwrap_or(io),
            first_byte_timeout: self.first_byte_timeout.unwrap_or(io),
            io_timeout: io,
            keepalive_timeout,
            max_buffer_size: self.max_buffer_size.unwrap_or(d.max_buffer_size),
            expect: self.expect.unwrap_or(d.expect),
            forward_close_connection: self
                .forward_close_connection
                .unwrap_or(d.forward_close_connection),
            max_idle_connections: self.max_idle_connections.unwrap_or(d.max_idle_connections),
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            queue_max: self.queue_max.unwrap_or(d.queue_max),
            queue_timeout: self.queue_timeout.unwrap_or(d.queue_timeout),
            tunnel: self.tunnel.unwrap_or(d.tunnel),
            tunnel_timeout: self.websocket_timeout.unwrap_or(io),
            max_response_head_size: self
                .max_response_head_size
                .unwrap_or(d.max_response_head_size),
            max_response_headers: self.max_response_headers.unwrap_or(d.max_response_headers),
            proxy_protocol,
            max_fails: self.max_fails.unwrap_or(d.max_fails),
            fail_timeout: self.fail_timeout.unwrap_or(d.fail_timeout),
            health_check: self.health_check.clone().unwrap_or(d.health_check),
            http2_ratio,
            http2_max_concurrent_streams: self
                .http2_max_concurrent_streams
                .unwrap_or(d.http2_max_concurrent_streams),
            http2_force_cleartext,
            cache: self.cache.clone().flatten().map(Box::new),
            preserve_server_header: ctx.preserve_server_header,
            send_informational: ctx.send_informational,
            max_informational: self.max_informational.unwrap_or(d.max_informational),
            reproxy: self.reproxy.unwrap_or(d.reproxy),
            max_delegations: self.max_delegations.unwrap_or(d.max_delegations),
            backends: d.backends,
        })
    }

    /// The TLS client settings of an `https://` backend, with the next id.
    fn tls_client(
        &self,
        ctx: &mut Ctx,
        line: u32,
        upstream: &UpstreamUrl,
    ) -> Result<UpstreamTls, String> {
        if !matches!(upstream.addr, UpstreamAddr::Tcp { .. }) {
            return Err("https to a unix socket is not supported".into());
        }
        let id = ctx.upstream_tls_count;
        ctx.upstream_tls_count += 1;
        Ok(UpstreamTls {
            id,
            verify_peer: self.ssl_verify_peer.unwrap_or(true),
            cafile: self.ssl_cafile.clone(),
            session_cache: self
                .ssl_session_cache
                .unwrap_or(Some(ProxyConf::DEFAULT_SSL_SESSION_CACHE)),
            at: ctx.at(line),
        })
    }
}

/// `proxy.ssl.session-cache`: ON, OFF, or `{lifetime: SECONDS, capacity: ENTRIES}` (both
/// required, as in h2o). rustls expires entries by the lifetime the backend gives its
/// tickets, so `lifetime` is checked but has no further effect.
fn session_cache(ctx: &mut Ctx, name: &str, v: &Node) -> Option<Option<usize>> {
    if v.as_map().is_none() {
        return ctx
            .bool(name, v)
            .map(|on| on.then_some(ProxyConf::DEFAULT_SSL_SESSION_CACHE));
    }
    let entries = ctx.map(name, v)?;
    let (mut lifetime, mut capacity) = (None, None);
    for (key, val) in ctx.known_keys(name, entries, &["lifetime", "capacity"]) {
        match key {
            "lifetime" => lifetime = ctx.uint(&format!("{name}.lifetime"), val, 1),
            _ => capacity = ctx.int::<usize>(&format!("{name}.capacity"), val, 1),
        }
    }
    match (lifetime, capacity) {
        (Some(_), Some(c)) => Some(Some(c)),
        _ => {
            ctx.error(v.line, format!("{name} expects both lifetime and capacity"));
            None
        }
    }
}

fn set<T>(slot: &mut Option<T>, value: Option<T>) {
    if value.is_some() {
        *slot = value;
    }
}

fn millis(ctx: &mut Ctx, name: &str, v: &Node, min: u64) -> Option<Duration> {
    ctx.uint(name, v, min).map(Duration::from_millis)
}

/// `proxy.reverse.url`, in h2o's three forms: one URL (`http://HOST[:PORT][/PATH]` or
/// `http://[unix:/path/to/socket][/PATH]`); a sequence of URLs or of `{url, weight}` mappings;
/// a mapping with `backends` (either of those) and `balancer: round-robin | least-conn`.
pub(super) fn reverse_url(ctx: &mut Ctx, v: &Node) -> Option<Backends> {
    let before = ctx.errors.len();
    let (items, balancer) = match v.as_map() {
        Some(entries) => {
            let keys = ctx.known_keys("proxy.reverse.url", entries, &["backends", "balancer"]);
            let mut backends = None;
            let mut balancer = Balancer::RoundRobin;
            for (key, val) in keys {
                if key == "backends" {
                    backends = Some(val);
                    continue;
                }
                match val.as_str() {
                    Some("round-robin") => balancer = Balancer::RoundRobin,
                    Some("least-conn") => balancer = Balancer::LeastConn,
                    // Reported; the backends are still checked.
                    _ => ctx.error(
                        val.line,
                        format!(
                            "proxy.reverse.url: balancer must be round-robin or least-conn, got {}",
                            show(val)
                        ),
                    ),
                }
            }
            let Some(backends) = backends else {
                ctx.error(v.line, "proxy.reverse.url: the mapping form needs backends");
                return None;
            };
            if backends.as_map().is_some() {
                ctx.error(
                    backends.line,
                    "proxy.reverse.url: backends must be a URL or a sequence of them",
                );
                return None;
            }
            (backends, balancer)
        }
        None => (v, Balancer::RoundRobin),
    };
    let nodes = match items.as_seq() {
        Some(seq) => seq,
        None => std::slice::from_ref(items),
    };
    if nodes.is_empty() {
        ctx.error(
            items.line,
            "proxy.reverse.url: at least one backend URL must be set",
        );
        return None;
    }
    if nodes.len() > MAX_BACKENDS {
        ctx.error(
            items.line,
            format!(
                "proxy.reverse.url: at most {MAX_BACKENDS} backends, got {}",
                nodes.len()
            ),
        );
        return None;
    }
    let list: Vec<BackendConf> = nodes.iter().filter_map(|n| backend(ctx, n)).collect();
    (ctx.errors.len() == before).then_some(Backends { list, balancer })
}

/// Backends one `proxy.reverse.url` may list (a request remembers which it tried in a u64).
pub const MAX_BACKENDS: usize = 64;

/// One backend: a URL, or `{url: URL, weight: 1-256}`.
fn backend(ctx: &mut Ctx, v: &Node) -> Option<BackendConf> {
    let (url_node, weight) = match v.as_map() {
        Some(entries) => {
            let mut url = None;
            let mut weight = 1;
            for (key, val) in
                ctx.known_keys("a proxy.reverse.url backend", entries, &["url", "weight"])
            {
                if key == "url" {
                    url = Some(val);
                } else {
                    match val.as_u64() {
                        Some(w @ 1..=256) => weight = w as u32,
                        _ => {
                            ctx.error(
                                val.line,
                                format!(
                                    "proxy.reverse.url: weight must be an integer in range 1 - 256, got {}",
                                    show(val)
                                ),
                            );
                            return None;
                        }
                    }
                }
            }
            let Some(url) = url else {
                ctx.error(v.line, "proxy.reverse.url: a backend mapping needs url");
                return None;
            };
            (url, weight)
        }
        None => (v, 1),
    };
    let Some(text) = url_node.as_str().filter(|s| !s.is_empty()) else {
        ctx.error(
            url_node.line,
            format!(
                "proxy.reverse.url expects a URL (http://HOST[:PORT][/PATH]), got {}",
                show(url_node)
            ),
        );
        return None;
    };
    match parse_url(text, &ctx.base_dir) {
        Ok(url) => Some(BackendConf {
            url,
            weight,
            tls: None,
        }),
        Err(message) => {
            ctx.error(url_node.line, message);
            None
        }
    }
}

/// `proxy.health-check: {path, interval, timeout, status, rise, fall}` (every key optional),
/// or `OFF` to drop one set above. `None`: an error was reported.
fn health_check(ctx: &mut Ctx, name: &str, v: &Node) -> Option<Option<HealthCheck>> {
    if v.as_bool() == Some(false) {
        return Some(None);
    }
    let entries = ctx.map(name, v)?;
    let mut check = HealthCheck {
        path: "/".into(),
        ..HealthCheck::DEFAULT
    };
    let before = ctx.errors.len();
    let keys = ["path", "interval", "timeout", "status", "rise", "fall"];
    for (key, val) in ctx.known_keys(name, entries, &keys) {
        let what = format!("{name}.{key}");
        match key {
            "path" => match val.as_str() {
                Some(p)
                    if p.starts_with('/')
                        && !p.bytes().any(|b| b.is_ascii_control() || b == b' ') =>
                {
                    check.path = p.to_owned()
                }
                _ => ctx.error(
                    val.line,
                    format!("{what} expects a path starting with /, got {}", show(val)),
                ),
            },
            "interval" => set_to(&mut check.interval, millis(ctx, &what, val, 1)),
            "timeout" => set_to(&mut check.timeout, millis(ctx, &what, val, 1)),
            "status" => match val.as_u64() {
                Some(s @ 100..=599) => check.status = s as u16,
                _ => ctx.error(
                    val.line,
                    format!("{what} expects a status code (100-599), got {}", show(val)),
                ),
            },
            "rise" => set_to(&mut check.rise, ctx.int(&what, val, 1)),
            _ => set_to(&mut check.fall, ctx.int(&what, val, 1)),
        }
    }
    (ctx.errors.len() == before).then_some(Some(check))
}

fn set_to<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

/// Room for the socket path in `sockaddr_un` on Linux, less the terminating NUL.
const MAX_UNIX_PATH: usize = 107;

/// Parses an upstream URL; the error is the whole message. A relative unix socket path is
/// resolved against `base_dir`.
pub fn parse_url(url: &str, base_dir: &Path) -> Result<UpstreamUrl, String> {
    let bad = |what: String| Err(format!("proxy.reverse.url: {what}"));
    // The URL ends up in a request line and a Host field.
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return bad("the URL contains a space or a control character".into());
    }
    if !url.is_ascii() {
        return bad(format!(
            "\"{url}\": non-ASCII characters must be percent-encoded"
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad(format!(
            "\"{url}\" is not a URL (expected http://HOST[:PORT][/PATH])"
        ));
    };
    let tls = scheme.eq_ignore_ascii_case("https");
    if !tls && !scheme.eq_ignore_ascii_case("http") {
        return bad(format!(
            "unknown scheme \"{scheme}\" in \"{url}\" (expected http or https)"
        ));
    }
    let default_port = if tls { 443 } else { 80 };
    if rest.contains(['?', '#']) {
        return bad(format!(
            "\"{url}\": a query or fragment is not supported (the request's own query is forwarded)"
        ));
    }
    // The authority ends at the first `/`, except inside `[...]` (a unix socket path).
    let authority_len = match rest.strip_prefix('[') {
        Some(inner) => match inner.find(']') {
            Some(close) => {
                let after = close + 2;
                after + rest[after..].find('/').unwrap_or(rest.len() - after)
            }
            None => return bad(format!("missing ] in \"{url}\"")),
        },
        None => rest.find('/').unwrap_or(rest.len()),
    };
    let (authority, path) = rest.split_at(authority_len);
    if authority.contains('@') {
        return bad(format!(
            "\"{url}\": user information (user@host) is not supported"
        ));
    }
    let (host, port) = split_host_port(authority, url)?;
    let addr = match host.strip_prefix('[') {
        Some(inner) => {
            let inner = &inner[..inner.len() - 1];
            if let Some(socket) = inner.strip_prefix("unix:") {
                if port.is_some() {
                    return bad(format!("\"{url}\": a unix socket URL takes no port"));
                }
                if socket.is_empty() {
                    return bad(format!("\"{url}\": [unix:] needs a socket path"));
                }
                let path = super::paths::resolve(base_dir, Path::new(socket));
                let len = path.as_os_str().len();
                if len > MAX_UNIX_PATH {
                    return bad(format!(
                        "the unix socket path {} is too long ({len} bytes; at most {MAX_UNIX_PATH})",
                        path.display()
                    ));
                }
                UpstreamAddr::Unix(path)
            } else if inner.parse::<Ipv6Addr>().is_ok() {
                UpstreamAddr::Tcp {
                    host: inner.to_ascii_lowercase(),
                    port: port.unwrap_or(default_port),
                }
            } else {
                return bad(format!(
                    "\"{host}\" in \"{url}\" is neither an IPv6 address nor [unix:PATH]"
                ));
            }
        }
        None => {
            if host.is_empty() {
                return bad(format!("\"{url}\" has no host"));
            }
            let name_chars = host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            let looks_v4 = host.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            if !name_chars || (looks_v4 && host.parse::<Ipv4Addr>().is_err()) {
                return bad(format!("\"{host}\" in \"{url}\" is not a valid host name"));
            }
            UpstreamAddr::Tcp {
                host: host.to_ascii_lowercase(),
                port: port.unwrap_or(default_port),
            }
        }
    };
    Ok(UpstreamUrl {
        addr,
        authority: authority.to_owned(),
        path: if path.is_empty() { "/" } else { path }.to_owned(),
        tls,
    })
}

/// `host`, `host:port`, `[inner]`, `[inner]:port` -> the host (brackets kept) and the port.
fn split_host_port<'a>(authority: &'a str, url: &str) -> Result<(&'a str, Option<u16>), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(inner) => {
            // `parse_url` checked that the `]` is there.
            let close = inner.find(']').map_or(authority.len(), |i| i + 2);
            let (host, after) = authority.split_at(close);
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(p) => (host, Some(p)),
                    None => {
                        return Err(format!(
                            "proxy.reverse.url: unexpected \"{after}\" after ] in \"{url}\""
                        ))
                    }
                },
            }
        }
        None => match authority.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err(format!(
                    "proxy.reverse.url: \"{url}\": an IPv6 address must be written in brackets (http://[::1]:8080/)"
                ));
            }
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => {
                return Err(format!(
                    "proxy.reverse.url: bad port \"{p}\" in \"{url}\" (expected 1 to 65535)"
                ))
            }
        },
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests;

/// `proxy.proxy-status.identity`: printable ASCII, as the field carries it (RFC 9209 section 2).
fn identity(ctx: &mut Ctx, name: &str, v: &Node) -> Option<String> {
    let s = ctx.string(name, v)?;
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Some(s)
    } else {
        ctx.error(
            v.line,
            format!(
                "{name} expects printable ASCII characters only, got {}",
                show(v)
            ),
        );
        None
    }
}
