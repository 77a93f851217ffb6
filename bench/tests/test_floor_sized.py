"""floor.c with the body size of S5's file: its cases, its command line, and the binary's answer."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from benchlib import servers
from benchlib.procs import free_port
from benchlib.scenarios import select

FLOOR_C = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "floor.c")


def case(key):
    return next(c for c in select() if c.key == key)


def test_the_sized_floor_runs_s5_only_with_the_file_size(env):
    floor = servers.SizedFloor()
    assert floor.applies(case("S5")) and floor.canned
    for key in ("S6-c100", "S1-6b", "S3-6b"):
        assert not floor.applies(case(key))
    assert servers.SizedFloor().argv(env, 9000, case("S5")) == ["/nonexistent/floor", "9000", "612"]
    assert "no floor-sized binary at /nonexistent/floor" in floor.unsupported(case("S5"), env)


def _answer(binary, *args):
    """The first response the floor, started on a free port with `args`, gives to one GET."""
    port = free_port()
    proc = subprocess.Popen([binary, str(port), *args])
    try:
        for _ in range(100):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except OSError:
                time.sleep(0.02)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return data
    finally:
        proc.kill()
        proc.wait()


def _length(data):
    head = data.split(b"\r\n\r\n", 1)[0].decode()
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "content-length":
            return int(value)
    return 0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_floor_answers_with_the_body_size_it_is_given_and_the_original_without(tmp_path):
    binary = str(tmp_path / "floor")
    subprocess.run(["gcc", "-O2", "-o", binary, FLOOR_C], check=True)
    original = _answer(binary)
    assert original.endswith(b"Content-Length: 2\r\n\r\n42")
    sized = _answer(binary, "612")
    head, body = sized.split(b"\r\n\r\n", 1)
    assert b"Content-Length: 612" in head and body == b"x" * 612
    assert subprocess.run([binary, "0", "20000"], capture_output=True).returncode == 1
