//! `error-doc`: answers with an error status carry a document of the site instead of the
//! short text spate writes, as in h2o.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{ErrorDoc, HandlerConf, Host, PathConf};

/// `error-doc: {status: 404, url: /404.html}`, a sequence of such mappings, and `status` as
/// a sequence (`status: [500, 502]`). Each status becomes one entry, appended to `out`.
pub(super) fn parse(ctx: &mut Ctx, v: &Node, out: &mut Vec<ErrorDoc>) {
    match v.as_seq() {
        Some(items) => {
            for item in items {
                entry(ctx, item, out);
            }
        }
        None => entry(ctx, v, out),
    }
}

fn entry(ctx: &mut Ctx, v: &Node, out: &mut Vec<ErrorDoc>) {
    let Some(entries) = ctx.map("error-doc", v) else {
        return;
    };
    let mut statuses = None;
    let mut url = None;
    for (key, val) in ctx.known_keys("error-doc", entries, &["status", "url"]) {
        match key {
            "status" => statuses = status_list(ctx, val),
            _ => match val.as_str().filter(|u| u.starts_with('/')) {
                Some(u) => url = Some(u.to_owned()),
                None => ctx.error(
                    val.line,
                    format!(
                        "error-doc.url must be a path on this host (starting with /), got {}",
                        show(val)
                    ),
                ),
            },
        }
    }
    let (Some(statuses), Some(url)) = (statuses, url) else {
        if !entries.iter().any(|(k, _)| k.as_str() == Some("status"))
            || !entries.iter().any(|(k, _)| k.as_str() == Some("url"))
        {
            ctx.error(v.line, "error-doc needs both status and url");
        }
        return;
    };
    for status in statuses {
        out.push(ErrorDoc {
            status,
            url: url.clone(),
            at: ctx.at(v.line),
        });
    }
}

fn status_list(ctx: &mut Ctx, v: &Node) -> Option<Vec<u16>> {
    let items: Vec<&Node> = match v.as_seq() {
        Some(items) => items.iter().collect(),
        None => vec![v],
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match ctx.int::<u16>("error-doc.status", item, 0) {
            Some(s) if (400..=599).contains(&s) => out.push(s),
            Some(s) => {
                ctx.error(
                    item.line,
                    format!("error-doc.status must be an error status (400-599), got {s}"),
                );
                return None;
            }
            None => return None,
        }
    }
    Some(out)
}

impl Host {
    /// The path that serves `url` on this host (h2o's longest-prefix rule).
    pub fn path_serving(&self, url: &str) -> Option<&PathConf> {
        serving(&self.paths, url)
    }
}

fn serving<'a>(paths: &'a [PathConf], url: &str) -> Option<&'a PathConf> {
    let path = url.split('?').next().unwrap_or(url);
    paths
        .iter()
        .filter(|p| super::prefix_matches(p.prefix.trim_end_matches('/'), path.as_bytes()))
        .max_by_key(|p| p.prefix.trim_end_matches('/').len())
}

/// Checks, once a host's paths are all read, that each error document is served by a path
/// that answers at once (`file.dir` or `respond`): it is fetched while the error answer is
/// being made.
pub(super) fn check(ctx: &mut Ctx, paths: &[PathConf]) {
    let mut seen: Vec<&str> = Vec::new();
    for doc in paths.iter().flat_map(|p| &p.error_docs) {
        if seen.contains(&doc.url.as_str()) {
            continue;
        }
        seen.push(&doc.url);
        let answers_now =
            |h: &HandlerConf| matches!(h, HandlerConf::File(_) | HandlerConf::Respond(_));
        match serving(paths, &doc.url).map(|p| p.handler.each()) {
            Some(list) if list.iter().all(answers_now) => {}
            _ => ctx.errors.push(super::ConfigError {
                at: doc.at.clone(),
                message: format!(
                    "error-doc.url {} is not served by file.dir or respond on this host",
                    doc.url
                ),
            }),
        }
    }
}
