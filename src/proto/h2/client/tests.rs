//! The client connection against hand-made backend frames.

use super::*;
use crate::proto::h2::frame::{put_head, put_settings, put_window_update};
use crate::proto::h2::hpack;

/// No regular fields.
const NONE: [(&[u8], &[u8]); 0] = [];

fn conn() -> ClientConn {
    let mut c = ClientConn::new(ClientSettings {
        max_concurrent_streams: 100,
        stream_window: 65_536,
        max_header_list_size: 65_536,
    });
    c.consume_output(c.output().len());
    c
}

/// The frames in `c`'s output (header, payload), which is then cleared.
fn sent(c: &mut ClientConn) -> Vec<(Head, Vec<u8>)> {
    let out = c.output().to_vec();
    c.consume_output(out.len());
    let mut frames = Vec::new();
    let mut rest = &out[..];
    while rest.len() >= frame::HEADER_LEN {
        let mut hb = [0u8; frame::HEADER_LEN];
        hb.copy_from_slice(&rest[..frame::HEADER_LEN]);
        let head = Head::parse(&hb);
        let end = frame::HEADER_LEN + head.len as usize;
        frames.push((head, rest[frame::HEADER_LEN..end].to_vec()));
        rest = &rest[end..];
    }
    assert!(rest.is_empty(), "a partial frame in the output");
    frames
}

fn feed(c: &mut ClientConn, bytes: Vec<u8>) {
    let mut input = BytesMut::from(&bytes[..]);
    c.receive(&mut input);
    assert!(input.is_empty());
}

fn headers(enc: &mut hpack::Encoder, id: u32, fields: &[(&str, &str)], end: bool) -> Vec<u8> {
    let mut block = Vec::new();
    enc.encode(
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut block,
    );
    let mut out = Vec::new();
    let flags = flag::END_HEADERS | if end { flag::END_STREAM } else { 0 };
    put_head(&mut out, block.len(), kind::HEADERS, flags, id);
    out.extend_from_slice(&block);
    out
}

fn data(id: u32, bytes: &[u8], end: bool) -> Vec<u8> {
    let mut out = Vec::new();
    put_head(
        &mut out,
        bytes.len(),
        kind::DATA,
        if end { flag::END_STREAM } else { 0 },
        id,
    );
    out.extend_from_slice(bytes);
    out
}

fn get(c: &mut ClientConn) -> u32 {
    let pseudo: [(&[u8], &[u8]); 4] = [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":authority", b"b"),
        (b":path", b"/x"),
    ];
    c.open(&pseudo, NONE, true).expect("room for a stream")
}

#[test]
fn starts_with_the_preface_and_no_push() {
    let c = ClientConn::new(ClientSettings {
        max_concurrent_streams: 100,
        stream_window: 65_536,
        max_header_list_size: 65_536,
    });
    assert!(c.output().starts_with(frame::PREFACE));
    let mut settings = Vec::new();
    put_settings(
        &mut settings,
        &[
            (setting::ENABLE_PUSH, 0),
            (setting::INITIAL_WINDOW_SIZE, 65_536),
            (setting::MAX_HEADER_LIST_SIZE, 65_536),
        ],
    );
    assert_eq!(&c.output()[24..24 + settings.len()], &settings[..]);
}

