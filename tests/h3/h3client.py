"""An HTTP/3 client on aioquic for spate's tests (tests/h3_interop.rs), and the connection class the
attack scripts (attacks.py) build on.

    h3client.py [--window N] [--post N] [--repeat K] [--resume] [--key-update] [--again-after-stdin]
                [--hold-at N] URL...

fetches every URL (each K times) at once on one QUIC connection and prints one line per
response (status, length, SHA-256 of the body, Alt-Svc, error), then a summary line: the number
of connections, whether the server sent a Retry, whether a second connection resumed TLS with
the first one's session ticket, and how many key updates each side started once the client
asked for one.
"""

import argparse
import asyncio
import hashlib
import ssl
import sys
from urllib.parse import urlsplit

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset
from aioquic.tls import Epoch


def pattern(n):
    """The bytes of a test body: byte i is i*7 mod 251 (as the Go client's)."""
    return bytes(i * 7 % 251 for i in range(251)) * (n // 251) + bytes(
        i * 7 % 251 for i in range(n % 251)
    )


class Response:
    def __init__(self, stream_id):
        self.stream_id = stream_id
        self.status = 0
        self.headers = []
        self.hash = hashlib.sha256()
        self.length = 0
        self.error = None
        self.body = None  # a bytearray when the caller keeps the body

    def header(self, name):
        for n, v in self.headers:
            if n == name:
                return v
        return None

    def line(self, url):
        out = {
            "stream": self.stream_id,
            "status": self.status,
            "len": self.length,
            "sha256": self.hash.hexdigest(),
        }
        alt = self.header(b"alt-svc")
        if alt is not None:
            out["alt_svc"] = alt.decode()
        if self.error:
            out["error"] = self.error
        out["url"] = url
        return line("response", out)


