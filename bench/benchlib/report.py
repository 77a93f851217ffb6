"""From rows (one per run) to the markdown report, the ratios and the charts.

A cell is the median over a server's clean repetitions of a case, with min and max. Runs with
failed/errored/timed-out requests, socket errors or non-2xx answers are "flagged": they are
listed, never averaged in; if every repetition was flagged the cell shows the flagged median
marked with a warning and does not count as "best peer".
"""

import os
import statistics

from .runner import ANCHORS
from .scenarios import FILES, SCENARIOS
from .servers import all_servers

SUBJECT = "spate"

# Flagged cells whose cause was measured apart from the run, by (server, case label): the
# sentence follows the cell's note, so the page says why, not only that. Only a flagged cell
# shows it; a run whose cells are clean prints none of these.
FLAG_CAUSES = {
    ("h2o", "HTTP/3 c1000"): (
        "measured cause, apart from this run: datagrams dropped at h2o's QUIC socket, whose "
        "receive buffer is the kernel's default unless configured; the connections that lost "
        "them sat out h2load's time bound. Given spate's socket size (`quic: {rcvbuf, sndbuf}`), "
        "h2o ran the same load clean; bench/run gives it that size from session 31 on (the "
        "figures: docs/bench-log.md, session 31)"
    ),
}


class Cell:
    """The summary of one (case, server): status, medians, ranges, reasons."""

    def __init__(self, rows):
        self.rows = rows
        clean = [r for r in rows if r["status"] == "ok"]
        flagged = [r for r in rows if r["status"] == "flagged"]
        self.flagged = flagged
        self.reasons = _unique(r["reason"] for r in rows if r["reason"])
        if clean:
            self.status, used = "ok", clean
        elif flagged:
            self.status, used = "flagged", flagged
        else:
            self.status = rows[0]["status"] if rows else "missing"
            used = []
        self.runs = len(used)
        self.rps = _stats(r["rps"] for r in used)
        self.cpu = _stats(r["cpu_us_per_req"] for r in used)
        self.backend_cpu = _stats(r["backend_cpu_us_per_req"] for r in used)
        # Compressed body bytes per response (C1); absent from results.csv files before C1.
        self.bytes = _stats(r.get("bytes_per_resp") for r in used)
        rss = [_num(r["peak_rss_kb"]) for r in used if _num(r["peak_rss_kb"]) is not None]
        self.rss_kb = max(rss) if rss else None
        # L1: the rate the load was held at and the per-request time percentiles (ms).
        self.target = _stats(r.get("target_rps") for r in used)
        self.p50 = _stats(r.get("p50_ms") for r in used)
        self.p99 = _stats(r.get("p99_ms") for r in used)
        self.p999 = _stats(r.get("p999_ms") for r in used)

    @property
    def measured(self):
        return self.status in ("ok", "flagged") and self.cpu is not None


def summarize(rows):
    """{case key: {server: Cell}} in the order rows arrived."""
    grouped = {}
    for row in rows:
        grouped.setdefault(row["case"], {}).setdefault(row["server"], []).append(row)
    return {
        case: {srv: Cell(rs) for srv, rs in servers.items()} for case, servers in grouped.items()
    }


def ratios(cells):
    """spate against the best clean peer of one case.

    Returns (cpu_ratio, rps_ratio, best_cpu_peer, best_rps_peer): spate's CPU per request over
    the lowest peer's (below 1 is a win) and spate's req/s over the highest peer's (above 1 is a
    win). None where spate or every peer has no clean figure.
    """
    mine, peers = _comparable(cells, "cpu")
    if not peers:
        return None, None, None, None
    best_cpu = min(peers, key=lambda s: peers[s].cpu[0])
    best_rps = max(peers, key=lambda s: peers[s].rps[0])
    cpu_ratio = mine.cpu[0] / peers[best_cpu].cpu[0] if peers[best_cpu].cpu[0] else None
    rps_ratio = mine.rps[0] / peers[best_rps].rps[0] if peers[best_rps].rps[0] else None
    return cpu_ratio, rps_ratio, best_cpu, best_rps


