//! `error-doc`: an answer whose status has an error document gets that document's body and
//! type instead of its own, keeping its status and its other header fields (Allow, Location,
//! Retry-After, ...), as in h2o. The document is fetched from the handler of the path that
//! serves it on the same host (a file or `respond`, checked when the configuration is read),
//! called directly, so a missing document cannot loop.

use crate::config::{ErrorDoc, Host};
use crate::http::request::RequestBuilder;
use crate::http::{Answer, Handler, Method, Request, Response, Version};
use bytes::Bytes;
use std::net::{Ipv4Addr, SocketAddr};

/// The error documents of one path.
pub struct ErrorDocs {
    /// By status; an inner level's entry comes later and wins.
    statuses: Vec<(u16, usize)>,
    docs: Vec<Doc>,
}

struct Doc {
    url: Bytes,
    handler: Box<dyn Handler>,
}

/// The fields that describe the body: the document's replace the error answer's.
const BODY_FIELDS: [&[u8]; 7] = [
    b"content-type",
    b"content-length",
    b"content-encoding",
    b"content-range",
    b"etag",
    b"last-modified",
    b"accept-ranges",
];

impl ErrorDocs {
    /// The documents of `entries` on `host`; `build` makes the handler of the path serving
    /// a document. `None` without entries.
    pub fn new(
        entries: &[ErrorDoc],
        host: &Host,
        mut build: impl FnMut(&crate::config::PathConf) -> Box<dyn Handler>,
    ) -> Option<ErrorDocs> {
        if entries.is_empty() {
            return None;
        }
        let mut docs: Vec<Doc> = Vec::new();
        let mut statuses = Vec::with_capacity(entries.len());
        for e in entries {
            let index = match docs.iter().position(|d| d.url == e.url.as_bytes()) {
                Some(i) => i,
                None => {
                    // The configuration checked that some path serves it.
                    let Some(path) = host.path_serving(&e.url) else {
                        continue;
                    };
                    docs.push(Doc {
                        url: Bytes::from(e.url.clone()),
                        handler: build(path),
                    });
                    docs.len() - 1
                }
            };
            statuses.push((e.status, index));
        }
        Some(ErrorDocs { statuses, docs })
    }

    /// Whether an answer with `status` gets a document.
    pub fn covers(&self, status: u16) -> bool {
        self.statuses.iter().any(|(s, _)| *s == status)
    }

    /// Puts the document for `resp`'s status in it, if there is one and it can be read now
    /// (a 200 answer of its handler); otherwise leaves `resp` as it is.
    pub fn apply(&self, resp: &mut Response) {
        let Some(&(_, index)) = self.statuses.iter().rev().find(|(s, _)| *s == resp.status) else {
            return;
        };
        let Some(doc) = self.docs.get(index) else {
            return;
        };
        let Answer::Now(found) = doc.handler.handle(&get(&doc.url)) else {
            return;
        };
        if found.status != 200 {
            return;
        }
        resp.headers
            .retain(|(n, _)| !BODY_FIELDS.iter().any(|f| n.eq_ignore_ascii_case(f)));
        if let Some(ty) = found.header(b"content-type") {
            resp.headers
                .push((Bytes::from_static(b"Content-Type"), ty.clone()));
        }
        resp.body = found.body;
    }
}

/// `GET url`, as the document's handler sees it (no fields: it is not conditional or
/// partial, whatever the error answer's request was).
fn get(url: &Bytes) -> Request {
    let nowhere = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
    RequestBuilder {
        method: Method::Get,
        version: Version::Http11,
        secure: false,
        peer: nowhere,
        local: nowhere,
        target: 0..url.len(),
        authority: None,
        fields: Vec::new(),
    }
    .build(url.clone())
}
