//! Sending: response HEADERS, DATA and trailers, the ready queues and the response headers
//! cache.

use super::transition::Event;
use super::{Connection, StreamDone, INDEX_VALUE_MAX, OUTPUT_HIGH_WATER};
use crate::http::body::BodyStream;
use crate::http::recycle::HeaderList;
use crate::http::response::Headers;
use crate::http::{Body, BodySource, Response};
use crate::proto::h2::frame::{self, flag, kind, Reason};
use crate::proto::h2::hpack::{BlockEncoder, Indexing, StaticName};
use crate::proto::h2::output::SplicedBodies;
use crate::proto::h2::stream::{Recv, Send, Sent, StreamOut, Tail};
use crate::proto::request_head;
use bytes::{Buf, Bytes};
use std::rc::Rc;

impl Connection {
    #[inline(always)]
    pub(super) fn respond_inner(
        &mut self,
        id: u32,
        resp: Response,
        track: Option<u64>,
        repeatable: bool,
    ) -> Option<Box<dyn BodyStream>> {
        if self.memo.stream == id {
            // The memoised request has a new answer: only it may be given again.
            self.memo.answer = None;
            self.memo.answer_fresh = None;
        }
        let Some(i) = self.index(id) else {
            if let Some(mark) = track {
                self.done.push(StreamDone {
                    id,
                    status: resp.status,
                    mark,
                    head_bytes: 0,
                    body_bytes: 0,
                    complete: false,
                });
            }
            return None;
        };
        self.transition(i, Event::LeftHandler);
        let s = &mut self.streams[i];
        let Send::Waiting { head, .. } = s.send else {
            return None;
        };
        if let Some(mark) = track {
            s.sent = Some(Sent {
                status: resp.status,
                mark,
                head: 0,
                body: 0,
            });
        }
        let no_body = head || resp.status == 204 || resp.status == 304 || resp.status < 200;
        if let Body::Stream(_) = resp.body {
            return self.respond_streamed(i, resp, no_body);
        }
        let body_len = resp.body.len();
        if !no_body && self.fits_one_frame(i, body_len) {
            if let Some(data) = in_memory(&resp.body) {
                let head =
                    self.write_headers(id, resp.status, &resp.headers, Some(body_len), false);
                crate::http::recycle::give_header_list(resp.headers);
                self.send_whole(i, &resp.body, data, head);
                if repeatable && self.memo.stream == id && self.headers_cache.valid {
                    self.keep_answer(resp.status, resp.body, track.is_some());
                }
                return None;
            }
        }
        let source = if no_body {
            None
        } else {
            BodySource::new(resp.body)
        };
        let end_stream = source.is_none();
        let head = self.write_headers(id, resp.status, &resp.headers, Some(body_len), end_stream);
        crate::http::recycle::give_header_list(resp.headers);
        if track.is_some() {
            self.count_head(i, head);
        }
        match source {
            Some(src) => {
                self.transition(i, Event::Send(Send::Body(src)));
                self.schedule(i);
            }
            None => self.finish_send(i),
        }
        None
    }

    /// Whether stream `i` can send a body of `len` bytes now in one DATA frame: the windows
    /// and the peer's frame size allow it, and no other stream waits to send (which would
    /// go first under `fill`'s order).
    #[inline(always)]
    pub(super) fn fits_one_frame(&self, i: usize, len: u64) -> bool {
        len > 0
            && len <= u64::from(self.peer_max_frame)
            && i64::try_from(len).is_ok_and(|n| {
                n <= self.streams[i].send_window.size() && n <= self.send_conn_window.size()
            })
            && self.ready.is_empty()
            && !self.output_full()
    }

