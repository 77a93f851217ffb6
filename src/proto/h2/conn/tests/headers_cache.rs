//! The response headers cache and HPACK state across requests.

use super::*;
use crate::http::response::Headers;
use crate::proto::h2::hpack::Indexing;

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
    // a until its request repeats (the third, kept by the request memo, indexes the ETag;
    // the fourth is all indexes and cached, the fifth repeats it), then b: the same length
    // and names, another list.
    let mut etags = Vec::new();
    let sent = [
        (1, &a),
        (3, &a),
        (5, &a),
        (7, &a),
        (9, &a),
        (11, &b),
        (13, &a),
    ];
    for (id, fields) in sent {
        let req = p.get(id, "/", true);
        p.feed(&req);
        let (id, _) = p.conn.next_request().unwrap();
        let mut resp = Response::new(200);
        resp.headers = Headers::shared(fields.clone());
        resp.body = Body::Bytes(Bytes::from_static(b"hello"));
        p.conn.respond(id, resp);
        if id == 9 {
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
    let want: Vec<&[u8]> = sent.iter().map(|(_, f)| &f[1].1[..]).collect();
    assert_eq!(etags, want);
}

#[test]
fn a_quiet_idle_connection_drops_its_response_headers_cache() {
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    // The same response three times: the content-length is indexed once it repeats, and the
    // third block is all indexes and gets cached.
    for id in [1, 3, 5] {
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
pub(super) type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Sends a GET with an `x-token` header (every field indexed by the client's encoder when
/// `index`), answers it with an `etag`, and returns the request's header block, the request
/// as received and the response's decoded fields.
pub(super) fn indexed_exchange(p: &mut Peer, id: u32, index: bool) -> (Vec<u8>, Request, Fields) {
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
fn varied_answers_reuse_the_fields_they_share_and_stay_in_sync() {
    use std::rc::Rc;
    let mut p = Peer::new(Settings::default(), &[]);
    p.turn(b"");
    let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
    let list = |ct: &str, lm: &str, etag: &str| {
        Rc::new(vec![
            (Bytes::from_static(b"content-type"), b(ct)),
            (Bytes::from_static(b"last-modified"), b(lm)),
            (Bytes::from_static(b"etag"), b(etag)),
            (Bytes::from_static(b"accept-ranges"), b("bytes")),
        ])
    };
    let lm = "Sat, 28 Nov 2026 08:13:19 GMT";
    let mut id = 1;
    let mut reused = 0;
    for n in 0..40u32 {
        // Now and then a new content type (inserted: the fields after it are encoded), a
        // new second, a table size the peer lowers, a list of another length.
        let ct = if n % 7 == 6 { "text/html" } else { "image/png" };
        if n == 20 {
            p.conn.set_now(b"Sun, 29 Nov 2026 08:13:19 GMT", 0);
        }
        if n == 30 {
            let mut s = Vec::new();
            frame::put_settings(&mut s, &[(setting::HEADER_TABLE_SIZE, 256)]);
            p.feed(&s);
        }
        let etag = format!("\"{n:x}-1000\"");
        let mut fields = list(ct, lm, &etag);
        if n % 11 == 10 {
            Rc::make_mut(&mut fields).push((b("x-extra"), b("1")));
        }
        let req = p.get(id, &format!("/f{n}"), true);
        p.feed(&req);
        let (got, _) = p.conn.next_request().unwrap();
        let was_valid = p.conn.headers_cache.fields_valid;
        let mut resp = Response::new(200);
        resp.headers = Headers::shared(fields.clone());
        resp.body = Body::Bytes(Bytes::from_static(b"hello"));
        p.conn.respond(got, resp);
        if n == 30 {
            p.dec.set_max_table_size(256);
        }
        reused += usize::from(was_valid);
        p.conn.fill(p.now);
        let out = p.conn.output_parts().to_vec();
        p.conn.clear_output();
        let f = parse(&out);
        let (_, block) = f.iter().find(|(h, _)| h.kind == kind::HEADERS).unwrap();
        let decoded = p.fields_of(block);
        let want: Vec<&[u8]> = fields.iter().map(|(_, v)| &v[..]).collect();
        let names: Vec<&[u8]> = decoded.iter().map(|(n, _)| &n[..]).collect();
        let values: Vec<&[u8]> = decoded
            .iter()
            .filter(|(n, _)| {
                !matches!(&n[..], b":status" | b"server" | b"date" | b"content-length")
            })
            .map(|(_, v)| &v[..])
            .collect();
        assert_eq!(values, want, "answer {n}: {names:?}");
        assert!(decoded
            .iter()
            .any(|(n, v)| n == b"content-length" && v == b"5"));
        id += 2;
    }
    assert!(reused > 20, "most answers reuse the block before: {reused}");
}
