//! Deterministic tests of the connection state machine: bytes in, frames out, virtual time.

use super::*;
use crate::http::Body;
use crate::http::Method;
use crate::proto::h2::hpack::{Decoder, Encoder};
use crate::proto::request_head::valid_field;

struct Peer {
    conn: Connection,
    enc: Encoder,
    dec: Decoder,
    now: Instant,
}

type Frames = Vec<(Head, Vec<u8>)>;

impl Peer {
    fn new(cfg: Settings, client_settings: &[(u16, u32)]) -> Peer {
        let now = Instant::now();
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut p = Peer {
            conn: Connection::new(cfg, addr, addr, now),
            enc: Encoder::default(),
            dec: Decoder::new(4096, 1 << 20),
            now,
        };
        let mut b = frame::PREFACE.to_vec();
        frame::put_settings(&mut b, client_settings);
        p.feed(&b);
        p
    }

    /// Gives the connection `b`, all of it: a `recv` that pauses is called again at once,
    /// with no request answered in between.
    fn feed(&mut self, b: &[u8]) {
        let mut input = BytesMut::from(b);
        self.conn.recv(&mut input, self.now);
        while self.conn.recv_paused() && !input.is_empty() && self.conn.closed().is_none() {
            self.conn.recv(&mut input, self.now);
        }
        assert!(input.is_empty() || self.conn.closed().is_some());
    }

    /// Answers every request with `body`, pulls output, returns the frames.
    fn turn(&mut self, body: &'static [u8]) -> Frames {
        while let Some((id, _req)) = self.conn.next_request() {
            let mut r = Response::new(200);
            r.body = Body::Bytes(Bytes::from_static(body));
            self.conn.respond(id, r);
        }
        self.conn.fill(self.now);
        let out = self.conn.output_parts().to_vec();
        self.conn.clear_output();
        parse(&out)
    }

    fn get(&mut self, id: u32, path: &str, end_stream: bool) -> Vec<u8> {
        let mut block = Vec::new();
        self.enc.encode(
            [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"http"),
                (b":authority", b"example.com"),
                (b":path", path.as_bytes()),
            ],
            &mut block,
        );
        let mut out = Vec::new();
        let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
        frame::put_head(&mut out, block.len(), kind::HEADERS, flags, id);
        out.extend_from_slice(&block);
        out
    }

    /// The ETag of a response header block (decoded: the decoder follows the table).
    fn etag_of(&mut self, block: &[u8]) -> Vec<u8> {
        let fields = self.fields_of(block);
        fields.into_iter().find(|(n, _)| n == b"etag").unwrap().1
    }

    fn status_of(&mut self, block: &[u8]) -> Vec<u8> {
        self.fields_of(block).swap_remove(0).1
    }
}

fn parse(mut b: &[u8]) -> Frames {
    let mut v = Vec::new();
    while b.len() >= 9 {
        let h = Head::parse(b[..9].try_into().unwrap());
        let end = 9 + h.len as usize;
        v.push((h, b[9..end].to_vec()));
        b = &b[end..];
    }
    v
}

fn goaway_code(frames: &Frames) -> Option<u32> {
    frames
        .iter()
        .find(|(h, _)| h.kind == kind::GOAWAY)
        .map(|(_, p)| u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
}

fn kinds(frames: &Frames) -> Vec<(u8, u32)> {
    frames.iter().map(|(h, _)| (h.kind, h.stream)).collect()
}

#[test]
fn handshake_request_and_response() {
    let mut p = Peer::new(Settings::default(), &[]);
    let f = p.turn(b"");
    assert_eq!(
        kinds(&f),
        vec![
            (kind::SETTINGS, 0),
            (kind::WINDOW_UPDATE, 0),
            (kind::SETTINGS, 0)
        ]
    );
    assert_eq!(f[2].0.flags, flag::ACK);

    let req = p.get(1, "/a?b", true);
    p.feed(&req);
    let (id, r) = p.conn.next_request().unwrap();
    assert_eq!(id, 1);
    assert_eq!(r.target(), b"/a?b");
    assert_eq!(r.authority(), Some(&b"example.com"[..]));
    assert_eq!(r.version, Version::Http2);
    let mut resp = Response::new(200);
    resp.body = Body::Bytes(Bytes::from_static(b"hello"));
    p.conn.respond(id, resp);
    let f = p.turn(b"");
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 1), (kind::DATA, 1)]);
    assert_eq!(f[0].0.flags, flag::END_HEADERS);
    assert_eq!(f[1].0.flags, flag::END_STREAM);
    assert_eq!(f[1].1, b"hello");
    assert_eq!(p.status_of(&f[0].1.clone()), b"200");
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn flow_control_limits_data_until_window_updates() {
    let mut p = Peer::new(Settings::default(), &[(setting::INITIAL_WINDOW_SIZE, 3)]);
    p.turn(b"");
    let req = p.get(1, "/", true);
    p.feed(&req);
    let f = p.turn(b"0123456789");
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 1), (kind::DATA, 1)]);
    assert_eq!(f[1].1, b"012");
    assert_eq!(p.turn(b"").len(), 0, "blocked by the stream window");

    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 1, 100);
    p.feed(&wu);
    let f = p.turn(b"");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].1, b"3456789");
    assert_eq!(f[0].0.flags, flag::END_STREAM);
}

#[test]
fn streams_share_bandwidth_round_robin() {
    let mut p = Peer::new(
        Settings::default(),
        &[(setting::INITIAL_WINDOW_SIZE, 1 << 20)],
    );
    p.turn(b"");
    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 0, 1 << 20);
    p.feed(&wu);
    let mut reqs = p.get(1, "/", true);
    reqs.extend(p.get(3, "/", true));
    p.feed(&reqs);
    static BIG: [u8; 40_000] = [7; 40_000];
    let f = p.turn(&BIG);
    let data: Vec<u32> = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA)
        .map(|(h, _)| h.stream)
        .collect();
    assert_eq!(data, vec![1, 3, 1, 3, 1, 3]);
}

#[test]
fn priority_urgency_goes_first() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let low = p.get(1, "/", true);
    let mut block = Vec::new();
    p.enc.encode(
        [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b"priority", b"u=0"),
        ],
        &mut block,
    );
    let mut high = Vec::new();
    frame::put_head(
        &mut high,
        block.len(),
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        3,
    );
    high.extend_from_slice(&block);
    p.feed(&[low, high].concat());
    static BODY: [u8; 20_000] = [1; 20_000];
    let f = p.turn(&BODY);
    let data: Vec<u32> = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA)
        .map(|(h, _)| h.stream)
        .collect();
    assert_eq!(data, vec![3, 3, 1, 1]);
}

#[test]
fn protocol_errors_close_with_the_right_code() {
    let cases: Vec<(Vec<u8>, u32)> = vec![
        // DATA on an idle stream.
        (
            {
                let mut b = Vec::new();
                frame::put_head(&mut b, 1, kind::DATA, 0, 5);
                b.push(0);
                b
            },
            Reason::PROTOCOL_ERROR.0,
        ),
        // HEADERS on an even stream id.
        (
            Peer::new(Settings::default(), &[]).get(2, "/", true),
            Reason::PROTOCOL_ERROR.0,
        ),
        // CONTINUATION without HEADERS.
        (
            {
                let mut b = Vec::new();
                frame::put_head(&mut b, 0, kind::CONTINUATION, flag::END_HEADERS, 1);
                b
            },
            Reason::PROTOCOL_ERROR.0,
        ),
        // A bad HPACK block.
        (
            {
                let mut b = Vec::new();
                frame::put_head(&mut b, 1, kind::HEADERS, flag::END_HEADERS, 1);
                b.push(0xff);
                b
            },
            Reason::COMPRESSION_ERROR.0,
        ),
        // Connection window overflow.
        (
            {
                let mut b = Vec::new();
                frame::put_window_update(&mut b, 0, MAX_WINDOW);
                b
            },
            Reason::FLOW_CONTROL_ERROR.0,
        ),
    ];
    for (i, (bytes, code)) in cases.into_iter().enumerate() {
        let mut p = Peer::new(Settings::default(), &[]);
        p.turn(b"");
        p.feed(&bytes);
        let f = p.turn(b"");
        assert_eq!(goaway_code(&f), Some(code), "case {i}");
        assert!(p.conn.closed().is_some());
    }
}

#[test]
fn malformed_requests_reset_the_stream_only() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let mut block = Vec::new();
    p.enc.encode(
        [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b"connection", b"close"),
        ],
        &mut block,
    );
    let mut b = Vec::new();
    frame::put_head(
        &mut b,
        block.len(),
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
    );
    b.extend_from_slice(&block);
    p.feed(&b);
    let f = p.turn(b"");
    assert_eq!(kinds(&f), vec![(kind::RST_STREAM, 1)]);
    assert_eq!(f[0].1, Reason::PROTOCOL_ERROR.0.to_be_bytes());
    assert!(p.conn.closed().is_none());
    let ok = p.get(3, "/", true);
    p.feed(&ok);
    assert_eq!(
        kinds(&p.turn(b"x")),
        vec![(kind::HEADERS, 3), (kind::DATA, 3)]
    );
}

#[test]
fn request_body_windows_are_returned_in_batches() {
    let cfg = Settings {
        input_window: 65_535,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    let req = p.get(1, "/upload", false);
    p.feed(&req);
    let mut data = Vec::new();
    for _ in 0..64 {
        frame::put_head(&mut data, 1000, kind::DATA, 0, 1);
        data.extend_from_slice(&[0; 1000]);
    }
    p.feed(&data);
    let f = p.turn(b"");
    let updates = f
        .iter()
        .filter(|(h, _)| h.kind == kind::WINDOW_UPDATE)
        .count();
    // 64 frames, one update per half window per flow (stream and connection).
    assert_eq!(updates, 2, "{:?}", kinds(&f));
    let mut end = Vec::new();
    frame::put_head(&mut end, 0, kind::DATA, flag::END_STREAM, 1);
    p.feed(&end);
    assert!(p.conn.next_request().is_some());
}

#[test]
fn graceful_shutdown_sends_two_goaways() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let req = p.get(1, "/", false);
    p.feed(&req);
    p.conn.shutdown();
    let f = p.turn(b"");
    assert_eq!(kinds(&f), vec![(kind::GOAWAY, 0), (kind::PING, 0)]);
    assert_eq!(f[0].1[..4], MAX_WINDOW.to_be_bytes());
    // A stream opened before the final GOAWAY is still served.
    let req = p.get(3, "/", true);
    let mut ack = Vec::new();
    frame::put_ping(&mut ack, true, &f[1].1.clone().try_into().unwrap());
    p.feed(&[req, ack].concat());
    let f = p.turn(b"ok");
    assert_eq!(
        kinds(&f),
        vec![(kind::GOAWAY, 0), (kind::HEADERS, 3), (kind::DATA, 3)]
    );
    assert_eq!(f[0].1[..4], 3u32.to_be_bytes());
    // Above the last id: ignored.
    let late = p.get(5, "/", true);
    p.feed(&late);
    assert!(p.conn.next_request().is_none());
    // Stream 1 finishes: the connection is done.
    let mut end = Vec::new();
    frame::put_head(&mut end, 0, kind::DATA, flag::END_STREAM, 1);
    p.feed(&end);
    p.turn(b"");
    assert_eq!(
        p.conn.closed(),
        Some(Closed::GoAway(Reason::NO_ERROR, "server stopping"))
    );
}

