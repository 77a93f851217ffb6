//! Our HTTP/2 client (`client.rs`) against our server connection (`conn/`), in memory: each
//! side's output is the other's input, no socket, virtual time. What one side writes, the
//! other must read as meant, whole exchanges through both state machines.

use super::client::{ClientConn, ClientSettings, Received};
use super::conn::{Connection, Settings};
use super::frame::Reason;
use super::runs::RunBuffer;
use crate::http::{Body, Request, Response};
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::time::Instant;

/// A client and a server connected back to back.
struct Pair {
    client: ClientConn,
    server: Connection,
    runs: RunBuffer,
    now: Instant,
    /// Client bytes the server has not taken yet (a paused `recv`).
    to_server: BytesMut,
}

impl Pair {
    fn new(server: Settings, client: ClientSettings) -> Pair {
        let now = Instant::now();
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut server = Connection::new(server, addr, addr, now);
        server.set_now(
            b"Sat, 28 Nov 2026 07:00:00 GMT",
            crate::http::clock::coarse_ns(),
        );
        Pair {
            client: ClientConn::new(client),
            server,
            runs: RunBuffer::default(),
            now,
            to_server: BytesMut::new(),
        }
    }

    fn default() -> Pair {
        Pair::new(
            Settings::default(),
            ClientSettings {
                max_concurrent_streams: 100,
                stream_window: 65_536,
                max_header_list_size: 65_536,
            },
        )
    }

    /// Moves bytes both ways until neither side has any to send, answering each request
    /// with `answer`. Returns the requests the server saw.
    fn run(&mut self, answer: &dyn Fn(&Request) -> Response) -> Vec<Request> {
        let mut seen = Vec::new();
        for _ in 0..1000 {
            let out = self.client.output().to_vec();
            self.client.consume_output(out.len());
            self.to_server.extend_from_slice(&out);
            let mut moved = !out.is_empty();
            loop {
                self.server
                    .recv(&mut self.to_server, self.now, &mut self.runs);
                while let Some((id, req)) = self.server.next_request() {
                    let resp = answer(&req);
                    seen.push(req);
                    self.server.respond(id, resp);
                }
                if !self.server.recv_paused() || self.to_server.is_empty() {
                    break;
                }
            }
            self.server.fill(self.now);
            let back = self.server.output_parts().to_vec();
            self.server.clear_output();
            moved |= !back.is_empty();
            let mut input = BytesMut::from(&back[..]);
            self.client.receive(&mut input);
            assert!(input.is_empty(), "the client takes whole frames");
            if !moved && self.client.output().is_empty() {
                return seen;
            }
        }
        panic!("the exchange does not settle");
    }

    /// Everything the client received on stream `id` so far, and whether it ended.
    fn body(&mut self, id: u32) -> (Vec<u8>, bool) {
        let mut body = Vec::new();
        loop {
            match self.client.take_data(id) {
                Received::Data(d) => body.extend_from_slice(&d),
                Received::End => return (body, true),
                Received::Pending => return (body, false),
                Received::Trailers(_) => {}
                Received::Failed(f) => panic!("stream {id} failed: {f:?}"),
            }
        }
    }
}

fn get(c: &mut ClientConn, path: &[u8]) -> u32 {
    let pseudo: [(&[u8], &[u8]); 4] = [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":authority", b"example"),
        (b":path", path),
    ];
    c.open(&pseudo, [(&b"accept"[..], &b"*/*"[..])], true)
        .expect("room for a stream")
}

fn answer_with(body: &'static [u8]) -> impl Fn(&Request) -> Response {
    move |_| {
        let mut r = Response::new(200);
        r.body = Body::Bytes(Bytes::from_static(body));
        r
    }
}

#[test]
fn a_get_goes_through_both_state_machines() {
    let mut p = Pair::default();
    let id = get(&mut p.client, b"/hello");
    let seen = p.run(&answer_with(b"hello, world"));
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path(), b"/hello");
    let head = p.client.take_head(id).expect("a head").expect("not failed");
    assert_eq!(head.status, 200);
    assert_eq!(head.content_length, Some(12));
    assert!(head
        .headers
        .iter()
        .any(|(n, v)| &n[..] == b"date" && &v[..] == b"Sat, 28 Nov 2026 07:00:00 GMT"));
    assert_eq!(p.body(id), (b"hello, world".to_vec(), true));
    assert!(p.client.is_done(id));
    assert!(p.client.failure().is_none());
    assert_eq!(p.server.closed(), None);
}

