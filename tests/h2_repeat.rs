//! HTTP/2 answers given again from a connection's memo (`RequestMemo`, `AnswerMemo` in
//! src/proto/h2/conn.rs): a client that sends the same header block again gets the same
//! answer as the handler gave, and never a stale one: not after the file changed, not after a
//! reload, not for HEAD instead of GET or a request that differs in one header, not without
//! its log line, and not past the flow-control windows.

mod common;

use common::h2raw::Raw;
use common::repeat::{start, CONF};
use common::*;
use spate::proto::h2::frame::{self, flag, kind, setting};
use spate::proto::h2::hpack::Decoder;

/// One request: method, path and extra fields.
#[derive(Clone)]
struct Ask {
    method: &'static str,
    path: &'static str,
    extra: Vec<(&'static str, String)>,
}

fn get(path: &'static str) -> Ask {
    Ask {
        method: "GET",
        path,
        extra: Vec::new(),
    }
}

/// One stream's answer as received.
#[derive(Debug, Clone, PartialEq)]
struct Got {
    /// The HEADERS payload as sent (its HPACK bytes).
    block: Vec<u8>,
    fields: Vec<(String, String)>,
    /// END_STREAM was on the HEADERS frame.
    ended_on_headers: bool,
    body: Vec<u8>,
}

impl Got {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A client that sends rounds of requests (each round in one write, as a multiplexing client
/// does) and reads their answers, returning flow-control credit for every DATA frame.
struct Client {
    raw: Raw,
    dec: Decoder,
    next_id: u32,
    /// Connection credit used and not yet returned (returned in large steps: many small
    /// WINDOW_UPDATEs are a flood the server stops).
    unreturned: u32,
}

impl Client {
    fn connect(s: &Spate, settings: &[(u16, u32)]) -> Client {
        Client {
            raw: Raw::connect(s, settings),
            dec: Decoder::new(4096, 1 << 20),
            next_id: 1,
            unreturned: 0,
        }
    }

    fn round(&mut self, asks: &[Ask]) -> Vec<Got> {
        let mut out = Vec::new();
        let mut ids = Vec::new();
        for a in asks {
            let id = self.next_id;
            self.next_id += 2;
            let mut fields: Vec<(&[u8], &[u8])> = vec![
                (b":method", a.method.as_bytes()),
                (b":scheme", b"http"),
                (b":authority", b"localhost"),
                (b":path", a.path.as_bytes()),
            ];
            fields.extend(a.extra.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
            let mut block = Vec::new();
            self.raw.enc.encode(fields, &mut block);
            let flags = flag::END_HEADERS | flag::END_STREAM;
            frame::put_head(&mut out, block.len(), kind::HEADERS, flags, id);
            out.extend_from_slice(&block);
            ids.push(id);
        }
        assert!(self.raw.send(&out));
        let mut got: Vec<Option<Got>> = vec![None; ids.len()];
        let mut ended = 0;
        while ended < ids.len() {
            let (h, payload) = self.raw.frame().expect("a frame");
            let mut reply = Vec::new();
            match h.kind {
                kind::SETTINGS if h.flags & flag::ACK == 0 => {
                    frame::put_head(&mut reply, 0, kind::SETTINGS, flag::ACK, 0);
                }
                kind::HEADERS => {
                    assert!(h.flags & flag::END_HEADERS != 0, "one HEADERS frame");
                    let k = ids
                        .iter()
                        .position(|&id| id == h.stream)
                        .expect("our stream");
                    let mut buf = bytes::BytesMut::new();
                    let mut fields = Vec::new();
                    self.dec
                        .decode(&payload, &mut buf, |f| fields.push(f))
                        .expect("HPACK");
                    let text =
                        |r: std::ops::Range<usize>| String::from_utf8_lossy(&buf[r]).into_owned();
                    let fields = fields
                        .into_iter()
                        .map(|f| (text(f.name), text(f.value)))
                        .collect();
                    got[k] = Some(Got {
                        block: payload,
                        fields,
                        ended_on_headers: h.flags & flag::END_STREAM != 0,
                        body: Vec::new(),
                    });
                }
                kind::DATA => {
                    let k = ids
                        .iter()
                        .position(|&id| id == h.stream)
                        .expect("our stream");
                    got[k]
                        .as_mut()
                        .expect("HEADERS first")
                        .body
                        .extend(&payload);
                    self.unreturned += payload.len() as u32;
                    if self.unreturned >= 16 * 1024 {
                        frame::put_window_update(&mut reply, 0, self.unreturned);
                        self.unreturned = 0;
                    }
                    if h.flags & flag::END_STREAM == 0 && !payload.is_empty() {
                        // Enough for the rest of any answer here, at once.
                        frame::put_window_update(&mut reply, h.stream, 1 << 20);
                    }
                }
                // A drain (reload) sends GOAWAY(NO_ERROR) and still answers.
                kind::GOAWAY if payload[4..8] == [0; 4] => {}
                kind::RST_STREAM | kind::GOAWAY => panic!("{h:?} {payload:?}"),
                _ => {}
            }
            if matches!(h.kind, kind::HEADERS | kind::DATA) && h.flags & flag::END_STREAM != 0 {
                ended += 1;
            }
            if !reply.is_empty() {
                assert!(self.raw.send(&reply));
            }
        }
        got.into_iter().map(|g| g.expect("answered")).collect()
    }

    /// Rounds of `ask` until the connection's memo holds it and its answer: two alone (the
    /// memo keeps the request the second time in a row it comes, from when its block keeps
    /// the HPACK table, and the answers from then on index the file's ETag and
    /// Last-Modified), then a few more, twice (by then the response header block is all
    /// indexes and memoised). Returns the last answer.
    fn warm(&mut self, ask: &Ask) -> Got {
        self.round(&[ask.clone(), ask.clone()]);
        self.round(&vec![ask.clone(); 3]);
        self.round(&vec![ask.clone(); 3]).pop().expect("answers")
    }
}

/// Answers to `n` repeats of `ask` in one round, each like `want`: the same fields, body and
/// ending, and within the same Date second the same header block bytes.
fn assert_repeats_like(c: &mut Client, ask: &Ask, n: usize, want: &Got) {
    let dateless = |g: &Got| {
        let mut f = g.fields.clone();
        f.retain(|(n, _)| n != "date");
        f
    };
    for got in c.round(&vec![ask.clone(); n]) {
        assert_eq!(dateless(&got), dateless(want), "{}", ask.path);
        assert_eq!(got.body, want.body, "{}", ask.path);
        assert_eq!(got.ended_on_headers, want.ended_on_headers);
        if got.field("date") == want.field("date") {
            assert_eq!(got.block, want.block, "the same bytes ({})", ask.path);
        }
    }
}

#[test]
fn repeated_requests_get_the_answer_the_handler_gave() {
    let s = start(CONF);
    for path in ["/6b.txt", "/4k.bin", "/answer", "/go"] {
        let mut c = Client::connect(&s, &[]);
        let ask = get(path);
        let first = c
            .round(std::slice::from_ref(&ask))
            .pop()
            .expect("an answer");
        let want = c.warm(&ask);
        assert_eq!(want.body, first.body);
        assert_eq!(want.field(":status"), first.field(":status"));
        assert_repeats_like(&mut c, &ask, 20, &want);
    }
    let mut c = Client::connect(&s, &[]);
    let want = c.warm(&get("/6b.txt"));
    assert_eq!(want.body, b"hello\n");
    assert_eq!(want.field("content-length"), Some("6"));
    let want = c.warm(&get("/go"));
    assert_eq!(want.field(":status"), Some("302"));
    assert_eq!(want.field("location"), Some("https://example.com/there"));
}

#[test]
fn head_and_get_of_one_path_are_not_confused() {
    let s = start(CONF);
    let mut c = Client::connect(&s, &[]);
    let head = Ask {
        method: "HEAD",
        ..get("/6b.txt")
    };
    for _ in 0..3 {
        let got = c.warm(&get("/6b.txt"));
        assert_eq!(
            (got.body.as_slice(), got.ended_on_headers),
            (&b"hello\n"[..], false)
        );
        assert_repeats_like(&mut c, &get("/6b.txt"), 5, &got);
        let got = c.warm(&head);
        assert!(got.body.is_empty() && got.ended_on_headers);
        assert_eq!(got.field("content-length"), Some("6"));
        assert_repeats_like(&mut c, &head, 5, &got);
    }
}

#[test]
fn a_request_that_differs_in_one_header_is_answered_for_itself() {
    let s = start(CONF);
    let mut c = Client::connect(&s, &[]);
    let plain = get("/6b.txt");
    let want = c.warm(&plain);
    let etag = want.field("etag").expect("an etag").to_string();
    let with = |name: &'static str, value: &str| Ask {
        extra: vec![(name, value.to_string())],
        ..plain.clone()
    };
    let conditional = with("if-none-match", &etag);
    let ranged = with("range", "bytes=1-3");
    for _ in 0..2 {
        let got = c.round(&[plain.clone(), conditional.clone(), plain.clone()]);
        assert_eq!(got[1].field(":status"), Some("304"));
        assert!(got[1].body.is_empty());
        for g in [&got[0], &got[2]] {
            assert_eq!(g.body, b"hello\n");
        }
        let got = c.round(&[ranged.clone(), plain.clone(), ranged.clone()]);
        for g in [&got[0], &got[2]] {
            assert_eq!(
                (g.field(":status"), g.body.as_slice()),
                (Some("206"), &b"ell"[..])
            );
        }
        assert_eq!(got[1].body, b"hello\n");
        // Memoised again, each of them.
        let want = c.warm(&plain);
        assert_repeats_like(&mut c, &plain, 5, &want);
        let want = c.warm(&conditional);
        assert_eq!(want.field(":status"), Some("304"));
        assert_repeats_like(&mut c, &conditional, 5, &want);
    }
}

#[test]
fn a_window_too_small_for_the_body_still_gets_the_body() {
    let s = start(CONF);
    // Stream windows of 4 bytes: the 6-byte answer waits for credit each time, and 4 KiB
    // answers soon wait on the connection window too.
    let mut c = Client::connect(&s, &[(setting::INITIAL_WINDOW_SIZE, 4)]);
    for (path, len) in [("/6b.txt", 6), ("/4k.bin", 4096)] {
        let ask = get(path);
        let want = c.warm(&ask);
        assert_eq!(want.body.len(), len);
        for _ in 0..5 {
            assert_repeats_like(&mut c, &ask, 20, &want);
        }
    }
    // A roomy window, then one too small for the next answers (SETTINGS mid-connection).
    let mut c = Client::connect(&s, &[]);
    let ask = get("/4k.bin");
    let want = c.warm(&ask);
    let mut small = Vec::new();
    frame::put_settings(&mut small, &[(setting::INITIAL_WINDOW_SIZE, 100)]);
    assert!(c.raw.send(&small));
    for _ in 0..3 {
        assert_repeats_like(&mut c, &ask, 10, &want);
    }
}

#[test]
fn a_file_changed_between_repeats_is_served_new_when_the_cache_sees_it() {
    let s = start(CONF);
    let mut c = Client::connect(&s, &[]);
    let ask = get("/6b.txt");
    c.warm(&ask);
    common::repeat::assert_change_seen(&s, || {
        let answers = c.round(&vec![ask.clone(); 8]).into_iter();
        answers
            .map(|got| {
                let len = got.field("content-length").map(str::to_string);
                (got.body, len)
            })
            .collect()
    });
}

#[test]
fn a_reload_between_repeats_serves_the_new_configuration() {
    let ask = get("/answer");
    common::repeat::assert_reload_seen(
        |s| Client::connect(s, &[]).warm(&ask).body,
        |s| {
            let mut c = Client::connect(s, &[]);
            let got = c.warm(&ask);
            assert_repeats_like(&mut c, &ask, 10, &got);
        },
    );
}

#[test]
fn a_logged_path_logs_every_repeated_request() {
    let conf = format!("{CONF}access-log:\n  path: $DIR/access.log\n  format: '%s %U %b'\n");
    let s = start(&conf);
    let mut c = Client::connect(&s, &[]);
    let ask = get("/6b.txt");
    c.warm(&ask);
    for _ in 0..4 {
        c.round(&vec![ask.clone(); 10]);
    }
    c.round(&[get("/answer")]);
    let want = "200 /6b.txt 6\n".repeat(48) + "200 /answer 2\n";
    common::repeat::assert_log(&s, "/answer", &want);
}

#[test]
fn requests_answered_again_are_counted_in_the_metrics() {
    let conf = CONF.replace(
        "      /answer:",
        "      /metrics:\n        metrics: ON\n      /answer:",
    );
    let s = start(&conf);
    let mut c = Client::connect(&s, &[]);
    let ask = get("/6b.txt");
    // 8 to warm, then 60 more.
    c.warm(&ask);
    for _ in 0..6 {
        c.round(&vec![ask.clone(); 10]);
    }
    let key = "spate_requests_total{protocol=h2,status=2xx}";
    let samples = common::prometheus::scrape_until(&s, "/metrics", |samples| {
        common::prometheus::sample(samples, key) >= 68.0
    });
    assert_eq!(common::prometheus::sample(&samples, key), 68.0);
}
