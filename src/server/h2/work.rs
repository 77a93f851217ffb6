//! What the HTTP/2 driver keeps per stream between turns: answers still pending and streamed
//! response bodies. All of it is polled by the connection's own task (no task per stream, no
//! lock, no channel). Each entry has its own waker, which marks the entry and wakes the
//! task, so a wake-up from a backend socket or timer polls only the entries that asked for
//! it. Dropping an entry cancels its work (the client reset the stream or left).

use super::ends::StreamEnds;
use crate::http::body::{BodyStream, Frame};
use crate::http::Request;
use crate::metrics::in_flight::{InFlight, Phase};
use crate::metrics::Mark;
use crate::proto::h2::Connection;
use crate::server::request_start::LaterAnswer;
use crate::server::wake_flag::WakeFlag;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Instant, SystemTime};

/// Rounds of polling and framing per [`StreamWork::drive`] call: a producer that is always
/// ready cannot keep the connection from reading and writing.
const DRIVE_ROUNDS: usize = 16;

/// The pending answers and streamed bodies of one connection.
#[derive(Default)]
pub(crate) struct StreamWork {
    entries: Vec<Entry>,
    /// TLS early data only (`tls_early.rs`): copies of early requests without a body whose
    /// answers are pending, to route again if the answer is `425 Too Early`. Empty (and
    /// unallocated) on every other connection.
    early_copies: Vec<(u32, Box<Request>)>,
    /// TLS early data only: requests to route once the handshake has completed (early ones
    /// not safe to replay, the copies of early ones answered 425).
    after_handshake: Vec<(u32, Request)>,
}

struct Entry {
    id: u32,
    /// The entry's waker; `None` until first polled (it needs the task's waker).
    wake: Option<(Arc<Flag>, Waker)>,
    state: State,
}

enum State {
    Answer {
        later: LaterAnswer,
        /// Boxed: a request is large, and most routes have no log.
        log: Option<Box<LogStart>>,
        /// The request's start, when the worker counts requests.
        mark: Option<Mark>,
    },
    /// With the request's entry in the list of requests in flight, when its answer came
    /// later and a `status` path lists them.
    Body(Box<dyn BodyStream>, #[allow(dead_code)] Option<InFlight>),
}

/// What the access log needs from the request of a pending answer.
pub(crate) struct LogStart {
    pub req: Request,
    pub received_at: SystemTime,
    pub started: Instant,
}

/// Set by the entry's waker, which wakes the task; cleared before each poll so a wake-up
/// during it is kept.
type Flag = WakeFlag<Waker>;

/// Marks an entry to be polled again without a wake-up (it made progress and has not
/// registered a waker).
fn mark(wake: &Option<(Arc<Flag>, Waker)>) {
    if let Some((f, _)) = wake {
        f.mark();
    }
}

/// The entry's waker, made on its first poll from the task's.
fn waker<'w>(wake: &'w mut Option<(Arc<Flag>, Waker)>, task: &Waker) -> &'w Waker {
    let (_, w) = wake.get_or_insert_with(|| {
        let flag = Arc::new(Flag::new(false, task.clone()));
        (flag.clone(), Waker::from(flag))
    });
    w
}

/// What polling one entry did.
enum Step {
    /// Nothing to do, or still pending.
    Idle,
    /// Made progress; the entry stays.
    Moved,
    /// Finished or gone: remove the entry.
    Done,
}

impl Entry {
    /// Whether the entry asked to be polled (a new entry always does), and clears the mark.
    fn take_woken(&self) -> bool {
        self.wake.as_ref().is_none_or(|(f, _)| f.take())
    }

    fn woken(&self) -> bool {
        self.wake.as_ref().is_none_or(|(f, _)| f.is_marked())
    }

    /// Whether [`StreamWork::drive`] would poll this entry now.
    fn ready(&self, conn: &Connection) -> bool {
        match self.state {
            State::Answer { .. } => self.woken(),
            State::Body(..) => self.woken() && conn.wants_body(self.id),
        }
    }
}

impl StreamWork {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A pending answer for stream `id`, finished by its route when it comes.
    pub fn add_answer(
        &mut self,
        id: u32,
        later: LaterAnswer,
        log: Option<Box<LogStart>>,
        mark: Option<Mark>,
    ) {
        self.entries.push(Entry {
            id,
            wake: None,
            state: State::Answer { later, log, mark },
        });
    }