#[test]
fn many_streams_and_repeats_answer_each_their_own() {
    let mut p = Pair::default();
    // The same request again and again: the server may answer repeats from its memo.
    let ids: Vec<u32> = (0..40).map(|_| get(&mut p.client, b"/same")).collect();
    let seen = p.run(&answer_with(b"same answer"));
    assert!(!seen.is_empty() && seen.len() <= ids.len());
    for id in ids {
        let head = p.client.take_head(id).expect("a head").expect("not failed");
        assert_eq!(head.status, 200);
        assert_eq!(p.body(id), (b"same answer".to_vec(), true));
    }
    assert!(p.client.failure().is_none());
}

#[test]
fn a_large_answer_flows_as_the_client_reads() {
    static BIG: [u8; 300_000] = [b'b'; 300_000];
    let mut p = Pair::default();
    let id = get(&mut p.client, b"/big");
    p.run(&answer_with(&BIG));
    let head = p.client.take_head(id).expect("a head").expect("not failed");
    assert_eq!(head.content_length, Some(BIG.len() as u64));
    // The client's window (64 KiB) holds the server back until the reader takes the bytes.
    let mut got = Vec::new();
    for _ in 0..100 {
        let (part, end) = p.body(id);
        got.extend_from_slice(&part);
        if end {
            break;
        }
        p.run(&answer_with(b""));
    }
    assert_eq!(got.len(), BIG.len());
    assert!(got.iter().all(|&b| b == b'b'));
}

#[test]
fn a_request_body_flows_as_the_server_windows_allow() {
    let mut p = Pair::default();
    let pseudo: [(&[u8], &[u8]); 4] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"example"),
        (b":path", b"/upload"),
    ];
    let id = p
        .client
        .open(&pseudo, [(&b"content-length"[..], &b"200000"[..])], false)
        .expect("room for a stream");
    let mut body = Bytes::from(vec![b'u'; 200_000]);
    let mut seen = Vec::new();
    for _ in 0..100 {
        if p.client.send_data(id, &mut body, true) {
            break;
        }
        seen.extend(p.run(&answer_with(b"stored")));
    }
    assert!(body.is_empty(), "all of it went");
    seen.extend(p.run(&answer_with(b"stored")));
    assert_eq!(seen.len(), 1, "answered at the body's end");
    assert_eq!(seen[0].path(), b"/upload");
    assert_eq!(
        p.client.take_head(id).expect("a head").expect("ok").status,
        200
    );
    assert_eq!(p.body(id), (b"stored".to_vec(), true));
}

#[test]
fn a_server_drain_stops_new_streams_and_finishes_the_open_ones() {
    let mut p = Pair::default();
    let id = get(&mut p.client, b"/before");
    p.server.shutdown();
    p.run(&answer_with(b"served"));
    // GOAWAY(2^31-1), then after the PING's round trip the final GOAWAY: the client opens
    // nothing more, and the request already sent is answered.
    assert!(p.client.is_closing());
    assert!(!p.client.has_capacity());
    assert_eq!(
        p.client.take_head(id).expect("a head").expect("ok").status,
        200
    );
    assert_eq!(p.body(id), (b"served".to_vec(), true));
    assert!(p.client.failure().is_none());
}

#[test]
fn a_client_reset_closes_the_stream_on_the_server() {
    let mut p = Pair::default();
    let pseudo: [(&[u8], &[u8]); 4] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"example"),
        (b":path", b"/slow"),
    ];
    let id = p
        .client
        .open(&pseudo, [(&b"content-length"[..], &b"100"[..])], false)
        .expect("room for a stream");
    let seen = p.run(&answer_with(b"never"));
    assert!(seen.is_empty(), "the body has not ended");
    assert_eq!(p.server.open_streams(), 1);
    p.client.reset(id);
    assert!(p.server.take_stats().is_none(), "nothing counted yet");
    let seen = p.run(&answer_with(b"never"));
    assert!(seen.is_empty());
    assert_eq!(p.server.open_streams(), 0);
    let stats = p.server.take_stats().expect("the reset is counted");
    assert_eq!(stats.resets_received[Reason::CANCEL.0 as usize], 1);
    assert!(p.client.failure().is_none());
    assert_eq!(p.server.closed(), None);
}
