#!/usr/bin/env python3
"""WebSocket echo through a reverse proxy: spate (`proxy.tunnel`), nginx (`proxy_http_version
1.1` with the Upgrade and Connection headers) and h2o (`proxy.websocket`, 2.2.5's name), each
with one worker pinned to the server CPU, in front of one Python `websockets` echo server
(tests/ws/echo_server.py); the load client (bench/ws/load.py) and the backend share the other
CPU. A `direct` row measures the client and backend without a proxy.

Figures: echoed messages per second, and the proxy's CPU (utime+stime of its processes) per
message, which is the one to compare: the Python client and backend bound the rate.

    bench/ws/run.py [--servers spate,nginx,h2o] [--seconds 8] [--conns 50] [--size 64]
                    [--window 4] [--max-messages 3000000] [--reps 3] [--spate PATH]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from benchlib.procs import Launcher, free_port  # noqa: E402

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


def yaml_config(port, backend, tunnel, user=""):
    """spate and h2o: one YAML dialect; `tunnel` is the directives that turn tunnels on."""
    return f"""{user}num-threads: 1
listen:
  host: 127.0.0.1
  port: {port}
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{backend}/
{tunnel}"""


# spate: current h2o's name, idle timeout by proxy.timeout.io. h2o 2.2.5: its own names.
SPATE_TUNNEL = "        proxy.tunnel: ON\n        proxy.timeout.io: 60000\n"
H2O_TUNNEL = "        proxy.websocket: ON\n        proxy.websocket.timeout: 60000\n"


def nginx_config(port, backend, tmp):
    user = "user root;" if os.geteuid() == 0 else ""
    return f"""{user}
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_read_timeout 60s;
        }}
    }}
}}
"""


def start_proxy(name, launcher, run_dir, backend, spate_bin, cpu):
    """Starts `name` in front of `backend`; returns (process or None, port)."""
    if name == "direct":
        return None, backend
    port = free_port()
    if name == "spate":
        path = os.path.join(run_dir, "spate.yaml")
        open(path, "w").write(yaml_config(port, backend, SPATE_TUNNEL))
        argv = [spate_bin, "-c", path]
    elif name == "h2o":
        path = os.path.join(run_dir, "h2o.yaml")
        # As root, h2o would switch to `nobody`; keep it as it was started.
        user = "user: root\n" if os.geteuid() == 0 else ""
        open(path, "w").write(yaml_config(port, backend, H2O_TUNNEL, user))
        argv = ["h2o", "-c", path]
    elif name == "nginx":
        tmp = os.path.join(run_dir, "nginx")
        os.makedirs(tmp, exist_ok=True)
        path = os.path.join(tmp, "nginx.conf")
        open(path, "w").write(nginx_config(port, backend, tmp))
        argv = ["nginx", "-c", path, "-p", tmp, "-g", "daemon off;"]
    else:
        raise SystemExit(f"unknown server {name}")
    proc = launcher.start(name, argv, run_dir, cpu=cpu)
    proc.wait_listening(port)
    return proc, port


def start_backend(launcher, run_dir, cpu):
    port = free_port()
    script = os.path.join(ROOT, "tests", "ws", "echo_server.py")
    proc = launcher.start("echo", [PYTHON, script, str(port)], run_dir, cpu=cpu)
    proc.wait_listening(port)
    return proc, port


def run_load(port, args, cpu):
    argv = ["taskset", "-c", str(cpu), PYTHON, os.path.join(HERE, "load.py"),
            f"ws://127.0.0.1:{port}/", str(args.conns), str(args.size), str(args.window),
            str(args.seconds), str(args.max_messages)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=args.seconds + 60)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"load client failed: {out.stderr[-500:]}")
    return json.loads(lines[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default="direct,spate,nginx,h2o")
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--conns", type=int, default=50)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--max-messages", type=int, default=3_000_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--spate", default=os.path.join(ROOT, "target", "release", "spate"))
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--load-cpu", type=int, default=1)
    args = p.parse_args()
    args.spate = os.path.abspath(args.spate)
    run_dir = tempfile.mkdtemp(prefix="spate-ws-bench-")
    launcher = Launcher()
    rows = []
    try:
        _, backend = start_backend(launcher, run_dir, args.load_cpu)
        for name in args.servers.split(","):
            if name not in ("direct", "spate") and not shutil.which(name):
                rows.append((name, None, "not installed"))
                continue
            proc, port = start_proxy(name, launcher, run_dir, backend, args.spate, args.server_cpu)
            reps = []
            for _ in range(args.reps):
                cpu0 = proc.cpu_seconds() if proc else 0.0
                r = run_load(port, args, args.load_cpu)
                cpu = (proc.cpu_seconds() - cpu0) if proc else 0.0
                reps.append((r["messages"] / r["seconds"], cpu * 1e6 / max(r["messages"], 1), r["errors"]))
                print(f"{name}: {reps[-1][0]:.0f} msg/s, {reps[-1][1]:.1f} µs CPU/msg, "
                      f"{r['errors']} errors {r.get('last_error', '')}", flush=True)
            if proc:
                proc.stop()
            rows.append((name, reps, ""))
    finally:
        launcher.stop_all()
        shutil.rmtree(run_dir, ignore_errors=True)
    print()
    print(f"WebSocket echo, {args.conns} connections x {args.window} in flight, "
          f"{args.size} B binary messages, {args.seconds:g} s x {args.reps}: median [min-max]")
    print()
    print("| proxy | messages/s | proxy CPU µs per message | errors |")
    print("|---|---|---|---|")
    for name, reps, why in rows:
        if reps is None:
            print(f"| {name} | n/a ({why}) | | |")
            continue
        rate = [r[0] for r in reps]
        cpu = [r[1] for r in reps]
        errs = sum(r[2] for r in reps)
        cpu_cell = "-" if name == "direct" else \
            f"{statistics.median(cpu):.1f} [{min(cpu):.1f}-{max(cpu):.1f}]"
        print(f"| {name} | {statistics.median(rate):.0f} [{min(rate):.0f}-{max(rate):.0f}] | "
              f"{cpu_cell} | {errs} |")


if __name__ == "__main__":
    main()
