//! On-demand issuance (`acme.on-demand`, Caddy's `on_demand_tls`): a host named `*.DOMAIN`
//! with `ssl: {}` gets a certificate for each name under it at the name's first handshake.
//!
//! The handshake reads the ClientHello first (rustls' lazy acceptor, [`accept`]); for a name
//! a wildcard host covers and no certificate is held for, it waits (up to `timeout`) while
//! the ACME thread asks the `ask` service (`GET URL?domain=NAME`, 2xx approves) and orders.
//! Other connections go on meanwhile: only that handshake's task waits, and several
//! handshakes for one name wait for one order. Bounds, so that a flood of random names cannot
//! exhaust the CA's limits: `orders-per-minute` (a slot is taken before asking, so the asks
//! under way are bounded too), `max-certificates`, and names refused (by the ask service or a
//! failed order) are refused at once for `refused-for`. Issued certificates are stored and
//! renewed like the others (`super::keep`).
//!
//! Nothing of it runs unless `on-demand` is configured: the server asks [`configured`] (one
//! relaxed load per handshake) before taking the lazy path.

use super::storage::Storage;
use super::Managed;
use crate::config::{AcmeConf, Config, OnDemandConf};
use crate::tls::managed;
use instant_acme::Account;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};

/// What on-demand issuance needs from the configuration in use.
pub(super) struct Setup {
    pub conf: Arc<AcmeConf>,
    pub on_demand: OnDemandConf,
    /// The wildcard hosts' suffixes, `.DOMAIN`, lowercased.
    suffixes: Vec<String>,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static SETUP: RwLock<Option<Arc<Setup>>> = RwLock::new(None);

/// How long the ask service may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// The most names whose ask answer or refusal is remembered: past it, the expired ones are
/// dropped, and if none has expired, all (a flood of random names keeps no more).
const MAX_REMEMBERED: usize = 10_000;
/// The longest answer head read from the ask service.
const ASK_HEAD_MAX: usize = 8 * 1024;

/// Handshakes that got no certificate, by why: the ask service refused the name (now or
/// within `refused-for`), a bound (`orders-per-minute`, `max-certificates`), the order or
/// the ask failed or outlasted `timeout`. For the `metrics` handler.
static REFUSED_ASK: AtomicU64 = AtomicU64::new(0);
static REFUSED_BOUND: AtomicU64 = AtomicU64::new(0);
static REFUSED_FAILED: AtomicU64 = AtomicU64::new(0);

/// Handshakes refused a certificate since start: by the ask service, by a bound, by a
/// failure. `None` when on-demand is not configured.
pub fn refusals() -> Option<[(&'static str, u64); 3]> {
    configured().then(|| {
        [
            ("ask", REFUSED_ASK.load(Ordering::Relaxed)),
            ("bound", REFUSED_BOUND.load(Ordering::Relaxed)),
            ("failed", REFUSED_FAILED.load(Ordering::Relaxed)),
        ]
    })
}

/// Why a handshake gets no certificate.
enum Refused {
    Ask(String),
    Bound(String),
    Failed(String),
}

impl Refused {
    fn count(&self) {
        let counter = match self {
            Refused::Ask(_) => &REFUSED_ASK,
            Refused::Bound(_) => &REFUSED_BOUND,
            Refused::Failed(_) => &REFUSED_FAILED,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Ask(why) | Refused::Bound(why) | Refused::Failed(why) => f.write_str(why),
        }
    }
}

/// The outcome of one name's order, for every handshake waiting for it.
/// The error says whether the ask service refused the name.
type Outcome = Option<Result<(), (String, bool)>>;

#[derive(Default)]
struct State {
    /// Orders under way, by name.
    pending: HashMap<String, watch::Receiver<Outcome>>,
    /// Names the ask service approved, until when the approval is reused.
    approved: HashMap<String, Instant>,
    /// Names refused, until when, and why.
    refused: HashMap<String, (Instant, String)>,
    /// When the orders of the last minute started (the slots taken).
    orders: VecDeque<Instant>,
    /// The on-demand certificates held or under way.
    held: HashSet<String>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

/// The storage and account on-demand orders use, opened at the first.
static SESSION: tokio::sync::OnceCell<(Arc<Storage>, Arc<Account>)> =
    tokio::sync::OnceCell::const_new();

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn setup() -> Option<Arc<Setup>> {
    SETUP.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether a handshake should read the ClientHello first (see [`accept`]).
pub fn configured() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// How much longer than `handshake-timeout` a handshake may last: `on-demand.timeout`
/// (the wait for an order; [`accept`] bounds the rest).
pub fn wait_limit() -> Duration {
    setup().map_or(Duration::ZERO, |s| s.on_demand.timeout)
}

/// Takes `config`'s on-demand hosts in use (at start and at each reload); the names of
/// certificates stored for them before, to put in use and renew.
pub(super) fn configure(config: &Config, storage: Option<&Storage>) -> Vec<String> {
    let suffixes: Vec<String> = config
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .flat_map(|t| &t.identities)
        .filter(|id| id.acme)
        .flat_map(|id| &id.names)
        .filter_map(|n| n.strip_prefix('*'))
        .map(str::to_ascii_lowercase)
        .collect();
    let setup = match (&config.acme, suffixes.is_empty()) {
        (Some(conf), false) => conf.on_demand.clone().map(|on_demand| Setup {
            conf: Arc::new(conf.clone()),
            on_demand,
            suffixes,
        }),
        _ => None,
    };
    let setup = setup.map(Arc::new);
    *SETUP.write().unwrap_or_else(|e| e.into_inner()) = setup.clone();
    ENABLED.store(setup.is_some(), Ordering::Relaxed);
    let (Some(setup), Some(storage)) = (setup, storage) else {
        return Vec::new();
    };
    let stored: Vec<String> = storage
        .names()
        .into_iter()
        .filter(|n| setup.covers(n))
        .collect();
    state().held.extend(stored.iter().cloned());
    stored
}

/// A certificate no longer kept (its wildcard host was removed) leaves the count of
/// `max-certificates`.
pub(super) fn release(name: &str) {
    state().held.remove(name);
}

/// Whether `name` is one on-demand issuance is configured for.
pub(super) fn covers(name: &str) -> bool {
    setup().is_some_and(|s| s.covers(name))
}

impl Setup {
    /// A name one label under a wildcard host's domain, in DNS letters.
    fn covers(&self, name: &str) -> bool {
        self.suffixes.iter().any(|suffix| {
            name.strip_suffix(suffix.as_str()).is_some_and(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
        })
    }
}

/// A TLS handshake that reads the ClientHello first: for a name on-demand issuance covers and
/// holds no certificate for, it waits for the order before going on. A name refused (or an
/// order that fails or outlasts `timeout`) gets no certificate: the handshake then ends with
/// rustls' alert, and one log line says why.
///
/// The client's own part is bounded by `handshake_timeout` as any handshake's: only the wait
/// for an order extends it.
pub async fn accept<IO>(
    acceptor: &TlsAcceptor,
    io: IO,
    peer: std::net::SocketAddr,
    handshake_timeout: Duration,
) -> Result<TlsStream<IO>, (std::io::Error, Option<IO>)>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let started = tokio::time::Instant::now();
    let timed_out = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "not done within handshake-timeout",
        )
    };
    let mut lazy = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let start = match tokio::time::timeout_at(started + handshake_timeout, &mut lazy).await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => return Err((e, lazy.take_io())),
        Err(_) => return Err((timed_out(), lazy.take_io())),
    };
    let waiting = tokio::time::Instant::now();
    let hello = start.client_hello();
    // A TLS-ALPN-01 validation of a name being ordered is answered by the challenge
    // certificate, never waits for its own order.
    let validation = hello
        .alpn()
        .is_some_and(|mut protocols| protocols.any(|p| p == managed::ACME_TLS_ALPN));
    let name = hello
        .server_name()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase());
    if let (Some(name), false) = (name, validation) {
        if managed::cert(&name).is_none() {
            if let Some(setup) = setup().filter(|s| s.covers(&name)) {
                if let Err(why) = obtain(&setup, &name).await {
                    why.count();
                    tracing::info!(peer = %peer, "acme: on-demand {name}: no certificate: {why}");
                }
            }
        }
    }
    let deadline = started + handshake_timeout + waiting.elapsed();
    let rest = start.into_stream(acceptor.config().clone()).into_fallible();
    match tokio::time::timeout_at(deadline, rest).await {
        Ok(done) => done.map_err(|(e, io)| (e, Some(io))),
        Err(_) => Err((timed_out(), None)),
    }
}