    /// The copy of early request `id` whose answer is pending ([`StreamWork::add_answer`]).
    pub fn keep_early_copy(&mut self, id: u32, copy: Box<Request>) {
        self.early_copies.push((id, copy));
    }

    /// Early request `id` is routed once the handshake has completed.
    pub fn after_handshake(&mut self, id: u32, req: Request) {
        self.after_handshake.push((id, req));
    }

    /// Early request `id` was answered `425 Too Early`: its copy is routed again once the
    /// handshake has completed (once: it is not early any more), and the client gets that
    /// answer.
    pub fn too_early(&mut self, id: u32, copy: Request) {
        crate::metrics::tls_early_data::too_early_retried();
        self.after_handshake.push((id, copy));
    }

    /// Whether requests wait for the handshake to complete.
    pub fn waits_for_handshake(&self) -> bool {
        !self.after_handshake.is_empty()
    }

    pub fn take_after_handshake(&mut self) -> Vec<(u32, Request)> {
        std::mem::take(&mut self.after_handshake)
    }

    /// A streamed response body the connection took the headers of.
    pub fn add_body(&mut self, id: u32, body: Box<dyn BodyStream>) {
        self.entries.push(Entry {
            id,
            wake: None,
            state: State::Body(body, None),
        });
    }

    /// Whether some entry is to be polled now: the branch of the driver's wait.
    pub fn ready(&self, conn: &Connection) -> bool {
        self.entries.iter().any(|e| e.ready(conn))
    }

    /// Drops the work of streams the connection no longer has, then polls the entries that
    /// were woken (bodies only while the connection can take more), framing what they give
    /// (`conn.fill`) until nothing moves, the output is full or the round budget is spent.
    pub fn drive(
        &mut self,
        cx: &mut Context<'_>,
        conn: &mut Connection,
        ends: &mut StreamEnds,
        now: Instant,
    ) {
        // Chunks still queued (a WINDOW_UPDATE just came) go out first, so their bodies
        // want the next one in this call.
        conn.fill(now);
        for round in 0..DRIVE_ROUNDS {
            for id in conn.take_cancelled() {
                if let Some(k) = self.entries.iter().position(|e| e.id == id) {
                    self.entries.swap_remove(k);
                }
                if let Some(k) = self.early_copies.iter().position(|(c, _)| *c == id) {
                    self.early_copies.swap_remove(k);
                }
            }
            let mut moved = false;
            let mut k = 0;
            while k < self.entries.len() {
                match self.poll_entry(k, cx.waker(), conn, ends) {
                    Step::Idle => k += 1,
                    Step::Moved => {
                        moved = true;
                        k += 1;
                    }
                    Step::Done => {
                        moved = true;
                        self.entries.swap_remove(k);
                    }
                }
            }
            if !moved {
                return;
            }
            conn.fill(now);
            if conn.output_full() || round + 1 == DRIVE_ROUNDS {
                return;
            }
        }
    }