#[test]
fn a_drain_before_the_preface_waits_for_it_then_sends_two_goaways() {
    let now = Instant::now();
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut conn = Connection::new(Settings::default(), addr, addr, now);
    conn.shutdown();
    assert_eq!(conn.closed(), None);
    let f = parse(&conn.output_parts().to_vec());
    assert!(
        f.iter().all(|(h, _)| h.kind != kind::GOAWAY),
        "no GOAWAY before the client's preface: {:?}",
        kinds(&f)
    );
    conn.clear_output();
    let mut p = Peer {
        conn,
        enc: Encoder::default(),
        dec: Decoder::new(4096, 1 << 20),
        now,
    };
    // The preface, SETTINGS and a request arrive together, as from a client that had not
    // seen anything of ours yet.
    let mut b = frame::PREFACE.to_vec();
    frame::put_settings(&mut b, &[]);
    b.extend(p.get(1, "/", true));
    p.feed(&b);
    let f = p.turn(b"ok");
    assert_eq!(
        kinds(&f),
        vec![
            (kind::SETTINGS, 0),
            (kind::GOAWAY, 0),
            (kind::PING, 0),
            (kind::HEADERS, 1),
            (kind::DATA, 1)
        ],
        "the request is answered, not refused"
    );
    assert_eq!(f[1].1[..4], MAX_WINDOW.to_be_bytes());
    // Another request before the PING's ACK is served too; the final GOAWAY names it.
    let req = p.get(3, "/", true);
    let mut ack = Vec::new();
    frame::put_ping(&mut ack, true, &f[2].1.clone().try_into().unwrap());
    p.feed(&[req, ack].concat());
    let f = p.turn(b"ok");
    assert_eq!(
        kinds(&f),
        vec![(kind::GOAWAY, 0), (kind::HEADERS, 3), (kind::DATA, 3)]
    );
    assert_eq!(f[0].1[..4], 3u32.to_be_bytes());
    assert_eq!(
        p.conn.closed(),
        Some(Closed::GoAway(Reason::NO_ERROR, "server stopping"))
    );
}

#[test]
fn reset_budget_closes_rapid_reset() {
    let cfg = Settings {
        max_resets_per_second: 10,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    let mut b = Vec::new();
    for i in 0..11 {
        b.extend(p.get(1 + 2 * i, "/", true));
        frame::put_rst_stream(&mut b, 1 + 2 * i, Reason::CANCEL);
    }
    p.feed(&b);
    assert!(
        p.conn.next_request().is_none(),
        "reset streams are not answered"
    );
    let f = p.turn(b"");
    assert_eq!(goaway_code(&f), Some(Reason::ENHANCE_YOUR_CALM.0));
}

#[test]
fn timeouts_idle_and_stalled() {
    let cfg = Settings {
        idle_timeout: Duration::from_secs(5),
        stall_timeout: Duration::from_secs(2),
        ..Settings::default()
    };
    let mut p = Peer::new(cfg.clone(), &[]);
    p.turn(b"");
    // First the trim of a quiet idle connection, which keeps it open.
    let t = p.conn.poll_timeout().unwrap();
    assert_eq!(t, p.now + QUIET_TRIM);
    p.conn.handle_timeout(t);
    assert!(p.conn.closed().is_none());
    let t = p.conn.poll_timeout().unwrap();
    assert_eq!(t, p.now + Duration::from_secs(5));
    p.conn.handle_timeout(t);
    assert_eq!(goaway_code(&p.turn(b"")), Some(Reason::NO_ERROR.0));

    let mut p = Peer::new(cfg, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    p.turn(b"");
    let req = p.get(1, "/", true);
    p.feed(&req);
    p.turn(b"blocked");
    let t = p.conn.poll_timeout().unwrap();
    assert_eq!(t, p.now + Duration::from_secs(2));
    p.conn.handle_timeout(t);
    assert_eq!(goaway_code(&p.turn(b"")), Some(Reason::ENHANCE_YOUR_CALM.0));
}

#[test]
fn cached_header_blocks_stay_in_sync_with_the_decoder() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let mut id = 1;
    for round in 0..6 {
        if round == 3 {
            // Shrinking the table forces a size update into the next block.
            let mut s = Vec::new();
            frame::put_settings(&mut s, &[(setting::HEADER_TABLE_SIZE, 0)]);
            p.feed(&s);
        }
        let req = p.get(id, "/", true);
        p.feed(&req);
        let f = p.turn(b"same");
        let (h, block) = f.iter().find(|(h, _)| h.kind == kind::HEADERS).unwrap();
        assert_eq!(h.stream, id);
        if round == 3 {
            p.dec.set_max_table_size(0);
        }
        assert_eq!(p.status_of(block), b"200", "round {round}");
        id += 2;
    }
}

#[test]
fn a_shared_header_list_is_cached_by_identity_and_another_is_encoded() {
    use std::rc::Rc;
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let list = |etag: &'static [u8]| {
        Rc::new(vec![
            (
                Bytes::from_static(b"content-type"),
                Bytes::from_static(b"text/plain"),
            ),
            (Bytes::from_static(b"etag"), Bytes::from_static(etag)),
        ])
    };
    let (a, b) = (list(b"\"a\""), list(b"\"b\""));
    // a twice (the second is all indexes and cached, the third repeats it), then b: the same
    // length and names, another list.
    let mut etags = Vec::new();
    for (id, fields) in [(1, &a), (3, &a), (5, &a), (7, &b), (9, &a)] {
        let req = p.get(id, "/", true);
        p.feed(&req);
        let (id, _) = p.conn.next_request().unwrap();
        let mut resp = Response::new(200);
        resp.headers = Headers::shared(fields.clone());
        resp.body = Body::Bytes(Bytes::from_static(b"hello"));
        p.conn.respond(id, resp);
        if id == 5 {
            assert!(p.conn.headers_cache.valid);
            assert!(p
                .conn
                .headers_cache
                .shared
                .as_ref()
                .is_some_and(|s| Rc::ptr_eq(s, &a)));
            assert!(
                p.conn.headers_cache.headers.is_empty(),
                "no copy of a shared list"
            );
        }
        p.conn.fill(p.now);
        let out = p.conn.output_parts().to_vec();
        p.conn.clear_output();
        let f = parse(&out);
        let (_, block) = f.iter().find(|(h, _)| h.kind == kind::HEADERS).unwrap();
        etags.push(p.etag_of(block));
    }
    let want: Vec<&[u8]> = vec![b"\"a\"", b"\"a\"", b"\"a\"", b"\"b\"", b"\"a\""];
    assert_eq!(etags, want);
}

#[test]
fn requests_are_read_where_they_are_held_then_released_or_taken() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    for (id, path) in [(1, "/a"), (3, "/b"), (5, "/c"), (7, "/d")] {
        let req = p.get(id, path, true);
        p.feed(&req);
    }
    let (id, req) = p.conn.next_request_held().unwrap();
    assert_eq!((id, req.path()), (1, &b"/a"[..]));
    p.conn.release_request(1);
    let (id, req) = p.conn.next_request_held().unwrap();
    assert_eq!((id, req.path()), (3, &b"/b"[..]));
    let taken = p.conn.take_request(3).unwrap();
    assert_eq!(taken.path(), b"/b");
    // Two handed out at once: the second is released from behind the first.
    assert_eq!(p.conn.next_request_held().unwrap().0, 5);
    let (id, req) = p.conn.next_request_held().unwrap();
    assert_eq!((id, req.path()), (7, &b"/d"[..]));
    p.conn.release_request(7);
    assert_eq!(p.conn.take_request(5).unwrap().path(), b"/c");
    assert!(p.conn.held.is_empty());
    assert!(p.conn.next_request_held().is_none());
    for id in [1, 3, 5, 7] {
        p.conn.respond(id, Response::new(204));
    }
    assert_eq!(p.conn.in_handler, 0);
    assert!(p.conn.streams.is_empty());
}

#[test]
fn upgraded_request_is_stream_one() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let req = Request::for_test(Method::Get, "/", &[]);
    let settings = [0, 4, 0, 0, 0, 5]; // INITIAL_WINDOW_SIZE 5
    let mut c = Connection::upgraded(
        Settings::default(),
        addr,
        addr,
        Instant::now(),
        &settings,
        req,
    )
    .unwrap();
    let (id, _) = c.next_request().unwrap();
    assert_eq!(id, 1);
    let mut r = Response::new(200);
    r.body = Body::Bytes(Bytes::from_static(b"0123456789"));
    c.respond(1, r);
    c.fill(Instant::now());
    let f = parse(&c.output_parts().to_vec());
    let data: Vec<usize> = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA)
        .map(|(_, p)| p.len())
        .collect();
    assert_eq!(data, vec![5], "the upgrade's settings apply");
    assert!(Connection::upgraded(
        Settings::default(),
        addr,
        addr,
        Instant::now(),
        &[0, 4],
        Request::for_test(Method::Get, "/", &[]),
    )
    .is_err());
}

/// Answers every handed-out request with `body` and pulls its DATA into the output, without
/// clearing it (as the driver does between batches of one turn).
fn answer_all(conn: &mut Connection, body: &'static [u8], now: Instant) -> usize {
    let mut n = 0;
    while let Some((id, _req)) = conn.next_request() {
        let mut r = Response::new(200);
        r.body = Body::Bytes(Bytes::from_static(body));
        conn.respond(id, r);
        n += 1;
    }
    conn.fill(now);
    n
}

#[test]
fn requests_are_decoded_in_batches() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let mut reqs = Vec::new();
    for i in 0..40 {
        reqs.extend(p.get(1 + 2 * i, "/", true));
    }
    let mut input = BytesMut::from(&reqs[..]);
    let mut batches = Vec::new();
    loop {
        p.conn.recv(&mut input, p.now);
        assert!(p.conn.open_streams() <= REQUEST_BATCH);
        batches.push(answer_all(&mut p.conn, b"ok", p.now));
        assert_eq!(
            p.conn.open_streams(),
            0,
            "small answers finish in the batch"
        );
        if !p.conn.recv_paused() {
            break;
        }
        assert!(!input.is_empty());
    }
    assert!(input.is_empty());
    assert_eq!(batches, vec![16, 16, 8]);
    let out = p.conn.output_parts().to_vec();
    let ends = parse(&out)
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA && h.flags & flag::END_STREAM != 0)
        .count();
    assert_eq!(ends, 40);
}

/// A whole body from memory of `splice_min` bytes or more goes out from its own memory,
/// spliced in after its DATA frame's header; a smaller one is copied into the frames.
#[test]
fn large_whole_bodies_are_spliced_small_ones_copied() {
    static BODY: [u8; output::SPLICE_MIN] = [b's'; output::SPLICE_MIN];
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    for (id, body) in [(1, &BODY[..]), (3, &BODY[1..])] {
        let req = p.get(id, "/", true);
        p.feed(&req);
        let (got, _) = p.conn.next_request().unwrap();
        assert_eq!(got, id);
        let mut r = Response::new(200);
        r.body = Body::Bytes(Bytes::from_static(body));
        p.conn.respond(id, r);
        p.conn.fill(p.now);
        let parts = p.conn.output_parts();
        let pieces: Vec<&[u8]> = parts.pieces().collect();
        if body.len() >= output::SPLICE_MIN {
            assert!(parts.as_whole().is_none());
            assert_eq!(pieces.len(), 2, "the frames, then the body");
            assert_eq!(pieces[1].as_ptr(), body.as_ptr(), "the body's own memory");
        } else {
            assert_eq!(parts.as_whole().map(<[u8]>::len), Some(parts.len()));
        }
        let f = parse(&parts.to_vec());
        assert_eq!(
            f.iter()
                .map(|(h, _)| (h.kind, h.stream))
                .collect::<Vec<_>>(),
            vec![(kind::HEADERS, id), (kind::DATA, id)]
        );
        assert_eq!(f[1].1, body);
        assert_eq!(f[1].0.flags & flag::END_STREAM, flag::END_STREAM);
        p.conn.clear_output();
        assert!(p.conn.output_parts().is_empty());
    }
}

