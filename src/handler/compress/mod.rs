//! On-the-fly compression (`compress`): a filter that takes a response and gives back a
//! response, whichever handler made it, knowing nothing of protocols.
//!
//! What is compressed: text, JSON, JavaScript, XML and `+xml`/`+json` types (SVG among them)
//! of any status but 1xx, 204, 206 and 304, unless the request is HEAD, the response is
//! already encoded, says `Cache-Control: no-transform`, or is known to be shorter than
//! `compress-minimum-size`. h2o's `x-compress-hint: on|off|auto` response field overrides the
//! type check and is removed. Such responses always get `Vary: Accept-Encoding`; the compressed
//! variant has its strong ETag made weak, no Content-Length and no Accept-Ranges.
//!
//! The coding is the enabled one the client weighs highest (q-values, `q=0` refuses), ties
//! going to br, then zstd, then gzip, as in h2o.

mod body;
mod encoder;

use crate::config::CompressConf;
use crate::http::accept_encoding::codings;
use crate::http::{Body, Request, Response, StreamBody};
use bytes::Bytes;

/// A content coding spate produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl Coding {
    /// Server preference, best first.
    const PREFERENCE: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// The `Content-Encoding` value.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    fn named(name: &[u8]) -> Option<Coding> {
        if name.eq_ignore_ascii_case(b"x-gzip") {
            return Some(Coding::Gzip);
        }
        Coding::PREFERENCE
            .into_iter()
            .find(|c| name.eq_ignore_ascii_case(c.name().as_bytes()))
    }
}

/// What the request allows: the coding to use, if any. Small and `Copy`, so a driver can keep
/// it while the answer is pending, after the request itself is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated(Option<Coding>);

impl Negotiated {
    /// No compression (the request is HEAD, or accepts nothing spate offers).
    pub const NONE: Negotiated = Negotiated(None);

    pub fn coding(self) -> Option<Coding> {
        self.0
    }
}

/// A path's compression settings.
pub struct Compressor {
    conf: CompressConf,
}

impl Compressor {
    pub fn new(conf: &CompressConf) -> Compressor {
        Compressor { conf: conf.clone() }
    }

    fn level(&self, c: Coding) -> Option<u32> {
        match c {
            Coding::Br => self.conf.br,
            Coding::Zstd => self.conf.zstd,
            Coding::Gzip => self.conf.gzip,
        }
    }

    /// The coding to use for `req`'s response.
    pub fn negotiate(&self, req: &Request) -> Negotiated {
        if req.is_head() {
            return Negotiated::NONE;
        }
        let mut weight = [None::<u16>; 3];
        let mut star = None;
        for (name, q) in codings(req.header_all(b"accept-encoding")) {
            match Coding::named(name) {
                Some(c) => {
                    let w = &mut weight[c as usize];
                    *w = Some(w.map_or(q, |old| old.max(q)));
                }
                None if name == b"*" => star = Some(q),
                None => {}
            }
        }
        let mut best: Option<(Coding, u16)> = None;
        for c in Coding::PREFERENCE {
            if self.level(c).is_none() {
                continue;
            }
            let q = weight[c as usize].or(star).unwrap_or(0);
            if q > 0 && best.is_none_or(|(_, bq)| q > bq) {
                best = Some((c, q));
            }
        }
        Negotiated(best.map(|(c, _)| c))
    }

    /// Compresses `resp` with the negotiated coding when the rules allow, and marks every
    /// response that could have been compressed with `Vary: Accept-Encoding`.
    pub fn apply(&self, n: Negotiated, resp: &mut Response) {
        self.apply_with(|| n, resp);
    }

    /// [`Compressor::apply`] for a response ready now: reads the request's Accept-Encoding
    /// only when the response could be compressed.
    pub fn apply_now(&self, req: &Request, resp: &mut Response) {
        self.apply_with(|| self.negotiate(req), resp);
    }

