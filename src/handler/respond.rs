//! `respond`: a fixed answer configured in YAML (health checks, the "server core" benchmark).

use crate::config::RespondConf;
use crate::http::{Answer, Body, Handler, Request, Response};
use bytes::Bytes;

pub struct RespondHandler {
    status: u16,
    body: Bytes,
    content_type: Bytes,
    /// Empty: every method gets the answer.
    methods: Vec<Bytes>,
}

impl RespondHandler {
    pub fn new(conf: &RespondConf) -> RespondHandler {
        RespondHandler {
            status: conf.status,
            body: Bytes::from(conf.body.clone()),
            content_type: Bytes::from(conf.content_type.clone()),
            methods: conf
                .methods
                .iter()
                .map(|m| Bytes::from(m.clone()))
                .collect(),
        }
    }
}

impl Handler for RespondHandler {
    fn handle(&self, req: &Request) -> Answer {
        Answer::Now(self.respond_now(req))
    }
}

impl RespondHandler {
    /// The answer, always ready now.
    pub fn respond_now(&self, req: &Request) -> Response {
        let method = req.method.as_bytes();
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == method) {
            return Response::error(404);
        }
        let mut headers = crate::http::recycle::header_list(1);
        headers.push((
            Bytes::from_static(b"Content-Type"),
            self.content_type.clone(),
        ));
        Response {
            status: self.status,
            headers,
            body: Body::Bytes(self.body.clone()),
        }
    }
}
