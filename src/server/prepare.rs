//! `prepare`: a checked [`Config`] made into what serving needs: the rustls configurations of
//! the TLS listeners (certificates and keys read), the TLS clients of `https://` backends, the
//! `user` account, the access-log formats compiled. The same step runs for `spate -t`, at start
//! and at reload, so each reports every problem as `FILE:LINE: message` before anything serves.

use super::account::Account;
use crate::config::{Config, ConfigError, HandlerConf, ListenKind, Location, UpstreamTls};
use crate::tls::client::{self, ClientOptions, ClientTls, TlsClient};
use crate::tls::Keys;
use quinn_proto::crypto::rustls::QuicServerConfig;
use rustls::RootCertStore;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The runtime objects of one configuration, used alongside it.
pub struct Prepared {
    /// Per listener of the configuration, in its order: the rustls configuration of a TLS
    /// listener over TCP (`None` for cleartext and QUIC listeners).
    pub tls: Vec<Option<Arc<rustls::ServerConfig>>>,
    /// Per listener: the TLS configuration of a QUIC listener.
    pub quic_tls: Vec<Option<Arc<QuicServerConfig>>>,
    /// The TLS client of each `https://` backend, by [`UpstreamTls::id`] (`None` only for an
    /// id no backend of the configuration has).
    pub upstream_tls: Vec<Option<TlsClient>>,
    /// `user`.
    pub user: Option<Account>,
    /// Every access-log format, compiled.
    pub access_log_formats: crate::log::Formats,
}

/// Builds the runtime objects of `config`; every problem is returned, not just the first.
pub fn prepare(config: &Config) -> Result<Prepared, Vec<ConfigError>> {
    let mut errors = Errors::default();
    let mut tls = Vec::with_capacity(config.listeners.len());
    let mut quic_tls = Vec::with_capacity(config.listeners.len());
    for l in &config.listeners {
        let (server, quic) = match &l.tls {
            Some(t) => listener_tls(config, t, l.kind == ListenKind::Quic, &mut errors),
            None => (None, None),
        };
        tls.push(server);
        quic_tls.push(quic);
    }
    let upstream_tls = upstream_tls(config, &mut errors);
    // `acme.ca-file`: read here so that a bad one is an error at its line, not a log line
    // later from the ACME thread.
    if let Some(f) = config.acme.as_ref().and_then(|a| a.ca_file.as_ref()) {
        if let Err(e) = client::load_roots(&f.path) {
            errors.push(&f.at, format!("acme.ca-file: {e}"));
        }
    }
    let user = config.user.as_ref().and_then(|u| {
        Account::find(&u.name)
            .map_err(|e| errors.push(&u.at, format!("user: {e}")))
            .ok()
    });
    let mut access_log_formats = crate::log::Formats::default();
    for log in config
        .hosts
        .iter()
        .flat_map(|h| &h.paths)
        .filter_map(|p| p.access_log.as_ref())
    {
        if let Err(e) = access_log_formats.compile(&log.format, log.escape) {
            errors.push(&log.at, format!("access-log.format: {e}"));
        }
    }
    cache_dirs(config, &mut errors);
    if !errors.0.is_empty() {
        return Err(errors.0);
    }
    Ok(Prepared {
        tls,
        quic_tls,
        upstream_tls,
        user,
        access_log_formats,
    })
}

/// Every problem once: a directive that applies to many paths is reported at its own line.
#[derive(Default)]
struct Errors(Vec<ConfigError>);

impl Errors {
    fn push(&mut self, at: &Location, message: String) {
        if !self.0.iter().any(|e| e.at == *at && e.message == message) {
            self.0.push(ConfigError {
                at: at.clone(),
                message,
            });
        }
    }
}

/// The directories of `proxy.cache.disk`: each created when missing and writable, and used
/// by one `proxy.cache` only (two stores in one directory would each count the other's
/// files as theirs).
fn cache_dirs(config: &Config, errors: &mut Errors) {
    let mut seen: HashMap<&Path, &Location> = HashMap::new();
    let caches = config
        .hosts
        .iter()
        .flat_map(|h| &h.paths)
        .flat_map(|p| p.handler.each())
        .filter_map(|h| match h {
            HandlerConf::Proxy(c) => c.cache.as_deref(),
            _ => None,
        });
    for cache in caches {
        let Some(disk) = &cache.disk else { continue };
        match seen.get(disk.path.as_path()) {
            Some(at) if **at != cache.at => {
                errors.push(
                    &disk.at,
                    format!(
                        "proxy.cache.disk.path: {} is the directory of the proxy.cache at {at} already",
                        disk.path.display(),
                    ),
                );
                continue;
            }
            Some(_) => continue,
            None => {
                seen.insert(&disk.path, &cache.at);
            }
        }
        let probe = disk.path.join(format!("tmp.{}.probe", std::process::id()));
        let usable = std::fs::create_dir_all(&disk.path)
            .and_then(|()| std::fs::write(&probe, b""))
            .and_then(|()| std::fs::remove_file(&probe));
        if let Err(e) = usable {
            errors.push(
                &disk.at,
                format!(
                    "proxy.cache.disk.path: cannot use {} as the cache's directory: {e}",
                    disk.path.display()
                ),
            );
        }
    }
}