/// The (offset, length) of each piece of `parts` that is `body`'s own memory.
fn pieces_of(parts: output::OutputParts<'_>, body: &[u8]) -> Vec<(usize, usize)> {
    let range = body.as_ptr_range();
    parts
        .pieces()
        .filter(|p| range.contains(&p.as_ptr()))
        .map(|p| (p.as_ptr() as usize - range.start as usize, p.len()))
        .collect()
}

/// A body in memory larger than a frame goes out frame by frame from its own memory: each
/// DATA frame of `splice_min` bytes or more is spliced, a smaller one (a narrow window) copied.
#[test]
fn data_frames_of_a_body_in_memory_are_spliced() {
    let body: Bytes = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let mut p = Peer::new(Settings::default(), &[(setting::INITIAL_WINDOW_SIZE, 1000)]);
    p.turn(b"");
    let req = p.get(1, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    let mut r = Response::new(200);
    r.body = Body::Bytes(body.clone());
    p.conn.respond(id, r);
    p.conn.fill(p.now);
    let parts = p.conn.output_parts();
    assert!(pieces_of(parts, &body).is_empty(), "1,000 bytes are copied");
    let mut got = Vec::new();
    for (h, payload) in parse(&parts.to_vec()) {
        if h.kind == kind::DATA {
            got.extend_from_slice(&payload);
        }
    }
    assert_eq!(got, body[..1000]);
    p.conn.clear_output();

    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, id, 60_000);
    p.feed(&wu);
    p.conn.fill(p.now);
    let parts = p.conn.output_parts();
    assert_eq!(
        pieces_of(parts, &body),
        vec![(1000, 16_384), (17_384, 16_384), (33_768, 6232)],
        "every frame from the body's memory"
    );
    let f = parse(&parts.to_vec());
    assert!(f.iter().all(|(h, _)| h.kind == kind::DATA));
    for (h, payload) in &f {
        got.extend_from_slice(payload);
        let last = got.len() == body.len();
        assert_eq!(h.flags & flag::END_STREAM != 0, last);
    }
    assert_eq!(got, body);
    p.conn.clear_output();
    assert_eq!(p.conn.open_streams(), 0);
}

/// A pushed chunk of a streamed body is spliced frame by frame too, and the bytes left
/// below `splice_min` are copied.
#[test]
fn data_frames_of_a_streamed_chunk_are_spliced() {
    let chunk: Bytes = (0..18_000u32).map(|i| (i % 253) as u8).collect();
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let req = p.get(1, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    assert!(p.conn.respond(id, streamed(None)).is_some());
    p.output();
    assert!(p.conn.push_body(id, chunk.clone()));
    p.conn.end_body(id, None);
    p.conn.fill(p.now);
    let parts = p.conn.output_parts();
    assert_eq!(pieces_of(parts, &chunk), vec![(0, 16_384)]);
    let f = parse(&parts.to_vec());
    assert_eq!(kinds(&f), vec![(kind::DATA, id), (kind::DATA, id)]);
    assert_eq!(f[0].1, chunk[..16_384]);
    assert_eq!(f[1].1, chunk[16_384..], "1,616 bytes, copied");
    assert_eq!(f[0].0.flags & flag::END_STREAM, 0);
    assert_eq!(f[1].0.flags & flag::END_STREAM, flag::END_STREAM);
    p.conn.clear_output();
}

/// Ten answers of 16,000 bytes (160 KB, more than `OUTPUT_HIGH_WATER`): whole in one turn's
/// output under the default `max_write`; with 16 KiB, each write holds two bodies (the output
/// stops taking them once it holds that much) and the rest follow in later writes.
#[test]
fn whole_answers_fill_the_output_up_to_max_write() {
    static BODY: [u8; 16_000] = [b'x'; 16_000];
    let data_frames = |f: &Frames| f.iter().filter(|(h, _)| h.kind == kind::DATA).count();
    for (max_write, writes) in [(DEFAULT_MAX_WRITE, vec![10]), (16 * 1024, vec![2; 5])] {
        let cfg = Settings {
            max_write,
            ..Settings::default()
        };
        let mut p = Peer::new(cfg, &[(setting::INITIAL_WINDOW_SIZE, 1 << 20)]);
        let mut b = Vec::new();
        frame::put_window_update(&mut b, 0, 1 << 20);
        p.feed(&b);
        p.turn(b"");
        let reqs: Vec<u8> = (0..10).flat_map(|i| p.get(1 + 2 * i, "/", true)).collect();
        p.feed(&reqs);
        let first = p.turn(&BODY);
        let heads = first
            .iter()
            .filter(|(h, _)| h.kind == kind::HEADERS)
            .count();
        assert_eq!(heads, 10);
        let mut seen = vec![data_frames(&first)];
        while p.conn.open_streams() > 0 {
            let f = p.turn(b"");
            assert!(f
                .iter()
                .all(|(h, payload)| h.kind == kind::DATA && payload.len() == BODY.len()));
            seen.push(data_frames(&f));
        }
        assert_eq!(seen, writes, "max_write {max_write}");
    }
}

#[test]
fn streams_closed_but_unwritten_count_against_the_limit() {
    let cfg = Settings {
        max_streams: 20,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    let mut reqs = Vec::new();
    for i in 0..21 {
        reqs.extend(p.get(1 + 2 * i, "/", true));
    }
    let mut input = BytesMut::from(&reqs[..]);
    let mut answered = 0;
    loop {
        p.conn.recv(&mut input, p.now);
        answered += answer_all(&mut p.conn, b"", p.now);
        if !p.conn.recv_paused() {
            break;
        }
    }
    // The client has not seen any stream end yet: the 21st exceeds its limit.
    assert_eq!(answered, 20);
    let out = p.conn.output_parts().to_vec();
    p.conn.clear_output();
    let f = parse(&out);
    let refused: Vec<(u32, Vec<u8>)> = f
        .iter()
        .filter(|(h, _)| h.kind == kind::RST_STREAM)
        .map(|(h, b)| (h.stream, b.clone()))
        .collect();
    assert_eq!(
        refused,
        vec![(41, Reason::REFUSED_STREAM.0.to_be_bytes().to_vec())]
    );
    // Once the ends are written, new streams are accepted again.
    let req = p.get(43, "/", true);
    p.feed(&req);
    assert_eq!(answer_all(&mut p.conn, b"", p.now), 1);
}

/// Bodies copied into the output, never spliced: the tests of the output's own buffer.
fn copy_bodies() -> Settings {
    Settings {
        splice_min: usize::MAX,
        ..Settings::default()
    }
}

#[test]
fn idle_buffers_are_released_and_regrown() {
    let mut p = Peer::new(copy_bodies(), &[]);
    p.turn(b"");
    static BODY: [u8; 30_000] = [5; 30_000];
    let req = p.get(1, "/", true);
    p.feed(&req);
    let f = p.turn(&BODY);
    let data: usize = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA)
        .map(|(_, b)| b.len())
        .sum();
    assert_eq!(data, 30_000);
    assert!(p.conn.out.capacity() >= 30_000);
    let out = p
        .conn
        .release_idle_buffers()
        .output
        .expect("the output goes back to the driver");
    assert!(out.is_empty() && out.capacity() >= 30_000);
    assert_eq!(p.conn.out.capacity(), 0);
    assert_eq!(p.conn.streams.capacity(), 0);

    // Lent back before the next turn, the answer is written into it in place.
    assert!(p.conn.needs_output());
    let at = out.as_ptr();
    p.conn.lend_output(out);
    assert!(!p.conn.needs_output());
    let req = p.get(3, "/", false);
    p.feed(&req);
    assert_eq!(p.conn.out.as_ptr(), at);

    // A stream still open keeps the rest; the written output goes back all the same.
    assert!(p.conn.release_idle_buffers().output.is_some());
    assert_eq!(p.conn.open_streams(), 1);
    assert!(p.conn.streams.capacity() > 0);
    let mut end = Vec::new();
    frame::put_head(&mut end, 0, kind::DATA, flag::END_STREAM, 3);
    p.feed(&end);
    let f = p.turn(b"after");
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 3), (kind::DATA, 3)]);
    assert_eq!(f[1].1, b"after");
}

#[test]
fn a_busy_connection_keeps_its_buffers_until_the_quiet_trim() {
    let mut p = Peer::new(copy_bodies(), &[]);
    p.turn(b"");
    let mut two = p.get(1, "/a", true);
    two.extend(p.get(3, "/b", true));
    p.feed(&two);
    let f = p.turn(b"ok");
    assert_eq!(f.iter().filter(|(h, _)| h.kind == kind::DATA).count(), 2);
    assert!(
        p.conn.release_idle_buffers().output.is_some(),
        "the output goes back"
    );
    assert!(
        p.conn.streams.capacity() > 0,
        "the rest is kept for the next turn"
    );
    assert!(p.conn.hbuf.capacity() > 0);

    // The next turn reuses them; a quiet second frees them with the rest.
    let req = p.get(5, "/c", true);
    p.feed(&req);
    p.turn(b"ok");
    let t = p.conn.poll_timeout().unwrap();
    assert_eq!(t, p.now + QUIET_TRIM);
    p.conn.handle_timeout(t);
    assert_eq!(p.conn.streams.capacity(), 0);
    assert_eq!(p.conn.out.capacity(), 0);
    assert!(p.conn.closed().is_none());

    // After it, one request at a time: the first turn frees, the second keeps (a client
    // that waits for each answer, h2load -m1).
    let req = p.get(7, "/a", true);
    p.feed(&req);
    p.turn(b"ok");
    p.conn.release_idle_buffers();
    assert_eq!(p.conn.streams.capacity(), 0, "one request is not busy");
    let req = p.get(9, "/b", true);
    p.feed(&req);
    p.turn(b"ok");
    assert!(p.conn.release_idle_buffers().output.is_some());
    assert!(p.conn.streams.capacity() > 0, "a second request is");
    assert_eq!(p.conn.out.capacity(), 0);

    // A client that waits longer between requests is not busy: what it kept would be out
    // of cache by its next request (h2load -c10000 -m1).
    for id in [11, 13] {
        p.now += KEEP_BUFFERS_WITHIN * 2;
        let req = p.get(id, "/a", true);
        p.feed(&req);
        p.turn(b"ok");
        assert!(p.conn.release_idle_buffers().output.is_some());
        assert_eq!(p.conn.streams.capacity(), 0, "a slow client's request {id}");
        assert_eq!(p.conn.hbuf.capacity(), 0);
    }
    let req = p.get(15, "/b", true);
    p.feed(&req);
    p.turn(b"ok");
    p.conn.release_idle_buffers();
    assert!(
        p.conn.streams.capacity() > 0,
        "and busy again when it comes back at once"
    );

    // A large write frees everything but the output, which goes back all the same.
    static BODY: [u8; 30_000] = [5; 30_000];
    let req = p.get(17, "/c", true);
    p.feed(&req);
    p.turn(&BODY);
    assert!(p.conn.release_idle_buffers().output.unwrap().capacity() >= 30_000);
    assert_eq!(p.conn.streams.capacity(), 0);
    assert_eq!(p.conn.hbuf.capacity(), 0);
}

#[test]
fn field_validation_follows_section_8_2_1() {
    assert!(valid_field(b"x-a.b~c", b"any value: \x01 \x7f \xff ok"));
    assert!(valid_field(b"accept", b""));
    for name in [
        &b""[..],
        b"Accept",
        b"a b",
        b"a:b",
        b"a\x00",
        b"\xe9t\xe9",
        b"a\"b",
    ] {
        assert!(!valid_field(name, b"v"), "{name:?}");
    }
    for value in [&b"a\rb"[..], b"a\nb", b"a\x00b", b" lead", b"trail\t"] {
        assert!(!valid_field(b"x", value), "{value:?}");
    }
}

// ---- streamed bodies ------------------------------------------------------------------------

use crate::http::body::{Frame as BodyFrame, Next, RequestBody, StreamBody};
use std::task::{Context, Poll, Waker};

