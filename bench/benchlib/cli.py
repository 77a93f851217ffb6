"""`bench/run`: parse the command line, run the matrix, write results.csv, report.md, charts."""

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile

from . import report, scenarios, servers
from .procs import Launcher
from .runner import COLUMNS, Runner, Settings, make_certificate, make_docroot

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(BENCH_DIR)


def main(argv=None):
    args = parse_args(argv)
    if args.report_only:
        return rewrite_report(args.report_only, args.update_docs)
    try:
        cases = scenarios.select([s.upper() for s in args.scenarios or []] or None, args.quick)
        chosen = servers.by_name(args.servers)
    except ValueError as e:
        print("bench/run: %s" % e, file=sys.stderr)
        return 2
    reps = args.reps or (1 if args.quick else 3)
    out_dir = args.out or os.path.join(
        BENCH_DIR, "results", datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    )
    os.makedirs(out_dir, exist_ok=True)

    run_dir = tempfile.mkdtemp(prefix="spate-bench-")
    os.chmod(run_dir, 0o755)  # workers that drop root privileges must read the docroot
    launcher = Launcher()
    # SIGTERM and SIGHUP take the same way out as Ctrl-C: through the finally below. SIGINT is
    # set too, because a shell starting us in the background leaves it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    rows = []
    interrupted = False
    try:
        _pin_self(args.load_cpu)
        docroot, answer_root = make_docroot(
            run_dir, with_varied=any(c.scenario == "V1" for c in cases)
        )
        cert, key = make_certificate(run_dir)
        env = servers.Env(
            run_dir,
            docroot,
            answer_root,
            cert,
            key,
            launcher,
            args.server_cpu,
            _spate_path(args.spate),
            args.floor or _floor_path("floor"),
            _h3_h2load(args.h3_h2load),
            _h2o_quic(args.h2o_quic),
            args.h2floor or _floor_path("h2floor"),
            args.spate_before,
        )
        settings = Settings(
            args.quick, reps, args.load_cpu, args.seconds, args.v1_conns_per_load
        )
        runner = Runner(env, settings, chosen, cases)
        print(
            "bench: %d runs, %s mode, about %d minutes, out %s"
            % (
                runner.planned_runs(),
                "quick" if args.quick else "full",
                estimated_minutes(runner.planned_runs(), reps, settings.seconds, args.extras),
                out_dir,
            ),
            file=sys.stderr,
        )
        rows = runner.rows
        runner.run()
        if args.extras:
            run_extras(out_dir, env.spate, args)
    except KeyboardInterrupt:
        interrupted = True
        print("bench: interrupted, stopping servers", file=sys.stderr)
    finally:
        launcher.stop_all()
        if args.keep_run_dir:
            print("bench: run dir kept at %s" % run_dir, file=sys.stderr)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)

    meta = machine_info(args, reps)
    if interrupted:
        meta["note"] = "interrupted: partial results"
    write_csv(os.path.join(out_dir, "results.csv"), rows)
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    write_report(out_dir, rows, cases, meta, args.update_docs)
    if interrupted:
        return 130
    if args.check and any(r["status"] in ("error", "flagged") for r in rows):
        return 1
    return 0


# What a run costs besides its measured seconds, from the quick runs of 2026-11-28 (252 server
# and case pairs in about 40 minutes): start, probe and warm-up of each pair; and the
# idle-memory and scale tables that --extras adds (3.5 minutes in the full run of 2026-11-29,
# whose 861 runs of 5 s took 72 minutes: the allowance per pair overestimates full runs).
PREP_SECONDS_PER_PAIR = 7.5
EXTRAS_SECONDS = 4 * 60


def estimated_minutes(runs, reps, seconds, extras):
    """A run's length to plan a session by: each server and case pair prepared once, then
    measured `reps` times for `seconds`."""
    pairs = runs / max(reps, 1)
    total = pairs * PREP_SECONDS_PER_PAIR + runs * seconds + (EXTRAS_SECONDS if extras else 0)
    return round(total / 60)


# docs/benchmarks.md and, beside it, its charts and the run's result files.
DOCS_PAGE = os.path.join(REPO_DIR, "docs", "benchmarks.md")
DOCS_RUN = os.path.join(REPO_DIR, "docs", "benchmarks")
RUN_FILES = ("results.csv", "meta.json") + tuple(name for name, _, _ in report.EXTRAS)


