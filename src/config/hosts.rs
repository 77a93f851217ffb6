//! `hosts` and `paths`: the scope tree, and the options inherited down it.
//!
//! At each level the plain directives are read first and `hosts` / `paths` after them (h2o's
//! "deferred" directives), so an inherited option applies to the hosts and paths below it
//! wherever it is written in the mapping.

use super::compress::CompressOpts;
use super::directives::{self, Level};
use super::edge::EdgeOpts;
use super::fastcgi::{self, FastcgiOpts};
use super::file::FileOpts;
use super::listen::Listeners;
use super::proxy::{self, ProxyOpts};
use super::value::{show, Ctx};
use super::yaml::Node;
use super::{error_doc, headers, internals, log, redirect, respond};
use super::{AccessLogConf, ErrorDoc, HandlerConf, HeaderCommand, Host, PathConf};

/// Options that a level passes on to the levels inside it.
#[derive(Debug, Clone, Default)]
pub(super) struct Scoped {
    file: FileOpts,
    proxy: ProxyOpts,
    fastcgi: FastcgiOpts,
    /// Outer commands first; each level appends its own.
    headers: Vec<HeaderCommand>,
    /// `header.*` commands with `when: early` or `all`, outer first.
    early_headers: Vec<HeaderCommand>,
    /// `expires` in seconds; `None` when OFF or not set.
    expires: Option<u64>,
    error_docs: Vec<ErrorDoc>,
    access_log: Option<AccessLogConf>,
    compress: CompressOpts,
    edge: EdgeOpts,
    server_timing: super::ServerTiming,
    /// `error-log.emit-request-errors` of a host or path; the global one is the server's.
    emit_request_errors: Option<bool>,
    throttle_response: bool,
}

impl Scoped {
    /// Applies a directive that every level may set. Returns false when `name` is not one.
    pub fn apply(&mut self, ctx: &mut Ctx, name: &str, v: &Node) -> bool {
        if name == "stash"
            || directives::off_only(ctx, name, v)
            || internals::apply(ctx, name, v)
            || self.file.apply(ctx, name, v)
            || self.proxy.apply(ctx, name, v)
            || self.fastcgi.apply(ctx, name, v)
            || self.compress.apply(ctx, name, v)
            || self.edge.apply(ctx, name, v)
            || headers::apply(ctx, name, v, &mut self.headers, &mut self.early_headers)
        {
            return true;
        }
        match name {
            "file.custom-handler" => {
                if let Some(h) = fastcgi::custom_handler(ctx, v) {
                    self.file.custom_handlers.push(h);
                }
            }
            "access-log" => {
                if let Some(l) = log::access_log(ctx, v) {
                    self.access_log = Some(l);
                }
            }
            "error-doc" => error_doc::parse(ctx, v, &mut self.error_docs),
            "expires" => {
                if let Some(e) = expires(ctx, v) {
                    self.expires = e;
                }
            }
            "error-log.emit-request-errors" => {
                if let Some(b) = ctx.bool(name, v) {
                    self.emit_request_errors = Some(b);
                }
            }
            "throttle-response" => {
                if let Some(b) = ctx.bool(name, v) {
                    self.throttle_response = b;
                }
            }
            "server-timing" => {
                if let Some(t) = super::server_timing::parse(ctx, v) {
                    self.server_timing = t;
                }
            }
            _ => return false,
        }
        true
    }
}

/// Reads a `hosts` mapping into `out`, in file order.
pub(super) fn hosts(
    ctx: &mut Ctx,
    v: &Node,
    outer: &Scoped,
    listeners: &mut Listeners,
    out: &mut Vec<Host>,
) {
    let Some(entries) = ctx.map("hosts", v) else {
        return;
    };
    for (k, body) in entries {
        let Some((name, port)) = host_key(ctx, k) else {
            continue;
        };
        if let Some(dup) = out.iter().find(|h| h.name == name && h.port == port) {
            let line = dup.at.line;
            ctx.error(
                k.line,
                format!("host {} is defined twice (first at line {line})", show(k)),
            );
            continue;
        }
        let (paths, strict_match) = host(ctx, k, (out.len(), &name), body, outer, listeners);
        out.push(Host {
            name,
            port,
            paths,
            strict_match,
            at: ctx.at(k.line),
        });
    }
}

