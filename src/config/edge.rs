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
                    let at = ctx.at(line);
                    if !ctx
                        .errors
                        .iter()
                        .any(|e| e.at == at && e.message == NEEDS_FROM)
                    {
                        ctx.error(line, NEEDS_FROM);
                    }
                }
                None
            }
        };
        let basic_auth = self.basic_auth.clone().flatten();
        if self.access.is_empty() && real_ip.is_none() && basic_auth.is_none() {
            return None;
        }
        Some(EdgeConf {
            access: self.access.clone(),
            real_ip,
            basic_auth,
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
