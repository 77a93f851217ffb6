//! The header conversion both ways driven from raw bytes, public only for the fuzz target
//! `proxy_headers` (fuzz/): it reads peer input (the client's Connection options, cookies,
//! X-Forwarded-* and Host; the backend's Connection options and Location).

use super::{Client, ProxyHandler};
use crate::config::HandlerConf;
use crate::http::request::RequestBuilder;
use crate::http::Response;
use crate::proto::h1::{parse_head, parse_response_head, HeadLimits, MAX_RESPONSE_FIELDS};
use crate::upstream::Pool;
use bytes::Bytes;
use std::net::SocketAddr;

/// A proxy on `/app` with every conversion on; the second also preserves Host.
const CONFIG: &str = "
listen: 1
hosts:
  default:
    paths:
      /app:
        proxy.reverse.url: http://backend.example:8080/base/
        proxy.emit-x-forwarded-headers: ON
        proxy.emit-via-header: ON
        proxy.forward.close-connection: ON
        proxy.header.add: \"X-Added: 1\"
        proxy.header.unset: Cookie2
      /keep:
        proxy.reverse.url: http://backend.example:8080/
        proxy.preserve-host: ON
";

/// Fields converted for the backend, then the backend's response converted for the client.
pub type Converted = (Vec<(Bytes, Bytes)>, Response);

/// Parses `request` as a client's HTTP/1.1 request head and `response` as a backend's response
/// head and converts both as the proxy on `/app` (or, with `preserve_host`, `/keep`) does.
/// `None` when either head does not parse (the codecs reject those before any conversion).
pub fn convert(request: &[u8], response: &[u8], preserve_host: bool) -> Option<Converted> {
    let limits = HeadLimits {
        head_size: 8192,
        target_size: 4096,
        fields: 100,
        body_size: 1 << 20,
    };
    let head = parse_head(request, &limits).ok()??;
    let addr = SocketAddr::from(([127, 0, 0, 1], 1));
    let req = RequestBuilder {
        method: head.method,
        version: head.version,
        secure: preserve_host,
        peer: addr,
        local: addr,
        target: head.target,
        authority: head.authority,
        fields: head.fields,
    }
    .build(Bytes::copy_from_slice(&request[..head.len]));
    let parsed = parse_response_head(response, false, 8192, MAX_RESPONSE_FIELDS).ok()??;
    let mut resp = Response::new(parsed.status);
    resp.headers = parsed
        .fields
        .iter()
        .map(|(n, v)| {
            (
                Bytes::copy_from_slice(&response[n.clone()]),
                Bytes::copy_from_slice(&response[v.clone()]),
            )
        })
        .collect();
    HANDLERS.with(|h| {
        let h = h.get(usize::from(preserve_host))?;
        let client = Client {
            secure: req.secure,
            authority: req.authority().map(Bytes::copy_from_slice),
            version: req.version,
            target_for: None,
        };
        Some((
            h.conv.request_headers(&req),
            h.conv.client_response(resp, &client),
        ))
    })
}

thread_local! {
    /// The two proxies of `CONFIG`, built once.
    static HANDLERS: Vec<ProxyHandler> = handlers();
}

fn handlers() -> Vec<ProxyHandler> {
    let Ok(config) = crate::config::load_str(CONFIG, "/nonexistent/fuzz.yaml") else {
        return Vec::new();
    };
    let pool = Pool::new();
    config
        .hosts
        .iter()
        .flat_map(|h| &h.paths)
        .flat_map(|p| p.handler.each().iter().map(move |h| (h, &p.prefix)))
        .filter_map(|(h, prefix)| match h {
            HandlerConf::Proxy(c) => Some(ProxyHandler::new(c, prefix, pool.clone(), &[])),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fuzz_entry_converts_both_ways() {
        let req = b"GET /app/x HTTP/1.1\r\nHost: client.example\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n";
        let resp = b"HTTP/1.1 302 Found\r\nLocation: http://backend.example:8080/base/y\r\nConnection: close\r\n\r\n";
        for preserve_host in [false, true] {
            let Some((fields, resp)) = convert(req, resp, preserve_host) else {
                panic!("the fuzz configuration must load");
            };
            let get = |name: &str| {
                fields
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                    .map(|(_, v)| v.clone())
            };
            assert!(get("x-drop").is_none(), "{fields:?}");
            assert_eq!(get("cookie").as_deref(), Some(&b"a=1; b=2"[..]));
            if !preserve_host {
                assert_eq!(get("x-added").as_deref(), Some(&b"1"[..]));
                let location = resp.headers.iter().find(|(n, _)| n == "Location");
                assert_eq!(
                    location.map(|(_, v)| &v[..]),
                    Some(&b"http://client.example/app/y"[..])
                );
            }
        }
    }
}
