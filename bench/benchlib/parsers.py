"""Parsers for the text that h2load and wrk print at the end of a run.

Both return a LoadResult; anything that makes a run suspect (failed, errored or timed-out
requests, socket errors, non-2xx answers) is counted so the report can flag the run instead of
averaging it in.
"""

import re
from dataclasses import dataclass, field


class ParseError(ValueError):
    """The output does not contain a finished run (the tool failed or was killed)."""


@dataclass
class LoadResult:
    tool: str
    rps: float
    completed: int  # requests that got a response (h2load "done", wrk "N requests in")
    duration_s: float
    failed: int = 0
    errored: int = 0
    timeout: int = 0
    non2xx: int = 0
    socket_errors: int = 0
    protocol: str = ""
    data_bytes: int = 0  # response body bytes received (h2load: DATA frame payloads)
    notes: list = field(default_factory=list)

    @property
    def problems(self):
        """Counts that make this run suspect, by name; empty when the run is clean."""
        counts = {
            "failed": self.failed,
            "errored": self.errored,
            "timeout": self.timeout,
            "non-2xx": self.non2xx,
            "socket errors": self.socket_errors,
            "no responses": 0 if self.completed else 1,
        }
        return {k: v for k, v in counts.items() if v}


def parse_h2load(text):
    """Parse h2load's summary ("finished in", "requests:", "status codes:" lines)."""
    finished = re.search(r"^finished in ([\d.]+)(us|ms|s), ([\d.]+) req/s", text, re.M)
    reqs = re.search(
        r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
        r"(\d+) failed, (\d+) errored, (\d+) timeout",
        text,
        re.M,
    )
    if not finished or not reqs:
        raise ParseError(_first_error_line(text) or "h2load printed no summary")
    # "failed" includes requests never started (refused connections, GOAWAY), so it is the
    # count that tells a short run from a clean one.
    _total, _started, done, _succeeded, failed, errored, timeout = (int(x) for x in reqs.groups())
    result = LoadResult(
        tool="h2load",
        rps=float(finished.group(3)),
        completed=done,
        duration_s=_seconds(finished.group(1), finished.group(2)),
        failed=failed,
        errored=errored,
        timeout=timeout,
    )
    codes = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text, re.M)
    if codes:
        result.non2xx = sum(int(x) for x in codes.groups()[1:])
    traffic = re.search(r"^traffic: .*, [\d.]+[KMG]?B \((\d+)\) data\s*$", text, re.M)
    if traffic:
        result.data_bytes = int(traffic.group(1))
    proto = re.search(r"^Application protocol: (\S+)", text, re.M)
    if proto:
        result.protocol = proto.group(1)
    tls = re.search(r"^TLS Protocol: (\S+)\s*\nCipher: (\S+)", text, re.M)
    if tls:
        # Which TLS a server negotiated is part of a fair comparison: keep it in the results.
        result.protocol += " %s %s" % tls.groups()
    result.notes = _notable_lines(text)
    return result


def merge(results, starts):
    """One LoadResult for several h2load processes run side by side (V1: one per client):
    counts summed, the length from the first start to the last finish (`starts`: when each
    was started, in seconds after the first), the rate the sum over that length."""
    first = results[0]
    span = max(start + r.duration_s for r, start in zip(results, starts))
    completed = sum(r.completed for r in results)
    merged = LoadResult(
        tool=first.tool,
        rps=completed / span if span else 0.0,
        completed=completed,
        duration_s=span,
        protocol=first.protocol,
    )
    for name in ("failed", "errored", "timeout", "non2xx", "socket_errors", "data_bytes"):
        setattr(merged, name, sum(getattr(r, name) for r in results))
    for r in results:
        merged.notes += [n for n in r.notes if n not in merged.notes]
    merged.notes = merged.notes[:5]
    return merged


def parse_wrk(text):
    """Parse wrk's summary ("N requests in", "Socket errors", "Non-2xx", "Requests/sec")."""
    done = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m)\b", text, re.M)
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    if not done or not rps:
        raise ParseError(_first_error_line(text) or "wrk printed no summary")
    result = LoadResult(
        tool="wrk",
        rps=float(rps.group(1)),
        completed=int(done.group(1)),
        duration_s=_seconds(done.group(2), done.group(3)),
    )
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if sock:
        connect, read, write, timeout = (int(x) for x in sock.groups())
        result.socket_errors = connect + read + write
        result.timeout = timeout
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if non2xx:
        result.non2xx = int(non2xx.group(1))
    result.protocol = "http/1.1"
    result.notes = _notable_lines(text)
    return result


def _seconds(value, unit):
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[unit]
    return float(value) * scale


_NOTABLE = re.compile(
    r"(error|fail|could not|refused|reset|timeout|timed out|No protocol|abort)", re.I
)
_SUMMARY = re.compile(r"^(requests:|Socket errors:|Non-2xx|status codes:)")


def _notable_lines(text):
    """Error-looking lines outside the summary, kept (deduplicated) as the reason of a flag."""
    seen = []
    for line in text.splitlines():
        line = line.strip()
        if line and _NOTABLE.search(line) and not _SUMMARY.match(line) and line not in seen:
            seen.append(line)
    return seen[:5]


def _first_error_line(text):
    notes = _notable_lines(text)
    if notes:
        return notes[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""
