//! Handlers and the host/path router that picks one for each request.

mod acme_challenge;
pub mod auth;
mod chain;
pub mod compress;
mod connect;
#[cfg(debug_assertions)]
mod debug_panic;
mod early_hints;
pub mod edge;
pub mod error_doc;
pub mod fastcgi;
pub mod file;
pub mod headers;
pub mod limit;
pub mod proxy;
pub mod redirect;
mod request_errors;
pub mod respond;
mod server_timing;
pub mod status;
mod throttle;

use crate::config::{self, prefix_matches, HandlerConf};
use crate::http::{Answer, Handler, Request, Response};
use crate::log::{AccessLog, Formats};
use crate::tls::client::TlsClient;
use crate::upstream;
pub use compress::Negotiated;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

/// Per-worker routing table, built from the configuration on each worker thread.
pub struct Router {
    hosts: Vec<HostRoute>,
    /// Idle backend connections of this worker, shared by every proxy path; handed on to the
    /// router a reload in place builds, so that they survive it.
    pool: Rc<upstream::Pool>,
    /// Listeners that serve only some hosts (given by those hosts' own `listen`); empty when
    /// every listener serves every host.
    bound: Vec<BoundListener>,
}

/// A listener given by hosts' own `listen` and not by a global one.
struct BoundListener {
    addr: SocketAddr,
    quic: bool,
    /// Indexes into `Router::hosts`, in file order; never empty.
    hosts: Vec<usize>,
}

struct HostRoute {
    name: String,
    port: Option<u16>,
    /// `strict-match`: never the fallback for a name no host matches.
    strict: bool,
    /// Longest prefix first.
    paths: Vec<PathRoute>,
}

/// Where a path is in its router ([`Router::path`]): what an answer still to come keeps
/// instead of a borrow, so that it owns its routing (and a reload may replace the router).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteId {
    host: u32,
    path: u32,
}

/// A path's handler with the filters and log that apply to it.
pub struct PathRoute {
    /// This path's place in its router.
    pub id: RouteId,
    prefix: String,
    /// Configured with a trailing slash (`/p3/`): as in h2o, it matches `/p3/...` and not `/p3`
    /// itself (which another path, or none, answers).
    slashed: bool,
    handler: Box<dyn Handler>,
    headers: headers::HeaderRewriter,
    /// `error-doc`; `None` when the path has none, so the fast path pays one branch.
    error_docs: Option<error_doc::ErrorDocs>,
    /// `compress`; `None` when off (the default), so the fast path pays one branch.
    compress: Option<compress::Compressor>,
    /// `access`, `real-ip.*`; `None` when the path has none, so the fast path pays one branch.
    gate: Option<Box<edge::Gate>>,
    /// Whether the HTTP/1.1 lane may answer the path ([`PathRoute::answers_in_lane`]), known
    /// when the path is built.
    in_lane: bool,
    /// Whether the lane may ask the handler for an answer ready now on a path it does not
    /// answer otherwise ([`PathRoute::answers_in_lane_at_times`]).
    in_lane_at_times: bool,
    /// Shared with the other paths that log to the same file on this worker.
    pub access_log: Option<Rc<RefCell<AccessLog>>>,
}

impl PathRoute {
    /// Whether the HTTP/1.1 lane may answer this path: its handler answers now without other
    /// effect ([`Handler::answers_now`]), and its checks, if any, decide at once (no
    /// `limit-req` wait: [`edge::Gate::may_wait`]) with a refusal of their own making (no
    /// error document, which may be a file too large to copy). The lane runs the checks
    /// after the handler ([`PathRoute::check_in_lane`]), once it knows it can write the
    /// answer itself: what it hands to a task is checked there, and counted once.
    fn answers_in_lane(&self) -> bool {
        self.handler.answers_now()
            && self
                .gate
                .as_ref()
                .is_none_or(|g| !g.may_wait() && self.error_docs.is_none())
    }

