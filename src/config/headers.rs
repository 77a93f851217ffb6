//! `header.add|append|merge|set|setifempty|unset|unsetunless`: response header commands, and
//! the same forms under `proxy.header.*` for the request sent to a backend.

use super::value::Ctx;
use super::yaml::Node;
use super::{HeaderCommand, HeaderOp};

/// Reads one `header.*` directive (a string or a sequence of them) into commands. Returns
/// false when `name` is not a header directive.
pub(super) fn apply(ctx: &mut Ctx, name: &str, v: &Node, out: &mut Vec<HeaderCommand>) -> bool {
    commands(ctx, "header.", name, v, out)
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
