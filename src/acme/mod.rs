//! ACME (RFC 8555): certificates obtained and renewed for the hosts whose `ssl` names none,
//! from the CA of the global `acme` block, on a thread of their own so that nothing of it is
//! on a request's path. The certificates go to `tls::managed`, where the SNI resolver finds
//! them for new handshakes: a renewal needs no restart and drops no connection.
//!
//! Each host is a task: serve the stored certificate, order one when there is none or at two
//! thirds of its lifetime (with jitter), retry a failure with backoff while the certificate
//! in use stays.

mod issue;
mod storage;

use crate::config::{AcmeConf, Config};
use crate::tls::managed;
use base64::Engine;
use instant_acme::{Account, ExternalAccountKey, NewAccount};
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use storage::Storage;

/// The longest wait between two tries after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// One host's certificate: every name of the host; the first keys it in storage and in
/// `tls::managed`.
#[derive(Debug, Clone)]
struct Managed {
    names: Vec<String>,
}

fn managed_hosts(config: &Config) -> Vec<Managed> {
    let mut hosts: Vec<Managed> = Vec::new();
    let ids = config
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .flat_map(|t| &t.identities)
        .filter(|id| id.acme && !id.names.is_empty());
    for id in ids {
        if !hosts.iter().any(|h| h.names[0] == id.names[0]) {
            hosts.push(Managed {
                names: id.names.clone(),
            });
        }
    }
    hosts
}

/// The hosts whose certificates a thread keeps already, by name: a reload starts one for
/// the hosts it adds only.
static KEPT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Puts the stored certificates in use and starts the thread that obtains and renews them,
/// at start and at each reload for the hosts not kept yet. Does nothing without an `acme`
/// block.
pub fn start(config: &Config) {
    let Some(conf) = config.acme.clone() else {
        return;
    };
    let mut hosts = managed_hosts(config);
    {
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        hosts.retain(|h| !kept.contains(&h.names[0]));
        kept.extend(hosts.iter().map(|h| h.names[0].clone()));
    }
    if hosts.is_empty() {
        return;
    }
    if let Ok(storage) = Storage::open(&conf.storage) {
        managed::set_http01_dir(storage.http01_dir());
        for h in &hosts {
            if let Some(k) = storage.cert(&h.names[0]) {
                managed::set_cert(&h.names[0], Arc::new(k));
            }
        }
    }
    // instant-acme's HTTPS client asks rustls for the process's provider; spate builds its
    // own configurations with explicit providers, so this one is used by ACME alone.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let spawned = std::thread::Builder::new()
        .name("acme".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("acme: cannot start its runtime: {e}");
                    return;
                }
            };
            rt.block_on(run(conf, hosts));
        });
    if let Err(e) = spawned {
        tracing::error!("acme: cannot start its thread: {e}");
    }
}

async fn run(conf: AcmeConf, hosts: Vec<Managed>) {
    let conf = Arc::new(conf);
    let mut failures = 0;
    let (storage, account) = loop {
        match open(&conf).await {
            Ok(pair) => break pair,
            Err(e) => {
                failures += 1;
                let wait = backoff(failures);
                tracing::error!("acme: {e}; trying again in {} s", wait.as_secs());
                tokio::time::sleep(wait).await;
            }
        }
    };
    let storage = Arc::new(storage);
    let account = Arc::new(account);
    let mut tasks = tokio::task::JoinSet::new();
    for host in hosts {
        tasks.spawn(keep(conf.clone(), storage.clone(), account.clone(), host));
    }
    while tasks.join_next().await.is_some() {}
}

/// The storage directory and the account: the stored one, or a new one registered (and
/// stored) with the CA.
async fn open(conf: &AcmeConf) -> Result<(Storage, Account), String> {
    let storage = Storage::open(&conf.storage)?;
    let builder = || match &conf.ca_file {
        Some(f) => Account::builder_with_root(&f.path)
            .map_err(|e| format!("ca-file {}: {e}", f.path.display())),
        None => Account::builder().map_err(|e| format!("the system's roots: {e}")),
    };
    if let Some(credentials) = storage.account()? {
        let account = builder()?
            .from_credentials(credentials)
            .await
            .map_err(|e| format!("{}: {e}", conf.directory))?;
        return Ok((storage, account));
    }
    let contact = conf.email.as_ref().map(|e| format!("mailto:{e}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let eab = match &conf.eab {
        Some(eab) => {
            let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(eab.hmac_key.trim_end_matches('='))
                .map_err(|e| format!("external-account-binding.hmac-key: not base64url: {e}"))?;
            Some(ExternalAccountKey::new(eab.kid.clone(), &key))
        }
        None => None,
    };
    let (account, credentials) = builder()?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            conf.directory.clone(),
            eab.as_ref(),
        )
        .await
        .map_err(|e| format!("account at {}: {e}", conf.directory))?;
    storage.save_account(&credentials)?;
    tracing::info!(
        "acme: account {} created at {}",
        account.id(),
        conf.directory
    );
    Ok((storage, account))
}