    /// The whole body of stream `i` (`data`, `body`'s bytes), after its HEADERS (`head`
    /// bytes of header block): one DATA frame with END_STREAM, built in the output, and the
    /// stream is done. The small answer's path: no body source, no ready queue, no second
    /// visit in `fill`.
    #[inline(always)]
    pub(super) fn send_whole(&mut self, i: usize, body: &Body, data: &[u8], head: u64) {
        let s = &mut self.streams[i];
        frame::put_head(
            &mut self.out,
            data.len(),
            kind::DATA,
            flag::END_STREAM,
            s.id,
        );
        put_body(
            &mut self.out,
            &mut self.spliced,
            self.cfg.splice_min,
            body,
            data,
        );
        let n = data.len() as u64;
        s.send_window.consume(n);
        self.send_conn_window.consume(n);
        self.dribble.sent(1);
        if let Some(sent) = &mut s.sent {
            sent.head += head;
            sent.body += n;
        }
        self.finish_send(i);
    }

    /// `respond` with a streamed body: kept out of the inline path's way.
    #[inline(never)]
    pub(super) fn respond_streamed(
        &mut self,
        i: usize,
        resp: Response,
        no_body: bool,
    ) -> Option<Box<dyn BodyStream>> {
        let Body::Stream(body) = resp.body else {
            return None;
        };
        let id = self.streams[i].id;
        let declared = body.len;
        let head = self.write_headers(id, resp.status, &resp.headers, declared, no_body);
        self.count_head(i, head);
        if no_body {
            // Dropping the stream cancels the work behind it.
            self.finish_send(i);
            return None;
        }
        let out = Send::Stream(Box::new(StreamOut {
            queued: Bytes::new(),
            tail: Tail::Open,
            declared,
            sent: 0,
        }));
        self.transition(i, Event::Send(out));
        Some(body.stream)
    }

    /// Some streamed body has window for more: it waits on its producer, not on the client.
    pub(super) fn stream_can_take_chunks(&self) -> bool {
        self.streaming > 0
            && self.send_conn_window.is_open()
            && self
                .streams
                .iter()
                .any(|s| matches!(s.send, Send::Stream(_)) && s.send_window.is_open())
    }

    /// The output may take more bytes of body pulled from a source (below
    /// [`OUTPUT_HIGH_WATER`] and [`Settings::max_write`]).
    #[inline(always)]
    pub(super) fn has_body_room(&self) -> bool {
        self.out.len() + self.spliced.len() < OUTPUT_HIGH_WATER.min(self.cfg.max_write)
    }

    /// Writes the response HEADERS (and CONTINUATIONs); `body_len` is the content-length,
    /// `None` for a streamed body of unknown length. Returns the header block's size.
    pub(super) fn write_headers(
        &mut self,
        id: u32,
        status: u16,
        headers: &Headers,
        body_len: Option<u64>,
        end_stream: bool,
    ) -> u64 {
        let at = self.out.len();
        frame::put_head(&mut self.out, 0, kind::HEADERS, 0, id);
        let status_buf = itoa3(status);
        let date = self.date;
        let cacheable = status >= 200 && body_len.is_some();
        let cache_len = body_len.unwrap_or(0);
        if cacheable
            && self
                .headers_cache
                .matches(status, &date, headers, cache_len)
        {
            self.out.extend_from_slice(&self.headers_cache.block);
        } else {
            self.encode_headers(id, status, &status_buf, headers, body_len, cacheable);
        }
        self.frame_header_block(at, id, end_stream)
    }

