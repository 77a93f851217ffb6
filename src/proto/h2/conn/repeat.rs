//! Repeated requests answered from the memo (`RequestMemo`, `AnswerMemo`); see `LIFECYCLE.md`.

use super::headers::{Meta, Parsed};
use super::send::{put_shared, shared_bytes};
use super::{Connection, Phase, StreamDone};
use crate::http::recycle::FieldList;
use crate::http::repeat::Repeatable;
use crate::http::Body;
use crate::proto::h2::frame::{self, flag, kind};
use crate::proto::h2::runs::{self, Run, RunBuffer};
use bytes::Bytes;
use std::rc::Rc;

impl Connection {
    /// Keeps the answer just sent whole for the memoised request: its header block is the
    /// headers cache's (`valid`), `body` what the DATA frame carried.
    #[cold]
    #[inline(never)]
    pub(super) fn keep_answer(&mut self, status: u16, body: Body, tracked: bool) {
        let block = &self.headers_cache.block;
        let Some(data) = shared_bytes(&body) else {
            return;
        };
        let Ok(body_len) = u32::try_from(data.len()) else {
            return;
        };
        let Some(reuse) = Repeatable::of(&body) else {
            return;
        };
        if block.len() > self.peer_max_frame as usize {
            return;
        }
        // The frames, their stream ids written per answer; a small body with them.
        let frames = &mut self.memo.frames;
        frames.clear();
        frame::put_head(frames, block.len(), kind::HEADERS, flag::END_HEADERS, 0);
        frames.extend_from_slice(block);
        frame::put_head(frames, data.len(), kind::DATA, flag::END_STREAM, 0);
        let body_in_frames = data.len() <= FRAMES_BODY_MAX;
        if body_in_frames {
            frames.extend_from_slice(&data);
        }
        let frames_len = frames.len() as u32;
        if frames.len() < FRAMES_COPY {
            frames.resize(FRAMES_COPY, 0);
        }
        self.memo.answer_fresh = None;
        self.memo.renew_left = 0;
        self.memo.answer = Some(AnswerMemo {
            status,
            frames_len,
            head_len: block.len() as u32,
            body_len,
            body_in_frames,
            reuse,
            data,
            stamp: self.headers_cache.stamp,
            tracked,
        });
    }

    /// A HEADERS frame with END_STREAM and END_HEADERS, without padding or priority
    /// (`REPEAT_FLAGS`), for stream `id`, answered from the memo (`answer_repeat`) before it
    /// is decoded as a frame, when the usual path would find it a new request with the
    /// memoised block: the connection open with no header block in progress, a new odd
    /// stream id, room for one more stream, the HPACK table unchanged since the memo and the
    /// request bodiless. Then it counts as the usual path counts a new stream, and returns
    /// how many more repeats may go (`answer_repeat`). Returns None (nothing done) otherwise,
    /// and the frame takes the usual path. The cheapest check that
    /// turns away a connection without a memo comes first.
    #[inline(always)]
    pub(super) fn repeat_headers(&mut self, id: u32, block: &[u8]) -> Option<usize> {
        if self.memo.answer.is_none()
            || !matches!(self.phase, Phase::Open)
            || self.partial.is_some()
            || !self.decoder.kept_table()
        {
            return None;
        }
        if id <= self.max_client_stream || id % 2 == 0 {
            return None;
        }
        match self.memo.parsed_for(block) {
            Some(p) if Meta::of(p).bodiless() => {}
            _ => return None,
        }
        let room = self.answer_repeat(id)?;
        self.count_opened(id, 1);
        Some(room)
    }

