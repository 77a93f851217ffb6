"""Abusive HTTP/3 clients for tests/h3_attacks.rs, on aioquic's lower-level API (its
QuicConnection and H3Connection, bent where an honest client would not go).

    attacks.py ATTACK BASE_URL

ATTACK is one of stream-flood, reset-flood, qpack-bomb, big-headers, no-read. Each prints one
line `attack` with what the server did (outcome: closed with a code, a stream reset with a
code, a status, served, stalled), then checks that a normal GET of BASE_URL/6b.txt on a fresh
connection still works (`fresh` is its status) and, for reset-flood and no-read, on the same
server while the abusive connection is still open.
"""

import asyncio
import sys
import time

from h3client import H3Client, configuration, host_port, line
from aioquic.asyncio import connect
from aioquic.h3.connection import FrameType, Setting, encode_frame

H3_REQUEST_CANCELLED = 0x10C


def outcome(client, resp=None):
    """What the server did, as fields."""
    if client.terminated is not None:
        return {
            "outcome": "closed",
            "code": "0x%x" % client.terminated.error_code,
            "reason": client.terminated.reason_phrase,
        }
    if resp is not None and resp.error:
        return {"outcome": "error", "error": resp.error}
    if resp is not None:
        return {"outcome": "status", "status": resp.status}
    return {"outcome": "open"}


async def wait_for(cond, seconds):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.01)
    return cond()


async def stream_flood(client, base):
    """Opens 50 request streams past the server's MAX_STREAMS, every one left open (a POST
    whose body never ends, so the server cannot retire them and grant more): it must close the
    connection with STREAM_LIMIT_ERROR (0x4)."""
    quic = client._quic
    limit = quic._remote_max_streams_bidi
    quic._remote_max_streams_bidi = limit + 1000  # aioquic would otherwise hold them back
    authority = base.split("/")[2].encode()
    for _ in range(limit + 50):
        sid = quic.get_next_available_stream_id()
        client.h3.send_headers(
            sid,
            [
                (b":method", b"POST"),
                (b":scheme", b"https"),
                (b":authority", authority),
                (b":path", b"/6b.txt"),
            ],
            end_stream=False,
        )
    client.transmit()
    await wait_for(lambda: client.terminated is not None, 5)
    return dict(outcome(client), limit=limit)


async def reset_flood(client, base, total=5000):
    """Opens request streams for a 1 MB file and cancels each at once (RESET_STREAM and
    STOP_SENDING), as fast as the server grants streams. The server must either keep serving
    (the same connection answers afterwards) or close it with H3_EXCESSIVE_LOAD."""
    quic = client._quic
    sent, end = 0, time.monotonic() + 20
    while sent < total and client.terminated is None and time.monotonic() < end:
        sid = quic.get_next_available_stream_id()
        if sid // 4 >= quic._remote_max_streams_bidi:
            client.transmit()
            await asyncio.sleep(0.002)
            continue
        client.h3.send_headers(
            sid,
            [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", base.split("/")[2].encode()),
                (b":path", b"/1m.bin"),
            ],
            end_stream=True,
        )
        quic.reset_stream(sid, H3_REQUEST_CANCELLED)
        quic.stop_stream(sid, H3_REQUEST_CANCELLED)
        sent += 1
        if sent % 50 == 0:
            client.transmit()
            await asyncio.sleep(0)
    client.transmit()
    if client.terminated is None and sent < total:
        return {"outcome": "stalled", "sent": sent}
    if client.terminated is not None:
        return dict(outcome(client), sent=sent)
    try:
        resp = await asyncio.wait_for(client.request("GET", base + "/6b.txt"), 10)
    except asyncio.TimeoutError:
        return {"outcome": "stalled", "sent": sent}
    return dict(outcome(client, resp), sent=sent)


