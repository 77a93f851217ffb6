"""WebSocket echo load (Python `websockets`): CONNS connections, each sending WINDOW binary
messages of SIZE bytes, then reading their echoes, again and again, until SECONDS pass or
MAX messages were echoed. Prints one JSON line: messages, seconds, errors."""

import asyncio
import json
import sys
import time

import websockets


async def one(url, size, window, deadline, state):
    msg = b"x" * size
    try:
        async with websockets.connect(url, max_size=None, ping_interval=None, compression=None) as ws:
            while time.monotonic() < deadline and state["messages"] < state["max"]:
                for _ in range(window):
                    await ws.send(msg)
                for _ in range(window):
                    got = await ws.recv()
                    if len(got) != size:
                        state["errors"] += 1
                state["messages"] += window
    except Exception as e:  # a failed connection is counted, never hidden
        state["errors"] += 1
        state["last_error"] = repr(e)


async def main(url, conns, size, window, seconds, max_messages):
    state = {"messages": 0, "errors": 0, "max": max_messages}
    start = time.monotonic()
    deadline = start + seconds
    await asyncio.wait_for(
        asyncio.gather(*(one(url, size, window, deadline, state) for _ in range(conns))),
        seconds + 30,
    )
    state["seconds"] = time.monotonic() - start
    del state["max"]
    print(json.dumps(state), flush=True)


if __name__ == "__main__":
    url, conns, size, window, seconds, max_messages = sys.argv[1:7]
    asyncio.run(main(url, int(conns), int(size), int(window), float(seconds), int(max_messages)))
