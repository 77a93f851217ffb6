"""A resumed HTTP/3 client that sends its requests as 0-RTT early data (aioquic).

usage: aioquic_0rtt.py HOST PORT [--hold] [--replay] REQ [REQ...]
  REQ is GET:/path or POST:/path:N (a body of N bytes of 'x'); a `~` before it (with --hold)
  means "not expected before the handshake completes".

A first connection fetches / and waits for a session ticket; the second, resumed with it,
sends every REQ at once, before its handshake completes (so in 0-RTT packets if the ticket
allows early data). With --hold, the client withholds its Handshake packets (its Finished)
until every REQ without `~` has its whole answer: those answers came in the server's first
flight, before the server could complete the handshake. Then the Finished goes out and the
rest is awaited. With --replay, a third connection resumes with the same ticket and sends the
same requests in 0-RTT again, as an attacker replaying the client's first flight would.

Prints, for each resumed connection, one JSON line {"early_data_accepted": bool,
"session_resumed": bool}, then one per REQ in order: status, body length and text (first 200 bytes), and "before_finished" (the answer
was complete while the Finished was withheld).
"""
import asyncio
import json
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted


def has_handshake_packet(datagram):
    """Whether a QUIC v1 Handshake packet is among the datagram's coalesced packets."""
    d = datagram
    while len(d) > 6 and d[0] & 0x80:
        kind = (d[0] >> 4) & 3
        if kind == 2:
            return True
        i = 5
        i += 1 + d[i]  # destination connection ID
        i += 1 + d[i]  # source connection ID
        if kind == 0:  # Initial: token
            n, i = varint(d, i)
            i += n
        n, i = varint(d, i)
        d = d[i + n:]
    return False


def varint(d, i):
    first = d[i]
    length = 1 << (first >> 6)
    v = first & 0x3F
    for b in d[i + 1:i + length]:
        v = (v << 8) | b
    return v, i + length


class HoldingTransport:
    """Drops the client's datagrams that carry Handshake packets while `hold` is set."""

    def __init__(self, inner):
        self.inner = inner
        self.hold = True

    def sendto(self, data, addr=None):
        if self.hold and has_handshake_packet(data):
            return
        self.inner.sendto(data, addr)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}
        self.handshake = None
        self.terminated = asyncio.get_running_loop().create_future()

    def request(self, authority, method, path, body=b""):
        sid = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"user-agent", b"aioquic-0rtt"),
        ]
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(sid, headers, end_stream=not body)
        if body:
            self.h3.send_data(sid, body, end_stream=True)
        done = asyncio.get_running_loop().create_future()
        self.waiting[sid] = {"status": None, "body": bytearray(), "done": done}
        self.transmit()
        return done

    def quic_event_received(self, event):
        if isinstance(event, HandshakeCompleted):
            self.handshake = event
        if isinstance(event, ConnectionTerminated):
            why = f"connection closed by the server: error code {event.error_code:#x}"
            for r in self.waiting.values():
                if not r["done"].done():
                    r["done"].set_exception(ConnectionError(why))
            if not self.terminated.done():
                self.terminated.set_result(event)
        for ev in self.h3.handle_event(event):
            r = self.waiting.get(getattr(ev, "stream_id", None))
            if r is None:
                continue
            if isinstance(ev, HeadersReceived):
                for k, v in ev.headers:
                    if k == b":status" and not v.startswith(b"1"):
                        r["status"] = int(v)
            elif isinstance(ev, DataReceived):
                r["body"] += ev.data
            if getattr(ev, "stream_ended", False) and not r["done"].done():
                r["done"].set_result(r)


async def main():
    args = sys.argv[1:]
    host, port = args[0], int(args[1])
    hold = "--hold" in args
    rounds = 2 if "--replay" in args else 1
    reqs = [a for a in args[2:] if a not in ("--hold", "--replay")]
    authority = f"localhost:{port}"
    tickets = []

    def config():
        c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
        c.verify_mode = ssl.CERT_NONE
        c.server_name = "localhost"
        return c

    async with connect(host, port, configuration=config(), create_protocol=Client,
                       session_ticket_handler=tickets.append) as first:
        await asyncio.wait_for(first.request(authority, "GET", "/"), 30)
        for _ in range(3000):
            if tickets:
                break
            await asyncio.sleep(0.01)
    if not tickets:
        sys.exit("no session ticket came")

    ticket = tickets[-1]
    for _ in range(rounds):
        await resumed(host, port, config, ticket, hold, reqs, authority)


async def resumed(host, port, config, ticket, hold, reqs, authority):
    c = config()
    c.session_ticket = ticket
    async with connect(host, port, configuration=c, create_protocol=Client,
                       wait_connected=False) as client:
        held = HoldingTransport(client._transport)
        client._transport = held
        held.hold = hold
        jobs = []
        for r in reqs:
            spec = r.lstrip("~")
            if spec.startswith("POST:"):
                _, path, n = spec.split(":")
                jobs.append(client.request(authority, "POST", path, b"x" * int(n)))
            else:
                jobs.append(client.request(authority, "GET", spec.split(":", 1)[1]))
        early = [j for r, j in zip(reqs, jobs) if not r.startswith("~")]
        if hold and early:
            await asyncio.wait_for(asyncio.gather(*early), 60)
        before = [j.done() for j in jobs]
        held.hold = False
        client.transmit()
        results = await asyncio.wait_for(asyncio.gather(*jobs), 60)
        for _ in range(3000):
            if client.handshake is not None:
                break
            await asyncio.sleep(0.01)
        hs = client.handshake
        print(json.dumps({
            "early_data_accepted": bool(hs and hs.early_data_accepted),
            "session_resumed": bool(hs and hs.session_resumed),
        }))
        for r, b in zip(results, before):
            body = bytes(r["body"])
            print(json.dumps({
                "status": r["status"],
                "len": len(body),
                "text": body[:200].decode("latin-1"),
                "before_finished": b,
            }))


asyncio.run(main())