fn host(
    ctx: &mut Ctx,
    key: &Node,
    (index, name): (usize, &str),
    v: &Node,
    outer: &Scoped,
    listeners: &mut Listeners,
) -> (Vec<PathConf>, bool) {
    let Some(entries) = ctx.map("a host", v) else {
        return (Vec::new(), false);
    };
    let mut scoped = outer.clone();
    let mut path_maps = Vec::new();
    let mut strict_match = false;
    for (k, val) in entries {
        match directives::check(ctx, k, Level::Host) {
            Some("paths") => path_maps.push(val),
            Some("strict-match") => {
                if let Some(b) = ctx.bool("strict-match", val) {
                    strict_match = b;
                }
            }
            Some("listen") => listeners.add(ctx, val, Some((index, name))),
            // The table allows only inherited options at this level besides the two above.
            Some(name) if !scoped.apply(ctx, name, val) => ctx.error(
                k.line,
                format!("directive {name} cannot be used at the host level"),
            ),
            Some(_) | None => {}
        }
    }
    if path_maps.is_empty() {
        ctx.error(key.line, format!("host {} has no paths", show(key)));
    }
    let mut out: Vec<PathConf> = Vec::new();
    for paths in path_maps {
        let Some(entries) = ctx.map("paths", paths) else {
            continue;
        };
        for (pk, pv) in entries {
            // h2o's `stash` holds YAML anchors to merge elsewhere, here as at every level.
            if pk.as_str() == Some("stash") {
                continue;
            }
            let Some(prefix) = pk.as_str().filter(|p| p.starts_with('/')) else {
                ctx.error(
                    pk.line,
                    format!("a path must start with /, got {}", show(pk)),
                );
                continue;
            };
            if let Some(dup) = out.iter().find(|p| p.prefix == prefix) {
                let line = dup.at.line;
                ctx.error(
                    pk.line,
                    format!("path {prefix} is defined twice (first at line {line})"),
                );
                continue;
            }
            if let Some(p) = path(ctx, pk, prefix, pv, &scoped) {
                out.push(p);
            }
        }
    }
    error_doc::check(ctx, &out);
    (out, strict_match)
}

