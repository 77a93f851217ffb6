//! The file handler: maps a request path under `file.dir` to a file and answers it with
//! conditional requests, ranges and index files. (Stub: filled in by the file handler work.)

use crate::config::FileConf;
use crate::http::{Handler, Request, Response};
use std::cell::RefCell;
use std::rc::Rc;

/// Per-worker cache of open files, shared by every file handler of the worker.
pub struct OpenFileCache {}

impl OpenFileCache {
    pub fn new() -> OpenFileCache {
        OpenFileCache {}
    }
}

impl Default for OpenFileCache {
    fn default() -> Self {
        Self::new()
    }
}

pub struct FileHandler {
    conf: FileConf,
    cache: Rc<RefCell<OpenFileCache>>,
}

impl FileHandler {
    pub fn new(conf: FileConf, cache: Rc<RefCell<OpenFileCache>>) -> FileHandler {
        FileHandler { conf, cache }
    }
}

impl Handler for FileHandler {
    fn handle(&self, _req: &Request) -> Response {
        let _ = (&self.conf, &self.cache);
        Response::error(404)
    }
}