def run_extras(out_dir, spate, args):
    """bench/idle-memory and bench/scale against spate, h2o and nginx, their tables into
    out_dir (idle-memory.md, scale.md) for the report."""
    for name in ("idle-memory", "scale"):
        argv = [os.path.join(BENCH_DIR, name), "--spate", spate]
        argv += ["--server-cpu", str(args.server_cpu), "--client-cpu", str(args.load_cpu)]
        print("bench: %s" % " ".join(argv), file=sys.stderr, flush=True)
        # Its table (stdout) to the file; its progress lines (stderr) to ours as they come,
        # the last one kept: it says why, when the tool stops short.
        last = ""
        with open(os.path.join(out_dir, name + ".md"), "w") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.PIPE, text=True)
            for line in proc.stderr:
                sys.stderr.write(line)
                last = line.strip() or last
            rc = proc.wait()
            if rc != 0:
                f.write("\nNot measured in this run: `bench/%s` stopped (exit %d): %s\n"
                        % (name, rc, last))


def write_report(out_dir, rows, cases, meta, update_docs):
    if os.path.realpath(out_dir) != os.path.realpath(DOCS_RUN):
        # (docs/benchmarks/ holds the page's run: the page is its report)
        with open(os.path.join(out_dir, "report.md"), "w") as f:
            f.write(report.markdown(rows, cases, meta))
    charts = report.charts(rows, cases, out_dir)
    if update_docs:
        update_docs_page(out_dir, rows, cases, meta)
    drawn = ", %d charts" % charts if charts else ", no charts: no matplotlib, or none measured"
    print("bench: wrote %s (results.csv, report.md%s)" % (out_dir, drawn), file=sys.stderr)


