//! YAML (h2o's dialect) -> typed, validated [`Config`]. Errors carry `file:line`.
//!
//! A `Config` is plain data and this module imports nothing else of the crate: the files it
//! names (certificates, keys, CA roots) stay paths, and `user` a name, each with the line that
//! gave it; `server::prepare` reads and looks them up, reporting problems at those lines.
//!
//! Directives are resolved through h2o's scopes: a directive given at the global level applies
//! to every host and path below it unless a lower level sets it again.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where in a configuration file something was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: Arc<str>,
    pub line: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A file named in the configuration (certificate, key, CA roots, ...), with where it was
/// named: `prepare` reads it and reports a problem with it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathAt {
    pub path: PathBuf,
    pub at: Location,
}

/// `user`: an account name, looked up by `prepare`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub at: Location,
}

/// One problem in a configuration file.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub at: Location,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// `file.memory-cache-max-file-size`'s default. Measured on varied h2c traffic (2,000 files
/// of 100 B - 64 KiB): holding files up to 64 KiB rather than 16 KiB took a fifth off the
/// server's CPU per request, the `pread` of each larger file into the output being the copy
/// saved.
pub const FILE_MEMORY_CACHE_MAX_FILE: u64 = 64 * 1024;
/// `file.memory-cache-size`'s default: the whole server's, shared out between the workers
/// (each holds its own copies), so that memory does not grow with the number of cores.
pub const FILE_MEMORY_CACHE_SIZE: u64 = 128 << 20;

/// The whole server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Every listener: global `listen` and per-host `listen`, deduplicated by address.
    pub listeners: Vec<Listen>,
    /// Hosts in configuration order; the first is the default for unknown names.
    pub hosts: Vec<Host>,
    /// `num-threads`: worker threads (default: the CPU count).
    pub num_threads: usize,
    /// `max-connections`: open connections across all workers (default 1024).
    pub max_connections: usize,
    /// `server-name`: the Server header value (default `spate/VERSION`).
    pub server_name: String,
    /// `send-server-name`: whether to send a Server header (default ON).
    pub send_server_name: bool,
    /// `error-log`: where diagnostics go (default: standard error).
    pub error_log: Option<LogTarget>,
    /// `pid-file`: written with the process id once the sockets are bound, removed at exit.
    pub pid_file: Option<PathBuf>,
    /// `tcp-fastopen`: the TCP Fast Open queue of each TCP listener (h2o's default 4096; 0
    /// turns it off). The kernel uses it only when `net.ipv4.tcp_fastopen` allows servers.
    pub tcp_fastopen: u32,
    /// `file.memory-cache-size` (spate): bytes of files' contents held in memory, shared out
    /// between the workers, least recently used dropped first (default 128 MiB).
    pub file_memory_cache_size: u64,
    /// `file.memory-cache-max-file-size` (spate): files up to this size are held in memory
    /// when opened (default 64 KiB; 0 holds none).
    pub file_memory_cache_max_file: u64,
    /// `user`: the account the server switches to once its sockets, logs and keys are open
    /// (it must start as root for that, as h2o).
    pub user: Option<User>,
    /// `error-log.emit-request-errors` (default ON): log one line per rejected request.
    pub emit_request_errors: bool,
    pub http1: Http1,
    pub http2: Http2,
    /// `http3-*` directives and `max-quic-connections`.
    pub http3: Http3,
    pub limits: Limits,
    /// `shutdown-timeout`: how long in-flight requests may run after SIGTERM (default 10 s).
    pub shutdown_timeout: Duration,
    /// `handshake-timeout` (seconds, default 10): a TLS handshake must finish within this.
    pub handshake_timeout: Duration,
    /// `ssl-session-resumption`: session tickets and the session cache (both on by default).
    pub session_resumption: SessionResumption,
    /// Every `proxy.ssl.cafile` as written, used by a backend or not: `prepare` reads each,
    /// so a bad one is an error at its line.
    pub proxy_ca_files: Vec<PathAt>,
    /// `acme`: certificates from an ACME CA for hosts whose `ssl` names none.
    pub acme: Option<AcmeConf>,
    /// `send-informational`: which clients get interim responses.
    pub send_informational: SendInformational,
    /// What was accepted but is done differently from h2o (a directive that only tunes h2o's
    /// internals, a handler never reached): `spate -t` prints them and a start logs them.
    pub warnings: Vec<ConfigError>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenKind {
    Tcp,
    /// `type: quic` or a `quic:` mapping: HTTP/3 over QUIC on UDP.
    Quic,
    /// `type: unix`: HTTP over a Unix stream socket ([`Listen::unix`]), for a balancer on the
    /// same host.
    Unix,
}

/// The socket file of a `type: unix` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixListen {
    /// `path` (required): relative to the configuration's directory. A socket file left
    /// there is replaced; any other file is an error at start.
    pub path: PathBuf,
    /// `permission` (octal, as `0660`): the socket file's mode; the umask's when unset.
    pub permission: Option<u32>,
    /// `owner`: the account the socket file is given to (its user and group), looked up at
    /// start; the server's own when unset.
    pub owner: Option<String>,
}

