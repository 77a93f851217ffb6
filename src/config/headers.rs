//! `header.add|append|merge|set|setifempty|unset|unsetunless`: response header commands, and
//! the same forms under `proxy.header.*` for the request sent to a backend.

use super::value::Ctx;
use super::yaml::Node;
use super::{HeaderCommand, HeaderOp};

/// Reads one `header.*` directive (a string or a sequence of them, or h2o 2.3's mapping
/// `{header: ..., when: final | early | all}`) into commands: those for the final answer
/// into `out`, those for interim responses (`when: early` or `all`) into `early`. Returns
/// false when `name` is not a header directive.
pub(super) fn apply(
    ctx: &mut Ctx,
    name: &str,
    v: &Node,
    out: &mut Vec<HeaderCommand>,
    early: &mut Vec<HeaderCommand>,
) -> bool {
    let Some(entries) = v.as_map().filter(|_| name.starts_with("header.")) else {
        return commands(ctx, "header.", name, v, out);
    };
    let (mut header, mut when) = (None, When::Final);
    for (k, val) in entries {
        match k.as_str() {
            Some("header") => header = Some(val),
            Some("when") => match val.as_str() {
                Some("final") => when = When::Final,
                Some("early") => when = When::Early,
                Some("all") => when = When::All,
                _ => ctx.error(
                    val.line,
                    format!(
                        "{name}: when expects final, early or all, got {}",
                        super::value::show(val)
                    ),
                ),
            },
            _ => ctx.error(
                k.line,
                format!(
                    "{name}: unknown key {} (expected header and when)",
                    super::value::show(k)
                ),
            ),
        }
    }
    let Some(header) = header else {
        ctx.error(v.line, format!("{name}: the mapping needs a header key"));
        return true;
    };
    match when {
        When::Final => commands(ctx, "header.", name, header, out),
        When::Early => commands(ctx, "header.", name, header, early),
        When::All => {
            let from = early.len();
            let known = commands(ctx, "header.", name, header, early);
            out.extend_from_slice(&early[from..]);
            known
        }
    }
}

/// h2o's `when` of a header command: the final answer, interim responses, or both.
enum When {
    Final,
    Early,
    All,
}

/// Reads one `{prefix}add|append|...` directive into commands. Returns false when `name` is not
/// `prefix` followed by a header command.
pub(super) fn commands(
    ctx: &mut Ctx,
    prefix: &str,
    name: &str,
    v: &Node,
    out: &mut Vec<HeaderCommand>,
) -> bool {
    let op = match name.strip_prefix(prefix) {
        Some("add") => HeaderOp::Add,
        Some("append") => HeaderOp::Append,
        Some("merge") => HeaderOp::Merge,
        Some("set") => HeaderOp::Set,
        Some("setifempty") => HeaderOp::SetIfEmpty,
        Some("unset") => HeaderOp::Unset,
        Some("unsetunless") => HeaderOp::UnsetUnless,
        Some("cookie.unset") => HeaderOp::CookieUnset,
        Some("cookie.unsetunless") => HeaderOp::CookieUnsetUnless,
        _ => return false,
    };
    let Some(items) = ctx.strings(name, v) else {
        return true;
    };
    // `unsetunless` (and each cookie command) is one command naming every field it keeps.
    let listed = matches!(
        op,
        HeaderOp::UnsetUnless | HeaderOp::CookieUnset | HeaderOp::CookieUnsetUnless
    );
    let mut kept: Vec<&str> = Vec::new();
    for item in &items {
        let (hname, value) = if op == HeaderOp::Unset || listed {
            (item.trim(), "")
        } else {
            match item.split_once(':') {
                Some((n, val)) => (n.trim(), val.trim()),
                None => {
                    ctx.error(
                        v.line,
                        format!("{name} expects \"Name: value\", got \"{item}\""),
                    );
                    continue;
                }
            }
        };
        if !is_token(hname) {
            let what = if matches!(op, HeaderOp::CookieUnset | HeaderOp::CookieUnsetUnless) {
                "cookie name"
            } else {
                "header name"
            };
            ctx.error(v.line, format!("{name}: \"{hname}\" is not a valid {what}"));
            continue;
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            ctx.error(
                v.line,
                format!("{name}: the value of {hname} contains a line break"),
            );
            continue;
        }
        if listed {
            kept.push(hname);
            continue;
        }
        out.push(HeaderCommand {
            op,
            name: hname.to_owned(),
            value: value.to_owned(),
        });
    }
    if listed && kept.len() == items.len() {
        out.push(HeaderCommand {
            op,
            name: String::new(),
            value: kept.join(", "),
        });
    }
    true
}

/// RFC 9110 token characters.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