/// Waits for `name`'s certificate: the order under way, or a new one if the bounds allow.
async fn obtain(setup: &Arc<Setup>, name: &str) -> Result<(), Refused> {
    let mut outcome = {
        let mut st = state();
        let now = Instant::now();
        match st.pending.get(name) {
            Some(rx) => rx.clone(),
            None => {
                if let Some((until, why)) = st.refused.get(name) {
                    if *until > now {
                        return Err(Refused::Ask(format!("refused: {why}")));
                    }
                }
                let od = &setup.on_demand;
                while st
                    .orders
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
                {
                    st.orders.pop_front();
                }
                if st.held.len() >= od.max_certificates as usize {
                    return Err(Refused::Bound(format!(
                        "max-certificates ({}) reached",
                        od.max_certificates
                    )));
                }
                if st.orders.len() >= od.orders_per_minute as usize {
                    return Err(Refused::Bound(format!(
                        "orders-per-minute ({}) reached",
                        od.orders_per_minute
                    )));
                }
                let Some(runtime) = super::runtime() else {
                    return Err(Refused::Failed("the ACME thread is not running".into()));
                };
                st.orders.push_back(now);
                st.held.insert(name.to_owned());
                let (tx, rx) = watch::channel(None);
                st.pending.insert(name.to_owned(), rx.clone());
                runtime.spawn(order(setup.clone(), name.to_owned(), tx));
                rx
            }
        }
    };
    let waited =
        tokio::time::timeout(setup.on_demand.timeout, outcome.wait_for(Option::is_some)).await;
    match waited {
        Ok(Ok(done)) => match done.clone() {
            Some(Ok(())) => Ok(()),
            Some(Err((why, true))) => Err(Refused::Ask(why)),
            Some(Err((why, false))) => Err(Refused::Failed(why)),
            None => Err(Refused::Failed("no outcome".into())),
        },
        Ok(Err(_)) => Err(Refused::Failed("the order was dropped".into())),
        Err(_) => Err(Refused::Failed(format!(
            "not issued within on-demand timeout ({} s); the order goes on",
            setup.on_demand.timeout.as_secs()
        ))),
    }
}

