//! Entry points: configuration text -> YAML tree -> [`Config`], with every problem collected.

use super::directives::{self, Level};
use super::hosts::{self, Scoped};
use super::listen::Listeners;
use super::value::{show, Ctx};
use super::yaml::{self, Node};
use super::{acme, cache, http, quic, tls, Config, ConfigError, Location};
use std::path::Path;
use std::sync::Arc;

/// Reads and validates a configuration file. Every problem found is returned, not just the first.
/// Relative paths in the file (`file.dir`, `access-log`, ...) are resolved against the file's
/// directory.
pub fn load_file(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, &name),
        Err(e) => Err(vec![ConfigError {
            at: Location {
                file: Arc::from(name.as_str()),
                line: 0,
            },
            message: format!("cannot read: {e}"),
        }]),
    }
}

/// Parses configuration text; `file` names it in errors, and its directory is the base for
/// relative paths.
pub fn load_str(text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
    let mut ctx = Ctx::new(file);
    let root = match yaml::parse_with(text, &mut ctx.sources) {
        Ok(Some(root)) => root,
        Ok(None) => {
            ctx.error(1, "the configuration is empty");
            return Err(ctx.errors);
        }
        Err(e) => {
            ctx.error(e.line, e.message);
            return Err(ctx.errors);
        }
    };
    let mut config = global(&mut ctx, &root);
    config.warnings = std::mem::take(&mut ctx.warnings);
    if ctx.errors.is_empty() {
        Ok(config)
    } else {
        Err(ctx.errors)
    }
}

/// Reads the top-level mapping.
fn global(ctx: &mut Ctx, root: &Node) -> Config {
    let mut c = Config::empty();
    let Some(entries) = root.as_map() else {
        ctx.error(
            root.line,
            format!(
                "the configuration must be a mapping of directives, got {}",
                show(root)
            ),
        );
        return c;
    };
    let mut scoped = Scoped::default();
    let mut listeners = Listeners::default();
    let mut host_maps = Vec::new();
    for (k, v) in entries {
        let Some(name) = directives::check(ctx, k, Level::Global) else {
            continue;
        };
        match name {
            "hosts" => host_maps.push(v),
            "listen" => listeners.add(ctx, v, None),
            // Global: the server's value; below, the hosts' and paths' own (`Scoped`).
            "error-log.emit-request-errors" => server(ctx, name, v, &mut c),
            _ if scoped.apply(ctx, name, v) => {}
            _ if http::apply(ctx, name, v, &mut c) => {}
            _ if quic::apply(ctx, name, v, &mut c.http3) => {}
            _ => server(ctx, name, v, &mut c),
        }
    }
    for v in host_maps {
        hosts::hosts(ctx, v, &scoped, &mut listeners, &mut c.hosts);
    }
    if c.hosts.is_empty() && host_maps_missing(entries) {
        ctx.error(root.line, "mandatory directive hosts is missing");
    }
    let seen = listeners.seen;
    c.listeners = listeners.list;
    c.proxy_ca_files = std::mem::take(&mut ctx.proxy_ca_files);
    c.send_informational = ctx.send_informational;
    let acme_given = entries.iter().any(|(k, _)| k.as_str() == Some("acme"));
    acme::check(ctx, &mut c, acme_given);
    if !seen {
        ctx.error(
            root.line,
            "no listen directive: at least one listener is required",
        );
    }
    c
}

fn host_maps_missing(entries: &[(Node, Node)]) -> bool {
    !entries.iter().any(|(k, _)| k.as_str() == Some("hosts"))
}

/// Server-wide directives that are not protocol settings.
fn server(ctx: &mut Ctx, name: &str, v: &Node, c: &mut Config) {
    match name {
        "num-threads" => set(&mut c.num_threads, ctx.int(name, v, 1)),
        "max-connections" => set(&mut c.max_connections, ctx.int(name, v, 1)),
        "server-name" => match ctx.string(name, v) {
            // It goes into a header field as is.
            Some(s) if s.bytes().any(|b| b.is_ascii_control()) => {
                ctx.error(v.line, "server-name contains a control character")
            }
            value => set(&mut c.server_name, value),
        },
        // h2o's `preserve`: no Server of spate's own, and a proxied answer keeps the backend's.
        "send-server-name" => match v.as_str() {
            Some(s) if s.eq_ignore_ascii_case("preserve") => {
                c.send_server_name = false;
                ctx.preserve_server_header = true;
            }
            _ => match v.as_bool() {
                Some(b) => c.send_server_name = b,
                None => ctx.error(
                    v.line,
                    format!(
                        "send-server-name expects ON, OFF or preserve, got {}",
                        show(v)
                    ),
                ),
            },
        },
        "error-log" => {
            if let Some(t) = ctx.log_target(name, v) {
                c.error_log = Some(t);
            }
        }
        "tcp-fastopen" => set(&mut c.tcp_fastopen, ctx.int(name, v, 0)),
        "file.memory-cache-size" => set(&mut c.file_memory_cache_size, size_or_zero(ctx, name, v)),
        "file.memory-cache-max-file-size" => set(
            &mut c.file_memory_cache_max_file,
            size_or_zero(ctx, name, v),
        ),
        "pid-file" => {
            if let Some(p) = ctx.path(name, v) {
                c.pid_file = Some(p);
            }
        }
        "user" => {
            // Looked up by `prepare`, so that `-t` and a reload report an unknown account.
            if let Some(name) = ctx.string(name, v) {
                c.user = Some(super::User {
                    name,
                    at: ctx.at(v.line),
                });
            }
        }
        "error-log.emit-request-errors" => set(&mut c.emit_request_errors, ctx.bool(name, v)),
        // Accepted for compatibility: spate resolves no names in a thread pool.
        "num-name-resolution-threads" => {
            ctx.uint(name, v, 1);
        }
        // Accepted for compatibility: spate streams request bodies and writes no temporary
        // files (h2o spills large ones there).
        "temp-buffer-path" => {
            ctx.path(name, v);
        }
        "shutdown-timeout" => set(&mut c.shutdown_timeout, ctx.seconds(name, v)),
        "handshake-timeout" => set(&mut c.handshake_timeout, ctx.seconds(name, v)),
        "ssl-session-resumption" => set(&mut c.session_resumption, tls::session_resumption(ctx, v)),
        // Accepted for compatibility: rustls needs no separate key process (docs explain).
        "neverbleed" => {
            ctx.bool(name, v);
        }
        "acme" => c.acme = acme::parse(ctx, v),
        // Every global directive in the table is handled above or here.
        _ => ctx.error(v.line, format!("directive {name} is not handled")),
    }
}

/// A byte count as [`cache::size`] takes it, or 0 (nothing held).
fn size_or_zero(ctx: &mut Ctx, name: &str, v: &Node) -> Option<u64> {
    match v.as_u64() {
        Some(0) => Some(0),
        _ => cache::size(ctx, name, v),
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

#[cfg(test)]
pub(super) mod tests;
