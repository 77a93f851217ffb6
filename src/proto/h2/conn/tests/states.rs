//! The stream states of RFC 9113 section 5.1, as the table holds them.

use super::*;
use crate::proto::h2::stream::{Recv, Send, State, Stream};
use streamed::{poll_body, small_windows};

impl Peer {
    /// Stream `id` as the table holds it.
    fn stream(&self, id: u32) -> &Stream {
        let i = self.conn.index(id).expect("in the table");
        &self.conn.streams[i]
    }

    /// The state of stream `id`, `None` once it left the table.
    fn state(&self, id: u32) -> Option<State> {
        self.conn.index(id).map(|i| self.conn.streams[i].state())
    }
}

#[test]
fn streams_go_through_the_states_of_section_5_1() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    // Idle: not in the table.
    assert_eq!(p.state(1), None);
    // HEADERS without END_STREAM: open.
    let head = p.post(1, "/upload", Some(10));
    p.feed_streaming(&head);
    assert_eq!(p.state(1), Some(State::Open));
    // The client's END_STREAM: half-closed (remote), the answer waited for.
    p.feed_streaming(&data(1, 10, true));
    assert_eq!(p.state(1), Some(State::HalfClosedRemote));
    let (id, req) = p.conn.next_request().unwrap();
    drop(req.take_body());
    // Our END_STREAM: closed, out of the table.
    p.conn.respond(id, Response::new(204));
    assert_eq!(p.state(1), None);

    // An answer before the request's end: half-closed (local) until the body is in.
    let head = p.post(3, "/upload", Some(10));
    p.feed_streaming(&head);
    let (id, req) = p.conn.next_request().unwrap();
    drop(req.take_body());
    p.conn.respond(id, Response::new(204));
    assert_eq!(p.state(3), Some(State::HalfClosedLocal));
    p.feed_streaming(&data(3, 10, true));
    assert_eq!(p.state(3), None);
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn each_half_holds_what_its_state_needs() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    // Open, its body streamed: the pipe is in the receiving half, the request held.
    let head = p.post(1, "/upload", Some(4));
    p.feed_streaming(&head);
    assert!(matches!(
        p.stream(1).recv,
        Recv::Open {
            content_length: Some(4),
            received: 0,
            tunnel: false,
            pipe: Some(_)
        }
    ));
    assert!(matches!(
        p.stream(1).send,
        Send::Waiting {
            held: true,
            head: false
        }
    ));
    assert_eq!(p.conn.in_handler, 0);
    let (id, req) = p.conn.next_request().unwrap();
    assert!(matches!(
        p.stream(1).send,
        Send::WithHandler { head: false }
    ));
    assert_eq!((p.conn.in_handler, p.conn.body_pipes), (1, 1));
    // Half-closed (remote): the pipe stays until the handler read the body.
    let mut body = req.take_body().unwrap();
    p.feed_streaming(&data(1, 4, true));
    assert!(matches!(p.stream(1).recv, Recv::Closed { pipe: Some(_) }));
    while let std::task::Poll::Ready(Some(_)) = poll_body(&mut body) {}
    p.output();
    assert!(matches!(p.stream(1).recv, Recv::Closed { pipe: None }));
    assert_eq!(p.conn.body_pipes, 0);
    p.conn.respond(id, Response::new(204));
    assert_eq!(p.state(1), None);
    assert_eq!(p.conn.in_handler, 0);
    p.output();

    // A HEAD request that ended with its HEADERS: half-closed (remote), no pipe, and the
    // answer will have no body.
    let mut head = Vec::new();
    let mut block = Vec::new();
    p.enc.encode(
        [
            (&b":method"[..], &b"HEAD"[..]),
            (b":scheme", b"http"),
            (b":authority", b"example.com"),
            (b":path", b"/"),
        ],
        &mut block,
    );
    let flags = flag::END_HEADERS | flag::END_STREAM;
    frame::put_head(&mut head, block.len(), kind::HEADERS, flags, 3);
    head.extend_from_slice(&block);
    p.feed_streaming(&head);
    assert!(matches!(p.stream(3).recv, Recv::Closed { pipe: None }));
    assert!(matches!(
        p.stream(3).send,
        Send::Waiting {
            held: true,
            head: true
        }
    ));
    let (id, _req) = p.conn.next_request().unwrap();
    assert!(matches!(p.stream(3).send, Send::WithHandler { head: true }));
    let mut resp = Response::new(200);
    resp.body = crate::http::Body::Bytes(bytes::Bytes::from_static(b"not sent"));
    p.conn.respond(id, resp);
    assert_eq!(p.state(3), None);
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 3)], "HEAD: no DATA");
    assert_eq!((p.conn.in_handler, p.conn.sending), (0, 0));
}
