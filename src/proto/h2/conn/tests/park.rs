//! Parking a quiet connection and waking it.

use super::*;

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
