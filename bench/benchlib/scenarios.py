"""The scenarios S1-S8 of shared/scenarios.md, C1 (issue 9) and V1 (issue 37), as a list of concrete cases.

A case is one load shape against one URL: the report has one table per scenario and one line
per case. Servers are started once per (scenario, server, listener) and serve every case of
that group, so a scenario's cases share a warm server.
"""

from dataclasses import dataclass

from . import varied

# Files the document root holds, by name: size in bytes (see runner.make_docroot).
FILES = {
    "6b.txt": 6,
    "4k.txt": 4096,
    "index.html": 612,  # nginx's default index page size (S5)
    "index653.html": 653,  # S7's index.html
    "002.jpg": 90364,  # S7's JPEG
    "test": 1000,  # S8's application answer, served by the backend
    "page100k.html": 100000,  # C1's page to compress (benchlib/page.py)
}

# C1: the levels every server compresses at, so their output sizes compare.
COMPRESS_LEVELS = {"br": 6, "gzip": 6}


@dataclass(frozen=True)
class Case:
    scenario: str  # "S1"
    key: str  # unique, e.g. "S1-6b"
    label: str  # column/line label in the report, e.g. "6 B"
    tool: str  # "h2load" or "wrk"
    path: str  # request path
    listener: str  # "clear", "tls" or "quic"
    mode: str  # "static", "answer" (S6) or "proxy"
    conns: int
    streams: int = 1  # h2load -m
    big_windows: bool = False  # h2load -w30 -W30
    quick: bool = True  # part of --quick
    encoding: str = ""  # Accept-Encoding the load sends (C1), none when empty
    # Requests of the first warm-up round; 0: 20 per connection, at least 10,000 (cheap
    # requests, where that round is mostly connection setup).
    warm_requests: int = 0
    # Proxy cases: backends behind the front (issue 12); above 1, balanced by least-conn.
    backends: int = 1
    h1: bool = False  # h2load --h1 (HTTP/1.1, cleartext or over TLS with ALPN http/1.1)
    # V1: the name of a path list of benchlib/varied.py (h2load -i over it); "" for `path`.
    uris: str = ""
    # V1: the key of the repeated-request case this one is compared with ("" if none).
    baseline: str = ""
    # L1: a load held at this percentage of the best peer's req/s on case `peak` (measured
    # earlier in the same run), with per-request times (h2load --rps, --log-file); 0: as fast
    # as the server goes.
    rate_pct: int = 0
    peak: str = ""
    # A fresh server (and backend) for every repetition, measured from its first request:
    # no probe and no warm-up before, a fixed number of requests (the probe checks the
    # answers after). V1's proxy line from a cold start (issue 37).
    cold_requests: int = 0

    @property
    def protocol(self):
        """What the server must speak: "h1", "h2" or "h3" (with self.listener for TLS)."""
        if self.listener == "quic":
            return "h3"
        return "h1" if self.tool == "wrk" or self.h1 else "h2"

    @property
    def group(self):
        """Cases with the same group are served by one server instance. In cleartext HTTP/1.1
        and h2c (prior knowledge) take different listens (nginx), so they group apart."""
        group = (self.scenario, self.listener, self.mode, self.backends)
        if self.cold_requests:
            return group + ("cold", self.key)
        return group + (self.protocol,) if self.listener == "clear" else group

    def load_flags(self):
        """The shape of the load as the seeds wrote it (for the report)."""
        if self.tool == "wrk":
            return "wrk -c%d" % self.conns
        flags = "h2load -c%d" % self.conns
        if self.h1:
            flags = "h2load --h1 -c%d" % self.conns
        if self.streams > 1:
            flags += " -m%d" % self.streams
        if self.big_windows:
            flags += " -w30 -W30"
        if self.listener == "quic":
            flags += " --alpn-list=h3"
        if self.encoding:
            flags += " -H 'accept-encoding: %s'" % self.encoding
        if self.uris:
            flags += " -i %s" % self.uris
        if self.rate_pct:
            flags += " --rps (%d%% of the best peer's peak)" % self.rate_pct
        return flags