fn path(ctx: &mut Ctx, key: &Node, prefix: &str, v: &Node, outer: &Scoped) -> Option<PathConf> {
    let entries = path_entries(ctx, prefix, v)?;
    let mut scoped = outer.clone();
    // The handler directives in the order written, each with its name and line, and for
    // `file.dir` / `proxy.reverse.url` what it names (a handler is built once every option of
    // the path is read, as h2o defers it).
    let mut handlers: Vec<(Handler, &str, u32)> = Vec::new();
    for (k, val) in entries {
        let Some(name) = directives::check(ctx, k, Level::Path) else {
            continue;
        };
        let h = match name {
            "file.dir" => ctx.path(name, val).map(|d| Handler::File(d, false)),
            "file.file" => ctx.path(name, val).map(|f| Handler::File(f, true)),
            "respond" => respond::parse(ctx, val).map(|r| Handler::Done(HandlerConf::Respond(r))),
            "redirect" => {
                redirect::parse(ctx, val).map(|r| Handler::Done(HandlerConf::Redirect(r)))
            }
            "proxy.reverse.url" => proxy::reverse_url(ctx, val).map(Handler::Proxy),
            "proxy.connect" => super::connect::acl(ctx, val).map(Handler::Connect),
            "fastcgi.connect" => fastcgi::connect(ctx, val).map(Handler::Fastcgi),
            "fastcgi.spawn" => fastcgi::spawn(ctx, val).map(Handler::Fastcgi),
            "status" | "metrics" | "readiness" => match ctx.bool(name, val) {
                Some(true) => Some(Handler::Done(match name {
                    "status" => HandlerConf::Status,
                    "metrics" => HandlerConf::Metrics,
                    _ => HandlerConf::Readiness,
                })),
                Some(false) => {
                    ctx.error(val.line, format!("{name}: only ON is meaningful"));
                    None
                }
                None => None,
            },
            _ => {
                if !scoped.apply(ctx, name, val) {
                    ctx.error(
                        k.line,
                        format!("directive {name} cannot be used at the path level"),
                    );
                }
                continue;
            }
        };
        // A handler after one that always answers is never asked (h2o runs them in order
        // until one answers; only `file.dir` passes a request on, when it finds no file).
        if let Some((_, first, line)) = handlers.iter().find(|(h, _, _)| !h.passes_on()) {
            let first_at = ctx.at(*line);
            ctx.warn(
                k.line,
                format!("path {prefix}: {name} is never reached: {first} at {first_at} answers every request"),
            );
        }
        // A bad value was reported already.
        if let Some(h) = h {
            handlers.push((h, name, k.line));
        }
    }
    let mut built = Vec::with_capacity(handlers.len());
    for (h, _, line) in handlers {
        built.push(match h {
            Handler::File(dir, one) => {
                HandlerConf::File(scoped.file.build(ctx, (dir, one), &scoped.fastcgi))
            }
            Handler::Proxy(backends) => {
                HandlerConf::Proxy(scoped.proxy.build(ctx, line, backends)?)
            }
            Handler::Fastcgi(target) => {
                HandlerConf::Fastcgi(scoped.fastcgi.build(ctx, target, line))
            }
            Handler::Connect(acl) => HandlerConf::Connect(scoped.proxy.connect(acl)),
            Handler::Done(h) => h,
        });
    }
    let handler = match built.len() {
        0 | 1 => built.pop().unwrap_or(HandlerConf::None),
        _ => HandlerConf::Chain(built),
    };
    Some(PathConf {
        prefix: prefix.to_owned(),
        handler,
        headers: scoped.headers,
        early_headers: scoped.early_headers,
        expires: scoped.expires,
        error_docs: scoped.error_docs,
        access_log: scoped.access_log,
        compress: scoped.compress.build(),
        edge: scoped.edge.build(ctx),
        server_timing: scoped.server_timing,
        emit_request_errors: scoped.emit_request_errors,
        throttle_response: scoped.throttle_response,
        at: ctx.at(key.line),
    })
}

/// A path's directives: its mapping, or, as h2o takes it, a sequence of mappings read as one
/// mapping in order (`- header.add: ...` then `- file.dir: ...` then `- proxy.reverse.url: ...`).
fn path_entries<'a>(ctx: &mut Ctx, prefix: &str, v: &'a Node) -> Option<Vec<&'a (Node, Node)>> {
    if let Some(entries) = v.as_map() {
        return Some(entries.iter().collect());
    }
    let Some(blocks) = v.as_seq() else {
        ctx.error(
            v.line,
            format!(
                "path {prefix} expects a mapping or a sequence of mappings, got {}",
                show(v)
            ),
        );
        return None;
    };
    let mut out = Vec::new();
    for block in blocks {
        match block.as_map() {
            Some(entries) => out.extend(entries.iter()),
            None => ctx.error(
                block.line,
                format!(
                    "path {prefix}: each item of the sequence must be a mapping, got {}",
                    show(block)
                ),
            ),
        }
    }
    Some(out)
}

/// `expires: OFF` or `expires: N UNIT` (h2o's units: second, minute, hour, day, month of 30
/// days, year of 365 days, each also plural). `Some(None)` is OFF.
fn expires(ctx: &mut Ctx, v: &Node) -> Option<Option<u64>> {
    if v.as_bool() == Some(false) {
        return Some(None);
    }
    let text = v.as_str().unwrap_or_default();
    let mut words = text.split_whitespace();
    let parsed = match (words.next(), words.next(), words.next()) {
        (Some(n), Some(unit), None) => n.parse::<u64>().ok().and_then(|n| {
            let seconds: u64 = match unit.strip_suffix('s').unwrap_or(unit) {
                "second" => 1,
                "minute" => 60,
                "hour" => 3600,
                "day" => 86400,
                "month" => 30 * 86400,
                "year" => 365 * 86400,
                _ => return None,
            };
            n.checked_mul(seconds)
        }),
        _ => None,
    };
    if parsed.is_none() {
        ctx.error(
            v.line,
            format!(
                "expires expects OFF or a number and a unit (second, minute, hour, day, month, year), got {}",
                show(v)
            ),
        );
    }
    parsed.map(Some)
}

