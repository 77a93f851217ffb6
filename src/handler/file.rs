//! The file handler: maps a request path under `file.dir` to a file and answers it with
//! conditional requests, ranges, index files, directory listings and precompressed siblings.
//!
//! Choices where h2o and nginx differ or the RFCs leave room:
//! - Path errors: see `path` (escaping the root or a bad escape -> 400, `%2F` -> 404).
//! - Range policy: see `range` (over 16 ranges, or ranges adding up to more than the file
//!   as overlaps do -> the whole file with 200); several ranges: see `multipart`.
//! - `file.send-compressed`: br is preferred over gzip; a compressed answer ignores Range and
//!   sends the whole compressed file; its ETag is the sibling's own, tagged `-br`/`-gzip`.
//! - Non-regular files (FIFOs, sockets, devices) -> 403; they are opened with O_NONBLOCK so a
//!   FIFO cannot stall the worker. Symlinks are followed, as in h2o and nginx by default.
//! - A directory's index choice is cached with the index file; a newly created index file
//!   of higher priority is noticed only when the cached one changes or goes away.
//!
//! The hot path (a cached file) is: the path decoded into a reused buffer (or not at all when
//! it is the handler's last one), one lookup in the per-worker [`OpenFileCache`] (no hash when
//! it is the cache's last entry), and a 200's header fields shared by reference from the
//! entry, built on its first answer. No syscall while the entry is fresh; one read of the
//! coarse clock.

mod cache;
mod conditional;
mod encoding;
mod gunzip;
mod listing;
pub(super) mod multipart;
mod path;
pub(super) mod range;

pub use cache::{OpenFileCache, DEFAULT_CAPACITY, DEFAULT_REVALIDATE_AFTER, SMALL_FILE};
pub use range::MAX_RANGES;

/// The parsers of request fields and paths behind the file handler, public only for the fuzz
/// targets in fuzz/.
#[doc(hidden)]
pub mod parsers {
    pub use super::conditional::{
        if_range_matches, match_allows, modified_after, none_match, not_modified_since,
    };
    pub use super::path::{append_normalized, PathError};
    pub use super::range::{parse as parse_range, Ranges};
}

use crate::config::FileConf;
use crate::http::recycle::HeaderList;
use crate::http::response::BodyPart;
use crate::http::{Answer, Body, FileRange, Handler, Headers, Method, Request, Response};
use bytes::Bytes;
use cache::{Entry, Opened, Representation, Tick, WholeHead};
use encoding::Coding;
use path::PathError;
use range::Ranges;
use std::cell::RefCell;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::rc::Rc;

/// Serves one `file.dir`.
pub struct FileHandler {
    conf: FileConf,
    cache: Rc<RefCell<OpenFileCache>>,
    /// The path prefix this handler is mounted on, without a trailing slash.
    prefix: Vec<u8>,
    /// `file.dir` as bytes without trailing slashes (empty for `/`).
    base: Vec<u8>,
    /// This handler's settings id in the cache (see `OpenFileCache::profile`).
    profile: usize,
    /// The cache's `hold_max`, for files opened while it is borrowed.
    hold_max: u64,
    /// multipart/byteranges boundary, random per handler.
    boundary: String,
    /// The last request path and the cache key it normalised to, reused so a request
    /// allocates no path and the same path again is not decoded again.
    scratch: RefCell<Scratch>,
    /// Content types found so far, by the file name's extension as written (`None`: no
    /// extension): a file newly opened (a cache miss) costs no table search and no
    /// formatting for an extension seen before.
    types_seen: RefCell<Vec<TypeSeen>>,
}

/// A file name's extension (`None`: none) and the content type it maps to.
type TypeSeen = (Option<Box<[u8]>>, Bytes);

/// Extensions whose content type a handler remembers; a site with more types finds the
/// others each time.
const TYPES_SEEN_MAX: usize = 32;

/// A request path (below the prefix) and the key it normalises to.
struct Scratch {
    /// Empty when `key` holds no valid key (a request path is never empty here).
    raw: Vec<u8>,
    key: Vec<u8>,
    dir_like: bool,
}

