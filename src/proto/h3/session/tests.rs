//! The session fed stream bytes as a client would send them: every frame and stream rule,
//! fragmentation, blocking on the encoder stream, and what we encode.

use super::*;
use crate::proto::h3::qpack::decoder::tests::unhex;

const CONTROL: u64 = 2;
const ENCODER: u64 = 6;
const DECODER: u64 = 10;

fn session() -> Session {
    Session::new(Settings::default())
}

fn frame(ty: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_header(ty, payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

fn settings(pairs: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_settings(pairs, &mut out);
    out
}

/// A client control stream: type, SETTINGS, then `more`.
fn control(more: &[u8]) -> Vec<u8> {
    let mut out = vec![0x00];
    out.extend(settings(&[(setting::MAX_FIELD_SECTION_SIZE, 1000)]));
    out.extend_from_slice(more);
    out
}

fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut section = Vec::new();
    qpack::Encoder::default().encode_section(
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut section,
    );
    frame(frame::HEADERS, &section)
}

const GET: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "example.com"),
    (":path", "/index.html"),
];

fn post(len: usize) -> Vec<u8> {
    let cl = len.to_string();
    headers(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/upload"),
        ("content-length", &cl),
    ])
}

/// Feeds `bytes` (all at once) and returns the events.
fn request(s: &mut Session, id: u64, bytes: &[u8], fin: bool) -> Result<Vec<RequestEvent>, Error> {
    let mut buf = BytesMut::from(bytes);
    let mut events = Vec::new();
    s.on_request_stream(id, &mut buf, fin, &mut events)?;
    Ok(events)
}

fn conn_err(r: Result<impl std::fmt::Debug, Error>) -> ErrorCode {
    match r {
        Err(Error::Connection(code, _)) => code,
        other => panic!("expected a connection error, got {other:?}"),
    }
}

fn stream_err(r: Result<impl std::fmt::Debug, Error>) -> ErrorCode {
    match r {
        Err(Error::Stream(code, _)) => code,
        other => panic!("expected a stream error, got {other:?}"),
    }
}

/// A summary of events: heads as their path, data as bytes.
#[derive(Debug, PartialEq)]
enum Ev {
    Head(String),
    Data(Vec<u8>),
    Trailers(Vec<(String, String)>),
    End,
    Blocked,
    TooLarge,
}

fn summary(events: Vec<RequestEvent>) -> Vec<Ev> {
    let mut out: Vec<Ev> = Vec::new();
    for e in events {
        let ev = match e {
            RequestEvent::Head(h) => {
                Ev::Head(String::from_utf8(h.bytes[h.target].to_vec()).unwrap())
            }
            RequestEvent::Data(d) => {
                // Adjacent pieces are one body: merge them so splits compare equal.
                if let Some(Ev::Data(prev)) = out.last_mut() {
                    prev.extend_from_slice(&d);
                    continue;
                }
                Ev::Data(d.to_vec())
            }
            RequestEvent::Trailers(t) => Ev::Trailers(
                t.iter()
                    .map(|(n, v)| {
                        (
                            String::from_utf8(n.to_vec()).unwrap(),
                            String::from_utf8(v.to_vec()).unwrap(),
                        )
                    })
                    .collect(),
            ),
            RequestEvent::End => Ev::End,
            RequestEvent::Blocked => Ev::Blocked,
            RequestEvent::HeadTooLarge => Ev::TooLarge,
        };
        out.push(ev);
    }
    out
}

/// Feeds `wire` split at `cuts` (appending to one buffer, as the glue does), with FIN on
/// the last piece.
fn feed_pieces(s: &mut Session, id: u64, wire: &[u8], cuts: &[usize]) -> Result<Vec<Ev>, Error> {
    let mut buf = BytesMut::new();
    let mut events = Vec::new();
    let mut at = 0;
    for (i, &cut) in cuts.iter().chain([&wire.len()]).enumerate() {
        buf.extend_from_slice(&wire[at..cut]);
        at = cut;
        let fin = i == cuts.len();
        s.on_request_stream(id, &mut buf, fin, &mut events)?;
    }
    Ok(summary(events))
}