impl Config {
    /// Whether some path tunnels (`proxy.tunnel`): only then does HTTP/2 advertise
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441).
    pub fn has_tunnel(&self) -> bool {
        self.hosts
            .iter()
            .flat_map(|h| &h.paths)
            .flat_map(|p| p.handler.each())
            .any(|h| matches!(h, HandlerConf::Proxy(c) if c.tunnel))
    }

    /// Whether some path exposes counters (`status` or `metrics`): only then are they kept.
    pub fn wants_metrics(&self) -> bool {
        self.hosts
            .iter()
            .flat_map(|h| &h.paths)
            .flat_map(|p| p.handler.each())
            .any(|h| matches!(h, HandlerConf::Status | HandlerConf::Metrics))
    }

    /// Whether some path has `status`: only then are the requests in flight listed (its
    /// `requests` section).
    pub fn wants_requests_listed(&self) -> bool {
        self.hosts
            .iter()
            .flat_map(|h| &h.paths)
            .flat_map(|p| p.handler.each())
            .any(|h| matches!(h, HandlerConf::Status))
    }
}

/// One `listen` entry.
#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: SocketAddr,
    pub kind: ListenKind,
    /// The `ssl` mapping: certificates (per host, for SNI) and handshake settings.
    pub tls: Option<TlsConf>,
    /// The QUIC settings of a `quic` listener (`None` for TCP).
    pub quic: Option<QuicConf>,
    /// The hosts served here, as indexes into [`Config::hosts`] in file order: `None` (every
    /// host) for an address given by a global `listen`, else the hosts whose own `listen`
    /// gives it. As in h2o, a request naming none of them goes to the first.
    pub hosts: Option<Vec<usize>>,
    /// `proxy-protocol` (default OFF): each connection opens with a PROXY protocol header
    /// (version 1 or 2) naming the client.
    pub proxy_protocol: bool,
    /// `proxy-protocol-from`: the balancers allowed to send the PROXY header; a connection
    /// from any other peer is closed. Empty (the default): every peer.
    pub proxy_protocol_from: Vec<Cidr>,
    /// `sndbuf`, `rcvbuf` and `reuseport` of a TCP listener.
    pub socket: SocketOptions,
    /// A `type: unix` listener's socket file (`addr` is then `0.0.0.0:0`, and connections
    /// have that address on both ends).
    pub unix: Option<UnixListen>,
    pub at: Location,
}

/// Options of a TCP listening socket, which its connections inherit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketOptions {
    /// `sndbuf`: SO_SNDBUF in bytes (the kernel's own sizing when unset).
    pub sndbuf: Option<usize>,
    /// `rcvbuf`: SO_RCVBUF in bytes.
    pub rcvbuf: Option<usize>,
    /// `reuseport` (default OFF): another program's SO_REUSEPORT listeners may share the
    /// address (spate's workers share it in any case).
    pub reuseport: bool,
}

/// One entry of `hosts`.
#[derive(Debug, Clone)]
pub struct Host {
    /// Lowercased host name; may start with `*.` for a wildcard.
    pub name: String,
    /// The port from a `name:port` key, if any.
    pub port: Option<u16>,
    /// Paths in configuration order (the router sorts them longest prefix first).
    pub paths: Vec<PathConf>,
    /// `strict-match` (OFF): only requests naming this host get it; it is never the fallback
    /// for unknown names (which goes to the first host without it, as in h2o).
    pub strict_match: bool,
    pub at: Location,
}

/// h2o's rule: `/images` matches `/images`, `/images/...`, not `/imagesx`. `prefix` is given
/// without its trailing slash, so `/` is the empty string and matches everything.
#[inline]
pub fn prefix_matches(prefix: &str, path: &[u8]) -> bool {
    let p = prefix.as_bytes();
    p.is_empty() || (path.starts_with(p) && (path.len() == p.len() || path[p.len()] == b'/'))
}

/// One entry of `paths`, with every directive that applies to it resolved from its scopes.
#[derive(Debug, Clone)]
pub struct PathConf {
    /// The prefix as written (`/`, `/images`).
    pub prefix: String,
    pub handler: HandlerConf,
    /// `header.add` / `header.set` / ... in the order they apply (global first).
    pub headers: Vec<HeaderCommand>,
    /// `header.*` commands with h2o's `when: early` (or `all`), outer scope first: a path
    /// whose answer comes later sends a 103 Early Hints with the fields they make first.
    pub early_headers: Vec<HeaderCommand>,
    /// `expires`: seconds of `Cache-Control: max-age` given to 200 answers; `None` when off.
    pub expires: Option<u64>,
    /// `error-doc`, outer levels first (an inner level's entry for a status wins).
    pub error_docs: Vec<ErrorDoc>,
    /// `access-log`; `None` when logging is off for this path.
    pub access_log: Option<AccessLogConf>,
    /// `compress` / `gzip`; `None` when on-the-fly compression is off (the default).
    pub compress: Option<CompressConf>,
    /// `access`, `real-ip.*`, `basic-auth`: the checks before the handler; `None` when the path has none.
    pub edge: Option<EdgeConf>,
    /// `server-timing` (default OFF)
    pub server_timing: ServerTiming,
    /// `error-log.emit-request-errors` set at the host or path level (`None`: the global one)
    pub emit_request_errors: Option<bool>,
    /// `throttle-response` (OFF): an answer's `X-Traffic: N` sends it at N bytes a second
    pub throttle_response: bool,
    pub at: Location,
}