SCENARIOS = {
    "S1": "HTTP/2 cleartext static file (h2load -c500 -m100)",
    "S2": "HTTP/2 cleartext static file without flow control (h2load -c500 -m100 -w30 -W30)",
    "S3": "HTTP/2 over TLS static file (h2load -c500 -m100, with and without -w30 -W30)",
    "S4": "HTTP/2 reverse proxy to an HTTP/1.1 backend (h2load -c100 -m100)",
    "S5": "HTTP/1.1 keep-alive, 612-byte index.html (wrk -c100)",
    "S6": 'server core: GET /answer -> 200 "42" (wrk -c10..800)',
    "S7": "TLS, 653-byte index.html and 90 KB JPEG, HTTP/1.1 (wrk) and HTTP/2 (h2load -c100)",
    "S8": "TLS reverse proxy to an HTTP/1.1 app answering 1000 B (h2load -m10 -c100/-c1000)",
    "Q1": "S1's static files over HTTP/3 (QUIC; TLS and QUIC on one port) "
    "(h2load --alpn-list=h3 -c100 -m10)",
    "C1": "on-the-fly compression of a 100 KB HTML page at br 6 / gzip 6, from a file and "
    "proxied, HTTP/2 over TLS (h2load -c100 -m10)",
    "F1": "FastCGI: a small PHP page from PHP-FPM (the same pool for every server, over TCP), "
    "h2c (h2load -c100 -m10)",
    "L1": "latency at a fixed rate: S1 4 KiB (h2c, h2load -c500 -m100), S5 (HTTP/1.1, "
    "h2load --h1 -c100) and S4 (proxy h2c 4 KiB, h2load -c100 -m100), each held at 50% and "
    "90% of the best peer's peak (h2load --rps, per-request times from --log-file)",
    "V1": "varied traffic: one 4 KiB file repeated, then 50 and 2,000 distinct 4 KiB files and "
    "2,000 files of mixed sizes (100 B - 64 KiB) in shuffled order (h2load -i), over h2c, "
    "HTTP/1.1, TLS (h2 and HTTP/1.1), HTTP/3 and through a proxy (h2load -c100, -m10 for "
    "HTTP/2 and HTTP/3)",
}

# V1's traffic: (name of the varied.SETS set, label); the first is the repeated request.
V1_SETS = (
    ("one", "4 KiB repeated"),
    ("d50", "50 × 4 KiB shuffled"),
    ("d2000", "2,000 × 4 KiB shuffled"),
    ("mixed", "2,000 mixed 100 B-64 KiB shuffled"),
)
# V1's transports: (short name, label, listener, mode, h1, streams).
V1_TRANSPORTS = (
    ("h2c", "h2c", "clear", "static", False, 10),
    ("h1", "HTTP/1.1", "clear", "static", True, 1),
    ("tls-h2", "TLS h2", "tls", "static", False, 10),
    ("tls-h1", "TLS HTTP/1.1", "tls", "static", True, 1),
    ("h3", "HTTP/3", "quic", "static", False, 10),
    ("proxy", "proxy h2c", "clear", "proxy", False, 10),
)


def v1_cases():
    """V1 (issue 37): per transport, the repeated request and the three varied ones, each
    compared with the repeated one of its transport (`baseline`)."""
    cases = []
    for short, front, listener, mode, h1, streams in V1_TRANSPORTS:
        baseline = "V1-%s-one" % short
        for name, label in V1_SETS:
            repeated = name == "one"
            cases.append(
                Case(
                    "V1",
                    "V1-%s-%s" % (short, name),
                    "%s, %s" % (front, label),
                    "h2load",
                    varied.file_path(name, 0),
                    listener,
                    mode,
                    100,
                    streams,
                    h1=h1,
                    uris="" if repeated else name,
                    baseline="" if repeated else baseline,
                )
            )
    # The proxy's varied line again from a cold start: no backend connection open yet, no
    # cache warm, 20,000 requests from the server's first (issue 37 asks for both).
    cases.append(
        Case(
            "V1",
            "V1-proxy-d2000-cold",
            "proxy h2c, 2,000 × 4 KiB shuffled, from a cold start (20,000 requests)",
            "h2load",
            varied.file_path("d2000", 0),
            "clear",
            "proxy",
            100,
            10,
            uris="d2000",
            baseline="V1-proxy-one",
            cold_requests=V1_COLD_REQUESTS,
        )
    )
    return cases


# V1's cold-start line: requests per run, from the server's start (200 per connection).
V1_COLD_REQUESTS = 20000


# L1's workloads: (short name, label, path, mode, h1, conns, streams), the shapes of S1 4 KiB,
# S5 and S4's h2c 4 KiB line. h2load throughout (wrk holds no fixed rate), so S5's shape is
# `h2load --h1 -c100`.
L1_LOADS = (
    ("s1", "S1 4 KiB h2c", "/4k.txt", "static", False, 500, 100),
    ("s5", "S5 612 B HTTP/1.1", "/index.html", "static", True, 100, 1),
    ("s4", "S4 proxy h2c 4 KiB", "/4k.txt", "proxy", False, 100, 100),
)
L1_RATES = (50, 90)


def l1_cases():
    """L1: per workload, its peak (as fast as each server goes), then the load held at each of
    L1_RATES percent of the best peer's peak, the same rate for every server."""
    cases = []
    for short, label, path, mode, h1, conns, streams in L1_LOADS:
        peak = "L1-%s-peak" % short
        common = dict(tool="h2load", path=path, listener="clear", mode=mode, conns=conns)
        common.update(streams=streams, h1=h1)
        cases.append(Case("L1", peak, "%s, peak" % label, **common))
        for pct in L1_RATES:
            cases.append(
                Case(
                    "L1",
                    "L1-%s-%d" % (short, pct),
                    "%s at %d%%" % (label, pct),
                    rate_pct=pct,
                    peak=peak,
                    **common,
                )
            )
    return cases