    /// After a frame answered by `repeat_headers`, from `first` to `at` in `input`, answers
    /// the frames from `at` on that repeat it exactly (the same length, type, flags and
    /// block) for new odd stream ids, `room` of them at most (as `repeat_headers` found it).
    /// Nothing a repeat changes bears on what `repeat_headers` found of the connection and
    /// the memo, only on the stream ids, the counts and the room. The run goes into the
    /// worker's run buffer (`runs`), one piece of output, when no unwritten output holds that
    /// buffer; else each repeat is written as `put_repeat` writes it. Returns where the first
    /// frame it left starts.
    #[inline(always)]
    pub(super) fn repeat_run(
        &mut self,
        runs: &mut RunBuffer,
        input: &[u8],
        first: usize,
        mut at: usize,
        room: usize,
    ) -> usize {
        let total = at - first;
        // The frame header's length, type and flags.
        let Some(&prefix) = input[first..].first_chunk::<5>() else {
            return at;
        };
        let mut last = self.max_client_stream;
        let mut n = 0;
        // In the run buffer when it is free (`runs`), else each on its own.
        if room > 0 && next_repeat(input, at, total, &prefix, &self.memo.block, last).is_some() {
            if let Some(mut run) = self.start_run(runs, room) {
                while n < room {
                    let Some(id) = next_repeat(input, at, total, &prefix, &self.memo.block, last)
                    else {
                        break;
                    };
                    if !run.put(id) {
                        break;
                    }
                    self.track_repeat(id);
                    last = id;
                    n += 1;
                    at += total;
                }
                self.finish_run(runs, run);
            }
        }
        while n < room {
            let Some(id) = next_repeat(input, at, total, &prefix, &self.memo.block, last) else {
                break;
            };
            self.put_repeat(id);
            last = id;
            n += 1;
            at += total;
        }
        self.count_repeats(n);
        self.count_opened(last, n);
        at
    }