/// A response body the tests push by hand (`push_body`); the connection never polls it.
struct Unpolled;

impl crate::http::body::BodyStream for Unpolled {
    fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
        Poll::Pending
    }
}

fn streamed(len: Option<u64>) -> Response {
    let mut r = Response::new(200);
    r.body = Body::Stream(StreamBody {
        len,
        stream: Box::new(Unpolled),
    });
    r
}

fn poll_body(b: &mut RequestBody) -> Poll<Next> {
    b.poll_frame(&mut Context::from_waker(Waker::noop()))
}

fn data(id: u32, len: usize, end_stream: bool) -> Vec<u8> {
    let mut b = Vec::new();
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    frame::put_head(&mut b, len, kind::DATA, flags, id);
    b.extend(std::iter::repeat_n(b'x', len));
    b
}

/// Sum of WINDOW_UPDATE increments for `stream` in `frames`.
fn credit(frames: &Frames, stream: u32) -> u32 {
    frames
        .iter()
        .filter(|(h, _)| h.kind == kind::WINDOW_UPDATE && h.stream == stream)
        .map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
        .sum()
}

impl Peer {
    /// A request with a body to follow (no END_STREAM).
    fn post(&mut self, id: u32, path: &str, content_length: Option<u64>) -> Vec<u8> {
        let cl = content_length.map(|l| l.to_string());
        let mut fields: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.as_bytes()),
        ];
        if let Some(cl) = &cl {
            fields.push((b"content-length", cl.as_bytes()));
        }
        let mut block = Vec::new();
        self.enc.encode(fields, &mut block);
        let mut out = Vec::new();
        frame::put_head(&mut out, block.len(), kind::HEADERS, flag::END_HEADERS, id);
        out.extend_from_slice(&block);
        out
    }

    /// Trailing HEADERS with END_STREAM.
    fn trailers(&mut self, id: u32, fields: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut block = Vec::new();
        self.enc.encode(fields.iter().copied(), &mut block);
        let mut out = Vec::new();
        frame::put_head(
            &mut out,
            block.len(),
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            id,
        );
        out.extend_from_slice(&block);
        out
    }

    /// Feeds bytes, streaming the bodies of requests to paths under `/upload`.
    fn feed_streaming(&mut self, b: &[u8]) {
        let mut input = BytesMut::from(b);
        self.conn
            .recv_with(&mut input, self.now, &|r| r.path().starts_with(b"/upload"));
        assert!(input.is_empty() || self.conn.closed().is_some());
    }

    /// Pulls the output without answering anything.
    fn output(&mut self) -> Frames {
        self.conn.fill(self.now);
        let out = self.conn.output_parts().to_vec();
        self.conn.clear_output();
        parse(&out)
    }

    fn fields_of(&mut self, block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut buf = BytesMut::new();
        let mut fields = Vec::new();
        self.dec
            .decode(block, &mut buf, |f| fields.push(f))
            .unwrap();
        fields
            .iter()
            .map(|f| (buf[f.name.clone()].to_vec(), buf[f.value.clone()].to_vec()))
            .collect()
    }
}

fn small_windows() -> Settings {
    Settings {
        input_window: 65_535,
        ..Settings::default()
    }
}

#[test]
fn streamed_request_body_returns_the_stream_window_only_as_read() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    let head = p.post(1, "/upload", None);
    p.feed_streaming(&head);
    let (id, req) = p.conn.next_request().expect("handed out at its HEADERS");
    assert_eq!(id, 1);
    let mut body = req.take_body().expect("a body pipe");
    assert!(poll_body(&mut body).is_pending());

    let mut b = Vec::new();
    for _ in 0..40 {
        b.extend(data(1, 1000, false));
    }
    p.feed_streaming(&b);
    let f = p.output();
    assert_eq!(credit(&f, 1), 0, "nothing read yet: no stream credit");
    assert_eq!(
        credit(&f, 0),
        40_000,
        "within one window, the connection credit comes back at once"
    );

    // Reading less than half a window gives nothing back yet; the rest crosses it.
    for _ in 0..20 {
        assert!(matches!(
            poll_body(&mut body),
            Poll::Ready(Some(Ok(BodyFrame::Data(_))))
        ));
    }
    assert_eq!(credit(&p.output(), 1), 0);
    for _ in 0..20 {
        assert!(poll_body(&mut body).is_ready());
    }
    assert_eq!(credit(&p.output(), 1), 40_000);

    p.feed_streaming(&data(1, 5, true));
    assert!(matches!(
        poll_body(&mut body),
        Poll::Ready(Some(Ok(BodyFrame::Data(d)))) if d.len() == 5
    ));
    assert_eq!(poll_body(&mut body), Poll::Ready(None));
    assert!(
        p.conn.next_request().is_none(),
        "not handed out a second time"
    );
    // The answer ends the stream.
    let _ = p.conn.respond(1, Response::new(204));
    p.output();
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn a_stalled_stream_does_not_hold_the_connection_window() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    let mut b = p.post(1, "/upload/a", None);
    b.extend(p.post(3, "/upload/b", None));
    p.feed_streaming(&b);
    let (_, r1) = p.conn.next_request().unwrap();
    let (_, r3) = p.conn.next_request().unwrap();
    let _stalled = r1.take_body().unwrap();
    let mut b3 = r3.take_body().unwrap();

    // Stream 1 fills its whole window and nobody reads it: the connection credit still
    // comes back, so stream 3 can send.
    let mut b = Vec::new();
    for _ in 0..4 {
        b.extend(data(1, 16_000, false));
    }
    b.extend(data(1, 1535, false));
    p.feed_streaming(&b);
    assert_eq!(credit(&p.output(), 0), 65_535);

    // Beyond one window unread on the connection, its credit waits for reads.
    let mut b = Vec::new();
    for _ in 0..4 {
        b.extend(data(3, 10_000, false));
    }
    p.feed_streaming(&b);
    assert_eq!(credit(&p.output(), 0), 0);
    while let Poll::Ready(Some(Ok(_))) = poll_body(&mut b3) {}
    let f = p.output();
    assert_eq!(credit(&f, 0), 40_000);
    assert_eq!(credit(&f, 3), 40_000);
    assert_eq!(credit(&f, 1), 0);
}

#[test]
fn request_bodies_of_other_handlers_are_still_discarded() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    let head = p.post(1, "/other", Some(3));
    p.feed_streaming(&head);
    assert!(p.conn.next_request().is_none(), "waits for END_STREAM");
    p.feed_streaming(&data(1, 3, true));
    let (_, req) = p.conn.next_request().unwrap();
    assert!(req.take_body().is_none());
}

#[test]
fn request_trailers_reach_the_handler() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    let mut b = p.post(1, "/upload", Some(3));
    b.extend(data(1, 3, false));
    b.extend(p.trailers(1, &[(b"x-checksum", b"abc")]));
    p.feed_streaming(&b);
    let (_, req) = p.conn.next_request().unwrap();
    let mut body = req.take_body().unwrap();
    assert_eq!(body.content_length(), Some(3));
    assert!(matches!(
        poll_body(&mut body),
        Poll::Ready(Some(Ok(BodyFrame::Data(_))))
    ));
    assert_eq!(
        poll_body(&mut body),
        Poll::Ready(Some(Ok(BodyFrame::Trailers(vec![(
            Bytes::from_static(b"x-checksum"),
            Bytes::from_static(b"abc")
        )]))))
    );
    assert_eq!(poll_body(&mut body), Poll::Ready(None));

    // Trailers with a pseudo-header are malformed: the stream is reset, the body aborted.
    let head = p.post(3, "/upload", None);
    p.feed_streaming(&head);
    let (_, req) = p.conn.next_request().unwrap();
    let mut body = req.take_body().unwrap();
    let bad = p.trailers(3, &[(b":path", b"/x")]);
    p.feed_streaming(&bad);
    assert!(matches!(poll_body(&mut body), Poll::Ready(Some(Err(_)))));
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::RST_STREAM, 3)]);
    assert_eq!(f[0].1, Reason::PROTOCOL_ERROR.0.to_be_bytes());
    assert_eq!(p.conn.take_cancelled().collect::<Vec<_>>(), vec![3]);

    // Trailers before the declared length arrived are malformed too.
    let mut b = p.post(5, "/upload", Some(10));
    b.extend(data(5, 3, false));
    b.extend(p.trailers(5, &[(b"x", b"1")]));
    p.feed_streaming(&b);
    assert_eq!(kinds(&p.output()), vec![(kind::RST_STREAM, 5)]);
}

#[test]
fn client_reset_aborts_the_body_and_cancels_the_answer() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    let head = p.post(1, "/upload", None);
    p.feed_streaming(&head);
    let (_, req) = p.conn.next_request().unwrap();
    let mut body = req.take_body().unwrap();
    let mut rst = data(1, 10, false);
    frame::put_rst_stream(&mut rst, 1, Reason::CANCEL);
    p.feed_streaming(&rst);
    assert!(matches!(
        poll_body(&mut body),
        Poll::Ready(Some(Ok(BodyFrame::Data(_))))
    ));
    match poll_body(&mut body) {
        Poll::Ready(Some(Err(e))) => assert_eq!(e.side, crate::http::Side::Downstream),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.conn.take_cancelled().collect::<Vec<_>>(), vec![1]);
    assert!(
        p.conn.respond(1, Response::new(200)).is_none(),
        "a late answer is dropped"
    );
    assert!(p.output().is_empty());

    // A pending answer without a body, and a streamed response, are cancelled alike.
    let mut b = p.get(3, "/", true);
    b.extend(p.get(5, "/", true));
    p.feed(&b);
    let (a, _) = p.conn.next_request().unwrap();
    let (s, _) = p.conn.next_request().unwrap();
    assert!(p.conn.respond(s, streamed(None)).is_some());
    let mut rst = Vec::new();
    frame::put_rst_stream(&mut rst, a, Reason::CANCEL);
    frame::put_rst_stream(&mut rst, s, Reason::CANCEL);
    p.feed(&rst);
    assert_eq!(p.conn.take_cancelled().collect::<Vec<_>>(), vec![a, s]);
    assert!(!p.conn.wants_body(s));
    assert!(!p.conn.push_body(s, Bytes::from_static(b"late")));
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn pending_answers_are_not_idle() {
    let cfg = Settings {
        idle_timeout: Duration::from_secs(5),
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    p.output();
    let req = p.get(1, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    assert_eq!(
        p.conn.poll_timeout(),
        None,
        "a backend's timeouts bound the wait"
    );
    let _ = p.conn.respond(id, Response::new(204));
    assert!(p.conn.poll_timeout().is_some());
}

#[test]
fn streamed_response_respects_windows_and_ends_with_trailers() {
    let mut p = Peer::new(Settings::default(), &[(setting::INITIAL_WINDOW_SIZE, 10)]);
    p.output();
    let req = p.get(1, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    assert!(p.conn.respond(id, streamed(None)).is_some());
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 1)]);
    assert_eq!(f[0].0.flags, flag::END_HEADERS, "no END_STREAM yet");
    let fields = p.fields_of(&f[0].1.clone());
    assert!(
        !fields.iter().any(|(n, _)| n == b"content-length"),
        "unknown length: no content-length"
    );

    assert!(p.conn.wants_body(id));
    assert!(p.conn.push_body(id, Bytes::from(vec![b'a'; 25])));
    assert!(!p.conn.wants_body(id), "one chunk queued at a time");
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::DATA, 1)]);
    assert_eq!(f[0].1.len(), 10);
    assert!(p.output().is_empty(), "the stream window is spent");
    assert!(!p.conn.wants_body(id));

    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 1, 100);
    p.feed(&wu);
    let f = p.output();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].1.len(), 15);
    assert!(p.conn.wants_body(id), "drained, with window left");

    p.conn.end_body(
        id,
        Some(vec![(
            Bytes::from_static(b"Grpc-Status"),
            Bytes::from_static(b"0"),
        )]),
    );
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 1)]);
    assert_eq!(f[0].0.flags, flag::END_HEADERS | flag::END_STREAM);
    assert_eq!(
        p.fields_of(&f[0].1.clone()),
        vec![(b"grpc-status".to_vec(), b"0".to_vec())]
    );
    assert_eq!(p.conn.open_streams(), 0);
    assert!(p.conn.take_cancelled().next().is_none());
}

