//! `header.add|append|merge|set|setifempty|unset`: response header commands.

use super::value::Ctx;
use super::yaml::Node;
use super::{HeaderCommand, HeaderOp};

/// Reads one `header.*` directive (a string or a sequence of them) into commands. Returns
/// false when `name` is not a header directive.
pub(super) fn apply(ctx: &mut Ctx, name: &str, v: &Node, out: &mut Vec<HeaderCommand>) -> bool {
    let op = match name {
        "header.add" => HeaderOp::Add,
        "header.append" => HeaderOp::Append,
        "header.merge" => HeaderOp::Merge,
        "header.set" => HeaderOp::Set,
        "header.setifempty" => HeaderOp::SetIfEmpty,
        "header.unset" => HeaderOp::Unset,
        _ => return false,
    };
    let Some(items) = ctx.strings(name, v) else {
        return true;
    };
    for item in items {
        let (hname, value) = if op == HeaderOp::Unset {
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
            ctx.error(
                v.line,
                format!("{name}: \"{hname}\" is not a valid header name"),
            );
            continue;
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            ctx.error(
                v.line,
                format!("{name}: the value of {hname} contains a line break"),
            );
            continue;
        }
        out.push(HeaderCommand {
            op,
            name: hname.to_owned(),
            value: value.to_owned(),
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
