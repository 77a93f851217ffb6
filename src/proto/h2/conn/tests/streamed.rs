//! Streamed request and response bodies, extended CONNECT.

use super::*;
use crate::http::body::{Frame as BodyFrame, Next, RequestBody, StreamBody};
use std::task::{Context, Poll, Waker};

/// A response body the tests push by hand (`push_body`); the connection never polls it.
pub(super) struct Unpolled;

impl crate::http::body::BodyStream for Unpolled {
    fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
        Poll::Pending
    }
}

pub(super) fn streamed(len: Option<u64>) -> Response {
    let mut r = Response::new(200);
    r.body = Body::Stream(StreamBody {
        len,
        stream: Box::new(Unpolled),
    });
    r
}

pub(super) fn poll_body(b: &mut RequestBody) -> Poll<Next> {
    b.poll_frame(&mut Context::from_waker(Waker::noop()))
}

pub(super) fn data(id: u32, len: usize, end_stream: bool) -> Vec<u8> {
    let mut b = Vec::new();
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    frame::put_head(&mut b, len, kind::DATA, flags, id);
    b.extend(std::iter::repeat_n(b'x', len));
    b
}

/// Sum of WINDOW_UPDATE increments for `stream` in `frames`.
pub(super) fn credit(frames: &Frames, stream: u32) -> u32 {
    frames
        .iter()
        .filter(|(h, _)| h.kind == kind::WINDOW_UPDATE && h.stream == stream)
        .map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
        .sum()
}

impl Peer {
    /// A request with a body to follow (no END_STREAM).
    pub(super) fn post(&mut self, id: u32, path: &str, content_length: Option<u64>) -> Vec<u8> {
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
    pub(super) fn trailers(&mut self, id: u32, fields: &[(&[u8], &[u8])]) -> Vec<u8> {
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
    pub(super) fn feed_streaming(&mut self, b: &[u8]) {
        let mut input = BytesMut::from(b);
        self.conn
            .recv_with(&mut input, self.now, &mut self.runs, &|r| {
                r.path().starts_with(b"/upload")
            });
        assert!(input.is_empty() || self.conn.closed().is_some());
    }

    /// Pulls the output without answering anything.
    pub(super) fn output(&mut self) -> Frames {
        self.conn.fill(self.now);
        let out = self.conn.output_parts().to_vec();
        self.conn.clear_output();
        parse(&out)
    }

    pub(super) fn fields_of(&mut self, block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
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

pub(super) fn small_windows() -> Settings {
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
pub(super) fn headers_frame(
    p: &mut Peer,
    id: u32,
    fields: &[(&[u8], &[u8])],
    end_stream: bool,
) -> Vec<u8> {
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
    p.conn.recv_with(&mut input, p.now, &mut p.runs, &|_| true);
    let (id, req) = p.conn.next_request().expect("the tunnel's request");
    let mut body = req.take_body().expect("a pipe");
    p.conn.respond(id, streamed(None));
    p.turn(b"");
    let mut got = 0;
    for _ in 0..5 {
        let mut input = BytesMut::from(&data(1, 900, false)[..]);
        p.conn.recv_with(&mut input, p.now, &mut p.runs, &|_| true);
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
