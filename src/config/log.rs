//! `access-log` and `error-log`.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{AccessLogConf, Escape};

/// h2o's default access log format (Apache "combined").
pub(super) const COMBINED: &str = "%h %l %u %t \"%r\" %s %b \"%{Referer}i\" \"%{User-agent}i\"";

/// The most `buffer-size` may be: the access log reserves its buffer up front
/// (`log::BUFFER_LIMIT`).
pub(super) const MAX_BUFFER_SIZE: usize = 64 * 1024;

/// `access-log: PATH` or `access-log: {path: PATH, format: FORMAT}`.
pub(super) fn access_log(ctx: &mut Ctx, v: &Node) -> Option<AccessLogConf> {
    let Some(entries) = v.as_map() else {
        if v.as_str().is_none() {
            ctx.error(
                v.line,
                format!(
                    "access-log expects a path or a mapping with path and format, got {}",
                    show(v)
                ),
            );
            return None;
        }
        let target = ctx.log_target("access-log", v)?;
        return Some(AccessLogConf {
            target,
            format: COMBINED.into(),
            escape: Escape::Apache,
            buffer_size: 0,
            at: ctx.at(v.line),
        });
    };
    let mut path = None;
    let mut path_given = false;
    let mut format = COMBINED.to_owned();
    let mut escape = Escape::Apache;
    let mut format_line = v.line;
    let mut buffer_size = 0;
    let keys = &["path", "format", "escape", "buffer-size"];
    for (key, val) in ctx.known_keys("access-log", entries, keys) {
        match key {
            "path" => {
                path_given = true;
                path = ctx.log_target("access-log.path", val);
            }
            "format" => {
                if let Some(f) = ctx.string("access-log.format", val) {
                    format = f;
                    format_line = val.line;
                }
            }
            "buffer-size" => match ctx.int::<usize>("access-log.buffer-size", val, 0) {
                Some(n) if n > MAX_BUFFER_SIZE => ctx.error(
                    val.line,
                    format!("access-log.buffer-size: {n} is more than {MAX_BUFFER_SIZE}"),
                ),
                Some(n) => buffer_size = n,
                None => {}
            },
            // h2o's `escape: apache|json` (2.2 and later).
            _ => match val.as_str() {
                Some("apache") => escape = Escape::Apache,
                Some("json") => escape = Escape::Json,
                _ => ctx.error(
                    val.line,
                    format!(
                        "access-log.escape must be apache or json, got {}",
                        show(val)
                    ),
                ),
            },
        }
    }
    match path {
        Some(target) => Some(AccessLogConf {
            target,
            format,
            escape,
            buffer_size,
            at: ctx.at(format_line),
        }),
        None => {
            if !path_given {
                ctx.error(v.line, "access-log: path is required");
            }
            None
        }
    }
}