    /// [`Connection::write_headers`]' encoding, when the headers cache does not hold the whole
    /// block. A field encoded as in the previous block takes that block's bytes while the
    /// HPACK table is as it left it (`HeadersCache::fields_valid`, nothing inserted since):
    /// varied answers of one kind (files of a docroot) differ in a field or two, and only
    /// those are encoded.
    fn encode_headers(
        &mut self,
        id: u32,
        status: u16,
        status_buf: &[u8; 3],
        headers: &Headers,
        body_len: Option<u64>,
        cacheable: bool,
    ) {
        let date = self.date;
        // A resource's own ETag and length go into the HPACK table only for a request
        // that repeats (the memo's, `RequestMemo::repeats`): on traffic that does not,
        // each would take an entry and evict another, to be referred to never.
        let index_own = self.memo.repeats(id);
        // A proxied response keeps the backend's Date.
        let our_date =
            status >= 200 && !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"date"));
        let length = body_len.filter(|_| status >= 200 && status != 204 && status != 304);
        let cache = &mut self.headers_cache;
        let prev_list: &[(Bytes, Bytes)] = match &cache.shared {
            Some(list) => list,
            None => &cache.headers,
        };
        // The previous block's fields line up with these one to one.
        let lined_up = cacheable
            && cache.fields_valid
            && !index_own
            && !self.encoder.owes_size_update()
            && cache.status == status
            && cache.our_date == our_date
            && cache.length == length.is_some()
            && prev_list.len() == headers.len();
        cache.next_ends.len = 0;
        let mut b = self.encoder.block(&mut self.out);
        let mut reuse = Reuse {
            prev: &cache.block,
            prev_ends: &cache.ends,
            on: lined_up,
            run: 0..0,
            base: b.written(),
            insertions: b.insertions(),
            changed: false,
            ends: &mut cache.next_ends,
        };
        reuse.item(&mut b, true, |b| {
            b.static_field(StaticName::STATUS, status_buf, Indexing::Auto)
        });
        if status >= 200 {
            if let Some(server) = &self.cfg.server_name {
                reuse.item(&mut b, true, |b| {
                    b.static_field(StaticName::SERVER, server, Indexing::Auto)
                });
            }
            if let Some(alt_svc) = &self.cfg.alt_svc {
                reuse.item(&mut b, true, |b| b.field(b"alt-svc", alt_svc));
            }
            if our_date {
                reuse.item(&mut b, cache.date == date, |b| {
                    b.static_field(StaticName::DATE, &date, Indexing::Auto)
                });
            }
            for (j, (name, value)) in headers.iter().enumerate() {
                // Compared only while the previous block's bytes may still be taken.
                let same = reuse.on
                    && prev_list
                        .get(j)
                        .is_some_and(|(n, v)| same_bytes(n, name) && same_bytes(v, value));
                reuse.item(&mut b, same, |b| {
                    let Some(known) = StaticName::of(name) else {
                        if !request_head::is_connection_specific(name) {
                            b.field(name, value);
                        }
                        return;
                    };
                    let short = value.len() <= INDEX_VALUE_MAX;
                    let indexing = match known {
                        StaticName::CONTENT_LENGTH | StaticName::TRANSFER_ENCODING => return,
                        // A resource's own: indexed for a request that repeats.
                        StaticName::ETAG if short && !index_own => Indexing::Without,
                        // The same file answered again costs one byte, as in h2o; and
                        // files deployed together share a Last-Modified second (measured
                        // on varied h2c: indexing it saves its literal on every other
                        // file's answer).
                        StaticName::ETAG | StaticName::LAST_MODIFIED if short => {
                            Indexing::Incremental
                        }
                        // A stored response's (the proxy cache's hit): its Age holds for
                        // the second, its Expires for good; indexed for a request that
                        // repeats, so its answer's block is all indexes and memoised.
                        StaticName::AGE | StaticName::EXPIRES if short && index_own => {
                            Indexing::Incremental
                        }
                        _ => Indexing::Auto,
                    };
                    b.static_field(known, value, indexing);
                });
            }
            if let Some(body_len) = length {
                // Indexed, like the ETag, for a request that repeats, and when the
                // answer before had the same length (a site of one size): otherwise
                // lengths differ, and each would evict another entry to be referred
                // to never (h2o never indexes it).
                let same = std::mem::replace(&mut cache.last_length, body_len) == body_len;
                reuse.item(&mut b, cache.body_len == body_len, |b| {
                    let mut digits = [0u8; 20];
                    let len = format_u64(body_len, &mut digits);
                    let indexing = if index_own || same {
                        Indexing::Incremental
                    } else {
                        Indexing::Without
                    };
                    b.static_field(StaticName::CONTENT_LENGTH, len, indexing);
                });
            }
        }
        let (changed, base) = reuse.finish(&mut b);
        let block = &self.out[base..];
        let cache = &mut self.headers_cache;
        std::mem::swap(&mut cache.ends, &mut cache.next_ends);
        if cacheable && !changed {
            // One byte per field (a field sent as no bytes, dropped, is none), each an
            // index: the same block is valid as a whole while nothing else is encoded. A
            // block longer than its fields are many has a literal: no need to look.
            let ends = &cache.ends;
            let all_indexes = block.len() <= ends.len && ends.all_recorded() && {
                let mut start = 0;
                ends.as_slice().iter().all(|&end| {
                    let one =
                        end == start || (end == start + 1 && is_index_byte(block[start as usize]));
                    start = end;
                    one
                })
            };
            // Nothing inserted: the next block may take these fields' bytes.
            cache.store(
                status,
                &date,
                headers,
                body_len.unwrap_or(0),
                block,
                all_indexes,
            );
            cache.our_date = our_date;
            cache.length = length.is_some();
        } else {
            cache.invalidate();
        }
    }

    /// An interim response (103 Early Hints, 102) on stream `id` before its final answer: a
    /// HEADERS frame without END_STREAM, its fields but the connection-specific ones.
    /// Nothing when the stream is gone or already answered.
    pub fn send_interim(&mut self, id: u32, status: u16, headers: &Headers) {
        if !self
            .index(id)
            .is_some_and(|i| self.streams[i].send.unanswered())
        {
            return;
        }
        let at = self.out.len();
        frame::put_head(&mut self.out, 0, kind::HEADERS, 0, id);
        let status_buf = itoa3(status);
        {
            let mut b = self.encoder.block(&mut self.out);
            b.static_field(StaticName::STATUS, &status_buf, Indexing::Auto);
            for (name, value) in headers.iter() {
                if !request_head::is_connection_specific(name) {
                    b.field(name, value);
                }
            }
        }
        // The dynamic table may have changed under the cached block's indexes.
        self.headers_cache.invalidate();
        self.frame_header_block(at, id, false);
    }

    /// Writes trailing HEADERS with END_STREAM. Pseudo-header and connection-specific
    /// fields are not sent.
    pub(super) fn write_trailers(&mut self, id: u32, trailers: &[(Bytes, Bytes)]) -> u64 {
        let at = self.out.len();
        frame::put_head(&mut self.out, 0, kind::HEADERS, 0, id);
        {
            let mut b = self.encoder.block(&mut self.out);
            for (name, value) in trailers {
                if name.starts_with(b":") || request_head::is_connection_specific(name) {
                    continue;
                }
                b.field(name, value);
            }
        }
        // The dynamic table may have changed under the cached block's indexes.
        self.headers_cache.invalidate();
        self.frame_header_block(at, id, true)
    }

    /// Frames the header block written after the 9 bytes reserved at `at`: one HEADERS, or
    /// HEADERS + CONTINUATIONs when larger than the peer's frame size. Returns the block size.
    #[inline(always)]
    pub(super) fn frame_header_block(&mut self, at: usize, id: u32, end_stream: bool) -> u64 {
        let block_len = self.out.len() - at - frame::HEADER_LEN;
        let end = if end_stream { flag::END_STREAM } else { 0 };
        if block_len <= self.peer_max_frame as usize {
            frame::patch_len(&mut self.out, at, block_len);
            self.out[at + 4] = flag::END_HEADERS | end;
        } else {
            self.split_header_block(at, id, end);
        }
        block_len as u64
    }

    /// Rare: a block larger than the peer's frame size goes out as HEADERS + CONTINUATION.
    #[cold]
    #[inline(never)]
    pub(super) fn split_header_block(&mut self, at: usize, id: u32, end: u8) {
        let max = self.peer_max_frame as usize;
        let block = self.out.split_off(at + frame::HEADER_LEN);
        self.out.truncate(at);
        let mut chunks = block.chunks(max).peekable();
        let mut first = true;
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            let (k, mut flags) = if first {
                (kind::HEADERS, end)
            } else {
                (kind::CONTINUATION, 0)
            };
            if last {
                flags |= flag::END_HEADERS;
            }
            frame::put_head(&mut self.out, c.len(), k, flags, id);
            self.out.extend_from_slice(c);
            first = false;
        }
    }

    /// Writes one DATA frame for the stream at `i`, as large as the windows, the peer's frame
    /// size and the body allow.
    pub(super) fn send_data(&mut self, i: usize) {
        let id = self.streams[i].id;
        let Send::Body(src) = &mut self.streams[i].send else {
            return self.send_stream_data(i);
        };
        let n = (self.peer_max_frame as u64)
            .min(src.remaining())
            .min(self.streams[i].send_window.available())
            .min(self.send_conn_window.available()) as usize;
        let at = self.out.len();
        frame::put_head(&mut self.out, n, kind::DATA, 0, id);
        let Send::Body(src) = &mut self.streams[i].send else {
            return;
        };
        // A frame's worth of a body in memory goes out from that memory, as whole bodies do.
        let shared = if n >= self.cfg.splice_min {
            src.take_bytes(n, n)
        } else {
            None
        };
        let filled = match shared {
            Some(b) => {
                self.spliced.push(self.out.len(), b);
                Ok(n)
            }
            // A frame's worth of a file not in memory goes from the file (cleartext only).
            None if n >= self.cfg.sendfile_min => match src.take_file(n) {
                Some((file, offset)) => {
                    self.spliced.push_file(self.out.len(), file, offset, n);
                    Ok(n)
                }
                None => src.fill(&mut self.out, n),
            },
            None => src.fill(&mut self.out, n),
        };
        match filled {
            Ok(got) if got == n => {}
            _ => {
                self.out.truncate(at);
                tracing::debug!(
                    stream = id,
                    "response body read failed; resetting the stream"
                );
                self.put_reset(id, Reason::INTERNAL_ERROR);
                self.transition(i, Event::Close { told: true });
                return;
            }
        }
        let done = src.remaining() == 0;
        let s = &mut self.streams[i];
        s.send_window.consume(n as u64);
        if let Some(sent) = &mut s.sent {
            sent.body += n as u64;
        }
        self.send_conn_window.consume(n as u64);
        self.dribble.sent(1);
        if done {
            self.out[at + 4] = flag::END_STREAM;
            self.finish_send(i);
        } else if s.send_window.is_open() {
            self.requeue(i);
        }
    }

    /// Puts stream `i`, which just sent a frame and can send more, back in its ready queue:
    /// round-robin among incremental streams; a non-incremental one keeps the lead.
    pub(super) fn requeue(&mut self, i: usize) {
        let s = &mut self.streams[i];
        let u = s.priority.urgency as usize & 7;
        s.queued = true;
        if s.priority.incremental {
            self.ready.push_back(u, s.id);
        } else {
            self.ready.push_front(u, s.id);
        }
    }

    /// One DATA frame of a streamed body's queued chunk. Once the chunk is out, the end
    /// follows if the producer gave it; otherwise the stream waits for the next push.
    pub(super) fn send_stream_data(&mut self, i: usize) {
        let peer_max_frame = self.peer_max_frame as usize;
        let conn_window = self.send_conn_window.available();
        let s = &mut self.streams[i];
        let id = s.id;
        let stream_window = s.send_window.available();
        let Send::Stream(o) = &mut s.send else { return };
        let n = (o.queued.len())
            .min(peer_max_frame)
            .min(usize::try_from(stream_window.min(conn_window)).unwrap_or(usize::MAX));
        if n == 0 {
            return;
        }
        let at = self.out.len();
        frame::put_head(&mut self.out, n, kind::DATA, 0, id);
        if n >= self.cfg.splice_min {
            self.spliced.push(self.out.len(), o.queued.split_to(n));
        } else {
            self.out.extend_from_slice(&o.queued[..n]);
            o.queued.advance(n);
        }
        o.sent += n as u64;
        let drained = o.queued.is_empty();
        let ended = o.tail != Tail::Open;
        s.send_window.consume(n as u64);
        if let Some(sent) = &mut s.sent {
            sent.body += n as u64;
        }
        self.send_conn_window.consume(n as u64);
        self.dribble.sent(1);
        if drained && ended {
            self.write_tail(i, Some(at));
        } else if !drained && self.streams[i].send_window.is_open() {
            self.requeue(i);
        }
    }

    /// Ends stream `i`'s streamed body, whose bytes are all out: END_STREAM on the DATA frame
    /// just written at `last_data` (or an empty one), or trailing HEADERS.
    pub(super) fn write_tail(&mut self, i: usize, last_data: Option<usize>) {
        let id = self.streams[i].id;
        let Send::Stream(o) = &mut self.streams[i].send else {
            return;
        };
        match std::mem::replace(&mut o.tail, Tail::End) {
            Tail::Open => return,
            Tail::End => match last_data {
                Some(at) => self.out[at + 4] = flag::END_STREAM,
                None => frame::put_head(&mut self.out, 0, kind::DATA, flag::END_STREAM, id),
            },
            Tail::Trailers(t) => {
                let n = self.write_trailers(id, &t);
                self.count_head(i, n);
            }
        }
        self.finish_send(i);
    }

    /// Counts header block bytes sent on stream `i`, if it is tracked.
    pub(super) fn count_head(&mut self, i: usize, n: u64) {
        if let Some(sent) = &mut self.streams[i].sent {
            sent.head += n;
        }
    }

    /// END_STREAM was written for the stream at `i` (or it ends without a body).
    pub(super) fn finish_send(&mut self, i: usize) {
        self.transition(i, Event::Send(Send::Done));
        let s = &mut self.streams[i];
        if let Recv::Open {
            content_length,
            received,
            ..
        } = s.recv
        {
            // Answered before the request ended (an early error, a backend that did not
            // read the body). When the rest of a declared body is already allowed by our
            // window, let it come and drop it (its END_STREAM closes the stream): some
            // clients (curl 7.88) take a reset while still uploading as a failed request.
            let rest_allowed = content_length
                .is_some_and(|cl| cl.saturating_sub(received) <= u64::from(s.recv_window));
            if rest_allowed {
                return;
            }
            // Otherwise ask the client to stop.
            let id = s.id;
            self.put_reset(id, Reason::NO_ERROR);
            self.note_reset(id);
        }
        self.transition(i, Event::Close { told: true });
    }

    /// Answers a request the connection refused itself (431, 413). A handler that had it
    /// (a streamed body) loses it: the driver drops its pending answer.
    pub(super) fn respond_early(&mut self, id: u32, status: u16) {
        let Some(i) = self.index(id) else { return };
        self.transition(i, Event::HeldDropped);
        if self.transition(i, Event::LeftHandler) {
            self.cancelled.push(id);
        }
        self.respond(id, Response::error(status));
    }

    pub(super) fn schedule(&mut self, i: usize) {
        let s = &mut self.streams[i];
        if !s.queued && s.sendable() {
            s.queued = true;
            self.ready.push_back(s.priority.urgency as usize, s.id);
        }
    }
}

