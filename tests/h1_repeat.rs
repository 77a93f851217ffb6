//! HTTP/1.1 answers given again from the lane's memo (`src/server/answer_memo.rs`): a request
//! whose head repeats byte for byte gets the answer the handler gave, with a current Date, and
//! never a stale one: not after the file changed, not after a reload, not for HEAD instead of
//! GET or a request that differs in one header, not for the same head sent to another
//! listener, and not without its log line or its count in the metrics.

mod common;

use common::repeat::{start, CONF};
use common::*;
use std::net::TcpStream;
use std::time::Duration;

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").into_bytes()
}

/// A keep-alive connection and the bytes read past the last response.
struct Conn {
    c: TcpStream,
    pending: Vec<u8>,
}

impl Conn {
    fn open(addr: std::net::SocketAddr) -> Conn {
        let c = TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10))).ok();
        Conn {
            c,
            pending: Vec::new(),
        }
    }

    /// Sends `reqs` in one write (pipelined) and reads their answers; `head[i]`: request i
    /// is a HEAD.
    fn round(&mut self, reqs: &[Vec<u8>], head: &[bool]) -> Vec<RawResponse> {
        write_all(&mut self.c, &reqs.concat());
        (0..reqs.len())
            .map(|i| read_response(&mut self.c, &mut self.pending, head.get(i) == Some(&true)))
            .collect()
    }

    fn ask(&mut self, req: &[u8]) -> RawResponse {
        self.round(&[req.to_vec()], &[]).remove(0)
    }
}

/// The fields of `r` but its Date, in order.
fn undated(r: &RawResponse) -> Vec<(String, String)> {
    let fields = r
        .headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("date"));
    fields.cloned().collect()
}

/// Asserts that `r` has a Date field of the current time (within 2 s).
fn assert_current_date(r: &RawResponse) {
    let date = r.header("date").expect("a Date field");
    let at = httpdate::parse_http_date(date).expect("an HTTP date");
    let now = std::time::SystemTime::now();
    let off = now.duration_since(at).unwrap_or_else(|e| e.duration());
    assert!(off < Duration::from_secs(2), "Date {date} is {off:?} off");
}

/// The first answer to `req`, then 30 more on the same connection (pipelined) and 10 on new
/// connections: all alike but for the Date, which is current.
fn assert_repeats(s: &Spate, req: &[u8]) -> RawResponse {
    let mut c = Conn::open(s.addr);
    let first = c.ask(req);
    for _ in 0..3 {
        for r in c.round(&vec![req.to_vec(); 10], &[]) {
            assert_eq!((r.status, undated(&r)), (first.status, undated(&first)));
            assert_eq!(r.body, first.body);
            assert_current_date(&r);
        }
    }
    for _ in 0..10 {
        let r = Conn::open(s.addr).ask(req);
        assert_eq!(
            (r.status, undated(&r), &r.body),
            (first.status, undated(&first), &first.body)
        );
    }
    first
}

#[test]
fn repeated_requests_get_the_answer_the_handler_gave() {
    let s = start(CONF);
    let answer = assert_repeats(&s, &get("/answer"));
    assert_eq!((answer.status, answer.text()), (200, "42".to_string()));
    let go = assert_repeats(&s, &get("/go"));
    assert_eq!(go.header("location"), Some("https://example.com/there"));
    let small = assert_repeats(&s, &get("/6b.txt"));
    assert_eq!((small.status, small.text()), (200, "hello\n".to_string()));
    assert!(small.header("etag").is_some());
    let large = assert_repeats(&s, &get("/4k.bin"));
    assert_eq!(large.body, vec![b'x'; 4096]);
    assert_eq!(large.header("content-length"), Some("4096"));
    let missing = assert_repeats(&s, &get("/nothing-here"));
    assert_eq!(missing.status, 404);
}

