//! Directives of the edge: who a request comes from and whether it may pass. Address ranges
//! (`Cidr`), `access` rules (allow / deny by address, in order) and `real-ip.*` (the client
//! address carried by trusted proxies in `X-Forwarded-For` / `Forwarded`). Inherited from the
//! global level down to paths; an inner level that writes `access` replaces the outer list, as
//! nginx's `allow` / `deny` do.

use super::value::{show, Ctx};
use super::yaml::Node;
use std::net::IpAddr;
use std::path::PathBuf;

/// An address range: `10.0.0.0/8`, `2001:db8::/32`, one address, or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cidr {
    All,
    V4 { net: u32, bits: u8 },
    V6 { net: u128, bits: u8 },
}

impl Cidr {
    /// Parses `all`, `ADDR` or `ADDR/BITS`; the host bits of `ADDR` must be zero.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("all") {
            return Ok(Cidr::All);
        }
        let (addr, bits) = match text.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (text, None),
        };
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => match b.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("prefix length {b:?} is not 0 to {max}")),
            },
        };
        let cidr = match ip {
            IpAddr::V4(a) => Cidr::V4 {
                net: u32::from(a),
                bits,
            },
            IpAddr::V6(a) => Cidr::V6 {
                net: u128::from(a),
                bits,
            },
        };
        if cidr.masked() != cidr {
            return Err(format!("{text} has bits set after the prefix length"));
        }
        Ok(cidr)
    }

    fn masked(self) -> Cidr {
        match self {
            Cidr::All => Cidr::All,
            Cidr::V4 { net, bits } => Cidr::V4 {
                net: net & mask32(bits),
                bits,
            },
            Cidr::V6 { net, bits } => Cidr::V6 {
                net: net & mask128(bits),
                bits,
            },
        }
    }

    /// Whether `ip` is in the range. An IPv4-mapped IPv6 address counts as IPv4.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (*self, ip.to_canonical()) {
            (Cidr::All, _) => true,
            (Cidr::V4 { net, bits }, IpAddr::V4(a)) => u32::from(a) & mask32(bits) == net,
            (Cidr::V6 { net, bits }, IpAddr::V6(a)) => u128::from(a) & mask128(bits) == net,
            _ => false,
        }
    }
}

fn mask32(bits: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0)
}

fn mask128(bits: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0)
}

/// Whether any range of `list` contains `ip`.
#[inline]
pub fn any_contains(list: &[Cidr], ip: IpAddr) -> bool {
    list.iter().any(|c| c.contains(ip))
}

/// One `access` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    pub allow: bool,
    pub from: Vec<Cidr>,
}

/// `real-ip.*`: where the client address of a request that came through trusted proxies is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealIpConf {
    /// `real-ip.from`: the proxies trusted to name the client.
    pub from: Vec<Cidr>,
    /// `real-ip.header` (default `X-Forwarded-For`).
    pub header: RealIpHeader,
    /// `real-ip.recursive` (default OFF): walk past every trusted address from the right,
    /// rather than taking the last one.
    pub recursive: bool,
}

/// The header `real-ip.header` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealIpHeader {
    /// `X-Forwarded-For` or any other header holding a comma-separated list of addresses
    /// (`X-Real-IP` holds one). The name is kept in lower case.
    List(String),
    /// `Forwarded` (RFC 7239): the `for=` parameters.
    Forwarded,
}

/// The edge's checks in effect for a path; `None` in [`super::PathConf`] when none is set,
/// so a path without them pays nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EdgeConf {
    /// `access`: the rules in order; the first whose range holds the client decides, and a
    /// client no rule names passes.
    pub access: Vec<AccessRule>,
    pub real_ip: Option<RealIpConf>,
    /// `basic-auth`.
    pub basic_auth: Option<BasicAuthConf>,
    /// `limit-req`: each zone the request counts in.
    pub limits: Vec<LimitReqConf>,
    /// `limit-conn`: each zone the request holds a place in while it is served.
    pub conn_limits: Vec<LimitConnConf>,
    /// `auth-request`: the service asked before the handler runs.
    pub auth_request: Option<AuthRequestConf>,
}

