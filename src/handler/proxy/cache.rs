//! `proxy.cache`: a path's requests answered from the store when it may (RFC 9111), stale
//! entries revalidated with the backend, misses stored as they stream to the client, and
//! concurrent misses of a key collapsed into one backend request. Each answer says what
//! happened in `Cache-Status` (RFC 9211). The rules are `crate::cache`'s; this is where they
//! meet the request and the exchange.

use super::ProxyHandler;
use crate::cache::policy::{self, Timing, Use};
use crate::cache::store::{vary_names, vary_value, Counts};
use crate::cache::{self, Filling, Found, Leader, RequestControl, Role, Store, Stored};
use crate::config::CacheConf;
use crate::handler::file::multipart;
use crate::handler::file::range::{self, Ranges};
use crate::http::body::Next;
use crate::http::response::BodyPart;
use crate::http::{Answer, Body, BodyStream, Frame, Method, Request, Response, StreamBody};
use crate::upstream::UpstreamRequest;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

const CACHE_STATUS: &str = "Cache-Status";

thread_local! {
    /// The worker's buffer for the key of a lookup.
    static KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A path's cache: the process's store for its `proxy.cache` and the wait of collapsed
/// misses.
pub(super) struct Cache {
    store: Arc<Store>,
    lock_timeout: Duration,
    purge: bool,
    /// `purge-secret`: a PURGE from elsewhere than the machine itself must carry it.
    purge_secret: Option<Bytes>,
}

impl Cache {
    pub(super) fn new(conf: &CacheConf) -> Cache {
        Cache {
            store: cache::shared(
                &conf.at.file,
                conf.at.line,
                conf.memory,
                conf.max_object_size,
                conf.disk.as_ref().map(|d| (d.path.as_path(), d.max_size)),
            ),
            lock_timeout: conf.lock_timeout,
            purge: conf.purge,
            purge_secret: conf.purge_secret.clone().map(Bytes::from),
        }
    }
}

/// What the cache keeps of a request for an answer that comes later.
struct Ask {
    store: Arc<Store>,
    key: Bytes,
    control: RequestControl,
    /// The client's fields: the values a response's `Vary` names are taken from.
    fields: Vec<(Bytes, Bytes)>,
    authorization: bool,
    head: bool,
    validators: Validators,
    request_time: u64,
}

/// The client's own conditions, evaluated against a stored response.
#[derive(Default)]
struct Validators {
    none_match: Option<Bytes>,
    modified_since: Option<u64>,
    /// Also If-Match, If-Unmodified-Since, If-Range or Range: the request is passed on as
    /// it is rather than revalidated with our validators.
    other: bool,
    /// `Range`: answered from a stored whole response, when `If-Range` (if any) matches it.
    range: Option<Bytes>,
    if_range: Option<Bytes>,
}

impl Validators {
    fn of(req: &Request) -> Validators {
        // One pass first: most requests have no `If-*` or `Range` field at all.
        let any = req
            .headers()
            .any(|(n, _)| matches!(n.first(), Some(b'i' | b'I' | b'r' | b'R')));
        if !any {
            return Validators::default();
        }
        Validators {
            none_match: req.header(b"if-none-match").map(Bytes::copy_from_slice),
            modified_since: req.header(b"if-modified-since").and_then(policy::http_date),
            other: ["if-match", "if-unmodified-since", "if-range", "range"]
                .iter()
                .any(|n| req.header(n.as_bytes()).is_some()),
            range: req.header(b"range").map(Bytes::copy_from_slice),
            if_range: req.header(b"if-range").map(Bytes::copy_from_slice),
        }
    }

    fn any(&self) -> bool {
        self.none_match.is_some() || self.modified_since.is_some() || self.other
    }

    /// Whether the stored response satisfies the client's If-None-Match or, without one,
    /// If-Modified-Since: the answer is then 304 (RFC 9110 §13.2.2).
    fn not_modified(&self, s: &Stored) -> bool {
        if s.status != 200 {
            return false;
        }
        if let Some(inm) = &self.none_match {
            let Some(etag) = policy::field(&s.headers, b"etag") else {
                return false;
            };
            return inm.split(|&b| b == b',').any(|t| {
                let t = t.trim_ascii();
                t == b"*" || policy::weak_eq(t, etag)
            });
        }
        let Some(since) = self.modified_since else {
            return false;
        };
        policy::field(&s.headers, b"last-modified")
            .or_else(|| policy::field(&s.headers, b"date"))
            .and_then(|v| policy::http_date(v))
            .is_some_and(|m| m <= since)
    }

    /// The ranges asked of the stored response, when they apply to it: without `If-Range`,
    /// or with one that names it (RFC 9110 §13.1.5: its strong `ETag`, or its
    /// `Last-Modified` exactly, and only when that is at least a second before its `Date`,
    /// a strong validator).
    fn ranges_of(&self, s: &Stored) -> Option<&Bytes> {
        let range = self.range.as_ref()?;
        let Some(cond) = &self.if_range else {
            return Some(range);
        };
        let cond = cond.trim_ascii();
        let holds = if cond.starts_with(b"\"") || cond.starts_with(b"W/") {
            policy::field(&s.headers, b"etag")
                .is_some_and(|e| !cond.starts_with(b"W/") && !e.starts_with(b"W/") && e == cond)
        } else {
            let modified =
                policy::field(&s.headers, b"last-modified").and_then(|v| policy::http_date(v));
            let date = policy::field(&s.headers, b"date").and_then(|v| policy::http_date(v));
            match (policy::http_date(cond), modified) {
                (Some(c), Some(m)) => c == m && date.is_some_and(|d| d > m),
                _ => false,
            }
        };
        holds.then_some(range)
    }
}

/// The boundary of the cache's multipart/byteranges answers: random per process.
static BOUNDARY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(crate::handler::file::multipart::boundary);

/// The store's response for `req`. The key in a reused buffer: a hit needs no copy of it.
#[inline]
fn look_up(cache: &Cache, req: &Request) -> Found {
    KEY.with_borrow_mut(|key| {
        cache::key_into(
            key,
            req.secure,
            req.authority().unwrap_or_default(),
            req.target(),
        );
        cache
            .store
            .lookup(key, |n| vary_value(n, req.header_all(n)))
    })
}

/// The answer of a fresh hit, counted; offered to the memos with its entry's lease.
#[inline]
fn fresh(cache: &Cache, s: Arc<Stored>, age: u64, v: &Validators, second_ends: u64) -> Response {
    Counts::add(&cache.store.counts.hits, 1);
    let out = answer(&s, age, v, Bytes::from_static(b"spate; hit"));
    // The same request may be given this answer again (a connection's or a worker's memo)
    // while the entry is the store's, within this second.
    if let Body::Bytes(b) = &out.body {
        crate::http::repeat::offer(b, s, second_ends);
    }
    out
}

impl ProxyHandler {
    /// The answer to a GET or HEAD when the store has a fresh response for it, with no
    /// other effect; `None` (nothing counted) otherwise, or when the HTTP/1.1 lane would not
    /// write the answer itself (a range, trailers): [`ProxyHandler::through_cache`] then
    /// takes it.
    pub(super) fn fresh_hit(&self, cache: &Cache, req: &Request) -> Option<Response> {
        if !matches!(req.method, Method::Get | Method::Head) {
            return None;
        }
        let control =
            RequestControl::parse(req.header_all(b"cache-control"), req.header_all(b"pragma"));
        let (now, second_ends) = crate::http::clock::wall_second_and_end();
        let found = look_up(cache, req);
        let Found::Hit(s) = found else {
            return None;
        };
        let age = s.timing.age(now);
        if !matches!(
            policy::usable(age, s.lifetime, &s.control, &control),
            Use::Fresh
        ) {
            return None;
        }
        let v = Validators::of(req);
        // Answers the lane would hand to a task: a range, a body given with its trailers.
        if v.range.is_some() || !s.trailers.is_empty() {
            return None;
        }
        Some(fresh(cache, s, age, &v, second_ends))
    }

    pub(super) fn through_cache(&self, cache: &Cache, req: &Request) -> Answer {
        match req.method {
            Method::Get | Method::Head => {}
            Method::Other(ref m) if cache.purge && &m[..] == b"PURGE" => {
                return Answer::Now(purge(cache, req));
            }
            Method::Options | Method::Trace | Method::Connect => {
                return later_with(self.forward(req), "spate; fwd=method");
            }
            _ => return self.invalidating(cache, req),
        }
        let control =
            RequestControl::parse(req.header_all(b"cache-control"), req.header_all(b"pragma"));
        // The second ages are counted in, and when it ends: a fresh hit holds until then.
        let (now, second_ends) = crate::http::clock::wall_second_and_end();
        let found = look_up(cache, req);
        let (fwd, stale) = match found {
            Found::Hit(s) => {
                let age = s.timing.age(now);
                match policy::usable(age, s.lifetime, &s.control, &control) {
                    Use::Fresh => {
                        let v = Validators::of(req);
                        return Answer::Now(fresh(cache, s, age, &v, second_ends));
                    }
                    Use::Revalidate if control.no_cache => ("request", Some(s)),
                    Use::Revalidate => ("stale", Some(s)),
                }
            }
            Found::VaryMiss => ("vary-miss", None),
            Found::Miss => ("uri-miss", None),
        };
        Counts::add(&cache.store.counts.misses, 1);
        if control.only_if_cached {
            return Answer::Now(Response::error(504).with_header(
                CACHE_STATUS,
                format!("spate; fwd={fwd}; detail=only-if-cached"),
            ));
        }
        let key = cache::key(
            req.secure,
            req.authority().unwrap_or_default(),
            req.target(),
        );
        let ask = Ask {
            store: cache.store.clone(),
            key,
            control,
            fields: req.shared_headers().collect(),
            authorization: req.header(b"authorization").is_some(),
            head: req.is_head(),
            validators: Validators::of(req),
            request_time: now,
        };
        let (mut up, client) = self.outgoing(req);
        if let Some(s) = stale {
            let with_ours = !ask.validators.any() && add_validators(&mut up, &s);
            let pending = self.exchange(up, client);
            // stale-while-revalidate (RFC 5861): the stale entry now, one refresh per key
            // behind it, handed to the worker (the refresh outlives the request).
            let age = s.timing.age(now);
            if fwd == "stale"
                && with_ours
                && policy::stale_while_revalidate(age, s.lifetime, &s.control)
            {
                Counts::add(&cache.store.counts.stale, 1);
                let out = answer(
                    &s,
                    age,
                    &ask.validators,
                    Bytes::from_static(b"spate; hit; detail=stale-while-revalidate"),
                );
                if let Role::Lead(leader) = cache.store.fill(&ask.key) {
                    crate::http::background::spawn(async move {
                        let resp = pending.await;
                        let resp = revalidated(ask, s, resp, None);
                        drain(resp.body).await;
                        drop(leader);
                    });
                }
                return Answer::Now(out);
            }
            // Revalidations of a stale entry collapse as misses do: one goes to the
            // backend, the others wait for its answer to freshen the entry.
            if fwd == "stale" && with_ours {
                let timeout = cache.lock_timeout;
                return Answer::Later(match cache.store.fill(&ask.key) {
                    Role::Follow(wait) => Box::pin(async move {
                        let _ = tokio::time::timeout(timeout, wait).await;
                        if let Some(out) = fresh_after_wait(&ask) {
                            return out;
                        }
                        revalidated(ask, s, pending.await, None)
                    }),
                    Role::Lead(leader) => {
                        Box::pin(async move { revalidated(ask, s, pending.await, Some(leader)) })
                    }
                });
            }
            return Answer::Later(Box::pin(async move {
                let resp = pending.await;
                if with_ours {
                    revalidated(ask, s, resp, None)
                } else {
                    stale_on_error(ask, s, resp, fwd, None)
                }
            }));
        }
        // Misses of a whole GET collapse: the first fetches, the others wait for it.
        let collapsible = !ask.head && !ask.control.no_store && !ask.validators.any();
        let role = collapsible.then(|| cache.store.fill(&ask.key));
        let pending = self.exchange(up, client);
        match role {
            Some(Role::Follow(wait)) => {
                let timeout = cache.lock_timeout;
                Answer::Later(Box::pin(async move {
                    let _ = tokio::time::timeout(timeout, wait).await;
                    if let Some(out) = fresh_after_wait(&ask) {
                        return out;
                    }
                    let resp = pending.await;
                    store_miss(ask, resp, None, fwd, true)
                }))
            }
            Some(Role::Lead(leader)) => Answer::Later(Box::pin(async move {
                let resp = pending.await;
                store_miss(ask, resp, Some(leader), fwd, false)
            })),
            None => Answer::Later(Box::pin(async move {
                let resp = pending.await;
                store_miss(ask, resp, None, fwd, false)
            })),
        }
    }

    /// An unsafe method: passed on, and a success invalidates what is stored for its target
    /// and for the same-origin Location and Content-Location it answers with (§4.4).
    fn invalidating(&self, cache: &Cache, req: &Request) -> Answer {
        let secure = req.secure;
        let authority = Bytes::copy_from_slice(req.authority().unwrap_or_default());
        let key = cache::key(secure, &authority, req.target());
        let store = cache.store.clone();
        let pending = self.forward(req);
        Answer::Later(Box::pin(async move {
            let mut resp = pending.await;
            if (200..400).contains(&resp.status) {
                store.invalidate(&key);
                for name in [&b"location"[..], b"content-location"] {
                    let target = resp
                        .header(name)
                        .and_then(|v| same_origin(v, secure, &authority));
                    if let Some(t) = target {
                        store.invalidate(&cache::key(secure, &authority, &t));
                    }
                }
            }
            resp.headers.push((
                Bytes::from_static(CACHE_STATUS.as_bytes()),
                Bytes::from_static(b"spate; fwd=method"),
            ));
            resp
        }))
    }
}

/// `PURGE` (with `purge: ON`): from a loopback address, or from anywhere with the
/// `purge-secret` in `Purge-Secret`; a target ending in `*` drops every URL it prefixes. 200
/// with the count, 404 when nothing was stored.
fn purge(cache: &Cache, req: &Request) -> Response {
    let with_secret = cache.purge_secret.as_ref().is_some_and(|s| {
        req.header(b"purge-secret")
            .is_some_and(|v| same_secret(v.trim_ascii(), s))
    });
    if !with_secret && !req.peer.ip().to_canonical().is_loopback() {
        tracing::warn!(
            "proxy.cache: PURGE {} from {} refused: not from this machine and without the purge-secret",
            String::from_utf8_lossy(req.target()),
            req.peer.ip()
        );
        return Response::error(403);
    }
    let target = req.target();
    let authority = req.authority().unwrap_or_default();
    let n = match target.strip_suffix(b"*") {
        Some(prefix) => cache
            .store
            .invalidate_prefix(&cache::key(req.secure, authority, prefix)),
        None => cache
            .store
            .invalidate(&cache::key(req.secure, authority, target)),
    };
    Counts::add(&cache.store.counts.purged, n as u64);
    let status = if n == 0 { 404 } else { 200 };
    Response {
        status,
        headers: vec![(
            Bytes::from_static(b"Content-Type"),
            Bytes::from_static(b"text/plain; charset=utf-8"),
        )]
        .into(),
        body: Body::Bytes(Bytes::from(format!("purged {n}\n"))),
    }
}

/// Whether `given` is `secret`, in time that does not depend on where they differ.
fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    given.len() == secret.len()
        && given
            .iter()
            .zip(secret)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn later_with(pending: crate::http::Pending, status: &'static str) -> Answer {
    Answer::Later(Box::pin(async move {
        let mut resp = pending.await;
        resp.headers.push((
            Bytes::from_static(CACHE_STATUS.as_bytes()),
            Bytes::from_static(status.as_bytes()),
        ));
        resp
    }))
}

/// The target of a URI reference of the same origin: a path, or an absolute URI with the
/// request's scheme and authority.
fn same_origin(v: &[u8], secure: bool, authority: &[u8]) -> Option<Vec<u8>> {
    if v.starts_with(b"/") && !v.starts_with(b"//") {
        return Some(v.to_vec());
    }
    let scheme: &[u8] = if secure { b"https://" } else { b"http://" };
    if v.len() < scheme.len() || !v[..scheme.len()].eq_ignore_ascii_case(scheme) {
        return None;
    }
    let rest = &v[scheme.len()..];
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    if !rest[..end].eq_ignore_ascii_case(authority) {
        return None;
    }
    Some(if end == rest.len() {
        b"/".to_vec()
    } else {
        rest[end..].to_vec()
    })
}

/// After waiting for another request's fetch of the key: the answer from the store when
/// that left a fresh response there.
fn fresh_after_wait(ask: &Ask) -> Option<Response> {
    let fields = &ask.fields;
    let found = ask
        .store
        .lookup(&ask.key, |n| vary_value(n, policy::fields(fields, n)));
    Counts::add(&ask.store.counts.collapsed, 1);
    let Found::Hit(s) = found else {
        return None;
    };
    let age = s.timing.age(cache::now());
    (policy::usable(age, s.lifetime, &s.control, &ask.control) == Use::Fresh).then(|| {
        answer(
            &s,
            age,
            &ask.validators,
            Bytes::from_static(b"spate; hit; collapsed"),
        )
    })
}

/// Adds our validators for `s` to the request; false when it has none.
fn add_validators(up: &mut UpstreamRequest, s: &Stored) -> bool {
    let mut added = false;
    if let Some(etag) = policy::field(&s.headers, b"etag") {
        up.headers
            .push((Bytes::from_static(b"If-None-Match"), etag.clone()));
        added = true;
    }
    if let Some(lm) = policy::field(&s.headers, b"last-modified") {
        up.headers
            .push((Bytes::from_static(b"If-Modified-Since"), lm.clone()));
        added = true;
    }
    added
}

/// The answer from a stored response whose age is `age`: 304 when the client's own
/// conditions hold, else the stored response; `Age` and `Cache-Status` added.
fn answer(s: &Stored, age: u64, v: &Validators, status: Bytes) -> Response {
    let mut headers = crate::http::recycle::header_list(s.headers.len() + 2);
    headers.extend_from_slice(&s.headers);
    headers.push((Bytes::from_static(b"Age"), age_value(age)));
    headers.push((Bytes::from_static(CACHE_STATUS.as_bytes()), status));
    if v.not_modified(s) {
        return Response {
            status: 304,
            headers: headers.into(),
            body: Body::Empty,
        };
    }
    if let (Some(range), 200) = (v.ranges_of(s), s.status) {
        let size = s.body.len() as u64;
        match range::parse(range, size) {
            Ranges::Single(offset, len) => {
                let content_range = format!("bytes {offset}-{}/{size}", offset + len - 1);
                headers.push((
                    Bytes::from_static(b"Content-Range"),
                    Bytes::from(content_range),
                ));
                // Within the body: `parse` keeps a range inside the size.
                let (start, end) = (offset as usize, (offset + len) as usize);
                return Response {
                    status: 206,
                    headers: headers.into(),
                    body: Body::Bytes(s.body.slice(start..end)),
                };
            }
            Ranges::Unsatisfiable => {
                headers.push((
                    Bytes::from_static(b"Content-Range"),
                    Bytes::from(format!("bytes */{size}")),
                ));
                return Response {
                    status: 416,
                    headers: headers.into(),
                    body: Body::Empty,
                };
            }
            Ranges::Multi(list) => {
                // multipart/byteranges, as the file handler answers: the parts of the
                // stored body, each with the stored type.
                let content_type = policy::field(&s.headers, b"content-type")
                    .cloned()
                    .unwrap_or_default();
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(b"content-type"));
                headers.push((
                    Bytes::from_static(b"Content-Type"),
                    multipart::content_type(&BOUNDARY),
                ));
                let parts = multipart::parts(&BOUNDARY, &content_type, &list, size, |o, l| {
                    // Within the body: `parse` keeps every range inside the size.
                    BodyPart::Bytes(s.body.slice(o as usize..(o + l) as usize))
                });
                return Response {
                    status: 206,
                    headers: headers.into(),
                    body: Body::Parts(parts),
                };
            }
            // No range usable: the whole response.
            Ranges::Whole => {}
        }
    }
    let body = if s.trailers.is_empty() {
        Body::Bytes(s.body.clone())
    } else {
        // The body then its trailers, as they came (chunked: no declared length).
        Body::Stream(StreamBody {
            len: None,
            stream: Box::new(WithTrailers {
                body: Some(s.body.clone()),
                trailers: Some(s.trailers.clone()),
            }),
        })
    };
    Response {
        status: s.status,
        headers: headers.into(),
        body,
    }
}