// One per path while the configuration is read: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Handler {
    /// `file.dir` (or `file.file`, true): built once the path's `file.*` options are all read.
    File(std::path::PathBuf, bool),
    /// `proxy.reverse.url`: built once the path's `proxy.*` options are all read.
    Proxy(proxy::Backends),
    /// `fastcgi.connect` / `fastcgi.spawn`: built once the path's `fastcgi.*` options are read.
    Fastcgi(fastcgi::Target),
    /// `proxy.connect`: built once the path's `proxy.timeout.*` are read.
    Connect(Vec<super::AclRule>),
    Done(HandlerConf),
}

impl Handler {
    /// Whether the handler may pass a request on to the next one of its path.
    fn passes_on(&self) -> bool {
        matches!(self, Handler::File(..))
    }
}

/// `name`, `name:port`, `*.name`, `[v6]:port`; the name is lowercased.
fn host_key(ctx: &mut Ctx, k: &Node) -> Option<(String, Option<u16>)> {
    let Some(text) = k.as_str() else {
        ctx.error(
            k.line,
            format!("a host name must be a string, got {}", show(k)),
        );
        return None;
    };
    let bad = |ctx: &mut Ctx| {
        ctx.error(
            k.line,
            format!("\"{text}\" is not a host name or host:port"),
        );
        None
    };
    let (name, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return bad(ctx);
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return bad(ctx);
        }
        match after {
            "" => (format!("[{v6}]"), None),
            _ => match after.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()) {
                Some(port) => (format!("[{v6}]"), Some(port)),
                None => return bad(ctx),
            },
        }
    } else {
        match text.rsplit_once(':') {
            Some((n, p)) => match p.parse::<u16>() {
                Ok(port) => (n.to_owned(), Some(port)),
                Err(_) => return bad(ctx),
            },
            None => (text.to_owned(), None),
        }
    };
    let body = name.strip_prefix("*.").unwrap_or(&name);
    // `*` alone: any name (h2o's catch-all, `*:port` for one port).
    let valid = name.starts_with('[')
        || name == "*"
        || (!body.is_empty()
            && body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)));
    if !valid {
        return bad(ctx);
    }
    Some((name.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml::{NodeKind, Scalar};

    fn key(text: &str) -> (Option<(String, Option<u16>)>, usize) {
        let mut ctx = Ctx::new("t.yaml");
        let node = Node {
            line: 1,
            kind: NodeKind::Scalar(Scalar {
                value: text.into(),
                quoted: true,
            }),
        };
        let r = host_key(&mut ctx, &node);
        (r, ctx.errors.len())
    }

    #[test]
    fn host_keys() {
        let some = |n: &str, p: Option<u16>| (Some((n.to_string(), p)), 0);
        assert_eq!(key("Example.COM"), some("example.com", None));
        assert_eq!(key("example.com:8443"), some("example.com", Some(8443)));
        assert_eq!(key("*.Example.com"), some("*.example.com", None));
        assert_eq!(key("127.0.0.1:80"), some("127.0.0.1", Some(80)));
        assert_eq!(key("[::1]:80"), some("[::1]", Some(80)));
        assert_eq!(key("[::1]"), some("[::1]", None));
        assert_eq!(key("*"), some("*", None));
        assert_eq!(key("*:8080"), some("*", Some(8080)));
        for bad in [
            "",
            "::1",
            "a:b:c",
            "a b",
            "[nope]:80",
            "x:99999",
            "[::1]80",
            "**",
            "*a",
        ] {
            assert_eq!(key(bad), (None, 1), "{bad}");
        }
    }
}