def update_docs_page(out_dir, rows, cases, meta):
    """docs/benchmarks.md from this run, its charts and result files into docs/benchmarks/
    (replacing the last run's), so that `--report-only docs/benchmarks` writes it again."""
    os.makedirs(DOCS_RUN, exist_ok=True)
    same = os.path.realpath(out_dir) == os.path.realpath(DOCS_RUN)
    if not same:
        for name in os.listdir(DOCS_RUN):
            if name.endswith(".png") or name in RUN_FILES:
                os.remove(os.path.join(DOCS_RUN, name))
        for name in os.listdir(out_dir):
            if name.endswith(".png") or name in RUN_FILES:
                shutil.copy(os.path.join(out_dir, name), DOCS_RUN)
    extras = {}
    for name, _, _ in report.EXTRAS:
        path = os.path.join(out_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                extras[name] = f.read()
    with open(DOCS_PAGE, "w") as f:
        f.write(report.docs_page(rows, cases, meta, extras, os.path.basename(DOCS_RUN)))


def rewrite_report(out_dir, update_docs):
    """Report, charts (and docs) again from a finished run's results.csv and meta.json."""
    try:
        with open(os.path.join(out_dir, "results.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        with open(os.path.join(out_dir, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        print("bench/run: cannot read %s: %s" % (out_dir, e), file=sys.stderr)
        return 2
    keys = {r["case"] for r in rows}
    cases = [c for c in scenarios.select() if c.key in keys]
    write_report(out_dir, rows, cases, meta, update_docs)
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__)
    p.add_argument("--quick", action="store_true", help="~2 s per run, 1 repetition, fewer shapes")
    p.add_argument("--scenarios", type=_csv_list, default=None, help="e.g. S1,S5 (default: all)")
    p.add_argument(
        "--servers",
        type=_csv_list,
        default=[
            "spate",
            "h2o",
            "nginx",
            "nghttpd",
            "nghttpx",
            "apache",
            "floor",
            "floor-sized",
            "h2floor",
            "floor-files",
        ],
    )
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 3, quick 1)")
    p.add_argument(
        "--seconds", type=int, default=None, help="length of a run (default 10, quick 2)"
    )
    p.add_argument("--out", default=None, help="output dir (default bench/results/DATE-TIME)")
    p.add_argument("--spate", default=None, help="spate binary (default target/release/spate)")
    p.add_argument(
        "--spate-before",
        default=None,
        help="an earlier spate binary, run as server spate-before (name it in --servers)",
    )
    p.add_argument("--floor", default=None, help="floor binary (default bench/build/floor)")
    p.add_argument(
        "--h2floor", default=None, help="HTTP/2 floor binary (default bench/build/h2floor)"
    )
    p.add_argument(
        "--h3-h2load",
        default=None,
        help="h2load with HTTP/3 (default ../shared/peers/bin/h2load, else h2load if it has it)",
    )
    p.add_argument(
        "--h2o-quic",
        default=None,
        help="h2o with QUIC for the HTTP/3 rows (default ../shared/peers/h2o/bin/h2o)",
    )
    p.add_argument(
        "--v1-conns-per-load",
        type=int,
        default=None,
        help="V1: connections per h2load process, each process with its own URI order "
        "(default 10: ten orders at one process's rate; 1: every client its own; "
        "100: one process, one order walked in lockstep)",
    )
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--load-cpu", type=int, default=1)
    p.add_argument("--keep-run-dir", action="store_true", help="keep configs and server logs")
    p.add_argument(
        "--update-docs",
        action="store_true",
        help="also write docs/benchmarks.md (and its charts and result files in docs/benchmarks/)",
    )
    p.add_argument(
        "--extras",
        action="store_true",
        help="after the matrix, also run bench/idle-memory and bench/scale for the report",
    )
    p.add_argument(
        "--report-only",
        metavar="DIR",
        default=None,
        help="only rewrite DIR's report.md (and charts, docs) from its results.csv",
    )
    p.add_argument(
        "--check", action="store_true", help="exit 1 if any run errored or was flagged (for CI)"
    )
    return p.parse_args(argv)


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


def machine_info(args, reps):
    """What the report says about where and how it ran."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": model,
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "mode": "quick" if args.quick else "full",
        "reps": str(reps),
        "seconds": str(args.seconds or (2 if args.quick else 10)),
        "pinning": "servers on CPU %d, load generator on CPU %d" % (args.server_cpu, args.load_cpu),
        "versions": "; ".join(v for v in _versions() if v),
        "spate": args.spate or "target/release/spate (commit %s)" % _git_commit(),
    }


VERSION_COMMANDS = [
    ["h2o", "--version"],
    ["nginx", "-v"],
    ["apache2", "-v"],
    ["nghttpd", "--version"],
    ["nghttpx", "--version"],
    ["h2load", "--version"],
    ["wrk", "-v"],
    ["caddy", "version"],
]


def _versions():
    """Every tool's version line; the HTTP/3 rows' own h2o and h2load (../shared/peers) are
    named as such, since their versions differ from Debian's."""
    yield from (_version(c) for c in VERSION_COMMANDS)
    h2o_quic, h3_h2load = _h2o_quic(None), _h3_h2load(None)
    if h2o_quic:
        root = os.path.dirname(os.path.dirname(h2o_quic))
        v = _version(["env", "H2O_ROOT=" + root, h2o_quic, "--version"])
        yield v and v + " (HTTP/3 rows)"
    if h3_h2load and h3_h2load != "h2load":
        v = _version([h3_h2load, "--version"])
        yield v and v + " (HTTP/3 rows)"


def _version(argv):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        if argv[0] == "caddy":  # "v2.6.2 h1:..."
            return "caddy " + line.split(" ")[0]
        if "version" in line.lower() or line.startswith(("wrk", "h2load", "nghttp")):
            return line.split(" Copyright")[0].strip()
    return ""


def _git_commit():
    try:
        p = subprocess.run(
            ["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return p.stdout.decode().strip() or "unknown"


def _spate_path(given):
    return os.path.abspath(given) if given else os.path.join(REPO_DIR, "target", "release", "spate")


def _floor_path(name):
    """Where bench/setup builds floor.c and h2floor.c."""
    return os.path.join(BENCH_DIR, "build", name)


# Debian 12 has no HTTP/3 in its h2load nor its h2o: the shared peers next to the repository
# (shared/peers/README.md) have both. Without them the HTTP/3 rows are n/a.
PEERS_DIR = os.path.join(os.path.dirname(REPO_DIR), "shared", "peers")


def _h3_h2load(given):
    """The h2load that speaks HTTP/3, or None: `given`, the peers' build, or Debian's h2load
    when it is linked with ngtcp2 (Debian's 1.52 is not)."""
    for path in (given, os.path.join(PEERS_DIR, "bin", "h2load")):
        if path and _runs([path, "--version"]):
            return os.path.abspath(path)
    return "h2load" if _h2load_has_h3() else None


def _h2o_quic(given):
    """An h2o with QUIC (the peers' build, which finds its share/ through H2O_ROOT), or None."""
    path = given or os.path.join(PEERS_DIR, "h2o", "bin", "h2o")
    return os.path.abspath(path) if _runs([path, "--version"]) else None


def _runs(argv):
    try:
        return (
            subprocess.run(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _h2load_has_h3():
    """Whether h2load can speak HTTP/3: it needs ngtcp2, which Debian's 1.52 build lacks (its
    --help lists the QUIC options either way, so ask the dynamic linker)."""
    path = shutil.which("h2load")
    if not path:
        return False
    try:
        p = subprocess.run(
            ["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"ngtcp2" in p.stdout


def _pin_self(cpu):
    # The harness's own sampling thread stays off the servers' CPU.
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        pass


def _csv_list(text):
    return [x.strip() for x in text.split(",") if x.strip()]


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
