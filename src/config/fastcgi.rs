//! `fastcgi.*` and `file.custom-handler`: where a FastCGI application listens (or the
//! command spate starts for it) and how its connections are kept, in h2o's syntax.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{Location, UpstreamAddr};
use std::path::PathBuf;
use std::time::Duration;

/// A FastCGI application and how requests reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastcgiConf {
    /// `fastcgi.connect`, or the socket of the `fastcgi.spawn` command.
    pub addr: UpstreamAddr,
    /// `fastcgi.spawn`: the command spate starts (once per process) listening on `addr`.
    pub spawn: Option<Spawn>,
    /// `fastcgi.timeout.io` (30 s): connecting, each write and each read.
    pub timeout_io: Duration,
    /// `fastcgi.timeout.keepalive`: how long an idle connection stays in the worker's pool;
    /// 0 is a connection per request. Unset: 2 s for `fastcgi.connect` (h2o closes each
    /// connection; the kernel's TCP open and close was most of a small page's cost) and 0
    /// for `fastcgi.spawn` (php-cgi serves one connection at a time per child).
    pub keepalive: Duration,
    /// `fastcgi.max-connections` (16): connections a worker opens to the application at
    /// most; more requests wait for one. Only with keep-alive (the pool is what it bounds).
    pub max_connections: usize,
    /// `fastcgi.send-delegated-uri` (OFF).
    pub send_delegated_uri: bool,
    /// `fastcgi.document_root`: DOCUMENT_ROOT (and PATH_TRANSLATED) when set.
    pub document_root: Option<String>,
    /// `fastcgi.max-request-buffer` (16 MiB): a request body of unknown length (chunked) is
    /// read whole before it is sent, to give CONTENT_LENGTH; longer ones get 413.
    pub max_request_buffer: u64,
    /// `fastcgi.max-response-head-size` (64 KiB): the CGI header fields of an answer; a
    /// longer head gets 502.
    pub max_response_head: usize,
    pub at: Location,
}

/// `fastcgi.spawn`: `/bin/sh -c COMMAND` with the listening socket as its standard input, as
/// FastCGI applications expect (php-cgi, fcgiwrap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawn {
    pub command: String,
    /// `user`: the account it runs as (the server's own by default).
    pub user: Option<String>,
}

/// `file.custom-handler`: files with these extensions under a `file.dir` go to FastCGI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomHandler {
    /// Lowercased, without the dot; empty for `default` (files without an extension).
    pub extensions: Vec<String>,
    pub fastcgi: FastcgiConf,
}

/// A `file.custom-handler` as read: built for each path it applies to, with that path's
/// `fastcgi.*` options under its own (h2o's extension level is inside the path level).
#[derive(Debug, Clone)]
pub(super) struct PendingCustom {
    extensions: Vec<String>,
    target: Target,
    /// The `fastcgi.*` options given inside the mapping.
    own: FastcgiOpts,
    line: u32,
}

impl PendingCustom {
    pub fn build(&self, ctx: &mut Ctx, outer: &FastcgiOpts) -> CustomHandler {
        let opts = outer.under(&self.own);
        CustomHandler {
            extensions: self.extensions.clone(),
            fastcgi: opts.build(ctx, self.target.clone(), self.line),
        }
    }
}

/// `fastcgi.*` options as set so far at some level; `None` means "not set here or above".
#[derive(Debug, Clone, Default)]
pub(super) struct FastcgiOpts {
    timeout_io: Option<Duration>,
    keepalive: Option<Duration>,
    max_connections: Option<usize>,
    send_delegated_uri: Option<bool>,
    document_root: Option<String>,
    max_request_buffer: Option<u64>,
    max_response_head: Option<usize>,
}

/// The handler directives (`fastcgi.connect` or `fastcgi.spawn`) as read.
#[derive(Debug, Clone)]
pub(super) enum Target {
    Connect(UpstreamAddr),
    /// The command, and the socket it gets (one per directive, however many paths it serves).
    Spawn(Spawn, PathBuf),
}

