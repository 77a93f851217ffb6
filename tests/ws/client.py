"""A WebSocket client (Python `websockets`) for tests/proxy_tunnel.rs: echoes of 1 B, 64 KiB
and 1 MB, text and binary, a ping, and close codes both ways, through the URL given.
Prints `ok` when everything checked out."""

import asyncio
import json
import os
import sys

import websockets


async def main(url):
    async with websockets.connect(url, subprotocols=["chat"], max_size=None, ping_interval=None) as ws:
        assert ws.subprotocol == "chat", ws.subprotocol
        for size in (1, 64 * 1024, 1024 * 1024):
            data = os.urandom(size)
            await ws.send(data)
            assert await ws.recv() == data, f"binary {size}"
            text = "".join(chr(0x41 + (i * 7) % 26) for i in range(size - 1)) + "é"[: size and 1]
            await ws.send(text)
            assert await ws.recv() == text, f"text {size}"
        await asyncio.wait_for(await ws.ping(b"are you there"), 5)
        await ws.send("headers")
        seen = json.loads(await ws.recv())
        assert "x-forwarded-for" in seen and "via" in seen, seen
        await ws.send("close-4001")
        try:
            await ws.recv()
            raise AssertionError("no close")
        except websockets.ConnectionClosed:
            pass
        assert (ws.close_code, ws.close_reason) == (4001, "server bye"), (ws.close_code, ws.close_reason)
    async with websockets.connect(url, ping_interval=None) as ws:
        await ws.send("x")
        assert await ws.recv() == "x"
        await ws.close(4002, "client bye")
    print("ok", flush=True)


asyncio.run(asyncio.wait_for(main(sys.argv[1]), 60))