/// `auth-request: {url: URL, copy-headers: [NAME, ...], timeout: MS}` (nginx's
/// `auth_request`, Caddy's `forward_auth`): a subrequest to an authentication service
/// decides whether the request goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRequestConf {
    /// `url` (required): `http://HOST[:PORT]/PATH` or `http://[unix:/path]/PATH`.
    pub url: super::UpstreamUrl,
    /// `copy-headers` (none): the fields of the service's 2xx answer set on the request, in
    /// lower case. The client's own fields of these names are dropped either way, so that a
    /// client cannot claim what only the service may say.
    pub copy_headers: Vec<String>,
    /// `timeout` (ms, 5000): for connecting, for the service's answer and between its reads.
    pub timeout: std::time::Duration,
}

impl AuthRequestConf {
    pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5_000);
}

/// One entry of `limit-conn-zones` (nginx's `limit_conn_zone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConnZone {
    pub name: String,
    pub key: LimitKey,
    /// `size` (10,000): the keys with requests in progress the zone holds at most; a request
    /// of a new key finds a full zone refused, as nginx's.
    pub size: usize,
    pub at: super::Location,
}

/// One `limit-conn` of a path (nginx's `limit_conn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConnConf {
    pub zone: LimitConnZone,
    /// `conn` (required): requests of one key in progress at once.
    pub conn: u32,
    /// `status` (503, nginx's `limit_conn_status`).
    pub status: u16,
    /// `dry-run` (OFF): only log what would be refused.
    pub dry_run: bool,
}

/// One entry of `limit-req-zones` (nginx's `limit_req_zone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitZone {
    pub name: String,
    pub key: LimitKey,
    /// `rate`, in thousandths of a request per second (nginx's unit): `10r/s` is 10,000,
    /// `30r/m` is 500.
    pub rate: u64,
    /// `size` (10,000): the keys remembered; beyond them the least recently seen is forgotten.
    pub size: usize,
    /// `redis: {host, port, prefix}`: counters shared by a fleet (none: this process alone).
    pub fleet: Option<FleetZone>,
    pub at: super::Location,
}

impl LimitZone {
    pub const DEFAULT_SIZE: usize = 10_000;
}

/// A zone whose counters a fleet shares through Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetZone {
    pub redis: super::StoreServer,
    /// `sync-interval` (milliseconds, 100): how often the counts are exchanged.
    pub sync_ms: u64,
}

impl FleetZone {
    pub const DEFAULT_SYNC_MS: u64 = 100;
}

/// What a zone counts requests by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// The client's address (`client`): the peer, the PROXY header's client, or `real-ip`'s.
    Client,
    /// A request header's value (`header:NAME`, the name in lower case); a request without
    /// it is not counted (nginx's empty key).
    Header(String),
}

/// One `limit-req` of a path (nginx's `limit_req`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitReqConf {
    pub zone: LimitZone,
    /// `burst` (0): requests over the rate that wait (or pass at once up to `delay`).
    pub burst: u64,
    /// `delay` (0) or `nodelay: ON` (= `burst`): excess requests answered without waiting.
    pub delay: u64,
    /// `status` (429).
    pub status: u16,
    /// `dry-run` (OFF): only log and count what would be refused.
    pub dry_run: bool,
}

/// `basic-auth: {htpasswd: PATH, realm: TEXT}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuthConf {
    /// The htpasswd file (relative to the configuration's directory).
    pub htpasswd: PathBuf,
    /// `realm` (default `Restricted`).
    pub realm: String,
}

/// The edge directives as set so far at some level.
#[derive(Debug, Clone, Default)]
pub(super) struct EdgeOpts {
    access: Vec<AccessRule>,
    real_ip_from: Option<Vec<Cidr>>,
    real_ip_header: Option<RealIpHeader>,
    real_ip_recursive: Option<bool>,
    /// The line of the last `real-ip.header` / `real-ip.recursive`, for the check that
    /// `real-ip.from` came with them.
    real_ip_line: Option<u32>,
    /// `Some(None)`: `basic-auth: OFF` at this level.
    basic_auth: Option<Option<BasicAuthConf>>,
    /// `limit-req` as written (zones named, resolved when a path is built).
    limits: Option<Vec<(LimitReqConf, String, u32)>>,
    /// `limit-conn` as written.
    conn_limits: Option<Vec<(LimitConnConf, String, u32)>>,
    /// `Some(None)`: `auth-request: OFF` at this level.
    auth_request: Option<Option<AuthRequestConf>>,
}

