//! `proxy.connect` (h2o): a CONNECT proxy, with its access control list. Each entry is
//! `+` (allow) or `-` (deny) then `*` or an address with an optional netmask, and an
//! optional port (`:443`, `:80-443`, `:*`); the first entry whose address and port match the
//! resolved target decides, and a target no entry matches is denied.

use super::value::Ctx;
use super::yaml::Node;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// `proxy.connect` of a path.
#[derive(Debug, Clone)]
pub struct ConnectConf {
    pub acl: Vec<AclRule>,
    /// `proxy.timeout.connect` (default: `proxy.timeout.io`, 30000 ms).
    pub connect_timeout: Duration,
    /// How long an open tunnel may carry nothing either way: `proxy.websocket.timeout`
    /// (default: `proxy.timeout.io`), as the proxy's other tunnels.
    pub idle_timeout: Duration,
    /// `proxy.connect.emit-proxy-status: ON`: the `Proxy-Status` field's identity
    /// (`proxy.proxy-status.identity`, as written); `None`: no field (the default).
    pub proxy_status: Option<String>,
}

impl ConnectConf {
    pub const DEFAULT_PROXY_STATUS_IDENTITY: &'static str = "spate";

    /// Whether the list lets a tunnel open to `to` (the first match decides; none: no).
    pub fn allows(&self, to: SocketAddr) -> bool {
        self.acl
            .iter()
            .find(|r| r.matches(to))
            .is_some_and(|r| r.allow)
    }
}

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRule {
    pub allow: bool,
    /// The network and its prefix length; `None` for `*`.
    pub net: Option<(IpAddr, u8)>,
    /// Inclusive port range.
    pub ports: (u16, u16),
}

impl AclRule {
    pub fn matches(&self, to: SocketAddr) -> bool {
        let port = to.port();
        if port < self.ports.0 || port > self.ports.1 {
            return false;
        }
        match self.net {
            None => true,
            Some((IpAddr::V4(net), bits)) => match to.ip() {
                IpAddr::V4(ip) => masked(u32::from(net).into(), u32::from(ip).into(), bits, 32),
                IpAddr::V6(ip) => ip.to_ipv4_mapped().is_some_and(|ip| {
                    masked(u32::from(net).into(), u32::from(ip).into(), bits, 32)
                }),
            },
            Some((IpAddr::V6(net), bits)) => match to.ip() {
                IpAddr::V6(ip) => masked(u128::from(net), u128::from(ip), bits, 128),
                IpAddr::V4(_) => false,
            },
        }
    }
}

fn masked(net: u128, ip: u128, bits: u8, width: u8) -> bool {
    let shift = u32::from(width - bits.min(width));
    let keep = |v: u128| v.checked_shr(shift).unwrap_or(0);
    keep(net) == keep(ip)
}