    fn poll_entry(
        &mut self,
        k: usize,
        task: &Waker,
        conn: &mut Connection,
        ends: &mut StreamEnds,
    ) -> Step {
        let e = &mut self.entries[k];
        let early_copies = &mut self.early_copies;
        let id = e.id;
        let wanted = match e.state {
            State::Answer { .. } => true,
            State::Body(..) => conn.wants_body(id),
        };
        if !wanted || !e.take_woken() {
            return Step::Idle;
        }
        let mut cx = Context::from_waker(waker(&mut e.wake, task));
        match &mut e.state {
            State::Answer {
                later,
                log,
                mark: started,
            } => {
                let mut interim = false;
                let polled = later.poll_interim(&mut cx, |i| {
                    conn.send_interim(id, i.status, &i.headers);
                    interim = true;
                });
                let Poll::Ready(resp) = polled else {
                    return if interim { Step::Moved } else { Step::Idle };
                };
                // Early data only: an early request's copy, routed again after a 425.
                if !early_copies.is_empty() {
                    if let Some(at) = early_copies.iter().position(|(c, _)| *c == id) {
                        let (_, copy) = early_copies.swap_remove(at);
                        if resp.status == 425 {
                            crate::metrics::tls_early_data::too_early_retried();
                            self.after_handshake.push((id, *copy));
                            return Step::Done;
                        }
                    }
                }
                let file = later.route().log();
                let body = match (log.take(), file, *started) {
                    (None, _, None) => conn.respond(id, resp),
                    (start, file, mark) => {
                        if let (Some(start), Some(file)) = (start, file) {
                            ends.start(id, file, *start, &resp);
                        }
                        conn.respond_tracked(id, resp, mark.map_or(0, Mark::to_bits))
                    }
                };
                match body {
                    Some(body) => {
                        let listed = later.take_listed();
                        InFlight::set_phase(&listed, Phase::Sending);
                        e.state = State::Body(body, listed);
                        mark(&e.wake);
                        Step::Moved
                    }
                    None => Step::Done,
                }
            }
            State::Body(body, _) => match body.poll_frame(&mut cx) {
                Poll::Pending => Step::Idle,
                Poll::Ready(Some(Ok(Frame::Data(data)))) => {
                    mark(&e.wake);
                    if conn.push_body(id, data) {
                        Step::Moved
                    } else {
                        Step::Done
                    }
                }
                Poll::Ready(Some(Ok(Frame::Trailers(t)))) => {
                    conn.end_body(id, Some(t));
                    Step::Done
                }
                Poll::Ready(None) => {
                    conn.end_body(id, None);
                    Step::Done
                }
                Poll::Ready(Some(Err(err))) => {
                    if crate::log::emit_request_errors() {
                        tracing::info!(
                            stream = id,
                            "response body failed ({err}); resetting the stream"
                        );
                    }
                    conn.reset_body(id);
                    Step::Done
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::{Next, StreamBody};
    use crate::http::{Body, Method, Request, Response};
    use crate::proto::h2::frame::{self, flag, kind, Head};
    use crate::proto::h2::Settings;
    use bytes::{Bytes, BytesMut};
    use std::cell::{Cell, RefCell};
    use std::future::Future;
    use std::net::SocketAddr;
    use std::rc::Rc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    /// The connection task's waker: counts wake-ups.
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An answer that waits until the test opens it, then yields a streamed body.
    struct Gate {
        open: Rc<Cell<bool>>,
        polls: Rc<Cell<u32>>,
        waker: Rc<RefCell<Option<Waker>>>,
        body_polls: Rc<Cell<u32>>,
    }

    impl Future for Gate {
        type Output = Response;
        fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
            self.polls.set(self.polls.get() + 1);
            if !self.open.get() {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let mut r = Response::new(200);
            r.body = Body::Stream(StreamBody {
                len: None,
                stream: Box::new(Chunks {
                    left: 4,
                    polls: self.body_polls.clone(),
                }),
            });
            Poll::Ready(r)
        }
    }

    /// Four chunks of 1000 bytes, always ready.
    struct Chunks {
        left: u32,
        polls: Rc<Cell<u32>>,
    }

    impl BodyStream for Chunks {
        fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
            self.polls.set(self.polls.get() + 1);
            if self.left == 0 {
                return Poll::Ready(None);
            }
            self.left -= 1;
            Poll::Ready(Some(Ok(Frame::Data(Bytes::from(vec![b'x'; 1000])))))
        }
    }

    fn frames(out: &[u8]) -> Vec<(Head, usize)> {
        let mut v = Vec::new();
        let mut b = out;
        while b.len() >= 9 {
            let h = Head::parse(b[..9].try_into().unwrap());
            let end = 9 + h.len as usize;
            v.push((h, h.len as usize));
            b = &b[end..];
        }
        v
    }

    #[test]
    fn only_woken_work_is_polled_and_bodies_follow_the_window() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let req = Request::for_test(Method::Get, "/", &[]);
        let now = Instant::now();
        // INITIAL_WINDOW_SIZE 2500: the client takes two and a half chunks.
        let settings = [0, 4, 0, 0, 0x09, 0xc4];
        let mut conn =
            Connection::upgraded(Settings::default(), addr, addr, now, &settings, req).unwrap();
        let (id, _) = conn.next_request().unwrap();
        conn.clear_output();

        let task = Arc::new(Task(AtomicUsize::new(0)));
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        let gate = Gate {
            open: Rc::new(Cell::new(false)),
            polls: Rc::new(Cell::new(0)),
            waker: Rc::new(RefCell::new(None)),
            body_polls: Rc::new(Cell::new(0)),
        };
        let (open, polls, waker, body_polls) = (
            gate.open.clone(),
            gate.polls.clone(),
            gate.waker.clone(),
            gate.body_polls.clone(),
        );
        let mut work = StreamWork::default();
        let mut ends = StreamEnds::new(false, None);
        work.add_answer(id, LaterAnswer::unrouted(Box::pin(gate)), None, None);
        assert!(work.ready(&conn), "a new answer is polled once");
        work.drive(&mut cx, &mut conn, &mut ends, now);
        assert_eq!(polls.get(), 1);
        assert!(!work.ready(&conn));
        work.drive(&mut cx, &mut conn, &mut ends, now);
        assert_eq!(polls.get(), 1, "not woken: not polled");

        open.set(true);
        waker.borrow_mut().take().unwrap().wake();
        assert_eq!(
            task.0.load(Ordering::Relaxed),
            1,
            "the entry wakes the task"
        );
        assert!(work.ready(&conn));
        work.drive(&mut cx, &mut conn, &mut ends, now);
        assert_eq!(polls.get(), 2);
        let f = frames(conn.output());
        let data: usize = f
            .iter()
            .filter(|(h, _)| h.kind == kind::DATA)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(f[0].0.kind, kind::HEADERS);
        assert_eq!(data, 2500, "the window's worth");
        assert_eq!(body_polls.get(), 3, "pulled no further than the window");
        assert!(!work.ready(&conn), "the client has no window left");
        conn.clear_output();

        // The client opens the window: the rest, and the end.
        let mut b = frame::PREFACE.to_vec();
        frame::put_settings(&mut b, &[]);
        frame::put_window_update(&mut b, id, 10_000);
        conn.recv(
            &mut BytesMut::from(&b[..]),
            now,
            &mut crate::proto::h2::RunBuffer::default(),
        );
        work.drive(&mut cx, &mut conn, &mut ends, now);
        assert!(work.is_empty());
        let f = frames(conn.output());
        let data: Vec<&(Head, usize)> = f.iter().filter(|(h, _)| h.kind == kind::DATA).collect();
        let sent: usize = data.iter().map(|(_, n)| n).sum();
        assert_eq!(sent, 1500, "the queued half chunk and the last one");
        assert_eq!(data.last().unwrap().0.flags, flag::END_STREAM);
        assert_eq!(body_polls.get(), 5);
        assert_eq!(conn.open_streams(), 0);
    }

    #[test]
    fn cancelled_streams_drop_their_work() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let req = Request::for_test(Method::Get, "/", &[]);
        let now = Instant::now();
        let mut conn =
            Connection::upgraded(Settings::default(), addr, addr, now, &[], req).unwrap();
        let (id, _) = conn.next_request().unwrap();
        let dropped = Rc::new(Cell::new(false));
        struct Watch(Rc<Cell<bool>>);
        impl Drop for Watch {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let watch = Watch(dropped.clone());
        let fut = async move {
            let _watch = watch;
            std::future::pending::<Response>().await
        };
        let mut work = StreamWork::default();
        let mut ends = StreamEnds::new(false, None);
        work.add_answer(id, LaterAnswer::unrouted(Box::pin(fut)), None, None);
        let mut cx = Context::from_waker(Waker::noop());
        work.drive(&mut cx, &mut conn, &mut ends, now);
        assert!(!dropped.get());
        let mut b = frame::PREFACE.to_vec();
        frame::put_settings(&mut b, &[]);
        frame::put_rst_stream(&mut b, id, frame::Reason::CANCEL);
        conn.recv(
            &mut BytesMut::from(&b[..]),
            now,
            &mut crate::proto::h2::RunBuffer::default(),
        );
        work.drive(&mut cx, &mut conn, &mut ends, now);
        assert!(dropped.get(), "the reset dropped the pending answer");
        assert!(work.is_empty());
    }
}