/// The last response header block, when it was made of index bytes only, with what it
/// encoded: an identical response reuses the bytes without touching the encoder.
#[derive(Default)]
pub(super) struct HeadersCache {
    pub(super) valid: bool,
    /// Counts the blocks stored, never going back (not when the cache is emptied): an answer
    /// memo made with this block knows it by its stamp.
    pub(super) stamp: u64,
    status: u16,
    pub(super) date: [u8; crate::http::clock::DATE_LEN],
    /// The fields, when they were a shared list (a cached file's): the same list again is
    /// known by its address, kept valid by holding it.
    pub(super) shared: Option<Rc<HeaderList>>,
    /// Otherwise a copy of them.
    pub(super) headers: HeaderList,
    body_len: u64,
    pub(super) block: Vec<u8>,
    /// The content-length of the last answer encoded.
    pub(super) last_length: u64,
    /// The block was encoded without inserting into the table, nothing has been encoded
    /// since: each field's bytes in it (`ends`) are valid for the same field again.
    pub(super) fields_valid: bool,
    /// Where each item of `block` ends: its fields in the order `encode_headers` writes them.
    ends: ItemEnds,
    /// The next block's, being written.
    next_ends: ItemEnds,
    /// The block carried our Date, and a content-length.
    our_date: bool,
    length: bool,
}

