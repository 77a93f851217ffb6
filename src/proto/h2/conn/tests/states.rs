//! The stream states of RFC 9113 section 5.1, as the table holds them.

use super::*;
use crate::proto::h2::stream::State;
use streamed::small_windows;

impl Peer {
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