class H3Client(QuicConnectionProtocol):
    """One HTTP/3 connection: `request` sends a request and waits for the whole response;
    what the server did to a stream or the connection is recorded, not raised."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.responses = {}
        self.waiters = {}
        self.terminated = None
        self.hold_at = None  # bytes of a response after which the client stops until stdin

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = event
            for sid in list(self.waiters):
                self._finish(
                    sid, "connection closed: 0x%x %s" % (event.error_code, event.reason_phrase)
                )
        elif isinstance(event, StreamReset) and event.stream_id in self.waiters:
            self._finish(event.stream_id, "stream reset: 0x%x" % event.error_code)
        for h3_event in self.h3.handle_event(event):
            resp = self.responses.get(h3_event.stream_id)
            if resp is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                if resp.status == 0:
                    resp.headers = h3_event.headers
                    resp.status = int(dict(h3_event.headers).get(b":status", b"0"))
                    if resp.status < 200:
                        resp.status = 0
            elif isinstance(h3_event, DataReceived):
                resp.hash.update(h3_event.data)
                if resp.body is not None:
                    resp.body += h3_event.data
                resp.length += len(h3_event.data)
                if self.hold_at is not None and resp.length >= self.hold_at:
                    # Blocks the event loop on purpose: nothing is read, acknowledged or sent
                    # until the test says go (it changes the server meanwhile).
                    self.hold_at = None
                    print(line("held", {"len": resp.length}), flush=True)
                    sys.stdin.readline()
            if h3_event.stream_ended:
                self._finish(h3_event.stream_id, None)

    def _finish(self, sid, error):
        fut = self.waiters.pop(sid, None)
        if fut is not None and not fut.done():
            self.responses[sid].error = error
            fut.set_result(self.responses[sid])

    def start_request(self, method, url, body=None, headers=(), keep=False):
        """Sends a request; returns a future for its Response."""
        u = urlsplit(url)
        sid = self._quic.get_next_available_stream_id()
        head = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", u.netloc.encode()),
            (b":path", (u.path or "/").encode() + (b"?" + u.query.encode() if u.query else b"")),
        ] + list(headers)
        self.responses[sid] = Response(sid)
        if keep:
            self.responses[sid].body = bytearray()
        fut = asyncio.get_running_loop().create_future()
        self.waiters[sid] = fut
        if self.terminated is not None:
            event = self.terminated
            self._finish(
                sid, "connection closed: 0x%x %s" % (event.error_code, event.reason_phrase)
            )
            return fut
        self.h3.send_headers(sid, head, end_stream=body is None)
        if body is not None:
            self.h3.send_data(sid, body, end_stream=True)
        self.transmit()
        return fut

    async def request(self, method, url, body=None, headers=()):
        return await self.start_request(method, url, body, headers)


def configuration(window=None, ticket=None, tickets=None):
    conf = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    conf.verify_mode = ssl.CERT_NONE  # the tests' certificates are self-signed
    conf.idle_timeout = 30.0
    if window:
        conf.max_data = window
        conf.max_stream_data = window
    if ticket is not None:
        conf.session_ticket = ticket
    return conf


def line(kind, fields):
    """One output line: the kind, then tab-separated key=value pairs (tests/h3_interop.rs reads them)."""
    text = lambda v: str(v).lower() if isinstance(v, bool) else str(v).replace("\t", " ")
    return "\t".join([kind] + ["%s=%s" % (k, text(v)) for k, v in fields.items()])


def host_port(url):
    u = urlsplit(url)
    return u.hostname, u.port or 443


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--window", type=int, default=None, help="stream and connection window")
    p.add_argument("--post", type=int, default=None, help="POST a pattern body of N bytes")
    p.add_argument("--repeat", type=int, default=1, help="fetch each URL K times at once")
    p.add_argument("--resume", action="store_true", help="resume TLS on a second connection")
    p.add_argument("--key-update", action="store_true", help="update keys, then fetch again")
    p.add_argument("--body-out", help="write the first response's body to this file")
    p.add_argument(
        "--again-after-stdin",
        action="store_true",
        help="then print a `waiting` line, read a line from stdin and fetch again on the same connection",
    )
    p.add_argument(
        "--hold-at",
        type=int,
        default=None,
        help="once N bytes of a response arrived, print a `held` line and stop until a line on stdin",
    )
    p.add_argument("urls", nargs="+")
    a = p.parse_args()

    tickets = []
    host, port = host_port(a.urls[0])
    body = pattern(a.post) if a.post is not None else None
    summary = {"connections": 1}
    async with connect(
        host,
        port,
        configuration=configuration(a.window),
        create_protocol=H3Client,
        session_ticket_handler=tickets.append,
    ) as client:
        client.hold_at = a.hold_at
        method = "POST" if body is not None else "GET"
        urls = [url for url in a.urls for _ in range(a.repeat)]
        jobs = [
            client.start_request(method, url, body, keep=i == 0 and a.body_out is not None)
            for i, url in enumerate(urls)
        ]
        for url, resp in zip(urls, await asyncio.gather(*jobs)):
            print(resp.line(url))
            if resp.body is not None:
                with open(a.body_out, "wb") as f:
                    f.write(resp.body)
        summary["retry"] = client._quic._retry_count > 0
        if a.again_after_stdin:
            print(line("waiting", {}), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            again = [client.start_request(method, url, body) for url in urls]
            for url, resp in zip(urls, await asyncio.gather(*again)):
                print(resp.line(url), flush=True)
        if a.key_update:
            # Count the key updates each side starts (a server may start its own): the request
            # after ours travels under the new keys, so its answer shows the server followed.
            crypto = client._quic._cryptos[Epoch.ONE_RTT]
            updates = {"local_update": 0, "remote_update": 0}
            update_key = crypto._update_key

            def counted(trigger):
                updates[trigger] += 1
                update_key(trigger)

            crypto._update_key = counted
            client._quic.request_key_update()
            resp = await client.request("GET", a.urls[0])
            print(resp.line(a.urls[0]))
            summary["key_updates"] = updates["local_update"]
            summary["peer_key_updates"] = updates["remote_update"]
    if a.resume:
        summary["connections"] = 2
        summary["tickets"] = len(tickets)
        ticket = tickets[-1] if tickets else None
        async with connect(
            host, port, configuration=configuration(a.window, ticket), create_protocol=H3Client
        ) as client:
            resp = await client.request("GET", a.urls[0])
            print(resp.line(a.urls[0]))
            summary["resumed"] = client._quic.tls.session_resumed
    print(line("summary", summary))


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 120))
    except Exception as e:  # the test reads the reason
        print(line("fatal", {"error": repr(e)}))
        sys.exit(1)