impl HeadersCache {
    /// The table may change (or has): no block or field of it may be reused.
    pub(super) fn invalidate(&mut self) {
        self.valid = false;
        self.fields_valid = false;
    }

    /// Empties it, its stamps still counting: a kept answer never takes a later block for
    /// its own.
    pub(super) fn clear(&mut self) {
        *self = HeadersCache {
            stamp: self.stamp,
            ..HeadersCache::default()
        };
    }

    #[inline]
    pub(super) fn matches(
        &self,
        status: u16,
        date: &[u8; crate::http::clock::DATE_LEN],
        headers: &Headers,
        body_len: u64,
    ) -> bool {
        if !(self.valid && self.status == status && self.body_len == body_len && self.date == *date)
        {
            return false;
        }
        if let (Some(a), Some(b)) = (&self.shared, headers.shared_list()) {
            if Rc::ptr_eq(a, b) {
                return true;
            }
        }
        let cached: &[(Bytes, Bytes)] = match &self.shared {
            Some(list) => list,
            None => &self.headers,
        };
        cached.len() == headers.len()
            && cached
                .iter()
                .zip(headers.iter())
                .all(|(a, b)| same_bytes(&a.0, &b.0) && same_bytes(&a.1, &b.1))
    }

    pub(super) fn store(
        &mut self,
        status: u16,
        date: &[u8; crate::http::clock::DATE_LEN],
        headers: &Headers,
        body_len: u64,
        block: &[u8],
        all_indexes: bool,
    ) {
        self.valid = all_indexes;
        self.fields_valid = true;
        self.stamp += 1;
        self.status = status;
        self.date = *date;
        self.headers.clear();
        self.shared = headers.shared_list().cloned();
        if self.shared.is_none() {
            self.headers.extend_from_slice(headers);
        }
        self.body_len = body_len;
        self.block.clear();
        self.block.extend_from_slice(block);
    }
}

