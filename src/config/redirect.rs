//! `redirect`: a URL, or `{url: URL, status: 3xx, internal: OFF}` as in h2o.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::RedirectConf;

/// h2o's default redirect status.
const DEFAULT_STATUS: u16 = 302;

pub(super) fn parse(ctx: &mut Ctx, v: &Node) -> Option<RedirectConf> {
    let Some(entries) = v.as_map() else {
        if v.as_str().is_none() {
            ctx.error(
                v.line,
                format!(
                    "redirect expects a URL or a mapping with url and status, got {}",
                    show(v)
                ),
            );
            return None;
        }
        let url = url(ctx, v)?;
        return Some(RedirectConf {
            url,
            status: DEFAULT_STATUS,
            internal: false,
        });
    };
    let mut conf = RedirectConf {
        url: String::new(),
        status: DEFAULT_STATUS,
        internal: false,
    };
    let mut ok = true;
    let mut has_url = false;
    for (key, val) in ctx.known_keys("redirect", entries, &["url", "status", "internal"]) {
        match key {
            "url" => {
                has_url = true;
                match url(ctx, val) {
                    Some(u) => conf.url = u,
                    None => ok = false,
                }
            }
            "status" => match ctx.int::<u16>("redirect.status", val, 300) {
                Some(s) if s <= 399 => conf.status = s,
                Some(s) => {
                    ctx.error(val.line, format!("redirect.status {s} is not a 3xx status"));
                    ok = false;
                }
                None => ok = false,
            },
            _ => match ctx.bool("redirect.internal", val) {
                Some(true) => {
                    ctx.error(val.line, "redirect.internal ON is not supported yet");
                    ok = false;
                }
                Some(false) => {}
                None => ok = false,
            },
        }
    }
    if !has_url {
        ctx.error(v.line, "redirect: url is required");
        ok = false;
    }
    ok.then_some(conf)
}

/// The URL goes into a Location header, so it must not be able to break the header.
fn url(ctx: &mut Ctx, v: &Node) -> Option<String> {
    let u = ctx.string("redirect.url", v)?;
    if u.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        ctx.error(
            v.line,
            "redirect.url contains a space or a control character",
        );
        return None;
    }
    Some(u)
}
