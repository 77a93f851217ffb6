//! h2o 2.3's `header.*` commands with `when: early` (or `all`): a path whose answer comes
//! later (a proxied one, a FastCGI one) sends a 103 Early Hints with the fields they make
//! before it, so that a browser starts fetching what the page will need while the backend
//! works. An answer ready now gets none (h2o's rule too: it goes out at once anyway), nor
//! does a client that `send-informational` leaves out.
//!
//! Only a path with such commands has this wrapper around its handler: the others pay
//! nothing.

use super::proxy::Informational;
use crate::config::HeaderCommand;
use crate::http::interim::{self, Interim};
use crate::http::recycle::HeaderList;
use crate::http::{Answer, Handler, Headers, Request, Response};
use std::rc::Rc;

pub struct EarlyHints {
    inner: Box<dyn Handler>,
    /// The 103's fields, made once from the commands.
    fields: Rc<HeaderList>,
    informational: Informational,
}

impl EarlyHints {
    /// `inner` with a 103 made of `commands` before its later answers; `inner` itself when
    /// the commands make no field (only `unset`s) or `send-informational` is `none`.
    pub fn wrap(
        inner: Box<dyn Handler>,
        commands: &[HeaderCommand],
        informational: Informational,
    ) -> Box<dyn Handler> {
        let mut fields = Vec::new();
        super::headers::HeaderRewriter::new(commands).apply_to(&mut fields);
        if fields.is_empty() || !informational.any() {
            return inner;
        }
        Box::new(EarlyHints {
            inner,
            fields: Rc::new(fields),
            informational,
        })
    }
}

impl Handler for EarlyHints {
    fn handle(&self, req: &Request) -> Answer {
        match self.inner.handle(req) {
            Answer::Later(answer) if self.informational.reaches(req.version) => {
                let hint = Interim {
                    status: 103,
                    headers: Headers::shared(self.fields.clone()),
                };
                // Posted when the client's driver first polls the answer.
                Answer::Later(Box::pin(async move {
                    interim::post(hint);
                    answer.await
                }))
            }
            other => other,
        }
    }

    fn streams_body(&self) -> bool {
        self.inner.streams_body()
    }

    fn tunnels(&self) -> bool {
        self.inner.tunnels()
    }

    fn answer_repeats(&self, resp: &Response) -> bool {
        self.inner.answer_repeats(resp)
    }

    fn answers_now(&self) -> bool {
        self.inner.answers_now()
    }
}