/// `compress`, `compress-minimum-size` and `gzip` in effect for a path: the quality of each
/// enabled algorithm (`None`: not offered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressConf {
    /// Brotli, 0-11.
    pub br: Option<u32>,
    /// Zstandard, 1-22 (spate's addition to h2o's set).
    pub zstd: Option<u32>,
    /// gzip, 1-9.
    pub gzip: Option<u32>,
    /// `compress-minimum-size` (100): bodies known to be shorter are sent as they are.
    pub minimum_size: u64,
}

impl CompressConf {
    pub const DEFAULT_MINIMUM_SIZE: u64 = 100;
}

/// What answers requests on a path.
#[derive(Debug, Clone)]
pub enum HandlerConf {
    File(FileConf),
    Respond(RespondConf),
    Redirect(RedirectConf),
    /// `proxy.reverse.url`: forwards requests to an HTTP/1.1 backend.
    Proxy(ProxyConf),
    /// `fastcgi.connect` / `fastcgi.spawn`: a FastCGI application answers.
    Fastcgi(FastcgiConf),
    /// `proxy.connect`: a CONNECT proxy (h2o's), tunnels to the targets its list allows.
    Connect(ConnectConf),
    /// `status: ON`: h2o's JSON status.
    Status,
    /// `metrics: ON` (spate): counters in the Prometheus text format.
    Metrics,
    /// `readiness: ON` (spate): 200, or 503 once the server drains.
    Readiness,
    /// Added by `acme` with `http-01` under [`ACME_CHALLENGE_PREFIX`] of every host: the
    /// key authorizations of the challenges under way.
    AcmeChallenge,
    /// A path with no handler (only headers or logging): answers 404.
    None,
    /// Several handlers on one path (h2o's sequence of mappings, or several handler directives
    /// in one mapping), in the order written: each is asked in turn until one answers. Only
    /// `file.dir` passes a request on, when it finds no file (as h2o's declines on ENOENT);
    /// two or more entries, none of them a `Chain`.
    Chain(Vec<HandlerConf>),
}

impl HandlerConf {
    /// The handlers this one is made of: itself, or the entries of a `Chain`.
    pub fn each(&self) -> &[HandlerConf] {
        match self {
            HandlerConf::Chain(list) => list,
            one => std::slice::from_ref(one),
        }
    }
}

/// `file.*` directives.
#[derive(Debug, Clone)]
pub struct FileConf {
    /// `file.dir`, or with `single_file` the file of `file.file`
    pub dir: PathBuf,
    /// `file.file`: every request of the path gets the file `dir` names
    pub single_file: bool,
    /// `file.index` (default `index.html`, `index.htm`, `index.txt`)
    pub index: Vec<String>,
    /// `file.mime.*`
    pub mime_types: MimeTypes,
    /// `file.etag` (default ON)
    pub etag: bool,
    /// `file.dirlisting` (default OFF)
    pub dirlisting: bool,
    /// `file.send-compressed` (default OFF): serve `.br` / `.gz` siblings when accepted
    pub send_compressed: bool,
    /// `file.send-compressed: gunzip`: a file found only as `.gz` is decompressed for a
    /// client that does not take gzip
    pub gunzip: bool,
    /// `file.custom-handler`: extensions whose files FastCGI answers.
    pub custom_handlers: Vec<CustomHandler>,
}

/// `file.mime.addtypes`, `removetypes`, `settypes` and `setdefaulttype`: the media type of a
/// file from its extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MimeTypes {
    /// Extension (without dot, lowercase) -> media type, looked at first. An empty type marks
    /// an extension `removetypes` took out: it gets the default type.
    pub overrides: Vec<(String, String)>,
    /// Whether the built-in table follows the overrides (`settypes` replaces it).
    pub builtin: bool,
    /// For extensions found nowhere, and names without one (`application/octet-stream`).
    pub default_type: String,
}

impl Default for MimeTypes {
    fn default() -> MimeTypes {
        MimeTypes {
            overrides: Vec::new(),
            builtin: true,
            default_type: "application/octet-stream".into(),
        }
    }
}

/// `respond`: a fixed answer, for health checks and the "server core" benchmark.
#[derive(Debug, Clone)]
pub struct RespondConf {
    pub status: u16,
    pub body: String,
    pub content_type: String,
    /// Methods that get the answer; any other method gets 404. Empty means every method.
    pub methods: Vec<String>,
}

/// `redirect`
#[derive(Debug, Clone)]
pub struct RedirectConf {
    pub url: String,
    /// 302 (as h2o) unless `status` is given.
    pub status: u16,
    /// `internal: ON` is not supported yet and is rejected.
    pub internal: bool,
}