def all_cases():
    cases = []
    for name, label in (("6b.txt", "6 B"), ("4k.txt", "4 KiB")):
        short = name.split(".")[0]
        cases.append(
            Case("S1", "S1-" + short, label, "h2load", "/" + name, "clear", "static", 500, 100)
        )
        cases.append(
            Case(
                "S2", "S2-" + short, label, "h2load", "/" + name, "clear", "static", 500, 100, True
            )
        )
        cases.append(
            Case("S3", "S3-" + short, label, "h2load", "/" + name, "tls", "static", 500, 100)
        )
        cases.append(
            Case(
                "S3",
                "S3-%s-w30" % short,
                label + " -w30 -W30",
                "h2load",
                "/" + name,
                "tls",
                "static",
                500,
                100,
                True,
            )
        )
    for listener, front in (("clear", "h2c"), ("tls", "TLS")):
        for name, label in (("6b.txt", "6 B"), ("4k.txt", "4 KiB")):
            short = name.split(".")[0]
            cases.append(
                Case(
                    "S4",
                    "S4-%s-%s" % (listener, short),
                    "%s %s" % (front, label),
                    "h2load",
                    "/" + name,
                    listener,
                    "proxy",
                    100,
                    100,
                )
            )
            cases.append(
                Case(
                    "S4",
                    "S4-%s-%s-w30" % (listener, short),
                    "%s %s -w30 -W30" % (front, label),
                    "h2load",
                    "/" + name,
                    listener,
                    "proxy",
                    100,
                    100,
                    True,
                    quick=False,
                )
            )
    # Issue 12: four backends (four ports of the backend nginx) balanced by least-conn.
    cases.append(
        Case(
            "S4",
            "S4-clear-4k-lc4",
            "h2c 4 KiB, 4 backends least-conn",
            "h2load",
            "/4k.txt",
            "clear",
            "proxy",
            100,
            100,
            backends=4,
        )
    )
    cases.append(Case("S5", "S5", "612 B", "wrk", "/index.html", "clear", "static", 100))
    for conns in (10, 100, 200, 400, 800):
        cases.append(
            Case(
                "S6",
                "S6-c%d" % conns,
                "c%d" % conns,
                "wrk",
                "/answer",
                "clear",
                "answer",
                conns,
                quick=conns in (100, 800),
            )
        )
    for tool, proto in (("wrk", "HTTP/1.1"), ("h2load", "HTTP/2")):
        for name, label in (("index653.html", "653 B"), ("002.jpg", "90 KB")):
            cases.append(
                Case(
                    "S7",
                    "S7-%s-%s" % (proto[-1], name.split(".")[0]),
                    "%s %s" % (proto, label),
                    tool,
                    "/" + name,
                    "tls",
                    "static",
                    100,
                )
            )
    for listener, proto in (("tls", "HTTP/2"), ("quic", "HTTP/3")):
        for conns in (100, 1000):
            cases.append(
                Case(
                    "S8",
                    "S8-%s-c%d" % (proto[-1], conns),
                    "%s c%d" % (proto, conns),
                    "h2load",
                    "/test",
                    listener,
                    "proxy",
                    conns,
                    10,
                )
            )
    for name, label in (("6b.txt", "6 B"), ("4k.txt", "4 KiB")):
        short = name.split(".")[0]
        cases.append(Case("Q1", "Q1-" + short, label, "h2load", "/" + name, "quic", "static", 100, 10))
    for mode, what in (("static", "file"), ("proxy", "proxied")):
        for encoding in ("br", "gzip"):
            cases.append(
                Case(
                    "C1",
                    "C1-%s-%s" % (what, encoding),
                    "%s, %s" % (what, encoding),
                    "h2load",
                    "/page100k.html",
                    "tls",
                    mode,
                    100,
                    10,
                    encoding=encoding,
                    # A response costs milliseconds: 10 per connection already lasts seconds.
                    warm_requests=1000,
                )
            )
    # F1 (issue 38): the front's CPU per request; PHP-FPM's is reported as the backend's.
    cases.append(
        Case("F1", "F1-php", "small PHP page", "h2load", "/hello.php", "clear", "fastcgi", 100, 10,
             warm_requests=2000)
    )
    cases += v1_cases()
    cases += l1_cases()
    return cases


def select(scenarios=None, quick=False):
    """Cases of the chosen scenario ids (all when None), in SCENARIOS' order."""
    wanted = set(scenarios) if scenarios else set(SCENARIOS)
    unknown = wanted - set(SCENARIOS)
    if unknown:
        raise ValueError("unknown scenario(s): %s" % ", ".join(sorted(unknown)))
    cases = [c for c in all_cases() if c.scenario in wanted and (c.quick or not quick)]
    order = list(SCENARIOS)
    # Stable: keeps the order within a scenario.
    return sorted(cases, key=lambda c: order.index(c.scenario))