/// A stored body given again with the trailers it was stored with.
struct WithTrailers {
    body: Option<Bytes>,
    trailers: Option<Vec<(Bytes, Bytes)>>,
}

impl BodyStream for WithTrailers {
    fn poll_frame(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Next> {
        if let Some(b) = self.body.take().filter(|b| !b.is_empty()) {
            return std::task::Poll::Ready(Some(Ok(Frame::Data(b))));
        }
        std::task::Poll::Ready(self.trailers.take().map(|t| Ok(Frame::Trailers(t))))
    }
}

/// The `Age` field's value; 0 to 99 (most hits) without an allocation.
fn age_value(age: u64) -> Bytes {
    // "0" to "99", one after the other.
    static SMALL: &[u8; 190] = b"0123456789101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
    match age {
        0..=9 => Bytes::from_static(&SMALL[age as usize..age as usize + 1]),
        10..=99 => {
            let at = 10 + (age as usize - 10) * 2;
            Bytes::from_static(&SMALL[at..at + 2])
        }
        _ => Bytes::from(age.to_string()),
    }
}

/// The backend's answer to a revalidation of `s`: a 304 about it freshens the stored head
/// and the stored response is answered; anything else is a new response, stored as a miss.
/// `leader`: the fill others wait for, dropped once the store has the answer.
fn revalidated(ask: Ask, s: Arc<Stored>, resp: Response, leader: Option<Leader>) -> Response {
    if resp.status != 304 || !policy::validates(&s.headers, &resp.headers) {
        return stale_on_error(ask, s, resp, "stale", leader);
    }
    let response_time = cache::now();
    let mut headers = policy::freshen(&s.headers, &resp.headers);
    let timing = Timing::new(&headers, ask.request_time, response_time);
    headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case(b"age") && !n.eq_ignore_ascii_case(b"connection"));
    let control = policy::response_control(&headers);
    let lifetime = policy::lifetime(s.status, &headers, &control, response_time);
    let fresh = Stored {
        status: s.status,
        headers,
        body: s.body.clone(),
        trailers: s.trailers.clone(),
        timing,
        control,
        lifetime,
        vary: s.vary.clone(),
        live: Default::default(),
    };
    Counts::add(&ask.store.counts.revalidated, 1);
    let age = fresh.timing.age(response_time);
    let out = answer(
        &fresh,
        age,
        &ask.validators,
        Bytes::from_static(b"spate; fwd=stale; fwd-status=304"),
    );
    if !control.no_store {
        ask.store.insert(ask.key, fresh);
    }
    // Those waiting find the fresh entry.
    drop(leader);
    out
}

