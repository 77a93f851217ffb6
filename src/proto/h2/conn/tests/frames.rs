//! The connection basics: handshake, flow control, scheduling, errors, shutdown, budgets
//! and timers.

use super::*;
use crate::http::Version;

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
        runs: RunBuffer::default(),
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

#[test]
fn resets_and_goaways_are_counted_for_the_driver() {
    let cfg = Settings {
        max_resets_per_second: 10,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    assert!(p.conn.take_stats().is_none(), "nothing counted yet");
    let mut b = Vec::new();
    for i in 0..11 {
        b.extend(p.get(1 + 2 * i, "/", true));
        frame::put_rst_stream(&mut b, 1 + 2 * i, Reason::CANCEL);
    }
    p.feed(&b);
    let stats = p.conn.take_stats().expect("counts");
    assert_eq!(stats.resets_received[Reason::CANCEL.0 as usize], 11);
    assert_eq!(stats.resets_sent.iter().sum::<u32>(), 0);
    assert_eq!(
        stats.goaways,
        [GoAway {
            sent: true,
            code: Reason::ENHANCE_YOUR_CALM.0,
            cause: "too many stream resets",
        }]
    );
    assert!(p.conn.take_stats().is_none(), "taken");
}
