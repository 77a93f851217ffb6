//! Request header blocks: HEADERS and CONTINUATION, decoding, validation, opening streams.

use super::{
    BlockUse, Connection, Fail, Partial, Phase, Res, HBUF_CHUNK, KEEP_BUFFERS_OPENED, REQUEST_BATCH,
};
use crate::http::body::Trailers;
use crate::http::request::RequestBuilder;
use crate::http::response::Headers;
use crate::http::{Request, Version};
use crate::proto::h2::frame::Reason;
use crate::proto::h2::hpack::DecodeError;
use crate::proto::h2::stream::{Priority, Recv, Send};
use crate::proto::request_head;
use std::time::Instant;

impl Connection {
    pub(super) fn on_headers(
        &mut self,
        id: u32,
        end_stream: bool,
        end_headers: bool,
        block: &[u8],
        now: Instant,
    ) -> Res {
        // Every stream in the table has an id up to `max_client_stream`: a new one (a
        // request, the common case) needs no search of the table or of the recent resets.
        let known = if id > self.max_client_stream {
            None
        } else {
            self.index(id)
        };
        let usage = match known {
            Some(i) => match self.streams[i].recv {
                Recv::Open { .. } if end_stream => BlockUse::Trailers,
                Recv::Open { .. } => {
                    // Trailers must end the stream (RFC 9113 section 8.1).
                    self.stream_error(id, Reason::PROTOCOL_ERROR, now)?;
                    BlockUse::Discard
                }
                Recv::Closed { .. } => {
                    self.stream_error(id, Reason::STREAM_CLOSED, now)?;
                    BlockUse::Discard
                }
            },
            None if id <= self.max_client_stream && self.recently_reset.contains(&id) => {
                BlockUse::Discard
            }
            None if id <= self.max_client_stream => {
                return Err(Fail::Connection {
                    code: Reason::STREAM_CLOSED,
                    why: "HEADERS on a closed stream",
                });
            }
            None => {
                if id % 2 == 0 {
                    return Err(Fail::Connection {
                        code: Reason::PROTOCOL_ERROR,
                        why: "even stream id",
                    });
                }
                self.max_client_stream = id;
                self.batch_opened += 1;
                self.opened_lately = self.opened_lately.saturating_add(1);
                match self.phase {
                    Phase::Final { last } if id > last => BlockUse::Discard,
                    _ if self.streams.len() + self.closed_unwritten as usize
                        >= self.cfg.max_streams as usize =>
                    {
                        self.stream_error(id, Reason::REFUSED_STREAM, now)?;
                        BlockUse::Discard
                    }
                    _ => BlockUse::Request,
                }
            }
        };
        if end_headers {
            return self.on_block(id, end_stream, usage, block);
        }
        self.block.clear();
        self.block.extend_from_slice(block);
        self.partial = Some(Partial {
            stream: id,
            end_stream,
            usage,
            started: now,
        });
        Ok(())
    }

    pub(super) fn on_continuation(
        &mut self,
        id: u32,
        end_headers: bool,
        block: &[u8],
        now: Instant,
    ) -> Res {
        let Some(p) = self.partial.take() else {
            return Err(Fail::Connection {
                code: Reason::PROTOCOL_ERROR,
                why: "CONTINUATION without HEADERS",
            });
        };
        debug_assert_eq!(p.stream, id);
        if block.is_empty() && !end_headers {
            self.spend_control(now)?;
        }
        // The compressed block of a list we accept is no larger than the list (which counts 32
        // bytes per field beyond its names and values, more than any field's encoding adds), so
        // what is buffered stays within the limit and some slack.
        if self.block.len() + block.len() > self.cfg.max_header_list.saturating_add(1024) {
            return Err(Fail::Connection {
                code: Reason::ENHANCE_YOUR_CALM,
                why: "header block too large",
            });
        }
        self.block.extend_from_slice(block);
        if !end_headers {
            self.partial = Some(p);
            return Ok(());
        }
        let whole = std::mem::take(&mut self.block);
        let r = self.on_block(id, p.end_stream, p.usage, &whole);
        self.block = whole;
        r
    }