impl FastcgiOpts {
    /// Applies one inherited `fastcgi.*` option. Returns false when `name` is not one.
    pub fn apply(&mut self, ctx: &mut Ctx, name: &str, v: &Node) -> bool {
        match name {
            "fastcgi.timeout.io" => set(&mut self.timeout_io, ctx.millis(name, v)),
            "fastcgi.timeout.keepalive" => set(&mut self.keepalive, ctx.millis(name, v)),
            "fastcgi.max-connections" => set(&mut self.max_connections, ctx.int(name, v, 1)),
            "fastcgi.send-delegated-uri" => set(&mut self.send_delegated_uri, ctx.bool(name, v)),
            "fastcgi.document_root" => set(&mut self.document_root, ctx.string(name, v)),
            "fastcgi.max-request-buffer" => set(&mut self.max_request_buffer, ctx.uint(name, v, 0)),
            "fastcgi.max-response-head-size" => {
                set(&mut self.max_response_head, ctx.int(name, v, 256))
            }
            _ => return false,
        }
        true
    }

    /// These options with those `inner` sets taking precedence.
    fn under(&self, inner: &FastcgiOpts) -> FastcgiOpts {
        FastcgiOpts {
            timeout_io: inner.timeout_io.or(self.timeout_io),
            keepalive: inner.keepalive.or(self.keepalive),
            max_connections: inner.max_connections.or(self.max_connections),
            send_delegated_uri: inner.send_delegated_uri.or(self.send_delegated_uri),
            document_root: inner.document_root.clone().or(self.document_root.clone()),
            max_request_buffer: inner.max_request_buffer.or(self.max_request_buffer),
            max_response_head: inner.max_response_head.or(self.max_response_head),
        }
    }

    pub fn build(&self, ctx: &mut Ctx, target: Target, line: u32) -> FastcgiConf {
        let spawned = matches!(target, Target::Spawn(..));
        let (addr, spawn) = match target {
            Target::Connect(a) => (a, None),
            Target::Spawn(s, socket) => (UpstreamAddr::Unix(socket), Some(s)),
        };
        FastcgiConf {
            addr,
            spawn,
            timeout_io: self.timeout_io.unwrap_or(Duration::from_secs(30)),
            keepalive: self.keepalive.unwrap_or(if spawned {
                Duration::ZERO
            } else {
                DEFAULT_KEEPALIVE
            }),
            max_connections: self.max_connections.unwrap_or(16),
            send_delegated_uri: self.send_delegated_uri.unwrap_or(false),
            document_root: self.document_root.clone(),
            max_request_buffer: self.max_request_buffer.unwrap_or(16 << 20),
            max_response_head: self.max_response_head.unwrap_or(64 << 10),
            at: ctx.at(line),
        }
    }
}

/// `fastcgi.timeout.keepalive` of a `fastcgi.connect` that does not set it. Short: an idle
/// connection holds one of the application's workers, which another spate worker may need.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(2);

fn set<T>(slot: &mut Option<T>, value: Option<T>) {
    if value.is_some() {
        *slot = value;
    }
}

/// The socket a spawned application listens on: one per `fastcgi.spawn` of the file, in the
/// temporary directory, named for this process so that two servers never share one.
fn spawn_socket(ctx: &mut Ctx) -> PathBuf {
    let n = ctx.fastcgi_spawns;
    ctx.fastcgi_spawns += 1;
    std::env::temp_dir().join(format!("spate-fcgi.{}.{n}.sock", std::process::id()))
}

/// `fastcgi.connect`: a port (on 127.0.0.1), `host:port`, or h2o's mapping
/// `{host: H, port: P}` / `{type: unix, port: /path}`.
pub(super) fn connect(ctx: &mut Ctx, v: &Node) -> Option<Target> {
    const NAME: &str = "fastcgi.connect";
    if let Some(entries) = v.as_map() {
        let known = ctx.known_keys(NAME, entries, &["host", "port", "type"]);
        let get = |k: &str| known.iter().find(|(key, _)| *key == k).map(|(_, n)| *n);
        let unix = match get("type").map(|t| t.as_str()) {
            None | Some(Some("tcp")) => false,
            Some(Some("unix")) => true,
            Some(_) => {
                let t = get("type").map(show).unwrap_or_default();
                ctx.error(v.line, format!("{NAME}: type is tcp or unix, got {t}"));
                return None;
            }
        };
        let Some(port) = get("port") else {
            ctx.error(v.line, format!("{NAME}: port is required"));
            return None;
        };
        if unix {
            return ctx
                .path(NAME, port)
                .map(|p| Target::Connect(UpstreamAddr::Unix(p)));
        }
        let host = match get("host") {
            Some(h) => ctx.string(NAME, h)?,
            None => "127.0.0.1".to_owned(),
        };
        let port = ctx.int::<u16>(NAME, port, 1)?;
        return Some(Target::Connect(tcp(host, port)));
    }
    let text = v.as_str().unwrap_or_default();
    if let Ok(port) = text.parse::<u16>() {
        if port > 0 {
            return Some(Target::Connect(tcp("127.0.0.1".into(), port)));
        }
    }
    if let Some((host, port)) = text.rsplit_once(':') {
        if let (false, Ok(port @ 1..)) = (host.is_empty(), port.parse::<u16>()) {
            return Some(Target::Connect(tcp(host.to_owned(), port)));
        }
    }
    if let Some(path) = text.strip_prefix("unix:") {
        let node = Node {
            line: v.line,
            kind: super::yaml::NodeKind::Scalar(super::yaml::Scalar {
                value: path.into(),
                quoted: true,
            }),
        };
        return ctx
            .path(NAME, &node)
            .map(|p| Target::Connect(UpstreamAddr::Unix(p)));
    }
    ctx.error(
        v.line,
        format!(
            "{NAME} expects a port, host:port, unix:/path or a mapping (host, port, type), got {}",
            show(v)
        ),
    );
    None
}

