//! Repeated requests answered from the memo.

use super::*;
use crate::proto::h2::conn::repeat::FRAMES_BODY_MAX;
use std::rc::Rc;

/// A HEADERS frame with END_STREAM carrying `block` as is.
pub(super) fn raw_request(id: u32, block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let flags = flag::END_HEADERS | flag::END_STREAM;
    frame::put_head(&mut out, block.len(), kind::HEADERS, flags, id);
    out.extend_from_slice(block);
    out
}

/// What a handler sees of a request: method, target, authority, header fields.
pub(super) type Seen = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>);

pub(super) fn seen(r: &Request) -> Seen {
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
pub(super) fn repeated_header_block_decodes_as_the_table_says() {
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
pub(super) fn repeated_malformed_block_is_refused_each_time() {
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

/// Sends a GET for `path` on each of `ids` in one read and answers what is handed out with
/// `body`, kept to repeat when the connection wants it. Returns how many requests were handed
/// out and the frames written.
pub(super) fn repeat_round(
    p: &mut Peer,
    path: &str,
    ids: &[u32],
    body: &'static [u8],
) -> (usize, Frames) {
    repeat_round_with(p, path, ids, &|| Body::Bytes(Bytes::from_static(body)))
}

/// [`repeat_round`] with the body `body` makes.
pub(super) fn repeat_round_with(
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
pub(super) fn repeat_round_answering(
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
        p.conn.recv(&mut input, p.now, &mut p.runs);
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
pub(super) fn by_stream(p: &mut Peer, frames: &Frames) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
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
    // The first request is not memoised (a connection not yet busy, its block indexes new
    // fields), the second is seen once, the third is kept, and so is its answer (its header
    // block all indexes).
    for id in [1, 3] {
        let (handed, f) = repeat_round(&mut p, "/r", &[id], b"hello");
        assert_eq!(handed, 1);
        by_stream(&mut p, &f);
    }
    let (handed, f) = repeat_round(&mut p, "/r", &[5], b"hello");
    assert_eq!(handed, 1);
    let first = by_stream(&mut p, &f);
    // Then the same block again: answered from the memo, nothing handed out, no stream kept.
    let (handed, f) = repeat_round(&mut p, "/r", &[7, 9, 11], b"other");
    assert_eq!(handed, 0, "answered without the handler");
    assert!(p.conn.streams.is_empty());
    let repeats = by_stream(&mut p, &f);
    assert_eq!(
        repeats.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![7, 9, 11]
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
    // Another request, twice, replaces the memo; the first is then decoded and handed out
    // again.
    assert_eq!(repeat_round(&mut p, "/s", &[13], b"s").0, 1);
    assert_eq!(repeat_round(&mut p, "/s", &[15], b"s").0, 1);
    assert_eq!(repeat_round(&mut p, "/r", &[17], b"hello").0, 1);
    // An earlier request still waiting for its answer keeps the order: the repeat behind
    // it waits too.
    let mut reqs = p.get(19, "/t", true);
    reqs.extend(p.get(21, "/r", true));
    p.feed(&reqs);
    assert_eq!(p.conn.next_request().map(|r| r.0), Some(19));
    assert_eq!(p.conn.next_request().map(|r| r.0), Some(21));
}

#[test]
fn a_repeat_whose_body_the_window_does_not_take_is_handed_out() {
    // INITIAL_WINDOW_SIZE 3: the 5-byte body needs the usual path, which waits for credit.
    let mut p = Peer::new(Settings::default(), &[(setting::INITIAL_WINDOW_SIZE, 3)]);
    p.turn(b"");
    for id in [1, 3, 5] {
        repeat_round(&mut p, "/r", &[id], b"hello");
    }
    let (handed, f) = repeat_round(&mut p, "/r", &[7], b"hello");
    assert_eq!(handed, 1);
    let data: usize = f
        .iter()
        .filter(|(h, _)| h.kind == kind::DATA && h.stream == 7)
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
    for id in [1, 3, 5] {
        repeat_round_with(&mut p, "/f", &[id], &body);
    }
    let (handed, f) = repeat_round_with(&mut p, "/f", &[7, 9], &body);
    assert_eq!(handed, 0);
    assert!(f.iter().any(|(h, b)| h.kind == kind::DATA && b == b"hello"));
    // The cache would check the file on disk now: the handler answers.
    open.reuse_until.set(0);
    assert_eq!(repeat_round_with(&mut p, "/f", &[11, 13], &body).0, 2);
}

/// A file answer from the open-file cache, and a handle on whether the cache vouches for
/// the file without checking it (`OpenFile::reuse_until`).
pub(super) fn cached_file(contents: &'static [u8]) -> Rc<crate::http::OpenFile> {
    let open = Rc::new(crate::http::OpenFile::new(
        tempfile::tempfile().unwrap(),
        contents.len() as u64,
        std::time::SystemTime::now(),
        Some(Bytes::from_static(contents)),
    ));
    open.reuse_until.set(u64::MAX);
    open
}

pub(super) fn file_body(open: &Rc<crate::http::OpenFile>) -> Body {
    Body::File(crate::http::FileRange {
        file: open.clone(),
        offset: 0,
        len: open.size,
    })
}

/// How many DATA frames in `f` carry `payload`.
pub(super) fn data_frames_carrying(f: &Frames, payload: &[u8]) -> usize {
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
    for id in [1, 3, 5] {
        let (_, f) = repeat_round(&mut p, "/r", &[id], &BODY);
        by_stream(&mut p, &f);
    }
    // Five repeats of a 4 KiB answer: a write over KEEP_OUTPUT_MAX, after which the turn
    // buffers go back for another connection's turn...
    let (handed, f) = repeat_round(&mut p, "/r", &[7, 9, 11, 13, 15], &BODY);
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
    let (handed, again) = repeat_round(&mut p, "/r", &[17, 19, 21, 23, 25], &BODY);
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
    assert_eq!(repeat_round(&mut p, "/r", &[27], &BODY).0, 1);
}

/// A peer whose connection keeps the memo of a GET for `/r` and of its answer (streams 1, 3
/// and 5: kept the second time its block comes), and the header block that repeats it.
pub(super) fn memo_peer(cfg: Settings) -> (Peer, Vec<u8>) {
    memo_peer_with(cfg, b"hello")
}

/// [`memo_peer`] with `body` for the answer.
pub(super) fn memo_peer_with(cfg: Settings, body: &'static [u8]) -> (Peer, Vec<u8>) {
    let mut p = Peer::new(cfg, &[]);
    p.turn(b"");
    for id in [1, 3, 5] {
        repeat_round(&mut p, "/r", &[id], body);
    }
    let block = p.get(7, "/r", true)[9..].to_vec();
    (p, block)
}

/// A HEADERS frame for stream `id` with `flags` and `payload` as they are.
pub(super) fn headers_with(id: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
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
    let mut reqs = raw_request(7, &block);
    reqs.extend(headers_with(9, whole | flag::PADDED, &padded));
    reqs.extend(headers_with(11, whole | flag::PRIORITY, &prioritised));
    p.feed(&reqs);
    assert!(
        p.conn.next_request().is_none(),
        "answered without the handler"
    );
    assert_eq!(kinds(&p.turn(b"")), answers(&[7, 9, 11]));
    // The memo's block where the usual path finds a connection error: a stream id used
    // before, an even one, a HEADERS inside another stream's header block.
    let mut inside = headers_with(13, flag::END_STREAM, &block);
    inside.extend(raw_request(15, &block));
    // The same inside a run of repeats.
    let run =
        |ids: &[u32]| -> Vec<u8> { ids.iter().flat_map(|&id| raw_request(id, &block)).collect() };
    for (frames, code) in [
        (raw_request(3, &block), Reason::STREAM_CLOSED),
        (raw_request(12, &block), Reason::PROTOCOL_ERROR),
        (inside, Reason::PROTOCOL_ERROR),
        (run(&[7, 11, 9]), Reason::STREAM_CLOSED),
        (run(&[7, 9, 9]), Reason::STREAM_CLOSED),
        (run(&[7, 9, 10]), Reason::PROTOCOL_ERROR),
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
    let mut itself = vec![0, 0, 0, 7, 15];
    itself.extend_from_slice(&block);
    let mut reqs = headers_with(7, whole | flag::PRIORITY, &itself);
    for id in [9, 11, 13] {
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
            (7, Reason::PROTOCOL_ERROR.0.to_be_bytes().to_vec()),
            (13, Reason::REFUSED_STREAM.0.to_be_bytes().to_vec())
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
    let mut reqs = raw_request(7, &block);
    frame::put_settings(&mut reqs, &[(setting::HEADER_TABLE_SIZE, 256)]);
    reqs.extend(raw_request(9, &block));
    reqs.extend(raw_request(11, &block));
    p.feed(&reqs);
    // 7 answered from the memo (no stream kept), 9 and 11 opened on the usual path.
    assert_eq!(p.conn.streams.len(), 2);
    let mut want = answers(&[7]);
    want.push((kind::SETTINGS, 0));
    want.extend(answers(&[9, 11]));
    assert_eq!(kinds(&p.turn(b"hello")), want);
}

#[test]
fn a_run_of_repeats_ends_where_the_connection_window_does() {
    // 1025-byte bodies and the peer's connection window (65,535 bytes, less what the
    // memo's first answers took): the run answers as many as it takes, the rest are
    // handed out, in order, to wait for credit.
    static LONG: [u8; FRAMES_BODY_MAX + 1] = [b'x'; FRAMES_BODY_MAX + 1];
    let (mut p, block) = memo_peer_with(Settings::default(), &LONG);
    let room = (65_535 - 3 * LONG.len()) / LONG.len();
    let ids: Vec<u32> = (0..70).map(|k| 7 + 2 * k).collect();
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
pub(super) fn answers(ids: &[u32]) -> Vec<(u8, u32)> {
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
            .flat_map(|k| raw_request(7 + 2 * k, &block))
            .collect();
        let mut input = BytesMut::from(&reqs[..]);
        let mut out = Vec::new();
        let mut recvs = 0;
        while !input.is_empty() {
            p.conn.recv(&mut input, p.now, &mut p.runs);
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
        let ids: Vec<u32> = (0..40).map(|k| 7 + 2 * k).collect();
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
    let ids: Vec<u32> = (0..40).map(|k| 7 + 2 * k).collect();
    // Connection windows for all 40 answers.
    let mut window = Vec::new();
    frame::put_window_update(&mut window, 0, 1 << 20);
    let (mut a, block) = memo_peer_with(Settings::default(), &BODY);
    let (mut b, _) = memo_peer_with(Settings::default(), &BODY);
    let reqs: Vec<u8> = ids.iter().flat_map(|&id| raw_request(id, &block)).collect();
    a.feed(&window);
    a.feed(&reqs);
    // One worker: its run buffer is lent to each connection in turn.
    b.runs = std::mem::take(&mut a.runs);
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
    c.runs = std::mem::take(&mut b.runs);
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
