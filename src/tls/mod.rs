//! TLS: a rustls `ServerConfig` (aws-lc-rs provider, suites tuned in `suites`) built from a
//! listener's [`TlsConf`] and the [`Keys`] its files hold: certificates chosen by SNI, ALPN, cipher suites, key exchange
//! groups, session tickets with key rotation and a session cache. The TLS stream itself is in
//! `server::tls_transport`.
//!
//! One `ServerConfig` per listener is shared by every worker: a session resumed on another
//! worker's socket must find its ticket key and cache entry. Both are touched only during a
//! handshake, never per request.
// Peer input must never panic: outside tests, no unwrap or expect here.

pub mod cert;
pub mod client;
pub mod early_data;
mod hkdf;
mod keys;
pub mod managed;
mod resolver;
mod shared_cache;
mod shared_tickets;
mod suites;
#[cfg(test)]
pub(crate) mod testcert;
mod tickets;

pub use keys::Keys;
pub use resolver::SniResolver;

use crate::config::{SessionResumption, TicketStore, TlsConf, TlsVersion};
use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache};
use rustls::ServerConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The ALPN protocols offered on a listener, most preferred first.
pub fn alpn_protocols(tls: &TlsConf) -> Vec<Vec<u8>> {
    let mut protocols = Vec::with_capacity(2);
    if tls.http2 {
        protocols.push(b"h2".to_vec());
    }
    protocols.push(b"http/1.1".to_vec());
    // TLS-ALPN-01: rustls refuses a handshake whose ALPN it does not know.
    if tls.identities.iter().any(|id| id.acme) {
        protocols.push(managed::ACME_TLS_ALPN.to_vec());
    }
    protocols
}

/// Builds the rustls server configuration of one TLS listener.
pub fn server_config(
    tls: &TlsConf,
    keys: &Keys,
    resumption: &SessionResumption,
) -> Result<Arc<ServerConfig>, String> {
    build(tls, keys, resumption).map(Arc::new)
}

/// The rustls configuration of a TCP listener: [`server_config`], and with `early-data`
/// TLS 1.3 early data (0-RTT) of at most its `early-data-max-size`, on single-use tickets
/// (the replay bound HTTP/3's 0-RTT has too). Early data needs resumption: with
/// `ssl-session-resumption: {mode: off}` none is accepted.
pub fn tcp_server_config(
    tls: &TlsConf,
    keys: &Keys,
    resumption: &SessionResumption,
) -> Result<Arc<ServerConfig>, String> {
    let max = match tls.early_data {
        Some(max) if resumption.tickets || resumption.cache => max,
        _ => return server_config(tls, keys, resumption),
    };
    let mut config = build(tls, keys, &single_use_tickets(resumption))?;
    config.max_early_data_size = max;
    // Answers to early requests go out before the client's Finished (0.5-RTT data); rustls
    // sends none to a client it asked for a certificate (`client-ca-file`).
    config.send_half_rtt_data = true;
    Ok(Arc::new(config))
}

