//! A listener's `ssl` mapping and the global TLS directives (`handshake-timeout`,
//! `ssl-session-resumption`, `neverbleed`), read into typed settings.
//!
//! Certificate, key, OCSP and CA files stay paths with the line that names them; the server's
//! `prepare` step reads them, so that a missing, unreadable, mismatched or expired one is an
//! error with `file:line` at `spate -t`, at start and at reload alike.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{Location, PathAt};
use rustls::{CipherSuite, NamedGroup};
use std::path::PathBuf;
use std::time::Duration;

/// One TLS listener: its certificates (one per host that listens on it with its own `ssl`)
/// and the handshake settings, which are per listener.
#[derive(Debug, Clone)]
pub struct TlsConf {
    /// In configuration order; the first is served to clients whose SNI matches no host.
    pub identities: Vec<Identity>,
    /// `min-version` (default TLSv1.2).
    pub min_version: TlsVersion,
    /// `max-version` (default TLSv1.3).
    pub max_version: TlsVersion,
    /// `cipher-suite`: TLS 1.2 suites in preference order; `None` for rustls' defaults.
    pub cipher_suites: Option<Vec<CipherSuite>>,
    /// `cipher-suite-tls1.3`; `None` for rustls' defaults.
    pub cipher_suites_tls13: Option<Vec<CipherSuite>>,
    /// `ecdh-curves` / `key-exchange-tls1.3`, supported groups only; `None` for the defaults.
    pub kx_groups: Option<Vec<NamedGroup>>,
    /// `cipher-preference: server`: the server's suite order wins (default: the client's).
    pub server_cipher_preference: bool,
    /// `http2` (spate, default ON): offer `h2` in ALPN on this listener.
    pub http2: bool,
    /// `early-data` (spate, default OFF): accept TLS 1.3 early data (0-RTT) on this TCP
    /// listener, at most this many bytes per connection (`early-data-max-size`); `None` when
    /// off. HTTP/3 has its own switch, `http3-0rtt`.
    pub early_data: Option<u32>,
    /// `ocsp-update-interval` (seconds): accepted; the response comes from
    /// `ocsp-response-file`, read when the configuration is prepared.
    pub ocsp_update_interval: Duration,
    /// `ocsp-max-failures`: accepted for compatibility.
    pub ocsp_max_failures: u32,
    /// `client-ca-file`: clients must present a certificate issued by one of its roots
    /// (listeners sharing an address must agree on the path).
    pub client_ca: Option<PathAt>,
    /// `dh-file`: rustls has no finite-field DHE suites, so DH parameters have no use; the
    /// file must still exist so that a typo does not go unnoticed.
    pub dh_file: Option<PathAt>,
    /// Things worth a warning in the log at start (skipped curves, raised minimum version);
    /// the server logs them once logging is set up.
    pub warnings: Vec<String>,
    pub at: Location,
}

/// A certificate chain with its key, and the host names it is served for.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Lowercased host names from `hosts` (`*.example.com` allowed); empty for a global
    /// `listen`, whose certificate is served only as the default.
    pub names: Vec<String>,
    /// One per `identity` entry (or the single `certificate-file`/`key-file` pair): a host
    /// may have, say, an RSA and an ECDSA certificate; the first the client can use wins.
    pub keys: Vec<KeyPair>,
    /// `ocsp-response-file`: stapled to every certificate of this identity.
    pub ocsp_response: Option<PathAt>,
    /// An `ssl` mapping with no certificate: the global `acme` block obtains one for
    /// `names` (`keys` is then empty).
    pub acme: bool,
    pub at: Location,
}

/// A `certificate-file` and its `key-file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPair {
    pub certificate: PathAt,
    pub key: PathAt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// `ssl-session-resumption` (global).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionResumption {
    /// Stateless session tickets (`mode: all` or `ticket`).
    pub tickets: bool,
    /// A server-side session cache (`mode: all` or `cache`).
    pub cache: bool,
    /// `lifetime` (seconds, default 3600): how long a ticket is valid; ticket keys rotate
    /// this often and the previous key is still accepted for one more period.
    pub lifetime: Duration,
    /// `cache-size` (spate): sessions kept in the cache (default 20480).
    pub cache_size: usize,
    /// `ticket-store`: where the ticket keys come from (default internal).
    pub ticket_store: TicketStore,
    /// `cache-store`: where the session cache lives (default internal).
    pub cache_store: CacheStore,
    /// `cache-store-timeout` (spate, milliseconds, default 100): the bound on each step of a
    /// shared cache's lookup, which a handshake waits for.
    pub cache_store_timeout: Duration,
}

/// A memcached or Redis server (`memcached:` / `redis:` of `ssl-session-resumption`, or a
/// limit zone's `redis:`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreServer {
    pub host: String,
    pub port: u16,
    /// `prefix`: put before every key spate writes (Redis: `h2o:` by default).
    pub prefix: String,
}

/// `ssl-session-resumption.cache-store`: where TLS sessions (TLS 1.2 session IDs, TLS 1.3
/// stateful tickets) are kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CacheStore {
    /// In this process, shared by its workers.
    #[default]
    Internal,
    /// memcached, each session under `cache-memcached-prefix` (h2o's
    /// `h2o:ssl-session-cache:`) and the base64url of its ID, the value in base64 (h2o's
    /// layout); a local cache in front.
    Memcached { server: StoreServer, prefix: String },
    /// Redis, each session under `{redis.prefix}ssl-session-cache:` and the base64url of
    /// its ID (`cache-redis-prefix` overrides the whole prefix).
    Redis { server: StoreServer, prefix: String },
}