/// One on-demand name, on the ACME thread: asked, ordered, stored and then kept like a
/// configured host's.
async fn order(setup: Arc<Setup>, name: String, tx: watch::Sender<Outcome>) {
    let result = ask_and_order(&setup, &name).await;
    {
        let mut st = state();
        st.pending.remove(&name);
        if let Err(e) = &result {
            st.held.remove(&name);
            if !e.ordered {
                // Not ordered after all: the slot goes back.
                st.orders.pop_back();
            }
            if e.remember {
                remember(&mut st.refused);
                st.refused.insert(
                    name.clone(),
                    (Instant::now() + setup.on_demand.refused_for, e.why.clone()),
                );
            }
        }
    }
    match &result {
        Ok(kept) => super::keep_from_now(kept.clone()),
        Err(e) => tracing::warn!("acme: on-demand {name}: {}", e.why),
    }
    let _ = tx.send(Some(result.map(|_| ()).map_err(|e| (e.why, e.by_ask))));
}

/// Why a name got no certificate: whether an order was made (its slot stays taken) and
/// whether the name is refused for `refused-for`.
struct Refusal {
    why: String,
    /// The ask service said no.
    by_ask: bool,
    ordered: bool,
    remember: bool,
}

/// The certificate in use, issued or taken from storage: what keeps it.
async fn ask_and_order(setup: &Setup, name: &str) -> Result<super::Kept, Refusal> {
    let approved = {
        let st = state();
        st.approved
            .get(name)
            .is_some_and(|until| *until > Instant::now())
    };
    if !approved {
        match ask(&setup.on_demand.ask, name).await {
            Ok(true) => {
                let mut st = state();
                remember(&mut st.approved);
                st.approved
                    .insert(name.to_owned(), Instant::now() + setup.on_demand.ask_cache);
            }
            Ok(false) => {
                return Err(Refusal {
                    why: "the ask service refused it".into(),
                    by_ask: true,
                    ordered: false,
                    remember: true,
                })
            }
            Err(e) => {
                return Err(Refusal {
                    why: format!("the ask service: {e}"),
                    by_ask: false,
                    ordered: false,
                    remember: false,
                })
            }
        }
    }
    let conf = setup.conf.clone();
    let session = SESSION.get_or_try_init(|| async {
        let (storage, account) = super::open(&conf).await?;
        Ok::<_, String>((Arc::new(storage), Arc::new(account)))
    });
    let (storage, account) = session.await.cloned().map_err(|why| Refusal {
        why,
        by_ask: false,
        ordered: false,
        remember: false,
    })?;
    let host = Managed {
        names: vec![name.to_owned()],
    };
    let kept = (conf.clone(), storage.clone(), account.clone(), host.clone());
    // Another process of the fleet may hold it, or be ordering it.
    let deadline = Instant::now() + setup.on_demand.timeout;
    let lock = loop {
        if super::adopt_stored(&storage, name) {
            return Ok(kept);
        }
        match storage.lock(name) {
            Ok(Some(lock)) => break lock,
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(super::LOCK_POLL).await,
            Ok(None) => {
                return Err(Refusal {
                    why: "another process is ordering it".into(),
                    by_ask: false,
                    ordered: false,
                    remember: false,
                })
            }
            Err(why) => {
                return Err(Refusal {
                    why,
                    by_ask: false,
                    ordered: false,
                    remember: false,
                })
            }
        }
    };
    if super::adopt_stored(&storage, name) {
        return Ok(kept);
    }
    let result = super::obtain(&conf, &storage, &account, &host, None).await;
    drop(lock);
    managed::record_attempt(name, result.as_ref().map(|_| ()).map_err(String::as_str));
    match result {
        Ok(until) => {
            tracing::info!("acme: {name}: certificate issued, valid until {until}");
            Ok(kept)
        }
        Err(why) => Err(Refusal {
            why,
            by_ask: false,
            ordered: true,
            remember: true,
        }),
    }
}

