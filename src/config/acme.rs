//! The global `acme` block: certificates obtained and renewed from an ACME CA (RFC 8555) for
//! every host whose `listen` has an `ssl` mapping with no certificate (h2o's syntax:
//! `acme: {email: ..., accept-tos: YES}` and `ssl: {}`).
//!
//! spate's additions in the same block: `directory` (the CA; Let's Encrypt by default,
//! `staging` by name), `storage`, `key-type`, `challenges`, `ca-file` and
//! `external-account-binding`.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{Config, HandlerConf, ListenKind, Location, PathAt, PathConf};
use std::path::PathBuf;

/// Let's Encrypt's production directory: the default `directory`.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// Let's Encrypt's staging directory: `directory: staging`.
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";
/// The path under which HTTP-01 tokens are fetched (RFC 8555 §8.3), without a trailing slash.
pub const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge";
/// Where certificates and the account live when `storage` is not given.
pub const DEFAULT_STORAGE: &str = "/var/lib/spate/acme";

/// `acme`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeConf {
    /// `email`: the account's contact (`mailto:`), for the CA's expiry notices.
    pub email: Option<String>,
    /// `directory`: the ACME directory URL.
    pub directory: String,
    /// `storage`: a directory for the account key, the certificates and their keys.
    pub storage: PathBuf,
    /// `key-type`: the key of each certificate.
    pub key_type: AcmeKeyType,
    /// `challenges`: the challenge types offered to the CA, preferred first.
    pub challenges: Vec<AcmeChallenge>,
    /// `ca-file`: roots to trust for the ACME server's own TLS (a private CA); `None`: the
    /// system's roots.
    pub ca_file: Option<PathAt>,
    /// `external-account-binding: {kid, hmac-key}` for CAs that need one.
    pub eab: Option<Eab>,
    /// `on-demand`: wildcard hosts with `ssl: {}` get a certificate per name at its first
    /// handshake.
    pub on_demand: Option<OnDemandConf>,
    pub at: Location,
}

/// `acme.on-demand` (Caddy's `on_demand_tls`): what a name must pass before it is ordered,
/// and the bounds that keep a flood of random names from exhausting the CA's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDemandConf {
    /// `ask`: an `http://` URL; `GET URL?domain=NAME` answering 2xx approves NAME.
    pub ask: String,
    /// `orders-per-minute`: new orders started in any 60 seconds.
    pub orders_per_minute: u32,
    /// `max-certificates`: on-demand certificates held (stored and under way) at most.
    pub max_certificates: u32,
    /// `timeout`: how long a handshake waits for its name's certificate (the order goes on
    /// after it gives up, for the next handshake).
    pub timeout: std::time::Duration,
    /// `ask-cache`: how long the ask service's approval of a name is reused.
    pub ask_cache: std::time::Duration,
    /// `refused-for`: how long a name the ask service refused, or whose order failed, is
    /// refused at once without asking or ordering again.
    pub refused_for: std::time::Duration,
    pub at: Location,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeKeyType {
    EcdsaP256,
    Rsa2048,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// `http-01`: a token under `/.well-known/acme-challenge/` on port 80.
    Http01,
    /// `tls-alpn-01`: a certificate in the handshake of ALPN `acme-tls/1` on port 443.
    TlsAlpn01,
}

