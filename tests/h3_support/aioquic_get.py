"""Fetches paths from an HTTP/3 server with aioquic, all on one QUIC connection, concurrently.

usage: aioquic_get.py HOST PORT PATH [PATH...]   (a PATH of "POST:/p:N" posts N bytes of 'x';
REBIND moves the connection to a new local UDP port: the requests before it are made first,
together, then those after it from the new address, as after a NAT rebinding)
Prints one JSON object per request: status, headers, body length and SHA-256 of the body, and
the interim (1xx) responses before the final one as [status, headers] in "interim".
The certificate is not verified (the tests use a self-signed one).
"""
import asyncio
import hashlib
import json
import socket
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}

    async def request(self, authority, method, path, body=b""):
        sid = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"user-agent", b"aioquic"),
        ]
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(sid, headers, end_stream=not body)
        if body:
            self.h3.send_data(sid, body, end_stream=True)
        done = asyncio.get_running_loop().create_future()
        self.waiting[sid] = {"status": None, "headers": [], "interim": [], "body": bytearray(), "done": done}
        self.transmit()
        return await done

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            # Requests still waiting fail at once, saying how the server closed.
            why = f"connection closed by the server: error code {event.error_code:#x}"
            print(why, file=sys.stderr)
            for r in self.waiting.values():
                if not r["done"].done():
                    r["done"].set_exception(ConnectionError(why))
        for ev in self.h3.handle_event(event):
            r = self.waiting.get(ev.stream_id) if hasattr(ev, "stream_id") else None
            if r is None:
                continue
            if isinstance(ev, HeadersReceived):
                status = dict(ev.headers).get(b":status", b"")
                if status.startswith(b"1") and len(status) == 3:
                    fields = [[k.decode(), v.decode()] for k, v in ev.headers if k != b":status"]
                    r["interim"].append([int(status), fields])
                    continue
                for k, v in ev.headers:
                    if k == b":status":
                        r["status"] = int(v)
                    else:
                        r["headers"].append([k.decode(), v.decode()])
            elif isinstance(ev, DataReceived):
                r["body"] += ev.data
            if getattr(ev, "stream_ended", False):
                r["done"].set_result(r)


async def main():
    host, port, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "localhost"
    results = []
    async with connect(host, port, configuration=config, create_protocol=Client) as client:
        jobs = []
        for p in paths + ["END"]:
            if p in ("REBIND", "END"):
                results += await asyncio.wait_for(asyncio.gather(*jobs), 60)
                jobs = []
                if p == "REBIND":
                    # A socket like aioquic's own (dual-stack: it sends to mapped addresses).
                    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                    sock.bind(("::", 0))
                    loop = asyncio.get_running_loop()
                    await loop.create_datagram_endpoint(lambda: client, sock=sock)
            elif p.startswith("POST:"):
                _, path, n = p.split(":")
                jobs.append(client.request(f"localhost:{port}", "POST", path, b"x" * int(n)))
            else:
                jobs.append(client.request(f"localhost:{port}", "GET", p))
        for r in results:
            body = bytes(r["body"])
            print(json.dumps({
                "status": r["status"],
                "headers": r["headers"],
                "len": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
                "text": body[:200].decode("latin-1"),
                "interim": r["interim"],
            }))


asyncio.run(main())