impl EdgeOpts {
    /// Applies one edge directive. Returns false when `name` is not one of them.
    pub fn apply(&mut self, ctx: &mut Ctx, name: &str, v: &Node) -> bool {
        match name {
            "access" => {
                if let Some(rules) = access(ctx, v) {
                    self.access = rules;
                }
            }
            "basic-auth" => {
                if let Some(b) = basic_auth(ctx, v) {
                    self.basic_auth = Some(b);
                }
            }
            "auth-request" => {
                if let Some(a) = auth_request(ctx, v) {
                    self.auth_request = Some(a);
                }
            }
            "limit-req-zones" => zones(ctx, v),
            "limit-req" => {
                if let Some(l) = limit_req(ctx, v) {
                    self.limits = Some(l);
                }
            }
            "limit-conn-zones" => conn_zones(ctx, v),
            "limit-conn" => {
                if let Some(l) = limit_conn(ctx, v) {
                    self.conn_limits = Some(l);
                }
            }
            "real-ip.from" => {
                if let Some(list) = cidrs(ctx, name, v) {
                    self.real_ip_from = Some(list);
                }
            }
            "real-ip.header" => {
                self.real_ip_line = Some(v.line);
                match v.as_str().map(str::trim) {
                    Some(h) if h.eq_ignore_ascii_case("forwarded") => {
                        self.real_ip_header = Some(RealIpHeader::Forwarded)
                    }
                    Some(h) if is_token(h) => {
                        self.real_ip_header = Some(RealIpHeader::List(h.to_ascii_lowercase()))
                    }
                    _ => ctx.error(
                        v.line,
                        format!(
                            "real-ip.header expects a header name (X-Forwarded-For, X-Real-IP, Forwarded), got {}",
                            show(v)
                        ),
                    ),
                }
            }
            "real-ip.recursive" => {
                self.real_ip_line = Some(v.line);
                if let Some(on) = ctx.bool(name, v) {
                    self.real_ip_recursive = Some(on);
                }
            }
            _ => return false,
        }
        true
    }

    /// The checks of a path, `None` when it has none.
    pub fn build(&self, ctx: &mut Ctx) -> Option<EdgeConf> {
        let real_ip = match &self.real_ip_from {
            Some(from) if !from.is_empty() => Some(RealIpConf {
                from: from.clone(),
                header: self
                    .real_ip_header
                    .clone()
                    .unwrap_or_else(|| RealIpHeader::List("x-forwarded-for".into())),
                recursive: self.real_ip_recursive.unwrap_or(false),
            }),
            _ => {
                const NEEDS_FROM: &str = "real-ip.header and real-ip.recursive need real-ip.from \
                                          (the proxies trusted to name the client)";
                // Every path below the level builds the same options: one error.
                if let Some(line) = self.real_ip_line {
                    ctx.error_once(line, NEEDS_FROM);
                }
                None
            }
        };
        let basic_auth = self.basic_auth.clone().flatten();
        let mut limits = Vec::new();
        for (limit, zone, line) in self.limits.iter().flatten() {
            match ctx.limit_zones.iter().find(|z| z.name == *zone) {
                Some(z) => limits.push(LimitReqConf {
                    zone: z.clone(),
                    ..limit.clone()
                }),
                None => ctx.error_once(
                    *line,
                    format!("limit-req: no zone {zone} in limit-req-zones"),
                ),
            }
        }
        let mut conn_limits = Vec::new();
        for (limit, zone, line) in self.conn_limits.iter().flatten() {
            match ctx.limit_conn_zones.iter().find(|z| z.name == *zone) {
                Some(z) => conn_limits.push(LimitConnConf {
                    zone: z.clone(),
                    ..limit.clone()
                }),
                None => ctx.error_once(
                    *line,
                    format!("limit-conn: no zone {zone} in limit-conn-zones"),
                ),
            }
        }
        let auth_request = self.auth_request.clone().flatten();
        if self.access.is_empty()
            && real_ip.is_none()
            && basic_auth.is_none()
            && limits.is_empty()
            && conn_limits.is_empty()
            && auth_request.is_none()
        {
            return None;
        }
        Some(EdgeConf {
            access: self.access.clone(),
            real_ip,
            basic_auth,
            limits,
            conn_limits,
            auth_request,
        })
    }
}