#[test]
fn streamed_response_ends_on_its_last_data_frame() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.output();
    let req = p.get(1, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    let _ = p.conn.respond(id, streamed(Some(5)));
    let f = p.output();
    let fields = p.fields_of(&f[0].1.clone());
    assert!(fields.contains(&(b"content-length".to_vec(), b"5".to_vec())));
    assert!(p.conn.push_body(id, Bytes::from_static(b"hello")));
    p.conn.end_body(id, None);
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::DATA, 1)]);
    assert_eq!(f[0].0.flags, flag::END_STREAM);
    assert_eq!(f[0].1, b"hello");

    // An end with nothing queued needs no window: an empty DATA frame.
    let req = p.get(3, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    let _ = p.conn.respond(id, streamed(None));
    p.output();
    p.conn.end_body(id, None);
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::DATA, 3)]);
    assert_eq!((f[0].0.flags, f[0].1.len()), (flag::END_STREAM, 0));

    // A HEAD request gets the headers only; the body is dropped.
    let mut block = Vec::new();
    p.enc.encode(
        [
            (&b":method"[..], &b"HEAD"[..]),
            (b":scheme", b"http"),
            (b":path", b"/"),
        ],
        &mut block,
    );
    let mut head = Vec::new();
    frame::put_head(
        &mut head,
        block.len(),
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        5,
    );
    head.extend_from_slice(&block);
    p.feed(&head);
    let (id, _) = p.conn.next_request().unwrap();
    assert!(p.conn.respond(id, streamed(Some(7))).is_none());
    let f = p.output();
    assert_eq!(f[0].0.flags, flag::END_HEADERS | flag::END_STREAM);
}

#[test]
fn body_errors_and_wrong_lengths_reset_the_stream() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.output();
    let mut b = Vec::new();
    for id in [1, 3, 5] {
        b.extend(p.get(id, "/", true));
    }
    p.feed(&b);
    for id in [1, 3, 5] {
        let (got, _) = p.conn.next_request().unwrap();
        assert_eq!(got, id);
        let _ = p.conn.respond(id, streamed(Some(4)));
    }
    p.output();
    // A failure mid-body.
    assert!(p.conn.push_body(1, Bytes::from_static(b"ab")));
    p.conn.reset_body(1);
    // Longer than announced.
    assert!(!p.conn.push_body(3, Bytes::from_static(b"abcde")));
    // Shorter than announced.
    assert!(p.conn.push_body(5, Bytes::from_static(b"abc")));
    p.conn.end_body(5, None);
    let f = p.output();
    let ends: Vec<(u8, u32, u8)> = f.iter().map(|(h, _)| (h.kind, h.stream, h.flags)).collect();
    assert_eq!(
        ends,
        vec![
            (kind::RST_STREAM, 1, 0),
            (kind::RST_STREAM, 3, 0),
            (kind::RST_STREAM, 5, 0)
        ],
        "no DATA with END_STREAM: the client never sees a complete response"
    );
    for (_, payload) in &f {
        assert_eq!(payload[..], Reason::INTERNAL_ERROR.0.to_be_bytes());
    }
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn streamed_request_body_over_the_limit_gets_413_then_reset() {
    let cfg = Settings {
        max_request_body: 100,
        ..small_windows()
    };
    let mut p = Peer::new(cfg, &[]);
    p.output();
    let head = p.post(1, "/upload", None);
    p.feed_streaming(&head);
    let (_, req) = p.conn.next_request().unwrap();
    let mut body = req.take_body().unwrap();
    let mut b = data(1, 60, false);
    b.extend(data(1, 60, false));
    p.feed_streaming(&b);
    match poll_body(&mut body) {
        Poll::Ready(Some(Ok(_))) => {}
        other => panic!("{other:?}"),
    }
    match poll_body(&mut body) {
        Poll::Ready(Some(Err(e))) => assert_eq!(e.side, crate::http::Side::Internal),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        p.conn.take_cancelled().collect::<Vec<_>>(),
        vec![1],
        "the pending answer is dropped"
    );
    let f = p.output();
    assert_eq!(
        kinds(&f),
        vec![(kind::HEADERS, 1), (kind::DATA, 1), (kind::RST_STREAM, 1)]
    );
    assert_eq!(p.status_of(&f[0].1.clone()), b"413");
    assert_eq!(f[2].1, Reason::NO_ERROR.0.to_be_bytes());

    // Once the response started, only a reset is left.
    let head = p.post(3, "/upload", None);
    p.feed_streaming(&head);
    let (id, _req) = p.conn.next_request().unwrap();
    assert!(p.conn.respond(id, streamed(None)).is_some());
    p.output();
    p.feed_streaming(&data(3, 101, false));
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::RST_STREAM, 3)]);
    assert_eq!(f[0].1, Reason::CANCEL.0.to_be_bytes());
    assert_eq!(p.conn.take_cancelled().collect::<Vec<_>>(), vec![3]);
}

#[test]
fn tracked_streams_report_what_was_sent() {
    let mut p = Peer::new(Settings::default(), &[(setting::INITIAL_WINDOW_SIZE, 3)]);
    p.output();
    let mut b = p.get(1, "/", true);
    b.extend(p.get(3, "/", true));
    p.feed(&b);
    let (a, _) = p.conn.next_request().unwrap();
    let (c, _) = p.conn.next_request().unwrap();
    let mut r = Response::new(200);
    r.body = Body::Bytes(Bytes::from_static(b"hello"));
    let _ = p.conn.respond_tracked(a, r, 7);
    let _ = p.conn.respond(c, Response::new(204));
    let f = p.output();
    let head_len = f[0].1.len() as u64;
    assert!(p.conn.take_done().next().is_none(), "still sending");
    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, a, 10);
    p.feed(&wu);
    p.output();
    assert_eq!(
        p.conn.take_done().collect::<Vec<_>>(),
        vec![StreamDone {
            id: a,
            status: 200,
            mark: 7,
            head_bytes: head_len,
            body_bytes: 5,
            complete: true
        }],
        "untracked streams are not reported"
    );

    // Reset by the client mid-body: reported incomplete, with what was sent.
    let req = p.get(5, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    let mut r = Response::new(200);
    r.body = Body::Bytes(Bytes::from_static(b"0123456789"));
    let _ = p.conn.respond_tracked(id, r, 7);
    p.output();
    let mut rst = Vec::new();
    frame::put_rst_stream(&mut rst, id, Reason::CANCEL);
    p.feed(&rst);
    let done: Vec<StreamDone> = p.conn.take_done().collect();
    assert_eq!((done[0].body_bytes, done[0].complete), (3, false));
    assert_eq!((done[0].status, done[0].mark), (200, 7));
}

#[test]
fn an_answer_before_a_small_declared_body_lets_the_rest_in() {
    let mut p = Peer::new(small_windows(), &[]);
    p.output();
    // The rest of the body (10 bytes) is within the window: no reset; its END_STREAM ends
    // the stream.
    let head = p.post(1, "/upload", Some(10));
    p.feed_streaming(&head);
    let (id, req) = p.conn.next_request().unwrap();
    drop(req.take_body());
    let mut r = Response::new(200);
    r.body = Body::Bytes(Bytes::from_static(b"ok"));
    assert!(p.conn.respond(id, r).is_none());
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 1), (kind::DATA, 1)]);
    assert_eq!(p.conn.open_streams(), 1);
    p.feed_streaming(&data(1, 10, true));
    assert_eq!(p.conn.open_streams(), 0);
    assert!(!kinds(&p.output()).contains(&(kind::RST_STREAM, 1)));

    // Without a declared length the client is asked to stop.
    let head = p.post(3, "/upload", None);
    p.feed_streaming(&head);
    let (id, req) = p.conn.next_request().unwrap();
    drop(req.take_body());
    p.conn.respond(id, Response::new(204));
    let f = p.output();
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 3), (kind::RST_STREAM, 3)]);
    assert_eq!(p.conn.open_streams(), 0);
}

/// A HEADERS frame for stream `id` with `fields`, encoded by `p`'s encoder.
fn headers_frame(p: &mut Peer, id: u32, fields: &[(&[u8], &[u8])], end_stream: bool) -> Vec<u8> {
    let mut block = Vec::new();
    p.enc.encode(fields.iter().copied(), &mut block);
    let mut out = Vec::new();
    let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    frame::put_head(&mut out, block.len(), kind::HEADERS, flags, id);
    out.extend_from_slice(&block);
    out
}