def qpack_int(first, prefix_bits, value):
    """An RFC 7541 integer with an N-bit prefix, `first` holding the pattern bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


async def qpack_bomb(client, base, decoded=4 << 20):
    """Inserts one large entry into the server's dynamic table (when it offers one) and sends a
    request whose field section references it until the decoded headers reach `decoded`
    bytes, with a few KB on the wire. Without a dynamic table, a static entry does the same
    at a smaller ratio. The server must refuse it (431, a stream error or a connection error)."""
    await wait_for(lambda: client.h3.received_settings is not None, 5)
    settings = client.h3.received_settings or {}
    capacity = settings.get(Setting.QPACK_MAX_TABLE_CAPACITY, 0)
    name = b"x-bomb"
    value_len = min(capacity - 32 - len(name), 4000)
    u = base.split("/")[2].encode()
    head = (
        bytes([0xD1, 0xD7, 0xC1])  # :method GET, :scheme https, :path / (static 17, 23, 1)
        + qpack_int(0x50, 4, 0)  # :authority (static 0), literal value
        + qpack_int(0x00, 7, len(u))
        + u
    )
    if value_len >= 100:
        # Encoder stream: Set Dynamic Table Capacity, Insert With Literal Name.
        value = b"a" * value_len
        client._quic.send_stream_data(
            client.h3._local_encoder_stream_id,
            qpack_int(0x20, 5, capacity)
            + qpack_int(0x40, 5, len(name))
            + name
            + qpack_int(0x00, 7, len(value))
            + value,
        )
        client.transmit()
        await asyncio.sleep(0.2)  # inserted before the request refers to it
        max_entries = capacity // 32
        prefix = qpack_int(0, 8, 1 % (2 * max_entries) + 1) + qpack_int(0, 7, 0)
        ref = b"\x80"  # indexed field line, dynamic, relative index 0
        per_ref = len(name) + value_len
        kind = "dynamic"
    else:
        prefix = b"\x00\x00"
        ref = bytes([0xC0 | 31])  # static 31: accept-encoding: gzip, deflate, br
        per_ref = len(b"accept-encoding") + len(b"gzip, deflate, br")
        kind = "static"
    block = prefix + head + ref * (decoded // per_ref + 1)
    sid = client._quic.get_next_available_stream_id()
    from h3client import Response

    client.responses[sid] = Response(sid)
    fut = asyncio.get_running_loop().create_future()
    client.waiters[sid] = fut
    client._quic.send_stream_data(sid, encode_frame(FrameType.HEADERS, block), end_stream=True)
    client.transmit()
    try:
        resp = await asyncio.wait_for(fut, 10)
    except asyncio.TimeoutError:
        return {"outcome": "stalled", "kind": kind}
    return dict(outcome(client, resp), kind=kind, wire=len(block), capacity=capacity)


async def big_headers(client, base):
    """A request with 128 KB of header fields (2,000 fields of 64 bytes). The server must refuse
    it."""
    fields = [(b"x-big-%04d" % i, b"v" * 54) for i in range(2000)]
    try:
        resp = await asyncio.wait_for(client.request("GET", base + "/6b.txt", headers=fields), 10)
    except asyncio.TimeoutError:
        return {"outcome": "stalled"}
    return outcome(client, resp)


async def no_read(client, base, streams=50):
    """Asks for the 20 MB file on 50 streams and never gives flow-control credit beyond the
    first 64 KB per stream (1 MB per connection). Meanwhile a normal client on another
    connection is served. The test watches the server's memory."""
    quic = client._quic
    quic._write_connection_limits = lambda *a, **k: None
    quic._write_stream_limits = lambda *a, **k: None
    for _ in range(streams):
        client.start_request("GET", base + "/20m.bin")
    await asyncio.sleep(3)
    other = await fresh(base)
    received = sum(r.length for r in client.responses.values())
    return dict(outcome(client), received=received, other=other)


async def fresh(base):
    host, port = host_port(base)
    try:
        async with connect(
            host, port, configuration=configuration(), create_protocol=H3Client
        ) as c:
            resp = await asyncio.wait_for(c.request("GET", base + "/6b.txt"), 10)
            return resp.status if not resp.error else resp.error
    except Exception as e:  # reported, judged by the test
        return repr(e)


ATTACKS = {
    "stream-flood": stream_flood,
    "reset-flood": reset_flood,
    "qpack-bomb": qpack_bomb,
    "big-headers": big_headers,
    "no-read": no_read,
}


async def main(name, base):
    host, port = host_port(base)
    window = 65536 if name == "no-read" else None
    conf = configuration(window)
    if window:
        conf.max_data = 1 << 20
    async with connect(host, port, configuration=conf, create_protocol=H3Client) as client:
        if name == "qpack-bomb":
            # The server acknowledges our inserts on its decoder stream; aioquic's own QPACK
            # encoder (which made none of them) must not see that.
            client.h3._encoder = IgnoreDecoderStream(client.h3._encoder)
        fields = await ATTACKS[name](client, base)
        client.close()
    fields["fresh"] = await fresh(base)
    print(line("attack", dict(name=name, **fields)))


class IgnoreDecoderStream:
    def __init__(self, encoder):
        self.encoder = encoder

    def feed_decoder(self, data):
        pass

    def __getattr__(self, name):
        return getattr(self.encoder, name)


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2]), 60))
    except Exception as e:  # the test reads the reason
        print(line("fatal", {"error": repr(e)}))
        sys.exit(1)