/// `proxy.reverse.url` and the `proxy.*` options in effect for a path.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConf {
    /// `proxy.reverse.url`: the backends in the order written (at least one). As in h2o, the
    /// first one's URL gives the Host and path sent to whichever backend is chosen.
    pub backends: Vec<BackendConf>,
    /// `balancer` of the mapping form (round-robin).
    pub balancer: Balancer,
    /// `proxy.preserve-host` (OFF): send the client's Host instead of the URL's authority.
    pub preserve_host: bool,
    /// `proxy.emit-x-forwarded-headers` (ON)
    pub emit_x_forwarded_headers: bool,
    /// `proxy.emit-via-header` (ON)
    pub emit_via_header: bool,
    /// `proxy.emit-missing-date-header` (ON)
    pub emit_missing_date_header: bool,
    /// `proxy.preserve-x-forwarded-proto` (OFF)
    pub preserve_x_forwarded_proto: bool,
    /// proxy.header.add|append|merge|set|setifempty|unset|unsetunless: commands applied to the
    /// request sent to the backend (same type as header.*), outer scope first.
    pub headers: Vec<HeaderCommand>,
    /// `proxy.timeout.connect` (ms; default: `proxy.timeout.io`, itself 30000 ms)
    pub connect_timeout: Duration,
    /// `proxy.timeout.first_byte` (ms; default: `proxy.timeout.io`, itself 30000 ms)
    pub first_byte_timeout: Duration,
    /// `proxy.timeout.io` (30000 ms)
    pub io_timeout: Duration,
    /// `proxy.timeout.keepalive` (2000 ms); 0 disables keep-alive to the backend.
    pub keepalive_timeout: Duration,
    /// `proxy.max-buffer-size` (spate default 65536; h2o's is unlimited): the most response
    /// bytes read ahead from the backend per request.
    pub max_buffer_size: usize,
    /// `proxy.expect` (OFF): forward `Expect: 100-continue` to the backend.
    pub expect: bool,
    /// `proxy.forward.close-connection` (OFF): the backend closing its connection closes the
    /// client's HTTP/1.1 connection too.
    pub forward_close_connection: bool,
    /// spate's own `proxy.max-idle-connections` (default 1024): idle pooled connections kept per
    /// backend per worker.
    pub max_idle_connections: usize,
    /// spate's `proxy.max-connections` (default 64; 0: no cap): connections open to one
    /// backend per worker at once, idle or busy (nginx's `max_conns`, nghttpx's
    /// `backend-connections-per-host`, both per worker too). Requests beyond wait in a queue.
    pub max_connections: u32,
    /// spate's `proxy.queue.max` (default 65536): requests waiting for a connection to one
    /// backend per worker; one more gets 503 at once.
    pub queue_max: usize,
    /// spate's `proxy.queue.timeout` (ms, default 10000): how long a request waits for a
    /// connection before it gets 503.
    pub queue_timeout: Duration,
    /// `proxy.tunnel` (OFF; h2o 2.2's `proxy.websocket: ON` turns it on too): an HTTP/1.1
    /// `Upgrade` request or an HTTP/2 extended CONNECT (RFC 8441) becomes a tunnel to the
    /// backend once it answers 101.
    pub tunnel: bool,
    /// How long a tunnel may carry nothing either way: h2o 2.2's `proxy.websocket.timeout`
    /// (ms) when set, else `proxy.timeout.io`, as current h2o does.
    pub tunnel_timeout: Duration,
    /// spate's `proxy.max-response-head-size` (65536): the largest response head (status line
    /// and fields) accepted from a backend, and the largest trailer section.
    pub max_response_head_size: usize,
    /// spate's `proxy.max-response-headers` (128): the most fields in a backend's response head.
    pub max_response_headers: usize,
    /// `proxy.proxy-protocol` (OFF): a PROXY protocol v1 line with the client's addresses
    /// starts every connection to the backend.
    pub proxy_protocol: bool,
    /// spate's `proxy.max-fails` (3; 0 disables): consecutive connect or request failures that
    /// take a backend of several out of service for `fail_timeout`.
    pub max_fails: u32,
    /// spate's `proxy.fail-timeout` (10000 ms): how long a failing backend stays out before one
    /// trial request.
    pub fail_timeout: Duration,
    /// spate's `proxy.health-check` (none): active probes of every backend.
    pub health_check: Option<HealthCheck>,
    /// `proxy.http2.ratio` (0): the percentage of requests sent over HTTP/2 (over TLS by ALPN;
    /// in cleartext only at 100 with `proxy.http2.force-cleartext`).
    pub http2_ratio: u8,
    /// `proxy.http2.max-concurrent-streams` (100): requests in flight on one HTTP/2 connection
    /// to the backend (less if the backend's SETTINGS say so).
    pub http2_max_concurrent_streams: u32,
    /// `proxy.http2.force-cleartext` (OFF): HTTP/2 with prior knowledge to an `http://` URL.
    pub http2_force_cleartext: bool,
    /// spate's `proxy.cache` (OFF): the HTTP cache in front of the backends.
    pub cache: Option<Box<CacheConf>>,
    /// `send-server-name: preserve` (global): the backend's Server field goes on to the client
    /// (otherwise it is dropped, as h2o drops it).
    pub preserve_server_header: bool,
    /// `send-informational` (global, `except-h1`): which clients a backend's interim
    /// responses (103 Early Hints, 102) go on to.
    pub send_informational: SendInformational,
    /// spate's `proxy.max-informational-responses` (16): the most interim (1xx) responses a
    /// backend may send before its final one; one more is a 502.
    pub max_informational: u32,
    /// `reproxy` (OFF): a backend's `X-Reproxy-URL` answer is fetched and sent instead
    pub reproxy: bool,
    /// `max-delegations` (5): how many `X-Reproxy-URL`s one request may follow
    pub max_delegations: u32,
}

