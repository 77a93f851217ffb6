//! Receiving: the preface, frame dispatch, and the control frames (RST_STREAM,
//! WINDOW_UPDATE, SETTINGS).

use super::transition::Event;
use super::{
    Connection, Fail, Phase, Res, KEEP_BUFFERS_WITHIN, REPEAT_FLAGS, REPEAT_FLAGS_MASK,
    REQUEST_BATCH, SHUTDOWN_PING, TINY_WINDOW_UPDATE,
};
use crate::http::Request;
use crate::proto::h2::frame::{self, kind, setting, Frame, FrameError, Head, Reason};
use crate::proto::h2::runs::RunBuffer;
use crate::proto::h2::stream::Priority;
use bytes::{Buf, BytesMut};
use std::time::Instant;

impl Connection {
    pub(super) fn recv_frames(
        &mut self,
        input: &mut BytesMut,
        now: Instant,
        runs: &mut RunBuffer,
        streams_body: &dyn Fn(&Request) -> bool,
    ) -> Res {
        if self.phase == Phase::Preface {
            let n = input.len().min(frame::PREFACE.len());
            if input[..n] != frame::PREFACE[..n] {
                return Err(Fail::Connection {
                    code: Reason::PROTOCOL_ERROR,
                    why: "bad connection preface",
                });
            }
            if n < frame::PREFACE.len() {
                return Ok(());
            }
            input.advance(n);
            self.phase = Phase::FirstSettings;
        }
        if now.saturating_duration_since(self.last_frame_at) > KEEP_BUFFERS_WITHIN {
            self.opened_lately = 0;
        }
        let mut got_frame = false;
        // Where the next frame starts: `input` is advanced once, after the loop (or before
        // it waits for more), not per frame.
        let mut at = 0;
        while input.len() - at >= frame::HEADER_LEN {
            if self.batch_opened >= REQUEST_BATCH && self.partial.is_none() {
                self.recv_paused = true;
                break;
            }
            let head_bytes: &[u8; frame::HEADER_LEN] = input[at..at + frame::HEADER_LEN]
                .try_into()
                .map_err(|_| Fail::Connection {
                    code: Reason::INTERNAL_ERROR,
                    why: "frame header",
                })?;
            let head = Head::parse(head_bytes);
            // Refuse an oversized frame before buffering its payload.
            if head.len > frame::DEFAULT_MAX_FRAME_SIZE {
                return Err(Fail::Connection {
                    code: Reason::FRAME_SIZE_ERROR,
                    why: "frame too large",
                });
            }
            let total = frame::HEADER_LEN + head.len as usize;
            if input.len() - at < total {
                input.advance(at);
                at = 0;
                input.reserve(total - input.len());
                break;
            }
            got_frame = true;
            let payload = &input[at + frame::HEADER_LEN..at + total];
            let repeat =
                if head.kind == kind::HEADERS && head.flags & REPEAT_FLAGS_MASK == REPEAT_FLAGS {
                    self.repeat_headers(head.stream, payload)
                } else {
                    None
                };
            if let Some(room) = repeat {
                at = self.repeat_run(runs, input, at, at + total, room);
                if self.output_full() {
                    // The frames after the run wait for the output to be written, rather
                    // than be queued as requests whose answers wait.
                    self.batch_opened = self.batch_opened.max(REQUEST_BATCH);
                }
                continue;
            }
            let r = match frame::decode(head, payload, frame::DEFAULT_MAX_FRAME_SIZE) {
                Ok(f) => self.on_frame(f, now),
                Err(FrameError::Connection(r)) => Err(Fail::Connection {
                    code: r,
                    why: "invalid frame",
                }),
                Err(FrameError::Stream(id, r)) => {
                    if self.partial.is_some() {
                        Err(Fail::Connection {
                            code: Reason::PROTOCOL_ERROR,
                            why: "frame inside a header block",
                        })
                    } else {
                        Err(Fail::Stream { id, code: r })
                    }
                }
            };
            at += total;
            self.apply(r, now)?;
            if let Some(id) = self.opened_with_body.take() {
                // Decided before the stream's first DATA frame is processed.
                self.attach_body(id, streams_body);
            }
            if self.closed.is_some() {
                input.clear();
                at = 0;
                break;
            }
        }
        input.advance(at);
        if got_frame {
            self.last_frame_at = now;
        }
        if self.drain_when_open && self.phase == Phase::Open {
            self.drain_when_open = false;
            self.shutdown();
        }
        self.replenish_connection_window();
        Ok(())
    }

