"""floor_files.c as the HTTP/1.1 cleartext V1 rows' floor: which cases, its command line, and
that it answers each path with that file's bytes."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from benchlib import servers
from benchlib.procs import free_port
from benchlib.scenarios import select

FLOOR_FILES_C = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "floor_files.c"
)


def case(key):
    return next(c for c in select() if c.key == key)


def test_the_files_floor_runs_the_cleartext_http1_v1_rows_only(env):
    floor = servers.FilesFloor()
    for key in ("V1-h1-one", "V1-h1-d50", "V1-h1-d2000", "V1-h1-mixed"):
        assert floor.applies(case(key)), key
    for key in ("V1-h2c-mixed", "V1-tls-h1-mixed", "V1-proxy-d50", "V1-h3-one", "S5"):
        assert not floor.applies(case(key)), key
    assert floor.binary(env) == "/nonexistent/floor_files"
    assert "no floor-files binary" in floor.unsupported(case("V1-h1-d50"), env)


def _get(port, paths):
    """The bodies of GETs for `paths`, pipelined on one connection."""
    for _ in range(100):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            break
        except OSError:
            time.sleep(0.02)
    s.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p.encode() for p in paths))
    data, bodies = b"", []
    while len(bodies) < len(paths):
        chunk = s.recv(65536)
        assert chunk, "closed after %d answers" % len(bodies)
        data += chunk
        while b"\r\n\r\n" in data:
            head, rest = data.split(b"\r\n\r\n", 1)
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            if len(rest) < length:
                break
            bodies.append(rest[:length])
            data = rest[length:]
    s.close()
    return bodies


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_floor_files_answers_each_path_with_its_file(tmp_path):
    binary = str(tmp_path / "floor_files")
    subprocess.run(["gcc", "-O2", "-o", binary, FLOOR_FILES_C], check=True)
    root = tmp_path / "root"
    (root / "v1").mkdir(parents=True)
    (root / "v1" / "a.txt").write_bytes(b"a" * 100)
    (root / "v1" / "b.txt").write_bytes(bytes(range(256)) * 40)
    port = free_port()
    proc = subprocess.Popen([binary, str(port), "pread", str(root)])
    try:
        bodies = _get(port, ["/v1/a.txt", "/v1/b.txt", "/v1/a.txt"])
    finally:
        proc.kill()
        proc.wait()
    assert bodies == [b"a" * 100, bytes(range(256)) * 40, b"a" * 100]
