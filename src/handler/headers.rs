//! `header.add`, `header.append`, `header.merge`, `header.set`, `header.setifempty`,
//! `header.unset` and `header.unsetunless`: edits applied to every response of a path, in
//! configuration order; and `expires`, a `Cache-Control: max-age` on 200 answers. The proxy
//! applies `proxy.header.*` the same way to the request it sends to the backend.

use crate::config::{HeaderCommand, HeaderOp};
use crate::http::Response;
use bytes::Bytes;

pub struct HeaderRewriter {
    commands: Vec<(HeaderOp, Bytes, Bytes)>,
    /// `expires`: `max-age=N`, merged into Cache-Control of a 200 answer before the commands
    /// run (so that they can still change it).
    max_age: Option<Bytes>,
    /// `throttle-response: ON`: an answer's `X-Traffic` throttles its body, once the
    /// commands (which may add the field) have run.
    throttle: bool,
    /// Nothing to do (no commands, no `expires`, no throttle), known when built: the one
    /// check a request pays on a path without any of them.
    empty: bool,
}

const CACHE_CONTROL: Bytes = Bytes::from_static(b"Cache-Control");

impl HeaderRewriter {
    pub fn is_empty(&self) -> bool {
        self.empty
    }

    /// With `throttle-response: ON`.
    pub fn throttled(mut self, on: bool) -> HeaderRewriter {
        self.throttle = on;
        self.empty &= !on;
        self
    }

    /// The commands of a path and its `expires` (seconds).
    pub fn with_expires(commands: &[HeaderCommand], expires: Option<u64>) -> HeaderRewriter {
        let plain = HeaderRewriter::new(commands);
        HeaderRewriter {
            max_age: expires.map(|s| Bytes::from(format!("max-age={s}"))),
            empty: plain.empty && expires.is_none(),
            ..plain
        }
    }

    pub fn new(commands: &[HeaderCommand]) -> HeaderRewriter {
        HeaderRewriter {
            max_age: None,
            throttle: false,
            empty: commands.is_empty(),
            commands: commands
                .iter()
                .map(|c| {
                    (
                        c.op,
                        Bytes::from(c.name.clone()),
                        Bytes::from(c.value.clone()),
                    )
                })
                .collect(),
        }
    }

    /// Inline: most paths have no commands, and every response passes here.
    #[inline]
    pub fn apply(&self, resp: &mut Response) {
        if !self.is_empty() {
            self.apply_to_response(resp);
        }
    }

    fn apply_to_response(&self, resp: &mut Response) {
        if let Some(max_age) = self.max_age.as_ref().filter(|_| resp.status == 200) {
            append(&mut resp.headers, &CACHE_CONTROL, max_age, true);
        }
        self.apply_to(&mut resp.headers);
        if self.throttle {
            super::throttle::apply(resp);
        }
    }

    /// Applies the commands to a list of header fields.
    pub fn apply_to(&self, h: &mut Vec<(Bytes, Bytes)>) {
        for (op, name, value) in &self.commands {
            let pos = h.iter().position(|(n, _)| n.eq_ignore_ascii_case(name));
            match op {
                HeaderOp::Add => h.push((name.clone(), value.clone())),
                HeaderOp::Set => {
                    h.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                    h.push((name.clone(), value.clone()));
                }
                HeaderOp::SetIfEmpty => {
                    if pos.is_none() {
                        h.push((name.clone(), value.clone()));
                    }
                }
                HeaderOp::Unset => h.retain(|(n, _)| !n.eq_ignore_ascii_case(name)),
                // The kept names are listed in the value (see `HeaderCommand::kept_names`).
                HeaderOp::UnsetUnless => h.retain(|(n, _)| {
                    value
                        .split(|&b| b == b',')
                        .any(|k| n.eq_ignore_ascii_case(k.trim_ascii()))
                }),
                HeaderOp::CookieUnset | HeaderOp::CookieUnsetUnless => {
                    filter_cookies(h, value, *op == HeaderOp::CookieUnsetUnless)
                }
                HeaderOp::Append => append(h, name, value, false),
                HeaderOp::Merge => append(h, name, value, true),
            }
        }
    }
}