fn is_token(h: &str) -> bool {
    !h.is_empty()
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A range or a sequence of ranges.
pub(super) fn cidrs(ctx: &mut Ctx, name: &str, v: &Node) -> Option<Vec<Cidr>> {
    let items: Vec<&Node> = match v.as_seq() {
        Some(items) => items.iter().collect(),
        None => vec![v],
    };
    let mut out = Vec::with_capacity(items.len());
    let mut ok = true;
    for item in items {
        match item.as_str().map(Cidr::parse) {
            Some(Ok(c)) => out.push(c),
            Some(Err(why)) => {
                ctx.error(
                    item.line,
                    format!("{name} expects an address or CIDR range: {why}"),
                );
                ok = false;
            }
            None => {
                ctx.error(
                    item.line,
                    format!(
                        "{name} expects an address or CIDR range (10.0.0.0/8, ::1, all), got {}",
                        show(item)
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// A zone's name, the line of its name and its fields.
type ZoneEntry<'n> = (&'n str, u32, &'n [(Node, Node)]);

/// A zone's name and fields, from `limit-req-zones` or `limit-conn-zones` (`directive`): the
/// name a non-empty string not defined before (`defined` gives the line of an earlier zone of
/// that name), the body a mapping. Each fault is reported and its zone skipped.
fn zone_entries<'n>(
    ctx: &mut Ctx,
    directive: &str,
    v: &'n Node,
    defined: impl Fn(&Ctx, &str) -> Option<u32>,
) -> Vec<ZoneEntry<'n>> {
    let Some(entries) = ctx.map(directive, v) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(entries.len());
    for (k, body) in entries {
        let Some(name) = k.as_str().filter(|n| !n.is_empty()) else {
            ctx.error(k.line, format!("{directive}: a zone name must be a string"));
            continue;
        };
        if let Some(line) = defined(ctx, name) {
            ctx.error(
                k.line,
                format!("{directive}: zone {name} is defined twice (first at line {line})"),
            );
            continue;
        }
        if let Some(fields) = ctx.map(&format!("{directive}.{name}"), body) {
            out.push((name, k.line, fields));
        }
    }
    out
}

/// `limit-req-zones: {NAME: {key: client | header:NAME, rate: Nr/s | Nr/m, size: N}}`.
fn zones(ctx: &mut Ctx, v: &Node) {
    let defined = |ctx: &Ctx, name: &str| {
        let zone = ctx.limit_zones.iter().find(|z| z.name == name);
        zone.map(|z| z.at.line)
    };
    for (name, line, fields) in zone_entries(ctx, "limit-req-zones", v, defined) {
        let what = format!("limit-req-zones.{name}");
        let mut key = Some(LimitKey::Client);
        let mut rate = None;
        let mut size = Some(LimitZone::DEFAULT_SIZE);
        let (mut redis, mut sync_ms) = (None, FleetZone::DEFAULT_SYNC_MS);
        let allowed = ["key", "rate", "size", "redis", "sync-interval"];
        for (field, val) in ctx.known_keys(&what, fields, &allowed) {
            match field {
                "redis" => redis = super::tls::redis_server(ctx, &format!("{what}.redis"), val),
                "sync-interval" => {
                    let name = format!("{what}.sync-interval");
                    match ctx.uint(&name, val, 10) {
                        Some(ms) if ms <= 60_000 => sync_ms = ms,
                        Some(_) => ctx.error(
                            val.line,
                            format!("{name} is in milliseconds, at most 60000"),
                        ),
                        None => {}
                    }
                }
                "key" => key = zone_key(ctx, &what, val),
                "rate" => {
                    rate = val.as_str().and_then(parse_rate);
                    if rate.is_none() {
                        ctx.error(
                            val.line,
                            format!(
                                "{what}.rate expects requests per second or minute (10r/s, 30r/m), got {}",
                                show(val)
                            ),
                        );
                    }
                }
                _ => size = ctx.int(&format!("{what}.size"), val, 1),
            }
        }
        if !fields.iter().any(|(f, _)| f.as_str() == Some("rate")) {
            ctx.error(line, format!("{what}: rate is required"));
        }
        if let (Some(key), Some(rate), Some(size)) = (key, rate, size) {
            let at = ctx.at(line);
            ctx.limit_zones.push(LimitZone {
                name: name.to_string(),
                key,
                rate,
                size,
                fleet: redis.map(|redis| FleetZone { redis, sync_ms }),
                at,
            });
        }
    }
}

/// `limit-conn-zones: {NAME: {key: client | header:NAME, size: N}}`.
fn conn_zones(ctx: &mut Ctx, v: &Node) {
    let defined = |ctx: &Ctx, name: &str| {
        let zone = ctx.limit_conn_zones.iter().find(|z| z.name == name);
        zone.map(|z| z.at.line)
    };
    for (name, line, fields) in zone_entries(ctx, "limit-conn-zones", v, defined) {
        let what = format!("limit-conn-zones.{name}");
        let mut key = Some(LimitKey::Client);
        let mut size = Some(LimitZone::DEFAULT_SIZE);
        for (field, val) in ctx.known_keys(&what, fields, &["key", "size"]) {
            match field {
                "key" => key = zone_key(ctx, &what, val),
                _ => size = ctx.int(&format!("{what}.size"), val, 1),
            }
        }
        if let (Some(key), Some(size)) = (key, size) {
            let at = ctx.at(line);
            ctx.limit_conn_zones.push(LimitConnZone {
                name: name.to_string(),
                key,
                size,
                at,
            });
        }
    }
}

/// A zone's `key`: `client` or `header:NAME`.
fn zone_key(ctx: &mut Ctx, what: &str, val: &Node) -> Option<LimitKey> {
    match val.as_str() {
        Some("client") => Some(LimitKey::Client),
        Some(h) if h.strip_prefix("header:").is_some_and(is_token) => {
            Some(LimitKey::Header(h["header:".len()..].to_ascii_lowercase()))
        }
        _ => {
            ctx.error(
                val.line,
                format!(
                    "{what}.key expects client or header:NAME, got {}",
                    show(val)
                ),
            );
            None
        }
    }
}

/// `limit-conn: {zone: NAME, conn: N, status: 503, dry-run: OFF}`, a sequence of them, or OFF.
fn limit_conn(ctx: &mut Ctx, v: &Node) -> Option<Vec<(LimitConnConf, String, u32)>> {
    if v.as_bool() == Some(false) {
        return Some(Vec::new());
    }
    let items: Vec<&Node> = match v.as_seq() {
        Some(items) => items.iter().collect(),
        None => vec![v],
    };
    let mut out = Vec::new();
    let mut ok = true;
    for item in items {
        let Some(fields) = item.as_map() else {
            ctx.error(
                item.line,
                format!(
                    "limit-conn expects a mapping with zone and conn (and status, dry-run), got {}",
                    show(item)
                ),
            );
            ok = false;
            continue;
        };
        let mut zone = None;
        let mut conn = None;
        let mut limit = LimitConnConf {
            zone: LimitConnZone {
                name: String::new(),
                key: LimitKey::Client,
                size: 0,
                at: ctx.at(item.line),
            },
            conn: 0,
            status: 503,
            dry_run: false,
        };
        let allowed = ["zone", "conn", "status", "dry-run"];
        for (field, val) in ctx.known_keys("limit-conn", fields, &allowed) {
            let name = format!("limit-conn.{field}");
            match field {
                "zone" => zone = ctx.string(&name, val),
                "conn" => match ctx.int::<u32>(&name, val, 1) {
                    Some(n) => conn = Some(n),
                    None => ok = false,
                },
                "status" => match ctx.int::<u16>(&name, val, 400) {
                    Some(s) if s <= 599 => limit.status = s,
                    Some(_) => {
                        ctx.error(val.line, format!("{name} expects a status from 400 to 599"));
                        ok = false;
                    }
                    None => ok = false,
                },
                _ => match ctx.bool(&name, val) {
                    Some(on) => limit.dry_run = on,
                    None => ok = false,
                },
            }
        }
        match conn {
            Some(n) => limit.conn = n,
            None if fields.iter().any(|(f, _)| f.as_str() == Some("conn")) => {}
            None => {
                ctx.error(item.line, "limit-conn: conn is required");
                ok = false;
            }
        }
        match zone {
            Some(z) => out.push((limit, z, item.line)),
            None => {
                ctx.error(item.line, "limit-conn: zone is required");
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// `10r/s` -> 10,000; `30r/m` -> 500 (thousandths of a request per second).
fn parse_rate(text: &str) -> Option<u64> {
    let (n, unit) = text.trim().split_once("r/")?;
    let n: u64 = n
        .trim()
        .parse()
        .ok()
        .filter(|n| *n > 0 && *n <= 1_000_000)?;
    match unit {
        "s" => Some(n * 1000),
        "m" => Some((n * 1000 / 60).max(1)),
        _ => None,
    }
}

/// `limit-req: {zone: NAME, burst: N, nodelay: ON | delay: N, status: 429, dry-run: OFF}`, a
/// sequence of them, or OFF.
fn limit_req(ctx: &mut Ctx, v: &Node) -> Option<Vec<(LimitReqConf, String, u32)>> {
    if v.as_bool() == Some(false) {
        return Some(Vec::new());
    }
    let items: Vec<&Node> = match v.as_seq() {
        Some(items) => items.iter().collect(),
        None => vec![v],
    };
    let mut out = Vec::new();
    let mut ok = true;
    for item in items {
        let Some(fields) = item.as_map() else {
            ctx.error(
                item.line,
                format!(
                    "limit-req expects a mapping with zone (and burst, nodelay, delay, status, dry-run), got {}",
                    show(item)
                ),
            );
            ok = false;
            continue;
        };
        let allowed = ["zone", "burst", "nodelay", "delay", "status", "dry-run"];
        let mut zone = None;
        let mut limit = LimitReqConf {
            zone: LimitZone {
                name: String::new(),
                key: LimitKey::Client,
                rate: 0,
                size: 0,
                fleet: None,
                at: ctx.at(item.line),
            },
            burst: 0,
            delay: 0,
            status: 429,
            dry_run: false,
        };
        let mut nodelay = false;
        let mut delay = None;
        for (field, val) in ctx.known_keys("limit-req", fields, &allowed) {
            let name = format!("limit-req.{field}");
            match field {
                "zone" => zone = ctx.string(&name, val),
                "burst" => match ctx.uint(&name, val, 0) {
                    Some(n) => limit.burst = n,
                    None => ok = false,
                },
                "nodelay" => match ctx.bool(&name, val) {
                    Some(on) => nodelay = on,
                    None => ok = false,
                },
                "delay" => match ctx.uint(&name, val, 0) {
                    Some(n) => delay = Some((n, val.line)),
                    None => ok = false,
                },
                "status" => match ctx.int::<u16>(&name, val, 400) {
                    Some(s) if s <= 599 => limit.status = s,
                    Some(_) => {
                        ctx.error(val.line, format!("{name} expects a status from 400 to 599"));
                        ok = false;
                    }
                    None => ok = false,
                },
                _ => match ctx.bool(&name, val) {
                    Some(on) => limit.dry_run = on,
                    None => ok = false,
                },
            }
        }
        if let (true, Some((_, line))) = (nodelay, delay) {
            ctx.error(line, "limit-req: nodelay and delay exclude each other");
            ok = false;
        }
        limit.delay = if nodelay {
            limit.burst
        } else {
            delay.map_or(0, |(d, _)| d)
        };
        match zone {
            Some(z) => out.push((limit, z, item.line)),
            None => {
                ctx.error(item.line, "limit-req: zone is required");
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// `basic-auth: OFF` or `basic-auth: {htpasswd: PATH, realm: TEXT}`.
fn basic_auth(ctx: &mut Ctx, v: &Node) -> Option<Option<BasicAuthConf>> {
    if v.as_bool() == Some(false) {
        return Some(None);
    }
    let Some(entries) = v.as_map() else {
        ctx.error(
            v.line,
            format!(
                "basic-auth expects OFF or a mapping with htpasswd (and realm), got {}",
                show(v)
            ),
        );
        return None;
    };
    let mut htpasswd = None;
    let mut realm = "Restricted".to_string();
    let mut ok = true;
    for (key, val) in ctx.known_keys("basic-auth", entries, &["htpasswd", "realm"]) {
        match key {
            "htpasswd" => match ctx.path("basic-auth.htpasswd", val) {
                Some(p) => htpasswd = Some(p),
                None => ok = false,
            },
            _ => match ctx.string("basic-auth.realm", val) {
                Some(r) => realm = r,
                None => ok = false,
            },
        }
    }
    let Some(htpasswd) = htpasswd.filter(|_| ok) else {
        if ok {
            ctx.error(
                v.line,
                "basic-auth: htpasswd (the password file) is required",
            );
        }
        return None;
    };
    Some(Some(BasicAuthConf { htpasswd, realm }))
}

/// `auth-request: OFF` or `auth-request: {url: URL, copy-headers: NAMES, timeout: MS}`.
fn auth_request(ctx: &mut Ctx, v: &Node) -> Option<Option<AuthRequestConf>> {
    if v.as_bool() == Some(false) {
        return Some(None);
    }
    let Some(entries) = v.as_map() else {
        ctx.error(
            v.line,
            format!(
                "auth-request expects OFF or a mapping with url (and copy-headers, timeout), got {}",
                show(v)
            ),
        );
        return None;
    };
    let mut url = None;
    let mut copy_headers = Vec::new();
    let mut timeout = AuthRequestConf::DEFAULT_TIMEOUT;
    let mut ok = true;
    let keys = ["url", "copy-headers", "timeout"];
    for (key, val) in ctx.known_keys("auth-request", entries, &keys) {
        match key {
            "url" => match val.as_str().filter(|s| !s.is_empty()) {
                Some(text) => match super::proxy::parse_url(text, &ctx.base_dir) {
                    Ok(u) if u.tls => {
                        ctx.error(
                            val.line,
                            "auth-request.url: https:// is not supported yet (use http:// or a unix socket)",
                        );
                        ok = false;
                    }
                    Ok(u) => url = Some(u),
                    Err(why) => {
                        let why = why.strip_prefix("proxy.reverse.url: ").unwrap_or(&why);
                        ctx.error(val.line, format!("auth-request.url: {why}"));
                        ok = false;
                    }
                },
                None => {
                    ctx.error(
                        val.line,
                        format!(
                            "auth-request.url expects a URL (http://HOST[:PORT]/PATH), got {}",
                            show(val)
                        ),
                    );
                    ok = false;
                }
            },
            "copy-headers" => match ctx.strings("auth-request.copy-headers", val) {
                Some(names) => {
                    for name in names {
                        if is_token(&name) {
                            copy_headers.push(name.to_ascii_lowercase());
                        } else {
                            ctx.error(
                                val.line,
                                format!("auth-request.copy-headers: {name:?} is not a header name"),
                            );
                            ok = false;
                        }
                    }
                }
                None => ok = false,
            },
            _ => match ctx.uint("auth-request.timeout", val, 1) {
                Some(ms) => timeout = std::time::Duration::from_millis(ms),
                None => ok = false,
            },
        }
    }
    let Some(url) = url.filter(|_| ok) else {
        if ok {
            ctx.error(
                v.line,
                "auth-request: url (the authentication service) is required",
            );
        }
        return None;
    };
    Some(Some(AuthRequestConf {
        url,
        copy_headers,
        timeout,
    }))
}

/// `access: [{allow: RANGES}, {deny: RANGES}, ...]`.
fn access(ctx: &mut Ctx, v: &Node) -> Option<Vec<AccessRule>> {
    const EXPECTED: &str = "access expects a sequence of {allow: RANGES} or {deny: RANGES}";
    let Some(items) = v.as_seq() else {
        ctx.error(v.line, format!("{EXPECTED}, got {}", show(v)));
        return None;
    };
    let mut rules = Vec::with_capacity(items.len());
    let mut ok = true;
    for item in items {
        let entry = match item.as_map() {
            Some([(k, val)]) => k.as_str().map(|k| (k, val)),
            _ => None,
        };
        let Some((key, val)) = entry else {
            ctx.error(item.line, format!("{EXPECTED}, got {}", show(item)));
            ok = false;
            continue;
        };
        let allow = match key {
            "allow" => true,
            "deny" => false,
            _ => {
                ctx.error(item.line, format!("{EXPECTED}, got the key {key}"));
                ok = false;
                continue;
            }
        };
        match cidrs(ctx, &format!("access.{key}"), val) {
            Some(from) => rules.push(AccessRule { allow, from }),
            None => ok = false,
        }
    }
    ok.then_some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_hold_their_addresses() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(ip("10.255.1.2")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.1.2.3")));
        assert!(!c.contains(ip("::1")));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains(ip("127.0.0.1")));
        assert!(!one.contains(ip("127.0.0.2")));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("1.2.3.4")));
        assert!(Cidr::parse("all").unwrap().contains(ip("::1")));
    }

    #[test]
    fn bad_ranges_say_why() {
        assert!(Cidr::parse("10.0.0.1/8").unwrap_err().contains("bits set"));
        assert!(Cidr::parse("10.0.0.0/33").unwrap_err().contains("0 to 32"));
        assert!(Cidr::parse("example.com")
            .unwrap_err()
            .contains("not an IP"));
    }
}
