#!/usr/bin/env python3
"""Cache hits: spate's `proxy.cache` against nginx's `proxy_cache` and Varnish, and against
spate serving the same bytes as a static file, in one run (issue 40).

Each cache runs one worker pinned to the server CPU (spate `num-threads: 1`, nginx
`worker_processes 1`, Varnish `-p thread_pools=1` with the whole process pinned by taskset)
in front of one origin (a small Python server on the load CPU that answers
`Cache-Control: max-age=3600`). Every object is fetched twice through each cache before the
runs, so the runs are hits only: the origin's count of requests is read before and after each
run, and a run that reached it is flagged.

Cases: a cached 4 KiB and a cached 100 KB response, `h2load -c100 -m10` over h2c (prior
knowledge: nginx's `listen ... http2`, Varnish's `-p feature=+http2`) and, with
`--protocols h2c,h1`, over HTTP/1.1 (`h2load --h1 -c100 -m1`). The `spate-static` row is
spate's file handler on the same bytes (`file.dir`), in the same process as the cache.

Figures: the server's CPU per request (utime+stime of its processes over the run divided by
the requests h2load completed: the one to compare, as the load generator shares the machine),
and req/s. Runs of a repetition go through the servers in an order that turns by one each
repetition. Ports 18580-18599 (`--port-base`).

    bench/cache-hit/run.py                               # 4k and 100k, h2c, 5 s x 3
    bench/cache-hit/run.py --reps 6 --seconds 4 --protocols h2c,h1
    bench/cache-hit/run.py --servers spate,spate-static --sizes 4k
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from benchlib.parsers import ParseError, parse_h2load  # noqa: E402
from benchlib.procs import Launcher, StartError, run_bounded  # noqa: E402

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
SIZES = {"4k": 4096, "100k": 102400}
SERVERS = ("spate", "spate-static", "nginx", "varnish")
LOAD = {
    "h2c": ["h2load", "-c100", "-m10"],
    "h1": ["h2load", "--h1", "-c100", "-m1"],
}

# The origin: files from its directory, each with a lifetime of an hour, and a count of the
# requests it answered at /__count (not cached: no-store).
ORIGIN = r"""
import functools, http.server, sys, threading
count = [0]
lock = threading.Lock()
class Origin(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path == "/__count":
            body = str(count[0]).encode()
            self.send_response(200)
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        with lock:
            count[0] += 1
        super().do_GET()
    def end_headers(self):
        if self.path != "/__count":
            self.send_header("Cache-Control", "max-age=3600")
        super().end_headers()
    def log_message(self, *a):
        pass
handler = functools.partial(Origin, directory=sys.argv[2])
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
"""


def spate_config(port, origin, www):
    return f"""num-threads: 1
max-connections: 15000
http2-max-concurrent-requests-per-connection: 1024
listen:
  host: 127.0.0.1
  port: {port}
hosts:
  default:
    paths:
      /static:
        file.dir: {www}
      /:
        proxy.reverse.url: http://127.0.0.1:{origin}/
        proxy.cache: {{memory: 256MB, max-object-size: 1MB}}
"""


def nginx_config(ports, origin, tmp):
    user = "user root;" if os.geteuid() == 0 else ""
    h2c, h1 = ports
    return f"""{user}
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 15000; multi_accept on; }}
http {{
    access_log off;
    server_tokens off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    http2_max_concurrent_streams 1024;
    open_file_cache max=10000 inactive=60s;
    open_file_cache_valid 60s;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    proxy_cache_path {tmp}/cache levels=1:2 keys_zone=hits:10m max_size=256m inactive=1h;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{h2c} http2;
        listen 127.0.0.1:{h1};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache hits;
            add_header X-Cache-Status $upstream_cache_status;
        }}
    }}
}}
"""


VCL = """vcl 4.1;
backend origin {{ .host = "127.0.0.1"; .port = "{origin}"; }}
"""


class Server:
    """One server under test: its process and the port of each protocol."""

    def __init__(self, name, proc, ports, prefix=""):
        self.name = name
        self.proc = proc
        self.ports = ports  # protocol -> port
        self.prefix = prefix  # the path the objects are under

    def url(self, proto, size):
        return f"http://127.0.0.1:{self.ports[proto]}{self.prefix}/{size}.bin"


def start_servers(names, launcher, run_dir, args, origin, www):
    """Starts the servers named (spate-static shares spate's process); returns them by name."""
    base = args.port_base
    out = {}
    spate = None
    if "spate" in names or "spate-static" in names:
        path = os.path.join(run_dir, "spate.yaml")
        with open(path, "w") as f:
            f.write(spate_config(base + 1, origin, www))
        spate = launcher.start("spate", [args.spate, "-c", path], run_dir, cpu=args.server_cpu)
        spate.wait_listening(base + 1)
        both = {"h2c": base + 1, "h1": base + 1}
        if "spate" in names:
            out["spate"] = Server("spate", spate, both)
        if "spate-static" in names:
            out["spate-static"] = Server("spate-static", spate, both, "/static")
    if "nginx" in names:
        tmp = os.path.join(run_dir, "nginx")
        os.makedirs(tmp, exist_ok=True)
        path = os.path.join(tmp, "nginx.conf")
        with open(path, "w") as f:
            f.write(nginx_config((base + 2, base + 3), origin, tmp))
        argv = ["nginx", "-c", path, "-p", tmp, "-g", "daemon off;"]
        proc = launcher.start("nginx", argv, run_dir, cpu=args.server_cpu)
        proc.wait_listening(base + 3)
        out["nginx"] = Server("nginx", proc, {"h2c": base + 2, "h1": base + 3})
    if "varnish" in names:
        vcl = os.path.join(run_dir, "default.vcl")
        with open(vcl, "w") as f:
            f.write(VCL.format(origin=origin))
        # -F: in the foreground; -j none: no jail, as started (a scratch work directory);
        # one thread pool; HTTP/2 with prior knowledge (and HTTP/1.1) on the one port.
        argv = ["varnishd", "-F", "-j", "none", "-n", os.path.join(run_dir, "varnish"),
                "-a", f"127.0.0.1:{base + 4}", "-f", vcl, "-s", "malloc,256m",
                "-p", "thread_pools=1", "-p", "feature=+http2"]
        proc = launcher.start("varnish", argv, run_dir, cpu=args.server_cpu)
        proc.wait_listening(base + 4, timeout=30)
        out["varnish"] = Server("varnish", proc, {"h2c": base + 4, "h1": base + 4})
    return out


def origin_count(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__count", timeout=5) as r:
        return int(r.read())


def warm(server, sizes, origin):
    """Each object fetched twice over HTTP/1.1: stored by the first, a hit by the second."""
    for size in sizes:
        for _ in range(2):
            url = server.url("h1", size)
            with urllib.request.urlopen(url, timeout=10) as r:
                body = r.read()
            if len(body) != SIZES[size]:
                raise RuntimeError(f"{server.name}: {url} gave {len(body)} bytes")


def run_case(server, proto, size, args, origin):
    """One run: (req/s, CPU µs per request, problems)."""
    before_origin = origin_count(origin)
    cpu0 = server.proc.cpu_seconds()
    argv = LOAD[proto] + ["-D", str(args.seconds), server.url(proto, size)]
    rc, text = run_bounded(argv, timeout=args.seconds + 60, cpu=args.load_cpu)
    cpu = server.proc.cpu_seconds() - cpu0
    try:
        r = parse_h2load(text)
    except ParseError as e:
        return None, None, [f"h2load: {e}"]
    problems = [f"{k} {v}" for k, v in r.problems.items()]
    if proto == "h2c" and r.protocol and r.protocol != "h2c":
        problems.append(f"protocol {r.protocol}")
    misses = origin_count(origin) - before_origin
    if misses:
        problems.append(f"{misses} requests reached the origin")
    return r.rps, cpu * 1e6 / max(r.completed, 1), problems


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default=",".join(SERVERS))
    p.add_argument("--sizes", default="4k,100k")
    p.add_argument("--protocols", default="h2c")
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--spate", default=os.path.join(ROOT, "target", "release", "spate"))
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--load-cpu", type=int, default=1)
    p.add_argument("--port-base", type=int, default=18580)
    args = p.parse_args()
    args.spate = os.path.abspath(args.spate)
    names = [n for n in args.servers.split(",") if n]
    sizes = [s for s in args.sizes.split(",") if s]
    protos = [x for x in args.protocols.split(",") if x]
    for n in names:
        if n not in SERVERS:
            raise SystemExit(f"unknown server {n} (of {', '.join(SERVERS)})")
    run_dir = tempfile.mkdtemp(prefix="spate-cache-hit-")
    launcher = Launcher()
    results = {}  # (proto, size, server) -> [(rps, cpu, problems)]
    skipped = {}
    try:
        www = os.path.join(run_dir, "www")
        os.makedirs(www)
        for size in sizes:
            with open(os.path.join(www, f"{size}.bin"), "wb") as f:
                f.write(os.urandom(SIZES[size]))
        origin = args.port_base
        script = os.path.join(run_dir, "origin.py")
        with open(script, "w") as f:
            f.write(ORIGIN)
        o = launcher.start("origin", [PYTHON, script, str(origin), www], run_dir,
                           cpu=args.load_cpu)
        o.wait_listening(origin)
        for n in names:
            binary = {"nginx": "nginx", "varnish": "varnishd"}.get(n)
            if binary and not shutil.which(binary):
                skipped[n] = f"{binary} not installed"
        live = [n for n in names if n not in skipped]
        servers = start_servers(live, launcher, run_dir, args, origin, www)
        for s in servers.values():
            warm(s, sizes, origin)
        cases = [(proto, size) for proto in protos for size in sizes]
        for rep in range(args.reps):
            order = live[rep % len(live):] + live[:rep % len(live)]
            for proto, size in cases:
                for n in order:
                    rps, cpu, problems = run_case(servers[n], proto, size, args, origin)
                    results.setdefault((proto, size, n), []).append((rps, cpu, problems))
                    flag = f" ⚠ {'; '.join(problems)}" if problems else ""
                    shown = f"{rps:.0f} req/s, {cpu:.2f} µs CPU/req" if rps else ""
                    print(f"rep {rep + 1} {proto} {size} {n}: {shown}{flag}", flush=True)
    except StartError as e:
        raise SystemExit(f"a server did not start: {e}")
    finally:
        launcher.stop_all()
        shutil.rmtree(run_dir, ignore_errors=True)
    report(results, skipped, names, protos, sizes, args)


def clean(runs):
    return [r for r in runs if r[0] and not r[2]]


def cell(runs):
    ok = clean(runs)
    if not ok:
        return "⚠ no clean run", None
    cpu = [r[1] for r in ok]
    rps = [r[0] for r in ok]
    med = statistics.median(cpu)
    return (f"**{med:.2f}** [{min(cpu):.2f}-{max(cpu):.2f}] · {statistics.median(rps):.0f}",
            med)


def report(results, skipped, names, protos, sizes, args):
    print()
    print(f"Cache hits, `h2load -c100` ({args.seconds} s x {args.reps}), one pinned worker each: "
          "server CPU µs per request, median [min-max] · req/s")
    print()
    cols = [n for n in names if n not in skipped]
    print("| case | " + " | ".join(cols) + " | spate ÷ best cache | spate ÷ spate-static |")
    print("|---|" + "---|" * (len(cols) + 2))
    for proto in protos:
        for size in sizes:
            meds = {}
            cells = []
            for n in cols:
                text, med = cell(results.get((proto, size, n), []))
                meds[n] = med
                cells.append(text)
            peers = [meds[n] for n in ("nginx", "varnish") if meds.get(n)]
            ratio = (f"{meds['spate'] / min(peers):.2f}x"
                     if meds.get("spate") and peers else "-")
            static = (f"{meds['spate'] / meds['spate-static']:.2f}x"
                      if meds.get("spate") and meds.get("spate-static") else "-")
            print(f"| {proto} {size} | " + " | ".join(cells) + f" | {ratio} | {static} |")
    for n, why in skipped.items():
        print(f"\n{n}: n/a ({why})")
    flagged = [(k, r) for k, runs in results.items() for r in runs if r[2]]
    for (proto, size, n), r in flagged:
        print(f"\n⚠ {proto} {size} {n}: {'; '.join(r[2])}")


if __name__ == "__main__":
    main()