    /// Whether the HTTP/1.1 lane may ask this path's handler for an answer ready now
    /// ([`Handler::answer_now`], the proxy cache's fresh hit) when it does not always have
    /// one: without checks or error documents, so that the answer it gets is the one it
    /// writes.
    fn answers_in_lane_at_times(&self) -> bool {
        self.handler.answers_now_at_times() && self.gate.is_none() && self.error_docs.is_none()
    }

    /// The path's filters on its answer ready now: error document, compression, header
    /// commands.
    #[inline(always)]
    fn finish_now(&self, req: &Request, resp: &mut Response) {
        if let Some(d) = &self.error_docs {
            d.apply(resp);
        }
        if let Some(c) = &self.compress {
            c.apply_now(req, resp);
        }
        self.headers.apply(resp);
    }

    /// The path's checks for a request the lane answers, its handler's answer in hand (that
    /// answer had no other effect: it is dropped when the checks refuse). The refusal, with
    /// the path's filters applied; `None` to give the handler's answer.
    #[inline]
    pub fn check_in_lane(&self, req: &mut Request) -> Option<Response> {
        let gate = self.gate.as_ref()?;
        // `limit-conn` places: the lane's answer is complete once written, so they are given
        // back at the end of this call.
        let mut held = Vec::new();
        let mut resp = match gate.check(req, &mut held) {
            edge::Verdict::Refuse(resp) => resp,
            // No wait on a lane path (`answers_in_lane`).
            edge::Verdict::Pass | edge::Verdict::Delay(_) => return None,
        };
        if let Some(c) = &self.compress {
            c.apply_now(req, &mut resp);
        }
        self.headers.apply(&mut resp);
        Some(resp)
    }

    /// What `req` allows the path's filters to do (the coding to compress with), kept by the
    /// driver while an answer is pending, for [`PathRoute::finish`].
    pub fn negotiate(&self, req: &Request) -> Negotiated {
        match &self.compress {
            Some(c) => c.negotiate(req),
            None => Negotiated::NONE,
        }
    }

    /// Whether `resp`, this path's answer ready now, may be given again to a byte-identical
    /// request while the one rule ([`crate::http::repeat`]) says it holds
    /// ([`Handler::answer_repeats`]). Not on a path with an access log: each request there has
    /// its line; nor on one with checks: the same bytes may come from another client.
    #[inline]
    pub fn answer_repeats(&self, resp: &Response) -> bool {
        self.access_log.is_none()
            && self.gate.is_none()
            && self.handler.answer_repeats(resp)
            && !self
                .error_docs
                .as_ref()
                .is_some_and(|d| d.covers(resp.status))
    }

    /// Applies the path's filters to a response: its error document, compression, then the
    /// header commands (so they have the last word, on Vary or Content-Encoding too).
    /// [`Router::handle`] does it for an answer that is ready now; the driver calls it for one
    /// that came later.
    pub fn finish(&self, negotiated: Negotiated, resp: &mut Response) {
        if let Some(d) = &self.error_docs {
            d.apply(resp);
        }
        if let Some(c) = &self.compress {
            c.apply(negotiated, resp);
        }
        self.headers.apply(resp);
    }
}

/// [`Router::handle_now`] on a path the lane answers at times: the handler's answer ready
/// now, if it has one ([`Handler::answer_now`]), with the path's filters. Out of line: the
/// lane's usual paths do not take it.
#[inline(never)]
fn answer_now<'r>(
    route: &'r PathRoute,
    req: &mut Request,
) -> Option<(Answer, Option<&'r PathRoute>)> {
    let mut resp = route.handler.answer_now(req)?;
    route.finish_now(req, &mut resp);
    Some((Answer::Now(resp), Some(route)))
}

