//! Several backends behind one path (`proxy.reverse.url` with a list): the worker's choice of
//! backend for each request, and the moves to the next one when a backend cannot be reached.
//!
//! The balancer state (smooth round-robin weights, requests in flight) belongs to one worker:
//! plain cells, no lock and no atomic. Health is shared by the process ([`Board`]).

use super::backend::{Backend, UpstreamRequest};
use super::dispatch::{attempt, Unsent};
use super::errors::{log_failure, UpstreamError};
use super::health::{Avail, Board};
use super::lease::Lease;
use super::pool::Pool;
use super::tunnel::{self, TunnelRequest};
use crate::config::{Balancer, ProxyConf};
use crate::http::{Response, Side};
use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

/// One worker's view of a backend list.
pub struct Group {
    members: Box<[Member]>,
    balancer: Balancer,
    board: Arc<Board>,
    /// The backends' URLs name different paths: a request's target is rebuilt for the
    /// backend chosen (h2o sends each backend's own path).
    paths_differ: bool,
    /// Where a least-conn scan starts: it moves on after each choice, so backends that tie
    /// share the requests.
    cursor: Cell<usize>,
}

struct Member {
    backend: Rc<Backend>,
    /// The URL's authority, as metrics label it.
    label: Arc<str>,
    /// The URL's path.
    path: Box<str>,
    weight: i64,
    /// Smooth weighted round-robin: grows by the weight at each choice, drops by the total
    /// when chosen.
    current: Cell<i64>,
    /// Requests of this worker sent to it and not finished (the response body read), counted
    /// by the [`Lease`]s of those requests.
    in_flight: Rc<Cell<u32>>,
}

impl Group {
    pub fn new(
        conf: &ProxyConf,
        board: Arc<Board>,
        clients: &[Option<crate::tls::client::TlsClient>],
    ) -> Rc<Group> {
        let members = conf
            .backends
            .iter()
            .map(|b| Member {
                backend: Rc::new(Backend::new(conf, b, clients)),
                label: Arc::from(b.url.authority.as_str()),
                path: b.url.path.as_str().into(),
                weight: i64::from(b.weight),
                current: Cell::new(0),
                in_flight: Rc::new(Cell::new(0)),
            })
            .collect();
        let paths_differ = conf
            .backends
            .iter()
            .any(|b| b.url.path != conf.backends[0].url.path);
        Rc::new(Group {
            members,
            paths_differ,
            balancer: conf.balancer,
            board,
            cursor: Cell::new(0),
        })
    }

    /// The backend for a request that has tried those in `tried` (a bit per backend), marked
    /// tried. Backends in service come first; once none is left, those out of service are
    /// tried too (one may be back, and a 502 is all that is left otherwise). `None` when every
    /// backend has been tried.
    fn pick(&self, tried: &mut u64) -> Option<usize> {
        let mut skip = *tried;
        let mut any = false;
        loop {
            let board = &self.board;
            let allowed = |i: usize| skip & (1 << i) == 0 && (any || board.avail(i) != Avail::Out);
            let Some(i) = self.choose(allowed) else {
                if any {
                    return None;
                }
                (any, skip) = (true, *tried);
                continue;
            };
            // After its back-off, a backend gets one trial request at a time.
            if !any && board.avail(i) == Avail::Trial && !board.claim_trial(i) {
                skip |= 1 << i;
                continue;
            }
            *tried |= 1 << i;
            return Some(i);
        }
    }

    /// The balancer's choice among the backends `allowed` says may be chosen.
    fn choose(&self, allowed: impl Fn(usize) -> bool) -> Option<usize> {
        match self.balancer {
            Balancer::RoundRobin => self.round_robin(allowed),
            Balancer::LeastConn => self.least_conn(allowed),
        }
    }

    /// Smooth weighted round-robin (nginx's): weights 5, 1, 1 give a a b a c a a, not a a a a a
    /// b c.
    fn round_robin(&self, allowed: impl Fn(usize) -> bool) -> Option<usize> {
        let mut best: Option<usize> = None;
        let mut total = 0;
        for (i, m) in self.members.iter().enumerate() {
            if !allowed(i) {
                continue;
            }
            m.current.set(m.current.get() + m.weight);
            total += m.weight;
            if best.is_none_or(|b| m.current.get() > self.members[b].current.get()) {
                best = Some(i);
            }
        }
        let m = &self.members[best?];
        m.current.set(m.current.get() - total);
        best
    }

