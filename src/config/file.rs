//! `file.*` directives: the document root (path level) and the options every level may set.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::{FileConf, MimeTypes};
use std::path::PathBuf;

/// `file.*` options as set so far at some level; `None` means "not set here or above".
#[derive(Debug, Clone, Default)]
pub(super) struct FileOpts {
    index: Option<Vec<String>>,
    /// `file.mime.*` as the levels so far left it (outer levels first).
    mime_types: MimeTypes,
    etag: Option<bool>,
    dirlisting: Option<bool>,
    send_compressed: Option<bool>,
    /// `file.send-compressed: gunzip`
    gunzip: Option<bool>,
    /// `file.custom-handler`, outer levels first; a later one for an extension wins. Built
    /// with the path's `fastcgi.*` options once they are all read.
    pub custom_handlers: Vec<super::fastcgi::PendingCustom>,
}

impl FileOpts {
    /// Applies one `file.*` option. Returns false when `name` is not one of them.
    pub fn apply(&mut self, ctx: &mut Ctx, name: &str, v: &Node) -> bool {
        match name {
            "file.index" => {
                if let Some(list) = index(ctx, v) {
                    self.index = Some(list);
                }
            }
            "file.mime.addtypes" => add_types(ctx, name, v, &mut self.mime_types.overrides),
            "file.mime.settypes" => {
                let mut types = Vec::new();
                add_types(ctx, name, v, &mut types);
                self.mime_types.overrides = types;
                self.mime_types.builtin = false;
            }
            "file.mime.removetypes" => {
                for ext in extensions(ctx, name, v) {
                    let types = &mut self.mime_types.overrides;
                    types.retain(|(e, _)| *e != ext);
                    types.push((ext, String::new()));
                }
            }
            "file.mime.setdefaulttype" => match v.as_str().filter(|m| valid_media_type(m)) {
                Some(m) => self.mime_types.default_type = m.to_owned(),
                None => ctx.error(
                    v.line,
                    format!(
                        "{name} expects a media type (type/subtype), got {}",
                        show(v)
                    ),
                ),
            },
            "file.etag" => set(&mut self.etag, ctx.bool(name, v)),
            "file.dirlisting" => set(&mut self.dirlisting, ctx.bool(name, v)),
            // `file.send-gzip` is h2o 1.x's name for it.
            "file.send-compressed" | "file.send-gzip" => {
                // h2o 2.2's `gunzip` is ON and more: a `.gz` without its original is
                // decompressed for a client that does not take gzip.
                if v.as_str().is_some_and(|s| s.eq_ignore_ascii_case("gunzip")) {
                    self.send_compressed = Some(true);
                    self.gunzip = Some(true);
                } else if let Some(on) = v.as_bool() {
                    self.send_compressed = Some(on);
                    self.gunzip = Some(false);
                } else {
                    ctx.error(
                        v.line,
                        format!("{name} expects ON, OFF or gunzip, got {}", show(v)),
                    );
                }
            }
            _ => return false,
        }
        true
    }

    /// The file handler of a path serving `dir` (or the one file `dir` names, with
    /// `single_file`), with h2o's defaults for what is unset.
    pub fn build(
        &self,
        ctx: &mut Ctx,
        (dir, single_file): (PathBuf, bool),
        fastcgi: &super::fastcgi::FastcgiOpts,
    ) -> FileConf {
        let d = FileConf::default();
        FileConf {
            dir,
            single_file,
            index: self.index.clone().unwrap_or(d.index),
            mime_types: self.mime_types.clone(),
            etag: self.etag.unwrap_or(d.etag),
            dirlisting: self.dirlisting.unwrap_or(d.dirlisting),
            send_compressed: self.send_compressed.unwrap_or(d.send_compressed),
            gunzip: self.gunzip.unwrap_or(d.gunzip),
            custom_handlers: self
                .custom_handlers
                .iter()
                .map(|c| c.build(ctx, fastcgi))
                .collect(),
        }
    }
}

fn set(slot: &mut Option<bool>, value: Option<bool>) {
    if value.is_some() {
        *slot = value;
    }
}

/// `file.index: [index.html, ...]`; an empty sequence turns index files off, as in h2o.
fn index(ctx: &mut Ctx, v: &Node) -> Option<Vec<String>> {
    let Some(items) = v.as_seq() else {
        ctx.error(
            v.line,
            format!(
                "file.index expects a sequence of file names, got {}",
                show(v)
            ),
        );
        return None;
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let name = ctx.string("file.index", item)?;
        if name.contains('/') {
            ctx.error(item.line, "file.index entries are file names, not paths");
            return None;
        }
        out.push(name);
    }
    Some(out)
}

/// `file.mime.addtypes` (and `settypes`): `{media/type: .ext}` or `{media/type: [.a, .b]}`;
/// also h2o's `{media/type: {extensions: [.a], is_compressible: YES, priority: normal}}`.
fn add_types(ctx: &mut Ctx, name: &str, v: &Node, out: &mut Vec<(String, String)>) {
    let Some(entries) = ctx.map(name, v) else {
        return;
    };
    for (k, val) in entries {
        let Some(media) = k.as_str().filter(|m| valid_media_type(m)) else {
            ctx.error(
                k.line,
                format!("{name}: {} is not a media type (type/subtype)", show(k)),
            );
            continue;
        };
        let exts_node = match val.as_map() {
            Some(attrs) => {
                let known =
                    ctx.known_keys(name, attrs, &["extensions", "is_compressible", "priority"]);
                match known.iter().find(|(key, _)| *key == "extensions") {
                    Some((_, n)) => *n,
                    None => {
                        ctx.error(val.line, format!("{name}: extensions is required"));
                        continue;
                    }
                }
            }
            None => val,
        };
        for ext in extensions(ctx, name, exts_node) {
            out.retain(|(e, _)| *e != ext);
            out.push((ext, media.to_owned()));
        }
    }
}

/// `.ext` or `[.a, .b]`: the extensions without their dot, lowercased.
fn extensions(ctx: &mut Ctx, name: &str, v: &Node) -> Vec<String> {
    let Some(exts) = ctx.strings(name, v) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(exts.len());
    for ext in exts {
        match ext.strip_prefix('.').filter(|e| !e.is_empty()) {
            Some(bare) => out.push(bare.to_ascii_lowercase()),
            None => ctx.error(
                v.line,
                format!("{name}: extension \"{ext}\" must start with a dot"),
            ),
        }
    }
    out
}

fn valid_media_type(m: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match m.split_once('/') {
        Some((t, rest)) => {
            // Parameters (`; charset=utf-8`) are allowed after the subtype.
            let sub = rest.split(';').next().unwrap_or("").trim();
            token(t) && token(sub)
        }
        None => false,
    }
}