impl FileHandler {
    /// A handler for `conf` mounted at `/`. Call [`FileHandler::with_prefix`] for other paths.
    pub fn new(conf: FileConf, cache: Rc<RefCell<OpenFileCache>>) -> FileHandler {
        let dir = conf.dir.as_os_str().as_bytes();
        let base = if dir.is_empty() {
            // An unset directory must not turn into the filesystem root.
            b".".to_vec()
        } else {
            let trimmed = dir.len() - dir.iter().rev().take_while(|&&b| b == b'/').count();
            dir[..trimmed].to_vec()
        };
        let profile = cache.borrow_mut().profile(&conf.mime_types, &conf.index);
        let hold_max = cache.borrow().hold_max();
        let boundary = multipart::boundary();
        FileHandler {
            conf,
            cache,
            prefix: Vec::new(),
            base,
            profile,
            hold_max,
            boundary,
            scratch: RefCell::new(Scratch {
                raw: Vec::with_capacity(256),
                key: Vec::with_capacity(256),
                dir_like: false,
            }),
            types_seen: RefCell::new(Vec::new()),
        }
    }

    /// Mounts the handler on `prefix` (as in `paths:`): `/images/a.png` under prefix `/images`
    /// is looked up as `a.png` in `file.dir`, as h2o does.
    pub fn with_prefix(mut self, prefix: &str) -> FileHandler {
        self.prefix = prefix.trim_end_matches('/').as_bytes().to_vec();
        self
    }
}

impl Handler for FileHandler {
    fn answers_now(&self) -> bool {
        true
    }

    fn handle(&self, req: &Request) -> Answer {
        Answer::Now(self.respond_now(req))
    }

    /// Only a file's contents from the open-file cache, given again while the cache would
    /// answer from the same entry unchecked ([`crate::http::OpenFile::reusable_now`]): other
    /// answers (errors, redirects, 304) were decided by looking at the disk or the clock.
    fn answer_repeats(&self, resp: &Response) -> bool {
        matches!(&resp.body, Body::File(f) if f.file.contents.is_some() && f.file.reusable_now())
    }
}

impl FileHandler {
    /// The answer, always ready now.
    pub fn respond_now(&self, req: &Request) -> Response {
        if !matches!(req.method, Method::Get | Method::Head) {
            return Response::error(405).with_header("Allow", Bytes::from_static(b"GET, HEAD"));
        }
        let rest = if self.prefix.is_empty() {
            Some(req.path())
        } else {
            req.path().strip_prefix(self.prefix.as_slice())
        };
        let Some(rest) = rest else {
            return Response::error(404);
        };
        if rest.is_empty() {
            // The mount point itself (`/images`): it is a directory.
            return self.redirect_to_dir(req, b"");
        }
        let mut scratch = self.scratch.borrow_mut();
        if scratch.raw != rest {
            let s = &mut *scratch;
            s.raw.clear();
            s.key.clear();
            s.key.extend_from_slice(&self.base);
            s.dir_like = match path::append_normalized(rest, &mut s.key) {
                Ok(d) => d,
                Err(PathError::BadRequest) => return Response::error(400),
                Err(PathError::NotFound) => return Response::error(404),
            };
            if s.dir_like {
                s.key.push(b'/');
            }
            s.raw.extend_from_slice(rest);
        }
        let (key, dir_like) = (&scratch.key, scratch.dir_like);
        let mut cache = self.cache.borrow_mut();
        if let Some(entry) = cache.lookup(key, Tick::now()) {
            // A directory's index choice depends on the handler's `file.index`.
            if !dir_like || entry.profile == self.profile {
                return self.serve(req, entry);
            }
        }
        self.resolve(req, key, dir_like, &mut cache)
    }
}

/// `file.file`: one file for every request of the path, whatever the path below the prefix
/// (as h2o). A handler of its own, so `file.dir`'s answers pay no check for it.
pub struct OneFile(pub FileHandler);

impl Handler for OneFile {
    fn answers_now(&self) -> bool {
        true
    }

    fn handle(&self, req: &Request) -> Answer {
        Answer::Now(self.0.single_file(req))
    }