impl Router {
    /// Builds the handlers of every host and path. Access logs that name the same file share
    /// one writer on this worker; `logs` collects them so the worker can flush them.
    /// `upstream_tls` are the TLS clients of `https://` backends and `formats` the access-log
    /// formats (`prepare` builds both).
    pub fn new(
        conf: &config::Config,
        upstream_tls: &[Option<TlsClient>],
        formats: &Formats,
        logs: &mut Vec<Rc<RefCell<AccessLog>>>,
    ) -> Router {
        Router::with_pool(conf, upstream_tls, formats, logs, upstream::Pool::new())
    }

    /// [`Router::new`] on the idle backend connections of `pool` (the previous router's, on
    /// a reload in place: [`Router::pool`]).
    pub fn with_pool(
        conf: &config::Config,
        upstream_tls: &[Option<TlsClient>],
        formats: &Formats,
        logs: &mut Vec<Rc<RefCell<AccessLog>>>,
        pool: Rc<upstream::Pool>,
    ) -> Router {
        let cache = Rc::new(RefCell::new(file_cache(conf)));
        // Idle FastCGI connections of this worker, shared by every FastCGI path.
        let fcgi = fastcgi::Shared::new(&conf.server_name);
        let hosts = conf
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let mut paths: Vec<PathRoute> = h
                    .paths
                    .iter()
                    .map(|p| {
                        let mut route = PathRoute {
                            id: RouteId { host: 0, path: 0 },
                            prefix: p.prefix.trim_end_matches('/').to_string(),
                            slashed: p.prefix.len() > 1 && p.prefix.ends_with('/'),
                            handler: server_timing::Timed::wrap(
                                p.server_timing,
                                request_errors::RequestErrors::wrap(
                                    p.emit_request_errors,
                                    conf.emit_request_errors,
                                    with_auth_request(
                                        p,
                                        with_early_hints(
                                            p,
                                            build_handler(p, &cache, &pool, upstream_tls, &fcgi),
                                            conf.send_informational,
                                        ),
                                        &pool,
                                    ),
                                ),
                            ),
                            headers: headers::HeaderRewriter::with_expires(&p.headers, p.expires)
                                .throttled(p.throttle_response),
                            error_docs: error_doc::ErrorDocs::new(&p.error_docs, h, |doc| {
                                build_handler(doc, &cache, &pool, upstream_tls, &fcgi)
                            }),
                            compress: p.compress.as_ref().map(compress::Compressor::new),
                            gate: p.edge.as_ref().map(|e| Box::new(edge::Gate::new(e))),
                            in_lane: false,
                            in_lane_at_times: false,
                            access_log: p.access_log.as_ref().map(|c| shared_log(c, formats, logs)),
                        };
                        // A throttled body is a stream, which the lane does not send.
                        route.in_lane = route.answers_in_lane() && !p.throttle_response;
                        route.in_lane_at_times = !route.in_lane
                            && route.answers_in_lane_at_times()
                            && !p.throttle_response;
                        route
                    })
                    .collect();
                paths.sort_by_key(|p| std::cmp::Reverse(p.prefix.len()));
                for (j, p) in paths.iter_mut().enumerate() {
                    p.id = RouteId {
                        host: i as u32,
                        path: j as u32,
                    };
                }
                HostRoute {
                    name: h.name.clone(),
                    port: h.port,
                    strict: h.strict_match,
                    paths,
                }
            })
            .collect();
        let bound = conf
            .listeners
            .iter()
            .filter_map(|l| {
                let hosts = l.hosts.clone()?;
                Some(BoundListener {
                    addr: l.addr,
                    quic: l.kind == config::ListenKind::Quic,
                    hosts,
                })
            })
            .collect();
        Router { hosts, pool, bound }
    }

    /// The path at `id` (of a route this router gave).
    #[inline]
    pub fn path(&self, id: RouteId) -> Option<&PathRoute> {
        let host = self.hosts.get(id.host as usize)?;
        host.paths.get(id.path as usize)
    }

    /// This worker's idle backend connections, for the next router ([`Router::with_pool`]).
    pub fn pool(&self) -> Rc<upstream::Pool> {
        self.pool.clone()
    }

    /// Answers `req`: picks the host by authority, the path by longest prefix, runs the handler
    /// and applies the path's filters (compression, header commands) to an answer that is ready
    /// now (for one that comes later, the driver calls [`PathRoute::finish`] with what
    /// [`PathRoute::negotiate`] said). Returns the path route for logging.
    pub fn handle(&self, req: &mut Request) -> (Answer, Option<&PathRoute>) {
        let route = self.route(req);
        self.handle_routed::<true>(req, route)
    }

    /// [`Router::handle`] for the HTTP/1.1 lane, when the path's handler answers now without
    /// other effect and its checks decide at once ([`PathRoute::answers_in_lane`]); `None`
    /// (nothing run) otherwise. The checks are not run: they have effects (counts, log
    /// lines), so the lane runs them ([`PathRoute::check_in_lane`]) only once it knows it
    /// writes the answer itself.
    #[inline(always)]
    pub fn handle_now(&self, req: &mut Request) -> Option<(Answer, Option<&PathRoute>)> {
        let route = self.route(req);
        match route {
            Some(r) if !r.in_lane => r.in_lane_at_times.then(|| answer_now(r, req)).flatten(),
            _ => Some(self.handle_routed::<false>(req, route)),
        }
    }

    #[inline(always)]
    /// `CHECKS`: run the path's checks first (false: the caller runs them).
    fn handle_routed<'r, const CHECKS: bool>(
        &'r self,
        req: &mut Request,
        route: Option<&'r PathRoute>,
    ) -> (Answer, Option<&'r PathRoute>) {
        #[cfg(debug_assertions)]
        debug_panic::on_path(req.path());
        match route {
            Some(route) => {
                // A refusal of the path's checks gets the path's filters too (its error-doc).
                let checked = match &route.gate {
                    Some(gate) if CHECKS => edge::gate(gate, route.handler.as_ref(), req),
                    _ => None,
                };
                let mut answer = match checked {
                    Some(answer) => answer,
                    None => route.handler.handle(req),
                };
                if let Answer::Now(resp) = &mut answer {
                    route.finish_now(req, resp);
                }
                (answer, Some(route))
            }
            None => (Answer::Now(Response::error(404)), None),
        }
    }

    /// Whether the handler that will answer `req` reads request bodies.
    pub fn streams_body(&self, req: &Request) -> bool {
        self.route(req).is_some_and(|r| r.handler.streams_body())
    }

    /// Whether the handler for `req` tunnels upgrades ([`Handler::tunnels`]).
    pub fn tunnels(&self, req: &Request) -> bool {
        self.route(req).is_some_and(|r| r.handler.tunnels())
    }

    // Inlined into `handle` (the inline path) although `streams_body` calls it too.
    #[inline(always)]
    fn route(&self, req: &Request) -> Option<&PathRoute> {
        let host = self.host_for(req)?;
        let path = req.path();
        // A request without a path (a CONNECT's authority-form target, HTTP/2's classic
        // CONNECT) matches `/` only, the one place h2o takes `proxy.connect`.
        host.paths.iter().find(|p| {
            prefix_matches(&p.prefix, path) && !(p.slashed && path.len() == p.prefix.len())
        })
    }

    #[inline(always)]
    fn host_for(&self, req: &Request) -> Option<&HostRoute> {
        // One host answers everything: no need to look at the authority.
        if let [only] = self.hosts.as_slice() {
            if !only.strict {
                return Some(only);
            }
        }
        let (name, port) = match req.authority() {
            Some(a) => split_authority(a),
            None => (&b""[..], None),
        };
        let port = port.or(Some(req.local.port()));
        let name_matches = |h: &HostRoute| {
            if let Some(suffix) = h.name.strip_prefix('*') {
                // `*.example.com` matches `a.example.com`, not `example.com`.
                name.len() > suffix.len()
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
            } else {
                name.eq_ignore_ascii_case(h.name.as_bytes())
            }
        };
        let port_matches = |h: &HostRoute| h.port.is_none() || h.port == port;
        let matches = |h: &&HostRoute| name_matches(h) && port_matches(h);
        // A request naming no host goes to the first one without `strict-match`.
        let fallback = |h: &&HostRoute| !h.strict;
        match self.bound_hosts(req) {
            None => self
                .hosts
                .iter()
                .find(matches)
                .or_else(|| self.hosts.iter().find(fallback)),
            Some(bound) => {
                let mut hosts = bound.iter().filter_map(|&i| self.hosts.get(i));
                hosts.clone().find(matches).or_else(|| hosts.find(fallback))
            }
        }
    }

    /// The hosts of the listener `req` arrived on, when that listener serves only some.
    fn bound_hosts(&self, req: &Request) -> Option<&[usize]> {
        if self.bound.is_empty() {
            return None;
        }
        let quic = req.version == crate::http::Version::Http3;
        let local = req.local;
        self.bound
            .iter()
            .find(|b| {
                b.quic == quic
                    && b.addr.port() == local.port()
                    && (b.addr.ip() == local.ip() || b.addr.ip().is_unspecified())
            })
            .map(|b| b.hosts.as_slice())
    }
}