/// Makes room in a map of names with their expiry (see [`MAX_REMEMBERED`]).
fn remember<V>(map: &mut HashMap<String, V>)
where
    V: Expires,
{
    if map.len() < MAX_REMEMBERED {
        return;
    }
    let now = Instant::now();
    map.retain(|_, v| v.until() > now);
    if map.len() >= MAX_REMEMBERED {
        map.clear();
    }
}

trait Expires {
    fn until(&self) -> Instant;
}

impl Expires for Instant {
    fn until(&self) -> Instant {
        *self
    }
}

impl Expires for (Instant, String) {
    fn until(&self) -> Instant {
        self.0
    }
}

/// `GET ASK?domain=NAME` over HTTP/1.1: `Ok(true)` for a 2xx answer, `Ok(false)` for any
/// other, `Err` when the service cannot be reached or answers no HTTP.
async fn ask(url: &str, name: &str) -> Result<bool, String> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let path = if path.is_empty() { "/" } else { path };
    let separator = if path.contains('?') { '&' } else { '?' };
    let address = if authority.contains(':') && !authority.ends_with(']') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(&address)
            .await
            .map_err(|e| format!("{address}: {e}"))?;
        let request = format!(
            "GET {path}{separator}domain={name} HTTP/1.1\r\nHost: {authority}\r\n\
             User-Agent: spate\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("{address}: {e}"))?;
        let mut head = Vec::with_capacity(256);
        let mut buf = [0u8; 1024];
        while !head.contains(&b'\n') && head.len() < ASK_HEAD_MAX {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|e| format!("{address}: {e}"))?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
        let status = std::str::from_utf8(line)
            .ok()
            .filter(|l| l.starts_with("HTTP/1."))
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.trim().parse::<u16>().ok())
            .ok_or_else(|| format!("{address}: not an HTTP answer"))?;
        Ok((200..300).contains(&status))
    };
    tokio::time::timeout(ASK_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{address}: no answer within {} s", ASK_TIMEOUT.as_secs()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_one_dns_label_under_the_wildcard() {
        let setup = Setup {
            conf: Arc::new(AcmeConf {
                email: None,
                directory: String::new(),
                storage: "/nonexistent".into(),
                key_type: crate::config::AcmeKeyType::EcdsaP256,
                challenges: Vec::new(),
                ca_file: None,
                eab: None,
                on_demand: None,
                at: crate::config::Location {
                    file: Arc::from("t"),
                    line: 1,
                },
            }),
            on_demand: OnDemandConf {
                ask: "http://127.0.0.1:1/".into(),
                orders_per_minute: 1,
                max_certificates: 1,
                timeout: Duration::from_secs(1),
                ask_cache: Duration::from_secs(1),
                refused_for: Duration::from_secs(1),
                at: crate::config::Location {
                    file: Arc::from("t"),
                    line: 1,
                },
            },
            suffixes: vec![".example.test".into()],
        };
        assert!(setup.covers("a.example.test"));
        assert!(setup.covers("a-1.example.test"));
        assert!(!setup.covers("example.test"));
        assert!(!setup.covers(".example.test"));
        assert!(!setup.covers("a.b.example.test"));
        assert!(!setup.covers("a_b.example.test"));
        assert!(!setup.covers("a.example.test.other"));
    }

    /// The ask service's answer: 2xx approves, anything else refuses, no service is an error.
    #[test]
    fn ask_reads_the_status() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let port = listener
                .local_addr()
                .unwrap_or_else(|e| panic!("{e}"))
                .port();
            let server = tokio::spawn(async move {
                let mut seen = Vec::new();
                for status in ["204 No Content", "403 Forbidden"] {
                    let (mut s, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
                    let mut buf = vec![0u8; 1024];
                    let n = s.read(&mut buf).await.unwrap_or_else(|e| panic!("{e}"));
                    seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                    let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                    let _ = s.write_all(answer.as_bytes()).await;
                }
                seen
            });
            let url = format!("http://127.0.0.1:{port}/check?x=1");
            assert_eq!(ask(&url, "a.example.test").await, Ok(true));
            assert_eq!(ask(&url, "b.example.test").await, Ok(false));
            let seen = server.await.unwrap_or_else(|e| panic!("{e}"));
            assert!(
                seen[0].starts_with("GET /check?x=1&domain=a.example.test HTTP/1.1\r\n"),
                "{seen:?}"
            );
            drop(seen);
            assert!(ask(&url, "c.example.test").await.is_err());
        });
    }
}