#[test]
fn request_head_response_body_and_trailers() {
    let mut c = conn();
    let pseudo: [(&[u8], &[u8]); 4] = [
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":authority", b"b.example"),
        (b":path", b"/upload?x=1"),
    ];
    let fields: [(&[u8], &[u8]); 1] = [(b"X-Mixed", b"v")];
    let id = c.open(&pseudo, fields, false).unwrap();
    assert_eq!(id, 1);
    let frames = sent(&mut c);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0.kind, kind::HEADERS);
    assert_eq!(frames[0].0.flags, flag::END_HEADERS);
    let mut dec = hpack::Decoder::new(4096, 65_536);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    dec.decode(&frames[0].1, &mut buf, |f| {
        got.push((f.name.clone(), f.value.clone()))
    })
    .unwrap();
    let got: Vec<(String, String)> = got
        .into_iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(&buf[n]).into_owned(),
                String::from_utf8_lossy(&buf[v]).into_owned(),
            )
        })
        .collect();
    let want = [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "b.example"),
        (":path", "/upload?x=1"),
        ("x-mixed", "v"),
    ];
    assert_eq!(
        got,
        want.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    );

    let mut body = Bytes::from_static(b"hello");
    assert!(c.send_data(id, &mut body, false));
    c.send_trailers(
        id,
        &[(Bytes::from_static(b"x-sum"), Bytes::from_static(b"1"))],
    );
    let frames = sent(&mut c);
    assert_eq!(frames[0].0.kind, kind::DATA);
    assert_eq!(frames[0].1, b"hello");
    assert_eq!(frames[1].0.kind, kind::HEADERS);
    assert_eq!(frames[1].0.flags, flag::END_HEADERS | flag::END_STREAM);
    assert!(!c.may_send(id));

    let mut enc = hpack::Encoder::default();
    feed(&mut c, headers(&mut enc, id, &[(":status", "100")], false));
    assert!(c.take_head(id).is_none(), "1xx heads are skipped");
    feed(
        &mut c,
        headers(
            &mut enc,
            id,
            &[(":status", "200"), ("content-type", "application/grpc")],
            false,
        ),
    );
    let head = c.take_head(id).unwrap().unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(&head.headers[0].0[..], b"content-type");
    assert!(!head.end_stream);
    assert!(matches!(c.take_data(id), Received::Pending));
    feed(&mut c, data(id, b"reply", false));
    feed(&mut c, headers(&mut enc, id, &[("grpc-status", "0")], true));
    assert!(matches!(c.take_data(id), Received::Data(d) if &d[..] == b"reply"));
    match c.take_data(id) {
        Received::Trailers(t) => assert_eq!(&t[0].1[..], b"0"),
        other => panic!("{other:?}"),
    }
    assert!(c.is_done(id));
    c.forget(id);
    assert_eq!(c.stream_count(), 0);
}

#[test]
fn credit_goes_back_only_as_the_reader_takes_data() {
    let mut c = conn();
    let id = get(&mut c);
    sent(&mut c);
    let mut enc = hpack::Encoder::default();
    feed(&mut c, headers(&mut enc, id, &[(":status", "200")], false));
    for _ in 0..3 {
        feed(&mut c, data(id, &[7; 16_000], false));
    }
    assert!(
        sent(&mut c).is_empty(),
        "no WINDOW_UPDATE before the reader takes data"
    );
    let mut taken = 0;
    while let Received::Data(d) = c.take_data(id) {
        taken += d.len();
    }
    assert_eq!(taken, 48_000);
    let updates: Vec<_> = sent(&mut c)
        .into_iter()
        .filter(|(h, _)| h.kind == kind::WINDOW_UPDATE && h.stream == id)
        .collect();
    assert_eq!(
        updates.len(),
        1,
        "one stream WINDOW_UPDATE past half the window"
    );
    // More than the window is a flow-control error.
    let mut c = conn();
    let id = get(&mut c);
    feed(&mut c, headers(&mut enc, id, &[(":status", "200")], false));
    for _ in 0..5 {
        feed(&mut c, data(id, &[7; 16_000], false));
    }
    assert!(c.failure().unwrap().contains("FLOW_CONTROL_ERROR"));
    // What came within the window is still delivered, then the failure.
    assert!(matches!(c.take_head(id), Some(Ok(_))));
    let mut got = 0;
    let end = loop {
        match c.take_data(id) {
            Received::Data(d) => got += d.len(),
            other => break other,
        }
    };
    assert_eq!(got, 64_000);
    assert!(matches!(end, Received::Failed(_)), "{end:?}");
}

#[test]
fn request_body_waits_for_the_backends_windows() {
    let mut c = conn();
    let pseudo: [(&[u8], &[u8]); 1] = [(b":method", b"POST")];
    let id = c.open(&pseudo, NONE, false).unwrap();
    sent(&mut c);
    let mut body = Bytes::from(vec![1u8; 100_000]);
    assert!(!c.send_data(id, &mut body, true));
    let frames = sent(&mut c);
    let total: usize = frames.iter().map(|(h, _)| h.len as usize).sum();
    assert_eq!(total, 65_535, "the default window");
    assert!(frames.iter().all(|(h, _)| h.len <= 16_384 && h.flags == 0));
    let mut w = Vec::new();
    put_window_update(&mut w, 0, 40_000);
    put_window_update(&mut w, id, 40_000);
    feed(&mut c, w);
    assert!(c.send_data(id, &mut body, true));
    let frames = sent(&mut c);
    let total: usize = frames.iter().map(|(h, _)| h.len as usize).sum();
    assert_eq!(total, 100_000 - 65_535);
    assert_eq!(frames.last().unwrap().0.flags, flag::END_STREAM);
}