    /// Counts `n` streams up to `last`, answered by `put_repeat` before they were decoded,
    /// as `on_headers` counts new streams, but not in the batch (`REQUEST_BATCH`): a repeat
    /// holds nothing but its place in the output, which `Settings::max_write` bounds
    /// (`repeats_room`, and `recv_frames` pauses when it is full), so a read full of repeats
    /// is answered in one `recv`.
    #[inline(always)]
    pub(super) fn count_opened(&mut self, last: u32, n: usize) {
        self.max_client_stream = last;
        self.opened_lately = self
            .opened_lately
            .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// Answers stream `id`, which just sent the memoised request's block with END_STREAM,
    /// with the memoised answer when it is still the answer and may go now
    /// (`repeat_allowed`, `repeats_room`): the same HEADERS block and DATA bytes as the
    /// handler's answer went out with, and no request made, routed or handed out, no stream
    /// in the table. Returns how many more repeats may go now (`repeats_room` less this one:
    /// each repeat takes one from every limit it counts), or None (nothing done), and the
    /// request takes the usual path.
    #[inline(always)]
    pub(super) fn answer_repeat(&mut self, id: u32) -> Option<usize> {
        if !self.repeat_allowed() {
            return None;
        }
        let room = self.repeats_room().checked_sub(1)?;
        self.put_repeat(id);
        self.count_repeats(1);
        Some(room)
    }

    /// Whether the memoised answer is still the answer, and may go now as far as the
    /// connection's state goes (a repeat does not change any of it). It is the answer when
    /// the header block is still the cache's and nothing was encoded since (the HPACK
    /// encoder's table is as it found it), of this turn's Date second (the block indexes the
    /// Date: a new second renews the answer), and what it was made from still holds
    /// (`Repeatable::holds_at`, the one rule). It may go now when the usual
    /// path would send it at once: no earlier request waits for its answer (answers keep the
    /// requests' order), no stream waits to send, the handlers are below their limit, the
    /// peer's frame size takes the body, and neither side is shutting the connection down
    /// (a repeat then never closes it: `count_repeats` skips `check_done`).
    #[inline(always)]
    pub(super) fn repeat_allowed(&mut self) -> bool {
        let Some(a) = &self.memo.answer else {
            return false;
        };
        let cache = &self.headers_cache;
        if !(cache.valid
            && cache.stamp == a.stamp
            && matches!(self.phase, Phase::Open)
            && !self.peer_goaway
            && self.requests.is_empty()
            && self.ready.is_empty()
            && self.in_handler < self.cfg.max_concurrent_requests
            && a.body_len <= self.peer_max_frame)
        {
            return false;
        }
        // Of this `recv`: the Date second and the open-file cache's clock (coarser than a
        // turn) are read once per turn.
        match self.memo.answer_fresh {
            Some(fresh) => fresh,
            None => {
                let fresh = cache.date == self.date && a.reuse.holds_at(self.coarse_ns);
                self.memo.answer_fresh = Some(fresh);
                fresh
            }
        }
    }

    /// How many repeats of the memoised answer may go now, as far as what each repeat changes
    /// goes: the streams open or closed unwritten (`max_streams`), the windows (each takes
    /// the body) and the output (one more while it is not full, as `output_full` says).
    #[inline(always)]
    pub(super) fn repeats_room(&self) -> usize {
        let Some(a) = &self.memo.answer else {
            return 0;
        };
        let streams = (self.cfg.max_streams as usize)
            .saturating_sub(self.streams.len() + self.closed_unwritten as usize);
        let body = i64::from(a.body_len);
        let windows =
            if body > i64::from(self.peer_initial_window) || self.send_conn_window.size() < 0 {
                0
            } else if body == 0 {
                usize::MAX
            } else {
                usize::try_from(self.send_conn_window.size() / body).unwrap_or(0)
            };
        let each = a.frames_len as usize + if a.body_in_frames { 0 } else { body as usize };
        let output = self
            .cfg
            .max_write
            .saturating_sub(self.out.len() + self.spliced.len())
            .div_ceil(each.max(1));
        streams.min(windows).min(output)
    }

    /// Takes the worker's run buffer (`runs`) for at most `limit` repeats of the memoised
    /// answer, when it is free and the answer's body would be spliced: other answers are one
    /// piece of output already.
    #[inline(never)]
    pub(super) fn start_run(&self, runs: &mut RunBuffer, limit: usize) -> Option<Run> {
        let a = self.memo.answer.as_ref()?;
        if a.body_in_frames || a.data.len() < self.cfg.splice_min {
            return None;
        }
        let head = a.head_len as usize;
        Run::start(
            runs,
            runs::Answer {
                frames: self.memo.frames.get(..a.frames_len as usize)?,
                body: &a.data,
                ids: [5, frame::HEADER_LEN + head + 5],
            },
            limit,
        )
    }

    /// Puts the run's bytes after the output's.
    #[inline(never)]
    pub(super) fn finish_run(&mut self, runs: &mut RunBuffer, run: Run) {
        if let Some(piece) = run.finish(runs) {
            self.spliced.push(self.out.len(), piece);
        }
    }

    /// Writes the memoised answer for stream `id` (with room for it: `repeats_room`): its
    /// frames with this stream's id, and its body.
    #[inline(always)]
    pub(super) fn put_repeat(&mut self, id: u32) {
        let Some(a) = &self.memo.answer else {
            return;
        };
        let at = self.out.len();
        let len = a.frames_len as usize;
        match self.memo.frames.first_chunk::<FRAMES_COPY>() {
            // Short frames are copied with the padding after them, in a copy of fixed size
            // (a few vector moves, not a call to `memcpy`), and the padding cut off.
            Some(short) if len <= FRAMES_COPY => {
                self.out.extend_from_slice(short);
                self.out.truncate(at + len);
            }
            _ => self.out.extend_from_slice(&self.memo.frames[..len]),
        }
        if !a.body_in_frames {
            put_shared(
                &mut self.out,
                &mut self.spliced,
                self.cfg.splice_min,
                &a.data,
            );
        }
        let sid = id.to_be_bytes();
        self.out[at + 5..at + 9].copy_from_slice(&sid);
        let d = at + 2 * frame::HEADER_LEN + a.head_len as usize - 4;
        self.out[d..d + 4].copy_from_slice(&sid);
        self.track_repeat(id);
    }

    /// Counts the repeat for stream `id` in the metrics when the memoised answer is tracked.
    #[inline(always)]
    pub(super) fn track_repeat(&mut self, id: u32) {
        let Some(a) = &self.memo.answer else {
            return;
        };
        if a.tracked {
            self.done.push(StreamDone {
                id,
                status: a.status,
                mark: self.turn_mark,
                head_bytes: u64::from(a.head_len),
                body_bytes: u64::from(a.body_len),
                complete: true,
            });
        }
    }

    /// Counts `n` answers written by `put_repeat`: their bodies in the connection window,
    /// their streams as closed unwritten (each one's END_STREAM is in the output, and the
    /// client counts it as open until it reads it). No stream closed, so `check_done` would
    /// find what it found before (`repeat_allowed`).
    #[inline(always)]
    pub(super) fn count_repeats(&mut self, n: usize) {
        let Some(a) = &self.memo.answer else {
            return;
        };
        self.send_conn_window
            .consume(u64::from(a.body_len) * n as u64);
        // A proxy cache's hits given again count as its hits (a branch for any other).
        a.reuse.given(n);
        self.dribble.sent(n as u32);
        self.close_repeats(n as u32);
    }
}

/// The stream id of the frame at `at` in `input` when it repeats the run's first frame
/// exactly (`total` bytes: the same length, type and flags in `prefix`, the same `block`)
/// for a new odd stream id above `last`.
#[inline(always)]
pub(super) fn next_repeat(
    input: &[u8],
    at: usize,
    total: usize,
    prefix: &[u8; 5],
    block: &[u8],
    last: u32,
) -> Option<u32> {
    let frame = input.get(at..at + total)?;
    let id = u32::from_be_bytes(word(frame, 5)) & frame::MAX_WINDOW;
    (frame.first_chunk::<5>() == Some(prefix)
        && id > last
        && id % 2 == 1
        && same_block(block, &frame[frame::HEADER_LEN..]))
    .then_some(id)
}

/// Whether two header blocks are the same bytes. A repeated request's block is a few index
/// bytes: up to 16 are compared as two overlapping words each, without a call to `memcmp`.
#[inline(always)]
pub(super) fn same_block(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        _ => a == b,
    }
}