#[test]
fn a_get_request() {
    let mut s = session();
    let mut events = request(&mut s, 0, &headers(&GET), true).unwrap();
    assert!(matches!(events.pop(), Some(RequestEvent::End)));
    let Some(RequestEvent::Head(head)) = events.pop() else {
        panic!("no head");
    };
    let peer = "127.0.0.1:5000".parse().unwrap();
    let local = "127.0.0.1:443".parse().unwrap();
    let req = head.into_request(peer, local);
    assert_eq!(req.method, Method::Get);
    assert_eq!(req.version, crate::http::Version::Http3);
    assert!(req.secure);
    assert_eq!(req.target(), b"/index.html");
    assert_eq!(req.authority(), Some(&b"example.com"[..]));
    assert_eq!(s.open_request_streams(), 0);
    // A head whose FIN comes later: the stream stays open.
    assert_eq!(
        summary(request(&mut s, 4, &headers(&GET), false).unwrap()),
        [Ev::Head("/index.html".into())]
    );
    assert_eq!(s.open_request_streams(), 1);
    assert_eq!(summary(request(&mut s, 4, b"", true).unwrap()), [Ev::End]);
}

#[test]
fn body_and_trailers_at_every_split_point() {
    let body = b"hello, world";
    let mut wire = post(body.len() + 3);
    wire.extend(frame(frame::DATA, &body[..5]));
    wire.extend(frame(0x21, b"reserved frame type")); // skipped
    wire.extend(frame(frame::DATA, &body[5..]));
    wire.extend(frame(frame::DATA, b""));
    wire.extend(frame(frame::DATA, b"!!!"));
    wire.extend(headers(&[("x-checksum", "abc")]));
    wire.extend(frame(0x1f * 7 + 0x21, &[0; 300]));
    let want = vec![
        Ev::Head("/upload".into()),
        Ev::Data(b"hello, world!!!".to_vec()),
        Ev::Trailers(vec![("x-checksum".into(), "abc".into())]),
        Ev::End,
    ];
    assert_eq!(feed_pieces(&mut session(), 0, &wire, &[]).unwrap(), want);
    for cut in 0..wire.len() {
        let got = feed_pieces(&mut session(), 0, &wire, &[cut]).unwrap();
        assert_eq!(got, want, "split at {cut}");
    }
    let every: Vec<usize> = (1..wire.len()).collect();
    assert_eq!(feed_pieces(&mut session(), 0, &wire, &every).unwrap(), want);
}

#[test]
fn data_is_split_off_without_copying() {
    let mut s = session();
    let mut buf = BytesMut::from(&post(4)[..]);
    buf.extend(frame(frame::DATA, b"abcd"));
    let at = buf.as_ptr() as usize + buf.len() - 4;
    let mut events = Vec::new();
    s.on_request_stream(0, &mut buf, false, &mut events)
        .unwrap();
    let Some(RequestEvent::Data(d)) = events.pop() else {
        panic!("no data")
    };
    assert_eq!(d.as_ptr() as usize, at);
}

#[test]
fn content_length_must_match_the_data() {
    let mut wire = post(3);
    wire.extend(frame(frame::DATA, b"abcd"));
    assert_eq!(
        stream_err(feed_pieces(&mut session(), 0, &wire, &[])),
        ErrorCode::H3_MESSAGE_ERROR
    );
    let mut wire = post(5);
    wire.extend(frame(frame::DATA, b"abcd"));
    assert_eq!(
        stream_err(feed_pieces(&mut session(), 0, &wire, &[])),
        ErrorCode::H3_MESSAGE_ERROR
    );
    // Trailers do not excuse a short body.
    wire.extend(headers(&[("x-t", "1")]));
    assert_eq!(
        stream_err(feed_pieces(&mut session(), 0, &wire, &[])),
        ErrorCode::H3_MESSAGE_ERROR
    );
}