/// The path's handler, behind its `auth-request` service when it has one.
fn with_auth_request(
    path: &config::PathConf,
    handler: Box<dyn Handler>,
    pool: &Rc<upstream::Pool>,
) -> Box<dyn Handler> {
    match path.edge.as_ref().and_then(|e| e.auth_request.as_ref()) {
        Some(conf) => Box::new(auth::AuthRequest::new(conf, handler, pool.clone())),
        None => handler,
    }
}

/// `handler` with the 103 Early Hints of the path's `when: early` header commands, if any.
fn with_early_hints(
    path: &config::PathConf,
    handler: Box<dyn Handler>,
    mode: config::SendInformational,
) -> Box<dyn Handler> {
    if path.early_headers.is_empty() {
        return handler;
    }
    early_hints::EarlyHints::wrap(
        handler,
        &path.early_headers,
        proxy::Informational::new(mode),
    )
}

fn build_handler(
    path: &config::PathConf,
    cache: &Rc<RefCell<file::OpenFileCache>>,
    pool: &Rc<upstream::Pool>,
    upstream_tls: &[Option<TlsClient>],
    fcgi: &fastcgi::Shared,
) -> Box<dyn Handler> {
    build(&path.handler, &path.prefix, cache, pool, upstream_tls, fcgi)
}

