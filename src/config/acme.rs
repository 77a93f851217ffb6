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
            ctx.errors.push(super::ConfigError {
                at: id.at.clone(),
                message: format!(
                    "listen.ssl with no certificate: ACME cannot obtain a certificate for \
                     {name} by http-01 or tls-alpn-01 (a wildcard needs dns-01)"
                ),
            });
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