    fn answer_repeats(&self, resp: &Response) -> bool {
        self.0.answer_repeats(resp)
    }
}

impl FileHandler {
    /// [`OneFile`]'s answer.
    fn single_file(&self, req: &Request) -> Response {
        if !matches!(req.method, Method::Get | Method::Head) {
            return Response::error(405).with_header("Allow", Bytes::from_static(b"GET, HEAD"));
        }
        let mut cache = self.cache.borrow_mut();
        if let Some(entry) = cache.lookup(&self.base, Tick::now()) {
            return self.serve(req, entry);
        }
        self.resolve(req, &self.base, false, &mut cache)
    }

    /// Cache miss: open what `key` names and answer it.
    fn resolve(
        &self,
        req: &Request,
        key: &[u8],
        dir_like: bool,
        cache: &mut OpenFileCache,
    ) -> Response {
        match open_file(key, cache) {
            Ok(Opened::File(rep)) => {
                let entry = Entry::new(key, rep, self.content_type(key), self.profile);
                let entry = cache.insert(key, entry);
                self.serve(req, entry)
            }
            // `file.file` naming a directory.
            Ok(Opened::Dir) if self.conf.single_file => Response::error(403),
            Ok(Opened::Dir) if !dir_like => {
                self.redirect_to_dir(req, &key[self.base.len().min(key.len())..])
            }
            Ok(Opened::Dir) => self.index(req, key, cache),
            Ok(Opened::Special) => Response::error(403),
            Err(e) if !dir_like && self.conf.send_compressed && is_not_found(&e) => {
                self.compressed_only(req, key, e)
            }
            Err(e) => io_error(e, key),
        }
    }

    /// A file there only precompressed (`name.gz`, no `name`), as h2o answers it: the sibling
    /// the client takes, else with `gunzip` the `.gz` decompressed as it is sent. Not cached:
    /// sites keep their files uncompressed beside the compressed ones, or use `gunzip` to
    /// save disk, not for speed.
    fn compressed_only(&self, req: &Request, key: &[u8], missing: io::Error) -> Response {
        let mut path = Vec::with_capacity(key.len() + 3);
        for c in Coding::ALL {
            let accepted = encoding::accepts(req.header_all(b"accept-encoding"), c);
            let gunzip = c == Coding::Gzip && self.conf.gunzip;
            if !accepted && !gunzip {
                continue;
            }
            path.clear();
            path.extend_from_slice(key);
            path.extend_from_slice(c.suffix());
            let Ok(Opened::File(mut rep)) = cache::open(&path, self.hold_max) else {
                continue;
            };
            rep.mark_coding(c);
            let content_type = self.content_type(key);
            let answer = self.respond(req, &mut rep, &content_type, Some(c), true);
            if accepted || answer.status != 200 {
                return answer;
            }
            // The client does not take gzip: the same fields but Content-Encoding (and the
            // compressed file's ETag), the body decompressed.
            let mut h = crate::http::recycle::header_list(3);
            h.push((name(b"Content-Type"), content_type));
            push_validators(&mut h, &rep, None, true);
            return Response {
                status: 200,
                headers: h.into(),
                body: Body::Stream(crate::http::StreamBody {
                    len: None,
                    stream: Box::new(gunzip::GunzipBody::new(rep.file.clone())),
                }),
            };
        }
        io_error(missing, key)
    }

    /// A directory request (`key` ends in `/`): the first index file, else a listing or 403.
    fn index(&self, req: &Request, key: &[u8], cache: &mut OpenFileCache) -> Response {
        let mut path = Vec::with_capacity(key.len() + 16);
        for name in &self.conf.index {
            path.clear();
            path.extend_from_slice(key);
            path.extend_from_slice(name.as_bytes());
            match open_file(&path, cache) {
                Ok(Opened::File(rep)) => {
                    let entry = Entry::new(&path, rep, self.content_type(&path), self.profile);
                    let entry = cache.insert(key, entry);
                    return self.serve(req, entry);
                }
                Ok(Opened::Dir | Opened::Special) => continue,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return io_error(e, &path),
            }
        }
        if !self.conf.dirlisting {
            return Response::error(403);
        }
        let mut shown = self.prefix.clone();
        shown.extend_from_slice(&key[self.base.len().min(key.len())..]);
        match listing::render(key, &shown) {
            Ok(html) => {
                let mut resp = Response::new(200);
                resp.headers.push((
                    Bytes::from_static(b"Content-Type"),
                    Bytes::from_static(b"text/html; charset=utf-8"),
                ));
                resp.body = Body::Bytes(html);
                resp
            }
            Err(e) => io_error(e, key),
        }
    }

