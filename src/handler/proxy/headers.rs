//! Header conversion, as h2o does it. To the backend: Host (the backend's, or the client's
//! with `proxy.preserve-host`), cookie crumbs joined, hop-by-hop fields dropped (`TE:
//! trailers` only), X-Forwarded-For/-Proto and Via, then `proxy.header.*`. Back to the
//! client: hop-by-hop fields and the backend's Server dropped, Date added when missing, a
//! `Location` that points at the backend rewritten to the client's authority and prefix.

use super::{Client, Conversion};
use crate::http::{clock, recycle, Request, Response, Version};
use bytes::Bytes;
use std::io::Write;
use std::net::IpAddr;

/// Fields that concern one connection only (RFC 9110 7.6.1), plus HTTP/2's HTTP2-Settings.
/// Content-Length and Transfer-Encoding are framing, which each side writes itself.
fn is_hop_by_hop(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
        b"http2-settings",
        b"content-length",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// The field names a Connection header lists (but `close` and `keep-alive`, which name
/// options, not fields that would otherwise pass). Allocates only when there are some.
fn connection_options<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<&'a [u8]> {
    let mut names = Vec::new();
    for v in values {
        for token in v.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if !token.is_empty()
                && !token.eq_ignore_ascii_case(b"close")
                && !token.eq_ignore_ascii_case(b"keep-alive")
            {
                names.push(token);
            }
        }
    }
    names
}

pub(super) fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The pieces one after the other, in a buffer of exactly their length (a `Bytes` made from a
/// full vector needs no allocation of its own to count references).
fn concat(pieces: &[&[u8]]) -> Bytes {
    let mut v = Vec::with_capacity(pieces.iter().map(|p| p.len()).sum());
    for p in pieces {
        v.extend_from_slice(p);
    }
    Bytes::from(v)
}

/// Joins repeated fields (cookie crumbs, X-Forwarded-For, Via): the first is kept as is.
fn join(a: Option<Bytes>, sep: &[u8], b: Bytes) -> Bytes {
    match a {
        None => b,
        Some(a) => concat(&[&a, sep, &b]),
    }
}

/// The fields a proxy adds that stay the same from one request to the next of the same
/// client, kept from the last request (per worker, as the handler is): most requests reuse
/// them instead of formatting and allocating each.
#[derive(Default)]
pub(super) struct Added {
    /// The client address and its text.
    forwarded_for: Option<(IpAddr, Bytes)>,
    /// The client's version and authority, and our Via entry for them.
    via: Option<(Version, Bytes, Bytes)>,
}

/// `ip` as text, written into `buf` without an allocation.
fn ip_text(ip: IpAddr, buf: &mut [u8; 64]) -> &[u8] {
    let len = match ip {
        IpAddr::V4(v4) => {
            let mut n = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                let mut digits = [0u8; 20];
                let d = crate::proto::h1::itoa(u64::from(octet), &mut digits);
                buf[n..n + d.len()].copy_from_slice(d);
                n += d.len();
            }
            n
        }
        IpAddr::V6(v6) => {
            let mut w = &mut buf[..];
            // 64 bytes hold any IPv6 address's text (45 at most).
            let _ = write!(w, "{v6}");
            64 - w.len()
        }
    };
    &buf[..len]
}