    /// A complete header block for stream `id`.
    pub(super) fn on_block(
        &mut self,
        id: u32,
        end_stream: bool,
        usage: BlockUse,
        block: &[u8],
    ) -> Res {
        if usage == BlockUse::Request && self.decoder.kept_table() {
            if let Some(p) = self.memo.parsed_for(block) {
                // The request is made where it is held, not moved there through the callers.
                let meta = Meta::of(p);
                let mut renews = false;
                if end_stream && meta.bodiless() {
                    if self.answer_repeat(id).is_some() {
                        return Ok(());
                    }
                    renews = self.memo.renews();
                }
                self.memo.opened(id);
                if self.open_request_stream(id, end_stream, Some(meta))? {
                    if let Some(p) = &self.memo.parsed {
                        self.held.push_back((id, p.req.repeat()));
                    }
                }
                if renews {
                    // Its answer renews the memo: handed out before more frames are decoded,
                    // so those behind it are repeats again, not requests queued after it.
                    self.batch_opened = self.batch_opened.max(REQUEST_BATCH);
                }
                return Ok(());
            }
        }
        if usage == BlockUse::Request {
            self.memo.other_request();
        }
        self.fields.clear();
        let fields = &mut self.fields;
        // Empty: the previous request took its bytes with `split`, leaving spare capacity;
        // once earlier requests are dropped, `reserve` reclaims the whole allocation.
        self.hbuf.clear();
        let need = (block.len() * 2).max(256);
        if self.hbuf.capacity() < need {
            self.hbuf.reserve(HBUF_CHUNK.max(need));
        }
        let decoded = self
            .decoder
            .decode(block, &mut self.hbuf, |f| fields.push(f));
        if !self.decoder.kept_table() {
            // Its indexes may mean other fields now.
            self.memo.clear();
        }
        match decoded {
            Ok(()) => {}
            Err(DecodeError::HeaderListTooLarge) => {
                self.hbuf.clear();
                return match usage {
                    BlockUse::Request => {
                        self.open_stream(id, end_stream, None)?;
                        self.respond_early(id, 431);
                        Ok(())
                    }
                    BlockUse::Trailers => Err(Fail::Stream {
                        id,
                        code: Reason::PROTOCOL_ERROR,
                    }),
                    BlockUse::Discard => Ok(()),
                };
            }
            Err(e) => {
                tracing::debug!("HPACK decoding failed: {e}");
                return Err(Fail::Connection {
                    code: Reason::COMPRESSION_ERROR,
                    why: "HPACK decoding failed",
                });
            }
        }
        match usage {
            BlockUse::Discard => {
                self.hbuf.clear();
                Ok(())
            }
            BlockUse::Trailers => {
                let ok = request_head::valid_trailers(&self.hbuf, &self.fields);
                let Some(i) = self.index(id).filter(|_| ok) else {
                    self.hbuf.clear();
                    return Err(Fail::Stream {
                        id,
                        code: Reason::PROTOCOL_ERROR,
                    });
                };
                if let Recv::Open {
                    content_length: Some(cl),
                    received,
                    ..
                } = self.streams[i].recv
                {
                    if cl != received {
                        // Declared more than the DATA sent (section 8.1.1).
                        self.hbuf.clear();
                        return Err(Fail::Stream {
                            id,
                            code: Reason::PROTOCOL_ERROR,
                        });
                    }
                }
                let trailers = if self.streams[i].recv.pipe().is_some() {
                    let block = self.hbuf.split().freeze();
                    let t: Trailers = self
                        .fields
                        .iter()
                        .map(|f| (block.slice(f.name.clone()), block.slice(f.value.clone())))
                        .collect();
                    Some(t)
                } else {
                    self.hbuf.clear();
                    None
                };
                self.end_of_request(id, trailers)
            }
            BlockUse::Request => {
                if self.fields.len() > self.cfg.max_header_fields {
                    self.hbuf.clear();
                    self.open_stream(id, end_stream, None)?;
                    self.respond_early(id, 431);
                    return Ok(());
                }
                match self.build_request() {
                    Ok(parsed) => {
                        // Only a busy connection keeps its memo until its next request:
                        // for another, it goes with the turn buffers.
                        if self.decoder.kept_table() && self.opened_lately >= KEEP_BUFFERS_OPENED {
                            self.memo.store(id, block, &parsed);
                        }
                        // Moved once, into `held`, not through `open_stream`'s argument.
                        if self.open_request_stream(id, end_stream, Some(Meta::of(&parsed)))? {
                            self.held.push_back((id, parsed.req));
                        }
                        Ok(())
                    }
                    Err(()) => {
                        self.hbuf.clear();
                        Err(Fail::Stream {
                            id,
                            code: Reason::PROTOCOL_ERROR,
                        })
                    }
                }
            }
        }
    }

