//! One HTTP/2 stream as the connection keeps it: the receiving and sending halves of the
//! RFC 9113 section 5.1 state machine, flow-control windows, priority, and the response's
//! byte counts when its end is reported.
//!
//! The state of section 5.1 is the pair of halves (`Stream::state`): `open` is
//! (`Recv::Open`, not `Send::Done`), `half-closed (remote)` is (`Recv::Closed`, not
//! `Send::Done`), `half-closed (local)` is (`Recv::Open`, `Send::Done`), and `closed` is the
//! stream's removal from the table. `idle` streams are not stored: they are the ids above the
//! highest one the client opened. Each half is one enum whose variants hold what that state
//! needs; a change of variant is the connection's `transition` (`conn/transition.rs`), and the
//! code elsewhere only updates the data a variant holds (bytes received, a body source read
//! on).

use crate::http::body::{BodyWriter, Trailers};
use crate::http::BodySource;
use crate::proto::h2::flow::Window;
use bytes::Bytes;

/// The receiving half.
#[derive(Debug)]
pub enum Recv {
    /// The client did not end the stream: request body DATA (or trailers) may still arrive.
    Open {
        /// From the request's content-length, checked against the DATA received.
        content_length: Option<u64>,
        received: u64,
        /// An extended CONNECT (RFC 8441): its DATA is a tunnel's, not a body under
        /// `max_request_body` (flow control still bounds what is held).
        tunnel: bool,
        /// The request body's pipe, when the handler streams it (`Connection::recv_with`).
        pipe: Option<BodyWriter>,
    },
    /// Half-closed (remote): the client sent END_STREAM, on the HEADERS or later.
    Closed {
        /// The pipe of a streamed request body the handler has not read to its end yet.
        pipe: Option<BodyWriter>,
    },
}

impl Recv {
    /// Nothing to receive and no pipe: how a stream opened with END_STREAM starts.
    pub const ENDED: Recv = Recv::Closed { pipe: None };

    /// The request body's pipe, in either state.
    #[inline(always)]
    pub fn pipe(&self) -> Option<&BodyWriter> {
        match self {
            Recv::Open { pipe, .. } | Recv::Closed { pipe } => pipe.as_ref(),
        }
    }
}

/// The sending half.
#[derive(Debug)]
pub enum Send {
    /// No response yet, and the request is not with a handler. `held`: the connection holds
    /// the request until it is handed out (in its table of held requests, which keeps the
    /// stream small to move); without it, the request was refused or dropped by the
    /// connection (its own answer follows at once), or has just left its handler (the
    /// handler's answer follows). `head`: a HEAD request, answered without a body.
    Waiting { held: bool, head: bool },
    /// No response yet: the request is with a handler (counted in the connection's
    /// `in_handler`), its answer possibly pending in the driver.
    WithHandler { head: bool },
    /// HEADERS sent; body bytes left to send as windows allow. (HEADERS are written whole,
    /// with the change to this state or to `Stream` or `Done`: sending them is no state of
    /// its own.)
    Body(BodySource),
    /// HEADERS sent; the body is a stream the driver polls and pushes
    /// ([`super::Connection::push_body`]). Boxed: keeps this enum's drop glue small on the
    /// inline path.
    Stream(Box<StreamOut>),
    /// END_STREAM sent.
    Done,
}

/// A streamed response body on its way out: at most one chunk from the producer waits here,
/// so a slow client stops the driver from pulling more.
#[derive(Debug)]
pub struct StreamOut {
    /// Pushed and not yet framed.
    pub queued: Bytes,
    pub tail: Tail,
    /// The length announced in content-length, checked against what the producer sends.
    pub declared: Option<u64>,
    /// Body bytes framed so far.
    pub sent: u64,
}

/// How a streamed body ends, once the producer said so.
#[derive(Debug, PartialEq, Eq)]
pub enum Tail {
    /// More may come.
    Open,
    /// END_STREAM after the queued bytes.
    End,
    /// Trailing HEADERS with END_STREAM after the queued bytes.
    Trailers(Trailers),
}