impl Conversion {
    /// The header fields sent to the backend, Host first.
    pub(super) fn request_headers(&self, req: &Request) -> Vec<(Bytes, Bytes)> {
        let mut out = recycle::header_list(req.header_count() + 4);
        let host = match (self.preserve_host, req.shared_authority()) {
            (true, Some(a)) => a,
            _ => self.upstream_authority.clone(),
        };
        out.push((Bytes::from_static(b"Host"), host));
        let named = connection_options(req.header_all(b"connection"));
        let mut cookie: Option<Bytes> = None;
        let mut forwarded_for: Option<Bytes> = None;
        let mut via: Option<Bytes> = None;
        let mut te_trailers = false;
        for (name, value) in req.shared_headers() {
            let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
            if is(b"te") {
                te_trailers |= has_token(&value, b"trailers");
                continue;
            }
            if is_hop_by_hop(&name) || is(b"host") || is(b"expect") || named.iter().any(|n| is(n)) {
                continue;
            }
            if is(b"cookie") {
                // HTTP/2 splits cookies into crumbs; HTTP/1.1 wants one field (RFC 9113 8.2.3).
                cookie = Some(join(cookie, b"; ", value));
            } else if is(b"x-forwarded-for") && self.emit_x_forwarded_headers {
                forwarded_for = Some(join(forwarded_for, b", ", value));
            } else if is(b"via") && self.emit_via_header {
                via = Some(join(via, b", ", value));
            } else if is(b"x-forwarded-proto") && !self.preserve_x_forwarded_proto {
                // Ours replaces it (below).
            } else if req.is_early_data() && is(b"early-data") {
                // Ours says the same (below), once (RFC 8470 section 5.1).
            } else {
                out.push((name, value));
            }
        }
        if let Some(c) = cookie {
            out.push((Bytes::from_static(b"Cookie"), c));
        }
        if te_trailers {
            out.push((Bytes::from_static(b"TE"), Bytes::from_static(b"trailers")));
        }
        if self.emit_x_forwarded_headers {
            if !self.preserve_x_forwarded_proto {
                let proto = if req.secure { &b"https"[..] } else { b"http" };
                out.push((
                    Bytes::from_static(b"X-Forwarded-Proto"),
                    Bytes::from_static(proto),
                ));
            }
            out.push((
                Bytes::from_static(b"X-Forwarded-For"),
                self.forwarded_for(forwarded_for, req.peer.ip().to_canonical()),
            ));
        }
        if self.emit_via_header {
            out.push((Bytes::from_static(b"Via"), self.via(via, req)));
        }
        if req.is_early_data() {
            // It may be replayed: the backend may answer 425 Too Early (RFC 8470 section 5.1).
            out.push((Bytes::from_static(b"Early-Data"), Bytes::from_static(b"1")));
        }
        if !self.request_commands.is_empty() {
            self.request_commands.apply_to(&mut out);
        }
        out
    }

    /// X-Forwarded-For: the client's own list, if any, followed by the client's address.
    fn forwarded_for(&self, theirs: Option<Bytes>, ip: IpAddr) -> Bytes {
        let mut added = self.added.borrow_mut();
        let ours = match &added.forwarded_for {
            Some((kept, text)) if *kept == ip => text.clone(),
            _ => {
                let mut buf = [0u8; 64];
                let text = Bytes::copy_from_slice(ip_text(ip, &mut buf));
                added.forwarded_for = Some((ip, text.clone()));
                text
            }
        };
        join(theirs, b", ", ours)
    }

    /// Via: the list received, if any, followed by ours in h2o's form: the client's protocol
    /// version and the authority it asked for.
    fn via(&self, theirs: Option<Bytes>, req: &Request) -> Bytes {
        let authority = req.authority();
        let mut added = self.added.borrow_mut();
        let ours = match (&added.via, authority) {
            (Some((v, a, text)), Some(now)) if *v == req.version && a[..] == *now => text.clone(),
            _ => {
                let version: &[u8] = match req.version {
                    Version::Http10 => b"1.0 ",
                    Version::Http11 => b"1.1 ",
                    Version::Http2 => b"2 ",
                    Version::Http3 => b"3 ",
                };
                match authority {
                    Some(a) => {
                        let text = concat(&[version, a]);
                        added.via = Some((req.version, Bytes::copy_from_slice(a), text.clone()));
                        text
                    }
                    None => concat(&[version, req.local.to_string().as_bytes()]),
                }
            }
        };
        join(theirs, b", ", ours)
    }