fn build(
    handler: &HandlerConf,
    prefix: &str,
    cache: &Rc<RefCell<file::OpenFileCache>>,
    pool: &Rc<upstream::Pool>,
    upstream_tls: &[Option<TlsClient>],
    fcgi: &fastcgi::Shared,
) -> Box<dyn Handler> {
    match handler {
        HandlerConf::File(f) => {
            let file = file::FileHandler::new(f.clone(), cache.clone()).with_prefix(prefix);
            if f.single_file {
                return Box::new(file::OneFile(file));
            }
            if f.custom_handlers.is_empty() {
                return Box::new(file);
            }
            Box::new(fastcgi::FileWithScripts::new(file, f, prefix, fcgi))
        }
        HandlerConf::Fastcgi(c) => Box::new(fcgi.handler(c)),
        HandlerConf::Respond(r) => Box::new(respond::RespondHandler::new(r)),
        HandlerConf::Redirect(r) => Box::new(redirect::RedirectHandler::new(r, prefix)),
        HandlerConf::Proxy(p) => Box::new(proxy::ProxyHandler::new(
            p,
            prefix,
            pool.clone(),
            upstream_tls,
        )),
        HandlerConf::Connect(c) => Box::new(connect::ConnectHandler::new(c)),
        HandlerConf::Status => Box::new(status::StatusHandler),
        HandlerConf::Metrics => Box::new(status::MetricsHandler),
        HandlerConf::Readiness => Box::new(status::ReadinessHandler),
        HandlerConf::AcmeChallenge => Box::new(acme_challenge::AcmeChallengeHandler),
        HandlerConf::None => Box::new(NotFound),
        HandlerConf::Chain(list) => Box::new(chain::Chain::new(
            list.iter()
                .map(|h| {
                    let passes_on = matches!(h, HandlerConf::File(_));
                    (build(h, prefix, cache, pool, upstream_tls, fcgi), passes_on)
                })
                .collect(),
        )),
    }
}