#[test]
fn extended_connect_only_when_enabled() {
    let websocket: [(&[u8], &[u8]); 5] = [
        (b":method", b"CONNECT"),
        (b":protocol", b"websocket"),
        (b":scheme", b"https"),
        (b":authority", b"example.com"),
        (b":path", b"/chat"),
    ];
    // Off (the default): not advertised, and `:protocol` is malformed.
    let mut p = Peer::new(Settings::default(), &[]);
    let f = p.turn(b"");
    assert!(!f[0].1.chunks(6).any(|s| s[..2] == [0, 8]));
    let b = headers_frame(&mut p, 1, &websocket, true);
    p.feed(&b);
    let f = p.turn(b"");
    assert_eq!(kinds(&f), vec![(kind::RST_STREAM, 1)]);

    // On: SETTINGS_ENABLE_CONNECT_PROTOCOL = 1, and the request carries its protocol.
    let cfg = Settings {
        enable_connect_protocol: true,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    let f = p.turn(b"");
    assert!(f[0].1.chunks(6).any(|s| s == [0, 8, 0, 0, 0, 1]));
    let b = headers_frame(&mut p, 1, &websocket, true);
    p.feed(&b);
    let (id, r) = p.conn.next_request().expect("the extended CONNECT");
    assert_eq!((id, &r.method), (1, &Method::Connect));
    assert_eq!(r.protocol(), Some(&b"websocket"[..]));
    assert_eq!(r.target(), b"/chat");
    p.conn.respond(id, Response::new(200));
    p.turn(b"");
    // RFC 8441 section 4: `:protocol` only on CONNECT, and with `:scheme` and `:path`.
    let get_with_protocol = [(&b":method"[..], &b"GET"[..])]
        .into_iter()
        .chain(websocket[1..].iter().copied())
        .collect::<Vec<_>>();
    let no_path = &websocket[..4];
    for (id, fields) in [(3, &get_with_protocol[..]), (5, no_path)] {
        let b = headers_frame(&mut p, id, fields, true);
        p.feed(&b);
        let f = p.turn(b"");
        assert_eq!(kinds(&f), vec![(kind::RST_STREAM, id)], "stream {id}");
    }
    // A plain CONNECT is as before.
    let plain: [(&[u8], &[u8]); 2] = [
        (b":method", b"CONNECT"),
        (b":authority", b"example.com:443"),
    ];
    let b = headers_frame(&mut p, 7, &plain, true);
    p.feed(&b);
    let (_, r) = p.conn.next_request().expect("the plain CONNECT");
    assert_eq!(r.protocol(), None);
}

#[test]
fn tunnel_data_is_not_cut_by_the_body_limit() {
    let cfg = Settings {
        enable_connect_protocol: true,
        max_request_body: 1000,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    let fields: [(&[u8], &[u8]); 5] = [
        (b":method", b"CONNECT"),
        (b":protocol", b"websocket"),
        (b":scheme", b"http"),
        (b":path", b"/chat"),
        (b":authority", b"example.com"),
    ];
    let b = headers_frame(&mut p, 1, &fields, false);
    let mut input = BytesMut::from(&b[..]);
    p.conn.recv_with(&mut input, p.now, &|_| true);
    let (id, req) = p.conn.next_request().expect("the tunnel's request");
    let mut body = req.take_body().expect("a pipe");
    p.conn.respond(id, streamed(None));
    p.turn(b"");
    let mut got = 0;
    for _ in 0..5 {
        let mut input = BytesMut::from(&data(1, 900, false)[..]);
        p.conn.recv_with(&mut input, p.now, &|_| true);
        while let Poll::Ready(Some(Ok(crate::http::Frame::Data(d)))) = poll_body(&mut body) {
            got += d.len();
        }
    }
    assert_eq!(got, 4500);
    let f = p.turn(b"");
    assert!(
        !kinds(&f).contains(&(kind::RST_STREAM, 1)),
        "{:?}",
        kinds(&f)
    );
}

#[test]
fn a_quiet_idle_connection_drops_its_response_headers_cache() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    // The same response twice: the second block is all indexes and gets cached.
    for id in [1, 3] {
        let req = p.get(id, "/", true);
        p.feed(&req);
        let (id, _) = p.conn.next_request().unwrap();
        let mut resp = Response::new(200);
        resp.headers.push((
            Bytes::from_static(b"content-type"),
            Bytes::from_static(b"text/plain"),
        ));
        resp.body = Body::Bytes(Bytes::from_static(b"hello"));
        p.conn.respond(id, resp);
        p.turn(b"");
    }
    assert!(p.conn.headers_cache.headers.capacity() > 0);
    let due = p.conn.poll_timeout().unwrap();
    assert!(due <= p.now + QUIET_TRIM);
    p.conn.handle_timeout(due);
    assert_eq!(p.conn.headers_cache.headers.capacity(), 0);
    assert_eq!(p.conn.headers_cache.block.capacity(), 0);
    assert!(p.conn.closed().is_none(), "only the cache goes");
    // Done until the client sends again: no timer spinning on an idle connection.
    assert!(p.conn.poll_timeout().unwrap() > due + QUIET_TRIM);
}

/// Decoded (name, value) pairs.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Sends a GET with an `x-token` header (every field indexed by the client's encoder when
/// `index`), answers it with an `etag`, and returns the request's header block, the request
/// as received and the response's decoded fields.
fn indexed_exchange(p: &mut Peer, id: u32, index: bool) -> (Vec<u8>, Request, Fields) {
    let fields: [(&[u8], &[u8]); 5] = [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":authority", b"example.com"),
        (b":path", b"/a"),
        (b"x-token", b"abc123"),
    ];
    let mut block = Vec::new();
    let mut b = p.enc.block(&mut block);
    for (n, v) in fields {
        let how = if index {
            Indexing::Incremental
        } else {
            Indexing::Auto
        };
        b.field_with(n, v, how);
    }
    let mut f = Vec::new();
    frame::put_head(
        &mut f,
        block.len(),
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        id,
    );
    f.extend_from_slice(&block);
    p.feed(&f);
    let (got, req) = p.conn.next_request().unwrap();
    assert_eq!(got, id);
    let mut resp = Response::new(200);
    resp.headers
        .push((Bytes::from_static(b"etag"), Bytes::from_static(b"\"v1\"")));
    resp.body = Body::Bytes(Bytes::from_static(b"hello"));
    p.conn.respond(id, resp);
    let out = p.turn(b"");
    let (_, rblock) = out.iter().find(|(h, _)| h.kind == kind::HEADERS).unwrap();
    let mut buf = BytesMut::new();
    let mut decoded = Vec::new();
    p.dec.decode(rblock, &mut buf, |f| decoded.push(f)).unwrap();
    let fields = decoded
        .iter()
        .map(|f| (buf[f.name.clone()].to_vec(), buf[f.value.clone()].to_vec()))
        .collect();
    (block, req, fields)
}

#[test]
fn a_parked_connection_keeps_its_hpack_contexts_and_serves_on() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let (_, req, resp) = indexed_exchange(&mut p, 1, true);
    assert_eq!(req.header(b"x-token"), Some(&b"abc123"[..]));
    assert!(resp.contains(&(b"etag".to_vec(), b"\"v1\"".to_vec())));
    assert!(!p.conn.parkable(), "not before the quiet trim");
    let due = p.conn.poll_timeout().unwrap();
    p.conn.handle_timeout(due);
    assert!(p.conn.parkable());
    assert!(size_of::<Parked>() * 2 < size_of::<Connection>());

    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let conn = std::mem::replace(
        &mut p.conn,
        Connection::new(Settings::default(), addr, addr, p.now),
    );
    let parked = conn.park();
    p.now += Duration::from_secs(5);
    p.conn = Connection::unpark(parked, addr, addr, p.now);

    // Every field of the same request is in the tables now: the block is indexes only.
    let (block, req, resp) = indexed_exchange(&mut p, 3, false);
    assert!(block.iter().all(|b| b & 0x80 != 0), "{block:02x?}");
    assert_eq!(req.authority(), Some(&b"example.com"[..]));
    assert_eq!(req.header(b"x-token"), Some(&b"abc123"[..]));
    assert!(resp.contains(&(b"etag".to_vec(), b"\"v1\"".to_vec())));
    // Stream ids still must grow: 1 was used before the connection was parked.
    let reuse = headers_frame(
        &mut p,
        1,
        &[
            (b":method", b"GET"),
            (b":scheme", b"http"),
            (b":path", b"/"),
        ],
        true,
    );
    p.feed(&reuse);
    let out = p.turn(b"");
    assert_eq!(goaway_code(&out), Some(Reason::STREAM_CLOSED.0));
}

#[test]
fn only_a_quiet_open_connection_is_parkable() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let req = p.get(1, "/", false);
    p.feed(&req);
    let due = p.conn.poll_timeout().unwrap();
    p.conn.handle_timeout(due.min(p.now + QUIET_TRIM));
    assert!(!p.conn.parkable(), "a request is in progress");
    p.conn.shutdown();
    assert!(!p.conn.parkable());
}

#[test]
fn a_parked_connection_still_ignores_late_frames_of_streams_it_reset() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let fields: [(&[u8], &[u8]); 4] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b"connection", b"close"),
    ];
    let bad = headers_frame(&mut p, 1, &fields, false);
    p.feed(&bad);
    assert_eq!(kinds(&p.turn(b"")), vec![(kind::RST_STREAM, 1)]);
    let due = p.conn.poll_timeout().unwrap();
    p.conn.handle_timeout(due);
    assert!(p.conn.parkable());
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let conn = std::mem::replace(
        &mut p.conn,
        Connection::new(Settings::default(), addr, addr, p.now),
    );
    p.conn = Connection::unpark(conn.park(), addr, addr, p.now);
    // DATA the client sent before it saw the reset: ignored, not answered with another.
    p.feed(&data(1, 10, true));
    let f = p.turn(b"");
    assert!(
        f.iter()
            .all(|(h, _)| h.kind != kind::RST_STREAM && h.kind != kind::GOAWAY),
        "{:?}",
        kinds(&f)
    );
}

/// A HEADERS frame with END_STREAM carrying `block` as is.
fn raw_request(id: u32, block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let flags = flag::END_HEADERS | flag::END_STREAM;
    frame::put_head(&mut out, block.len(), kind::HEADERS, flags, id);
    out.extend_from_slice(block);
    out
}

/// What a handler sees of a request: method, target, authority, header fields.
type Seen = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>);

fn seen(r: &Request) -> Seen {
    (
        r.method.as_bytes().to_vec(),
        r.target().to_vec(),
        r.authority().map(<[u8]>::to_vec),
        r.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect(),
    )
}

/// A header block repeated byte for byte is answered from the connection's memo only while
/// the HPACK table stays as it was: every request is what full decoding gives, after a
/// literal with indexing changed what an index means, and after a table size update.
#[test]
fn repeated_header_block_decodes_as_the_table_says() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    // GET, http, path "/", `x-a: 1` inserted at index 62.
    let mut first = vec![0x82, 0x86, 0x84, 0x40, 3];
    first.extend_from_slice(b"x-a\x011");
    // GET, http, path "/b" as a literal without indexing, index 62: keeps the table.
    let mut repeat = vec![0x82, 0x86, 0x04, 2];
    repeat.extend_from_slice(b"/b");
    repeat.push(0xbe);
    // Changes only the literal: another request from the same table.
    let mut other = repeat.clone();
    other[5] = b'c';
    // `x-b: 2` inserted: index 62 now means it.
    let mut shift = vec![0x82, 0x86, 0x84, 0x40, 3];
    shift.extend_from_slice(b"x-b\x012");
    let field = |n: &str, v: &str| (n.as_bytes().to_vec(), v.as_bytes().to_vec());
    let mut id = 1;
    let mut send = |p: &mut Peer, block: &[u8]| {
        p.feed(&raw_request(id, block));
        id += 2;
        let (_, r) = p.conn.next_request().expect("a request");
        let s = seen(&r);
        r.recycle();
        p.turn(b"");
        s
    };
    let a = send(&mut p, &first);
    assert_eq!(a.1, b"/");
    assert_eq!(a.3, vec![field("x-a", "1")]);
    let b1 = send(&mut p, &repeat);
    assert_eq!(
        (b1.0.as_slice(), b1.1.as_slice()),
        (&b"GET"[..], &b"/b"[..])
    );
    assert_eq!(b1.3, vec![field("x-a", "1")]);
    // The memo's answer is the decoded one.
    assert_eq!(send(&mut p, &repeat), b1);
    assert_eq!(send(&mut p, &repeat), b1);
    // A changed block after a memo hit, then the first again.
    assert_eq!(send(&mut p, &other).1, b"/c");
    assert_eq!(send(&mut p, &repeat), b1);
    // After an insertion the same bytes name another field.
    assert_eq!(send(&mut p, &shift).3, vec![field("x-b", "2")]);
    assert_eq!(send(&mut p, &repeat).3, vec![field("x-b", "2")]);
    assert_eq!(send(&mut p, &repeat).3, vec![field("x-b", "2")]);
    // A block the memo may not answer for (a literal with indexing) sent twice: the second
    // still inserts, so index 62 is its copy and 63 the first.
    let mut twice = vec![0x82, 0x86, 0x84, 0x40, 3];
    twice.extend_from_slice(b"x-c\x013");
    send(&mut p, &twice);
    send(&mut p, &twice);
    let mut both = vec![0x82, 0x86, 0x84, 0xbe, 0xbf, 0xc0];
    assert_eq!(
        send(&mut p, &both).3,
        vec![field("x-c", "3"), field("x-c", "3"), field("x-b", "2")]
    );
    // A table size update empties the table: the remembered bytes now name no entry, which
    // full decoding answers with COMPRESSION_ERROR.
    send(&mut p, &repeat);
    both.truncate(3);
    both.insert(0, 0x20);
    send(&mut p, &both);
    p.feed(&raw_request(id, &repeat));
    assert_eq!(goaway_code(&p.turn(b"")), Some(Reason::COMPRESSION_ERROR.0));
}

/// A block refused once is refused each time it comes again, memo or not.
#[test]
fn repeated_malformed_block_is_refused_each_time() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    // An uppercase name, as a literal without indexing: malformed, keeps the table.
    let mut bad = vec![0x82, 0x86, 0x84, 0x00, 3];
    bad.extend_from_slice(b"X-A\x011");
    for id in [1, 3, 5] {
        p.feed(&raw_request(id, &bad));
        assert!(p.conn.next_request().is_none());
        assert_eq!(kinds(&p.turn(b"")), vec![(kind::RST_STREAM, id)]);
    }
    // Too many fields for the limit: 431 each time.
    let cfg = Settings {
        max_header_fields: 1,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    let mut many = vec![0x82, 0x86, 0x84, 0x00, 1];
    many.extend_from_slice(b"a\x011\x00\x01b\x012");
    for id in [1, 3, 5] {
        p.feed(&raw_request(id, &many));
        assert!(p.conn.next_request().is_none());
        let f = p.turn(b"");
        assert_eq!(kinds(&f)[0], (kind::HEADERS, id));
        assert_eq!(p.status_of(&f[0].1.clone()), b"431");
    }
}