    /// Fewest requests in flight relative to weight; ties go to the heavier backend, then to
    /// the next from where the previous scan chose.
    fn least_conn(&self, allowed: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.members.len();
        let start = self.cursor.get();
        let mut best: Option<usize> = None;
        for i in (start..n).chain(0..start) {
            if !allowed(i) {
                continue;
            }
            let better = best.is_none_or(|b| {
                let (m, o) = (&self.members[i], &self.members[b]);
                // in_flight / weight, compared without dividing.
                let mine = i64::from(m.in_flight.get()) * o.weight;
                let theirs = i64::from(o.in_flight.get()) * m.weight;
                mine < theirs || (mine == theirs && m.weight > o.weight)
            });
            if better {
                best = Some(i);
            }
        }
        let i = best?;
        self.cursor.set((i + 1) % n);
        Some(i)
    }

    /// Whether a request's target depends on the backend chosen (see [`TargetFor`]).
    pub fn paths_differ(&self) -> bool {
        self.paths_differ
    }

    fn lease(&self, i: usize) -> Lease {
        Lease::new(&self.members[i].in_flight)
    }
}

/// Sends `req` to a backend of `group` and resolves to its response. A backend that cannot
/// be reached is left for the next (each at most once), and so is one whose new connection
/// broke before any answer to an idempotent request none of whose body was sent; a request
/// whose body went out is not sent again. 502 when none can be reached.
pub async fn send_balanced(
    pool: Rc<Pool>,
    group: Rc<Group>,
    req: UpstreamRequest,
    target_for: Option<TargetFor>,
) -> Result<Response, UpstreamError> {
    through(
        &group,
        Unsent::Fields(req),
        target_for,
        |backend, lease, unsent| {
            let pool = pool.clone();
            async move { attempt(&pool, &backend, unsent, Some(lease)).await }
        },
    )
    .await
}

/// Opens a tunnel to a backend of `group`, moving on to the next while one cannot be
/// reached. The lease lasts as long as the tunnel: least-conn counts open tunnels.
pub async fn open_tunnel_balanced(
    pool: Rc<Pool>,
    group: Rc<Group>,
    req: TunnelRequest,
    target_for: Option<TargetFor>,
) -> Result<Response, UpstreamError> {
    through(&group, req, target_for, |backend, lease, req| {
        let pool = pool.clone();
        async move { tunnel::exchange(&pool, &backend, req, Some(lease)).await }
    })
    .await
}

/// A request's target for a backend URL's path, given when the backends of a list name
/// different paths ([`Group::paths_differ`]); the request is built for the first backend's.
pub type TargetFor = Box<dyn Fn(&str) -> bytes::Bytes>;

/// A request whose target can be rebuilt for another backend's path.
trait Retarget {
    /// Puts `target` in place; false when the request is past changing (its head written).
    fn retarget(&mut self, target: bytes::Bytes) -> bool;
}

impl Retarget for Unsent {
    fn retarget(&mut self, target: bytes::Bytes) -> bool {
        match self {
            Unsent::Fields(req) => {
                req.target = target;
                true
            }
            Unsent::Serialized(_) => false,
        }
    }
}

impl Retarget for TunnelRequest {
    fn retarget(&mut self, target: bytes::Bytes) -> bool {
        self.target = target;
        true
    }
}

