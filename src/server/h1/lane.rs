//! The lane's inline answer (`connection/park/lane.rs`): a request answered from the bytes
//! the lane read, without a task of its own, by the code a connection's task runs for it.

use super::switch::is_preface_prefix;
use super::{build_request, Out, Reply, SplicedBodies};
use crate::http::clock::BatchClock;
use crate::http::repeat::Repeatable;
use crate::http::Request;
use crate::proto::h1::BodyFraming;
use crate::server::context::{Addrs, WorkerCtx};
use crate::server::request_end::{request_ended, Counted, Figures};
use crate::server::request_start;
use bytes::{Buf, Bytes, BytesMut};

/// What the lane (`connection/park/lane.rs`) did with the request at the start of its read
/// buffer.
pub(crate) enum LaneStep {
    /// Answered: sent (`send_alone`) or into the write buffer; the read buffer stepped
    /// past it.
    Answered,
    /// Not an inline answer (or not a complete request): a task takes the connection from
    /// here, the read buffer as it was.
    Handover,
}

/// Answers the request at the start of `rbuf` on a plain connection of the lane when it is
/// the inline path of `Conn::answer`: a complete head without body or upgrade, keep-alive
/// (the server is not stopping), a handler that answers now and a body in memory or one
/// range of a file.
/// Everything else is a `Handover`, which a task serves from the same bytes. `fresh`: no
/// request answered on the connection yet (the HTTP/2 preface may come). `send_alone` sends
/// an answer that needs no copy (the kept answer to the read's only request) and says how
/// much of it the socket took. A body in memory goes to `splice`, to be sent from there
/// after the bytes `wbuf` holds before it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer_in_lane(
    ctx: &WorkerCtx,
    addrs: &Addrs,
    fresh: bool,
    clock: &BatchClock,
    rbuf: &mut BytesMut,
    wbuf: &mut Vec<u8>,
    splice: &mut SplicedBodies,
    send_alone: impl FnOnce(&[u8]) -> usize,
) -> LaneStep {
    if fresh && is_preface_prefix(rbuf) {
        return LaneStep::Handover;
    }
    if !ctx.stopping.get() {
        let mut memo = ctx.answer_memo.borrow_mut();
        if let Some((given, answer)) = memo.give(rbuf, addrs.1, clock) {
            // The read's only request, with nothing queued before it: the kept answer goes
            // to the socket as it is, and only what the socket did not take is copied.
            let alone = wbuf.is_empty() && splice.is_empty() && rbuf.len() == given.head_len;
            let sent = if alone { send_alone(answer) } else { 0 };
            wbuf.extend_from_slice(answer.get(sent..).unwrap_or_default());
            let total = answer.len() as u64;
            drop(memo);
            rbuf.advance(given.head_len);
            // A kept answer takes no time of its own: it starts and ends at one reading.
            let figures = Figures {
                proto: crate::metrics::Proto::Http1,
                status: given.status,
                bytes_in: given.head_len as u64,
                // Counted only: a kept answer's route has no access log.
                body_bytes: 0,
                total_bytes: total,
            };
            let counted = crate::metrics::start().map(|mark| Counted {
                started: mark,
                ended: Some(mark),
            });
            request_ended(figures, counted, None);
            return LaneStep::Answered;
        }
    }
    answer_parsed(ctx, *addrs, rbuf, wbuf, splice)
}

/// `answer_in_lane` for a request the answer memo does not know: parsed, routed and written.
/// Out of line: the lane's loop around a kept answer stays small, and one call is little
/// beside parsing and routing.
#[inline(never)]
fn answer_parsed(
    ctx: &WorkerCtx,
    addrs: Addrs,
    rbuf: &mut BytesMut,
    wbuf: &mut Vec<u8>,
    splice: &mut SplicedBodies,
) -> LaneStep {
    // The routing the request starts with, borrowed for this call.
    let routing = ctx.routing();
    let parsed = (ctx.parse_memo.borrow_mut()).parse(rbuf, &routing.head_limits);
    let Ok(Some(head)) = parsed else {
        return LaneStep::Handover;
    };
    if head.body != BodyFraming::None || head.upgrade || !head.keep_alive || ctx.stopping.get() {
        return LaneStep::Handover;
    }
    let head_len = head.len as u64;
    let mut req = build_request(head, rbuf, false, &addrs);
    let Some((resp, route)) = request_start::route_now(&routing, &mut req) else {
        return hand_back(rbuf, &req);
    };
    let mut reply = Reply {
        req,
        resp,
        log: route.log().cloned(),
        framing: BodyFraming::None,
        keep_alive: true,
        expect_continue: false,
        head_len,
    };
    // A body that is not copied (large bytes, a file without a copy in memory) is sent
    // from where it is; other answers that wait (parts of a file) go to a task.
    if !reply.inline() && !super::lane_sends(&reply.resp.body) {
        return hand_back(rbuf, &reply.req);
    }
    // The path's checks, now that the answer is the lane's to write (a task that took the
    // request over would run them again). A refusal is a small answer of their own.
    if let Some(refusal) = route.check_in_lane(&mut reply.req) {
        reply.resp = refusal;
    }
    // A repeatable answer is kept for the next request with the same head (`AnswerMemo`),
    // once that head came twice in a row: varied traffic copies no answers.
    let keep = route.answer_repeats(&reply.resp) && {
        let mut memo = ctx.answer_memo.borrow_mut();
        memo.wants() && memo.seen_again(reply.req.raw_head(), addrs.1)
    };
    let kept = (keep && reply.inline())
        .then(|| Repeatable::of(&reply.resp.body))
        .flatten()
        .map(|source| {
            (
                Bytes::copy_from_slice(reply.req.raw_head()),
                reply.resp.status,
                source,
            )
        });
    let start = wbuf.len();
    // A kept answer is copied whole (the memo keeps its bytes); any other body in memory is
    // sent from where it is.
    let out = Out {
        server_line: routing.server_line(addrs.1.port()),
        wbuf,
        splice: if kept.is_none() { Some(splice) } else { None },
        tls: None,
    };
    out.write_inline(reply, rbuf);
    if let Some((head, status, source)) = kept {
        let answer = &wbuf[start..];
        (ctx.answer_memo.borrow_mut()).keep(&head, addrs.1, status, source, answer);
    }
    LaneStep::Answered
}

/// Puts the head of `req` back in front of `rbuf` for the task that takes over (a copy: the
/// rare path of an answer that is not inline, e.g. a large file). Exactly sized: the lane
/// copies the bytes it hands over into a buffer of their own anyway.
#[cold]
fn hand_back(rbuf: &mut BytesMut, req: &Request) -> LaneStep {
    let head = req.raw_head();
    let mut whole = BytesMut::with_capacity(head.len() + rbuf.len());
    whole.extend_from_slice(head);
    whole.extend_from_slice(rbuf);
    *rbuf = whole;
    LaneStep::Handover
}