    /// 301 to the directory with a slash: `Location: <prefix><rel>/[?query]`, rebuilt from the
    /// normalised path so that it cannot point off-site (`//evil.example`).
    fn redirect_to_dir(&self, req: &Request, rel: &[u8]) -> Response {
        let query = req.query();
        let mut loc = Vec::with_capacity(self.prefix.len() + rel.len() + 2);
        loc.extend_from_slice(&self.prefix);
        path::encode_path(rel, &mut loc);
        loc.push(b'/');
        if let Some(q) = query {
            loc.push(b'?');
            // Codecs reject control bytes already; escaping them again keeps a header value
            // from ever carrying CR or LF whatever the codec.
            for &b in q {
                if b <= b' ' || b == 0x7f {
                    loc.extend_from_slice(format!("%{b:02X}").as_bytes());
                } else {
                    loc.push(b);
                }
            }
        }
        Response::text(301, "Moved Permanently\n").with_header("Location", loc)
    }

    /// Answers from a cache entry: picks the representation, then validators, then ranges.
    fn serve(&self, req: &Request, entry: &mut Entry) -> Response {
        if entry.profile != self.profile {
            entry.content_type = self.content_type(&entry.path);
            entry.profile = self.profile;
            // Their Content-Type was the old one.
            entry.main.whole = None;
            for rep in entry.variants.iter_mut().flatten().flatten() {
                rep.whole = None;
            }
        }
        let mut coding = None;
        let mut vary = false;
        if self.conf.send_compressed {
            let variants = entry.variants(self.hold_max);
            vary = variants.iter().any(Option::is_some);
            coding = Coding::ALL.into_iter().find(|&c| {
                variants[c.index()].is_some()
                    && encoding::accepts(req.header_all(b"accept-encoding"), c)
            });
        }
        let Entry {
            main,
            variants,
            content_type,
            ..
        } = entry;
        let rep = match coding.and_then(|c| variants.as_mut()?[c.index()].as_mut()) {
            Some(r) => r,
            None => main,
        };
        self.respond(req, rep, content_type, coding, vary)
    }

