//! `respond` (spate-only): a fixed answer from configuration.

use super::value::Ctx;
use super::yaml::Node;
use super::RespondConf;

/// `respond: {status: 200, body: "ok", content-type: text/plain, methods: [GET, HEAD]}`;
/// every key is optional.
pub(super) fn parse(ctx: &mut Ctx, v: &Node) -> Option<RespondConf> {
    let entries = ctx.map("respond", v)?;
    let mut conf = RespondConf {
        status: 200,
        body: String::new(),
        content_type: "text/plain".into(),
        methods: Vec::new(),
    };
    let mut ok = true;
    let known = ctx.known_keys(
        "respond",
        entries,
        &["status", "body", "content-type", "methods"],
    );
    for (key, val) in known {
        match key {
            "status" => match ctx.int::<u16>("respond.status", val, 100) {
                Some(s) if s <= 599 => conf.status = s,
                Some(s) => {
                    ctx.error(
                        val.line,
                        format!("respond.status {s} is not between 100 and 599"),
                    );
                    ok = false;
                }
                None => ok = false,
            },
            // An empty body is allowed, so this is not `ctx.string`.
            "body" => match val.as_str() {
                Some(b) => conf.body = b.to_owned(),
                None if val.is_null() => conf.body.clear(),
                None => {
                    ctx.error(val.line, "respond.body expects a string");
                    ok = false;
                }
            },
            "content-type" => match ctx.string("respond.content-type", val) {
                Some(t) if !t.bytes().any(|b| b.is_ascii_control()) => conf.content_type = t,
                Some(_) => {
                    ctx.error(
                        val.line,
                        "respond.content-type contains a control character",
                    );
                    ok = false;
                }
                None => ok = false,
            },
            _ => match ctx.strings("respond.methods", val) {
                Some(methods) => {
                    for m in &methods {
                        if m.is_empty()
                            || !m
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                        {
                            ctx.error(
                                val.line,
                                format!("respond.methods: \"{m}\" is not a method"),
                            );
                            ok = false;
                        }
                    }
                    conf.methods = methods;
                }
                None => ok = false,
            },
        }
    }
    ok.then_some(conf)
}