    /// The backend's response as the client gets it. One pass over the fields, each name
    /// classified by its length first (most fields match none of the names looked for); the
    /// fields a Connection header names are dropped in a second pass, only when there are any.
    pub(super) fn client_response(&self, mut resp: Response, client: &Client) -> Response {
        let mut named: Vec<Bytes> = Vec::new();
        let (mut close, mut has_date, mut location) = (false, false, false);
        resp.headers
            .retain(|(name, value)| match response_field(name) {
                ResponseField::Connection => {
                    close |= has_token(value, b"close");
                    named.extend(
                        connection_options(std::iter::once(&value[..]))
                            .into_iter()
                            .map(Bytes::copy_from_slice),
                    );
                    false
                }
                ResponseField::Dropped => false,
                ResponseField::Server => self.preserve_server_header,
                ResponseField::Date => {
                    has_date = true;
                    true
                }
                ResponseField::Location => {
                    location = true;
                    true
                }
                ResponseField::Other => true,
            });
        if !named.is_empty() {
            resp.headers.retain(|(name, _)| {
                let drop = named.iter().any(|n| name.eq_ignore_ascii_case(n));
                has_date &= !(drop && name.eq_ignore_ascii_case(b"date"));
                !drop
            });
        }
        if location {
            for (name, value) in resp.headers.iter_mut() {
                if name.eq_ignore_ascii_case(b"location") {
                    if let Some(v) = self.rewrite_location(value, client) {
                        *value = v;
                    }
                }
            }
        }
        if !has_date && self.emit_missing_date_header {
            let now = clock::with_now(|d| Bytes::copy_from_slice(d));
            resp.headers.push((Bytes::from_static(b"Date"), now));
        }
        let http1 = matches!(client.version, Version::Http10 | Version::Http11);
        if close && self.forward_close_connection && http1 {
            // Tells the HTTP/1.1 codec to close the client's connection after this response.
            resp.headers.push((
                Bytes::from_static(b"Connection"),
                Bytes::from_static(b"close"),
            ));
        }
        resp
    }

    /// `http://<backend authority><url path>rest` -> `<scheme>://<client authority><prefix>rest`;
    /// `None` for a location elsewhere.
    pub(super) fn rewrite_location(&self, loc: &[u8], client: &Client) -> Option<Bytes> {
        let authority = client.authority.as_ref()?;
        let rest = strip_prefix_ignore_case(loc, b"http://")?;
        let rest = strip_prefix_ignore_case(rest, &self.upstream_authority)?;
        let base = self.url_path.trim_end_matches('/').as_bytes();
        let tail = rest.strip_prefix(base)?;
        if !matches!(tail.first(), None | Some(b'/' | b'?' | b'#')) {
            return None;
        }
        let scheme: &[u8] = if client.secure {
            b"https://"
        } else {
            b"http://"
        };
        let mut out =
            Vec::with_capacity(scheme.len() + authority.len() + self.prefix.len() + tail.len() + 1);
        out.extend_from_slice(scheme);
        out.extend_from_slice(authority);
        out.extend_from_slice(self.prefix.as_bytes());
        if self.prefix.is_empty() && tail.first() != Some(&b'/') {
            out.push(b'/');
        }
        out.extend_from_slice(tail);
        Some(Bytes::from(out))
    }
}

/// What the response conversion does with a backend's field.
enum ResponseField {
    /// Connection: dropped, its options looked at.
    Connection,
    /// Hop-by-hop.
    Dropped,
    /// The backend's Server: dropped (the codec writes our own; h2o drops it too) unless
    /// `send-server-name: preserve`.
    Server,
    Date,
    Location,
    Other,
}

/// The lengths matched below are those of the names in [`is_hop_by_hop`].
fn response_field(name: &[u8]) -> ResponseField {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    match name.len() {
        4 if is(b"date") => ResponseField::Date,
        6 if is(b"server") => ResponseField::Server,
        8 if is(b"location") => ResponseField::Location,
        10 if is(b"connection") => ResponseField::Connection,
        2 | 7 | 10 | 14 | 16 | 17 if is_hop_by_hop(name) => ResponseField::Dropped,
        _ => ResponseField::Other,
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hop_by_hop_response_field_is_dropped() {
        for name in [
            "connection",
            "Keep-Alive",
            "proxy-connection",
            "TE",
            "transfer-encoding",
            "upgrade",
            "http2-settings",
            "content-length",
            "Server",
        ] {
            assert!(is_hop_by_hop(name.as_bytes()) || name == "Server");
            let kept = matches!(
                response_field(name.as_bytes()),
                ResponseField::Other | ResponseField::Date | ResponseField::Location
            );
            assert!(!kept, "{name}");
        }
        for name in ["x-conn", "dates", "Content-Type", "etag", "upgrades"] {
            assert!(matches!(
                response_field(name.as_bytes()),
                ResponseField::Other
            ));
        }
    }
}