    fn respond(
        &self,
        req: &Request,
        rep: &mut Representation,
        content_type: &Bytes,
        coding: Option<Coding>,
        vary: bool,
    ) -> Response {
        let etag = self.conf.etag.then_some(&rep.etag);
        let modified = rep.file.modified;
        let asked = Asked::of(req);
        // RFC 9110 section 13.2.2: If-Match, else If-Unmodified-Since, may fail with 412.
        let precondition_ok = if asked.if_match {
            conditional::match_allows(req.header_all(b"if-match"), etag.map(|e| &e[..]))
        } else {
            asked
                .if_unmodified_since
                .is_none_or(|v| !conditional::modified_after(v, modified))
        };
        if !precondition_ok {
            return Response::error(412);
        }
        let not_modified = if asked.if_none_match {
            // An empty tag matches nothing but `*`.
            conditional::none_match(
                req.header_all(b"if-none-match"),
                etag.map_or(&b""[..], |e| e),
            )
        } else {
            asked
                .if_modified_since
                .is_some_and(|v| conditional::not_modified_since(v, modified))
        };
        if not_modified {
            let mut h = crate::http::recycle::header_list(3);
            push_validators(&mut h, rep, etag, vary);
            return Response {
                status: 304,
                headers: h.into(),
                body: Body::Empty,
            };
        }

        let size = rep.file.size;
        let ranges = match asked.range {
            Some(r)
                if coding.is_none()
                    && asked.if_range.is_none_or(|v| {
                        conditional::if_range_matches(v, etag.map(|e| &e[..]), modified)
                    }) =>
            {
                range::parse(r, size)
            }
            _ => Ranges::Whole,
        };
        let file_range = |rep: &Representation, offset, len| FileRange {
            file: rep.file.clone(),
            offset,
            len,
        };
        // A partial answer's fields differ per request: a list of its own.
        match ranges {
            Ranges::Whole => Response {
                status: 200,
                body: Body::File(file_range(rep, 0, size)),
                headers: Headers::shared(self.whole_head(rep, content_type, coding, vary)),
            },
            Ranges::Single(offset, len) => {
                let mut h = crate::http::recycle::header_list(7);
                h.push((name(b"Content-Type"), content_type.clone()));
                push_validators(&mut h, rep, etag, vary);
                h.push((name(b"Accept-Ranges"), Bytes::from_static(b"bytes")));
                h.push((name(b"Content-Range"), content_range(offset, len, size)));
                Response {
                    status: 206,
                    headers: h.into(),
                    body: Body::File(file_range(rep, offset, len)),
                }
            }
            Ranges::Multi(list) => {
                let mut h = crate::http::recycle::header_list(7);
                h.push((
                    name(b"Content-Type"),
                    multipart::content_type(&self.boundary),
                ));
                push_validators(&mut h, rep, etag, vary);
                h.push((name(b"Accept-Ranges"), Bytes::from_static(b"bytes")));
                let parts = multipart::parts(&self.boundary, content_type, &list, size, |o, l| {
                    BodyPart::File(file_range(rep, o, l))
                });
                Response {
                    status: 206,
                    headers: h.into(),
                    body: Body::Parts(parts),
                }
            }
            Ranges::Unsatisfiable => {
                Response::error(416).with_header("Content-Range", format!("bytes */{size}"))
            }
        }
    }

    /// The fields of a 200 with the whole of `rep`: built on its first such answer, then
    /// shared by reference, so a cached file is answered without cloning each field.
    fn whole_head(
        &self,
        rep: &mut Representation,
        content_type: &Bytes,
        coding: Option<Coding>,
        vary: bool,
    ) -> Rc<HeaderList> {
        let etag = self.conf.etag;
        if let Some(w) = rep
            .whole
            .as_ref()
            .filter(|w| w.etag == etag && w.vary == vary)
        {
            return w.fields.clone();
        }
        let mut h = Vec::with_capacity(5);
        h.push((name(b"Content-Type"), content_type.clone()));
        push_validators(&mut h, rep, etag.then_some(&rep.etag), vary);
        match coding {
            Some(c) => h.push((
                name(b"Content-Encoding"),
                Bytes::from_static(c.name().as_bytes()),
            )),
            None => h.push((name(b"Accept-Ranges"), Bytes::from_static(b"bytes"))),
        }
        let fields = Rc::new(h);
        rep.whole = Some(WholeHead {
            etag,
            vary,
            fields: fields.clone(),
        });
        fields
    }

    /// The Content-Type for a file path: `file.mime.*` overrides, then the built-in table
    /// (unless `settypes` replaced it), then the default type; textual types get
    /// `; charset=utf-8`.
    fn content_type(&self, path: &[u8]) -> Bytes {
        let name = match memchr::memrchr(b'/', path) {
            Some(i) => &path[i + 1..],
            None => path,
        };
        let ext = memchr::memrchr(b'.', name).map(|dot| &name[dot + 1..]);
        let mut seen = self.types_seen.borrow_mut();
        if let Some((_, ty)) = seen.iter().find(|(e, _)| e.as_deref() == ext) {
            return ty.clone();
        }
        let ty = self.content_type_of(ext);
        if seen.len() < TYPES_SEEN_MAX {
            seen.push((ext.map(Box::from), ty.clone()));
        }
        ty
    }

