"""Runs the matrix: for each scenario and server, start the server, probe, warm up, measure.

Produces one row (a dict, the CSV's columns) per measured repetition and one per case a server
cannot run ("n/a" with the reason), so the report and results.csv say why a cell is empty.
"""

import http.client
import math
import os
import ssl
import subprocess
import sys
import tempfile
import time

from . import page, parsers, varied
from .procs import RssSampler, StartError, run_bounded, run_bounded_all
from .scenarios import FILES

# For reference, never "the best peer" (of the report, nor for L1's rate): the floors, and an
# earlier spate build.
ANCHORS = ("floor", "floor-sized", "h2floor", "floor-files", "spate-before")

COLUMNS = [
    "scenario",
    "case",
    "label",
    "load",
    "server",
    "rep",
    "status",
    "reason",
    "rps",
    "requests",
    "duration_s",
    "failed",
    "errored",
    "timeout",
    "non2xx",
    "socket_errors",
    "cpu_s",
    "cpu_us_per_req",
    "backend_cpu_us_per_req",
    "peak_rss_kb",
    "bytes_per_resp",
    "protocol",
    "command",
    # L1: the rate the load was held at, and percentiles of the per-request times.
    "target_rps",
    "p50_ms",
    "p99_ms",
    "p999_ms",
]

# V1: connections per h2load process. h2load hands every connection of a process the same URI
# list from its start, so connections sharing a process ask for the same paths at nearly the
# same moments (memo hits by accident); at 1 each client walks its own order, but 100 h2load
# processes on one load CPU reach a fifth of one process's rate, so the server is not loaded as
# in the other scenarios. 10 processes of 10 keep one process's rate with ten orders (measured:
# spate h2c 57.8k req/s vs 50.9k with one process and 11.4k with 100). The repeated line
# runs in the same shape (one process per client, over its one URL), so that the lines of a
# transport differ in their traffic only, not in how the load generator batches it.
VARIED_CONNS_PER_LOAD = 10


def case_url(case, port):
    """The URL `case` loads on a server listening on `port`."""
    scheme = "https" if case.listener in ("tls", "quic") else "http"
    return "%s://127.0.0.1:%d%s" % (scheme, port, case.path)


class Settings:
    """How long and how often: quick mode keeps a run to ~2 s, full mode to ~10 s."""

    def __init__(self, quick, reps, load_cpu, seconds=None, v1_conns_per_load=None):
        self.quick = quick
        self.reps = reps
        self.load_cpu = load_cpu
        self.seconds = seconds or (2 if quick else 10)
        # V1's connections per h2load process (VARIED_CONNS_PER_LOAD unless given: 100, one
        # process walking one list, measures what the lockstep was worth).
        self.v1_conns_per_load = v1_conns_per_load or VARIED_CONNS_PER_LOAD