/// Requests sent one at a time by a client that reads nothing until the end: the kept answer
/// goes from the memo to the socket until the socket is full (a small `sndbuf`), and the part
/// of an answer it did not take is sent later. Every answer arrives whole and in order.
#[test]
fn answers_a_full_socket_did_not_take_arrive_whole() {
    let s = start(&CONF.replace("  port: 0\n", "  port: 0\n  sndbuf: 4096\n"));
    let mut c = Conn::open(s.addr);
    let req = get("/4k.bin");
    let first = c.ask(&req);
    assert_eq!(first.body, vec![b'x'; 4096]);
    // Each its own read (the memo answers it alone), mostly: the socket fills after about
    // twenty answers, and one of them goes only in part.
    let n = 100;
    for _ in 0..n {
        write_all(&mut c.c, &req);
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in 0..n {
        let r = read_response(&mut c.c, &mut c.pending, false);
        assert_eq!((i, r.status, undated(&r)), (i, 200, undated(&first)));
        assert_eq!(r.body, first.body, "answer {i}");
    }
    assert!(c.pending.is_empty(), "{} bytes more", c.pending.len());
}

#[test]
fn the_date_follows_the_clock_on_repeated_answers() {
    let s = start(CONF);
    let mut c = Conn::open(s.addr);
    let req = get("/answer");
    let first = c.round(&vec![req.clone(); 5], &[]);
    let before = first[4].header("date").unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1100));
    let later = c.round(&vec![req; 5], &[]);
    for r in &later {
        assert_current_date(r);
        assert_ne!(r.header("date"), Some(before.as_str()));
    }
}

#[test]
fn head_and_get_of_one_path_are_not_confused() {
    let s = start(CONF);
    let mut c = Conn::open(s.addr);
    let get_req = get("/6b.txt");
    let head_req = b"HEAD /6b.txt HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    c.round(&vec![get_req.clone(); 4], &[]);
    let reqs = [
        get_req.clone(),
        head_req.clone(),
        head_req.clone(),
        get_req.clone(),
        head_req,
        get_req,
    ];
    let kinds = [false, true, true, false, true, false];
    for (r, head) in c.round(&reqs, &kinds).iter().zip(kinds) {
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("6"));
        let want: &[u8] = if head { b"" } else { b"hello\n" };
        assert_eq!(r.body, want);
    }
    // Nothing was left over: the next answer is the next request's.
    assert_eq!(c.ask(&get("/answer")).text(), "42");
}

#[test]
fn a_request_that_differs_in_one_header_is_answered_for_itself() {
    let s = start(CONF);
    let mut c = Conn::open(s.addr);
    let plain = get("/6b.txt");
    let first = c.round(&vec![plain.clone(); 4], &[]).remove(0);
    let etag = first.header("etag").unwrap().to_string();
    let ranged = b"GET /6b.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=1-2\r\n\r\n".to_vec();
    let cond = format!("GET /6b.txt HTTP/1.1\r\nHost: a\r\nIf-None-Match: {etag}\r\n\r\n");
    let other_host = b"GET /6b.txt HTTP/1.1\r\nHost: b\r\n\r\n".to_vec();
    let reqs = [
        ranged,
        plain.clone(),
        cond.into_bytes(),
        plain.clone(),
        other_host,
    ];
    let got = c.round(&reqs, &[]);
    assert_eq!((got[0].status, got[0].text()), (206, "el".to_string()));
    assert_eq!((got[1].status, got[1].text()), (200, "hello\n".to_string()));
    assert_eq!((got[2].status, got[2].body.len()), (304, 0));
    assert_eq!((got[3].status, got[3].text()), (200, "hello\n".to_string()));
    assert_eq!((got[4].status, got[4].text()), (200, "hello\n".to_string()));
    // A request that repeats the memoised head only in part (its head goes on) is its own.
    let longer = b"GET /6b.txt HTTP/1.1\r\nHost: a\r\n".to_vec();
    let mut split = longer.clone();
    split.extend_from_slice(b"Range: bytes=0-0\r\n\r\n");
    assert_eq!(c.ask(&plain).status, 200);
    assert_eq!(
        (c.ask(&split).status, c.ask(&split).text()),
        (206, "h".to_string())
    );
}