    /// [`FileHandler::content_type`] for a file name's extension, looked up.
    fn content_type_of(&self, ext: Option<&[u8]>) -> Bytes {
        let types = &self.conf.mime_types;
        let configured = |ty: &str| {
            with_charset(ty).map_or_else(|| Bytes::copy_from_slice(ty.as_bytes()), Bytes::from)
        };
        let Some(ext) = ext else {
            return configured(&types.default_type);
        };
        let ext = String::from_utf8_lossy(ext).to_ascii_lowercase();
        match types.overrides.iter().find(|(e, _)| *e == ext) {
            Some((_, removed)) if removed.is_empty() => return configured(&types.default_type),
            Some((_, ty)) => return configured(ty),
            None => {}
        }
        match types
            .builtin
            .then(|| mime_guess::from_ext(&ext).first_raw())
            .flatten()
        {
            Some(ty) => with_charset(ty).map_or(Bytes::from_static(ty.as_bytes()), Bytes::from),
            None => configured(&types.default_type),
        }
    }
}

/// The request fields that make an answer conditional or partial, found in one pass over the
/// header (most requests have none of them). The value of each is the first field's; the
/// tag lists (`If-Match`, `If-None-Match`) are read in full when present.
#[derive(Default)]
struct Asked<'a> {
    if_match: bool,
    if_none_match: bool,
    if_unmodified_since: Option<&'a [u8]>,
    if_modified_since: Option<&'a [u8]>,
    range: Option<&'a [u8]>,
    if_range: Option<&'a [u8]>,
}

impl<'a> Asked<'a> {
    fn of(req: &'a Request) -> Asked<'a> {
        let mut a = Asked::default();
        for (n, v) in req.headers() {
            let is = |name: &[u8]| n.eq_ignore_ascii_case(name);
            // By length first: one compare rules out most fields.
            let first = match n.len() {
                5 if is(b"range") => &mut a.range,
                8 if is(b"if-match") => {
                    a.if_match = true;
                    continue;
                }
                8 if is(b"if-range") => &mut a.if_range,
                13 if is(b"if-none-match") => {
                    a.if_none_match = true;
                    continue;
                }
                17 if is(b"if-modified-since") => &mut a.if_modified_since,
                19 if is(b"if-unmodified-since") => &mut a.if_unmodified_since,
                _ => continue,
            };
            first.get_or_insert(v);
        }
        a
    }
}

/// `ty; charset=utf-8` when `ty` is text without parameters, else `None`.
fn with_charset(ty: &str) -> Option<String> {
    let textual = ty.starts_with("text/")
        || ty.ends_with("+xml")
        || ty.ends_with("+json")
        || matches!(
            ty,
            "application/javascript" | "application/json" | "application/xml"
        );
    (textual && !ty.contains(';')).then(|| format!("{ty}; charset=utf-8"))
}

fn push_validators(
    h: &mut Vec<(Bytes, Bytes)>,
    rep: &Representation,
    etag: Option<&Bytes>,
    vary: bool,
) {
    h.push((name(b"Last-Modified"), rep.last_modified.clone()));
    if let Some(e) = etag {
        h.push((name(b"ETag"), e.clone()));
    }
    if vary {
        h.push((name(b"Vary"), Bytes::from_static(b"Accept-Encoding")));
    }
}

fn name(n: &'static [u8]) -> Bytes {
    Bytes::from_static(n)
}

fn content_range(offset: u64, len: u64, size: u64) -> Bytes {
    let last = (offset + len).saturating_sub(1);
    format!("bytes {offset}-{last}/{size}").into()
}

/// Opens `path`; when the process is out of descriptors, closes the cached files and retries.
fn open_file(path: &[u8], cache: &mut OpenFileCache) -> io::Result<Opened> {
    match cache::open(path, cache.hold_max()) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
            tracing::warn!("out of file descriptors; emptying the open-file cache");
            cache.clear();
            cache::open(path, cache.hold_max())
        }
        other => other,
    }
}

fn is_not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG)
        )
}

/// Missing -> 404, permission denied -> 403, anything else -> 500 with one log line.
fn io_error(e: io::Error, path: &[u8]) -> Response {
    if is_not_found(&e) {
        return Response::error(404);
    }
    if e.kind() == io::ErrorKind::PermissionDenied {
        return Response::error(403);
    }
    tracing::warn!(path = %String::from_utf8_lossy(path), error = %e, "file handler I/O error");
    Response::error(500)
}

#[cfg(test)]
mod tests;
