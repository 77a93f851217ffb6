"""From rows (one per run) to the markdown report, the ratios and the charts.

A cell is the median over a server's clean repetitions of a case, with min and max. Runs with
failed/errored/timed-out requests, socket errors or non-2xx answers are "flagged": they are
listed, never averaged in; if every repetition was flagged the cell shows the flagged median
marked with a warning and does not count as "best peer".
"""

import os
import statistics

from .scenarios import FILES, SCENARIOS
from .servers import all_servers

SUBJECT = "spate"
# For reference, never "the best peer": the floors, and an earlier spate build.
ANCHORS = ("floor", "floor-sized", "h2floor", "spate-before")


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
                notes, "%s %s: every run flagged: %s" % (server, label, "; ".join(cell.reasons))
            )
            return "⚠ %s [%d]" % (text, ref)
        if cell.flagged:
            ref = _note(
                notes,
                "%s %s: %d run(s) flagged and left out: %s"
                % (
                    server,
                    label,
                    len(cell.flagged),
                    "; ".join(_unique(r["reason"] for r in cell.flagged)),
                ),
            )
            text += " ⚠[%d]" % ref
        return text
    ref = _note(notes, "%s: %s" % (server, "; ".join(cell.reasons) or cell.status))
    return "%s [%d]" % (cell.status, ref)


def _note(notes, text):
    """The 1-based number of `text` in notes, added if new."""
    if text not in notes:
        notes.append(text)
    return notes.index(text) + 1


def docs_page(report_text):
    return report_text.replace(
        "# spate benchmark report",
        "# Benchmarks\n\nThe latest run of `bench/run --update-docs` (mode, machine and date "
        "below; bench/README.md has the method and how to read the tables). Publish full-mode "
        "runs only: `bench/run --update-docs`.\n\n## Latest results",
        1,
    )


def charts(rows, cases, out_dir):
    """One PNG per scenario (CPU µs per request by case and server); 0 without matplotlib."""
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
        servers = _unique(s for c in mine for s in summary[c.key] if summary[c.key][s].measured)
        if not mine or not servers:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(mine)), 4))
        width = 0.8 / len(servers)
        for i, srv in enumerate(servers):
            values = []
            for case in mine:
                cell = summary[case.key].get(srv)
                values.append(cell.cpu[0] if cell and cell.measured else 0)
            ax.bar([x + i * width for x in range(len(mine))], values, width, label=srv)
        ax.set_xticks([x + width * (len(servers) - 1) / 2 for x in range(len(mine))])
        ax.set_xticklabels([c.label for c in mine], fontsize=8)
        measured = [
            v
            for v in (
                summary[c.key][s].cpu[0]
                for c in mine
                for s in servers
                if s in summary[c.key] and summary[c.key][s].measured
            )
            if v > 0
        ]
        if measured and max(measured) > 20 * min(measured):
            ax.set_yscale("log")  # Apache's figures would flatten everyone else's
        ax.set_ylabel("server CPU µs per request (lower is better)")
        ax.set_title("%s: %s" % (sid, SCENARIOS[sid]), fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "%s.png" % sid))
        plt.close(fig)
        written += 1
    return written


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