/// The backend's answer for a stale entry that is not a 304: a server error (or no answer,
/// 502/504) within the entry's `stale-if-error` (RFC 5861) gives the stale entry; anything
/// else is a new response, stored as a miss.
fn stale_on_error(
    ask: Ask,
    s: Arc<Stored>,
    resp: Response,
    fwd: &str,
    leader: Option<Leader>,
) -> Response {
    let age = s.timing.age(cache::now());
    if resp.status >= 500 && policy::stale_if_error(age, s.lifetime, &s.control) {
        Counts::add(&ask.store.counts.stale, 1);
        return answer(
            &s,
            age,
            &ask.validators,
            Bytes::from(format!(
                "spate; hit; fwd=stale; fwd-status={}; detail=stale-if-error",
                resp.status
            )),
        );
    }
    store_miss(ask, resp, leader, fwd, false)
}

/// Reads a body to its end (a background refresh's, so that it is stored).
async fn drain(body: Body) {
    if let Body::Stream(mut s) = body {
        while let Some(Ok(_)) = std::future::poll_fn(|cx| s.stream.poll_frame(cx)).await {}
    }
}

/// The backend's response to a miss (or a failed revalidation): stored as it streams to
/// the client when it may be.
fn store_miss(
    ask: Ask,
    mut resp: Response,
    leader: Option<Leader>,
    fwd: &str,
    collapsed: bool,
) -> Response {
    let response_time = cache::now();
    let control = policy::response_control(&resp.headers);
    let verdict = if ask.head {
        // A HEAD's response has no body to store.
        Err("head")
    } else {
        policy::storable(
            resp.status,
            &resp.headers,
            &control,
            &ask.control,
            ask.authorization,
        )
        .map_err(|why| why.detail())
    };
    let collapsed = if collapsed { "; collapsed" } else { "" };
    let status = match verdict {
        Ok(()) => {
            let vary = vary_names(&resp.headers)
                .into_iter()
                .map(|n| {
                    let v = vary_value(&n, policy::fields(&ask.fields, &n));
                    (n, v)
                })
                .collect();
            let timing = Timing::new(&resp.headers, ask.request_time, response_time);
            let lifetime = policy::lifetime(resp.status, &resp.headers, &control, response_time);
            let headers = resp
                .headers
                .iter()
                .filter(|(n, _)| {
                    !n.eq_ignore_ascii_case(b"age") && !n.eq_ignore_ascii_case(b"connection")
                })
                .cloned()
                .collect();
            let head = Stored {
                status: resp.status,
                headers,
                body: Bytes::new(),
                trailers: Vec::new(),
                timing,
                control,
                lifetime,
                vary,
                live: Default::default(),
            };
            let filling = Filling::new(ask.store.clone(), ask.key, head, leader);
            let (body, stored) = filling.wrap(std::mem::take(&mut resp.body));
            resp.body = body;
            if stored {
                format!(
                    "spate; fwd={fwd}; fwd-status={}; stored{collapsed}",
                    resp.status
                )
            } else {
                format!(
                    "spate; fwd={fwd}; fwd-status={}; detail=too-large{collapsed}",
                    resp.status
                )
            }
        }
        Err(why) => format!(
            "spate; fwd={fwd}; fwd-status={}; detail={why}{collapsed}",
            resp.status
        ),
    };
    resp.headers.push((
        Bytes::from_static(CACHE_STATUS.as_bytes()),
        Bytes::from(status),
    ));
    resp
}

#[cfg(test)]
mod tests;