/// Gives `out` to `attempt` with the backends of `group` in the balancer's order until one
/// answers, or fails without giving `out` back; each outcome counts for the backend's health
/// and metrics. With `target_for`, `out`'s target is rebuilt for each backend's path; a
/// request whose head was already written for one path skips backends of other paths.
async fn through<T: Retarget, F>(
    group: &Rc<Group>,
    mut out: T,
    target_for: Option<TargetFor>,
    mut attempt: impl FnMut(Rc<Backend>, Lease, T) -> F,
) -> Result<Response, UpstreamError>
where
    F: Future<Output = Result<Response, (UpstreamError, Option<T>)>>,
{
    let mut tried = 0u64;
    let mut last = None;
    // The member whose path `out`'s target carries.
    let mut carried = 0;
    while let Some(i) = group.pick(&mut tried) {
        let m = &group.members[i];
        if let Some(target_for) = &target_for {
            if m.path != group.members[carried].path {
                if !out.retarget(target_for(&m.path)) {
                    continue;
                }
                carried = i;
            }
        }
        let result = attempt(m.backend.clone(), group.lease(i), out).await;
        crate::metrics::backend(&m.label, result.is_err());
        match result {
            Ok(resp) => {
                group.board.succeeded(i);
                return Ok(resp);
            }
            // Not reached, or broke before answering a request that may go again: next.
            Err((e, Some(back))) => {
                log_failure(&m.backend, &e);
                group.board.failed(i);
                out = back;
                last = Some(e);
            }
            Err((e, None)) => {
                log_failure(&m.backend, &e);
                if e.side == Side::Upstream {
                    group.board.failed(i);
                }
                return Err(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| UpstreamError::bad_gateway("no backend to try")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BackendConf, UpstreamAddr, UpstreamUrl};

    fn group(weights: &[u32], balancer: Balancer) -> Rc<Group> {
        let mut conf = ProxyConf::new(url(0));
        conf.backends = weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| BackendConf {
                url: url(i),
                weight,
                tls: None,
            })
            .collect();
        conf.balancer = balancer;
        // A board of its own: ports no other test uses.
        Group::new(&conf, Board::for_conf(&conf, &[]), &[])
    }

    fn url(i: usize) -> UpstreamUrl {
        UpstreamUrl {
            addr: UpstreamAddr::Tcp {
                host: "192.0.2.1".into(),
                port: 40000 + i as u16,
            },
            authority: format!("192.0.2.1:{}", 40000 + i),
            path: "/".into(),
            tls: false,
        }
    }

    fn picks(g: &Group, n: usize) -> String {
        (0..n)
            .map(|_| {
                let mut tried = 0;
                (b'a' + g.pick(&mut tried).unwrap() as u8) as char
            })
            .collect()
    }

    #[test]
    fn smooth_round_robin_interleaves_weights() {
        assert_eq!(
            picks(&group(&[5, 1, 1], Balancer::RoundRobin), 14),
            "aabacaaaabacaa"
        );
        assert_eq!(picks(&group(&[1, 1, 1], Balancer::RoundRobin), 6), "abcabc");
        assert_eq!(picks(&group(&[3, 2], Balancer::RoundRobin), 5), "ababa");
    }

    #[test]
    fn each_backend_at_most_once_per_request() {
        let g = group(&[2, 1, 1], Balancer::RoundRobin);
        let mut tried = 0;
        let mut seen: Vec<usize> = std::iter::from_fn(|| g.pick(&mut tried)).collect();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    #[test]
    fn least_conn_by_weight_then_in_turn() {
        let g = group(&[1, 2, 1], Balancer::LeastConn);
        // Nothing in flight: the heavier one.
        let mut tried = 0;
        assert_eq!(g.pick(&mut tried), Some(1));
        let _l1 = g.lease(1);
        // 1/2 in flight on b against 0 on a and c: a, then c (in turn).
        let mut tried = 0;
        assert_eq!(g.pick(&mut tried), Some(2));
        let _l2 = g.lease(2);
        let mut tried = 0;
        assert_eq!(g.pick(&mut tried), Some(0));
        let l0 = g.lease(0);
        // a: 1/1, b: 1/2, c: 1/1: b.
        let mut tried = 0;
        assert_eq!(g.pick(&mut tried), Some(1));
        drop(l0);
        let mut tried = 0;
        assert_eq!(g.pick(&mut tried), Some(0));
    }

    #[test]
    fn a_backend_out_of_service_is_skipped_until_none_is_left() {
        let mut conf = ProxyConf::new(url(10));
        conf.backends = (10..12)
            .map(|i| BackendConf {
                url: url(i),
                weight: 1,
                tls: None,
            })
            .collect();
        conf.max_fails = 2;
        let board = Board::for_conf(&conf, &[]);
        let g = Group::new(&conf, board.clone(), &[]);
        board.failed(0);
        assert_eq!(board.avail(0), Avail::In);
        board.failed(0);
        assert_eq!(board.avail(0), Avail::Out);
        assert_eq!(picks(&g, 4), "bbbb");
        // Every backend tried but the one out: it is tried last rather than a 502.
        let mut tried = 0;
        assert_eq!(g.pick(&mut tried), Some(1));
        assert_eq!(g.pick(&mut tried), Some(0));
        assert_eq!(g.pick(&mut tried), None);
        board.succeeded(0);
        assert_eq!(board.avail(0), Avail::In);
    }

    #[test]
    fn after_the_back_off_one_trial_at_a_time() {
        let mut conf = ProxyConf::new(url(20));
        conf.backends = (20..22)
            .map(|i| BackendConf {
                url: url(i),
                weight: 1,
                tls: None,
            })
            .collect();
        conf.max_fails = 1;
        conf.fail_timeout = std::time::Duration::from_millis(1);
        let board = Board::for_conf(&conf, &[]);
        board.failed(0);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(board.avail(0), Avail::Trial);
        assert!(board.claim_trial(0));
        // The others keep away while the trial runs.
        assert!(!board.claim_trial(0));
        assert_eq!(board.avail(0), Avail::Out);
        // It fails: another back-off, then another trial.
        board.failed(0);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(board.avail(0), Avail::Trial);
        assert!(board.claim_trial(0));
        board.succeeded(0);
        assert_eq!(board.avail(0), Avail::In);
        assert!(
            board.claim_trial(0) && board.claim_trial(1),
            "the flags were reset"
        );
    }
}