/// An index byte of a field in the table (one byte: indexes up to 126).
fn is_index_byte(b: u8) -> bool {
    b & 0x80 != 0 && b != 0xff
}

/// Items of a block whose ends are recorded: a file's answer has about 8 (status, server,
/// date, its fields, content-length). Items after these are encoded anew each time.
const RECORDED_ITEMS: usize = 24;

/// Where each item of a header block ends, in place: no vector push per field.
#[derive(Default)]
struct ItemEnds {
    at: [u32; RECORDED_ITEMS],
    /// Items of the block, recorded or not.
    len: usize,
}

impl ItemEnds {
    fn as_slice(&self) -> &[u32] {
        &self.at[..self.len.min(RECORDED_ITEMS)]
    }

    fn all_recorded(&self) -> bool {
        self.len <= RECORDED_ITEMS
    }
}

/// Builds a header block item by item (a field, or a skipped field as no bytes), each taken
/// from the previous block when it is the same field and the table has not changed since
/// (`on`), else encoded; records where each item ends, for the next block.
struct Reuse<'c> {
    prev: &'c [u8],
    prev_ends: &'c ItemEnds,
    on: bool,
    /// Bytes of `prev` to copy, not copied yet: consecutive items go in one copy.
    run: std::ops::Range<usize>,
    /// Where the block's items start in the output (after a table size update).
    base: usize,
    insertions: u32,
    /// The table changed while encoding: the block cannot be reused.
    changed: bool,
    ends: &'c mut ItemEnds,
}

