"""One case of the QUIC interop runner's server tests, played by an aioquic client over HTTP/3
(the runner plays most cases over HTTP/0.9, which spate and h2o do not speak).

    aioquic_case.py CASE BASE_URL

BASE_URL serves 1k.bin, 1m.bin, 5m.bin and 10m.bin (bench/quic-interop/run makes them, the
byte at i being i*7 mod 251). Prints `ok` or `fail: why` (or `unsupported`) and exits 0, 1
or 127. Builds on tests/h3/h3client.py's connection class.
"""

import asyncio
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "h3"))

from aioquic.asyncio import connect  # noqa: E402
from aioquic.quic.packet import QuicProtocolVersion  # noqa: E402
from aioquic.tls import CipherSuite, Epoch  # noqa: E402
from h3client import H3Client, configuration, host_port  # noqa: E402

FILES = {"1k.bin": 1 << 10, "1m.bin": 1 << 20, "5m.bin": 5 << 20, "10m.bin": 10 << 20}


class Fail(Exception):
    pass


def pattern_sha(n):
    import hashlib

    block = bytes(i * 7 % 251 for i in range(251))
    h = hashlib.sha256()
    h.update(block * (n // 251))
    h.update(block[: n % 251])
    return h.hexdigest()


SHA = {name: pattern_sha(n) for name, n in FILES.items()}


def check(resp, name):
    if resp.error:
        raise Fail("%s: %s" % (name, resp.error))
    if resp.status != 200:
        raise Fail("%s: status %d" % (name, resp.status))
    if resp.hash.hexdigest() != SHA[name]:
        raise Fail("%s: %d bytes, not the file" % (name, resp.length))


async def fetch(client, base, names):
    resps = await asyncio.gather(*[client.request("GET", base + n) for n in names])
    for r, n in zip(resps, names):
        check(r, n)


async def move_socket(client, local_host):
    """Moves the client to a new UDP socket (a new source port, on `local_host`): what a NAT
    rebinding or a client's migration looks like to the server."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((local_host, 0, 0, 0))
    old = client._transport
    await loop.create_datagram_endpoint(lambda: client, sock=sock)
    old.close()


async def run(case, base):
    host, port = host_port(base)
    conf = configuration()
    tickets = []

    def conn(c=None, **kw):
        return connect(
            host,
            port,
            configuration=c or configuration(),
            create_protocol=H3Client,
            session_ticket_handler=tickets.append,
            **kw,
        )

    if case in ("handshake", "http3"):
        async with conn() as client:
            await fetch(client, base, ["1k.bin"] if case == "handshake" else ["1k.bin", "1m.bin"])
    elif case == "transfer":
        async with conn() as client:
            await fetch(client, base, ["1m.bin", "5m.bin", "10m.bin"])
    elif case == "retry":
        async with conn() as client:
            await fetch(client, base, ["1k.bin"])
            if client._quic._retry_count == 0:
                raise Fail("no Retry received")
    elif case == "multiconnect":
        for _ in range(5):
            async with conn() as client:
                await fetch(client, base, ["1k.bin"])
    elif case == "chacha20":
        conf.cipher_suites = [CipherSuite.CHACHA20_POLY1305_SHA256]
        async with conn(conf) as client:
            await fetch(client, base, ["1m.bin"])
    elif case == "keyupdate":
        async with conn() as client:
            await fetch(client, base, ["1k.bin"])
            crypto = client._quic._cryptos[Epoch.ONE_RTT]
            phase = crypto.recv.key_phase
            client._quic.request_key_update()
            await fetch(client, base, ["1m.bin"])
            if crypto.recv.key_phase == phase:
                raise Fail("the server did not follow the key update")
    elif case in ("resumption", "zerortt"):
        async with conn() as client:
            await fetch(client, base, ["1k.bin"])
            await client.ping()  # the ticket comes after the handshake
        if not tickets:
            raise Fail("no session ticket")
        c2 = configuration(ticket=tickets[-1])
        if case == "resumption":
            async with conn(c2) as client:
                await fetch(client, base, ["1m.bin"])
                if not client._quic.tls.session_resumed:
                    raise Fail("not resumed")
        else:
            if not getattr(tickets[-1], "max_early_data_size", None):
                raise Fail("the ticket allows no early data")
            async with conn(c2, wait_connected=False) as client:
                await fetch(client, base, ["1k.bin"])
                if not client._quic.tls.early_data_accepted:
                    raise Fail("0-RTT refused")
    elif case == "v2":
        conf.original_version = QuicProtocolVersion.VERSION_1
        conf.supported_versions = [QuicProtocolVersion.VERSION_2, QuicProtocolVersion.VERSION_1]
        async with conn(conf) as client:
            await fetch(client, base, ["1k.bin"])
            if client._quic._version != QuicProtocolVersion.VERSION_2:
                raise Fail("stayed on v1")
    elif case in ("rebind-port", "connectionmigration"):
        # Mid-download, the client moves to a new port (rebind-port: the server sees a NAT
        # rebinding, same connection ID) or to a new address and a new connection ID
        # (connectionmigration, as a client moving networks).
        async with conn() as client:
            big = client.start_request("GET", base + "10m.bin")
            resp = client.responses[max(client.responses)]
            while resp.length < (2 << 20) and not big.done():
                await asyncio.sleep(0.01)
            if big.done():
                raise Fail("download ended before the move")
            if case == "rebind-port":
                await move_socket(client, "::")
            else:
                await move_socket(client, "::ffff:127.0.0.2")
                client.change_connection_id()
            client.transmit()
            check(await big, "10m.bin")
            await fetch(client, base, ["1k.bin"])
    else:
        raise NotImplementedError


def main():
    case, base = sys.argv[1], sys.argv[2]
    try:
        asyncio.run(asyncio.wait_for(run(case, base), 60))
    except NotImplementedError:
        print("unsupported")
        sys.exit(127)
    except Fail as e:
        print("fail: %s" % e)
        sys.exit(1)
    except Exception as e:  # a timeout or a connection error: the case failed
        print("fail: %r" % e)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