fn shared_log(
    conf: &config::AccessLogConf,
    formats: &Formats,
    logs: &mut Vec<Rc<RefCell<AccessLog>>>,
) -> Rc<RefCell<AccessLog>> {
    if let Some(l) = logs.iter().find(|l| l.borrow().conf() == conf) {
        return l.clone();
    }
    let l = Rc::new(RefCell::new(AccessLog::new(conf, formats)));
    logs.push(l.clone());
    l
}

struct NotFound;

impl Handler for NotFound {
    fn answers_now(&self) -> bool {
        true
    }

    fn handle(&self, _req: &Request) -> Answer {
        Answer::Now(Response::error(404))
    }
}

/// Splits `host:port`, `[v6]:port`, `host` into a name and a port.
fn split_authority(a: &[u8]) -> (&[u8], Option<u16>) {
    let parse_port = |s: &[u8]| -> Option<u16> {
        if s.is_empty() || s.len() > 5 || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = s.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
        u16::try_from(n).ok()
    };
    if a.first() == Some(&b'[') {
        return match memchr::memchr(b']', a) {
            Some(end) => {
                let port = a.get(end + 1) == Some(&b':');
                (
                    &a[..=end],
                    if port {
                        parse_port(&a[end + 2..])
                    } else {
                        None
                    },
                )
            }
            None => (a, None),
        };
    }
    match memchr::memrchr(b':', a) {
        Some(i) => (&a[..i], parse_port(&a[i + 1..])),
        None => (a, None),
    }
}

/// A worker's open-file cache: its share of `file.memory-cache-size` (each worker holds its
/// own copies, so the configured size is shared out between them).
fn file_cache(conf: &config::Config) -> file::OpenFileCache {
    let mut files = file::OpenFileCache::new();
    let workers = conf.num_threads.max(1) as u64;
    files.set_contents_budget(conf.file_memory_cache_size / workers);
    files.set_hold_max(conf.file_memory_cache_max_file);
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_holds_its_share_of_the_file_memory_cache() {
        let mut conf = config::Config {
            num_threads: 4,
            file_memory_cache_size: 100 << 20,
            file_memory_cache_max_file: 1000,
            ..config::Config::empty()
        };
        let c = file_cache(&conf);
        assert_eq!((c.contents_budget(), c.hold_max()), (25 << 20, 1000));
        conf.num_threads = 0;
        assert_eq!(file_cache(&conf).contents_budget(), 100 << 20);
    }

    #[test]
    fn prefixes_match_on_segment_boundaries() {
        assert!(prefix_matches("", b"/anything"));
        assert!(prefix_matches("/answer", b"/answer"));
        assert!(prefix_matches("/answer", b"/answer/x"));
        assert!(!prefix_matches("/answer", b"/answerx"));
        assert!(!prefix_matches("/answer", b"/"));
    }

    #[test]
    fn authorities_split() {
        assert_eq!(split_authority(b"a.com:80"), (&b"a.com"[..], Some(80)));
        assert_eq!(split_authority(b"a.com"), (&b"a.com"[..], None));
        assert_eq!(split_authority(b"[::1]:8080"), (&b"[::1]"[..], Some(8080)));
        assert_eq!(split_authority(b"[::1]"), (&b"[::1]"[..], None));
    }
}
