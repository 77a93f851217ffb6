"""L1: the load held at a share of the best peer's peak, per-request time percentiles."""

from benchlib import report, servers
from benchlib.runner import COLUMNS, Runner, Settings, latency_percentiles
from benchlib.scenarios import select


class RunEnv:
    h3_client = None

    def __init__(self, run_dir):
        self.run_dir = run_dir


def l1():
    return {c.key: c for c in select(["L1"])}


def row(server, case, status="ok", rps=1000.0, cpu=2.0, **extra):
    r = {c: "" for c in COLUMNS}
    r.update(scenario="L1", case=case, label=case, load="", server=server, rep=1, status=status)
    r.update(rps=rps, cpu_us_per_req=cpu, requests=1000, peak_rss_kb=5000, **extra)
    return r


def test_each_workload_has_its_peak_then_the_held_rates():
    cases = select(["L1"])
    assert cases == select(["L1"], quick=True)
    assert [c.key for c in cases] == [
        "L1-s1-peak", "L1-s1-50", "L1-s1-90",
        "L1-s5-peak", "L1-s5-50", "L1-s5-90",
        "L1-s4-peak", "L1-s4-50", "L1-s4-90",
    ]  # fmt: skip
    by_key = l1()
    assert by_key["L1-s1-90"].rate_pct == 90 and by_key["L1-s1-90"].peak == "L1-s1-peak"
    # A peak and its rates share one server instance, which the peak warms.
    assert by_key["L1-s5-peak"].group == by_key["L1-s5-50"].group
    assert by_key["L1-s5-peak"].h1 and by_key["L1-s4-50"].mode == "proxy"
    applies = {
        s.name: {k for k, c in by_key.items() if s.applies(c)} for s in servers.all_servers()
    }
    for name in ("spate", "h2o", "nginx"):
        assert applies[name] == set(by_key), name
    assert applies["nghttpx"] == {"L1-s4-peak", "L1-s4-50", "L1-s4-90"}


def test_the_rate_is_a_share_of_the_best_peers_median_peak(tmp_path):
    runner = Runner(RunEnv(str(tmp_path)), Settings(True, 3, 1), [], [])
    case = l1()["L1-s1-90"]
    runner.rows = [
        row("spate", "L1-s1-peak", rps=900_000.0),  # spate is never the peer
        row("h2o", "L1-s1-peak", rps=100_000.0),
        row("h2o", "L1-s1-peak", rps=300_000.0),
        row("h2o", "L1-s1-peak", rps=200_000.0),
        row("nginx", "L1-s1-peak", rps=150_000.0),
        row("nginx", "L1-s1-peak", status="flagged", rps=800_000.0),
        row("h2floor", "L1-s1-peak", rps=700_000.0),
    ]
    assert runner.set_target(case, [])
    assert runner.targets["L1-s1-90"] == 180_000.0
    argv = runner.load_argvs(
        case, "http://127.0.0.1:1/4k.txt", requests=1_800_000, log_file="/tmp/l.tsv"
    )[0]
    # h2load's --rps is per client: 180,000/s over 500 connections.
    assert "--rps=360.000" in argv and "--log-file=/tmp/l.tsv" in argv
    assert argv[-1] == "http://127.0.0.1:1/4k.txt" and "-c500" in argv and "-m100" in argv
    # Without a clean peer, spate's own peak; without any, the case is n/a.
    runner.rows = [row("spate", "L1-s1-peak", rps=1000.0)]
    assert runner.set_target(case, []) and runner.targets["L1-s1-90"] == 900.0

    class Spate:
        name = "spate"

    runner.rows = []
    assert not runner.set_target(case, [(Spate(), None, [case])])
    assert runner.rows[0]["status"] == "n/a" and "no clean peak" in runner.rows[0]["reason"]


def test_percentiles_of_the_log_file(tmp_path):
    log = tmp_path / "l.tsv"
    # start (µs since the epoch), status, µs until the end of the response.
    log.write_text("".join("1700000000%06d\t200\t%d\n" % (i, (i + 1) * 10) for i in range(1000)))
    assert latency_percentiles(str(log)) == {"p50_ms": 5.0, "p99_ms": 9.9, "p999_ms": 9.99}
    log.write_text("")
    assert latency_percentiles(str(log)) == {}
    assert latency_percentiles(str(tmp_path / "absent")) == {}


def test_the_latency_table_gives_percentiles_and_the_p99_ratio():
    cases = [c for c in select(["L1"]) if c.key.startswith("L1-s1")]
    held = dict(target_rps=180000.0)
    rows = [
        row("spate", "L1-s1-peak", rps=400000.0, cpu=1.0),
        row("h2o", "L1-s1-peak", rps=200000.0, cpu=3.0),
        row("spate", "L1-s1-90", rps=179000.0, cpu=1.2, p50_ms=0.4, p99_ms=1.5, p999_ms=3, **held),
        row("h2o", "L1-s1-90", rps=175000.0, cpu=3.1, p50_ms=0.8, p99_ms=3.0, p999_ms=9, **held),
        row("spate", "L1-s1-50", status="n/a", reason="no clean peak"),
    ]
    text = report.markdown(rows, cases, {})
    table = text.split("## L1")[1]
    lines = [l for l in table.splitlines() if l.startswith("| S1")]
    assert "| peak |" in lines[0] and "CPU 0.33× (vs h2o)" in lines[0]
    assert "| 180,000/s |" in lines[2]
    assert "p50 **0.40** · p99 **1.50** · p99.9 **3.00** ms · 1.20 µs · 179,000/s" in lines[2]
    assert lines[2].endswith("| p99 0.50× (vs h2o) |")
    assert lines[1].endswith("| n/a |") and "n/a [1]" in lines[1]


def test_the_docs_page_has_the_run_the_charts_and_the_extras():
    cases = [c for c in select(["L1"]) if c.key.startswith("L1-s1")]
    rows = [row("spate", "L1-s1-peak"), row("h2o", "L1-s1-peak")]
    meta = {"date": "2026-11-28 14:00", "mode": "full", "reps": "3", "versions": "a 1; b 2"}
    page = report.docs_page(rows, cases, meta, {"scale.md": "| case | spate |\n"})
    assert page.startswith("# Benchmarks\n")
    assert "- versions:\n  - a 1\n  - b 2" in page
    assert "![L1 chart](benchmarks/L1.png)" in page
    assert "bench/run --report-only docs/benchmarks --update-docs" in page
    assert "## Scale: 100 to 10,000 connections" in page and "| case | spate |" in page
    assert "Idle memory" not in page  # no table, no section
    assert "quick run" not in page