impl Reuse<'_> {
    #[inline(always)]
    fn item(
        &mut self,
        b: &mut BlockEncoder<'_, Vec<u8>>,
        same: bool,
        encode: impl FnOnce(&mut BlockEncoder<'_, Vec<u8>>),
    ) {
        let k = self.ends.len;
        let prev = self.prev_ends.as_slice();
        let span = match (self.on && same, prev.get(k)) {
            (true, Some(&end)) => {
                let start = k.checked_sub(1).map_or(0, |p| prev[p]);
                Some(start as usize..end as usize)
            }
            _ => None,
        };
        match span {
            Some(span) => {
                if self.run.is_empty() {
                    self.run = span;
                } else {
                    self.run.end = span.end;
                }
            }
            None => {
                self.flush(b);
                encode(b);
                if b.insertions() != self.insertions {
                    // Every index after this one names another entry now.
                    self.on = false;
                    self.changed = true;
                }
            }
        }
        if let Some(slot) = self.ends.at.get_mut(k) {
            *slot = (b.written() + self.run.len() - self.base) as u32;
        }
        self.ends.len = k + 1;
    }

    #[inline(always)]
    fn flush(&mut self, b: &mut BlockEncoder<'_, Vec<u8>>) {
        if !self.run.is_empty() {
            b.raw(&self.prev[self.run.clone()]);
            self.run = 0..0;
        }
    }

    /// Copies what is left; returns whether the table changed, and where the items start in
    /// the output.
    fn finish(mut self, b: &mut BlockEncoder<'_, Vec<u8>>) -> (bool, usize) {
        self.flush(b);
        (self.changed, self.base)
    }
}