/// A stream in the connection's table.
#[derive(Debug)]
pub struct Stream {
    pub id: u32,
    pub recv: Recv,
    pub send: Send,
    /// Our send window: may go negative when the peer lowers SETTINGS_INITIAL_WINDOW_SIZE.
    pub send_window: Window,
    /// How much more the client may send on this stream before our next WINDOW_UPDATE.
    pub recv_window: u32,
    /// Bytes received since our last WINDOW_UPDATE for this stream.
    pub recv_unacked: u32,
    pub priority: Priority,
    /// In one of the connection's ready queues.
    pub queued: bool,
    /// What was sent, counted only for a stream whose end is reported for the access log and
    /// the metrics (`Connection::respond_tracked`, `Connection::take_done`). Not boxed: with
    /// metrics on every stream is tracked, and an allocation would cost more than the rest.
    pub sent: Option<Sent>,
}

/// The response of a tracked stream: its status, the driver's mark and the bytes sent.
#[derive(Debug, Default)]
pub struct Sent {
    pub status: u16,
    pub mark: u64,
    /// Header block bytes (HEADERS, CONTINUATION, trailers).
    pub head: u64,
    /// DATA payload bytes.
    pub body: u64,
}

impl Stream {
    /// Stream `id` in the state it opens with (`recv`, `send`).
    pub fn new(id: u32, send_window: u32, recv_window: u32, recv: Recv, send: Send) -> Stream {
        Stream {
            id,
            recv,
            send,
            send_window: Window::new(send_window),
            recv_window,
            recv_unacked: 0,
            priority: Priority::default(),
            queued: false,
            sent: None,
        }
    }

    /// Makes this closed stream, whose slot the table keeps (`table.rs`), stream `id`
    /// as [`Stream::new`] would, in place: no stream is built elsewhere and copied in. A
    /// closed stream holds nothing (`Send::Done`, no pipe, not tracked).
    #[inline]
    pub fn reopen(&mut self, id: u32, send_window: u32, recv_window: u32, to: Recv, send_to: Send) {
        // Every field, so that a new one cannot be forgotten here.
        let Stream {
            id: s_id,
            recv,
            send,
            send_window: s_send_window,
            recv_window: s_recv_window,
            recv_unacked,
            priority,
            queued,
            sent,
        } = self;
        debug_assert!(matches!(send, Send::Done) && recv.pipe().is_none() && sent.is_none());
        *s_id = id;
        // The closed stream's halves hold nothing: no drop glue.
        std::mem::forget(std::mem::replace(recv, to));
        set_send(send, send_to);
        *s_send_window = Window::new(send_window);
        *s_recv_window = recv_window;
        *recv_unacked = 0;
        *priority = Priority::default();
        *queued = false;
    }

    /// Has body bytes to send and window to send them in.
    pub fn sendable(&self) -> bool {
        self.send_window.is_open()
            && (matches!(self.send, Send::Body(_))
                || matches!(&self.send, Send::Stream(o) if !o.queued.is_empty()))
    }

    /// A streamed body that has sent all it was given and may take the next chunk.
    pub fn wants_chunk(&self) -> bool {
        self.send_window.is_open()
            && matches!(&self.send, Send::Stream(o) if o.queued.is_empty() && o.tail == Tail::Open)
    }
}

/// A stream's state as RFC 9113 section 5.1 names it, seen from its two halves. Idle streams
/// are not stored (ids above the highest opened), and a closed one leaves the table at once;
/// `Closed` is only the moment between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Both halves open: request body to come, answer not ended.
    Open,
    /// The client sent END_STREAM; the answer is waited for or on its way.
    HalfClosedRemote,
    /// Our END_STREAM went out (an answer before the request ended); its body may still come.
    HalfClosedLocal,
    Closed,
}

