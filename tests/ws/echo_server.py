"""A WebSocket echo server (Python `websockets`) for tests/proxy_tunnel.rs and bench/.

Prints `port N` once listening on 127.0.0.1 (port 0 unless given), then one line
`closed CODE REASON` per connection that ends. Messages: `close-4001` makes the server
close with 4001 "server bye"; `headers` answers the handshake's request fields as JSON;
anything else is echoed. Path /deny refuses the handshake with 403.
"""

import asyncio
import http
import json
import sys

import websockets


async def refuse_deny(path, request_headers):
    if path.startswith("/deny"):
        return http.HTTPStatus.FORBIDDEN, [("Content-Type", "text/plain")], b"no tunnel for you\n"
    return None


async def handler(ws, path=None):
    try:
        async for msg in ws:
            if msg == "close-4001":
                await ws.close(4001, "server bye")
                break
            if msg == "headers":
                await ws.send(json.dumps({k.lower(): v for k, v in ws.request_headers.raw_items()}))
                continue
            await ws.send(msg)
    except websockets.ConnectionClosed:
        pass
    finally:
        await ws.wait_closed()
        print(f"closed {ws.close_code} {ws.close_reason}", flush=True)


async def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    async with websockets.serve(
        handler,
        "127.0.0.1",
        port,
        max_size=None,
        subprotocols=["chat"],
        ping_interval=None,
        process_request=refuse_deny,
    ) as server:
        print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Future()


asyncio.run(main())
