//! Certificates ACME manages and the answers to its challenges under way, shared by the
//! whole process: the ACME tasks put them here, the SNI resolver reads them for new
//! handshakes (a renewed certificate is used from the next handshake on, no restart) and the
//! HTTP-01 handler reads the tokens. Touched only in handshakes of ACME hosts and by the
//! challenge path, never per request; a configuration without `acme` never looks here.

use rustls::sign::CertifiedKey;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::SystemTime;

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737): such a handshake gets the challenge
/// certificate, and the connection ends after it.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

#[derive(Default)]
struct Managed {
    /// Issued certificates by the lowercased name of the host they were ordered for.
    certs: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// TLS-ALPN-01 challenge certificates by name.
    alpn: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// HTTP-01 key authorizations by token.
    http01: RwLock<HashMap<String, String>>,
    /// The `storage` directory's `http-01/`, where the processes of a fleet put their
    /// tokens: a token another process ordered is read from there.
    http01_dir: RwLock<Option<PathBuf>>,
    /// What the `status` and `metrics` handlers show, by name.
    status: RwLock<BTreeMap<String, CertStatus>>,
}

/// One ACME certificate as the status pages show it.
#[derive(Debug, Clone, Default)]
pub struct CertStatus {
    /// The `notAfter` of the certificate in use.
    pub not_after: Option<SystemTime>,
    /// When an order last ended, and how.
    pub last_attempt: Option<SystemTime>,
    /// The last order's error (`None`: it succeeded, or none ended yet).
    pub last_error: Option<String>,
    pub issued: u64,
    pub failed: u64,
}

static MANAGED: LazyLock<Managed> = LazyLock::new(Managed::default);

fn get<V: Clone>(map: &RwLock<HashMap<String, V>>, key: &str) -> Option<V> {
    // A poisoned lock only means a writer panicked mid-insert; the map is still whole.
    let map = map.read().unwrap_or_else(|e| e.into_inner());
    map.get(key).cloned()
}

fn put<V>(map: &RwLock<HashMap<String, V>>, key: &str, value: Option<V>) {
    let mut map = map.write().unwrap_or_else(|e| e.into_inner());
    match value {
        Some(v) => map.insert(key.to_owned(), v),
        None => map.remove(key),
    };
}

/// The certificate in use for the host `name`.
pub fn cert(name: &str) -> Option<Arc<CertifiedKey>> {
    get(&MANAGED.certs, name)
}

/// Puts a new certificate in use for `name`, for handshakes from now on.
pub fn set_cert(name: &str, key: Arc<CertifiedKey>) {
    let not_after = key
        .end_entity_cert()
        .ok()
        .and_then(|c| super::cert::not_after(c));
    put(&MANAGED.certs, name, Some(key));
    let mut status = MANAGED.status.write().unwrap_or_else(|e| e.into_inner());
    status.entry(name.to_owned()).or_default().not_after = not_after;
}

/// Records how an order for `name` ended.
pub fn record_attempt(name: &str, result: Result<(), &str>) {
    let mut status = MANAGED.status.write().unwrap_or_else(|e| e.into_inner());
    let s = status.entry(name.to_owned()).or_default();
    s.last_attempt = Some(SystemTime::now());
    match result {
        Ok(()) => {
            s.issued += 1;
            s.last_error = None;
        }
        Err(e) => {
            s.failed += 1;
            s.last_error = Some(e.to_owned());
        }
    }
}

/// Every ACME certificate's status, by name (empty without `acme`).
pub fn status() -> Vec<(String, CertStatus)> {
    let status = MANAGED.status.read().unwrap_or_else(|e| e.into_inner());
    status.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The TLS-ALPN-01 certificate for `name` while its challenge is under way.
pub fn alpn_challenge(name: &str) -> Option<Arc<CertifiedKey>> {
    get(&MANAGED.alpn, &name.to_ascii_lowercase())
}

pub fn set_alpn_challenge(name: &str, key: Option<Arc<CertifiedKey>>) {
    put(&MANAGED.alpn, &name.to_ascii_lowercase(), key);
}

/// The HTTP-01 key authorization of `token` while its challenge is under way, ordered by
/// this process or by another that shares the storage.
pub fn http01(token: &str) -> Option<String> {
    if let Some(k) = get(&MANAGED.http01, token) {
        return Some(k);
    }
    // Tokens are base64url (RFC 8555 §8.3): no path can be made of one.
    if token.is_empty()
        || !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    let dir = MANAGED
        .http01_dir
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()?;
    std::fs::read_to_string(dir.join(token)).ok()
}

/// Where the tokens of a shared storage are (see [`http01`]).
pub fn set_http01_dir(dir: PathBuf) {
    *MANAGED
        .http01_dir
        .write()
        .unwrap_or_else(|e| e.into_inner()) = Some(dir);
}

pub fn set_http01(token: &str, key_authorization: Option<String>) {
    put(&MANAGED.http01, token, key_authorization);
}
