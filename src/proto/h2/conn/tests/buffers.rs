//! Batches, the output, splicing, and the buffers lent between turns.

use super::*;
use crate::proto::h2::output;

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

/// Answers every handed-out request with `body` and pulls its DATA into the output, without
/// clearing it (as the driver does between batches of one turn).
pub(super) fn answer_all(conn: &mut Connection, body: &'static [u8], now: Instant) -> usize {
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
        p.conn.recv(&mut input, p.now, &mut p.runs);
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
pub(super) fn large_whole_bodies_are_spliced_small_ones_copied() {
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
pub(super) fn pieces_of(parts: output::OutputParts<'_>, body: &[u8]) -> Vec<(usize, usize)> {
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
pub(super) fn data_frames_of_a_body_in_memory_are_spliced() {
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

/// On cleartext (`sendfile_min` set), DATA frames of a file that is not in memory go out as
/// ranges of the file from that size on, to be sent from it; smaller ones (a narrow window,
/// the short last frame) are read into the output.
#[test]
fn data_frames_of_a_file_not_in_memory_are_file_ranges() {
    use crate::http::{FileRange, OpenFile};
    use std::io::Write;
    let body: Vec<u8> = (0..40_000u32).map(|i| (i % 241) as u8).collect();
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(&body).unwrap();
    let file = std::rc::Rc::new(OpenFile::new(f, 40_000, std::time::SystemTime::now(), None));
    let cfg = Settings {
        sendfile_min: 8192,
        ..Settings::default()
    };
    let mut p = Peer::new(cfg, &[(setting::INITIAL_WINDOW_SIZE, 1000)]);
    p.turn(b"");
    let req = p.get(1, "/", true);
    p.feed(&req);
    let (id, _) = p.conn.next_request().unwrap();
    let mut r = Response::new(200);
    r.body = Body::File(FileRange {
        file: file.clone(),
        offset: 0,
        len: 40_000,
    });
    p.conn.respond(id, r);
    p.conn.fill(p.now);
    assert!(!p.conn.output_parts().has_files(), "1,000 bytes are read");
    let mut got = Vec::new();
    for (h, payload) in parse(&p.conn.output_parts().to_vec()) {
        if h.kind == kind::DATA {
            got.extend_from_slice(&payload);
        }
    }
    p.conn.clear_output();

    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, id, 60_000);
    p.feed(&wu);
    p.conn.fill(p.now);
    let parts = p.conn.output_parts();
    assert!(parts.has_files());
    let ranges: Vec<(u64, usize)> = parts
        .parts()
        .filter_map(|part| match part {
            output::Part::File { offset, len, .. } => Some((offset, len)),
            output::Part::Mem(_) => None,
        })
        .collect();
    assert_eq!(
        ranges,
        vec![(1000, 16_384), (17_384, 16_384)],
        "full frames from the file, the last 6,232 bytes read"
    );
    let f = parse(&parts.to_vec());
    assert!(f.iter().all(|(h, _)| h.kind == kind::DATA));
    for (h, payload) in &f {
        got.extend_from_slice(payload);
        assert_eq!(h.flags & flag::END_STREAM != 0, got.len() == body.len());
    }
    assert_eq!(got, body);
    p.conn.clear_output();
    assert_eq!(p.conn.open_streams(), 0);
    assert_eq!(
        std::rc::Rc::strong_count(&file),
        1,
        "the output let the file go"
    );
}

/// A pushed chunk of a streamed body is spliced frame by frame too, and the bytes left
/// below `splice_min` are copied.
#[test]
pub(super) fn data_frames_of_a_streamed_chunk_are_spliced() {
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
pub(super) fn whole_answers_fill_the_output_up_to_max_write() {
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
        p.conn.recv(&mut input, p.now, &mut p.runs);
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
pub(super) fn copy_bodies() -> Settings {
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