type ListenerTls = (
    Option<Arc<rustls::ServerConfig>>,
    Option<Arc<QuicServerConfig>>,
);

/// The keys of one TLS listener read, and its rustls configuration built (also for a QUIC
/// listener, so that an unusable combination of versions and suites fails the same way).
fn listener_tls(
    config: &Config,
    t: &crate::config::TlsConf,
    quic: bool,
    errors: &mut Errors,
) -> ListenerTls {
    let keys = match Keys::load(t) {
        Ok(k) => k,
        Err(e) => {
            errors.0.extend(e);
            return (None, None);
        }
    };
    let resumption = &config.session_resumption;
    // A TCP listener's may take early data (`early-data`); a QUIC listener's is built for
    // its errors, which it must fail with alike.
    let server = if quic {
        crate::tls::server_config(t, &keys, resumption)
    } else {
        crate::tls::tcp_server_config(t, &keys, resumption)
    };
    let server = server
        .map_err(|e| errors.push(&t.at, format!("listen.ssl: {e}")))
        .ok();
    if !quic {
        return (server, None);
    }
    let quic = crate::tls::quic_server_config(t, &keys, resumption, config.http3.early_data)
        .map_err(|e| errors.push(&t.at, e))
        .ok();
    (None, quic)
}

/// The TLS client of every `https://` backend, by id (`None` where it failed).
fn upstream_tls(config: &Config, errors: &mut Errors) -> Vec<Option<TlsClient>> {
    // Each `proxy.ssl.cafile` is read once, and reported at every line that names it.
    let mut roots: HashMap<&Path, Result<Arc<RootCertStore>, String>> = HashMap::new();
    for file in &config.proxy_ca_files {
        let r = roots
            .entry(file.path.as_path())
            .or_insert_with(|| client::load_roots(&file.path).map(Arc::new));
        if let Err(e) = r {
            errors.push(&file.at, format!("proxy.ssl.cafile: {e}"));
        }
    }
    let mut system: Option<Result<Arc<RootCertStore>, String>> = None;
    let mut out: Vec<Option<TlsClient>> = Vec::new();
    let backends = config
        .hosts
        .iter()
        .flat_map(|h| &h.paths)
        .flat_map(|p| p.handler.each())
        .filter_map(|h| match h {
            HandlerConf::Proxy(c) => Some(&c.backends),
            _ => None,
        })
        .flatten();
    for b in backends {
        let (Some(t), crate::config::UpstreamAddr::Tcp { host, .. }) = (&b.tls, &b.url.addr) else {
            continue;
        };
        if out.len() <= t.id {
            out.resize(t.id + 1, None);
        }
        if out[t.id].is_some() {
            continue;
        }
        let Some(roots) = trusted_roots(t, &roots, &mut system, errors) else {
            continue;
        };
        let opts = ClientOptions {
            roots,
            session_cache: t.session_cache,
        };
        match ClientTls::new(host, &opts) {
            Ok(c) => out[t.id] = Some(TlsClient(Arc::new(c))),
            Err(e) => errors.push(&t.at, format!("proxy.reverse.url: {e}")),
        }
    }
    out
}

/// The roots a backend's certificate must chain to: `Some(None)` when `verify-peer` is OFF,
/// `None` when they could not be read (reported for a cafile already, here for the system's).
fn trusted_roots(
    t: &UpstreamTls,
    cafiles: &HashMap<&Path, Result<Arc<RootCertStore>, String>>,
    system: &mut Option<Result<Arc<RootCertStore>, String>>,
    errors: &mut Errors,
) -> Option<Option<Arc<RootCertStore>>> {
    if !t.verify_peer {
        return Some(None);
    }
    let found = match &t.cafile {
        Some(path) => cafiles.get(path.as_path())?.clone().ok()?,
        None => {
            let system = system.get_or_insert_with(|| {
                client::load_roots(Path::new(client::SYSTEM_CA_FILE)).map(Arc::new)
            });
            match system {
                Ok(r) => r.clone(),
                Err(e) => {
                    errors.push(&t.at, format!("proxy.reverse.url: the system's trusted roots (set proxy.ssl.cafile, or proxy.ssl.verify-peer: OFF): {e}"));
                    return None;
                }
            }
        }
    };
    Some(Some(found))
}

#[cfg(test)]
mod tests;