    fn apply_with(&self, negotiate: impl FnOnce() -> Negotiated, resp: &mut Response) {
        if resp.status < 200 || matches!(resp.status, 204 | 206 | 304) {
            return;
        }
        let hint = take_hint(resp);
        if hint == Hint::Off || resp.body.is_empty() || matches!(resp.body, Body::Parts(_)) {
            return;
        }
        let mut typed = false;
        for (name, value) in &resp.headers {
            if name.eq_ignore_ascii_case(b"content-encoding")
                || (name.eq_ignore_ascii_case(b"cache-control") && has_no_transform(value))
            {
                return;
            }
            typed |= name.eq_ignore_ascii_case(b"content-type") && compressible(value);
        }
        if !typed && hint != Hint::On {
            return;
        }
        if resp
            .body
            .known_len()
            .is_some_and(|len| len < self.conf.minimum_size)
        {
            return;
        }
        add_vary(resp);
        let Some((coding, level)) = negotiate().0.and_then(|c| Some((c, self.level(c)?))) else {
            return;
        };
        let Some(body) = body::CompressedBody::new(std::mem::take(&mut resp.body), coding, level)
        else {
            return;
        };
        resp.body = Body::Stream(StreamBody {
            len: None,
            stream: Box::new(body),
        });
        resp.headers.retain(|(name, _)| {
            !name.eq_ignore_ascii_case(b"content-length")
                && !name.eq_ignore_ascii_case(b"accept-ranges")
        });
        for (name, value) in &mut resp.headers {
            if name.eq_ignore_ascii_case(b"etag") && value.starts_with(b"\"") {
                let mut weak = Vec::with_capacity(value.len() + 2);
                weak.extend_from_slice(b"W/");
                weak.extend_from_slice(value);
                *value = weak.into();
            }
        }
        resp.headers.push((
            Bytes::from_static(b"Content-Encoding"),
            Bytes::from_static(coding.name().as_bytes()),
        ));
    }
}

/// h2o's `x-compress-hint` response field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    Auto,
    On,
    Off,
}

/// Reads and removes `x-compress-hint`.
fn take_hint(resp: &mut Response) -> Hint {
    let Some(i) = resp
        .headers
        .iter()
        .position(|(n, _)| n.eq_ignore_ascii_case(b"x-compress-hint"))
    else {
        return Hint::Auto;
    };
    let (_, v) = resp.headers.remove(i);
    match v.trim_ascii() {
        v if v.eq_ignore_ascii_case(b"on") => Hint::On,
        v if v.eq_ignore_ascii_case(b"off") => Hint::Off,
        _ => Hint::Auto,
    }
}

/// Whether a media type is text that compresses: `text/*`, JSON, JavaScript, XML, and any
/// `+xml` or `+json` type (SVG, Atom, JSON-LD). Not images, fonts, archives or wasm.
pub fn compressible(content_type: &[u8]) -> bool {
    let media = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    let starts = |p: &[u8]| media.len() >= p.len() && media[..p.len()].eq_ignore_ascii_case(p);
    let ends =
        |s: &[u8]| media.len() >= s.len() && media[media.len() - s.len()..].eq_ignore_ascii_case(s);
    const APPLICATION: [&[u8]; 5] = [
        b"application/json",
        b"application/javascript",
        b"application/x-javascript",
        b"application/ecmascript",
        b"application/xml",
    ];
    (starts(b"text/") && media.len() > 5)
        || ends(b"+xml")
        || ends(b"+json")
        || APPLICATION.iter().any(|a| media.eq_ignore_ascii_case(a))
}

fn has_no_transform(cache_control: &[u8]) -> bool {
    cache_control
        .split(|&b| b == b',')
        .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
}

/// Adds `Accept-Encoding` to Vary unless a Vary field names it or `*` already.
fn add_vary(resp: &mut Response) {
    let covered = resp
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"vary"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .any(|t| {
            let t = t.trim_ascii();
            t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
        });
    if !covered {
        resp.headers.push((
            Bytes::from_static(b"Vary"),
            Bytes::from_static(b"Accept-Encoding"),
        ));
    }
}

#[cfg(test)]
mod tests;