/// h2o's `send-informational`: the clients that get interim (1xx) responses, a backend's or
/// those `header.*` commands with `when: early` make. Never HTTP/1.0 (RFC 9110 15.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendInformational {
    /// HTTP/2 and HTTP/3 clients (h2o's default: HTTP/1.1 clients may not expect them).
    #[default]
    ExceptH1,
    None,
    All,
}

/// One backend of `proxy.reverse.url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConf {
    pub url: UpstreamUrl,
    /// 1 to 256 (h2o's range), 1 unless given.
    pub weight: u32,
    /// For an `https://` URL: `proxy.ssl.verify-peer` (ON), `proxy.ssl.cafile` (the system's
    /// roots) and `proxy.ssl.session-cache` (ON), with the URL's host as the name to verify.
    pub tls: Option<UpstreamTls>,
}

/// `proxy.reverse.url: {backends: [...], balancer: ...}`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Balancer {
    /// Smooth weighted round-robin: weights interleave (5,1,1 gives a a b a c a a).
    RoundRobin,
    /// Fewest requests in flight in this worker, relative to weight.
    LeastConn,
}

/// `proxy.health-check`: what an active probe sends and expects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HealthCheck {
    /// Request target of the probe (`GET`), `/` unless given.
    pub path: String,
    pub interval: Duration,
    /// For the whole probe: connect, request, status line.
    pub timeout: Duration,
    /// The status a healthy backend answers.
    pub status: u16,
    /// Consecutive passing probes that put a backend back in service.
    pub rise: u32,
    /// Consecutive failing probes that take it out.
    pub fall: u32,
}

impl HealthCheck {
    pub const DEFAULT: HealthCheck = HealthCheck {
        path: String::new(),
        interval: Duration::from_millis(5_000),
        timeout: Duration::from_millis(2_000),
        status: 200,
        rise: 2,
        fall: 3,
    };
}

/// The TLS client settings of an `https://` backend; `prepare` builds them into a rustls
/// configuration shared by every worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// Which of the TLS clients `prepare` builds is this backend's: each `https://` backend
    /// of the file has its own, numbered from 0 in the order they were read.
    pub id: usize,
    /// `proxy.ssl.verify-peer` (ON).
    pub verify_peer: bool,
    /// `proxy.ssl.cafile`; `None` for the system's roots.
    pub cafile: Option<PathBuf>,
    /// `proxy.ssl.session-cache`: entries of the session cache; `None` when OFF.
    pub session_cache: Option<usize>,
    /// The `proxy.reverse.url` naming the backend.
    pub at: Location,
}

impl ProxyConf {
    /// h2o's defaults (spate's for `max_buffer_size` and `max_idle_connections`) for `upstream`.
    pub fn new(upstream: UpstreamUrl) -> ProxyConf {
        ProxyConf {
            backends: vec![BackendConf {
                url: upstream,
                weight: 1,
                tls: None,
            }],
            balancer: Balancer::RoundRobin,
            preserve_host: false,
            emit_x_forwarded_headers: true,
            emit_via_header: true,
            emit_missing_date_header: true,
            preserve_x_forwarded_proto: false,
            headers: Vec::new(),
            connect_timeout: ProxyConf::DEFAULT_IO_TIMEOUT,
            first_byte_timeout: ProxyConf::DEFAULT_IO_TIMEOUT,
            io_timeout: ProxyConf::DEFAULT_IO_TIMEOUT,
            keepalive_timeout: ProxyConf::DEFAULT_KEEPALIVE_TIMEOUT,
            max_buffer_size: ProxyConf::DEFAULT_MAX_BUFFER_SIZE,
            expect: false,
            forward_close_connection: false,
            max_idle_connections: ProxyConf::DEFAULT_MAX_IDLE_CONNECTIONS,
            max_connections: 64,
            queue_max: 65536,
            queue_timeout: Duration::from_secs(10),
            tunnel: false,
            tunnel_timeout: ProxyConf::DEFAULT_IO_TIMEOUT,
            max_response_head_size: ProxyConf::DEFAULT_MAX_RESPONSE_HEAD_SIZE,
            max_response_headers: ProxyConf::DEFAULT_MAX_RESPONSE_HEADERS,
            proxy_protocol: false,
            max_fails: ProxyConf::DEFAULT_MAX_FAILS,
            fail_timeout: ProxyConf::DEFAULT_FAIL_TIMEOUT,
            health_check: None,
            http2_ratio: 0,
            http2_max_concurrent_streams: ProxyConf::DEFAULT_HTTP2_MAX_CONCURRENT_STREAMS,
            http2_force_cleartext: false,
            cache: None,
            preserve_server_header: false,
            send_informational: SendInformational::ExceptH1,
            max_informational: ProxyConf::DEFAULT_MAX_INFORMATIONAL,
            reproxy: false,
            max_delegations: 5,
        }
    }

