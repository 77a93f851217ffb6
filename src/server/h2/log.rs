//! Access-log lines of HTTP/2 streams, written when the stream ends (not when it is
//! answered), so `%O`, `%b` and the duration are what was really sent. Only routes with an
//! access log pay for this.

use super::work::LogStart;
use crate::http::{Request, Response};
use crate::log::{AccessLog, LogRecord};
use crate::proto::h2::Connection;
use bytes::Bytes;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Instant, SystemTime};

/// Streams answered with `respond_logged` whose end the connection has not reported yet.
#[derive(Default)]
pub(crate) struct AccessLogs {
    open: Vec<Open>,
}

struct Open {
    id: u32,
    file: Rc<RefCell<AccessLog>>,
    req: Request,
    received_at: SystemTime,
    started: Instant,
    status: u16,
    headers: Vec<(Bytes, Bytes)>,
}

impl AccessLogs {
    /// Stream `id` is about to be answered with `resp` (then `respond_logged`).
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
            status: resp.status,
            headers: resp.headers.clone(),
        });
    }

    /// Writes the lines of the streams that ended: the end was queued just now.
    pub fn write_ended(&mut self, conn: &mut Connection) {
        if self.open.is_empty() {
            return;
        }
        let mut now = None;
        for done in conn.take_done() {
            let Some(k) = self.open.iter().position(|o| o.id == done.id) else {
                continue;
            };
            let o = self.open.swap_remove(k);
            let end = *now.get_or_insert_with(Instant::now);
            o.file.borrow_mut().log(&LogRecord {
                req: &o.req,
                status: o.status,
                body_bytes: done.body_bytes,
                total_bytes: done.head_bytes + done.body_bytes,
                received_at: o.received_at,
                duration: end.saturating_duration_since(o.started),
                resp_headers: &o.headers,
            });
        }
    }
}
