//! `respond`: a fixed answer configured in YAML (health checks, the "server core" benchmark).

use crate::config::RespondConf;
use crate::http::recycle::HeaderList;
use crate::http::{Answer, Body, Handler, Headers, Request, Response};
use bytes::Bytes;
use std::rc::Rc;

pub struct RespondHandler {
    status: u16,
    body: Bytes,
    /// Content-Type, built once and shared by every answer.
    headers: Rc<HeaderList>,
    /// Empty: every method gets the answer.
    methods: Vec<Bytes>,
}

impl RespondHandler {
    pub fn new(conf: &RespondConf) -> RespondHandler {
        RespondHandler {
            status: conf.status,
            body: Bytes::from(conf.body.clone()),
            headers: Rc::new(vec![(
                Bytes::from_static(b"Content-Type"),
                Bytes::from(conf.content_type.clone()),
            )]),
            methods: conf
                .methods
                .iter()
                .map(|m| Bytes::from(m.clone()))
                .collect(),
        }
    }
}

impl Handler for RespondHandler {
    fn answers_now(&self) -> bool {
        true
    }

    fn handle(&self, req: &Request) -> Answer {
        Answer::Now(self.respond_now(req))
    }

    /// A fixed answer, chosen by the request alone.
    fn answer_repeats(&self, _resp: &Response) -> bool {
        true
    }
}

impl RespondHandler {
    /// The answer, always ready now.
    pub fn respond_now(&self, req: &Request) -> Response {
        let method = req.method.as_bytes();
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == method) {
            return Response::error(404);
        }
        Response {
            status: self.status,
            headers: Headers::shared(self.headers.clone()),
            body: Body::Bytes(self.body.clone()),
        }
    }
}