/// The `N` bytes of `s` from `at` (within `s`).
#[inline(always)]
pub(super) fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    s.get(at..at + N)
        .and_then(|w| w.try_into().ok())
        .unwrap_or([0; N])
}

/// The last request decoded from a header block that left the HPACK table as it was (indexed
/// fields and literals without indexing only). The same block bytes, while no block since
/// changed the table ([`hpack::Decoder::kept_table`]), decode to the same fields: the same
/// size against the list limit, the same validation, the same request. So the request is
/// repeated instead, costing a field-list copy rather than decoding and checking each field.
/// Any block that changes the table clears it.
#[derive(Default)]
pub(super) struct RequestMemo {
    block: Vec<u8>,
    /// The block of the last request offered to `store` (`RequestMemo::seen_again`): a
    /// request is kept the second time in a row it comes.
    candidate: Vec<u8>,
    /// Its field list is shared with its repeats.
    pub(super) parsed: Option<Parsed>,
    /// The shared list's allocation, kept for the next request remembered when no repeat
    /// held it any more.
    spare: Option<Rc<FieldList>>,
    /// The last stream opened for this request (0: none).
    pub(super) stream: u32,
    /// The first stream of the last run of streams opened for this request one after the
    /// other (to `stream`; 0: none), and whether the run goes on (no other request decoded
    /// since): their answers index the resource's own fields (`RequestMemo::repeats`).
    run_from: u32,
    in_run: bool,
    /// The answer given to it, when the handler said it repeats: given again to the next
    /// streams that send the same block, as long as nothing it depends on changed
    /// (`Connection::answer_repeat`).
    pub(super) answer: Option<AnswerMemo>,
    /// The answer's HEADERS frame and the head of its DATA frame (stream ids zero), written
    /// as they are for each repeat, with the body when it is small (`AnswerMemo::frames_len`
    /// bytes), zeros after them up to [`FRAMES_COPY`]. Its allocation is kept for the next
    /// answer.
    frames: Vec<u8>,
    /// Whether `answer` is still the answer, as found by this `recv`'s first repeat (the
    /// Date second and the body's file, which a `recv` does not change).
    pub(super) answer_fresh: Option<bool>,
    /// Requests left that may renew a kept answer which could not be given (see
    /// `RequestMemo::renews`).
    renew_left: u8,
}

/// A body up to this long is kept with its answer's frames and written with them.
pub(super) const FRAMES_BODY_MAX: usize = 1024;

/// Kept frames up to this long are copied as this many bytes (`Connection::put_repeat`):
/// a HEADERS frame of a few indexed fields, the head of a DATA frame and a short body.
pub(super) const FRAMES_COPY: usize = 64;