    /// Validates the decoded fields (RFC 9113 section 8.3, shared with HTTP/3 in
    /// `proto::request_head`) and builds the request.
    pub(super) fn build_request(&mut self) -> Result<Parsed, ()> {
        let head = request_head::parse(&self.hbuf, &self.fields).map_err(|_| ())?;
        if head.protocol.is_some() && !self.cfg.enable_connect_protocol {
            // `:protocol` without SETTINGS_ENABLE_CONNECT_PROTOCOL is malformed (RFC 8441).
            return Err(());
        }
        let priority = head.priority.map(|r| Priority::parse(&self.hbuf[r]));
        let mut req = RequestBuilder {
            method: head.method,
            version: Version::Http2,
            secure: self.cfg.secure,
            peer: self.peer,
            local: self.local,
            target: head.target,
            authority: head.authority,
            fields: head.fields,
        }
        .build(self.hbuf.split().freeze());
        if let Some(p) = head.protocol {
            req.set_protocol(p);
        }
        Ok(Parsed {
            req,
            content_length: head.content_length,
            priority,
            expect_continue: head.expect_continue,
        })
    }

    pub(super) fn open_stream(&mut self, id: u32, end_stream: bool, parsed: Option<Parsed>) -> Res {
        let meta = parsed.as_ref().map(Meta::of);
        if self.open_request_stream(id, end_stream, meta)? {
            if let Some(p) = parsed {
                self.held.push_back((id, p.req));
            }
        }
        Ok(())
    }

    /// Opens stream `id`, for a request described by `meta` (none: refused by the
    /// connection itself). Returns whether the stream holds its request: the caller then
    /// pushes it to `held`, which has room for it.
    #[inline]
    pub(super) fn open_request_stream(
        &mut self,
        id: u32,
        end_stream: bool,
        meta: Option<Meta>,
    ) -> Result<bool, Fail> {
        let content_length = meta.and_then(|m| m.content_length);
        // Declared a body but sent none (section 8.1.1): refused below, holding nothing.
        let no_declared_body = end_stream && content_length.is_some_and(|l| l != 0);
        let recv = if end_stream {
            Recv::ENDED
        } else {
            Recv::Open {
                content_length,
                received: 0,
                tunnel: meta.is_some_and(|m| m.tunnel),
                pipe: None,
            }
        };
        let has_request = meta.is_some() && !no_declared_body;
        let send = Send::Waiting {
            held: has_request,
            head: meta.is_some_and(|m| m.head),
        };
        let i = self.insert(id, (recv, send));
        let mut continue_100 = false;
        if let Some(m) = meta {
            if let Some(prio) = m.priority {
                self.streams[i].priority = prio;
            }
            continue_100 = m.expect_continue && !end_stream;
            if no_declared_body {
                self.stream_error(id, Reason::PROTOCOL_ERROR, self.last_frame_at)?;
                return Ok(false);
            }
            if self.held.capacity() == 0 {
                self.held.reserve_exact(REQUEST_BATCH);
            }
        }
        if end_stream {
            self.requests.push_back(id);
        } else {
            if has_request {
                self.opened_with_body = Some(id);
            }
            if continue_100 {
                self.write_headers(id, 100, &Headers::default(), None, false);
            }
        }
        Ok(has_request)
    }
}

/// A request that passed validation, with what the connection needs to know about it.
pub(super) struct Parsed {
    pub(super) req: Request,
    content_length: Option<u64>,
    priority: Option<Priority>,
    expect_continue: bool,
}

/// What opening a stream needs to know of its request.
#[derive(Clone, Copy)]
pub(super) struct Meta {
    content_length: Option<u64>,
    priority: Option<Priority>,
    expect_continue: bool,
    head: bool,
    tunnel: bool,
}

impl Meta {
    /// A request that declares no body and asks for no tunnel: with END_STREAM on its
    /// HEADERS, it is complete and valid as it is.
    #[inline]
    pub(super) fn bodiless(&self) -> bool {
        !self.tunnel && self.content_length.is_none_or(|l| l == 0)
    }

    #[inline]
    pub(super) fn of(p: &Parsed) -> Meta {
        Meta {
            content_length: p.content_length,
            priority: p.priority,
            expect_continue: p.expect_continue,
            head: p.req.is_head(),
            tunnel: p.req.protocol().is_some(),
        }
    }
}

impl Parsed {
    pub(super) fn repeat(&self) -> Parsed {
        Parsed {
            req: self.req.repeat(),
            content_length: self.content_length,
            priority: self.priority,
            expect_continue: self.expect_continue,
        }
    }
}