    /// Whether requests may go over HTTP/2 to a backend (`tls`: an `https://` one): by ALPN
    /// over TLS for a `ratio` above 0; in cleartext only at 100 with `force_cleartext`, as h2o.
    pub fn speaks_http2(tls: bool, ratio: u8, force_cleartext: bool) -> bool {
        match tls {
            true => ratio > 0,
            false => force_cleartext && ratio == 100,
        }
    }

    /// The first backend's URL: the Host and path sent, and what a `Location` to rewrite names.
    pub fn url(&self) -> &UpstreamUrl {
        // The loader refuses an empty list.
        &self.backends[0].url
    }

    pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_millis(30_000);
    pub const DEFAULT_MAX_INFORMATIONAL: u32 = 16;
    pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_millis(2_000);
    pub const DEFAULT_MAX_BUFFER_SIZE: usize = 64 * 1024;
    pub const DEFAULT_MAX_IDLE_CONNECTIONS: usize = 1024;
    pub const DEFAULT_MAX_RESPONSE_HEAD_SIZE: usize = 64 * 1024;
    pub const DEFAULT_MAX_RESPONSE_HEADERS: usize = 128;
    /// The most `proxy.max-response-headers` may be (parser slots on the stack).
    pub const MAX_RESPONSE_HEADERS_LIMIT: usize = 512;
    pub const DEFAULT_MAX_FAILS: u32 = 3;
    pub const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_millis(10_000);
    pub const DEFAULT_HTTP2_MAX_CONCURRENT_STREAMS: u32 = 100;
    /// h2o's `proxy.ssl.session-cache: ON`.
    pub const DEFAULT_SSL_SESSION_CACHE: usize = 4096;
}

/// The backend of `proxy.reverse.url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    pub addr: UpstreamAddr,
    /// The URL's authority as written (`127.0.0.1:3001`, `app.internal`, `[::1]:8080`): the Host
    /// sent when preserve-host is OFF. For a unix socket URL it is `[unix:/path]`, as h2o sends.
    pub authority: String,
    /// The URL's path, `/` when empty (`http://x:1` -> `/`, `http://x/app/` -> `/app/`).
    pub path: String,
    /// `https://`: TLS to the backend (default port 443).
    pub tls: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UpstreamAddr {
    /// Host name or IP literal and port (default 80); names are resolved when connecting.
    /// The host is lowercased; an IPv6 literal is given without its brackets (`::1`).
    Tcp { host: String, port: u16 },
    /// `http://[unix:/path/to/socket]/path`; a relative socket path is resolved against the
    /// configuration file's directory.
    Unix(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderOp {
    Add,
    Append,
    Merge,
    Set,
    SetIfEmpty,
    Unset,
    /// Removes every field but the named ones: see [`HeaderCommand::kept_names`].
    UnsetUnless,
    /// `cookie.unset` (h2o): removes the named cookies from `Cookie` fields; the names are
    /// listed in the value, as `UnsetUnless`'s.
    CookieUnset,
    /// `cookie.unsetunless` (h2o): removes every cookie but the named ones.
    CookieUnsetUnless,
}

/// One `header.*` (or `proxy.header.*`) command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderCommand {
    pub op: HeaderOp,
    /// Empty for `UnsetUnless`.
    pub name: String,
    /// Empty for `Unset`; for `UnsetUnless`, the names to keep separated by `, `.
    pub value: String,
}

impl HeaderCommand {
    /// The field names an `UnsetUnless` command keeps (header names hold no comma).
    pub fn kept_names(&self) -> impl Iterator<Item = &str> {
        self.value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
    }
}

/// Where a log goes: a file, or, as in h2o, `| command`: the standard input of a command
/// run by `/bin/sh -c` (`rotatelogs`, `logger`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LogTarget {
    File(PathBuf),
    Pipe(String),
}

impl std::fmt::Display for LogTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogTarget::File(p) => write!(f, "{}", p.display()),
            LogTarget::Pipe(command) => write!(f, "| {command}"),
        }
    }
}

/// One status of an `error-doc` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorDoc {
    pub status: u16,
    /// A path on the same host, served by `file.dir` or `respond` there.
    pub url: String,
    pub at: Location,
}

/// `access-log`
#[derive(Debug, Clone)]
pub struct AccessLogConf {
    pub target: LogTarget,
    /// The Apache-style format (default: combined, as in h2o).
    pub format: String,
    /// `escape: apache` (default) or `json`.
    pub escape: Escape,
    /// spate's `buffer-size` (bytes; default 0): lines gather per worker up to this and are
    /// written at least once a second. 0 writes each line at the end of its request, as h2o
    /// and nginx do unless told to buffer.
    pub buffer_size: usize,
    /// Where the format was given (the `access-log` directive's line for the default).
    pub at: Location,
}

/// The same log whichever line wrote it: paths with equal logs share one writer.
impl PartialEq for AccessLogConf {
    fn eq(&self, o: &AccessLogConf) -> bool {
        self.target == o.target
            && self.format == o.format
            && self.escape == o.escape
            && self.buffer_size == o.buffer_size
    }
}

impl Eq for AccessLogConf {}

/// How unsafe bytes in values are written (h2o's `access-log: {escape: ...}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Escape {
    /// `\xNN`; a missing value is `-`.
    #[default]
    Apache,
    /// `\u00NN`, `\"` and `\\`, so lines are JSON when the format is; a missing value is
    /// `null` (without the quotes around it in the format).
    Json,
}

