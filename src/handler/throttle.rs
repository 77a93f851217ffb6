//! `throttle-response: ON` (h2o): a 200 answer whose header has `X-Traffic: N` (set by the
//! application, or by `header.add` on the path) is sent at about N bytes a second; the field
//! itself is taken out. Applied after the path's header commands, so `header.add` can set it.
//! A path without `throttle-response` does not look for the field.

use crate::http::body::Next;
use crate::http::{Body, BodyError, BodySource, BodyStream, Frame, Response, Side, StreamBody};
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The throttle lets a tenth of a second's worth through at a time, as h2o sends one chunk
/// every 100 ms.
const SLOTS_PER_SECOND: u64 = 10;

/// Takes `X-Traffic` out of `resp` and throttles its body to that many bytes a second.
pub fn apply(resp: &mut Response) {
    let Some(i) = resp
        .headers
        .iter()
        .position(|(n, _)| n.eq_ignore_ascii_case(b"x-traffic"))
    else {
        return;
    };
    if resp.status != 200 {
        return;
    }
    let rate = std::str::from_utf8(&resp.headers[i].1)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&r| r > 0);
    // As h2o: a value that is not a number leaves the answer as it is, field included.
    let Some(rate) = rate else {
        return;
    };
    resp.headers.remove(i);
    let body = std::mem::take(&mut resp.body);
    let len = body.known_len();
    let source = match body {
        Body::Stream(s) => Source::Stream(s.stream),
        known => match BodySource::new(known) {
            Some(b) => Source::Known(b),
            None => return,
        },
    };
    resp.body = Body::Stream(StreamBody {
        len,
        stream: Box::new(Throttled {
            source,
            held: Bytes::new(),
            rate,
            start: None,
            sent: 0,
            sleep: None,
        }),
    });
}

enum Source {
    Known(BodySource),
    Stream(Box<dyn BodyStream>),
}

struct Throttled {
    source: Source,
    /// What the source gave beyond what the throttle let through so far.
    held: Bytes,
    /// Bytes a second.
    rate: u64,
    /// When the first byte was asked for.
    start: Option<Instant>,
    sent: u64,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Throttled {
    /// Bytes that may go now: a slot's worth ahead of the rate since the start.
    fn allowance(&self, now: Instant, start: Instant) -> u64 {
        let elapsed = now.duration_since(start).as_micros() as u64;
        let earned = (u128::from(self.rate) * u128::from(elapsed) / 1_000_000) as u64;
        let slot = (self.rate / SLOTS_PER_SECOND).max(1);
        (earned + slot).saturating_sub(self.sent)
    }

    /// When `n` more bytes may go.
    fn when(&self, start: Instant, n: u64) -> Instant {
        let slot = (self.rate / SLOTS_PER_SECOND).max(1);
        let due = (self.sent + n).saturating_sub(slot);
        let us = u128::from(due) * 1_000_000 / u128::from(self.rate);
        start + Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
    }

    /// The next piece of the source (`held` first), at most `max` bytes.
    fn next_piece(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<Next> {
        if !self.held.is_empty() {
            let n = max.min(self.held.len());
            return Poll::Ready(Some(Ok(Frame::Data(self.held.split_to(n)))));
        }
        match &mut self.source {
            Source::Known(b) if b.remaining() == 0 => Poll::Ready(None),
            Source::Known(b) => {
                if let Some(bytes) = b.take_bytes(max, 1) {
                    return Poll::Ready(Some(Ok(Frame::Data(bytes))));
                }
                let mut buf = Vec::new();
                match b.fill(&mut buf, max) {
                    Ok(_) => Poll::Ready(Some(Ok(Frame::Data(Bytes::from(buf))))),
                    Err(e) => Poll::Ready(Some(Err(BodyError::new(
                        Side::Internal,
                        format!("read: {e}"),
                    )))),
                }
            }
            Source::Stream(s) => match s.poll_frame(cx) {
                Poll::Ready(Some(Ok(Frame::Data(mut b)))) if b.len() > max => {
                    self.held = b.split_off(max);
                    Poll::Ready(Some(Ok(Frame::Data(b))))
                }
                other => other,
            },
        }
    }
}

impl BodyStream for Throttled {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        if let Some(sleep) = &mut self.sleep {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        let now = Instant::now();
        let start = *self.start.get_or_insert(now);
        let allowed = self.allowance(now, start);
        if allowed == 0 {
            let slot = (self.rate / SLOTS_PER_SECOND).max(1);
            let mut sleep = Box::pin(tokio::time::sleep_until(self.when(start, slot)));
            if sleep.as_mut().poll(cx).is_pending() {
                self.sleep = Some(sleep);
                return Poll::Pending;
            }
            return self.poll_frame(cx);
        }
        let max = usize::try_from(allowed.min(64 * 1024)).unwrap_or(64 * 1024);
        let piece = self.next_piece(cx, max);
        if let Poll::Ready(Some(Ok(Frame::Data(b)))) = &piece {
            self.sent += b.len() as u64;
        }
        piece
    }
}