impl Stream {
    /// The RFC's name for where the stream is.
    pub fn state(&self) -> State {
        match (&self.recv, &self.send) {
            (Recv::Open { .. }, Send::Done) => State::HalfClosedLocal,
            (Recv::Open { .. }, _) => State::Open,
            (Recv::Closed { .. }, Send::Done) => State::Closed,
            (Recv::Closed { .. }, _) => State::HalfClosedRemote,
        }
    }
}

impl Send {
    /// The request is held by the connection until it is handed out.
    #[inline(always)]
    pub fn holds_request(&self) -> bool {
        matches!(self, Send::Waiting { held: true, .. })
    }

    /// No response yet (`Waiting` or `WithHandler`).
    #[inline(always)]
    pub fn unanswered(&self) -> bool {
        matches!(self, Send::Waiting { .. } | Send::WithHandler { .. })
    }

    /// A body is on its way out (`Body` or `Stream`): counted in the connection's `sending`.
    #[inline]
    pub fn is_sending(&self) -> bool {
        matches!(self, Send::Body(_) | Send::Stream(_))
    }

    /// A streamed body: counted in the connection's `streaming`.
    #[inline]
    pub fn is_streaming(&self) -> bool {
        matches!(self, Send::Stream(_))
    }
}

/// Sets a stream's sending half. Going from `Waiting`, `WithHandler` or `Done`, which hold
/// nothing, skips the old value's drop glue (an out-of-line call on every stream's opening
/// and ending).
#[inline]
pub fn set_send(send: &mut Send, to: Send) {
    if matches!(
        send,
        Send::Waiting { .. } | Send::WithHandler { .. } | Send::Done
    ) {
        std::mem::forget(std::mem::replace(send, to));
    } else {
        *send = to;
    }
}

/// RFC 9218 priority. Without a `priority` field from the client, streams share the
/// bandwidth round-robin (incremental at the default urgency).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// 0 (most urgent) to 7.
    pub urgency: u8,
    pub incremental: bool,
}

impl Default for Priority {
    fn default() -> Self {
        Priority {
            urgency: 3,
            incremental: true,
        }
    }
}

impl Priority {
    /// Parses a `priority` field value (an RFC 8941 dictionary: `u=N` and `i`), as sent in the
    /// request or a PRIORITY_UPDATE frame. Unknown members and bad values are ignored.
    pub fn parse(field: &[u8]) -> Priority {
        // An explicit field without `i` means non-incremental (RFC 9218 section 4.2).
        let mut p = Priority {
            urgency: 3,
            incremental: false,
        };
        for member in field.split(|&b| b == b',') {
            let member = member.trim_ascii();
            let (key, value) = match memchr::memchr(b'=', member) {
                Some(i) => (&member[..i], Some(&member[i + 1..])),
                None => (member, None),
            };
            match (key, value) {
                (b"u", Some([d])) if (b'0'..=b'7').contains(d) => p.urgency = d - b'0',
                (b"i", None) | (b"i", Some(b"?1")) => p.incremental = true,
                (b"i", Some(b"?0")) => p.incremental = false,
                _ => {}
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table holds a few of these per connection and reopens them on every request: the
    /// states as types cost no room over the halves and flags they replaced (168 bytes).
    #[test]
    fn a_stream_stays_small() {
        assert_eq!(std::mem::size_of::<Recv>(), 40);
        assert_eq!(std::mem::size_of::<Send>(), 64);
        assert!(
            std::mem::size_of::<Stream>() <= 168,
            "{}",
            std::mem::size_of::<Stream>()
        );
    }

    #[test]
    fn priority_fields() {
        assert_eq!(
            Priority::parse(b"u=1, i"),
            Priority {
                urgency: 1,
                incremental: true
            }
        );
        assert_eq!(
            Priority::parse(b"u=5"),
            Priority {
                urgency: 5,
                incremental: false
            }
        );
        assert_eq!(
            Priority::parse(b"u=9, i=?0, x=1"),
            Priority {
                urgency: 3,
                incremental: false
            }
        );
    }
}
