//! A miss's body on its way to the client, copied aside and stored once whole. The client
//! gets each piece as it arrives; the copy stops (and nothing is stored) once it passes the
//! object size limit, so memory is bounded by that limit, not by the object.

use super::store::{Leader, Store, Stored};
use crate::http::body::Next;
use crate::http::{Body, BodyStream, Frame, StreamBody};
use bytes::Bytes;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A response being stored: its head, and the body copied so far.
pub struct Filling {
    store: Arc<Store>,
    key: Bytes,
    head: Stored,
    body: Vec<u8>,
    /// The fill others wait for, if this request leads one: dropped once stored or given up.
    _leader: Option<Leader>,
}

impl Filling {
    pub fn new(store: Arc<Store>, key: Bytes, head: Stored, leader: Option<Leader>) -> Filling {
        Filling {
            store,
            key,
            head,
            body: Vec::new(),
            _leader: leader,
        }
    }

    /// `body` on its way to the client, stored once whole (a body ready now is stored now),
    /// and whether it is to be stored (not when its length is over the limit).
    pub fn wrap(mut self, body: Body) -> (Body, bool) {
        let body = match body {
            Body::Empty => {
                self.finish();
                Body::Empty
            }
            Body::Bytes(b) => {
                let fits = self.push(&b);
                if fits {
                    self.finish();
                }
                return (Body::Bytes(b), fits);
            }
            Body::Stream(s) => {
                if s.len.is_some_and(|n| n > self.store.max_object() as u64) {
                    return (Body::Stream(s), false);
                }
                if let Some(n) = s.len {
                    // Bounded by the object size limit just checked.
                    self.body.reserve_exact(n as usize);
                }
                Body::Stream(StreamBody {
                    len: s.len,
                    stream: Box::new(Tee {
                        inner: s.stream,
                        len: s.len,
                        filling: Some(self),
                    }),
                })
            }
            // Files and parts do not come from a backend.
            other => return (other, false),
        };
        (body, true)
    }

    fn push(&mut self, data: &[u8]) -> bool {
        if self.body.len() + data.len() > self.store.max_object() {
            return false;
        }
        self.body.extend_from_slice(data);
        true
    }

    fn finish(mut self) {
        self.head.body = Bytes::from(std::mem::take(&mut self.body));
        let head = std::mem::replace(&mut self.head, Stored::placeholder());
        self.store.insert(self.key.clone(), head);
    }
}

struct Tee {
    inner: Box<dyn BodyStream>,
    /// The declared length: once that much is in, the body is whole (a codec may not poll
    /// for the end).
    len: Option<u64>,
    filling: Option<Filling>,
}

impl BodyStream for Tee {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let next = std::task::ready!(self.inner.poll_frame(cx));
        match &next {
            Some(Ok(Frame::Data(d))) => {
                if let Some(f) = &mut self.filling {
                    if !f.push(d) {
                        self.filling = None;
                    } else if self.len == Some(f.body.len() as u64) {
                        if let Some(f) = self.filling.take() {
                            f.finish();
                        }
                    }
                }
            }
            // The trailers are kept with the body, and given after it.
            Some(Ok(Frame::Trailers(t))) => {
                if let Some(mut f) = self.filling.take() {
                    f.head.trailers = t.clone();
                    f.finish();
                }
            }
            None => {
                if let Some(f) = self.filling.take() {
                    f.finish();
                }
            }
            Some(Err(_)) => self.filling = None,
        }
        Poll::Ready(next)
    }
}