/// An inline answer to the memoised request, sent whole (HEADERS, one DATA with
/// END_STREAM), to give again.
pub(super) struct AnswerMemo {
    status: u16,
    /// The length of `RequestMemo::frames` without its padding.
    frames_len: u32,
    /// The header block's length (in `RequestMemo::frames`).
    head_len: u32,
    body_len: u32,
    /// The body is in `RequestMemo::frames` too (up to [`FRAMES_BODY_MAX`] bytes).
    body_in_frames: bool,
    /// Whether the body still holds: bytes always, a file's contents from the open-file
    /// cache while it answers from the file unchecked (`Repeatable::holds_at`). Holds the
    /// file, as the body did.
    reuse: Repeatable,
    /// The body's bytes, at hand for each repeat.
    data: Bytes,
    /// The response header block is the headers cache's while it keeps this stamp (nothing
    /// else encoded since: the HPACK encoder's table is as the block found it).
    stamp: u64,
    /// The metrics count it (`respond_tracked`).
    tracked: bool,
}

/// Longer blocks are not kept: a client repeating a request sends a few dozen bytes.
pub(super) const MEMO_BLOCK_MAX: usize = 256;

/// Requests that may renew a kept answer gone stale, each answered before the next is
/// decoded (`RequestMemo::renews`): one whose block indexed new fields, then one to keep.
pub(super) const RENEW_TRIES: u8 = 2;

impl RequestMemo {
    /// The request `block` gives, when it is the remembered block (to repeat).
    #[inline]
    pub(super) fn parsed_for(&self, block: &[u8]) -> Option<&Parsed> {
        let p = self.parsed.as_ref()?;
        if !same_block(&self.block, block) {
            return None;
        }
        Some(p)
    }

    /// Remembers `parsed`, just decoded from `block` without changing the table, for stream
    /// `id`, when `block` is the one seen last time (`seen_again`).
    pub(super) fn store(&mut self, id: u32, block: &[u8], parsed: &Parsed) {
        if block.len() > MEMO_BLOCK_MAX {
            return self.clear();
        }
        if !self.seen_again(block) {
            return;
        }
        self.clear();
        self.stream = id;
        self.run_from = id;
        self.in_run = true;
        self.block.extend_from_slice(block);
        let mut kept = parsed.repeat();
        kept.req.share_fields(&mut self.spare);
        self.parsed = Some(kept);
    }

    /// Whether `block` is the block of the last request offered to `store`: only then is its
    /// request worth copying into the memo. Otherwise it becomes the one to look for, at the
    /// cost of copying its few bytes (traffic that does not repeat would otherwise copy
    /// every request, to answer none from the memo). The memo keeps what it holds.
    fn seen_again(&mut self, block: &[u8]) -> bool {
        if same_block(&self.candidate, block) {
            return true;
        }
        self.candidate.clear();
        self.candidate.extend_from_slice(block);
        false
    }

    /// Whether the request just found to be the remembered one, which could not be answered
    /// from the memo, should renew its answer: yes when an answer is kept (it went stale: a
    /// new Date second, a file to check again, or it cannot go yet), and for the next
    /// [`RENEW_TRIES`] - 1 such requests, since the first answer after a stale one may not
    /// be kept (its header block added fields to the HPACK table).
    pub(super) fn renews(&mut self) -> bool {
        if self.answer.is_some() {
            self.renew_left = RENEW_TRIES;
        }
        let renews = self.renew_left > 0;
        self.renew_left = self.renew_left.saturating_sub(1);
        renews
    }

    /// Stream `id` opened for the remembered request (`parsed_for` found it).
    #[inline(always)]
    pub(super) fn opened(&mut self, id: u32) {
        if !self.in_run {
            self.run_from = id;
            self.in_run = true;
        }
        self.stream = id;
    }

    /// Another request decoded: the run of the remembered one ends.
    #[inline(always)]
    pub(super) fn other_request(&mut self) {
        self.in_run = false;
    }

    /// Whether stream `id` was opened for the remembered request in its last run of
    /// requests one after the other: a request that repeats, whose answer's own fields
    /// (ETag, Last-Modified) are worth indexing.
    #[inline(always)]
    pub(super) fn repeats(&self, id: u32) -> bool {
        self.run_from != 0 && self.run_from <= id && id <= self.stream
    }

    pub(super) fn clear(&mut self) {
        self.block.clear();
        self.stream = 0;
        self.run_from = 0;
        self.in_run = false;
        self.answer = None;
        self.answer_fresh = None;
        self.renew_left = 0;
        if let Some(p) = self.parsed.take() {
            p.req.recycle_shared(&mut self.spare);
        }
    }
}