def floor_ratio(cells, anchor=None):
    """spate's CPU per request over the floor's (`anchor`, by default the first that ran), run
    by run: (median, min, max) over the repetitions where both ran clean, with the floor's
    name; (None, None) without that floor.

    A repetition runs every server back to back, so this ratio pairs runs that saw the same
    machine: on a shared machine whose speed drifts it reads steadier than the ratio of the
    two medians.
    """
    mine = cells.get(SUBJECT)
    if anchor is None:
        anchor = next((a for a in ANCHORS if a in cells), None)
    if not mine or anchor not in cells:
        return None, None

    def by_rep(cell):
        return {
            r["rep"]: _num(r["cpu_us_per_req"])
            for r in cell.rows
            if r["status"] == "ok" and _num(r["cpu_us_per_req"])
        }

    mine_cpu, floor_cpu = by_rep(mine), by_rep(cells[anchor])
    pairs = [mine_cpu[rep] / floor_cpu[rep] for rep in mine_cpu if rep in floor_cpu]
    if not pairs:
        return None, anchor
    return _stats(pairs), anchor


def bytes_ratio(cells):
    """C1: spate's compressed bytes per response over the smallest clean peer's (at most 1 is
    the goal), and that peer; (None, None) where either has no figure."""
    mine, peers = _comparable(cells, "bytes")
    if not peers:
        return None, None
    best = min(peers, key=lambda s: peers[s].bytes[0])
    return mine.bytes[0] / peers[best].bytes[0], best


def _comparable(cells, figure):
    """spate's cell and {peer: cell} of the clean peers (the floor is none) that have `figure`;
    no peers when spate has no clean figure itself."""
    mine = cells.get(SUBJECT)
    if not mine or mine.status != "ok" or not getattr(mine, figure):
        return mine, {}
    peers = {
        s: c
        for s, c in cells.items()
        if s != SUBJECT and s not in ANCHORS and c.status == "ok" and getattr(c, figure)
    }
    return mine, peers


def markdown(rows, cases, meta):
    summary = summarize(rows)
    out = ["# spate benchmark report", ""]
    for key in (
        "date",
        "cpu",
        "cores",
        "kernel",
        "mode",
        "reps",
        "pinning",
        "versions",
        "spate",
        "note",
    ):
        if meta.get(key):
            out.append("- %s: %s" % (key, meta[key]))
    out += [
        "",
        "Each cell: server CPU time per request in µs (lower is better; utime+stime of all the",
        "server's processes over the run, divided by completed requests), then requests/s as the",
        "load generator reports it; median of the clean runs with [min-max] when there are",
        "several. The last column is spate's CPU per request over the best peer's (below 1 is a",
        "win) and spate's req/s over the best peer's; where a floor ran, it adds spate's CPU per",
        "request over the floor's taken repetition by repetition (each repetition runs the servers",
        "back to back), median [min-max]. ⚠ marks runs with failed/errored/timed-out requests,",
        "socket errors or non-2xx answers; they are never averaged in.",
        "",
    ]
    scenario_ids = _unique(c.scenario for c in cases)
    # Columns: spate first, then peers in a fixed order, the floor last.
    order = _unique([s.name for s in all_servers()] + [r["server"] for r in rows])
    for sid in scenario_ids:
        mine = [c for c in cases if c.scenario == sid and c.key in summary]
        if not mine:
            continue
        out += scenario_table(sid, mine, summary, order)
    return "\n".join(out) + "\n"


