"""GET one URL over HTTP/3 with aioquic while sending a PING every 50 ms, and print the response
line as h3client.py does (tests/quic_migration.rs).

    keepalive_get.py URL

A client that keeps talking: after its address changes, the server hears from the new one
within 50 ms even when nothing reaches the client (quinn 0.11 sends one PATH_CHALLENGE and,
when the answer is late, goes back to the old path: a client that only acknowledges what it
receives would wait there for its idle timeout).
"""

import asyncio
import sys

from aioquic.asyncio import connect
from h3client import H3Client, configuration, host_port, line


async def main(url):
    host, port = host_port(url)
    async with connect(host, port, configuration=configuration(), create_protocol=H3Client) as client:
        job = client.start_request("GET", url)
        while not job.done():
            client._quic.send_ping(0)
            client.transmit()
            await asyncio.wait([job], timeout=0.05)
        print(job.result().line(url))
    print(line("summary", {"connections": 1}))


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1]), 120))
    except Exception as e:  # the test reads the reason
        print(line("fatal", {"error": repr(e)}))
        sys.exit(1)