/// Byte equality, answered without `memcmp` when both are views of the same bytes (a handler
/// hands out clones of its cached header values) or empty: glibc's AVX-512 `memcmp` does a
/// masked load even for length 0, which on an empty slice's dangling pointer takes a
/// fault-suppression assist costing hundreds of cycles.
pub(super) fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    a.len() == b.len() && (a.is_empty() || a.as_ptr() == b.as_ptr() || a[..] == b[..])
}

/// Appends `data`, the bytes of `body`, to the frames in `out`, or splices `body` in after
/// them when it is `splice_min` bytes or more and shares its memory.
#[inline(always)]
pub(super) fn put_body(
    out: &mut Vec<u8>,
    spliced: &mut SplicedBodies,
    splice_min: usize,
    body: &Body,
    data: &[u8],
) {
    if data.len() >= splice_min {
        if spliced.push_again(out.len(), data) {
            return;
        }
        if let Some(b) = shared_bytes(body) {
            debug_assert_eq!(&b[..], data);
            spliced.push(out.len(), b);
            return;
        }
    }
    out.extend_from_slice(data);
}

/// [`put_body`] for a body whose bytes are shared already.
#[inline(always)]
pub(super) fn put_shared(
    out: &mut Vec<u8>,
    spliced: &mut SplicedBodies,
    splice_min: usize,
    data: &Bytes,
) {
    if data.len() < splice_min {
        out.extend_from_slice(data);
    } else if !spliced.push_again(out.len(), data) {
        spliced.push(out.len(), data.clone());
    }
}

/// A body already in memory, as bytes that share that memory.
pub(super) fn shared_bytes(body: &Body) -> Option<Bytes> {
    match body {
        Body::Bytes(b) => Some(b.clone()),
        Body::File(f) => f.cached_bytes(),
        _ => None,
    }
}

/// A body already in memory (bytes, or a file the open-file cache holds), as one slice.
pub(super) fn in_memory(body: &Body) -> Option<&[u8]> {
    match body {
        Body::Bytes(b) => Some(b),
        Body::File(f) => f.cached_slice(),
        _ => None,
    }
}

pub(super) fn itoa3(status: u16) -> [u8; 3] {
    let s = status.min(999);
    [
        b'0' + (s / 100) as u8,
        b'0' + (s / 10 % 10) as u8,
        b'0' + (s % 10) as u8,
    ]
}

pub(super) fn format_u64(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}
