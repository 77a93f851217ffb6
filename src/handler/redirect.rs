//! `redirect`: answers with a 3xx pointing at the configured URL followed by the part of the
//! request target below the matched path, as h2o does.

use crate::config::RedirectConf;
use crate::http::{Answer, Handler, Request, Response};
use bytes::{BufMut, Bytes, BytesMut};

pub struct RedirectHandler {
    url: String,
    status: u16,
    /// The matched path prefix without a trailing slash.
    prefix_len: usize,
}

impl RedirectHandler {
    pub fn new(conf: &RedirectConf, prefix: &str) -> RedirectHandler {
        RedirectHandler {
            url: conf.url.clone(),
            status: conf.status,
            prefix_len: prefix.trim_end_matches('/').len(),
        }
    }
}

impl Handler for RedirectHandler {
    fn answers_now(&self) -> bool {
        true
    }

    fn handle(&self, req: &Request) -> Answer {
        Answer::Now(self.respond_now(req))
    }

    /// Made from the request's target alone.
    fn answer_repeats(&self, _resp: &Response) -> bool {
        true
    }
}

impl RedirectHandler {
    /// The answer, always ready now.
    pub fn respond_now(&self, req: &Request) -> Response {
        let target = req.target();
        let mut rest = target.get(self.prefix_len..).unwrap_or_default();
        if self.url.ends_with('/') {
            rest = rest.strip_prefix(b"/").unwrap_or(rest);
        }
        let mut loc = BytesMut::with_capacity(self.url.len() + rest.len());
        loc.put_slice(self.url.as_bytes());
        loc.put_slice(rest);
        Response::text(self.status, "Moved\n").with_header("Location", Bytes::from(loc))
    }
}
