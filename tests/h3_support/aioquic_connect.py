"""A CONNECT tunnel (RFC 9114 section 4.4), or a request held open, over HTTP/3 with aioquic.

usage: aioquic_connect.py HOST PORT connect AUTHORITY PAYLOAD
         sends CONNECT AUTHORITY; prints {"status", "headers"} when the answer comes, then, on
         a 2xx, sends PAYLOAD on the stream and prints {"echo": what came back} once as many
         bytes came back (or the stream ended)
       aioquic_connect.py HOST PORT hold PATH
         sends GET PATH, prints {"sent": true}, and waits (up to 120 s) for the answer's
         end or the end of its standard input, then closes the connection (CONNECTION_CLOSE)
The certificate is not verified (the tests use a self-signed one).
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


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.headers = asyncio.get_running_loop().create_future()
        self.body = bytearray()
        self.more = asyncio.Event()
        self.ended = False
        self.end = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event):
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived) and not self.headers.done():
                self.headers.set_result(ev.headers)
            elif isinstance(ev, DataReceived):
                self.body += ev.data
            if getattr(ev, "stream_ended", False):
                self.ended = True
                if not self.end.done():
                    self.end.set_result(True)
            self.more.set()


def show(headers):
    fields = {k.decode(): v.decode() for k, v in headers}
    return {"status": int(fields.pop(":status")), "headers": fields}


async def main():
    host, port, mode, arg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "localhost"
    async with connect(host, port, configuration=config, create_protocol=Client) as c:
        sid = c._quic.get_next_available_stream_id()
        if mode == "hold":
            c.h3.send_headers(sid, [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", b"h3held.example"),
                (b":path", arg.encode()),
                (b"user-agent", b"aioquic"),
            ], end_stream=True)
            c.transmit()
            print(json.dumps({"sent": True}), flush=True)
            stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            await asyncio.wait([c.end, stdin_closed], timeout=120,
                               return_when=asyncio.FIRST_COMPLETED)
            return
        payload = sys.argv[5].encode()
        c.h3.send_headers(sid, [(b":method", b"CONNECT"), (b":authority", arg.encode())])
        c.transmit()
        headers = await asyncio.wait_for(c.headers, 30)
        answer = show(headers)
        print(json.dumps(answer), flush=True)
        if not 200 <= answer["status"] < 300:
            return
        c.h3.send_data(sid, payload, end_stream=False)
        c.transmit()
        while len(c.body) < len(payload) and not c.ended:
            c.more.clear()
            await asyncio.wait_for(c.more.wait(), 30)
        print(json.dumps({"echo": c.body.decode("latin-1")}), flush=True)


asyncio.run(main())