/// The list of `proxy.connect`: a sequence of strings.
pub(super) fn acl(ctx: &mut Ctx, v: &Node) -> Option<Vec<AclRule>> {
    let Some(items) = v.as_seq() else {
        ctx.error(
            v.line,
            format!(
                "proxy.connect expects a sequence of access rules (\"+ADDRESS[/MASK][:PORT]\" or \"-...\"), got a {}",
                v.type_name()
            ),
        );
        return None;
    };
    let mut rules = Vec::with_capacity(items.len());
    let mut ok = true;
    for item in items {
        match item.as_str().map(rule) {
            Some(Ok(r)) => rules.push(r),
            Some(Err(e)) => {
                ctx.error(item.line, format!("proxy.connect: {e}"));
                ok = false;
            }
            None => {
                ctx.error(
                    item.line,
                    format!(
                        "proxy.connect: an access rule is a string, got a {}",
                        item.type_name()
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(rules)
}

/// `+ADDRESS[/MASK][:PORT]`, `-*`, `+[::1]:443`, `+10.0.0.0/8:80-443`, or h2o's older
/// `ADDRESS:PORT/MASK`.
pub(super) fn rule(s: &str) -> Result<AclRule, String> {
    let allow = match s.as_bytes().first() {
        Some(b'+') => true,
        Some(b'-') => false,
        _ => return Err(format!("{s:?} must start with + (allow) or - (deny)")),
    };
    let body = &s[1..];
    let bad = || format!("{s:?} is not [+-]ADDRESS[/MASK][:PORT] (or * for any address)");
    // The address part, then what follows it (`/MASK`, `:PORT`, in either order).
    let (addr, rest) = if let Some(b) = body.strip_prefix('[') {
        let end = b.find(']').ok_or_else(bad)?;
        (&b[..end], &b[end + 1..])
    } else if body.contains("::") || body.matches(':').count() > 1 {
        // A bare IPv6 address takes no port.
        match body.find('/') {
            Some(i) => (&body[..i], &body[i..]),
            None => (body, ""),
        }
    } else {
        let end = body.find([':', '/']).unwrap_or(body.len());
        (&body[..end], &body[end..])
    };
    let (mut mask, mut port) = (None, None);
    let mut rest = rest;
    while !rest.is_empty() {
        let (kind, tail) = rest.split_at(1);
        let end = tail.find([':', '/']).unwrap_or(tail.len());
        let value = &tail[..end];
        match kind {
            "/" if mask.is_none() => mask = Some(value.parse::<u8>().map_err(|_| bad())?),
            ":" if port.is_none() => port = Some(ports(value).ok_or_else(bad)?),
            _ => return Err(bad()),
        }
        rest = &tail[end..];
    }
    let net = if addr == "*" {
        if mask.is_some() {
            return Err(bad());
        }
        None
    } else {
        let ip: IpAddr = addr.parse().map_err(|_| bad())?;
        let width = if ip.is_ipv4() { 32 } else { 128 };
        let bits = mask.unwrap_or(width);
        if bits > width {
            return Err(format!(
                "{s:?}: a netmask of {bits} bits is longer than the address"
            ));
        }
        Some((ip, bits))
    };
    Ok(AclRule {
        allow,
        net,
        ports: port.unwrap_or((0, u16::MAX)),
    })
}

/// `*`, `N` or `LOW-HIGH`.
fn ports(v: &str) -> Option<(u16, u16)> {
    if v == "*" {
        return Some((0, u16::MAX));
    }
    match v.split_once('-') {
        Some((lo, hi)) => {
            let (lo, hi) = (lo.parse().ok()?, hi.parse().ok()?);
            (lo <= hi).then_some((lo, hi))
        }
        None => v.parse().ok().map(|p| (p, p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn h2o_s_forms() {
        let r = rule("+127.0.0.1:8080").unwrap();
        assert!(r.allow && r.matches(to("127.0.0.1:8080")) && !r.matches(to("127.0.0.1:80")));
        let r = rule("-*").unwrap();
        assert!(!r.allow && r.matches(to("8.8.8.8:443")) && r.matches(to("[::1]:1")));
        let r = rule("+*:443").unwrap();
        assert!(r.matches(to("1.2.3.4:443")) && !r.matches(to("1.2.3.4:80")));
        let r = rule("+10.0.0.0/8:80-443").unwrap();
        assert!(r.matches(to("10.9.9.9:100")) && !r.matches(to("11.0.0.1:100")));
        assert!(!r.matches(to("10.0.0.1:444")));
        let r = rule("-192.168.0.0/24").unwrap();
        assert!(r.matches(to("192.168.0.77:1")) && !r.matches(to("192.168.1.1:1")));
        assert_eq!(
            rule("+10.0.0.0:80/8").unwrap(),
            rule("+10.0.0.0/8:80").unwrap()
        );
        let r = rule("+[::1]:443").unwrap();
        assert!(r.matches(to("[::1]:443")) && !r.matches(to("127.0.0.1:443")));
        let r = rule("+127.0.0.1").unwrap();
        assert!(r.matches(to("[::ffff:127.0.0.1]:9")));
    }

    #[test]
    fn refusals() {
        for bad in [
            "127.0.0.1",
            "+",
            "+nothost",
            "+1.2.3.4:x",
            "+1.2.3.4/33",
            "+*/8",
            "+1.2.3.4:9-1",
        ] {
            assert!(rule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn first_match_decides_and_none_denies() {
        let c = ConnectConf {
            acl: vec![rule("-127.0.0.1:1").unwrap(), rule("+127.0.0.0/8").unwrap()],
            connect_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            proxy_status: None,
        };
        assert!(!c.allows(to("127.0.0.1:1")));
        assert!(c.allows(to("127.0.0.2:1")));
        assert!(!c.allows(to("8.8.8.8:443")));
    }
}