/// `cookie.unset` / `cookie.unsetunless`: the cookies of every `Cookie` field, less those
/// named in `names` (comma-separated) or, with `keep_named`, less the others; a field left
/// empty goes. Cookies are rejoined with `; ` (as h2o does).
fn filter_cookies(h: &mut Vec<(Bytes, Bytes)>, names: &Bytes, keep_named: bool) {
    let named = |cookie: &[u8]| {
        let name = cookie.split(|&b| b == b'=').next().unwrap_or_default();
        names
            .split(|&b| b == b',')
            .any(|n| n.trim_ascii() == name.trim_ascii())
    };
    for (n, v) in h.iter_mut() {
        if !n.eq_ignore_ascii_case(b"cookie") {
            continue;
        }
        let mut out = Vec::with_capacity(v.len());
        for cookie in v.split(|&b| b == b';').map(<[u8]>::trim_ascii) {
            if cookie.is_empty() || named(cookie) != keep_named {
                continue;
            }
            if !out.is_empty() {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(cookie);
        }
        *v = Bytes::from(out);
    }
    h.retain(|(n, v)| !(n.eq_ignore_ascii_case(b"cookie") && v.is_empty()));
}

/// Appends `, value` to the first `name` field, or adds the field; with `merge`, not when the
/// value is one of its comma-separated tokens already.
fn append(h: &mut Vec<(Bytes, Bytes)>, name: &Bytes, value: &Bytes, merge: bool) {
    let Some(i) = h.iter().position(|(n, _)| n.eq_ignore_ascii_case(name)) else {
        h.push((name.clone(), value.clone()));
        return;
    };
    let old = &h[i].1;
    if merge
        && old
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii() == value.as_ref())
    {
        return;
    }
    let mut v = Vec::with_capacity(old.len() + 2 + value.len());
    v.extend_from_slice(old);
    v.extend_from_slice(b", ");
    v.extend_from_slice(value);
    h[i].1 = Bytes::from(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(op: HeaderOp, name: &str, value: &str) -> HeaderCommand {
        HeaderCommand {
            op,
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn commands_apply_in_order() {
        let r = HeaderRewriter::new(&[
            cmd(HeaderOp::Add, "X-A", "1"),
            cmd(HeaderOp::Append, "x-a", "2"),
            cmd(HeaderOp::Merge, "X-A", "2"),
            cmd(HeaderOp::Set, "Cache-Control", "no-store"),
            cmd(HeaderOp::SetIfEmpty, "cache-control", "max-age=1"),
            cmd(HeaderOp::Unset, "content-type", ""),
        ]);
        let mut resp = Response::text(200, "x");
        r.apply(&mut resp);
        assert_eq!(resp.header(b"x-a").unwrap().as_ref(), b"1, 2");
        assert_eq!(resp.header(b"cache-control").unwrap().as_ref(), b"no-store");
        assert!(resp.header(b"content-type").is_none());
    }

    #[test]
    fn expires_merges_max_age_into_cache_control_of_200_answers_only() {
        let r = HeaderRewriter::with_expires(&[], Some(86400));
        let mut ok = Response::text(200, "x");
        r.apply(&mut ok);
        assert_eq!(
            ok.header(b"cache-control").unwrap().as_ref(),
            b"max-age=86400"
        );
        let mut private = Response::text(200, "x").with_header("Cache-Control", "private");
        r.apply(&mut private);
        assert_eq!(
            private.header(b"cache-control").unwrap().as_ref(),
            b"private, max-age=86400"
        );
        r.apply(&mut private);
        assert_eq!(
            private.header(b"cache-control").unwrap().as_ref(),
            b"private, max-age=86400",
            "a token already there is not repeated"
        );
        let mut missing = Response::error(404);
        r.apply(&mut missing);
        assert!(missing.header(b"cache-control").is_none());
        // The header commands run after it and have the last word.
        let r =
            HeaderRewriter::with_expires(&[cmd(HeaderOp::Unset, "Cache-Control", "")], Some(60));
        let mut ok = Response::text(200, "x");
        r.apply(&mut ok);
        assert!(ok.header(b"cache-control").is_none());
    }

    #[test]
    fn unsetunless_keeps_only_the_named_fields() {
        let r = HeaderRewriter::new(&[HeaderCommand {
            op: HeaderOp::UnsetUnless,
            name: String::new(),
            value: "x-keep, Content-Type".into(),
        }]);
        let mut resp = Response::text(200, "x")
            .with_header("X-Keep", "1")
            .with_header("X-Drop", "2")
            .with_header("X-Keep", "3");
        r.apply(&mut resp);
        let names: Vec<_> = resp
            .headers
            .iter()
            .map(|(n, v)| (n.as_ref(), v.as_ref()))
            .collect();
        assert_eq!(
            names,
            vec![
                (&b"Content-Type"[..], &b"text/plain; charset=utf-8"[..]),
                (b"X-Keep", b"1"),
                (b"X-Keep", b"3"),
            ]
        );
    }
}