#[test]
fn the_same_head_to_another_listener_is_answered_by_its_host() {
    // No port in the Host field: the listener's port picks the host.
    let dir = tempfile::tempdir().unwrap();
    let (s, ports) = Spate::start_on_free_ports(dir, |[one, two]| {
        format!(
            "
num-threads: 1
listen: {{host: 127.0.0.1, port: {one}}}
listen: {{host: 127.0.0.1, port: {two}}}
hosts:
  a:{one}:
    paths:
      /:
        respond: {{body: one}}
  a:{two}:
    paths:
      /:
        respond: {{body: two}}
"
        )
    });
    let _ = &s;
    let req = get("/");
    let mut one = Conn::open(([127, 0, 0, 1], ports[0]).into());
    let mut two = Conn::open(([127, 0, 0, 1], ports[1]).into());
    for _ in 0..3 {
        for r in one.round(&vec![req.clone(); 5], &[]) {
            assert_eq!(r.text(), "one");
        }
        for r in two.round(&vec![req.clone(); 5], &[]) {
            assert_eq!(r.text(), "two");
        }
    }
}

#[test]
fn a_file_changed_between_repeats_is_served_new_when_the_cache_sees_it() {
    let s = start(CONF);
    let mut c = Conn::open(s.addr);
    let req = get("/6b.txt");
    c.round(&vec![req.clone(); 4], &[]);
    common::repeat::assert_change_seen(&s, || {
        let answers = c.round(&vec![req.clone(); 8], &[]).into_iter();
        answers
            .map(|r| {
                let len = r.header("content-length").map(str::to_string);
                (r.body, len)
            })
            .collect()
    });
}

#[test]
fn a_reload_between_repeats_serves_the_new_configuration() {
    let req = get("/answer");
    common::repeat::assert_reload_seen(
        |s| Conn::open(s.addr).ask(&req).body,
        |s| assert_eq!(assert_repeats(s, &req).text(), "two"),
    );
}

#[test]
fn a_logged_path_logs_every_repeated_request() {
    let conf = format!("{CONF}access-log:\n  path: $DIR/access.log\n  format: '%s %U %b'\n");
    let s = start(&conf);
    let mut c = Conn::open(s.addr);
    for _ in 0..4 {
        c.round(&vec![get("/6b.txt"); 10], &[]);
    }
    c.ask(&get("/answer"));
    let want = "200 /6b.txt 6\n".repeat(40) + "200 /answer 2\n";
    common::repeat::assert_log(&s, "/answer", &want);
}

#[test]
fn requests_answered_again_are_counted_in_the_metrics() {
    let conf = CONF.replace(
        "      /answer:",
        "      /metrics:\n        metrics: ON\n      /answer:",
    );
    let s = start(&conf);
    let mut c = Conn::open(s.addr);
    for _ in 0..6 {
        c.round(&vec![get("/6b.txt"); 10], &[]);
    }
    for _ in 0..5 {
        c.round(&vec![get("/nothing-here"); 4], &[]);
    }
    let ok = "spate_requests_total{protocol=http/1.1,status=2xx}";
    let missing = "spate_requests_total{protocol=http/1.1,status=4xx}";
    let samples = common::prometheus::scrape_until(&s, "/metrics", |samples| {
        let sample = |key| common::prometheus::sample(samples, key);
        sample(ok) >= 60.0 && sample(missing) >= 20.0
    });
    assert_eq!(common::prometheus::sample(&samples, missing), 20.0);
    // The scrapes before this one count too.
    let counted = common::prometheus::sample(&samples, ok);
    assert!((60.0..80.0).contains(&counted), "{counted}");
}