#[test]
fn frame_sequence_on_request_streams() {
    let data = frame(frame::DATA, b"x");
    let cases: Vec<(Vec<u8>, ErrorCode)> = vec![
        // DATA before HEADERS.
        (data.clone(), ErrorCode::H3_FRAME_UNEXPECTED),
        // HEADERS, trailers, HEADERS again; and DATA after the trailers.
        (
            [
                headers(&GET),
                headers(&[("a", "b")]),
                headers(&[("a", "b")]),
            ]
            .concat(),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (
            [headers(&GET), headers(&[("a", "b")]), data.clone()].concat(),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        // Control frames, PUSH_PROMISE from a client, HTTP/2 frame types.
        (
            [headers(&GET), settings(&[])].concat(),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (frame(frame::GOAWAY, &[0]), ErrorCode::H3_FRAME_UNEXPECTED),
        (
            frame(frame::MAX_PUSH_ID, &[0]),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (
            frame(frame::CANCEL_PUSH, &[0]),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (
            frame(frame::PUSH_PROMISE, &[0, 0, 0]),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (frame(0x02, &[]), ErrorCode::H3_FRAME_UNEXPECTED),
        (frame(0x06, &[0; 8]), ErrorCode::H3_FRAME_UNEXPECTED),
        (frame(0x08, &[0; 4]), ErrorCode::H3_FRAME_UNEXPECTED),
        (frame(0x09, &[]), ErrorCode::H3_FRAME_UNEXPECTED),
        // A frame cut short by FIN.
        (
            [headers(&GET), vec![0x00, 0x05, b'a']].concat(),
            ErrorCode::H3_FRAME_ERROR,
        ),
        (
            [headers(&GET), vec![0x00]].concat(),
            ErrorCode::H3_FRAME_ERROR,
        ),
        (
            [headers(&GET), vec![0x21, 0x05, 0]].concat(),
            ErrorCode::H3_FRAME_ERROR,
        ),
        (headers(&GET)[..5].to_vec(), ErrorCode::H3_FRAME_ERROR),
        // A QPACK section that does not decode.
        (
            frame(frame::HEADERS, &[0x00, 0x00, 0xff, 0x24]),
            ErrorCode::QPACK_DECOMPRESSION_FAILED,
        ),
    ];
    for (wire, code) in cases {
        assert_eq!(
            conn_err(request(&mut session(), 0, &wire, true)),
            code,
            "{wire:02x?}"
        );
    }
    // FIN before any HEADERS: an incomplete request, a stream error.
    assert_eq!(
        stream_err(request(&mut session(), 0, b"", true)),
        ErrorCode::H3_REQUEST_INCOMPLETE
    );
    assert_eq!(
        stream_err(request(&mut session(), 0, &frame(0x21, b"x"), true)),
        ErrorCode::H3_REQUEST_INCOMPLETE
    );
}

#[test]
fn malformed_heads_are_stream_errors() {
    for fields in [
        &[(":method", "GET"), (":path", "/")][..],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("connection", "close"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("te", "gzip"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("content-length", "-1"),
        ],
    ] {
        assert_eq!(
            stream_err(request(&mut session(), 0, &headers(fields), true)),
            ErrorCode::H3_MESSAGE_ERROR,
            "{fields:?}"
        );
    }
    // Malformed trailers.
    let wire = [headers(&GET), headers(&[(":path", "/")])].concat();
    assert_eq!(
        stream_err(request(&mut session(), 0, &wire, true)),
        ErrorCode::H3_MESSAGE_ERROR
    );
    // Extended CONNECT only when announced.
    let ws = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/chat"),
    ];
    assert_eq!(
        stream_err(request(&mut session(), 0, &headers(&ws), false)),
        ErrorCode::H3_MESSAGE_ERROR
    );
    let mut s = Session::new(Settings {
        enable_connect_protocol: true,
        ..Settings::default()
    });
    assert!(s.control_stream_prelude().ends_with(&[0x08, 0x01]));
    let events = request(&mut s, 0, &headers(&ws), false).unwrap();
    let Some(RequestEvent::Head(h)) = events.first() else {
        panic!("no head")
    };
    assert_eq!(&h.bytes[h.protocol.clone().unwrap()], b"websocket");
}

#[test]
fn oversized_heads() {
    let small = Settings {
        max_field_section_size: 1000,
        max_header_fields: 10,
        ..Settings::default()
    };
    // Decoded over the limit: 431, then the rest of the stream is dropped.
    let mut s = Session::new(small.clone());
    let long = "v".repeat(600);
    let mut wire = headers(&[
        GET[0],
        GET[1],
        GET[2],
        GET[3],
        ("x-a", &long),
        ("x-b", &long),
    ]);
    wire.extend(frame(frame::DATA, b"ignored"));
    assert_eq!(feed_pieces(&mut s, 0, &wire, &[3]).unwrap(), [Ev::TooLarge]);
    assert_eq!(s.open_request_streams(), 0);
    // Too many fields: the same.
    let many: Vec<(&str, &str)> = GET.iter().copied().chain([("x", "y"); 7]).collect();
    let mut s = Session::new(small.clone());
    assert_eq!(
        summary(request(&mut s, 0, &headers(&many), false).unwrap()),
        [Ev::TooLarge]
    );
    assert_eq!(summary(request(&mut s, 0, b"more", false).unwrap()), []);
    s.stream_gone(0).unwrap();
    // An encoded HEADERS frame over twice the limit is refused from its header alone.
    let mut s = Session::new(small);
    let mut huge = Vec::new();
    frame::put_header(frame::HEADERS, 2001, &mut huge);
    assert_eq!(
        stream_err(request(&mut s, 0, &huge, false)),
        ErrorCode::H3_EXCESSIVE_LOAD
    );
    assert_eq!(s.open_request_streams(), 0);
    // Trailers over the limit.
    let mut s = Session::new(Settings {
        max_field_section_size: 1000,
        ..Settings::default()
    });
    let wire = [headers(&GET), headers(&[("x-a", &long), ("x-b", &long)])].concat();
    assert_eq!(
        stream_err(request(&mut s, 0, &wire, false)),
        ErrorCode::H3_EXCESSIVE_LOAD
    );
}

#[test]
fn control_stream_rules() {
    let mut s = session();
    let wire = control(
        &[
            frame(0x21, b"grease"),
            frame(frame::MAX_PUSH_ID, &[4]),
            frame(frame::GOAWAY, &[8]),
        ]
        .concat(),
    );
    // One byte at a time.
    for b in &wire {
        let out = s
            .on_uni_stream(CONTROL, std::slice::from_ref(b), false)
            .unwrap();
        assert_eq!(out, UniOutcome::default());
    }
    assert_eq!(
        s.peer_settings().unwrap().max_field_section_size,
        Some(1000)
    );
    assert_eq!(s.peer_goaway(), Some(8));
    // GOAWAY may go down, not up.
    s.on_uni_stream(CONTROL, &frame(frame::GOAWAY, &[4]), false)
        .unwrap();
    assert_eq!(s.peer_goaway(), Some(4));
    assert_eq!(
        conn_err(s.on_uni_stream(CONTROL, &frame(frame::GOAWAY, &[8]), false)),
        ErrorCode::H3_ID_ERROR
    );

    let cases: Vec<(Vec<u8>, ErrorCode)> = vec![
        (
            [vec![0x00], frame(0x21, b"")].concat(),
            ErrorCode::H3_MISSING_SETTINGS,
        ),
        (
            [vec![0x00], frame(frame::GOAWAY, &[0])].concat(),
            ErrorCode::H3_MISSING_SETTINGS,
        ),
        (control(&settings(&[])), ErrorCode::H3_FRAME_UNEXPECTED),
        (
            control(&frame(frame::DATA, b"x")),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (control(&headers(&GET)), ErrorCode::H3_FRAME_UNEXPECTED),
        (
            control(&frame(frame::PUSH_PROMISE, &[0, 0, 0])),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (
            control(&frame(0x06, &[0; 8])),
            ErrorCode::H3_FRAME_UNEXPECTED,
        ),
        (
            control(&frame(frame::CANCEL_PUSH, &[0])),
            ErrorCode::H3_ID_ERROR,
        ),
        (
            control(
                &[
                    frame(frame::MAX_PUSH_ID, &[4]),
                    frame(frame::MAX_PUSH_ID, &[3]),
                ]
                .concat(),
            ),
            ErrorCode::H3_ID_ERROR,
        ),
        (
            control(&frame(frame::GOAWAY, &[0x40])),
            ErrorCode::H3_FRAME_ERROR,
        ),
        (
            control(&frame(frame::GOAWAY, &[0, 0])),
            ErrorCode::H3_FRAME_ERROR,
        ),
        (
            [vec![0x00], settings(&[(1, 0), (1, 0)])].concat(),
            ErrorCode::H3_SETTINGS_ERROR,
        ),
        (
            [vec![0x00], settings(&[(0x21, 0), (0x21, 1)])].concat(),
            ErrorCode::H3_SETTINGS_ERROR,
        ),
        (
            [vec![0x00], settings(&[(0x02, 0)])].concat(),
            ErrorCode::H3_SETTINGS_ERROR,
        ),
        (
            [vec![0x00], settings(&[(0x04, 65535)])].concat(),
            ErrorCode::H3_SETTINGS_ERROR,
        ),
        (
            [vec![0x00], settings(&[(0x08, 2)])].concat(),
            ErrorCode::H3_SETTINGS_ERROR,
        ),
        (
            [vec![0x00], frame(frame::SETTINGS, &[0x01])].concat(),
            ErrorCode::H3_FRAME_ERROR,
        ),
    ];
    for (wire, code) in cases {
        assert_eq!(
            conn_err(session().on_uni_stream(CONTROL, &wire, false)),
            code,
            "{wire:02x?}"
        );
    }
    // A buffered frame over the cap; an unknown one of any size is fine.
    let mut big = vec![0x00];
    frame::put_header(frame::SETTINGS, MAX_CONTROL_FRAME + 1, &mut big);
    assert_eq!(
        conn_err(session().on_uni_stream(CONTROL, &big, false)),
        ErrorCode::H3_EXCESSIVE_LOAD
    );
    let mut s = session();
    let mut unknown = control(&[]);
    frame::put_header(0x21, 1 << 30, &mut unknown);
    s.on_uni_stream(CONTROL, &unknown, false).unwrap();
    s.on_uni_stream(CONTROL, &vec![0; 100_000], false).unwrap();
    assert!(s.control.as_ref().unwrap().pending.is_empty());
}

#[test]
fn settings_are_read() {
    let mut s = session();
    let wire = [
        vec![0x00],
        settings(&[
            (1, 4096),
            (6, 8000),
            (7, 16),
            (8, 1),
            (0x33, 1),
            (0x1f * 3 + 0x21, 9),
        ]),
    ]
    .concat();
    s.on_uni_stream(CONTROL, &wire, false).unwrap();
    assert_eq!(
        s.peer_settings(),
        Some(&PeerSettings {
            max_field_section_size: Some(8000),
            qpack_max_table_capacity: 4096,
            qpack_blocked_streams: 16,
            enable_connect_protocol: true,
            h3_datagram: true,
        })
    );
    // Our own SETTINGS, read back by the same parser.
    let ours = session().control_stream_prelude();
    assert_eq!(ours[0], 0x00);
    let h = frame::parse_header(&ours[1..]).unwrap();
    assert_eq!(h.ty, frame::SETTINGS);
    let p = parse_settings(&ours[1 + h.size..]).unwrap();
    assert_eq!(p.max_field_section_size, Some(64 * 1024));
    assert_eq!(p.qpack_max_table_capacity, 4096);
    assert_eq!(p.qpack_blocked_streams, 100);
}

#[test]
fn stream_kinds() {
    let mut s = session();
    s.on_uni_stream(CONTROL, &control(&[]), false).unwrap();
    s.on_uni_stream(ENCODER, &[0x02], false).unwrap();
    // The type of the decoder stream arrives split from its first instruction.
    s.on_uni_stream(DECODER, &[0x03], false).unwrap();
    // Stream Cancellation (stream 4) is fine; split in two.
    s.on_uni_stream(DECODER, &[0x7f], false).unwrap();
    s.on_uni_stream(DECODER, &[0x00], false).unwrap();
    // A second stream of each kind.
    for (ty, id) in [(0x00, 14), (0x02, 18), (0x03, 22)] {
        assert_eq!(
            conn_err(s.on_uni_stream(id, &[ty], false)),
            ErrorCode::H3_STREAM_CREATION_ERROR
        );
    }
    // A push stream from a client.
    assert_eq!(
        conn_err(session().on_uni_stream(14, &[0x01], false)),
        ErrorCode::H3_STREAM_CREATION_ERROR
    );
    // Unknown and reserved types, even with a two-byte type split over calls: stop reading.
    assert_eq!(
        s.on_uni_stream(26, &[0x40], false).unwrap(),
        UniOutcome::default()
    );
    let out = s.on_uni_stream(26, &[0x21, 1, 2, 3], false).unwrap();
    assert_eq!(out.stop_sending, Some(ErrorCode::H3_STREAM_CREATION_ERROR));
    assert_eq!(
        s.on_uni_stream(26, &[4, 5], false).unwrap(),
        UniOutcome::default()
    );
    assert_eq!(
        s.on_uni_stream(26, &[], true).unwrap(),
        UniOutcome::default()
    );
    assert!(s.opening.is_empty());
    let out = s.on_uni_stream(30, &[0x14], false).unwrap();
    assert!(out.stop_sending.is_some());
    s.stream_gone(30).unwrap();
    assert!(s.opening.is_empty());
    // Critical streams may not end or be reset.
    for id in [CONTROL, ENCODER, DECODER] {
        let mut s2 = session();
        s2.on_uni_stream(CONTROL, &control(&[]), false).unwrap();
        s2.on_uni_stream(ENCODER, &[0x02], false).unwrap();
        s2.on_uni_stream(DECODER, &[0x03], false).unwrap();
        assert_eq!(
            conn_err(s2.on_uni_stream(id, &[], true)),
            ErrorCode::H3_CLOSED_CRITICAL_STREAM
        );
        assert_eq!(
            conn_err(s2.stream_gone(id)),
            ErrorCode::H3_CLOSED_CRITICAL_STREAM
        );
    }
    // The peer's decoder stream may not acknowledge what we never sent.
    for bad in [&[0x84][..], &[0x01]] {
        let mut s2 = session();
        s2.on_uni_stream(DECODER, &[0x03], false).unwrap();
        assert_eq!(
            conn_err(s2.on_uni_stream(DECODER, bad, false)),
            ErrorCode::QPACK_DECODER_STREAM_ERROR
        );
    }
    // Encoder stream errors close the connection.
    let mut s2 = session();
    assert_eq!(
        conn_err(s2.on_uni_stream(ENCODER, &unhex("02 3fff7f"), false)),
        ErrorCode::QPACK_ENCODER_STREAM_ERROR
    );
}

#[test]
fn blocked_heads_wait_for_the_encoder_stream() {
    let mut s = session();
    s.on_uni_stream(ENCODER, &unhex("02 3fe11f"), false)
        .unwrap(); // capacity 4096
                   // `:authority: example.com` inserted as absolute 0, referenced before it arrives.
    let mut section = unhex("0200 c0 d1 d7 c1"); // count 1 (encoded 2), then GET https /
    section[2] = 0x80; // relative 0 = absolute 0: the :authority entry
    let mut wire = frame(frame::HEADERS, &section);
    wire.extend(frame(frame::DATA, b""));
    let mut buf = BytesMut::from(&wire[..]);
    let mut events = Vec::new();
    s.on_request_stream(0, &mut buf, true, &mut events).unwrap();
    assert_eq!(summary(std::mem::take(&mut events)), [Ev::Blocked]);
    assert_eq!(buf.len(), wire.len());
    // More bytes for it, still blocked: no second Blocked event.
    s.on_request_stream(0, &mut buf, true, &mut events).unwrap();
    assert!(events.is_empty());
    // The insert arrives: the stream is named, and decodes.
    let mut ins = vec![0xc0];
    ins.push(11);
    ins.extend_from_slice(b"example.com");
    let out = s.on_uni_stream(ENCODER, &ins, false).unwrap();
    assert_eq!(out.unblocked, [0]);
    s.on_request_stream(0, &mut buf, true, &mut events).unwrap();
    let got = summary(events);
    assert_eq!(got, [Ev::Head("/".into()), Ev::End]);
    // One Section Acknowledgment for stream 0, which also covers the insert.
    assert_eq!(s.take_decoder_stream_bytes().unwrap(), &[0x80][..]);

    // A blocked stream reset: its Stream Cancellation goes out.
    let mut s = session();
    s.on_uni_stream(ENCODER, &unhex("02 3fe11f"), false)
        .unwrap();
    let blocked = frame(frame::HEADERS, &unhex("0200 80 d1 d7 c1"));
    assert_eq!(
        summary(request(&mut s, 4, &blocked, false).unwrap()),
        [Ev::Blocked]
    );
    s.stream_gone(4).unwrap();
    assert_eq!(s.take_decoder_stream_bytes().unwrap(), &[0x44][..]);
    // Blocked-stream limit: 100 by default; the 101st is a connection error.
    for i in 0..100u64 {
        s.on_request_stream(
            8 + 4 * i,
            &mut BytesMut::from(&blocked[..]),
            false,
            &mut Vec::new(),
        )
        .unwrap();
    }
    assert_eq!(
        conn_err(request(&mut s, 1000, &blocked, false)),
        ErrorCode::QPACK_DECOMPRESSION_FAILED
    );
}

#[test]
fn response_heads_and_trailers() {
    let mut enc = qpack::Encoder::default();
    let mut out = BytesMut::new();
    Session::encode_response_head(
        &mut enc,
        200,
        [
            (&b"Content-Type"[..], &b"text/plain"[..]),
            (b"connection", b"keep-alive"),
            (b"Transfer-Encoding", b"chunked"),
            (b"x-custom", b"1"),
        ],
        &mut out,
    );
    // Short: a one-byte length.
    assert_eq!(out[0], 0x01);
    assert_eq!(out[1] as usize, out.len() - 2);
    assert_eq!(&out[2..5], &[0x00, 0x00, 0xc0 | 25]);
    let mut d = qpack::Decoder::new(0, 0, 1 << 20);
    let fields = |d: &mut qpack::Decoder, section: &[u8]| {
        let mut buf = BytesMut::new();
        let mut f = Vec::new();
        assert_eq!(
            d.decode_section(0, section, &mut buf, &mut f),
            Ok(Decoded::Done)
        );
        f.iter()
            .map(|f| (buf[f.name.clone()].to_vec(), buf[f.value.clone()].to_vec()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fields(&mut d, &out[2..]),
        [
            (b":status".to_vec(), b"200".to_vec()),
            (b"content-type".to_vec(), b"text/plain".to_vec()),
            (b"x-custom".to_vec(), b"1".to_vec()),
        ]
    );
    // Long heads: two- and four-byte lengths, after what is already in `out`.
    for size in [100, 20_000] {
        let mut out = BytesMut::from(&b"prefix"[..]);
        let value = vec![b'\x01'; size];
        Session::encode_response_head(&mut enc, 404, [(&b"x-big"[..], &value[..])], &mut out);
        assert_eq!(&out[..6], b"prefix");
        let h = frame::parse_header(&out[6..]).unwrap();
        assert_eq!(h.ty, frame::HEADERS);
        assert_eq!(h.size + h.len as usize, out.len() - 6);
        let got = fields(&mut d, &out[6 + h.size..]);
        assert_eq!(got[0].1, b"404");
        assert_eq!(got[1].1, value);
    }
    let mut out = BytesMut::new();
    Session::encode_trailers(&mut enc, [(&b"grpc-status"[..], &b"0"[..])], &mut out);
    let h = frame::parse_header(&out).unwrap();
    assert_eq!(
        fields(&mut d, &out[h.size..]),
        [(b"grpc-status".to_vec(), b"0".to_vec())]
    );
    // DATA header and GOAWAY.
    let mut out = BytesMut::new();
    Session::data_frame_header(70_000, &mut out);
    assert_eq!(&out[..], &[0x00, 0x80, 0x01, 0x11, 0x70]);
    assert_eq!(&Session::goaway_frame(4)[..], &[0x07, 0x01, 0x04]);
    assert_eq!(&Session::encoder_stream_prelude()[..], &[0x02]);
    assert_eq!(&Session::decoder_stream_prelude()[..], &[0x03]);
}

#[test]
fn mutated_streams_never_panic() {
    // A valid connection's streams, mutated at random, fed in random pieces.
    let encoder =
        unhex("02 3fe11f c00b 6578616d706c652e636f6d 4a 63757374 6f6d2d6b 6579 03 616263");
    let upload = [
        post(5),
        frame(frame::DATA, b"hello"),
        headers(&[("x-t", "1")]),
    ]
    .concat();
    // :authority and custom-key from the table, then GET https /.
    let dynamic = frame(frame::HEADERS, &unhex("0300 81 d1 d7 c1 80"));
    // Unmutated, both requests come through whole.
    let mut s = session();
    s.on_uni_stream(ENCODER, &encoder, false).unwrap();
    let events = request(&mut s, 4, &dynamic, true).unwrap();
    assert_eq!(summary(events), [Ev::Head("/".into()), Ev::End]);
    let events = request(&mut s, 0, &upload, true).unwrap();
    assert_eq!(summary(events).len(), 4);
    let control = control(&frame(frame::GOAWAY, &[8]));
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mutate = |seed: &[u8], next: &mut dyn FnMut() -> u64| {
        let mut input = seed.to_vec();
        for _ in 0..(next() % 4) {
            let pos = (next() as usize) % input.len();
            match next() % 3 {
                0 => input[pos] = next() as u8,
                1 => input.insert(pos, next() as u8),
                _ => {
                    input.remove(pos);
                }
            }
        }
        input
    };
    for _ in 0..3000 {
        let mut s = session();
        let streams = [
            (CONTROL, mutate(&control, &mut next)),
            (ENCODER, mutate(&encoder, &mut next)),
            (0, mutate(&upload, &mut next)),
            (4, mutate(&dynamic, &mut next)),
        ];
        let mut events = Vec::new();
        'conn: for (id, wire) in streams {
            let mut buf = BytesMut::new();
            let mut at = 0;
            while at < wire.len() {
                let n = 1 + (next() as usize) % 16;
                let piece = &wire[at..(at + n).min(wire.len())];
                at += piece.len();
                let fin = at == wire.len();
                let r = if id % 4 == 0 {
                    buf.extend_from_slice(piece);
                    s.on_request_stream(id, &mut buf, fin, &mut events)
                } else {
                    s.on_uni_stream(id, piece, false).map(|_| ())
                };
                if r.is_err() {
                    break 'conn;
                }
            }
        }
        let mut total = 0;
        for e in events {
            if let RequestEvent::Data(d) = e {
                total += d.len();
            }
        }
        assert!(total <= upload.len());
        let _ = s.take_decoder_stream_bytes();
    }
}