#[test]
fn a_connection_that_is_not_busy_lends_its_turn_buffers_to_the_next() {
    let mut a = Peer::new(Settings::default(), &[]);
    a.turn(b"");
    let req = a.get(1, "/a", true);
    a.feed(&req);
    a.turn(b"ok");
    let turn = a
        .conn
        .release_idle_buffers()
        .turn
        .expect("one request is not busy: its turn buffers go back");
    assert!(a.conn.needs_turn_buffers());
    assert_eq!(a.conn.hbuf.capacity(), 0);
    let table = turn.streams.as_ptr();
    assert!(turn.size() > 0);

    // Another connection's turn uses them in place of its own.
    let mut b = Peer::new(Settings::default(), &[]);
    b.turn(b"");
    assert!(b.conn.needs_turn_buffers());
    b.conn.lend_turn_buffers(turn);
    assert!(!b.conn.needs_turn_buffers());
    let req = b.get(1, "/b", true);
    b.feed(&req);
    assert_eq!(b.conn.streams.as_ptr(), table);
    let f = b.turn(b"answer");
    assert_eq!(kinds(&f), vec![(kind::HEADERS, 1), (kind::DATA, 1)]);
    assert_eq!(f[1].1, b"answer");
    assert!(b.conn.release_idle_buffers().turn.is_some());

    // A busy connection keeps them, and takes no one else's.
    let mut two = a.get(3, "/a", true);
    two.extend(a.get(5, "/b", true));
    a.feed(&two);
    a.turn(b"ok");
    assert!(a.conn.release_idle_buffers().turn.is_none());
    assert!(!a.conn.needs_turn_buffers());
    let before = a.conn.streams.as_ptr();
    a.conn.lend_turn_buffers(TurnBuffers::default());
    assert_eq!(a.conn.streams.as_ptr(), before);
}

/// Sends a GET for `path` on each of `ids` in one read and answers what is handed out with
/// `body`, kept to repeat when the connection wants it. Returns how many requests were handed
/// out and the frames written.
fn repeat_round(p: &mut Peer, path: &str, ids: &[u32], body: &'static [u8]) -> (usize, Frames) {
    repeat_round_with(p, path, ids, &|| Body::Bytes(Bytes::from_static(body)))
}

/// [`repeat_round`] with the body `body` makes.
fn repeat_round_with(
    p: &mut Peer,
    path: &str,
    ids: &[u32],
    body: &dyn Fn() -> Body,
) -> (usize, Frames) {
    repeat_round_answering(p, path, ids, &|| {
        let mut r = Response::new(200);
        r.body = body();
        r
    })
}

/// [`repeat_round`] with the responses `answer` makes.
fn repeat_round_answering(
    p: &mut Peer,
    path: &str,
    ids: &[u32],
    answer: &dyn Fn() -> Response,
) -> (usize, Frames) {
    let mut reqs = Vec::new();
    for &id in ids {
        reqs.extend(p.get(id, path, true));
    }
    // As the driver does: the requests of each `recv` are answered before the next.
    let mut input = BytesMut::from(&reqs[..]);
    let mut handed = 0;
    loop {
        p.conn.recv(&mut input, p.now);
        while let Some((id, _req)) = p.conn.next_request() {
            handed += 1;
            let r = answer();
            if p.conn.answer_memo_wanted(id) {
                p.conn.respond_repeatable(id, r, None);
            } else {
                p.conn.respond(id, r);
            }
        }
        if !p.conn.recv_paused() {
            break;
        }
    }
    assert!(input.is_empty());
    p.conn.fill(p.now);
    let out = p.conn.output_parts().to_vec();
    p.conn.clear_output();
    (handed, parse(&out))
}

/// The frames of each stream, in order: (HEADERS flags, block, DATA payloads).
fn by_stream(p: &mut Peer, frames: &Frames) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
    let mut v: Vec<(u32, Vec<u8>, Vec<u8>)> = Vec::new();
    for (h, payload) in frames {
        match h.kind {
            kind::HEADERS => {
                assert_eq!(p.status_of(payload), b"200");
                v.push((h.stream, payload.clone(), Vec::new()));
            }
            kind::DATA => {
                let s = v.iter_mut().find(|s| s.0 == h.stream).unwrap();
                s.2.extend_from_slice(payload);
            }
            _ => {}
        }
    }
    v
}

#[test]
fn a_repeated_request_is_answered_from_the_memo_of_its_answer() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    // The first request is not memoised (a connection not yet busy), the second is, and so
    // is its answer (its header block all indexes).
    let (handed, f) = repeat_round(&mut p, "/r", &[1], b"hello");
    assert_eq!(handed, 1);
    by_stream(&mut p, &f);
    let (handed, f) = repeat_round(&mut p, "/r", &[3], b"hello");
    assert_eq!(handed, 1);
    let first = by_stream(&mut p, &f);
    // Then the same block again: answered from the memo, nothing handed out, no stream kept.
    let (handed, f) = repeat_round(&mut p, "/r", &[5, 7, 9], b"other");
    assert_eq!(handed, 0, "answered without the handler");
    assert!(p.conn.streams.is_empty());
    let repeats = by_stream(&mut p, &f);
    assert_eq!(
        repeats.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![5, 7, 9]
    );
    for s in &repeats {
        assert_eq!((&s.1, &s.2), (&first[0].1, &first[0].2), "the same bytes");
    }
    for (h, _) in &f {
        let want = if h.kind == kind::HEADERS {
            flag::END_HEADERS
        } else {
            flag::END_STREAM
        };
        assert_eq!(h.flags, want);
    }
    // Another request replaces the memo; the first is then decoded and handed out again.
    assert_eq!(repeat_round(&mut p, "/s", &[11], b"s").0, 1);
    assert_eq!(repeat_round(&mut p, "/r", &[13], b"hello").0, 1);
    // An earlier request still waiting for its answer keeps the order: the repeat behind
    // it waits too.
    let mut reqs = p.get(15, "/t", true);
    reqs.extend(p.get(17, "/r", true));
    p.feed(&reqs);
    assert_eq!(p.conn.next_request().map(|r| r.0), Some(15));
    assert_eq!(p.conn.next_request().map(|r| r.0), Some(17));
}

#[test]
fn a_repeat_whose_body_the_window_does_not_take_is_handed_out() {
    // INITIAL_WINDOW_SIZE 3: the 5-byte body needs the usual path, which waits for credit.
    let mut p = Peer::new(Settings::default(), &[(setting::INITIAL_WINDOW_SIZE, 3)]);
    p.turn(b"");
    repeat_round(&mut p, "/r", &[1], b"hello");
    repeat_round(&mut p, "/r", &[3], b"hello");
    let (handed, f) = repeat_round(&mut p, "/r", &[5], b"hello");
    assert_eq!(handed, 1);
    let data: usize = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA && h.stream == 5)
        .map(|(_, b)| b.len())
        .sum();
    assert_eq!(data, 3, "what the window allows");
}

#[test]
fn a_file_answer_is_repeated_only_while_the_cache_vouches_for_its_file() {
    let open = cached_file(b"hello");
    let body = || file_body(&open);
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    repeat_round_with(&mut p, "/f", &[1], &body);
    repeat_round_with(&mut p, "/f", &[3], &body);
    let (handed, f) = repeat_round_with(&mut p, "/f", &[5, 7], &body);
    assert_eq!(handed, 0);
    assert!(f.iter().any(|(h, b)| h.kind == kind::DATA && b == b"hello"));
    // The cache would check the file on disk now: the handler answers.
    open.reuse_until.set(0);
    assert_eq!(repeat_round_with(&mut p, "/f", &[9, 11], &body).0, 2);
}

/// A file answer from the open-file cache, and a handle on whether the cache vouches for
/// the file without checking it (`OpenFile::reuse_until`).
fn cached_file(contents: &'static [u8]) -> Rc<crate::http::OpenFile> {
    let open = Rc::new(crate::http::OpenFile::new(
        tempfile::tempfile().unwrap(),
        contents.len() as u64,
        std::time::SystemTime::now(),
        Some(Bytes::from_static(contents)),
    ));
    open.reuse_until.set(u64::MAX);
    open
}

fn file_body(open: &Rc<crate::http::OpenFile>) -> Body {
    Body::File(crate::http::FileRange {
        file: open.clone(),
        offset: 0,
        len: open.size,
    })
}

/// How many DATA frames in `f` carry `payload`.
fn data_frames_carrying(f: &Frames, payload: &[u8]) -> usize {
    f.iter()
        .filter(|(h, b)| h.kind == kind::DATA && b == payload)
        .count()
}

#[test]
fn a_stale_answer_is_renewed_by_one_request_and_the_rest_of_the_read_repeat_it() {
    let open = cached_file(b"hello");
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    for ids in [&[1][..], &[3], &[5, 7]] {
        repeat_round_with(&mut p, "/f", ids, &|| file_body(&open));
    }
    // The cache would check the file now. The first request takes the handler, whose
    // answer (the file checked, vouched for again) is kept before the rest of the read
    // is decoded: they repeat it instead of queueing behind it for the handler.
    open.reuse_until.set(0);
    let checked = || {
        open.reuse_until.set(u64::MAX);
        file_body(&open)
    };
    let (handed, f) = repeat_round_with(&mut p, "/f", &[9, 11, 13, 15, 17], &checked);
    assert_eq!(handed, 1);
    assert_eq!(data_frames_carrying(&f, b"hello"), 5);
}

#[test]
fn a_renewed_answer_that_indexed_new_fields_is_kept_from_the_next_request() {
    // The file changed: its new ETag goes into the HPACK table with the first answer, whose
    // header block therefore cannot be sent again; the second answer's can.
    let open = cached_file(b"hello");
    let answer = |etag: &'static str| {
        let open = open.clone();
        move || {
            let mut r = Response::new(200).with_header("etag", etag);
            r.body = file_body(&open);
            r
        }
    };
    // The peer decodes every block, in order, to follow the table.
    let etags = |p: &mut Peer, f: &Frames| -> Vec<Vec<u8>> {
        let mut etags = Vec::new();
        for (h, block) in f.iter().filter(|(h, _)| h.kind == kind::HEADERS) {
            etags.push(p.etag_of(block));
            assert_eq!(h.flags & flag::END_STREAM, 0);
        }
        etags
    };
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    for ids in [&[1][..], &[3], &[5, 7]] {
        let (_, f) = repeat_round_answering(&mut p, "/f", ids, &answer("\"v1\""));
        etags(&mut p, &f);
    }
    open.reuse_until.set(0);
    let changed = answer("\"v2\"");
    let checked = || {
        open.reuse_until.set(u64::MAX);
        changed()
    };
    let (handed, f) = repeat_round_answering(&mut p, "/f", &[9, 11, 13, 15, 17], &checked);
    assert_eq!(handed, 2);
    assert_eq!(etags(&mut p, &f), vec![b"\"v2\"".to_vec(); 5]);
    assert_eq!(data_frames_carrying(&f, b"hello"), 5);
}