/// HTTP/1 directives.
#[derive(Debug, Clone)]
pub struct Http1 {
    /// `http1-request-timeout`: the whole request head must arrive within this (default 10 s).
    pub request_timeout: Duration,
    /// `http1-request-io-timeout`: longest silence while reading a request (default 5 s).
    pub request_io_timeout: Duration,
    /// `http1-keepalive-timeout` (spate): idle time between requests (default 10 s, as h2o).
    pub keepalive_timeout: Duration,
    /// `http1-upgrade-to-http2` (default ON once HTTP/2 lands).
    pub upgrade_to_http2: bool,
    /// `send-timeout` (spate, seconds): longest wait for a peer to accept more response
    /// bytes (default 60 s, as nginx's send_timeout).
    pub send_timeout: Duration,
    /// `http1-idle-park-delay` (spate, milliseconds; default 1000, 0 or OFF: never): a plain
    /// TCP keep-alive connection idle this long is parked, its task ended, until it is readable.
    pub idle_park_delay: Duration,
    /// `http1-lane` (spate; default ON): plain-TCP keep-alive connections wait between
    /// requests in the worker's epoll lane, which answers inline requests without a task.
    pub lane: bool,
}

/// HTTP/2 directives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2 {
    /// `http2-max-concurrent-requests-per-connection` (default 100, as h2o): requests of one
    /// connection processed at once.
    pub max_concurrent_requests_per_connection: u32,
    /// `http2-max-streams` (spate): SETTINGS_MAX_CONCURRENT_STREAMS advertised (default 100).
    pub max_streams: u32,
    /// `http2-input-window-size` (default 16777216 bytes, as h2o): per-stream receive window.
    pub input_window_size: u32,
    /// `http2-idle-timeout` (seconds in the file; default 10 s).
    pub idle_timeout: Duration,
    /// `http2-graceful-shutdown-timeout` (seconds in the file; default 0 = wait indefinitely).
    pub graceful_shutdown_timeout: Duration,
    /// `http2-header-timeout` (spate, seconds; default 10 s): a header block (HEADERS and its
    /// CONTINUATION frames) must be complete within this (CONTINUATION flood).
    pub header_timeout: Duration,
    /// `http2-max-resets-per-second` (spate; default 200): stream resets, sent by the client
    /// or provoked by it, one connection may cause per second (Rapid Reset, MadeYouReset).
    pub max_resets_per_second: u32,
    /// `http2-max-control-frames-per-second` (spate; default 1000): SETTINGS, PING, PRIORITY,
    /// empty DATA and CONTINUATION frames per second (floods).
    pub max_control_frames_per_second: u32,
    /// `http2-max-write-size` (spate; default 512 KiB): whole answers gathered into one write
    /// of a connection; streamed bodies stop at 128 KiB or this, whichever is less.
    pub max_write_size: usize,
}

impl Http2 {
    /// 512 KiB: the HTTP/2 engine's own default, which a test in `server::prepare` keeps equal
    /// (config imports nothing of the engine).
    pub const DEFAULT_MAX_WRITE_SIZE: usize = 512 * 1024;
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            max_concurrent_requests_per_connection: 100,
            max_streams: 100,
            input_window_size: 16_777_216,
            idle_timeout: Duration::from_secs(10),
            graceful_shutdown_timeout: Duration::ZERO,
            header_timeout: Duration::from_secs(10),
            max_resets_per_second: 200,
            max_control_frames_per_second: 1000,
            max_write_size: Http2::DEFAULT_MAX_WRITE_SIZE,
        }
    }
}

/// h2o's cap on a request's header block (`H2O_MAX_REQLEN`: 8192 + 4096 per field of its 100):
/// HTTP/2 HEADERS and CONTINUATION together, an HTTP/3 HEADERS frame.
pub const H2O_MAX_REQLEN: usize = 8192 + 4096 * 100;

/// The decoded header list a block of [`H2O_MAX_REQLEN`] bytes can carry, so that what h2o
/// takes over HTTP/2 and HTTP/3 spate takes too: Huffman decodes to at most 8/5 of its length
/// (the shortest code is 5 bits), plus 32 bytes per field for 100 fields.
pub const H2O_FIELD_SECTION: usize = H2O_MAX_REQLEN * 8 / 5 + 32 * 100;

/// Limits a peer can push on.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `limit-request-body` (default 1 GiB, as h2o).
    pub request_body: u64,
    /// `max-request-head-size` (spate): an HTTP/1 request line plus headers (default 64 KiB).
    pub request_head: usize,
    /// `max-request-target-size` (spate): the request target (default 8 KiB).
    pub request_target: usize,
    /// `max-request-headers` (spate): number of header fields (default 100).
    pub request_headers: usize,
    /// `max-request-field-section-size` (spate): an HTTP/2 or HTTP/3 request's decoded header
    /// list, name + value + 32 bytes per field (default [`H2O_FIELD_SECTION`]).
    pub request_field_section: usize,
    /// `max-pipelined-requests` (spate): responses queued for one HTTP/1.1 connection before
    /// the server stops reading from it (default 32).
    pub pipelined_requests: usize,
}