/// One host, for ever: its certificate ordered when missing or due, retried on failure. A
/// certificate another process of the fleet stored is taken instead of ordering one.
async fn keep(conf: Arc<AcmeConf>, storage: Arc<Storage>, account: Arc<Account>, host: Managed) {
    let name = &host.names[0];
    let mut failures = 0;
    let mut waiting_logged = false;
    loop {
        adopt_stored(&storage, name);
        let due = match managed::cert(name) {
            Some(k) => due_in(&account, name, &k).await,
            None => None,
        };
        if let Some(wait) = due {
            // Woken early now and then to take a renewal another process stored.
            tokio::time::sleep(wait.min(FLEET_RECHECK)).await;
            continue;
        }
        let lock = match storage.lock(name) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                if !waiting_logged {
                    tracing::info!("acme: {name}: another process is ordering; waiting for it");
                    waiting_logged = true;
                }
                tokio::time::sleep(LOCK_POLL).await;
                continue;
            }
            Err(e) => {
                failures += 1;
                let wait = backoff(failures);
                tracing::error!("acme: {name}: {e}; trying again in {} s", wait.as_secs());
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        waiting_logged = false;
        // The lock's holder before us may have just stored one.
        if adopt_stored(&storage, name) {
            continue;
        }
        let result = obtain(&conf, &storage, &account, &host).await;
        drop(lock);
        managed::record_attempt(name, result.as_ref().map(|_| ()).map_err(String::as_str));
        match result {
            Ok(until) => {
                failures = 0;
                tracing::info!("acme: {name}: certificate issued, valid until {until}");
            }
            Err(e) => {
                failures += 1;
                let wait = backoff(failures);
                tracing::error!("acme: {name}: {e}; trying again in {} s", wait.as_secs());
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// How often a process whose certificate is not due looks for one another process stored.
const FLEET_RECHECK: Duration = Duration::from_secs(60);
/// How often a process waiting for another's order looks again.
const LOCK_POLL: Duration = Duration::from_millis(500);

/// Puts in use the stored certificate of `name` if it is not the one in use and lasts
/// longer; whether it did.
fn adopt_stored(storage: &Storage, name: &str) -> bool {
    let Some(stored) = storage.cert(name) else {
        return false;
    };
    let expiry = |k: &CertifiedKey| {
        k.end_entity_cert()
            .ok()
            .and_then(|c| crate::tls::cert::not_after(c))
    };
    let newer = match managed::cert(name) {
        Some(current) => expiry(&stored) > expiry(&current),
        None => true,
    };
    if newer {
        tracing::info!("acme: {name}: using the certificate in storage");
        managed::set_cert(name, Arc::new(stored));
    }
    newer
}

/// Orders and puts in use a certificate, and stores it; returns its `notAfter`.
async fn obtain(
    conf: &AcmeConf,
    storage: &Storage,
    account: &Account,
    host: &Managed,
) -> Result<String, String> {
    let name = &host.names[0];
    let issued = issue::issue(
        storage,
        account,
        &host.names,
        &conf.challenges,
        conf.key_type,
    )
    .await?;
    let key = certified(&issued)?;
    let until = key
        .end_entity_cert()
        .ok()
        .and_then(|c| crate::tls::cert::not_after(c))
        .map(httpdate::fmt_http_date)
        .unwrap_or_default();
    managed::set_cert(name, Arc::new(key));
    // In use even when it cannot be stored (a full disk): it is valid, and ordering again
    // would not help; the next start or renewal orders anew.
    if let Err(e) = storage.save_cert(name, &issued.chain_pem, &issued.key_pem) {
        tracing::error!("acme: {name}: the new certificate is in use but not stored: {e}");
    }
    Ok(until)
}

fn certified(issued: &issue::Issued) -> Result<CertifiedKey, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(issued.chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the CA's chain: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())
        .map_err(|e| format!("the new key: {e}"))?;
    let key = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("the new key: {e}"))?;
    Ok(CertifiedKey::new(chain, key))
}

/// How long until `key` is due for renewal: as [`renew_in`] says, or earlier at a random
/// time in the window the CA's renewal information suggests (ARI, RFC 9773; a CA moves it
/// forward to replace certificates it must revoke). `None`: due now.
async fn due_in(account: &Account, name: &str, key: &CertifiedKey) -> Option<Duration> {
    let ari = key
        .end_entity_cert()
        .ok()
        .and_then(|c| crate::tls::cert::ari_parts(c));
    let Some((aki, serial)) = ari else {
        return renew_in(key);
    };
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let id = instant_acme::CertificateIdentifier {
        authority_key_identifier: b64.encode(aki).into(),
        serial: b64.encode(serial).into(),
    };
    match account.renewal_info(&id).await {
        Ok((info, _)) => {
            let unix = |secs: i64| {
                SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
            };
            let window = &info.suggested_window;
            let (start, end) = (
                unix(window.start.unix_timestamp()),
                unix(window.end.unix_timestamp()),
            );
            let span = end.duration_since(start).unwrap_or_default();
            let at = start + span.mul_f64(random_share());
            let ari = at.duration_since(SystemTime::now()).ok();
            tracing::debug!("acme: {name}: the CA's renewal window says {ari:?}");
            Some(ari?.min(renew_in(key)?))
        }
        Err(instant_acme::Error::Unsupported(_)) => renew_in(key),
        Err(e) => {
            tracing::debug!("acme: {name}: renewal information: {e}");
            renew_in(key)
        }
    }
}

/// A random number in [0, 1].
fn random_share() -> f64 {
    let mut random = [0u8; 4];
    let _ = crate::sys::random::fill(&mut random);
    f64::from(u32::from_le_bytes(random)) / f64::from(u32::MAX)
}

/// How long until `key` is due for renewal: at two thirds of its lifetime, less a random
/// share of up to a twentieth of it so that a fleet does not renew in one second. `None`:
/// due now.
fn renew_in(key: &CertifiedKey) -> Option<Duration> {
    let leaf = key.end_entity_cert().ok()?;
    let (not_before, not_after) = crate::tls::cert::validity(leaf)?;
    let lifetime = not_after.duration_since(not_before).ok()?;
    let jitter = lifetime.mul_f64(random_share() / 20.0);
    let due = not_before + lifetime * 2 / 3 - jitter;
    due.duration_since(SystemTime::now()).ok()
}

/// 2, 4, 8 ... seconds after consecutive failures, up to an hour.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(12)).min(MAX_BACKOFF)
}
