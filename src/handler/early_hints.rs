//! h2o 2.3's `header.*` commands with `when: early` (or `all`): a path whose answer comes
//! later (a proxied one, a FastCGI one) sends a 103 Early Hints with the fields they make
//! before it, so that a browser starts fetching what the page will need while the backend
//! works. An answer ready now gets none (h2o's rule too: it goes out at once anyway), nor
//! does a client that `send-informational` leaves out. As in h2o, the same commands edit the
//! 103s a backend sends (a 103 they leave without fields is not passed on).
//!
//! Only a path with such commands has this wrapper around its handler: the others pay
//! nothing.

use super::headers::HeaderRewriter;
use super::proxy::Informational;
use crate::config::HeaderCommand;
use crate::http::interim::{self, Interim};
use crate::http::recycle::HeaderList;
use crate::http::{Answer, Handler, Headers, Pending, Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

pub struct EarlyHints {
    inner: Box<dyn Handler>,
    /// The 103's fields, made once from the commands.
    fields: Rc<HeaderList>,
    /// The commands, for a backend's 103s.
    commands: Rc<HeaderRewriter>,
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
        let commands = HeaderRewriter::new(commands);
        let mut fields = Vec::new();
        commands.apply_to(&mut fields);
        if !informational.any() {
            return inner;
        }
        Box::new(EarlyHints {
            inner,
            fields: Rc::new(fields),
            commands: Rc::new(commands),
            informational,
        })
    }
}

impl Handler for EarlyHints {
    fn handle(&self, req: &Request) -> Answer {
        match self.inner.handle(req) {
            Answer::Later(answer) if self.informational.reaches(req.version) => {
                Answer::Later(Box::pin(Hinted {
                    // Commands that only remove fields make none of their own.
                    hint: (!self.fields.is_empty()).then(|| Interim {
                        status: 103,
                        headers: Headers::shared(self.fields.clone()),
                    }),
                    answer,
                    commands: self.commands.clone(),
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

/// A later answer with the path's 103 before it, and its commands applied to the 103s the
/// answer posts.
struct Hinted {
    /// Posted when the client's driver first polls the answer.
    hint: Option<Interim>,
    answer: Pending,
    commands: Rc<HeaderRewriter>,
}

impl Future for Hinted {
    type Output = Response;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        let this = &mut *self;
        if let Some(hint) = this.hint.take() {
            interim::post(hint);
        }
        let from = interim::posted();
        let polled = this.answer.as_mut().poll(cx);
        let commands = &this.commands;
        interim::edit_since(from, |i| {
            if i.status == 103 {
                let mut fields = std::mem::take(&mut i.headers).into_vec();
                commands.apply_to(&mut fields);
                i.headers = fields.into();
            }
        });
        polled
    }
}