#[test]
fn goaway_refuses_later_streams_and_stops_new_ones() {
    let mut c = conn();
    let a = get(&mut c);
    let b = get(&mut c);
    let mut g = Vec::new();
    frame::put_goaway(&mut g, a, Reason::NO_ERROR);
    feed(&mut c, g);
    assert!(!c.has_capacity() && c.is_closing());
    assert_eq!(get_err(&mut c), Err(OpenError::NoCapacity));
    assert!(c.take_head(a).is_none(), "stream {a} goes on");
    match c.take_head(b) {
        Some(Err(f)) => assert!(f.refused, "{f:?}"),
        other => panic!("{other:?}"),
    }
    // REFUSED_STREAM on its own is a refusal too.
    let mut c = conn();
    let id = get(&mut c);
    let mut r = Vec::new();
    frame::put_rst_stream(&mut r, id, Reason::REFUSED_STREAM);
    feed(&mut c, r);
    assert!(matches!(c.take_head(id), Some(Err(f)) if f.refused));
}

fn get_err(c: &mut ClientConn) -> Result<u32, OpenError> {
    let pseudo: [(&[u8], &[u8]); 1] = [(b":method", b"GET")];
    c.open(&pseudo, NONE, true)
}

#[test]
fn concurrency_is_the_smaller_of_ours_and_the_backends() {
    let mut c = conn();
    let mut s = Vec::new();
    put_settings(&mut s, &[(setting::MAX_CONCURRENT_STREAMS, 2)]);
    feed(&mut c, s);
    let frames = sent(&mut c);
    assert_eq!(frames[0].0.kind, kind::SETTINGS);
    assert_eq!(frames[0].0.flags, flag::ACK);
    get(&mut c);
    get(&mut c);
    assert!(!c.has_capacity());
    c.reset(1);
    assert!(c.has_capacity());
    let frames = sent(&mut c);
    assert!(frames
        .iter()
        .any(|(h, p)| h.kind == kind::RST_STREAM && h.stream == 1 && p[..] == [0, 0, 0, 8]));
}

#[test]
fn malformed_responses_reset_the_stream_only() {
    let cases: &[&[(&str, &str)]] = &[
        &[(":status", "200"), ("Upper", "x")],
        &[(":status", "20")],
        &[("x", "y")],
        &[(":status", "200"), ("connection", "close")],
        &[(":status", "200"), (":path", "/")],
    ];
    for fields in cases {
        let mut c = conn();
        let id = get(&mut c);
        let mut enc = hpack::Encoder::default();
        enc.set_huffman(false);
        // The encoder lowercases names: write "Upper" literally instead.
        let bytes = if fields.iter().any(|(n, _)| *n == "Upper") {
            let mut block = Vec::new();
            enc.encode([(&b":status"[..], &b"200"[..])], &mut block);
            block.extend_from_slice(&[0x00, 5, b'U', b'p', b'p', b'e', b'r', 1, b'x']);
            let mut out = Vec::new();
            put_head(&mut out, block.len(), kind::HEADERS, flag::END_HEADERS, id);
            out.extend_from_slice(&block);
            out
        } else {
            headers(&mut enc, id, fields, false)
        };
        sent(&mut c);
        feed(&mut c, bytes);
        assert!(c.failure().is_none(), "{fields:?}");
        assert!(matches!(c.take_head(id), Some(Err(_))), "{fields:?}");
        assert!(sent(&mut c).iter().any(|(h, _)| h.kind == kind::RST_STREAM));
    }
    // A body longer than its content-length.
    let mut c = conn();
    let id = get(&mut c);
    let mut enc = hpack::Encoder::default();
    feed(
        &mut c,
        headers(
            &mut enc,
            id,
            &[(":status", "200"), ("content-length", "3")],
            false,
        ),
    );
    feed(&mut c, data(id, b"four", true));
    assert!(c.take_head(id).unwrap().is_ok());
    let mut failed = false;
    for _ in 0..3 {
        failed |= matches!(c.take_data(id), Received::Failed(_));
    }
    assert!(failed);
}

