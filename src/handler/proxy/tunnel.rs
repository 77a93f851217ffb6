//! Tunnels (`proxy.tunnel`). An HTTP/1.1 `Upgrade` goes to the backend as it is and its
//! `101` comes back with the backend's `Upgrade`; an HTTP/2 extended CONNECT for
//! `websocket` (RFC 8441) becomes an HTTP/1.1 WebSocket handshake with a key of our own,
//! and the backend's `101` (its accept value checked) becomes the client's `200`. Either
//! way the response body is then what the backend sends and the request body what the
//! client sends, until one side closes or the tunnel idles out.

use super::headers::has_token;
use super::{websocket, Client, Conversion, ProxyHandler};
use crate::http::{Answer, Method, Request, Response, Version};
use crate::upstream::{self, TunnelRequest};
use bytes::Bytes;

/// The upgrade a request asks for.
enum Upgrade {
    /// HTTP/1.1 `Connection: upgrade` with `Upgrade: <protocols>`, passed on as they are.
    Http1(Bytes),
    /// HTTP/2 extended CONNECT with `:protocol: websocket`.
    WebSocketOverHttp2,
}

impl ProxyHandler {
    /// The answer to `req` when it asks for a tunnel this handler opens; `None` for an
    /// ordinary request.
    pub(super) fn tunnel(&self, req: &Request) -> Option<Answer> {
        if self.tunnel_timeout.is_none() && req.protocol().is_none() {
            return None;
        }
        let upgrade = match req.protocol() {
            Some(p) if p.eq_ignore_ascii_case(b"websocket") => Upgrade::WebSocketOverHttp2,
            // RFC 8441 leaves other protocols to their own specifications.
            Some(_) => return Some(Answer::Now(Response::error(501))),
            None => Upgrade::Http1(http1_upgrade(req)?),
        };
        let Some(idle_timeout) = self.tunnel_timeout else {
            // Tunnels are off here (another path made HTTP/2 offer them): as a server
            // without extended CONNECT would (RFC 8441 section 3), refuse it.
            return match upgrade {
                Upgrade::Http1(_) => None,
                Upgrade::WebSocketOverHttp2 => Some(Answer::Now(Response::error(501))),
            };
        };
        // The client's bytes after the switch: the codecs make this pipe only for upgrades
        // a tunnelling handler receives (HTTP/1.1), or for a stream left open (HTTP/2).
        let Some(client_bytes) = req.take_body() else {
            return match upgrade {
                Upgrade::Http1(_) => None,
                Upgrade::WebSocketOverHttp2 => Some(Answer::Now(Response::error(400))),
            };
        };
        let mut headers = self.conv.request_headers(req);
        let (method, protocol, key) = match &upgrade {
            Upgrade::Http1(p) => (req.method.clone(), p.clone(), None),
            Upgrade::WebSocketOverHttp2 => {
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(b"sec-websocket-key"));
                let key = websocket::new_key();
                headers.push((
                    Bytes::from_static(b"Sec-WebSocket-Key"),
                    Bytes::from(key.clone()),
                ));
                if !headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case(b"sec-websocket-version"))
                {
                    headers.push((
                        Bytes::from_static(b"Sec-WebSocket-Version"),
                        Bytes::from_static(b"13"),
                    ));
                }
                (Method::Get, Bytes::from_static(b"websocket"), Some(key))
            }
        };
        let up = TunnelRequest {
            method,
            target: self.conv.target(req),
            headers,
            upgrade: protocol,
            client: client_bytes,
            idle_timeout,
            client_addrs: self.proxy_protocol.then_some((req.peer, req.local)),
        };
        let client = Client {
            secure: req.secure,
            authority: req.authority().map(Bytes::copy_from_slice),
            version: req.version,
            target_for: None,
        };
        let target_for = Conversion::target_for(&self.conv, self.group.as_ref(), req);
        let (pool, conv) = (self.pool.clone(), self.conv.clone());
        let (backend, group, name) = (self.backend.clone(), self.group.clone(), self.name.clone());
        Some(Answer::Later(Box::pin(async move {
            // Through the balancer when there are several backends, as other requests go.
            let opened = match group {
                Some(group) => upstream::open_tunnel_balanced(pool, group, up, target_for).await,
                None => {
                    let opened = upstream::open_tunnel(pool, backend, up).await;
                    crate::metrics::backend(&name, opened.is_err());
                    opened
                }
            };
            let resp = match opened {
                Ok(r) => r,
                Err(e) => return e.response(),
            };
            if resp.status != 101 {
                // Refused: an ordinary response. A 2xx would tell an HTTP/2 client the
                // tunnel is open, so it is a 502 there.
                if key.is_some() && (200..300).contains(&resp.status) {
                    tracing::warn!(
                        "proxy: backend answered a WebSocket handshake with {}",
                        resp.status
                    );
                    return Response::error(502);
                }
                return conv.client_response(resp, &client);
            }
            switched(&conv, resp, &client, key.as_deref())
        })))
    }
}

/// The protocols of an HTTP/1.1 upgrade request (`Connection: upgrade` and `Upgrade`).
fn http1_upgrade(req: &Request) -> Option<Bytes> {
    if req.version != Version::Http11
        || !req
            .header_all(b"connection")
            .any(|v| has_token(v, b"upgrade"))
    {
        return None;
    }
    req.header(b"upgrade")
        .filter(|v| !v.is_empty())
        .map(Bytes::copy_from_slice)
}

/// The client's answer to the backend's `101`: for HTTP/1.1 a `101` with the backend's
/// `Upgrade`; for an extended CONNECT (`key` set) a `200`, once the backend's accept value
/// proves it completed our handshake.
fn switched(
    conv: &super::Conversion,
    mut resp: Response,
    client: &Client,
    key: Option<&[u8]>,
) -> Response {
    let upgrade = resp
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"upgrade"))
        .map(|(_, v)| v.clone());
    if let Some(key) = key {
        let accept = resp
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"sec-websocket-accept"))
            .map(|(_, v)| v.clone());
        if accept.as_deref() != Some(&websocket::accept_for(key)[..]) {
            tracing::warn!("proxy: backend's 101 has a wrong Sec-WebSocket-Accept");
            return Response::error(502);
        }
        resp.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(b"sec-websocket-accept"));
        resp.status = 200;
        return conv.client_response(resp, client);
    }
    let mut resp = conv.client_response(resp, client);
    let upgrade = upgrade.unwrap_or_else(|| Bytes::from_static(b"websocket"));
    resp.headers.push((Bytes::from_static(b"Upgrade"), upgrade));
    resp
}
