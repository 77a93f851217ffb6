//! The ends of HTTP/2 streams. A stream's access-log line is written when the stream ends
//! (not when it is answered), so `%O`, `%b` and the duration are what was really sent; the
//! metrics count its request then too. Only routes with an access log, and workers that
//! count, pay for tracking streams to their end.

use super::work::LogStart;
use crate::http::{Request, Response};
use crate::log::AccessLog;
use crate::metrics::{self, Mark};
use crate::proto::h2::Connection;
use crate::server::request_end::{request_ended, Counted, Figures, Logged};
use bytes::Bytes;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Instant, SystemTime};

/// Streams answered with `respond_tracked`: the log lines of those whose end the connection
/// has not reported yet.
pub(crate) struct StreamEnds {
    open: Vec<Open>,
    /// This worker counts requests (`metrics::enabled`): every stream is tracked.
    counting: bool,
    /// The connection's TLS session, for the log lines.
    tls: Option<crate::log::TlsFacts>,
}

struct Open {
    id: u32,
    file: Rc<RefCell<AccessLog>>,
    req: Request,
    received_at: SystemTime,
    started: Instant,
    headers: Vec<(Bytes, Bytes)>,
}

impl StreamEnds {
    pub fn new(counting: bool, tls: Option<crate::log::TlsFacts>) -> StreamEnds {
        StreamEnds {
            open: Vec::new(),
            counting,
            tls,
        }
    }

    /// No tracked stream is waiting for its end.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Stream `id` is about to be answered with `resp` (then `respond_tracked`).
    pub fn start(
        &mut self,
        id: u32,
        file: &Rc<RefCell<AccessLog>>,
        start: LogStart,
        resp: &Response,
    ) {
        self.open.push(Open {
            id,
            file: file.clone(),
            req: start.req,
            received_at: start.received_at,
            started: start.started,
            headers: resp.headers.clone(),
        });
    }

    /// Counts the requests of the streams that ended and writes their log lines: the end
    /// was queued just now.
    pub fn write_ended(&mut self, conn: &mut Connection) {
        if self.open.is_empty() && !self.counting {
            return;
        }
        let mut now = None;
        let mut ended_at = None;
        for done in conn.take_done() {
            let figures = Figures {
                proto: metrics::Proto::Http2,
                status: done.status,
                // Bytes received are counted as read (every frame), not per stream.
                bytes_in: 0,
                body_bytes: done.body_bytes,
                total_bytes: done.head_bytes + done.body_bytes,
            };
            let counted = self.counting.then(|| Counted {
                started: Mark::from_bits(done.mark),
                ended: Some(*ended_at.get_or_insert_with(Mark::now)),
            });
            let Some(k) = self.open.iter().position(|o| o.id == done.id) else {
                request_ended(figures, counted, None);
                continue;
            };
            let o = self.open.swap_remove(k);
            let end = *now.get_or_insert_with(Instant::now);
            let log = Logged {
                file: &o.file,
                req: &o.req,
                resp_headers: &o.headers,
                received_at: o.received_at,
                duration: end.saturating_duration_since(o.started),
                tls: self.tls,
                stream_id: Some(o.id),
            };
            request_ended(figures, counted, Some(log));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AccessLogConf;
    use crate::http::{Body, Method, Request};
    use crate::proto::h2::frame;
    use crate::proto::h2::Settings;
    use bytes::BytesMut;
    use std::net::SocketAddr;

    #[test]
    fn lines_are_written_at_stream_end_with_the_bytes_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let conf = AccessLogConf {
            target: crate::config::LogTarget::File(path.clone()),
            format: "%s %b %O".into(),
            escape: crate::log::Escape::Apache,
            buffer_size: 0,
            at: crate::config::Location {
                file: std::sync::Arc::from("t"),
                line: 1,
            },
        };
        let mut formats = crate::log::Formats::default();
        formats.compile(&conf.format, conf.escape).unwrap();
        let file = Rc::new(RefCell::new(AccessLog::new(&conf, &formats)));
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let req = Request::for_test(Method::Get, "/", &[]);
        let now = Instant::now();
        // INITIAL_WINDOW_SIZE 4: the 10-byte body needs a WINDOW_UPDATE to finish.
        let settings = [0, 4, 0, 0, 0, 4];
        let mut conn =
            Connection::upgraded(Settings::default(), addr, addr, now, &settings, req).unwrap();
        let (id, req) = conn.next_request().unwrap();
        conn.clear_output();
        let mut resp = Response::new(200);
        resp.body = Body::Bytes(Bytes::from_static(b"0123456789"));
        let mut logs = StreamEnds::new(false, None);
        let start = LogStart {
            req,
            received_at: SystemTime::now(),
            started: now,
        };
        logs.start(id, &file, start, &resp);
        assert!(conn.respond_tracked(id, resp, 0).is_none());
        conn.fill(now);
        let head_len = conn.output().len() - 9 - (9 + 4);
        logs.write_ended(&mut conn);
        file.borrow_mut().flush();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "", "not ended yet");

        let mut b = frame::PREFACE.to_vec();
        frame::put_settings(&mut b, &[]);
        frame::put_window_update(&mut b, id, 100);
        conn.recv(
            &mut BytesMut::from(&b[..]),
            now,
            &mut crate::proto::h2::RunBuffer::default(),
        );
        conn.fill(now);
        logs.write_ended(&mut conn);
        file.borrow_mut().flush();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("200 10 {}\n", head_len + 10)
        );
    }
}