fn tcp(host: String, port: u16) -> UpstreamAddr {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    UpstreamAddr::Tcp {
        host: host.to_ascii_lowercase(),
        port,
    }
}

/// `fastcgi.spawn: COMMAND` or `{command: COMMAND, user: NAME}`.
pub(super) fn spawn(ctx: &mut Ctx, v: &Node) -> Option<Target> {
    const NAME: &str = "fastcgi.spawn";
    if let Some(entries) = v.as_map() {
        let known = ctx.known_keys(NAME, entries, &["command", "user"]);
        let get = |k: &str| known.iter().find(|(key, _)| *key == k).map(|(_, n)| *n);
        let Some(command) = get("command") else {
            ctx.error(v.line, format!("{NAME}: command is required"));
            return None;
        };
        let command = ctx.string(NAME, command)?;
        let user = match get("user") {
            Some(u) => Some(ctx.string(NAME, u)?),
            None => None,
        };
        return Some(Target::Spawn(Spawn { command, user }, spawn_socket(ctx)));
    }
    let command = ctx.string(NAME, v)?;
    let spawn = Spawn {
        command,
        user: None,
    };
    Some(Target::Spawn(spawn, spawn_socket(ctx)))
}

/// `file.custom-handler: {extension: .php, fastcgi.connect: ..., fastcgi.*: ...}` (h2o's
/// extension level).
pub(super) fn custom_handler(ctx: &mut Ctx, v: &Node) -> Option<PendingCustom> {
    const NAME: &str = "file.custom-handler";
    let entries = ctx.map(NAME, v)?;
    let mut opts = FastcgiOpts::default();
    let mut extensions = None;
    let mut target = None;
    for (k, val) in entries {
        let Some(key) = k.as_str() else {
            ctx.error(k.line, format!("{NAME} expects string keys"));
            continue;
        };
        match key {
            "extension" => extensions = custom_extensions(ctx, val),
            "fastcgi.connect" => target = connect(ctx, val).map(|t| (t, k.line)),
            "fastcgi.spawn" => target = spawn(ctx, val).map(|t| (t, k.line)),
            _ if opts.apply(ctx, key, val) => {}
            _ => ctx.error(
                k.line,
                format!("{NAME}: {key} cannot be used here (extension, fastcgi.* are)"),
            ),
        }
    }
    let Some(extensions) = extensions else {
        ctx.error(v.line, format!("{NAME}: extension is required"));
        return None;
    };
    let Some((target, line)) = target else {
        ctx.error(
            v.line,
            format!("{NAME}: a handler is required (fastcgi.connect or fastcgi.spawn)"),
        );
        return None;
    };
    Some(PendingCustom {
        extensions,
        target,
        own: opts,
        line,
    })
}

/// `.php`, `[.php, .php5]`, or `default` (files without an extension).
fn custom_extensions(ctx: &mut Ctx, v: &Node) -> Option<Vec<String>> {
    let list = ctx.strings("file.custom-handler: extension", v)?;
    let mut out = Vec::with_capacity(list.len());
    for e in list {
        match e.strip_prefix('.') {
            _ if e == "default" => out.push(String::new()),
            Some(bare) if !bare.is_empty() && !bare.contains('/') => {
                out.push(bare.to_ascii_lowercase())
            }
            _ => {
                ctx.error(
                    v.line,
                    format!(
                        "file.custom-handler: extension \"{e}\" must start with a dot (or be default)"
                    ),
                );
                return None;
            }
        }
    }
    Some(out)
}
