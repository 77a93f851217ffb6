//! ACME (RFC 8555): certificates obtained and renewed for the hosts whose `ssl` names none,
//! from the CA of the global `acme` block, on a thread of their own so that nothing of it is
//! on a request's path. The certificates go to `tls::managed`, where the SNI resolver finds
//! them for new handshakes: a renewal needs no restart and drops no connection.
//!
//! Each host is a task: serve the stored certificate, order one when there is none or at two
//! thirds of its lifetime (with jitter), retry a failure with backoff while the certificate
//! in use stays.

mod issue;
pub mod on_demand;
mod storage;

use crate::config::{AcmeConf, Config};
use crate::tls::managed;
use base64::Engine;
use instant_acme::{Account, CertificateIdentifier, ExternalAccountKey, NewAccount};
use rustls::sign::CertifiedKey;
use std::sync::{Arc, Mutex, OnceLock};
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
        // Wildcard hosts are on-demand's (`on_demand`): a certificate per name.
        .filter(|id| id.acme && !id.names.is_empty() && !id.names[0].starts_with('*'));
    for id in ids {
        if !hosts.iter().any(|h| h.names[0] == id.names[0]) {
            hosts.push(Managed {
                names: id.names.clone(),
            });
        }
    }
    hosts
}

/// The names whose certificates a task keeps: a reload starts one for the hosts it adds
/// only.
static KEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The configured hosts' names: a task whose name is no longer here (nor on-demand's) stops
/// at its next check, so that a host removed by a reload is not renewed.
static WANTED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a holder panicked; the list is still whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What keeps one certificate: the `acme` block, storage, account and host.
type Kept = (Arc<AcmeConf>, Arc<Storage>, Arc<Account>, Managed);

/// The ACME thread's runtime, started at the first use: configured hosts' tasks and
/// on-demand orders run there, never on a worker.
static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();

fn runtime() -> Option<tokio::runtime::Handle> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _once = lock(&STARTING);
    if let Some(h) = RUNTIME.get() {
        return Some(h.clone());
    }
    let (tx, rx) = std::sync::mpsc::channel();
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
            let _ = tx.send(rt.handle().clone());
            rt.block_on(std::future::pending::<()>());
        });
    if let Err(e) = spawned {
        tracing::error!("acme: cannot start its thread: {e}");
        return None;
    }
    let handle = rx.recv().ok()?;
    let _ = RUNTIME.set(handle.clone());
    Some(handle)
}

/// Puts the stored certificates in use and starts the tasks that obtain and renew them, at
/// start and at each reload for the hosts not kept yet; hosts the reload removed stop being
/// renewed. Does nothing without an `acme` block.
pub fn start(config: &Config) {
    let all = managed_hosts(config);
    *lock(&WANTED) = all.iter().map(|h| h.names[0].clone()).collect();
    let Some(conf) = config.acme.clone() else {
        on_demand::configure(config, None);
        return;
    };
    let storage = Storage::open(&conf.storage).ok();
    let mut hosts = all;
    // On-demand names issued before: in use and renewed like the configured hosts.
    for name in on_demand::configure(config, storage.as_ref()) {
        hosts.push(Managed { names: vec![name] });
    }
    {
        let mut kept = lock(&KEPT);
        hosts.retain(|h| !kept.contains(&h.names[0]));
        kept.extend(hosts.iter().map(|h| h.names[0].clone()));
    }
    if let Some(storage) = &storage {
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
    if hosts.is_empty() && !on_demand::configured() {
        return;
    }
    // The runtime is started for on-demand orders even when no host is to be kept yet.
    let Some(rt) = runtime() else { return };
    if !hosts.is_empty() {
        rt.spawn(run(conf, hosts));
    }
}

/// Whether the task keeping `name` should go on: its host is still configured.
fn still_wanted(name: &str) -> bool {
    let mut kept = lock(&KEPT);
    let wanted = lock(&WANTED).iter().any(|n| n == name) || on_demand::covers(name);
    if !wanted {
        kept.retain(|n| n != name);
        on_demand::release(name);
    }
    wanted
}

/// Keeps (renews) a certificate an on-demand order just put in use.
fn keep_from_now((conf, storage, account, host): Kept) {
    let name = host.names[0].clone();
    let mut kept = lock(&KEPT);
    if !kept.contains(&name) {
        kept.push(name);
        tokio::spawn(keep(conf, storage, account, host));
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
pub(super) async fn open(conf: &AcmeConf) -> Result<(Storage, Account), String> {
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
        if !still_wanted(name) {
            tracing::info!("acme: {name}: no longer configured; not renewed");
            return;
        }
        adopt_stored(&storage, name);
        let (due, replaces) = match managed::cert(name) {
            Some(k) => due_in(&account, name, &k).await,
            None => (None, None),
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
        let result = obtain(&conf, &storage, &account, &host, replaces).await;
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

/// Orders and puts in use a certificate, and stores it; returns its `notAfter`. `replaces`:
/// the certificate a renewal replaces, told to a CA with renewal information (RFC 9773
/// §5), which may then exempt the order from its rate limits.
async fn obtain(
    conf: &AcmeConf,
    storage: &Storage,
    account: &Account,
    host: &Managed,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<String, String> {
    let name = &host.names[0];
    let issued = issue::issue(
        storage,
        account,
        &host.names,
        &conf.challenges,
        conf.key_type,
        replaces,
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

/// How long until `key` is due for renewal (`None`: due now): as [`renew_in`] says, or
/// earlier at a random time in the window the CA's renewal information suggests (ARI, RFC
/// 9773; a CA moves it forward to replace certificates it must revoke). With it, the
/// certificate's identifier for the renewal order's `replaces`, when the CA has ARI.
async fn due_in(
    account: &Account,
    name: &str,
    key: &CertifiedKey,
) -> (Option<Duration>, Option<CertificateIdentifier<'static>>) {
    let ari = key
        .end_entity_cert()
        .ok()
        .and_then(|c| crate::tls::cert::ari_parts(c));
    let Some((aki, serial)) = ari else {
        return (renew_in(key), None);
    };
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let id = CertificateIdentifier {
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
            let due = ari.and_then(|ari| Some(ari.min(renew_in(key)?)));
            (due, Some(id))
        }
        Err(instant_acme::Error::Unsupported(_)) => (renew_in(key), None),
        Err(e) => {
            tracing::debug!("acme: {name}: renewal information: {e}");
            // The CA has ARI (it answered, if with an error): the order says what it replaces.
            (renew_in(key), Some(id))
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
