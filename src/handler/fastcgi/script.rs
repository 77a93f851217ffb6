//! `file.custom-handler`: under a `file.dir`, files whose extension has a custom handler are
//! run by it (FastCGI) instead of being sent, as h2o does: the file itself (`/a.php`), a
//! directory's index file (`/` with `file.index: [index.php]`), and a script followed by more
//! path (`/a.php/more`: PATH_INFO `/more`). Everything else is the file handler's.
//!
//! Only paths whose last segment (or, for a directory, an index name) has a custom extension
//! cost a `stat` here; other requests go to the file handler after one extension check.

use super::{FastcgiHandler, Script};
use crate::handler::file::parsers::append_normalized;
use crate::handler::file::FileHandler;
use crate::http::{Answer, Handler, Request};
use std::os::unix::ffi::OsStrExt;
use std::rc::Rc;

pub struct FileWithScripts {
    file: FileHandler,
    /// Extension (lowercased, no dot; empty for none) and its handler; the last one given for
    /// an extension comes first.
    scripts: Vec<(String, Rc<FastcgiHandler>)>,
    /// `file.dir` without trailing slashes.
    base: Vec<u8>,
    /// The path prefix, without a trailing slash.
    prefix: Vec<u8>,
    index: Vec<String>,
}

impl FileWithScripts {
    pub fn new(
        file: FileHandler,
        conf: &crate::config::FileConf,
        prefix: &str,
        shared: &super::Shared,
    ) -> FileWithScripts {
        let mut scripts = Vec::new();
        for custom in &conf.custom_handlers {
            let h = Rc::new(shared.handler(&custom.fastcgi));
            for ext in &custom.extensions {
                scripts.push((ext.clone(), h.clone()));
            }
        }
        let dir = conf.dir.as_os_str().as_bytes();
        let trimmed = dir.len() - dir.iter().rev().take_while(|&&b| b == b'/').count();
        let base = match &dir[..trimmed] {
            b"" if dir.is_empty() => b".".to_vec(),
            d => d.to_vec(),
        };
        FileWithScripts {
            file,
            scripts: scripts.into_iter().rev().collect(),
            base,
            prefix: prefix.trim_end_matches('/').as_bytes().to_vec(),
            index: conf.index.clone(),
        }
    }

    /// The handler for a file name's extension.
    fn handler_for(&self, name: &[u8]) -> Option<&Rc<FastcgiHandler>> {
        let ext = match memchr::memrchr(b'.', name) {
            Some(dot) if dot > 0 => &name[dot + 1..],
            _ => b"",
        };
        self.scripts
            .iter()
            .find(|(e, _)| e.as_bytes().eq_ignore_ascii_case(ext))
            .map(|(_, h)| h)
    }

    /// The script `req` names, with its handler.
    fn find(&self, req: &Request) -> Option<Found<'_>> {
        let rest = if self.prefix.is_empty() {
            req.path()
        } else {
            req.path().strip_prefix(self.prefix.as_slice())?
        };
        if rest.is_empty() {
            return None;
        }
        let mut rel = Vec::with_capacity(rest.len());
        let dir_like = append_normalized(rest, &mut rel).ok()?;
        let url_name = |rel: &[u8]| [self.prefix.as_slice(), rel].concat();
        let local = |rel: &[u8]| [self.base.as_slice(), rel].concat();
        if dir_like {
            // A directory: its first index file that exists decides.
            for name in &self.index {
                let mut r = rel.clone();
                r.push(b'/');
                r.extend_from_slice(name.as_bytes());
                let path = local(&r);
                if !is_file(&path) {
                    continue;
                }
                let h = self.handler_for(name.as_bytes())?;
                return Some(Found(h, path, url_name(&r), None));
            }
            return None;
        }
        // Each segment from the first: a script file there takes the rest as PATH_INFO.
        let mut end = 0;
        while end < rel.len() {
            let next = memchr::memchr(b'/', &rel[end + 1..]).map_or(rel.len(), |i| end + 1 + i);
            let seg = &rel[end + 1..next];
            if let Some(h) = self.handler_for(seg).filter(|_| !seg.is_empty()) {
                let path = local(&rel[..next]);
                if is_file(&path) {
                    let info = (next < rel.len()).then(|| rel[next..].to_vec());
                    return Some(Found(h, path, url_name(&rel[..next]), info));
                }
            }
            end = next;
        }
        None
    }
}

/// A script's handler, its file, its name in the URL and the PATH_INFO after it.
struct Found<'a>(&'a Rc<FastcgiHandler>, Vec<u8>, Vec<u8>, Option<Vec<u8>>);

fn is_file(path: &[u8]) -> bool {
    std::fs::metadata(std::ffi::OsStr::from_bytes(path)).is_ok_and(|m| m.is_file())
}

impl Handler for FileWithScripts {
    fn handle(&self, req: &Request) -> Answer {
        match self.find(req) {
            Some(Found(h, filename, name, info)) => h.answer(
                req,
                Some(Script {
                    filename: &filename,
                    name: &name,
                    path_info: info.as_deref(),
                }),
            ),
            None => self.file.handle(req),
        }
    }

    fn streams_body(&self) -> bool {
        true
    }
}