fn build(
    tls: &TlsConf,
    keys: &Keys,
    resumption: &SessionResumption,
) -> Result<ServerConfig, String> {
    let provider = provider(tls)?;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls13, &rustls::version::TLS13),
        (TlsVersion::Tls12, &rustls::version::TLS12),
    ]
    .into_iter()
    .filter(|(v, _)| (tls.min_version..=tls.max_version).contains(v))
    .map(|(_, v)| v)
    .collect();
    let provider = Arc::new(provider);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("no usable TLS configuration: {e}"))?;
    let builder = match (&tls.client_ca, &keys.client_ca) {
        // `client-ca-file`, as in h2o: a certificate is required, and must chain to a root.
        (Some(file), Some(roots)) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.clone(),
                provider,
            )
            .build()
            .map_err(|e| format!("client-ca-file {}: {e}", file.path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let resolver = SniResolver::new(&tls.identities, &keys.identities)?;
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = alpn_protocols(tls);
    config.ignore_client_order = tls.server_cipher_preference;
    // Large records (rustls' default, the 16 KiB maximum) suit bulk transfers.
    config.max_fragment_size = None;
    if resumption.cache {
        config.session_storage = match shared_cache::shared(
            &resumption.cache_store,
            resumption.cache_size,
            resumption.lifetime,
            resumption.cache_store_timeout,
        )? {
            Some(shared) => shared,
            None => ServerSessionMemoryCache::new(resumption.cache_size),
        };
    } else {
        config.session_storage = Arc::new(NoServerSessionStorage {});
    }
    if resumption.tickets {
        config.ticketer = match &resumption.ticket_store {
            TicketStore::Internal => tickets::Rotating::new(resumption.lifetime)?,
            store => shared_tickets::shared(store, resumption.lifetime)?,
        };
    }
    // TLS 1.3 resumes only through tickets (stateless, or a cache key in stateful mode).
    if !resumption.tickets && !resumption.cache {
        config.send_tls13_tickets = 0;
    }
    Ok(config)
}

/// The TLS configuration of a QUIC listener: the same certificates, suites and groups as
/// its `ssl` mapping (QUIC is TLS 1.3 only, so the TLS 1.2 settings do not apply), ALPN
/// `h3`, and early data (0-RTT) only when `early_data`.
pub fn quic_server_config(
    tls: &TlsConf,
    keys: &Keys,
    resumption: &SessionResumption,
    early_data: bool,
) -> Result<Arc<quinn_proto::crypto::rustls::QuicServerConfig>, String> {
    let mut tls13 = tls.clone();
    tls13.min_version = TlsVersion::Tls13;
    tls13.max_version = TlsVersion::Tls13;
    let base = if early_data && (resumption.tickets || resumption.cache) {
        server_config(&tls13, keys, &single_use_tickets(resumption))?
    } else {
        server_config(&tls13, keys, resumption)?
    };
    let mut config = (*base).clone();
    config.alpn_protocols = vec![b"h3".to_vec()];
    config.max_early_data_size = if early_data { u32::MAX } else { 0 };
    let quic = quinn_proto::crypto::rustls::QuicServerConfig::try_from(config).map_err(|e| {
        format!("{e} (QUIC needs TLS_AES_128_GCM_SHA256 among cipher-suite-tls1.3)")
    })?;
    Ok(Arc::new(quic))
}

/// The resumption that bounds replays of early data: rustls accepts 0-RTT only on a
/// stateful ticket, which it `take`s from the session store, so each ticket carries early
/// data once. The store is this process's memory (not a fleet's memcached or Redis, whose
/// delete comes after another instance may have read the same ticket): a ticket resumes
/// only on the instance that issued it, and a reload starts with none.
fn single_use_tickets(resumption: &SessionResumption) -> SessionResumption {
    SessionResumption {
        tickets: false,
        cache: true,
        cache_store: crate::config::CacheStore::Internal,
        ..resumption.clone()
    }
}

/// Counts a failed or timed-out handshake (logged at debug level by the caller).
pub fn record_handshake_failure() {
    HANDSHAKE_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// Handshakes that failed or timed out since the process started.
pub fn handshake_failures() -> u64 {
    HANDSHAKE_FAILURES.load(Ordering::Relaxed)
}

static HANDSHAKE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// aws-lc-rs with the configured suites and groups, in the configured order.
fn provider(tls: &TlsConf) -> Result<CryptoProvider, String> {
    let base = aws_lc_rs::default_provider();
    let pick = |wanted: &Option<Vec<rustls::CipherSuite>>, tls13: bool| {
        let of_version = base
            .cipher_suites
            .iter()
            .filter(move |s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)) == tls13);
        match wanted {
            None => of_version.copied().collect::<Vec<_>>(),
            Some(names) => names
                .iter()
                .filter_map(|n| {
                    aws_lc_rs::ALL_CIPHER_SUITES
                        .iter()
                        .find(|s| s.suite() == *n)
                        .copied()
                })
                .collect(),
        }
    };
    let mut cipher_suites = pick(&tls.cipher_suites_tls13, true);
    cipher_suites.extend(pick(&tls.cipher_suites, false));
    // The same suites, with a faster key schedule and, on some CPUs, a faster AES-GCM.
    let cipher_suites = cipher_suites.into_iter().map(suites::tuned).collect();
    let kx_groups = match &tls.kx_groups {
        None => base.kx_groups.clone(),
        Some(names) => names
            .iter()
            .filter_map(|n| {
                aws_lc_rs::ALL_KX_GROUPS
                    .iter()
                    .find(|g| g.name() == *n)
                    .copied()
            })
            .collect(),
    };
    if kx_groups.is_empty() {
        return Err("no supported key exchange group".into());
    }
    Ok(CryptoProvider {
        cipher_suites,
        kx_groups,
        ..base
    })
}
