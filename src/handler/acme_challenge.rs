//! `/.well-known/acme-challenge/TOKEN` of every host when `acme` offers `http-01` (RFC 8555
//! §8.3): the key authorization of a challenge under way, or 404. The ACME task puts the
//! token in `tls::managed` before it tells the CA to fetch it.

use crate::config::ACME_CHALLENGE_PREFIX;
use crate::http::{Answer, Body, Handler, Request, Response};
use bytes::Bytes;

pub struct AcmeChallengeHandler;

impl Handler for AcmeChallengeHandler {
    fn handle(&self, req: &Request) -> Answer {
        let token = req
            .path()
            .strip_prefix(ACME_CHALLENGE_PREFIX.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"/"))
            .and_then(|t| std::str::from_utf8(t).ok());
        let Some(key_authorization) = token.and_then(crate::tls::managed::http01) else {
            return Answer::Now(Response::error(404));
        };
        Answer::Now(Response {
            status: 200,
            headers: vec![(
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(b"application/octet-stream"),
            )]
            .into(),
            body: Body::Bytes(Bytes::from(key_authorization)),
        })
    }
}