def scenario_table(sid, cases, summary, order):
    present = {s for c in cases for s in summary[c.key]}
    servers = [s for s in order if s in present]
    out = ["## %s: %s" % (sid, SCENARIOS[sid]), ""]
    if any(c.rate_pct for c in cases):
        return out + latency_table(cases, summary, servers)
    # V1: each server's CPU per request over its own on the repeated request (same transport).
    vs_repeated = any(c.baseline for c in cases)
    header = ["case", "load"] + servers + ["spate ÷ best peer"]
    if vs_repeated:
        header.append("CPU ÷ repeated")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    notes = []
    for case in cases:
        cells = summary[case.key]
        line = [case.label, "`%s`" % case.load_flags()]
        for srv in servers:
            cell = cells.get(srv)
            line.append(format_cell(cell, notes, srv, case.label) if cell else "")
        cpu_r, rps_r, best_cpu, best_rps = ratios(cells)
        if cpu_r is None:
            verdict = "n/a"
        else:
            verdict = "CPU %.2f× (vs %s), req/s %.2f× (vs %s)" % (
                cpu_r,
                best_cpu,
                rps_r,
                best_rps,
            )
            size_r, best_size = bytes_ratio(cells)
            if size_r is not None:
                verdict += ", bytes %.3f× (vs %s)" % (size_r, best_size)
        for anchor in ANCHORS:
            paired, _ = floor_ratio(cells, anchor)
            if paired is not None:
                floor_text = "CPU %s× %s, paired" % (_range(paired, 2), anchor)
                verdict = floor_text if verdict == "n/a" else verdict + "; " + floor_text
        line.append(verdict)
        if vs_repeated:
            line.append(repeated_ratios(cells, summary.get(case.baseline), servers))
        out.append("| " + " | ".join(line) + " |")
    backend = _backend_notes(cases, summary)
    out.append("")
    if any(c.encoding for c in cases):
        out += [
            "The third figure of a cell is the compressed body in bytes per response (h2load's "
            "DATA bytes over its responses; the page is {:,} bytes): every server compressed, "
            "at comparable levels, only if these are close. The last column adds spate's bytes "
            "over the smallest peer's.".format(FILES["page100k.html"]),
            "",
        ]
    if vs_repeated:
        out += [
            "The repeated line of each transport asks for one file again and again; the "
            "others ask for distinct files in shuffled order (`h2load -i`, never the same path "
            "twice in a row on a connection). The last column is each server's CPU per request "
            "over its own on the repeated line of the transport (medians): what traffic that "
            "does not repeat costs it.",
            "",
        ]
    if backend:
        # F1's backend is the FastCGI application; the proxies' is nginx.
        which = "PHP-FPM, FastCGI" if sid == "F1" else "nginx, HTTP/1.1"
        out += [
            "Backend CPU µs per request (%s, on the server CPU; not in the "
            "figures above): " % which + "; ".join(backend) + ".",
            "",
        ]
    if notes:
        out += ["%d. %s" % (i + 1, n) for i, n in enumerate(notes)] + [""]
    return out