class Runner:
    def __init__(self, env, settings, servers, cases, progress=None):
        self.env = env
        self.settings = settings
        self.servers = servers
        self.cases = cases
        self.rows = []
        self.progress = progress or Progress(self.planned_runs())
        self.targets = {}  # L1: case key -> the req/s its load is held at

    def planned_runs(self):
        return sum(
            self.settings.reps for case in self.cases for s in self.servers if s.applies(case)
        )

    def run(self):
        """Run everything; rows accumulate in self.rows even if interrupted.

        Within a group of cases every server is started at once (each on its own port, idle
        while the others are measured), and repetitions go round the servers: rep 1 of each,
        then rep 2 of each. Noise from the rest of the machine then falls on every server
        alike instead of on whichever happened to run during it. The order turns with each
        repetition (`rep_order`)."""
        groups = []
        for case in self.cases:
            if case.group not in groups:
                groups.append(case.group)
        for group in groups:
            cases = [c for c in self.cases if c.group == group]
            if cases[0].cold_requests:
                self.run_cold(cases[0])
                continue
            started = []
            try:
                for server in self.servers:
                    runnable = self.runnable(server, [c for c in cases if server.applies(c)])
                    if not runnable:
                        continue
                    try:
                        started.append((server, server.start(self.env, runnable), runnable))
                    except StartError as e:
                        for case in runnable:
                            self.skip(server, case, self.failure_status(server), "start: %s" % e)
                for case in cases:
                    ready = []
                    if case.rate_pct and not self.set_target(case, started):
                        continue
                    for server, group_inst, runnable in started:
                        if case in runnable:
                            inst = group_inst.for_case(case)
                            prepared = self.prepare_case(server, inst, case)
                            if prepared:
                                ready.append((server, inst, prepared))
                    for rep in range(1, self.settings.reps + 1):
                        for server, inst, (url, requests, seconds) in self.rep_order(ready, rep):
                            self.rows.append(
                                self.measure(server, inst, case, url, rep, requests, seconds)
                            )
                            self.progress.step(self.rows[-1])
            finally:
                for _, inst, _ in started:
                    inst.stop()
        return self.rows

    def run_cold(self, case):
        """A cold-start case: each repetition of each server on a server (and backend) started
        for it, loaded with `case.cold_requests` from its first request, then probed (a failed
        probe turns the row into the server's failure) and stopped."""
        servers = []
        for server in self.servers:
            if server.applies(case) and self.runnable(server, [case]):
                servers.append(server)
        for rep in range(1, self.settings.reps + 1):
            for server in self.rep_order(servers, rep):
                try:
                    inst = server.start(self.env, [case]).for_case(case)
                except StartError as e:
                    row = self.base_row(server, case, rep)
                    row.update(status=self.failure_status(server), reason="start: %s" % e)
                    self.rows.append(row)
                    self.progress.step(row)
                    continue
                try:
                    url = case_url(case, inst.port)
                    row = self.measure(server, inst, case, url, rep, case.cold_requests)
                    reason = probe(case, url, check_body=not server.canned, h3_client=self.env.h3_client)
                    if not reason:
                        reason = probe_varied(
                            case, url, self.uri_file(case, url, once=True), self.env
                        )
                    if reason and row["status"] == "ok":
                        row.update(
                            status=self.failure_status(server),
                            reason="probe after the run: %s" % reason,
                        )
                finally:
                    inst.stop()
                self.rows.append(row)
                self.progress.step(row)

    def set_target(self, case, started):
        """L1: hold `case`'s load at rate_pct % of the best peer's median req/s on its peak
        case (spate's own when no peer ran it clean). False, with the case reported n/a for
        every server, when there is no clean peak."""
        rates = {}
        for row in self.rows:
            if row["case"] == case.peak and row["status"] == "ok" and row["rps"] != "":
                rates.setdefault(row["server"], []).append(float(row["rps"]))
        medians = {srv: sorted(v)[len(v) // 2] for srv, v in rates.items()}
        peers = {s: r for s, r in medians.items() if s != "spate" and s not in ANCHORS}
        best = max(peers.values()) if peers else medians.get("spate")
        if not best:
            for server, _, runnable in started:
                if case in runnable:
                    reason = "no clean peak (%s) to take the rate from" % case.peak
                    self.skip(server, case, "n/a", reason)
            return False
        self.targets[case.key] = best * case.rate_pct / 100.0
        return True

    @staticmethod
    def rep_order(ready, rep):
        """The servers of repetition `rep` (from 1), turned by one place per repetition. Run
        in a fixed order, the first of a pair measured 5-20 % higher than when it ran second
        (S6 -c10, spate and floor.c, 2026-11-24), which skewed the paired ratios; turned,
        each server takes each place equally often over a multiple of the servers' count."""
        if not ready:
            return ready
        k = (rep - 1) % len(ready)
        return ready[k:] + ready[:k]

    def runnable(self, server, cases):
        """The cases this server can run; the others are reported n/a with the reason."""
        runnable = []
        for case in cases:
            reason = server.unsupported(case, self.env)
            if reason:
                self.skip(server, case, "n/a", reason)
            else:
                runnable.append(case)
        return runnable

    def prepare_case(self, server, inst, case):
        """Checks the server answers the case; returns (url, requests per run, expected length
        of a run in seconds) or None."""
        if not inst.proc.alive():
            # A crash in an earlier case is the server's fault, never a feature gap.
            self.skip(server, case, "error", "server exited: %s" % inst.proc.log_tail())
            return None
        url = case_url(case, inst.port)
        reason = probe(case, url, check_body=not server.canned, h3_client=self.env.h3_client)
        if not reason and case.uris:
            reason = probe_varied(case, url, self.uri_file(case, url, once=True), self.env)
        if reason:
            self.skip(server, case, self.failure_status(server), "probe: %s" % reason)
            return None
        if case.rate_pct:
            # Warmed by the peak case; a run lasts its length at the rate it is held at.
            seconds = self.settings.seconds
            return url, max(case.conns, int(self.targets[case.key] * seconds)), seconds
        return (url,) + self.warm_up(case, url)

    def measure(self, server, inst, case, url, rep, requests, seconds=None):
        log_file = None
        if case.rate_pct:
            name = "latency-%s-%s-%d.tsv" % (case.key, server.name, rep)
            log_file = os.path.join(self.env.run_dir, name)
        argvs = self.load_argvs(case, url, requests=requests, seconds=seconds, log_file=log_file)
        row = self.base_row(server, case, rep)
        row["command"] = " ".join(argvs[0])
        if len(argvs) > 1:
            row["command"] += " (one of %d h2load processes side by side, one per client list)" % (
                len(argvs)
            )
        if not inst.proc.alive():
            row.update(status="error", reason="server exited: %s" % inst.proc.log_tail())
            return row
        cpu0 = inst.proc.cpu_seconds()
        bcpu0 = inst.backend.cpu_seconds() if inst.backend else 0.0
        with RssSampler(inst.proc) as rss:
            rc, res = self.run_load(case, argvs, self.timeout(seconds))
        cpu = inst.proc.cpu_seconds() - cpu0
        bcpu = (inst.backend.cpu_seconds() - bcpu0) if inst.backend else None
        if isinstance(res, parsers.ParseError):
            row.update(status="error", reason="%s (exit %s)" % (res, rc), cpu_s=round(cpu, 4))
            return row
        row.update(
            rps=round(res.rps, 2),
            requests=res.completed,
            duration_s=round(res.duration_s, 3),
            failed=res.failed,
            errored=res.errored,
            timeout=res.timeout,
            non2xx=res.non2xx,
            socket_errors=res.socket_errors,
            cpu_s=round(cpu, 4),
            peak_rss_kb=rss.peak_kb,
            protocol=res.protocol.strip(),
        )
        if log_file:
            row.update(target_rps=round(self.targets[case.key], 1), **latency_percentiles(log_file))
            if os.path.exists(log_file):
                os.remove(log_file)  # a line per request: megabytes per run
        if res.completed:
            row["cpu_us_per_req"] = round(cpu / res.completed * 1e6, 3)
            if case.encoding:
                # What each server's encoder made of the page: comparable levels, checked.
                row["bytes_per_resp"] = round(res.data_bytes / res.completed, 1)
            if bcpu is not None:
                row["backend_cpu_us_per_req"] = round(bcpu / res.completed * 1e6, 3)
        problems = res.problems
        if problems:
            row["status"] = "flagged"
            row["reason"] = ", ".join("%d %s" % (v, k) for k, v in problems.items())
            if res.notes:
                row["reason"] += "; " + res.notes[0]
        if not inst.proc.alive():
            row["status"] = "error"
            row["reason"] = "server exited during the run: %s" % inst.proc.log_tail()
        return row

    def run_load(self, case, argvs, timeout):
        """Run the load's process(es) on the load CPU; (exit status, LoadResult) or, when a
        process printed no summary, (its exit status, the ParseError). Several processes
        (V1's clients) run side by side and their results are merged (parsers.merge)."""
        if len(argvs) == 1:
            rc, out = run_bounded(argvs[0], timeout, self.settings.load_cpu)
            parse = parsers.parse_h2load if case.tool == "h2load" else parsers.parse_wrk
            try:
                return rc, parse(out)
            except parsers.ParseError as e:
                return rc, e
        results, starts = [], []
        for client, (rc, out, start) in enumerate(
            run_bounded_all(argvs, timeout, self.settings.load_cpu)
        ):
            try:
                results.append(parsers.parse_h2load(out))
            except parsers.ParseError as e:
                return rc, parsers.ParseError("client %d of %d: %s" % (client, len(argvs), e))
            starts.append(start)
        return 0, parsers.merge(results, starts)

    def load_argvs(self, case, url, warm=False, requests=None, seconds=None, log_file=None):
        """The load's command lines: one, or for V1 one per group of v1_conns_per_load
        connections, each (on the varied lines) with its own URI list, the requests split
        evenly between them (at least one per connection)."""
        if case.scenario != "V1":
            argv = self.load_argv(case, url, warm, requests, seconds)
            if case.rate_pct and log_file:
                # h2load's rate is per client: the total spread evenly over the connections.
                rate = self.targets[case.key] / case.conns
                argv[-1:-1] = ["--rps=%.3f" % rate, "--log-file=%s" % log_file]
            return [argv]
        groups = math.ceil(case.conns / self.settings.v1_conns_per_load)
        return [
            self.load_argv(case, url, warm, requests, seconds, client=g) for g in range(groups)
        ]

    def load_argv(self, case, url, warm=False, requests=None, seconds=None, client=None):
        """The load's command line; h2load's time bound follows `seconds`, the length the run
        is expected to last (default: a run's length). `client`: V1's client group number,
        whose share of the connections and requests this process makes (over its own list)."""
        secs = self.settings.seconds
        if case.tool == "wrk":
            duration = 1 if warm else secs
            return ["wrk", "-t1", "-c%d" % case.conns, "-d%ds" % duration, "--timeout", "5s", url]
        argv = [self.env.h3_client if case.listener == "quic" else "h2load"]
        argv += ["--h1"] if case.h1 else []  # HTTP/1.1 (V1), ALPN http/1.1 over TLS
        conns = case.conns
        if client is not None:
            per = self.settings.v1_conns_per_load
            groups = math.ceil(case.conns / per)
            conns = min(per, case.conns - client * per)
            requests = max(conns, math.ceil(requests / groups))
        argv += [
            "-t1",
            "-c%d" % conns,
            "-m%d" % case.streams,
            "-n%d" % requests,
            "-T%d" % math.ceil(3 * (seconds or secs) + 5),
            "-N10",
        ]
        if case.big_windows:
            argv += ["-w30", "-W30"]
        if case.listener == "quic":
            argv += ["--alpn-list=h3"]
        if case.encoding:
            argv += ["-H", "accept-encoding: %s" % case.encoding]
        if case.uris:
            return argv + ["-i", self.uri_file(case, url, client=client)]
        return argv + [url]

    def uri_file(self, case, url, once=False, client=None):
        """V1: the file of URIs `h2load -i` reads for `case` at `url` (written on first use):
        case.uris's shuffled list of varied.py (`client`: that client's own order), every
        line a whole URI (h2load takes the scheme, host and port from the first). `once`:
        each path of the set once, in file order (the probe's)."""
        base = url.split("://", 1)[0] + "://" + url.split("://", 1)[1].split("/", 1)[0]
        port = base.rsplit(":", 1)[1]
        d = os.path.join(self.env.run_dir, "uris")
        os.makedirs(d, exist_ok=True)
        if once:
            suffix = "-once"
        elif client is not None:
            suffix = "-client%d" % client
        else:
            suffix = ""
        path = os.path.join(d, "%s-%s%s.txt" % (case.uris, port, suffix))
        if not os.path.exists(path):
            if once:
                paths = varied.paths(case.uris)
            else:
                paths = varied.uri_list(case.uris, client)
            with open(path, "w") as f:
                f.write("".join(base + p + "\n" for p in paths))
        return path

    def warm_up(self, case, url):
        """Warm the server up; return (requests, seconds): for h2load, the request count for a
        run of ~`seconds` and how long it should last (longer when even the fewest requests a
        run makes take longer, as in quick C1), for wrk (None, `seconds`).

        A short first round is dominated by connection (and TLS) setup, so a second round sized
        to a quarter of a run gives the rate the real run is sized from; a first round that
        already lasted that long (expensive requests, C1) gives it by itself.
        """
        if case.tool == "wrk":
            run_bounded(
                self.load_argv(case, url, warm=True), self.timeout(), self.settings.load_cpu
            )
            return None, self.settings.seconds
        quarter_s = self.settings.seconds * 0.25
        rate, took = self.h2load_round(case, url, case.warm_requests or max(case.conns * 20, 10000))
        if took < quarter_s:
            rate, _ = self.h2load_round(case, url, self.requests_for(case, rate, quarter_s))
        requests = self.requests_for(case, rate, self.settings.seconds)
        return requests, max(self.settings.seconds, requests / rate if rate else 0)

    def h2load_round(self, case, url, requests):
        """(req/s, seconds) of one h2load round of `requests`; (0, 0) if it printed no summary."""
        _, res = self.run_load(case, self.load_argvs(case, url, requests=requests), self.timeout())
        if isinstance(res, parsers.ParseError):
            return 0.0, 0.0
        return res.rps, res.duration_s

    @staticmethod
    def requests_for(case, rate, seconds):
        """Requests for `seconds` at `rate`, at least 10 per connection, at most 50 M."""
        requests = int(rate * seconds) or case.conns * 100
        return max(case.conns * 10, min(requests, 50_000_000))

    def timeout(self, seconds=None):
        """The hard bound of a load generator expected to run `seconds` (default: a run)."""
        return 4 * (seconds or self.settings.seconds) + 20

    def failure_status(self, server):
        # spate's rows fill in as features land: until then a failed start is a gap, not a bug
        # in the suite. A peer that fails is an error to look at.
        return "n/a" if server.name == "spate" else "error"

    def skip(self, server, case, status, reason):
        reason = reason.replace(self.env.run_dir + os.sep, "")  # temp paths say nothing
        for rep in range(1, self.settings.reps + 1):
            row = self.base_row(server, case, rep)
            row.update(status=status, reason=reason)
            self.rows.append(row)
            self.progress.step(row)

    def base_row(self, server, case, rep):
        row = {c: "" for c in COLUMNS}
        row.update(
            scenario=case.scenario,
            case=case.key,
            label=case.label,
            load=case.load_flags(),
            server=server.name,
            rep=rep,
        )
        row["status"] = "ok"
        return row


class Progress:
    """One line per run on stderr: position, scenario, server, repetition, the figure."""

    def __init__(self, total, stream=None):
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.started = time.monotonic()

    def step(self, row):
        self.done += 1
        if row["status"] in ("ok", "flagged"):
            figure = "%s req/s, %s us/req" % (_fmt(row["rps"], 0), _fmt(row["cpu_us_per_req"], 2))
            if row.get("p99_ms") not in ("", None):
                figure += ", p50 %s p99 %s p99.9 %s ms" % tuple(
                    _fmt(row[k], 2) for k in ("p50_ms", "p99_ms", "p999_ms")
                )
            if row["status"] == "flagged":
                figure += "  FLAGGED: " + row["reason"]
        else:
            figure = "%s: %s" % (row["status"], row["reason"])
        elapsed = time.monotonic() - self.started
        print(
            "[%d/%d %4.0fs] %s %-22s | %-7s | rep %s | %s"
            % (
                self.done,
                self.total,
                elapsed,
                row["scenario"],
                row["label"][:22],
                row["server"],
                row["rep"],
                figure,
            ),
            file=self.stream,
            flush=True,
        )


def latency_percentiles(log_file):
    """p50, p99 and p99.9 in ms of the per-request times in h2load's --log-file (tab-separated:
    start in µs since the epoch, status, µs until the end of the response); {} if empty."""
    times = []
    try:
        with open(log_file) as f:
            for line in f:
                fields = line.split("\t")
                if len(fields) >= 3:
                    try:
                        times.append(int(fields[2]))
                    except ValueError:
                        continue
    except OSError:
        return {}
    if not times:
        return {}
    times.sort()

    def rank(q):
        # Nearest rank: the smallest time with at least q of the requests at or below it.
        return round(times[max(0, math.ceil(q * len(times)) - 1)] / 1000.0, 3)

    return {"p50_ms": rank(0.5), "p99_ms": rank(0.99), "p999_ms": rank(0.999)}


def probe(case, url, check_body=True, h3_client=None):
    """One request the way the load will make it; None if it succeeded, else why not.
    `h3_client`: the h2load that speaks HTTP/3, for QUIC cases."""
    if case.tool == "h2load":
        quic = case.listener == "quic"
        argv = [h3_client if quic else "h2load", "-n1", "-c1", "-m1", "-T5"]
        if case.h1:
            argv += ["--h1"]
        if quic:
            argv += ["--alpn-list=h3"]
        if case.encoding:
            argv += ["-H", "accept-encoding: %s" % case.encoding]
        _, out = run_bounded(argv + [url], 15)
        try:
            res = parsers.parse_h2load(out)
        except parsers.ParseError as e:
            return str(e)
        if res.completed != 1 or res.problems:
            counts = ", ".join("%d %s" % (v, k) for k, v in res.problems.items())
            if not res.completed:
                what = {
                    "clear": "HTTP/2 (h2c prior knowledge)",
                    "tls": "HTTP/2 over TLS",
                    "quic": "HTTP/3",
                }[case.listener]
                if case.h1:
                    what = "HTTP/1.1" + (" over TLS" if case.listener == "tls" else "")
                counts = "no %s answer: %s" % (what, counts)
            notes = "; ".join(res.notes)
            return "h2load -n1: %s" % (counts + "; " + notes if notes else counts)
        wanted = "http/1.1" if case.h1 else ("h2c" if case.listener == "clear" else None)
        if wanted and res.protocol.split(" ")[0] != wanted:
            return "h2load -n1 negotiated %s, expected %s" % (res.protocol, wanted)
        if case.encoding:
            return probe_encoding(case, url, res.data_bytes)
        return None
    return http_get(url, case, check_body)


def probe_varied(case, url, uri_file, env):
    """V1: every path of the case's set answers 200 with the file's bytes: h2load -i over
    each path once, all completed, none failed, and the body bytes add up to the set's
    (h2load counts DATA bytes, and bodies over HTTP/1.1). None if so, else what is wrong."""
    count = len(varied.paths(case.uris))
    quic = case.listener == "quic"
    argv = [env.h3_client if quic else "h2load"] + (["--h1"] if case.h1 else [])
    argv += ["-n%d" % count, "-c1", "-m%d" % (1 if case.h1 else 10), "-T60"]
    if quic:
        argv += ["--alpn-list=h3"]
    _, out = run_bounded(argv + ["-i", uri_file], 90)
    try:
        res = parsers.parse_h2load(out)
    except parsers.ParseError as e:
        return "h2load -i (the %d paths once): %s" % (count, e)
    if res.completed != count or res.problems:
        counts = ", ".join("%d %s" % (v, k) for k, v in res.problems.items())
        return "h2load -i (the %d paths once): %d completed; %s" % (count, res.completed, counts)
    expected = varied.expected_body_bytes(case.uris)
    if res.data_bytes != expected:
        return "h2load -i (the %d paths once): %d body bytes, expected %d" % (
            count,
            res.data_bytes,
            expected,
        )
    return None


def probe_encoding(case, url, body_bytes):
    """C1: the page comes compressed as asked (h2load's body is smaller than the page) and
    curl, over HTTP/2 too, sees that Content-Encoding and decodes it to the page byte for
    byte. None if so, else what is wrong."""
    name = case.path.rsplit("/", 1)[-1]
    original = _content(name, FILES[name])
    if body_bytes >= len(original):
        return "h2load -n1: %d body bytes for a %d-byte page: not compressed" % (
            body_bytes,
            len(original),
        )
    with tempfile.NamedTemporaryFile(prefix="spate-bench-probe-") as body:
        argv = ["curl", "-sS", "-k", "--http2", "--compressed", "--max-time", "10"]
        argv += ["-H", "accept-encoding: %s" % case.encoding, "-D", "-", "-o", body.name, url]
        try:
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=15
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return "curl: %s" % e
        head = done.stdout.decode("latin-1")
        if done.returncode != 0:
            return "curl exit %d: %s" % (done.returncode, head.strip()[-200:])
        decoded = body.read()
    status = head.split("\r\n", 1)[0]
    if not status.startswith("HTTP/2 200"):
        return "curl: %r (expected HTTP/2 200)" % status
    codings = [
        line.split(":", 1)[1].strip()
        for line in head.split("\r\n")
        if line.lower().startswith("content-encoding:")
    ]
    if codings != [case.encoding]:
        return "curl: Content-Encoding %s, expected %s" % (codings or "absent", case.encoding)
    if decoded != original:
        return "curl: the %s body decodes to %d bytes that are not the page" % (
            case.encoding,
            len(decoded),
        )
    return None


def http_get(url, case, check_body=True):
    """An HTTP/1.1 GET with the stdlib client; checks the status and, for S6, the body."""
    host_port, path = url.split("://", 1)[1].split("/", 1)
    port = int(host_port.rsplit(":", 1)[1])
    try:
        if url.startswith("https"):
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ctx)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/" + path)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
    except (OSError, http.client.HTTPException) as e:
        return "GET /%s: %s" % (path, e)
    if resp.status != 200:
        return "GET /%s: status %d" % (path, resp.status)
    if not check_body:
        return None
    expected = b"42" if case.mode == "answer" else None
    name = path.rsplit("/", 1)[-1]
    if expected is None and name in FILES:
        if len(body) != FILES[name]:
            return "GET /%s: %d bytes, expected %d" % (path, len(body), FILES[name])
    elif expected is not None and body != expected:
        return "GET /%s: body %r, expected %r" % (path, body[:20], expected)
    return None


def make_docroot(run_dir, with_varied=False):
    """The document root (FILES) and S6's answer root, world-readable for dropped workers;
    `with_varied`: also V1's files (benchlib/varied.py, ~33 MB)."""
    docroot = os.path.join(run_dir, "htdocs")
    answer_root = os.path.join(run_dir, "answer")
    for d in (docroot, answer_root):
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
    for name, size in FILES.items():
        with open(os.path.join(docroot, name), "wb") as f:
            f.write(_content(name, size))
        os.chmod(os.path.join(docroot, name), 0o644)
    with open(os.path.join(answer_root, "answer"), "wb") as f:
        f.write(b"42")
    # F1's page, run by PHP-FPM.
    with open(os.path.join(docroot, "hello.php"), "w") as f:
        f.write('<?php header("Content-Type: text/plain"); echo "Hello from PHP\\n";\n')
    os.chmod(os.path.join(docroot, "hello.php"), 0o644)
    os.chmod(os.path.join(answer_root, "answer"), 0o644)
    if with_varied:
        varied.make(docroot, os.path.join(run_dir, "v1-lists"))
    return docroot, answer_root


def make_certificate(run_dir):
    """A self-signed P-256 certificate for localhost, made with openssl."""
    cert = os.path.join(run_dir, "cert.pem")
    key = os.path.join(run_dir, "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "30",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.chmod(key, 0o644)  # servers that drop privileges read it after the switch
    return cert, key


def _content(name, size):
    if name == "page100k.html":
        return page.html_page(size)
    if name.endswith(".html"):
        head = b"<!DOCTYPE html>\n<html><head><title>bench</title></head><body>\n"
        tail = b"\n</body></html>\n"
        return head + b"x" * (size - len(head) - len(tail)) + tail
    if name == "6b.txt":
        return b"hello\n"
    # Incompressible-looking but deterministic bytes for the rest.
    out = bytearray()
    x = 2463534242
    while len(out) < size:
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        out += x.to_bytes(4, "little")
    return bytes(out[:size])


def _fmt(value, digits):
    if value in ("", None):
        return "-"
    return "{:,.{d}f}".format(float(value), d=digits)