#[test]
fn a_busy_connection_keeps_its_memo_when_a_large_write_gives_its_buffers_back() {
    static BODY: [u8; 4096] = [b'x'; 4096];
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    for id in [1, 3] {
        let (_, f) = repeat_round(&mut p, "/r", &[id], &BODY);
        by_stream(&mut p, &f);
    }
    // Five repeats of a 4 KiB answer: a write over KEEP_OUTPUT_MAX, after which the turn
    // buffers go back for another connection's turn...
    let (handed, f) = repeat_round(&mut p, "/r", &[5, 7, 9, 11, 13], &BODY);
    assert_eq!(handed, 0);
    let data: usize = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA)
        .map(|(_, b)| b.len())
        .sum();
    assert_eq!(data, 5 * BODY.len());
    let released = p.conn.release_idle_buffers();
    assert!(
        released.turn.is_some(),
        "a large write gives the turn buffers back"
    );
    assert!(p.conn.needs_turn_buffers());
    // ... but not the memo: the next repeats are answered from it, with the same bytes.
    p.conn.lend_turn_buffers(released.turn.unwrap());
    let (handed, again) = repeat_round(&mut p, "/r", &[15, 17, 19, 21, 23], &BODY);
    assert_eq!(
        handed, 0,
        "answered from the memo, without decoding or the handler"
    );
    let mut a = by_stream(&mut p, &f);
    let mut b = by_stream(&mut p, &again);
    a.iter_mut().chain(b.iter_mut()).for_each(|s| s.0 = 0);
    assert_eq!(a, b);
    // A quiet connection drops it with the rest.
    p.conn.release_idle_buffers();
    p.now += QUIET_TRIM;
    p.conn.handle_timeout(p.now);
    assert!(p.conn.memo.parsed.is_none());
    assert_eq!(repeat_round(&mut p, "/r", &[25], &BODY).0, 1);
}

/// A peer whose connection keeps the memo of a GET for `/r` and of its answer (streams 1 and
/// 3), and the header block that repeats it.
fn memo_peer(cfg: Settings) -> (Peer, Vec<u8>) {
    memo_peer_with(cfg, b"hello")
}

/// [`memo_peer`] with `body` for the answer.
fn memo_peer_with(cfg: Settings, body: &'static [u8]) -> (Peer, Vec<u8>) {
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    repeat_round(&mut p, "/r", &[1], body);
    repeat_round(&mut p, "/r", &[3], body);
    let block = p.get(5, "/r", true)[9..].to_vec();
    (p, block)
}

/// A HEADERS frame for stream `id` with `flags` and `payload` as they are.
fn headers_with(id: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_head(&mut out, payload.len(), kind::HEADERS, flags, id);
    out.extend_from_slice(payload);
    out
}

#[test]
fn a_repeat_is_checked_as_any_headers_frame() {
    let whole = flag::END_HEADERS | flag::END_STREAM;
    // Plain, padded or with a priority: answered from the memo alike.
    let (mut p, block) = memo_peer(Settings::default());
    let mut padded = vec![2];
    padded.extend_from_slice(&block);
    padded.extend_from_slice(&[0, 0]);
    let mut prioritised = vec![0, 0, 0, 0, 15];
    prioritised.extend_from_slice(&block);
    let mut reqs = raw_request(5, &block);
    reqs.extend(headers_with(7, whole | flag::PADDED, &padded));
    reqs.extend(headers_with(9, whole | flag::PRIORITY, &prioritised));
    p.feed(&reqs);
    assert!(
        p.conn.next_request().is_none(),
        "answered without the handler"
    );
    assert_eq!(kinds(&p.turn(b"")), answers(&[5, 7, 9]));
    // The memo's block where the usual path finds a connection error: a stream id used
    // before, an even one, a HEADERS inside another stream's header block.
    let mut inside = headers_with(11, flag::END_STREAM, &block);
    inside.extend(raw_request(13, &block));
    // The same inside a run of repeats.
    let run =
        |ids: &[u32]| -> Vec<u8> { ids.iter().flat_map(|&id| raw_request(id, &block)).collect() };
    for (frames, code) in [
        (raw_request(3, &block), Reason::STREAM_CLOSED),
        (raw_request(12, &block), Reason::PROTOCOL_ERROR),
        (inside, Reason::PROTOCOL_ERROR),
        (run(&[5, 9, 7]), Reason::STREAM_CLOSED),
        (run(&[5, 7, 7]), Reason::STREAM_CLOSED),
        (run(&[5, 7, 10]), Reason::PROTOCOL_ERROR),
    ] {
        let (mut p, _) = memo_peer(Settings::default());
        p.feed(&frames);
        assert_eq!(goaway_code(&p.turn(b"")), Some(code.0));
    }
    // A stream that depends on itself is reset; one past the stream limit is refused.
    let (mut p, block) = memo_peer(Settings {
        max_streams: 2,
        ..Settings::default()
    });
    let mut itself = vec![0, 0, 0, 5, 15];
    itself.extend_from_slice(&block);
    let mut reqs = headers_with(5, whole | flag::PRIORITY, &itself);
    for id in [7, 9, 11] {
        reqs.extend(raw_request(id, &block));
    }
    p.feed(&reqs);
    let f = p.turn(b"");
    let resets: Vec<(u32, Vec<u8>)> = f
        .iter()
        .filter(|(h, _)| h.kind == kind::RST_STREAM)
        .map(|(h, b)| (h.stream, b.clone()))
        .collect();
    assert_eq!(
        resets,
        vec![
            (5, Reason::PROTOCOL_ERROR.0.to_be_bytes().to_vec()),
            (11, Reason::REFUSED_STREAM.0.to_be_bytes().to_vec())
        ]
    );
    assert_eq!(goaway_code(&f), None);
}

#[test]
fn a_run_of_repeats_is_checked_again_after_any_other_frame() {
    // A SETTINGS frame between two repeats in one read changes the encoder's table size:
    // the kept answer's header block is no longer the one to send, so the second repeat
    // takes the usual path.
    let (mut p, block) = memo_peer(Settings::default());
    let mut reqs = raw_request(5, &block);
    frame::put_settings(&mut reqs, &[(setting::HEADER_TABLE_SIZE, 256)]);
    reqs.extend(raw_request(7, &block));
    reqs.extend(raw_request(9, &block));
    p.feed(&reqs);
    // 5 answered from the memo (no stream kept), 7 and 9 opened on the usual path.
    assert_eq!(p.conn.streams.len(), 2);
    let mut want = answers(&[5]);
    want.push((kind::SETTINGS, 0));
    want.extend(answers(&[7, 9]));
    assert_eq!(kinds(&p.turn(b"hello")), want);
}

#[test]
fn a_run_of_repeats_ends_where_the_connection_window_does() {
    // 1025-byte bodies and the peer's connection window (65,535 bytes, less what the
    // memo's first answers took): the run answers as many as it takes, the rest are
    // handed out, in order, to wait for credit.
    static LONG: [u8; FRAMES_BODY_MAX + 1] = [b'x'; FRAMES_BODY_MAX + 1];
    let (mut p, block) = memo_peer_with(Settings::default(), &LONG);
    let room = (65_535 - 2 * LONG.len()) / LONG.len();
    let ids: Vec<u32> = (0..70).map(|k| 5 + 2 * k).collect();
    let reqs: Vec<u8> = ids.iter().flat_map(|&id| raw_request(id, &block)).collect();
    p.feed(&reqs);
    let mut handed = Vec::new();
    while let Some((id, _)) = p.conn.next_request() {
        handed.push(id);
    }
    assert_eq!(handed, ids[room..]);
    let f = p.turn(b"");
    let data: Vec<u32> = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA)
        .map(|(h, _)| h.stream)
        .collect();
    assert_eq!(data, ids[..room]);
}

/// The frames (kind, stream) of whole answers to `ids`, in order.
fn answers(ids: &[u32]) -> Vec<(u8, u32)> {
    ids.iter()
        .flat_map(|&id| [(kind::HEADERS, id), (kind::DATA, id)])
        .collect()
}

#[test]
fn repeats_are_answered_in_one_recv_until_the_output_is_full() {
    // 40 repeats in one read. Short answers (kept with their frames) and longer ones alike
    // hold nothing but their place in the output: all are answered in one `recv`. When the
    // output fills (`max_write`), `recv` pauses, and the rest are answered from the memo
    // once the output is written, not handed out as requests.
    static LONG: [u8; FRAMES_BODY_MAX + 1] = [b'x'; FRAMES_BODY_MAX + 1];
    let small_write = Settings {
        max_write: 8 * 1024,
        ..Settings::default()
    };
    for (cfg, body) in [
        (Settings::default(), &b"hello"[..]),
        (Settings::default(), &LONG[..]),
        (small_write, &LONG[..]),
    ] {
        let max_write = cfg.max_write;
        let (mut p, block) = memo_peer_with(cfg, body);
        let reqs: Vec<u8> = (0..40)
            .flat_map(|k| raw_request(5 + 2 * k, &block))
            .collect();
        let mut input = BytesMut::from(&reqs[..]);
        let mut out = Vec::new();
        let mut recvs = 0;
        while !input.is_empty() {
            p.conn.recv(&mut input, p.now);
            recvs += 1;
            assert!(
                p.conn.next_request().is_none(),
                "all answered from the memo"
            );
            let written = p.conn.output_parts().to_vec();
            // Each answer: HEADERS with the block, DATA with the body.
            assert!(written.len() < max_write + 2 * frame::HEADER_LEN + 64 + body.len());
            out.extend_from_slice(&written);
            p.conn.clear_output();
        }
        let ids: Vec<u32> = (0..40).map(|k| 5 + 2 * k).collect();
        assert_eq!(kinds(&parse(&out)), answers(&ids));
        if max_write == Settings::default().max_write {
            assert_eq!(recvs, 1);
        } else {
            assert!(recvs >= 40 * body.len() / max_write, "{recvs} recvs");
        }
    }
}

#[test]
fn a_run_of_repeats_goes_out_in_one_piece_with_the_bytes_of_the_usual_path() {
    // Runs of repeats are laid out in the worker's run buffer: one piece per run, not a
    // frame piece and a body piece per answer. While an unwritten output holds that buffer,
    // another connection's run takes the usual path, and writes the very same bytes.
    static BODY: [u8; 4096] = [b'y'; 4096];
    static OTHER: [u8; 3000] = [b'z'; 3000];
    let ids: Vec<u32> = (0..40).map(|k| 5 + 2 * k).collect();
    // Connection windows for all 40 answers.
    let mut window = Vec::new();
    frame::put_window_update(&mut window, 0, 1 << 20);
    let (mut a, block) = memo_peer_with(Settings::default(), &BODY);
    let (mut b, _) = memo_peer_with(Settings::default(), &BODY);
    let reqs: Vec<u8> = ids.iter().flat_map(|&id| raw_request(id, &block)).collect();
    a.feed(&window);
    a.feed(&reqs);
    b.feed(&window);
    b.feed(&reqs);
    let (a_out, b_out) = (a.conn.output_parts(), b.conn.output_parts());
    // The first repeat's frames and body, then the run.
    assert_eq!(a_out.pieces().count(), 3);
    assert_eq!(b_out.pieces().count(), 2 * ids.len());
    assert_eq!(a_out.to_vec(), b_out.to_vec());
    let f = parse(&a_out.to_vec());
    assert_eq!(kinds(&f), answers(&ids));
    for (h, payload) in &f {
        if h.kind == kind::DATA {
            assert_eq!(payload[..], BODY[..]);
        }
    }
    a.conn.clear_output();
    b.conn.clear_output();
    // Free again, the buffer is laid out anew for another answer.
    let (mut c, block) = memo_peer_with(Settings::default(), &OTHER);
    let reqs: Vec<u8> = ids.iter().flat_map(|&id| raw_request(id, &block)).collect();
    c.feed(&window);
    c.feed(&reqs);
    assert_eq!(c.conn.output_parts().pieces().count(), 3);
    let f = c.turn(b"");
    assert_eq!(kinds(&f), answers(&ids));
    for (h, payload) in &f {
        if h.kind == kind::DATA {
            assert_eq!(payload[..], OTHER[..]);
        }
    }
}