def latency_table(cases, summary, servers):
    """L1: a peak line per workload (the usual cells), then its lines at a fixed rate, each
    cell the per-request time percentiles, CPU per request and the rate reached."""
    header = ["case", "load", "rate held"] + servers + ["spate ÷ best peer"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for case in cases:
        cells = summary[case.key]
        held = ""
        line = [case.label, "`%s`" % case.load_flags()]
        for srv in servers:
            cell = cells.get(srv)
            if cell and cell.measured and case.rate_pct and cell.p99:
                if cell.target and not held:
                    held = "{:,.0f}/s".format(cell.target[0])
                text = "p50 **%s** · p99 **%s** · p99.9 **%s** ms · %s µs · %s/s" % (
                    _range(cell.p50, 2),
                    _range(cell.p99, 2),
                    _range(cell.p999, 2),
                    _range(cell.cpu, 2),
                    _range(cell.rps, 0),
                )
                if cell.status == "flagged":
                    ref = _note(notes, _flag_text(srv, case.label, "every run flagged: %s"
                                                  % "; ".join(cell.reasons)))
                    text = "⚠ %s [%d]" % (text, ref)
                line.append(text)
            else:
                line.append(format_cell(cell, notes, srv, case.label) if cell else "")
        line.insert(2, held or ("peak" if not case.rate_pct else ""))
        if case.rate_pct:
            r, best = p99_ratio(cells)
            line.append("p99 %.2f× (vs %s)" % (r, best) if r is not None else "n/a")
        else:
            cpu_r, rps_r, best_cpu, best_rps = ratios(cells)
            line.append(
                "n/a"
                if cpu_r is None
                else "CPU %.2f× (vs %s), req/s %.2f× (vs %s)" % (cpu_r, best_cpu, rps_r, best_rps)
            )
        out.append("| " + " | ".join(line) + " |")
    out += [
        "",
        "Each workload runs first as fast as each server goes (its peak line: CPU µs per "
        "request · req/s); then every server gets the same load held at 50% and 90% of the "
        "best peer's peak req/s (`h2load --rps`, the rate spread evenly over the connections). "
        "A cell there gives the time from a request's start to the end of its response at the "
        "50th, 99th and 99.9th percentile (h2load's `--log-file`, every request of the run), "
        "then the server's CPU per request and the rate h2load reached. The last column is "
        "spate's p99 over the lowest peer p99. A server that cannot keep up with the rate "
        "shows it in the rate reached and in its tail.",
        "",
    ]
    if notes:
        out += ["%d. %s" % (i + 1, n) for i, n in enumerate(notes)] + [""]
    return out


def p99_ratio(cells):
    """L1: spate's p99 over the lowest clean peer's, and that peer; (None, None) without."""
    mine, peers = _comparable(cells, "p99")
    if not peers:
        return None, None
    best = min(peers, key=lambda s: peers[s].p99[0])
    if not peers[best].p99[0]:
        return None, None
    return mine.p99[0] / peers[best].p99[0], best


def repeated_ratio(cell, baseline):
    """A server's CPU per request on a varied case over its own on the repeated case (V1), or
    None where either has no clean figure."""
    if not cell or not baseline or cell.status != "ok" or baseline.status != "ok":
        return None
    if not cell.cpu or not baseline.cpu or not baseline.cpu[0]:
        return None
    return cell.cpu[0] / baseline.cpu[0]


def repeated_ratios(cells, baseline_cells, servers):
    """The "CPU ÷ repeated" column: "spate 1.50×, h2o 1.10×" in the table's server order; ""
    on the repeated line itself."""
    if baseline_cells is None:
        return ""
    parts = []
    for srv in servers:
        r = repeated_ratio(cells.get(srv), baseline_cells.get(srv))
        if r is not None:
            parts.append("%s %.2f×" % (srv, r))
    return ", ".join(parts) or "n/a"


def format_cell(cell, notes, server, label):
    """A table cell; reasons go to `notes` (shared by cells with the same text)."""
    if cell.measured:
        text = "**%s µs** · %s/s" % (_range(cell.cpu, 2), _range(cell.rps, 0))
        if cell.bytes:
            text += " · %s B" % _range(cell.bytes, 0)
        if cell.status == "flagged":
            ref = _note(
                notes,
                _flag_text(server, label, "every run flagged: %s" % "; ".join(cell.reasons)),
            )
            return "⚠ %s [%d]" % (text, ref)
        if cell.flagged:
            ref = _note(
                notes,
                _flag_text(
                    server,
                    label,
                    "%d run(s) flagged and left out: %s"
                    % (len(cell.flagged), "; ".join(_unique(r["reason"] for r in cell.flagged))),
                ),
            )
            text += " ⚠[%d]" % ref
        return text
    ref = _note(notes, "%s: %s" % (server, "; ".join(cell.reasons) or cell.status))
    return "%s [%d]" % (cell.status, ref)


def _flag_text(server, label, what):
    """The note of a flagged cell: what was flagged, then its measured cause if known."""
    cause = FLAG_CAUSES.get((server, label))
    text = "%s %s: %s" % (server, label, what)
    return "%s; %s" % (text, cause) if cause else text


def _note(notes, text):
    """The 1-based number of `text` in notes, added if new."""
    if text not in notes:
        notes.append(text)
    return notes.index(text) + 1


# The tables other tools of bench/ write into a run's directory, shown after the scenarios.
EXTRAS = (
    (
        "idle-memory.md",
        "Idle memory per connection (`bench/idle-memory`)",
        "RSS growth of the server's processes divided by the connections: 9,000 keep-alive "
        "connections that each made one request (GET of a 6-byte file) and then stay idle, "
        "read 3 s after the last request; one worker per server pinned to CPU 0, the client "
        "on CPU 1, a fresh server per cell. Kernel socket memory is not in RSS.",
    ),
    (
        "scale.md",
        "Scale: 100 to 10,000 connections (`bench/scale`)",
        "GET of a 6-byte file, one worker pinned to CPU 0, load on CPU 1. h2c: `h2load -m1 "
        "-n100000 -cN` (connection setup counted) and `h2load -c1000 -m100 -n1000000`; "
        "HTTP/1.1: `wrk -t1 -cN -d5s`; storm: `h2load --h1 -c10000 -n10000`, 10,000 "
        "connections opened at once with one request each. CPU is read from /proc in 10 ms "
        "ticks: ±0.1 µs at 100,000 requests, ±1 µs for the storm.",
    ),
)


def docs_page(rows, cases, meta, extras=None, charts_dir="benchmarks"):
    """docs/benchmarks.md: the whole page, from one run's rows and meta (and `extras`:
    {file name of EXTRAS: its markdown}); the charts are `charts_dir`/SID.png beside it."""
    extras = extras or {}
    summary = summarize(rows)
    order = _unique([s.name for s in all_servers()] + [r["server"] for r in rows])
    ran = {r["server"] for r in rows}
    peers = [s for s in order if s in ran and s != SUBJECT and s not in ANCHORS]
    floors = [s for s in order if s in ran and s in ANCHORS]
    if len(peers) > 1:
        against = ", ".join(peers[:-1]) + " and " + peers[-1]
    else:
        against = peers[0] if peers else "its peers"
    if floors:
        against += " (and, for reference, %s)" % ", ".join(floors)
    out = [
        "# Benchmarks",
        "",
        "spate against %s, one worker each, side by side on one machine. " % against
        + "This page is written by `bench/run "
        "--update-docs` from one run of the code named below, and every figure on it comes "
        "from that run; its result files are kept beside the page (`docs/%s/results.csv`, "
        "`meta.json`), so the page can be written again without rerunning. Measurements of "
        "single changes over time, with their reasoning, are in [bench-log.md](bench-log.md); "
        "the WebSocket echo through the proxies in "
        "[benchmarks-websocket.md](benchmarks-websocket.md)." % charts_dir,
        "",
        "## The run",
        "",
    ]
    labels = (
        ("date", "date"),
        ("spate", "spate"),
        ("mode", "mode"),
        ("reps", "repetitions"),
        ("seconds", "seconds per run"),
        ("cpu", "CPU"),
        ("cores", "cores"),
        ("kernel", "kernel"),
        ("pinning", "pinning"),
        ("note", "note"),
    )
    for key, label in labels:
        if meta.get(key):
            out.append("- %s: %s" % (label, meta[key]))
    if meta.get("versions"):
        out.append("- versions:")
        out += ["  - %s" % v for v in meta["versions"].split("; ")]
    if meta.get("mode") == "quick":
        out += [
            "",
            "⚠ A quick run (2 s runs, one repetition): the figures show the shape, not the "
            "precision of a full run. Publish full runs.",
        ]
    out += [
        "",
        "## Method, in short",
        "",
        "- **CPU per request is the figure to compare**: utime+stime of all the server's "
        "processes over a run (from `/proc`), divided by the requests the load generator "
        "completed. The load generator shares the 2-core machine and saturates first, so "
        "req/s measures it as much as the server.",
        "- One worker per server (h2o and spate `num-threads: 1`, nginx `worker_processes 1`, "
        "nghttpd/nghttpx `-n1`, Apache mpm_event with one process), pinned to CPU 0; the load "
        "generator (h2load, wrk) pinned to CPU 1. Loopback, access logs off, the same "
        "self-signed P-256 certificate for every TLS server.",
        "- Every server of a scenario is started at once and the repetitions go round them "
        "(rep 1 of each, then rep 2, in an order turning by one), so the machine's drift "
        "falls on every server alike. A cell is the median of the clean repetitions "
        "[min-max].",
        "- Runs with failed, errored or timed-out requests, socket errors or non-2xx answers "
        "are flagged (⚠) and never averaged in; the notes under a table say what happened.",
        "- **n/a**: the server cannot run that case (a feature the build lacks); **error**: a "
        "peer failed to start or to answer the probe.",
        "- The floors (`floor.c`, `h2floor.c`) answer every request with a canned response "
        "over the same sockets: the least CPU any server can spend there. `floor_files.c` "
        "does the same for V1's cleartext HTTP/1.1 rows with the requested file's bytes (an "
        "open-file cache that never checks again, one read and one write). They are never "
        "\"the best peer\".",
        "",
        "The whole method, the scenario shapes and every peer's configuration: "
        "[bench/README.md](../bench/README.md).",
        "",
        "## Rerun",
        "",
        "```sh",
        "bench/setup                   # Debian 12 packages, release build of spate, the floors",
        "bench/run --update-docs --extras        # the whole matrix, then this page",
        "bench/run --report-only docs/%s --update-docs   # this page again from the kept run"
        % charts_dir,
        "bench/run --scenarios S1,L1 --servers spate,h2o,nginx   # a part, into bench/results/",
        "```",
        "",
    ]
    scenario_ids = _unique(c.scenario for c in cases)
    order = _unique([s.name for s in all_servers()] + [r["server"] for r in rows])
    shown = [
        sid for sid in scenario_ids if any(c.key in summary for c in cases if c.scenario == sid)
    ]
    if shown:
        out += ["Scenarios: " + ", ".join("[%s](#%s)" % (sid, _anchor(sid)) for sid in shown)
                + ".", ""]
    for sid in shown:
        mine = [c for c in cases if c.scenario == sid and c.key in summary]
        table = scenario_table(sid, mine, summary, order)
        # The chart goes under the heading, before the table.
        table[2:2] = ["![%s chart](%s/%s.png)" % (sid, charts_dir, sid), ""]
        out += table
    for name, title, method in EXTRAS:
        if extras.get(name):
            out += ["## %s" % title, "", method, "", extras[name].strip(), ""]
    return "\n".join(out).rstrip() + "\n"


def _anchor(sid):
    """GitHub's anchor of the heading "## SID: ...": lower case, punctuation dropped."""
    heading = "%s: %s" % (sid, SCENARIOS[sid])
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def charts(rows, cases, out_dir):
    """One PNG per scenario, `SID.png` in out_dir: server CPU µs per request and req/s by case
    and server, side by side (L1: p99 and p50 at the held rates). 0 without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 0
    summary = summarize(rows)
    written = 0
    for sid in _unique(c.scenario for c in cases):
        mine = [c for c in cases if c.scenario == sid and c.key in summary]
        if any(c.rate_pct for c in mine):
            mine = [c for c in mine if c.rate_pct]
            panels = (
                ("p99", "p99 ms per request (lower is better)"),
                ("p50", "p50 ms per request (lower is better)"),
            )
        else:
            panels = (
                ("cpu", "server CPU µs per request (lower is better)"),
                ("rps", "requests per second (higher is better)"),
            )
        servers = _unique(s for c in mine for s in summary[c.key] if summary[c.key][s].measured)
        if not mine or not servers:
            continue
        # Horizontal bars, a group per case from the top down: long labels stay readable.
        height = max(3.0, 1.0 + 0.16 * len(mine) * len(servers) + 0.1 * len(mine))
        fig, axes = plt.subplots(1, 2, figsize=(11, height), sharey=True)
        width = 0.8 / len(servers)
        positions = list(range(len(mine)))
        for ax, (figure, xlabel) in zip(axes, panels):
            measured = []
            for i, srv in enumerate(servers):
                values = []
                for case in mine:
                    cell = summary[case.key].get(srv)
                    stats = getattr(cell, figure) if cell and cell.measured else None
                    values.append(stats[0] if stats else 0)
                measured += [v for v in values if v > 0]
                ax.barh([y + i * width for y in positions], values, width, label=srv)
            if measured and max(measured) > 20 * min(measured):
                ax.set_xscale("log")  # Apache's figures would flatten everyone else's
            ax.set_xlabel(xlabel, fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks([y + width * (len(servers) - 1) / 2 for y in positions])
        axes[0].set_yticklabels([c.label for c in mine], fontsize=7)
        axes[0].invert_yaxis()
        axes[1].legend(fontsize=7, loc="best")
        fig.suptitle("%s: %s" % (sid, _wrap(SCENARIOS[sid], 120)), fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "%s.png" % sid), dpi=80)
        plt.close(fig)
        written += 1
    return written


def _wrap(text, width=18):
    """Line breaks at spaces so that no line is much longer than `width`."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = (line + " " + word).strip()
    return "\n".join(lines + [line])


def _backend_notes(cases, summary):
    notes = []
    for case in cases:
        figures = [
            "%s %.2f" % (srv, cell.backend_cpu[0])
            for srv, cell in summary[case.key].items()
            if cell.measured and cell.backend_cpu
        ]
        if figures:
            notes.append("%s: %s" % (case.label, ", ".join(figures)))
    return notes


def _stats(values):
    """(median, min, max) of the numeric values, or None."""
    nums = [v for v in (_num(x) for x in values) if v is not None]
    if not nums:
        return None
    return statistics.median(nums), min(nums), max(nums)


def _range(stats, digits):
    med, lo, hi = stats
    text = "{:,.{d}f}".format(med, d=digits)
    if hi > lo:
        text += " [{:,.{d}f}-{:,.{d}f}]".format(lo, hi, d=digits)
    return text


def _num(value):
    if value in ("", None):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