/// `ssl-session-resumption.ticket-store`: who makes the session ticket keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TicketStore {
    /// Random keys of this process, rotated every `lifetime`.
    #[default]
    Internal,
    /// `ticket-file`: keys in h2o's YAML format, written by an operator's script and re-read
    /// every minute; shared by every instance that reads the same file.
    File(PathBuf),
    /// Keys kept in memcached (`memcached: {host, port}`) under one item
    /// (`ticket-memcached-key`, default `h2o:ssl-session-key`) that every instance reads and
    /// rolls over.
    Memcached {
        host: String,
        port: u16,
        key: String,
    },
    /// Keys kept in Redis (`redis: {host, port, prefix}`) under one key
    /// (`ticket-redis-key`, default `{prefix}ssl-session-key`), with the same roll-over.
    Redis {
        host: String,
        port: u16,
        key: String,
    },
}

impl Default for SessionResumption {
    fn default() -> Self {
        SessionResumption {
            tickets: true,
            cache: true,
            lifetime: Duration::from_secs(3600),
            cache_size: 20_480,
            ticket_store: TicketStore::Internal,
            cache_store: CacheStore::Internal,
            cache_store_timeout: Duration::from_millis(100),
        }
    }
}

/// TLS 1.2 suites rustls implements, by their OpenSSL names.
pub const TLS12_SUITES: &[(&str, CipherSuite)] = &[
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// TLS 1.3 suites rustls implements, by their RFC 8446 names.
pub const TLS13_SUITES: &[(&str, CipherSuite)] = &[
    (
        "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
];

/// Key exchange groups rustls (aws-lc-rs) implements, by OpenSSL's names and aliases.
pub const KX_GROUPS: &[(&str, NamedGroup)] = &[
    ("X25519", NamedGroup::X25519),
    ("P-256", NamedGroup::secp256r1),
    ("prime256v1", NamedGroup::secp256r1),
    ("secp256r1", NamedGroup::secp256r1),
    ("P-384", NamedGroup::secp384r1),
    ("secp384r1", NamedGroup::secp384r1),
    ("X25519MLKEM768", NamedGroup::X25519MLKEM768),
];

/// Real groups rustls lacks: skipped with a warning so that h2o configurations that list them
/// (seed-004 has `X25519:P-521:P-384`) still start, as long as one supported group remains.
const KX_GROUPS_SKIPPED: &[&str] = &[
    "P-521",
    "secp521r1",
    "X448",
    "ffdhe2048",
    "ffdhe3072",
    "ffdhe4096",
    "ffdhe6144",
    "ffdhe8192",
];

/// `early-data-max-size`'s default: what h2o's TLS stack (picotls) accepts.
const DEFAULT_EARLY_DATA_MAX: u32 = 8192;
/// Early data is held in memory until read: a request head or a few, not a body.
const EARLY_DATA_MAX_LIMIT: u32 = 64 * 1024;

/// Keys of the `ssl` mapping; the last four are h2o's and not supported yet.
const SSL_KEYS: &[&str] = &[
    "certificate-file",
    "key-file",
    "identity",
    "min-version",
    "minimum-version",
    "max-version",
    "maximum-version",
    "cipher-suite",
    "cipher-suite-tls1.3",
    "cipher-preference",
    "ecdh-curves",
    "key-exchange-tls1.3",
    "dh-file",
    "ocsp-update-interval",
    "ocsp-max-failures",
    "ocsp-response-file",
    "neverbleed",
    "http2",
    "client-ca-file",
    "early-data",
    "early-data-max-size",
    "ocsp-update-cmd",
    "session-ticket",
    "http2-origin-frame",
    "ech",
];

/// Reads a listener's `ssl` mapping. `host` is the host whose `listen` this is (its
/// certificate is then chosen for that name by SNI); `None` for a global `listen`.
pub(super) fn parse(ctx: &mut Ctx, v: &Node, host: Option<&str>) -> Option<TlsConf> {
    let entries = ctx.map("listen.ssl", v)?;
    let before = ctx.errors.len();
    let known = ctx.known_keys("listen.ssl", entries, SSL_KEYS);
    let mut c = TlsConf {
        identities: Vec::new(),
        min_version: TlsVersion::Tls12,
        max_version: TlsVersion::Tls13,
        cipher_suites: None,
        cipher_suites_tls13: None,
        kx_groups: None,
        server_cipher_preference: false,
        http2: true,
        early_data: None,
        ocsp_update_interval: Duration::from_secs(4 * 3600),
        ocsp_max_failures: 3,
        client_ca: None,
        dh_file: None,
        warnings: Vec::new(),
        at: ctx.at(v.line),
    };
    let mut files = KeyFiles::default();
    let mut ocsp_file = None;
    let mut identity_list = None;
    let mut ecdh_curves = None;
    let mut kx_tls13 = None;
    let mut early_data = false;
    let mut early_data_max = DEFAULT_EARLY_DATA_MAX;
    for (key, val) in &known {
        let name = format!("listen.ssl.{key}");
        match *key {
            "certificate-file" => files.cert = ctx.path_at(&name, val),
            "key-file" => files.key = ctx.path_at(&name, val),
            "identity" => identity_list = Some(*val),
            "min-version" | "minimum-version" => {
                if let Some(ver) = version(ctx, &name, val, true, &mut c.warnings) {
                    c.min_version = ver;
                }
            }
            "max-version" | "maximum-version" => {
                if let Some(ver) = version(ctx, &name, val, false, &mut c.warnings) {
                    c.max_version = ver;
                }
            }
            "cipher-suite" => {
                c.cipher_suites = suites(ctx, &name, val, TLS12_SUITES, "OpenSSL TLS 1.2");
            }
            "cipher-suite-tls1.3" => {
                c.cipher_suites_tls13 = suites(ctx, &name, val, TLS13_SUITES, "TLS 1.3");
            }
            "cipher-preference" => match val.as_str() {
                Some("server") => c.server_cipher_preference = true,
                Some("client") => c.server_cipher_preference = false,
                _ => ctx.error(
                    val.line,
                    format!("{name} expects server or client, got {}", show(val)),
                ),
            },
            "ecdh-curves" => ecdh_curves = Some(*val),
            "key-exchange-tls1.3" => kx_tls13 = Some(*val),
            "dh-file" => c.dh_file = ctx.path_at(&name, val),
            "ocsp-update-interval" => {
                if let Some(d) = ctx.seconds(&name, val) {
                    c.ocsp_update_interval = d;
                }
            }
            "ocsp-max-failures" => {
                if let Some(n) = ctx.int(&name, val, 0) {
                    c.ocsp_max_failures = n;
                }
            }
            "ocsp-response-file" => ocsp_file = ctx.path_at(&name, val),
            // rustls keeps keys in this process safely; neverbleed's separate key process
            // guarded against OpenSSL memory bugs and is unnecessary.
            "neverbleed" => {
                ctx.bool(&name, val);
            }
            "http2" => {
                if let Some(b) = ctx.bool(&name, val) {
                    c.http2 = b;
                }
            }
            "early-data" => {
                if let Some(b) = ctx.bool(&name, val) {
                    early_data = b;
                }
            }
            "early-data-max-size" => match ctx.uint(&name, val, 1) {
                Some(n) if n <= u64::from(EARLY_DATA_MAX_LIMIT) => early_data_max = n as u32,
                Some(_) => ctx.error(
                    val.line,
                    format!("{name}: at most {EARLY_DATA_MAX_LIMIT} bytes"),
                ),
                None => {}
            },
            "client-ca-file" => {
                if let Some(path) = ctx.path(&name, val) {
                    c.client_ca = Some(PathAt {
                        path,
                        at: ctx.at(val.line),
                    });
                }
            }
            _ => ctx.error(val.line, format!("{name} is not supported yet")),
        }
    }
    if c.min_version > c.max_version {
        ctx.error(v.line, "listen.ssl: min-version is above max-version");
    }
    if early_data && c.max_version < TlsVersion::Tls13 {
        ctx.error(v.line, "listen.ssl: early-data needs TLS 1.3 (max-version)");
    }
    c.early_data = early_data.then_some(early_data_max);
    c.kx_groups = groups(ctx, kx_tls13, ecdh_curves, &mut c.warnings);

    let mut keys = Vec::new();
    let mut acme = false;
    match identity_list {
        Some(list) => {
            if files.cert.is_some() || files.key.is_some() {
                ctx.error(
                    list.line,
                    "listen.ssl: give either identity or certificate-file and key-file",
                );
            }
            identities(ctx, list, &mut keys);
        }
        // No certificate at all: ACME obtains one (checked against `acme` once it is read).
        None if files.cert.is_none() && files.key.is_none() => acme = true,
        None => keys.extend(files.pair(ctx, v.line)),
    }
    if ctx.errors.len() != before {
        return None;
    }
    c.identities.push(Identity {
        names: host.map(|h| vec![h.to_owned()]).unwrap_or_default(),
        keys,
        ocsp_response: ocsp_file,
        acme,
        at: ctx.at(v.line),
    });
    Some(c)
}

impl TlsConf {
    /// Whether two `ssl` mappings on the same address agree on everything but certificates,
    /// since one listener has one set of handshake settings.
    pub fn same_handshake(&self, o: &TlsConf) -> bool {
        self.min_version == o.min_version
            && self.max_version == o.max_version
            && self.cipher_suites == o.cipher_suites
            && self.cipher_suites_tls13 == o.cipher_suites_tls13
            && self.kx_groups == o.kx_groups
            && self.server_cipher_preference == o.server_cipher_preference
            && self.http2 == o.http2
            && self.client_ca.as_ref().map(|c| &c.path) == o.client_ca.as_ref().map(|c| &c.path)
    }
}

/// `ssl-session-resumption: {mode: all|ticket|cache|off, ...}`.
pub(super) fn session_resumption(ctx: &mut Ctx, v: &Node) -> Option<SessionResumption> {
    const NAME: &str = "ssl-session-resumption";
    let entries = ctx.map(NAME, v)?;
    let allowed = [
        "mode",
        "cache-store",
        "ticket-store",
        "lifetime",
        "cache-size",
        "ticket-cipher",
        "ticket-hash",
        "ticket-file",
        "memcached",
        "redis",
        "cache-memcached-num-threads",
        "cache-memcached-prefix",
        "cache-redis-prefix",
        "ticket-memcached-key",
        "ticket-redis-key",
        "cache-store-timeout",
    ];
    let before = ctx.errors.len();
    let mut r = SessionResumption::default();
    let (mut store, mut ticket_file, mut memcached_key, mut memcached) = (None, None, None, None);
    let (mut cache_store, mut redis, mut redis_key) = (None, None, None);
    let (mut cache_memcached_prefix, mut cache_redis_prefix) = (None, None);
    for (key, val) in ctx.known_keys(NAME, entries, &allowed) {
        let name = format!("{NAME}.{key}");
        match key {
            "mode" => match val.as_str().map(str::to_ascii_lowercase).as_deref() {
                Some("all") => (r.tickets, r.cache) = (true, true),
                Some("ticket") => (r.tickets, r.cache) = (true, false),
                Some("cache") => (r.tickets, r.cache) = (false, true),
                Some("off") => (r.tickets, r.cache) = (false, false),
                _ => ctx.error(
                    val.line,
                    format!(
                        "{name} expects all, ticket, cache or off, got {}",
                        show(val)
                    ),
                ),
            },
            "cache-store" => match val.as_str() {
                Some("internal") => cache_store = Some(("internal", val.line)),
                Some("memcached") => cache_store = Some(("memcached", val.line)),
                Some("redis") => cache_store = Some(("redis", val.line)),
                _ => ctx.error(
                    val.line,
                    format!(
                        "{name} expects internal, memcached or redis, got {}",
                        show(val)
                    ),
                ),
            },
            "ticket-store" => match val.as_str() {
                Some("internal") => store = Some(("internal", val.line)),
                Some("file") => store = Some(("file", val.line)),
                Some("memcached") => store = Some(("memcached", val.line)),
                Some("redis") => store = Some(("redis", val.line)),
                _ => ctx.error(
                    val.line,
                    format!(
                        "{name} expects internal, file, memcached or redis, got {}",
                        show(val)
                    ),
                ),
            },
            "ticket-file" => ticket_file = ctx.path(&name, val),
            "ticket-memcached-key" => memcached_key = ctx.string(&name, val),
            "ticket-redis-key" => redis_key = ctx.string(&name, val),
            "cache-store-timeout" => match ctx.uint(&name, val, 1) {
                Some(ms) if ms <= 5_000 => r.cache_store_timeout = Duration::from_millis(ms),
                Some(_) => ctx.error(
                    val.line,
                    format!("{name} is in milliseconds, at most 5000 (a handshake waits for it)"),
                ),
                None => {}
            },
            "cache-memcached-prefix" => {
                cache_memcached_prefix = ctx.string(&name, val);
                if cache_memcached_prefix
                    .as_deref()
                    .is_some_and(bad_memcached_prefix)
                {
                    ctx.error(val.line, format!("{name}: memcached keys have no spaces or control characters and at most 200 bytes of prefix"));
                }
            }
            "cache-redis-prefix" => cache_redis_prefix = ctx.string(&name, val),
            // One connection per worker at most; the count h2o sizes its threads by.
            "cache-memcached-num-threads" => {
                ctx.int::<u64>(&name, val, 1);
            }
            "memcached" => memcached = memcached_server(ctx, &name, val),
            "redis" => redis = redis_server(ctx, &name, val),
            "ticket-cipher" => match val.as_str() {
                Some("aes-256-cbc") => {}
                _ => ctx.error(
                    val.line,
                    format!("{name}: only aes-256-cbc is supported, got {}", show(val)),
                ),
            },
            "ticket-hash" => match val.as_str() {
                Some("sha256") => {}
                _ => ctx.error(
                    val.line,
                    format!("{name}: only sha256 is supported, got {}", show(val)),
                ),
            },
            "lifetime" => match ctx.uint(&name, val, 1) {
                Some(n) if n <= u64::from(u32::MAX) => r.lifetime = Duration::from_secs(n),
                Some(_) => ctx.error(val.line, format!("{name} is too large")),
                None => {}
            },
            "cache-size" => {
                if let Some(n) = ctx.int(&name, val, 1) {
                    r.cache_size = n;
                }
            }
            other => ctx.error(val.line, format!("{NAME}.{other} is not supported yet")),
        }
    }
    match store {
        Some(("file", line)) => match ticket_file {
            Some(path) => r.ticket_store = TicketStore::File(path),
            None => ctx.error(
                line,
                format!("{NAME}: ticket-store: file needs ticket-file (the path of the keys)"),
            ),
        },
        Some(("memcached", line)) => match &memcached {
            Some(m) => {
                r.ticket_store = TicketStore::Memcached {
                    host: m.host.clone(),
                    port: m.port,
                    key: memcached_key.unwrap_or_else(|| "h2o:ssl-session-key".to_owned()),
                }
            }
            None => ctx.error(
                line,
                format!(
                    "{NAME}: ticket-store: memcached needs memcached: {{host: ..., port: ...}}"
                ),
            ),
        },
        Some(("redis", line)) => match &redis {
            Some(s) => {
                r.ticket_store = TicketStore::Redis {
                    host: s.host.clone(),
                    port: s.port,
                    key: redis_key.unwrap_or_else(|| format!("{}ssl-session-key", s.prefix)),
                }
            }
            None => ctx.error(
                line,
                format!("{NAME}: ticket-store: redis needs redis: {{host: ..., port: ...}}"),
            ),
        },
        _ => {}
    }
    match cache_store {
        Some(("memcached", line)) => match memcached {
            Some(server) => {
                // h2o's `memcached.prefix` and `cache-memcached-prefix` both name it.
                let prefix = cache_memcached_prefix.unwrap_or_else(|| server.prefix.clone());
                r.cache_store = CacheStore::Memcached { server, prefix };
            }
            None => ctx.error(
                line,
                format!("{NAME}: cache-store: memcached needs memcached: {{host: ..., port: ...}}"),
            ),
        },
        Some(("redis", line)) => match redis {
            Some(server) => {
                let prefix = cache_redis_prefix
                    .unwrap_or_else(|| format!("{}ssl-session-cache:", server.prefix));
                r.cache_store = CacheStore::Redis { server, prefix };
            }
            None => ctx.error(
                line,
                format!("{NAME}: cache-store: redis needs redis: {{host: ..., port: ...}}"),
            ),
        },
        _ => {}
    }
    (ctx.errors.len() == before).then_some(r)
}

/// `ssl-session-resumption.memcached`: `{host, port}` (port 11211 by default, as in h2o).
fn memcached_server(ctx: &mut Ctx, name: &str, v: &Node) -> Option<StoreServer> {
    let entries = ctx.map(name, v)?;
    let (mut host, mut port, mut prefix) = (None, 11211, None);
    for (key, val) in ctx.known_keys(
        name,
        entries,
        &["host", "port", "protocol", "num-threads", "prefix"],
    ) {
        let sub = format!("{name}.{key}");
        match key {
            "host" => host = ctx.string(&sub, val),
            "port" => port = ctx.int(&sub, val, 1)?,
            "prefix" => {
                prefix = ctx.string(&sub, val);
                if prefix.as_deref().is_some_and(bad_memcached_prefix) {
                    ctx.error(val.line, format!("{sub}: memcached keys have no spaces or control characters and at most 200 bytes of prefix"));
                }
            }
            // The text protocol is what spate speaks; memcached answers both.
            "protocol" => match val.as_str().map(str::to_ascii_uppercase).as_deref() {
                Some("ASCII" | "BINARY") => {}
                _ => ctx.error(
                    val.line,
                    format!("{sub} expects ASCII or BINARY, got {}", show(val)),
                ),
            },
            // The ticket keys need one connection; these size h2o's session cache.
            _ => {}
        }
    }
    match host {
        Some(host) => Some(StoreServer {
            host,
            port,
            prefix: prefix.unwrap_or_else(|| "h2o:ssl-session-cache:".to_owned()),
        }),
        None => {
            ctx.error(v.line, format!("{name}: host is required"));
            None
        }
    }
}

/// A prefix memcached could not take in a key (the session ID adds up to 44 characters to
/// it, and a key has at most 250).
fn bad_memcached_prefix(p: &str) -> bool {
    p.len() > 200 || p.bytes().any(|b| b <= b' ' || b == 0x7f)
}

/// A `redis: {host, port, prefix}` mapping (port 6379, prefix `h2o:` by default).
pub(super) fn redis_server(ctx: &mut Ctx, name: &str, v: &Node) -> Option<StoreServer> {
    let entries = ctx.map(name, v)?;
    let (mut host, mut port, mut prefix) = (None, 6379, None);
    for (key, val) in ctx.known_keys(name, entries, &["host", "port", "prefix"]) {
        let sub = format!("{name}.{key}");
        match key {
            "host" => host = ctx.string(&sub, val),
            "port" => port = ctx.int(&sub, val, 1)?,
            _ => prefix = ctx.string(&sub, val),
        }
    }
    match host {
        Some(host) => Some(StoreServer {
            host,
            port,
            prefix: prefix.unwrap_or_else(|| "h2o:".to_owned()),
        }),
        None => {
            ctx.error(v.line, format!("{name}: host is required"));
            None
        }
    }
}

/// The `certificate-file` and `key-file` of one identity, with the lines they were given on.
#[derive(Default)]
struct KeyFiles {
    cert: Option<PathAt>,
    key: Option<PathAt>,
}

impl KeyFiles {
    /// The pair; a missing directive is reported at `line` (the mapping's).
    fn pair(self, ctx: &mut Ctx, line: u32) -> Option<KeyPair> {
        for (what, have) in [
            ("certificate-file", self.cert.is_some()),
            ("key-file", self.key.is_some()),
        ] {
            if !have {
                ctx.error(line, format!("listen.ssl: {what} is required"));
            }
        }
        Some(KeyPair {
            certificate: self.cert?,
            key: self.key?,
        })
    }
}

/// `identity: [{certificate-file, key-file}, ...]`.
fn identities(ctx: &mut Ctx, v: &Node, out: &mut Vec<KeyPair>) {
    let Some(items) = v.as_seq() else {
        ctx.error(
            v.line,
            format!(
                "listen.ssl.identity expects a sequence of mappings, got {}",
                show(v)
            ),
        );
        return;
    };
    if items.is_empty() {
        ctx.error(v.line, "listen.ssl.identity is empty");
    }
    for item in items {
        let Some(entries) = ctx.map("listen.ssl.identity entry", item) else {
            continue;
        };
        let mut files = KeyFiles::default();
        for (key, val) in ctx.known_keys(
            "listen.ssl.identity",
            entries,
            &["certificate-file", "key-file"],
        ) {
            let p = ctx.path_at(&format!("listen.ssl.identity.{key}"), val);
            if key == "certificate-file" {
                files.cert = p;
            } else {
                files.key = p;
            }
        }
        if let Some(k) = files.pair(ctx, item.line) {
            out.push(k);
        }
    }
}

/// `TLSv1.2` / `TLSv1.3`, in any case (h2o compares them so: `tlsv1.2` works there). Older
/// versions are below what rustls offers: as a minimum they are raised to TLS 1.2 with a
/// warning, as a maximum they are an error.
fn version(
    ctx: &mut Ctx,
    name: &str,
    v: &Node,
    is_min: bool,
    warnings: &mut Vec<String>,
) -> Option<TlsVersion> {
    let lower = v.as_str().map(str::to_ascii_lowercase);
    match lower.as_deref() {
        Some("tlsv1.3") => Some(TlsVersion::Tls13),
        Some("tlsv1.2") => Some(TlsVersion::Tls12),
        Some("tlsv1" | "tlsv1.0" | "tlsv1.1" | "sslv3") if is_min => {
            let old = v.as_str().unwrap_or_default();
            warnings.push(format!(
                "{}: {name} {old} raised to TLSv1.2 (older versions are insecure and not offered)",
                ctx.at(v.line)
            ));
            Some(TlsVersion::Tls12)
        }
        _ => {
            ctx.error(
                v.line,
                format!("{name} expects TLSv1.2 or TLSv1.3, got {}", show(v)),
            );
            None
        }
    }
}

/// A colon-separated string (OpenSSL style) or a sequence of names, mapped through `table`.
fn suites(
    ctx: &mut Ctx,
    name: &str,
    v: &Node,
    table: &[(&str, CipherSuite)],
    kind: &str,
) -> Option<Vec<CipherSuite>> {
    let names = list(ctx, name, v)?;
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for n in &names {
        match table.iter().find(|(t, _)| t.eq_ignore_ascii_case(n)) {
            Some((_, s)) if !out.contains(s) => out.push(*s),
            Some(_) => {}
            None => bad.push(n.as_str()),
        }
    }
    if !bad.is_empty() {
        let supported: Vec<&str> = table.iter().map(|(t, _)| *t).collect();
        ctx.error(
            v.line,
            format!(
                "{name}: unsupported {kind} cipher suite(s) {}; supported: {}",
                bad.join(", "),
                supported.join(":")
            ),
        );
        return None;
    }
    Some(out)
}

/// The key exchange groups: `key-exchange-tls1.3` first, then `ecdh-curves`, without repeats.
/// One list serves both versions in rustls (hybrid post-quantum groups are only offered in
/// TLS 1.3 by rustls itself).
fn groups(
    ctx: &mut Ctx,
    tls13: Option<&Node>,
    curves: Option<&Node>,
    warnings: &mut Vec<String>,
) -> Option<Vec<NamedGroup>> {
    if tls13.is_none() && curves.is_none() {
        return None;
    }
    let mut out = Vec::new();
    let mut failed = false;
    let mut last_line = 0;
    for (name, v) in [("key-exchange-tls1.3", tls13), ("ecdh-curves", curves)] {
        let Some(v) = v else { continue };
        last_line = v.line;
        let full = format!("listen.ssl.{name}");
        let Some(names) = list(ctx, &full, v) else {
            failed = true;
            continue;
        };
        for n in &names {
            if let Some((_, g)) = KX_GROUPS.iter().find(|(t, _)| t.eq_ignore_ascii_case(n)) {
                if !out.contains(g) {
                    out.push(*g);
                }
            } else if KX_GROUPS_SKIPPED.iter().any(|t| t.eq_ignore_ascii_case(n)) {
                warnings.push(format!(
                    "{}: {full}: {n} is not supported by rustls; skipped",
                    ctx.at(v.line)
                ));
            } else {
                let supported: Vec<&str> = KX_GROUPS.iter().map(|(t, _)| *t).collect();
                ctx.error(
                    v.line,
                    format!(
                        "{full}: unknown group {n}; supported: {}",
                        supported.join(", ")
                    ),
                );
                failed = true;
            }
        }
    }
    if failed {
        return None;
    }
    if out.is_empty() {
        let supported: Vec<&str> = KX_GROUPS.iter().map(|(t, _)| *t).collect();
        ctx.error(
            last_line,
            format!(
                "listen.ssl: no supported key exchange group left; supported: {}",
                supported.join(", ")
            ),
        );
        return None;
    }
    Some(out)
}

/// `A:B:C` or `[A, B, C]`.
fn list(ctx: &mut Ctx, name: &str, v: &Node) -> Option<Vec<String>> {
    let items = ctx.strings(name, v)?;
    let out: Vec<String> = items
        .iter()
        .flat_map(|s| s.split(':'))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if out.is_empty() {
        ctx.error(v.line, format!("{name} is empty"));
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_str, Config};
    use std::path::Path;

    struct Certs {
        dir: tempfile::TempDir,
    }

    impl Certs {
        /// A directory for the configuration file; loading only records the certificates'
        /// paths (`server::prepare` reads them), so they need not exist.
        fn new() -> Certs {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            Certs { dir }
        }

        fn path(&self) -> &Path {
            self.dir.path()
        }

        /// `$D` in `text` becomes the certificate directory; the file lives there too.
        fn load(&self, text: &str) -> Result<Config, Vec<String>> {
            let file = self.path().join("t.yaml");
            let text = text.replace("$D", &self.path().display().to_string());
            load_str(&text, &file.display().to_string())
                .map_err(|e| e.iter().map(|e| e.to_string()).collect())
        }

        fn ok(&self, text: &str) -> Config {
            self.load(text).unwrap_or_else(|e| panic!("{e:?}"))
        }

        /// Errors with the directory shown as `$D`.
        fn errors(&self, text: &str) -> Vec<String> {
            let dir = self.path().display().to_string();
            match self.load(text) {
                Ok(_) => panic!("expected errors"),
                Err(e) => e.iter().map(|e| e.replace(&dir, "$D")).collect(),
            }
        }
    }

    fn one_listener(text_ssl: &str) -> String {
        format!(
            "listen:\n  port: 0\n  ssl:\n{text_ssl}\nhosts: {{default: {{paths: {{/: {{respond: {{}}}}}}}}}}\n"
        )
    }

    const A: &str = "    certificate-file: $D/a.crt\n    key-file: $D/a.key";

    #[test]
    fn defaults() {
        let c = Certs::new();
        let conf = c.ok(&one_listener(A));
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        assert_eq!(
            (t.min_version, t.max_version),
            (TlsVersion::Tls12, TlsVersion::Tls13)
        );
        assert!(t.http2 && !t.server_cipher_preference);
        assert!(t.cipher_suites.is_none() && t.kx_groups.is_none());
        assert_eq!(t.identities[0].keys.len(), 1);
        assert_eq!(conf.handshake_timeout, Duration::from_secs(10));
        assert_eq!(conf.session_resumption, SessionResumption::default());
        assert_eq!(t.early_data, None);
    }

    #[test]
    fn early_data_with_its_size_and_its_errors() {
        let c = Certs::new();
        let conf = c.ok(&one_listener(&format!("{A}\n    early-data: ON")));
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        assert_eq!(t.early_data, Some(8192));
        let conf = c.ok(&one_listener(&format!(
            "{A}\n    early-data: ON\n    early-data-max-size: 16384"
        )));
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        assert_eq!(t.early_data, Some(16384));
        let e = c.errors(&one_listener(&format!(
            "{A}\n    early-data: ON\n    early-data-max-size: 1000000"
        )));
        assert!(
            e.iter()
                .any(|e| e.contains("early-data-max-size: at most 65536")),
            "{e:?}"
        );
        let e = c.errors(&one_listener(&format!(
            "{A}\n    early-data: ON\n    max-version: TLSv1.2"
        )));
        assert!(
            e.iter().any(|e| e.contains("early-data needs TLS 1.3")),
            "{e:?}"
        );
        let e = c.errors(&one_listener(&format!("{A}\n    early-data: maybe")));
        assert!(
            e.iter()
                .any(|e| e.contains("listen.ssl.early-data expects ON or OFF")),
            "{e:?}"
        );
    }

    #[test]
    fn h2o_ssl_keys_of_seed_004() {
        let c = Certs::new();
        let conf = c.ok(&one_listener(&format!(
            "{A}
    min-version: TLSv1.2
    ecdh-curves: X25519:P-521:P-384
    cipher-suite: ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256
    cipher-suite-tls1.3: [TLS_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256, TLS_CHACHA20_POLY1305_SHA256]
    cipher-preference: server
    neverbleed: ON
    ocsp-update-interval: 0
    ocsp-max-failures: 1"
        )));
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        assert_eq!(
            t.cipher_suites,
            Some(vec![
                CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            ])
        );
        assert_eq!(
            t.cipher_suites_tls13,
            Some(vec![
                CipherSuite::TLS13_AES_256_GCM_SHA384,
                CipherSuite::TLS13_AES_128_GCM_SHA256,
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            ])
        );
        // P-521 is skipped with a warning, the rest kept in order.
        assert_eq!(
            t.kx_groups,
            Some(vec![NamedGroup::X25519, NamedGroup::secp384r1])
        );
        assert_eq!(t.warnings.len(), 1);
        assert!(
            t.warnings[0].contains("P-521 is not supported"),
            "{:?}",
            t.warnings
        );
        assert!(t.server_cipher_preference);
        assert_eq!(t.ocsp_update_interval, Duration::ZERO);
    }

    #[test]
    fn unsupported_suites_and_groups_are_errors_listing_what_is_supported() {
        let c = Certs::new();
        let e = c.errors(&one_listener(&format!(
            "{A}\n    cipher-suite: ECDHE-RSA-AES128-GCM-SHA256:DES-CBC3-SHA\n    ecdh-curves: P-521\n    key-exchange-tls1.3: [X9]"
        )));
        // P-521 alone would be skipped; the unknown X9 is the error.
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("$D/t.yaml:6: listen.ssl.cipher-suite: unsupported OpenSSL TLS 1.2 cipher suite(s) DES-CBC3-SHA; supported: ECDHE-ECDSA-AES128-GCM-SHA256:"), "{}", e[0]);
        assert!(e[1].starts_with("$D/t.yaml:8: listen.ssl.key-exchange-tls1.3: unknown group X9; supported: X25519, P-256"), "{}", e[1]);
        // Only unsupported curves: nothing would be left.
        let e = c.errors(&one_listener(&format!("{A}\n    ecdh-curves: P-521")));
        assert_eq!(
            e,
            vec!["$D/t.yaml:6: listen.ssl: no supported key exchange group left; supported: X25519, P-256, prime256v1, secp256r1, P-384, secp384r1, X25519MLKEM768"]
        );
    }

    #[test]
    fn versions() {
        let c = Certs::new();
        let conf = c.ok(&one_listener(&format!(
            "{A}\n    min-version: TLSv1\n    max-version: TLSv1.2"
        )));
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        assert_eq!(
            (t.min_version, t.max_version),
            (TlsVersion::Tls12, TlsVersion::Tls12)
        );
        assert!(t.warnings[0].contains("raised to TLSv1.2"));
        // h2o compares the names without regard to case.
        let conf = c.ok(&one_listener(&format!(
            "{A}\n    min-version: tlsv1.2\n    max-version: tlsv1.3"
        )));
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        assert_eq!(
            (t.min_version, t.max_version),
            (TlsVersion::Tls12, TlsVersion::Tls13)
        );
        let e = c.errors(&one_listener(&format!("{A}\n    max-version: TLSv1.1")));
        assert_eq!(
            e,
            vec!["$D/t.yaml:6: listen.ssl.max-version expects TLSv1.2 or TLSv1.3, got \"TLSv1.1\""]
        );
        let e = c.errors(&one_listener(&format!(
            "{A}\n    minimum-version: TLSv1.3\n    maximum-version: TLSv1.2"
        )));
        assert_eq!(
            e,
            vec!["$D/t.yaml:4: listen.ssl: min-version is above max-version"]
        );
        // TLS 1.3 only with TLS 1.2 suites only is `prepare`'s to find (rustls has nothing
        // to offer): its tests check it.
    }

    #[test]
    fn hosts_with_their_own_ssl_listen_share_the_port_by_sni() {
        let c = Certs::new();
        let conf = c.ok("
hosts:
  a.example:
    listen: {port: 8443, ssl: {certificate-file: a.crt, key-file: a.key}}
    paths: {/: {respond: {}}}
  \"*.b.example:8443\":
    listen: {port: 8443, ssl: {certificate-file: b.crt, key-file: b.key}}
    paths: {/: {respond: {}}}
");
        assert_eq!(conf.listeners.len(), 1);
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        let names: Vec<_> = t.identities.iter().map(|i| i.names.clone()).collect();
        assert_eq!(names, vec![vec!["a.example"], vec!["*.b.example"]]);

        let e = c.errors(
            "
hosts:
  a.example:
    listen: {port: 8443, ssl: {certificate-file: a.crt, key-file: a.key}}
    paths: {/: {respond: {}}}
  b.example:
    listen: {port: 8443, ssl: {certificate-file: b.crt, key-file: b.key, min-version: TLSv1.3}}
    paths: {/: {respond: {}}}
",
        );
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with(
                "$D/t.yaml:7: listen 0.0.0.0:8443: ssl settings differ from those at line 4"
            ),
            "{}",
            e[0]
        );
    }

    #[test]
    fn identity_list_and_ocsp_response() {
        let c = Certs::new();
        std::fs::write(c.path().join("ocsp.der"), [0x30, 0x03, 0x0a, 0x01, 0x00])
            .unwrap_or_else(|e| panic!("{e}"));
        let conf = c.ok(&one_listener(
            "    identity:\n      - {certificate-file: a.crt, key-file: a.key}\n      - {certificate-file: b.crt, key-file: b.key}\n    ocsp-response-file: ocsp.der",
        ));
        let t = conf.listeners[0].tls.as_ref().expect("tls");
        assert_eq!(t.identities[0].keys.len(), 2);
        let ocsp = t.identities[0].ocsp_response.as_ref().expect("ocsp");
        assert_eq!(ocsp.path, c.path().join("ocsp.der"));
        assert_eq!(ocsp.at.line, 7);
        // The response itself is read by `prepare` (its tests check it is stapled).
    }

    #[test]
    fn unsupported_ssl_keys_and_http2_switch() {
        let c = Certs::new();
        let e = c.errors(&one_listener(&format!(
            "{A}\n    session-ticket: x\n    ciphers: x"
        )));
        assert_eq!(
            e,
            vec![
                "$D/t.yaml:7: unknown key ciphers in listen.ssl",
                "$D/t.yaml:6: listen.ssl.session-ticket is not supported yet",
            ]
        );
        let conf = c.ok(&one_listener(&format!("{A}\n    http2: OFF")));
        assert!(!conf.listeners[0].tls.as_ref().expect("tls").http2);
    }

    #[test]
    fn global_tls_directives() {
        let c = Certs::new();
        let conf = c.ok(&format!(
            "handshake-timeout: 3\nneverbleed: OFF\nssl-session-resumption:\n  mode: ticket\n  lifetime: 600\n  ticket-store: internal\n{}",
            one_listener(A)
        ));
        assert_eq!(conf.handshake_timeout, Duration::from_secs(3));
        let r = &conf.session_resumption;
        assert!(r.tickets && !r.cache);
        assert_eq!(r.lifetime, Duration::from_secs(600));
        let e = c.errors(&format!(
            "ssl-session-resumption: {{mode: sometimes, cache-store: disk, ticket-store: etcd}}\n{}",
            one_listener(A)
        ));
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].contains("ssl-session-resumption.mode expects all, ticket, cache or off"));
        assert!(
            e[1].contains("cache-store expects internal, memcached or redis"),
            "{e:?}"
        );
        assert!(e[2].contains("ticket-store expects internal, file, memcached or redis"));
    }

    #[test]
    fn shared_ticket_stores() {
        let c = Certs::new();
        let conf = c.ok(&format!(
            "ssl-session-resumption:\n  mode: ticket\n  ticket-store: memcached\n  memcached: {{host: 127.0.0.1, port: 11222}}\n{}",
            one_listener(A)
        ));
        assert_eq!(
            conf.session_resumption.ticket_store,
            TicketStore::Memcached {
                host: "127.0.0.1".into(),
                port: 11222,
                key: "h2o:ssl-session-key".into()
            }
        );
        let conf = c.ok(&format!(
            "ssl-session-resumption:\n  ticket-store: redis\n  cache-store: redis\n  redis: {{host: r.internal, prefix: 'app:'}}\n{}",
            one_listener(A)
        ));
        let r = &conf.session_resumption;
        assert_eq!(
            r.ticket_store,
            TicketStore::Redis {
                host: "r.internal".into(),
                port: 6379,
                key: "app:ssl-session-key".into()
            }
        );
        let server = StoreServer {
            host: "r.internal".into(),
            port: 6379,
            prefix: "app:".into(),
        };
        assert_eq!(
            r.cache_store,
            CacheStore::Redis {
                server,
                prefix: "app:ssl-session-cache:".into()
            }
        );
        let conf = c.ok(&format!(
            "ssl-session-resumption:\n  mode: cache\n  cache-store: memcached\n  memcached: {{host: m, port: 11}}\n{}",
            one_listener(A)
        ));
        let CacheStore::Memcached { server, prefix } = &conf.session_resumption.cache_store else {
            panic!("{:?}", conf.session_resumption.cache_store);
        };
        assert_eq!(
            (server.port, prefix.as_str()),
            (11, "h2o:ssl-session-cache:")
        );
        let e = c.errors(&format!(
            "ssl-session-resumption:\n  cache-store: redis\n  ticket-store: redis\n  redis: {{port: 1}}\n{}",
            one_listener(A)
        ));
        assert!(
            e[0].contains(":4: ssl-session-resumption.redis: host is required"),
            "{e:?}"
        );
        assert!(
            e[1].contains(":3: ssl-session-resumption: ticket-store: redis needs redis"),
            "{e:?}"
        );
        assert!(
            e[2].contains(":2: ssl-session-resumption: cache-store: redis needs redis"),
            "{e:?}"
        );
        let conf = c.ok(&format!(
            "ssl-session-resumption:\n  ticket-store: file\n  ticket-file: /etc/keys.yaml\n{}",
            one_listener(A)
        ));
        assert_eq!(
            conf.session_resumption.ticket_store,
            TicketStore::File(PathBuf::from("/etc/keys.yaml"))
        );
        let e = c.errors(&format!(
            "ssl-session-resumption:\n  ticket-store: memcached\n  ticket-cipher: aes-128-cbc\n{}",
            one_listener(A)
        ));
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].contains(":3: ssl-session-resumption.ticket-cipher: only aes-256-cbc"),
            "{}",
            e[0]
        );
        assert!(
            e[1].contains(":2: ssl-session-resumption: ticket-store: memcached needs memcached:"),
            "{}",
            e[1]
        );
    }
}