impl Default for Http1 {
    fn default() -> Self {
        Http1 {
            request_timeout: Duration::from_secs(10),
            request_io_timeout: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(10),
            upgrade_to_http2: true,
            send_timeout: Duration::from_secs(60),
            idle_park_delay: Duration::from_secs(1),
            lane: true,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_body: 1 << 30,
            request_head: 64 * 1024,
            request_target: 8 * 1024,
            request_headers: 100,
            request_field_section: H2O_FIELD_SECTION,
            pipelined_requests: 32,
        }
    }
}

impl Default for FileConf {
    fn default() -> Self {
        FileConf {
            dir: PathBuf::new(),
            single_file: false,
            index: vec!["index.html".into(), "index.htm".into(), "index.txt".into()],
            mime_types: MimeTypes::default(),
            etag: true,
            dirlisting: false,
            send_compressed: false,
            gunzip: false,
            custom_handlers: Vec::new(),
        }
    }
}

/// The default Server header value.
pub fn default_server_name() -> String {
    format!("spate/{}", env!("CARGO_PKG_VERSION"))
}

impl Config {
    /// Every distinct access log destination of every path.
    pub fn access_log_targets(&self) -> Vec<&LogTarget> {
        let mut targets: Vec<&LogTarget> = Vec::new();
        let all = self.hosts.iter().flat_map(|h| &h.paths);
        for log in all.filter_map(|p| p.access_log.as_ref()) {
            if !targets.contains(&&log.target) {
                targets.push(&log.target);
            }
        }
        targets
    }

    /// Defaults for everything, with no listeners and no hosts.
    pub fn empty() -> Config {
        Config {
            listeners: Vec::new(),
            hosts: Vec::new(),
            num_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            max_connections: 1024,
            server_name: default_server_name(),
            send_server_name: true,
            error_log: None,
            pid_file: None,
            tcp_fastopen: 4096,
            file_memory_cache_size: FILE_MEMORY_CACHE_SIZE,
            file_memory_cache_max_file: FILE_MEMORY_CACHE_MAX_FILE,
            user: None,
            emit_request_errors: true,
            http1: Http1::default(),
            http2: Http2::default(),
            http3: Http3::default(),
            limits: Limits::default(),
            shutdown_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            session_resumption: SessionResumption::default(),
            proxy_ca_files: Vec::new(),
            acme: None,
            send_informational: SendInformational::ExceptH1,
            warnings: Vec::new(),
        }
    }

    /// The configuration of `spate serve DIR`: one host serving `dir` on `addr`, directory
    /// listings on, no access log.
    pub fn serve_dir(dir: &Path, addr: SocketAddr) -> Config {
        let at = Location {
            file: Arc::from("<command line>"),
            line: 0,
        };
        let mut c = Config::empty();
        c.listeners.push(Listen {
            addr,
            kind: ListenKind::Tcp,
            tls: None,
            quic: None,
            hosts: None,
            proxy_protocol: false,
            proxy_protocol_from: Vec::new(),
            socket: SocketOptions::default(),
            unix: None,
            at: at.clone(),
        });
        c.hosts.push(Host {
            name: "default".into(),
            port: None,
            paths: vec![PathConf {
                prefix: "/".into(),
                handler: HandlerConf::File(FileConf {
                    dir: dir.to_path_buf(),
                    dirlisting: true,
                    ..FileConf::default()
                }),
                headers: Vec::new(),
                early_headers: Vec::new(),
                expires: None,
                error_docs: Vec::new(),
                access_log: None,
                compress: None,
                edge: None,
                server_timing: ServerTiming::Off,
                emit_request_errors: None,
                throttle_response: false,
                at: at.clone(),
            }],
            strict_match: false,
            at,
        });
        c
    }
}

mod acme;
mod cache;
mod compress;
mod connect;
mod directives;
mod edge;
mod error_doc;
mod fastcgi;
mod file;
mod headers;
mod hosts;
mod http;
mod internals;
mod listen;
mod load;
mod log;
mod paths;
mod proxy;
mod quic;
mod redirect;
mod respond;
mod server_timing;
mod tls;
mod value;
mod yaml;

pub use acme::{AcmeChallenge, AcmeConf, AcmeKeyType, Eab, OnDemandConf, ACME_CHALLENGE_PREFIX};
pub use cache::{CacheConf, DiskConf};
pub use connect::{AclRule, ConnectConf};
pub use edge::{
    any_contains, AccessRule, AuthRequestConf, BasicAuthConf, Cidr, EdgeConf, FleetZone,
    LimitConnConf, LimitConnZone, LimitKey, LimitReqConf, LimitZone, RealIpConf, RealIpHeader,
};
pub use fastcgi::{CustomHandler, FastcgiConf, Spawn};
pub use load::{load_file, load_str};
pub use proxy::parse_url as parse_upstream_url;
pub use quic::{Http3, QuicConf, Retry};
pub use server_timing::ServerTiming;
pub use tls::{
    CacheStore, Identity, KeyPair, SessionResumption, StoreServer, TicketStore, TlsConf,
    TlsVersion, KX_GROUPS, TLS12_SUITES, TLS13_SUITES,
};