#[test]
fn pings_are_answered_and_window_settings_apply() {
    let mut c = conn();
    let id = c.open(&[(b":method", b"POST")], NONE, false).unwrap();
    sent(&mut c);
    let mut p = Vec::new();
    frame::put_ping(&mut p, false, b"12345678");
    feed(&mut c, p);
    let frames = sent(&mut c);
    assert_eq!(frames[0].0.kind, kind::PING);
    assert_eq!(frames[0].0.flags, flag::ACK);
    assert_eq!(frames[0].1, b"12345678");
    let mut s = Vec::new();
    put_settings(&mut s, &[(setting::INITIAL_WINDOW_SIZE, 10)]);
    feed(&mut c, s);
    sent(&mut c);
    let mut body = Bytes::from_static(b"0123456789abc");
    assert!(!c.send_data(id, &mut body, true));
    assert_eq!(&body[..], b"abc", "ten bytes went");
    // PUSH_PROMISE is a connection error: push is off.
    let mut pp = Vec::new();
    put_head(&mut pp, 4, kind::PUSH_PROMISE, flag::END_HEADERS, id);
    pp.extend_from_slice(&[0, 0, 0, 2]);
    feed(&mut c, pp);
    assert!(c.failure().is_some());
    assert!(matches!(c.take_head(id), Some(Err(_))));
}

#[test]
fn request_body_waits_for_the_output_to_drain() {
    let mut c = conn();
    let id = c.open(&[(b":method", b"POST")], NONE, false).unwrap();
    let mut w = Vec::new();
    put_settings(&mut w, &[(setting::INITIAL_WINDOW_SIZE, frame::MAX_WINDOW)]);
    put_window_update(&mut w, 0, frame::MAX_WINDOW - frame::DEFAULT_WINDOW);
    feed(&mut c, w);
    sent(&mut c);
    let mut body = Bytes::from(vec![1u8; 1 << 20]);
    assert!(!c.send_data(id, &mut body, true));
    assert!(c.output().len() <= OUTPUT_HIGH_WATER + frame::HEADER_LEN * 16);
    let left = body.len();
    assert!(left >= (1 << 20) - OUTPUT_HIGH_WATER);
    sent(&mut c);
    assert!(!c.send_data(id, &mut body, true));
    assert!(body.len() < left, "more went once the output was written");
}

#[test]
fn a_settings_change_past_the_largest_window_fails_the_connection() {
    let mut c = conn();
    let id = c.open(&[(b":method", b"POST")], NONE, false).unwrap();
    sent(&mut c);
    // The stream's window grows to 2^31-1 - 10; a larger initial window would take it past.
    let mut w = Vec::new();
    put_window_update(&mut w, id, frame::MAX_WINDOW - frame::DEFAULT_WINDOW - 10);
    feed(&mut c, w);
    assert!(c.failure().is_none());
    let mut s = Vec::new();
    put_settings(
        &mut s,
        &[(setting::INITIAL_WINDOW_SIZE, frame::DEFAULT_WINDOW + 11)],
    );
    feed(&mut c, s);
    assert!(
        c.failure().is_some(),
        "RFC 9113 section 6.9.2: FLOW_CONTROL_ERROR"
    );
    let frames = sent(&mut c);
    assert!(frames.iter().any(|(h, _)| h.kind == kind::GOAWAY));
}

/// The connection ends without END_STREAM (a backend closing after its answer, without
/// GOAWAY or TLS close_notify): a body that came whole per Content-Length ends cleanly, one
/// short of it fails, one with END_STREAM is untouched.
#[test]
fn a_close_after_the_whole_content_length_ends_the_body_cleanly() {
    let mut enc = hpack::Encoder::default();
    let mut c = conn();
    let (whole, short, ended) = (get(&mut c), get(&mut c), get(&mut c));
    let with_len = [(":status", "200"), ("content-length", "5")];
    feed(&mut c, headers(&mut enc, whole, &with_len, false));
    feed(&mut c, data(whole, b"hello", false));
    feed(&mut c, headers(&mut enc, short, &with_len, false));
    feed(&mut c, data(short, b"hel", false));
    feed(
        &mut c,
        headers(&mut enc, ended, &[(":status", "200")], false),
    );
    feed(&mut c, data(ended, b"bye", true));
    c.close("read failed: peer closed connection without sending TLS close_notify");
    let body = |c: &mut ClientConn, id| {
        assert!(matches!(c.take_head(id), Some(Ok(_))));
        let mut got = Vec::new();
        loop {
            match c.take_data(id) {
                Received::Data(d) => got.extend_from_slice(&d),
                other => return (got, other),
            }
        }
    };
    let (got, end) = body(&mut c, whole);
    assert_eq!(
        (&got[..], matches!(end, Received::End)),
        (&b"hello"[..], true),
        "{end:?}"
    );
    let (got, end) = body(&mut c, short);
    assert_eq!(&got[..], b"hel");
    assert!(matches!(end, Received::Failed(_)), "{end:?}");
    let (got, end) = body(&mut c, ended);
    assert_eq!(
        (&got[..], matches!(end, Received::End)),
        (&b"bye"[..], true),
        "{end:?}"
    );
}