    pub(super) fn on_frame(&mut self, f: Frame<'_>, now: Instant) -> Res {
        if self.phase == Phase::FirstSettings {
            match f {
                Frame::Settings { ack: false, .. } => self.phase = Phase::Open,
                _ => {
                    return Err(Fail::Connection {
                        code: Reason::PROTOCOL_ERROR,
                        why: "expected SETTINGS first",
                    })
                }
            }
        }
        if let Some(p) = &self.partial {
            match f {
                Frame::Continuation { stream, .. } if stream == p.stream => {}
                _ => {
                    return Err(Fail::Connection {
                        code: Reason::PROTOCOL_ERROR,
                        why: "expected CONTINUATION",
                    })
                }
            }
        }
        match f {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream, end_stream, data, flow_len, now),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => self.on_headers(stream, end_stream, end_headers, block, now),
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => self.on_continuation(stream, end_headers, block, now),
            Frame::Priority { .. } => self.spend_control(now),
            Frame::RstStream { stream, reason } => {
                self.stats.reset(false, reason);
                self.on_rst_stream(stream, now)
            }
            Frame::Settings { ack, settings } => {
                if !ack {
                    self.spend_control(now)?;
                    for (id, v) in settings.iter() {
                        self.apply_setting(id, v)?;
                    }
                    frame::put_settings_ack(&mut self.out);
                }
                Ok(())
            }
            Frame::Ping { ack, data } => {
                if ack {
                    if data == SHUTDOWN_PING && self.phase == Phase::Draining {
                        frame::put_goaway(&mut self.out, self.max_client_stream, Reason::NO_ERROR);
                        self.phase = Phase::Final {
                            last: self.max_client_stream,
                        };
                        self.check_done();
                    }
                    Ok(())
                } else {
                    self.spend_control(now)?;
                    frame::put_ping(&mut self.out, true, &data);
                    Ok(())
                }
            }
            Frame::GoAway { reason, .. } => {
                self.stats.goaway(false, reason, "client");
                self.peer_goaway = true;
                self.check_done();
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
            Frame::PriorityUpdate { stream, field } => {
                self.spend_control(now)?;
                if let Some(i) = self.index(stream) {
                    self.streams[i].priority = Priority::parse(field);
                }
                Ok(())
            }
            Frame::Unknown { .. } => Ok(()),
        }
    }

    pub(super) fn on_rst_stream(&mut self, id: u32, now: Instant) -> Res {
        if id > self.max_client_stream {
            return Err(Fail::Connection {
                code: Reason::PROTOCOL_ERROR,
                why: "RST_STREAM on an idle stream",
            });
        }
        if let Some(i) = self.index(id) {
            self.transition(i, Event::Close { told: false });
            self.spend_reset(now)?;
        }
        Ok(())
    }

    pub(super) fn on_window_update(&mut self, id: u32, increment: u32) -> Res {
        if increment < TINY_WINDOW_UPDATE {
            self.spend_tiny_window_update()?;
        }
        if id == 0 {
            if self.send_conn_window.grow(increment).is_err() {
                return Err(Fail::Connection {
                    code: Reason::FLOW_CONTROL_ERROR,
                    why: "connection window overflow",
                });
            }
            return Ok(());
        }
        let Some(i) = self.index(id) else {
            if id > self.max_client_stream {
                return Err(Fail::Connection {
                    code: Reason::PROTOCOL_ERROR,
                    why: "WINDOW_UPDATE on an idle stream",
                });
            }
            return Ok(());
        };
        let s = &mut self.streams[i];
        if s.send_window.grow(increment).is_err() {
            return Err(Fail::Stream {
                id,
                code: Reason::FLOW_CONTROL_ERROR,
            });
        }
        self.schedule(i);
        Ok(())
    }

    pub(super) fn apply_setting(&mut self, id: u16, value: u32) -> Res {
        match id {
            setting::HEADER_TABLE_SIZE => {
                self.encoder.set_peer_max_table_size(value as usize);
                // The encoder may owe a size update at the start of the next block.
                self.headers_cache.invalidate();
            }
            setting::INITIAL_WINDOW_SIZE => {
                let delta = i64::from(value) - i64::from(self.peer_initial_window);
                self.peer_initial_window = value;
                for i in 0..self.streams.slots() {
                    if !self.streams.is_open(i) {
                        continue;
                    }
                    let s = &mut self.streams[i];
                    if s.send_window.adjust(delta).is_err() {
                        return Err(Fail::Connection {
                            code: Reason::FLOW_CONTROL_ERROR,
                            why: "stream window overflow",
                        });
                    }
                    self.schedule(i);
                }
            }
            setting::MAX_FRAME_SIZE => self.peer_max_frame = value,
            _ => {}
        }
        Ok(())
    }
}