impl AcmeChallenge {
    pub fn name(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// An external account binding (RFC 8555 §7.3.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eab {
    pub kid: String,
    /// The MAC key, base64url as CAs hand it out.
    pub hmac_key: String,
}

const KEYS: &[&str] = &[
    "email",
    "accept-tos",
    "directory",
    "storage",
    "key-type",
    "challenges",
    "ca-file",
    "external-account-binding",
    "on-demand",
];

const ON_DEMAND_KEYS: &[&str] = &[
    "ask",
    "orders-per-minute",
    "max-certificates",
    "timeout",
    "ask-cache",
    "refused-for",
];

/// Reads the `acme` mapping.
pub(super) fn parse(ctx: &mut Ctx, v: &Node) -> Option<AcmeConf> {
    let entries = ctx.map("acme", v)?;
    let before = ctx.errors.len();
    let mut c = AcmeConf {
        email: None,
        directory: LETS_ENCRYPT.into(),
        storage: PathBuf::from(DEFAULT_STORAGE),
        key_type: AcmeKeyType::EcdsaP256,
        challenges: vec![AcmeChallenge::Http01, AcmeChallenge::TlsAlpn01],
        ca_file: None,
        eab: None,
        on_demand: None,
        at: ctx.at(v.line),
    };
    let mut accept_tos = false;
    for (key, val) in ctx.known_keys("acme", entries, KEYS) {
        let name = format!("acme.{key}");
        match key {
            "email" => match ctx.string(&name, val) {
                Some(s) if s.contains('@') && !s.bytes().any(|b| b.is_ascii_control()) => {
                    c.email = Some(s)
                }
                Some(s) => ctx.error(val.line, format!("{name} expects an address, got {s}")),
                None => {}
            },
            "accept-tos" => accept_tos = ctx.bool(&name, val).unwrap_or(true),
            "directory" => match ctx.string(&name, val).as_deref() {
                Some("staging") => c.directory = LETS_ENCRYPT_STAGING.into(),
                Some("production" | "letsencrypt") => c.directory = LETS_ENCRYPT.into(),
                Some(url) if url.starts_with("https://") => c.directory = url.into(),
                Some(other) => ctx.error(
                    val.line,
                    format!("{name} expects an https:// URL, staging or production, got {other}"),
                ),
                None => {}
            },
            "storage" => {
                if let Some(p) = ctx.path(&name, val) {
                    c.storage = p;
                }
            }
            "key-type" => match val.as_str() {
                Some("ecdsa-p256" | "ecdsa") => c.key_type = AcmeKeyType::EcdsaP256,
                Some("rsa2048" | "rsa") => c.key_type = AcmeKeyType::Rsa2048,
                _ => ctx.error(
                    val.line,
                    format!("{name} expects ecdsa-p256 or rsa2048, got {}", show(val)),
                ),
            },
            "challenges" => {
                if let Some(list) = challenges(ctx, &name, val) {
                    c.challenges = list;
                }
            }
            "ca-file" => c.ca_file = ctx.path_at(&name, val),
            "external-account-binding" => c.eab = eab(ctx, &name, val),
            "on-demand" => c.on_demand = on_demand(ctx, &name, val),
            _ => ctx.error(val.line, format!("{name} is not supported yet")),
        }
    }
    if !accept_tos {
        ctx.error(
            v.line,
            "acme: accept-tos: YES is required (it agrees to the CA's terms of service)",
        );
    }
    (ctx.errors.len() == before).then_some(c)
}

fn challenges(ctx: &mut Ctx, name: &str, v: &Node) -> Option<Vec<AcmeChallenge>> {
    let mut out = Vec::new();
    for s in ctx.strings(name, v)? {
        let c = match s.as_str() {
            "http-01" => AcmeChallenge::Http01,
            "tls-alpn-01" => AcmeChallenge::TlsAlpn01,
            other => {
                ctx.error(
                    v.line,
                    format!("{name} expects http-01 or tls-alpn-01, got {other}"),
                );
                return None;
            }
        };
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Some(out)
}

fn eab(ctx: &mut Ctx, name: &str, v: &Node) -> Option<Eab> {
    let entries = ctx.map(name, v)?;
    let (mut kid, mut hmac_key) = (None, None);
    for (key, val) in ctx.known_keys(name, entries, &["kid", "hmac-key"]) {
        match key {
            "kid" => kid = ctx.string(&format!("{name}.kid"), val),
            _ => hmac_key = ctx.string(&format!("{name}.hmac-key"), val),
        }
    }
    match (kid, hmac_key) {
        (Some(kid), Some(hmac_key)) => Some(Eab { kid, hmac_key }),
        _ => {
            ctx.error(v.line, format!("{name} needs both kid and hmac-key"));
            None
        }
    }
}

fn on_demand(ctx: &mut Ctx, name: &str, v: &Node) -> Option<OnDemandConf> {
    let entries = ctx.map(name, v)?;
    let before = ctx.errors.len();
    let mut c = OnDemandConf {
        ask: String::new(),
        orders_per_minute: 10,
        max_certificates: 100,
        timeout: std::time::Duration::from_secs(30),
        ask_cache: std::time::Duration::from_secs(60),
        refused_for: std::time::Duration::from_secs(600),
        at: ctx.at(v.line),
    };
    for (key, val) in ctx.known_keys(name, entries, ON_DEMAND_KEYS) {
        let full = format!("{name}.{key}");
        match key {
            "ask" => match ctx.string(&full, val) {
                Some(url) if ask_url_ok(&url) => c.ask = url,
                Some(url) => ctx.error(
                    val.line,
                    format!("{full} expects an http://HOST:PORT/PATH URL, got {url}"),
                ),
                None => {}
            },
            "orders-per-minute" => {
                if let Some(n) = ctx.int(&full, val, 1) {
                    c.orders_per_minute = n;
                }
            }
            "max-certificates" => {
                if let Some(n) = ctx.int(&full, val, 1) {
                    c.max_certificates = n;
                }
            }
            "timeout" => match ctx.seconds(&full, val) {
                Some(d) if !d.is_zero() => c.timeout = d,
                Some(_) => ctx.error(val.line, format!("{full} expects seconds >= 1, got 0")),
                None => {}
            },
            "ask-cache" => {
                if let Some(d) = ctx.seconds(&full, val) {
                    c.ask_cache = d;
                }
            }
            _ => {
                if let Some(d) = ctx.seconds(&full, val) {
                    c.refused_for = d;
                }
            }
        }
    }
    if c.ask.is_empty() && ctx.errors.len() == before {
        ctx.error(
            v.line,
            format!("{name} needs ask: the URL that approves each name before it is ordered"),
        );
    }
    (ctx.errors.len() == before).then_some(c)
}

/// `http://` with a host and no fragment: the ask service is asked with a plain GET.
fn ask_url_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    !authority.is_empty()
        && !url.contains('#')
        && !url
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
}

/// The checks that need the whole configuration: an `ssl` mapping with no certificate needs
/// the `acme` block and a host name; `http-01` alone needs a cleartext listener to answer on.
/// With `http-01`, every host gets the path that answers its tokens, ahead of its own paths.
/// `given`: an `acme` block was written (if it had errors, they are reported already).
pub(super) fn check(ctx: &mut Ctx, c: &mut Config, given: bool) {
    let managed = c
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .flat_map(|t| &t.identities)
        .filter(|id| id.acme);
    let mut any = false;
    for id in managed {
        any = true;
        if c.acme.is_none() && !given {
            ctx.errors.push(super::ConfigError {
                at: id.at.clone(),
                message: "listen.ssl: certificate-file and key-file are required \
                          (or a global acme block, which obtains the certificate)"
                    .into(),
            });
        } else if let Some(name) = id.names.iter().find(|n| n.starts_with('*')) {
            // An `acme` block with errors (said already) may have meant on-demand.
            let on_demand = c.acme.as_ref().map_or(given, |a| a.on_demand.is_some());
            if !on_demand {
                ctx.errors.push(super::ConfigError {
                    at: id.at.clone(),
                    message: format!(
                        "listen.ssl with no certificate: ACME cannot obtain a certificate for \
                         {name} by http-01 or tls-alpn-01 (a wildcard needs dns-01); \
                         acme.on-demand obtains one per name at its first handshake"
                    ),
                });
            } else if !name.starts_with("*.") || id.names.iter().any(|n| !n.starts_with("*.")) {
                ctx.errors.push(super::ConfigError {
                    at: id.at.clone(),
                    message: format!(
                        "listen.ssl with no certificate: acme.on-demand covers hosts named \
                         *.DOMAIN only, got {}",
                        id.names.join(", ")
                    ),
                });
            }
        } else if id.names.is_empty() {
            ctx.errors.push(super::ConfigError {
                at: id.at.clone(),
                message: "listen.ssl with no certificate: ACME needs the host's name; \
                          give this listen under a host"
                    .into(),
            });
        }
    }
    let Some(acme) = &c.acme else { return };
    if !any {
        ctx.warnings.push(super::ConfigError {
            at: acme.at.clone(),
            message: "acme: no host has a listen with ssl and no certificate, so none is \
                      obtained"
                .into(),
        });
        return;
    }
    let cleartext = c
        .listeners
        .iter()
        .any(|l| l.tls.is_none() && l.kind == ListenKind::Tcp);
    if acme.challenges == [AcmeChallenge::Http01] && !cleartext {
        ctx.errors.push(super::ConfigError {
            at: acme.at.clone(),
            message: "acme: challenge http-01 is answered on a listener without ssl \
                      (port 80), and there is none"
                .into(),
        });
    }
    if acme.challenges.contains(&AcmeChallenge::Http01) {
        let at = acme.at.clone();
        for host in &mut c.hosts {
            host.paths.push(PathConf {
                prefix: ACME_CHALLENGE_PREFIX.into(),
                handler: HandlerConf::AcmeChallenge,
                headers: Vec::new(),
                early_headers: Vec::new(),
                expires: None,
                error_docs: Vec::new(),
                access_log: None,
                server_timing: super::ServerTiming::Off,
                emit_request_errors: None,
                throttle_response: false,
                compress: None,
                edge: None,
                at: at.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{load_str, AcmeChallenge, AcmeKeyType, HandlerConf};

    fn errors(text: &str) -> Vec<String> {
        match load_str(text, "t.yaml") {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    const HOST: &str = "
listen: 80
hosts:
  a.example:
    listen: {port: 443, ssl: {}}
    paths:
      /: {respond: {body: hi}}
";

    #[test]
    fn h2o_example_and_spate_additions() {
        let text = format!(
            "acme: {{email: me@a.example, accept-tos: YES, directory: staging, storage: s,\n  key-type: rsa2048, challenges: [tls-alpn-01, http-01]}}{HOST}"
        );
        let c = load_str(&text, "/etc/spate/t.yaml").unwrap_or_else(|e| panic!("{e:?}"));
        let acme = c.acme.as_ref().unwrap_or_else(|| panic!("no acme"));
        assert_eq!(acme.directory, super::LETS_ENCRYPT_STAGING);
        assert_eq!(acme.storage, std::path::Path::new("/etc/spate/s"));
        assert_eq!(acme.key_type, AcmeKeyType::Rsa2048);
        assert_eq!(
            acme.challenges,
            [AcmeChallenge::TlsAlpn01, AcmeChallenge::Http01]
        );
        let tls = c.listeners.iter().find_map(|l| l.tls.as_ref());
        let id = &tls.unwrap_or_else(|| panic!("no tls")).identities[0];
        assert!(id.acme && id.keys.is_empty());
        assert_eq!(id.names, ["a.example"]);
        // The HTTP-01 path is added to the host.
        assert!(c.hosts[0]
            .paths
            .iter()
            .any(|p| matches!(p.handler, HandlerConf::AcmeChallenge)
                && p.prefix == super::ACME_CHALLENGE_PREFIX));
    }

    const WILDCARD: &str = "
listen: 80
hosts:
  \"*.a.example\":
    listen: {port: 443, ssl: {}}
    paths:
      /: {respond: {body: hi}}
";

    #[test]
    fn on_demand_for_a_wildcard_host() {
        let text = format!(
            "acme:\n  accept-tos: YES\n  on-demand: {{ask: 'http://127.0.0.1:9/ok?x=1', orders-per-minute: 3, max-certificates: 7, timeout: 5, ask-cache: 2, refused-for: 9}}{WILDCARD}"
        );
        let c = load_str(&text, "t.yaml").unwrap_or_else(|e| panic!("{e:?}"));
        let od = c
            .acme
            .as_ref()
            .and_then(|a| a.on_demand.as_ref())
            .unwrap_or_else(|| panic!("no on-demand"));
        assert_eq!(od.ask, "http://127.0.0.1:9/ok?x=1");
        assert_eq!((od.orders_per_minute, od.max_certificates), (3, 7));
        assert_eq!(od.timeout, std::time::Duration::from_secs(5));
        assert_eq!(od.ask_cache, std::time::Duration::from_secs(2));
        assert_eq!(od.refused_for, std::time::Duration::from_secs(9));
        // Without on-demand, a wildcard host cannot be ordered for.
        let e = errors(&format!("acme: {{accept-tos: YES}}{WILDCARD}"));
        assert!(
            e[0].starts_with("t.yaml:5: listen.ssl with no certificate: ACME cannot obtain")
                && e[0].contains("acme.on-demand"),
            "{e:?}"
        );
        let e = errors(&format!(
            "acme: {{accept-tos: YES, on-demand: {{orders-per-minute: 0}}}}{WILDCARD}"
        ));
        assert_eq!(
            e,
            ["t.yaml:1: acme.on-demand.orders-per-minute expects an integer >= 1, got \"0\""]
        );
        let e = errors(&format!(
            "acme: {{accept-tos: YES, on-demand: {{max-certificates: 2}}}}{WILDCARD}"
        ));
        assert_eq!(
            e,
            ["t.yaml:1: acme.on-demand needs ask: the URL that approves each name before it is ordered"]
        );
        let e = errors(&format!(
            "acme: {{accept-tos: YES, on-demand: {{ask: 'https://x/'}}}}{WILDCARD}"
        ));
        assert_eq!(
            e,
            ["t.yaml:1: acme.on-demand.ask expects an http://HOST:PORT/PATH URL, got https://x/"]
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e = errors(&format!("acme: {{email: me@a.example}}{HOST}"));
        assert_eq!(
            e,
            ["t.yaml:1: acme: accept-tos: YES is required (it agrees to the CA's terms of service)"]
        );
        let e = errors(HOST);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("t.yaml:5: listen.ssl: certificate-file and key-file are required"),
            "{e:?}"
        );
        let e = errors("acme: {accept-tos: YES}\nlisten: {port: 443, ssl: {}}\nhosts:\n  a.example:\n    paths:\n      /: {respond: {body: hi}}\n");
        assert!(
            e[0].starts_with(
                "t.yaml:2: listen.ssl with no certificate: ACME needs the host's name"
            ),
            "{e:?}"
        );
        let e = errors(&format!(
            "acme: {{accept-tos: YES, challenges: http-01}}{}",
            HOST.replace("listen: 80\n", "")
        ));
        assert!(
            e[0].starts_with(
                "t.yaml:1: acme: challenge http-01 is answered on a listener without ssl"
            ),
            "{e:?}"
        );
        let e = errors(&format!(
            "acme: {{accept-tos: YES, key-type: dsa, directory: http://x}}{HOST}"
        ));
        assert_eq!(e.len(), 2, "{e:?}");
    }
}
