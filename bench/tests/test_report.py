"""Report logic: medians over clean runs, flagged runs kept out, ratios to the best peer."""

import pytest

from benchlib import report
from benchlib.runner import COLUMNS
from benchlib.scenarios import select


def row(server, case="S1-6b", rep=1, status="ok", rps=None, cpu=None, reason="", scenario="S1"):
    r = {c: "" for c in COLUMNS}
    r.update(
        scenario=scenario,
        case=case,
        label="6 B",
        load="h2load -c500 -m100",
        server=server,
        rep=rep,
        status=status,
        reason=reason,
    )
    if rps is not None:
        r.update(rps=rps, cpu_us_per_req=cpu, requests=1000, peak_rss_kb=5000)
    return r


def test_cell_takes_median_min_max_of_clean_runs_only():
    cell = report.Cell(
        [
            row("h2o", rep=1, rps=100.0, cpu=3.0),
            row("h2o", rep=2, rps=300.0, cpu=1.0),
            row("h2o", rep=3, rps=200.0, cpu=2.0),
            row("h2o", rep=4, status="flagged", rps=900.0, cpu=0.1, reason="5 failed"),
        ]
    )
    assert cell.status == "ok"
    assert cell.rps == (200.0, 100.0, 300.0)
    assert cell.cpu == (2.0, 1.0, 3.0)
    assert len(cell.flagged) == 1


def test_cell_with_only_flagged_runs_is_flagged():
    cell = report.Cell([row("h2o", status="flagged", rps=10.0, cpu=5.0, reason="3 errored")])
    assert cell.status == "flagged"
    assert cell.measured
    assert cell.reasons == ["3 errored"]


def test_ratio_against_best_clean_peer_ignores_the_floors_and_flagged():
    cells = report.summarize(
        [
            row("spate", rps=400.0, cpu=1.0),
            row("h2o", rps=300.0, cpu=2.0),
            row("nginx", rps=500.0, cpu=4.0),
            row("nghttpd", status="flagged", rps=900.0, cpu=0.5, reason="1 failed"),
            row("floor", rps=1000.0, cpu=0.2),
            row("h2floor", rps=2000.0, cpu=0.1),
        ]
    )["S1-6b"]
    cpu_ratio, rps_ratio, best_cpu, best_rps = report.ratios(cells)
    assert best_cpu == "h2o"
    assert cpu_ratio == pytest.approx(0.5)
    assert best_rps == "nginx"
    assert rps_ratio == pytest.approx(0.8)


def test_no_ratio_when_spate_is_na():
    cells = report.summarize(
        [
            row("spate", status="n/a", reason="no HTTP/2 yet"),
            row("h2o", rps=300.0, cpu=2.0),
        ]
    )["S1-6b"]
    assert report.ratios(cells) == (None, None, None, None)


def test_markdown_has_one_table_per_scenario_with_na_reasons_and_flags():
    cases = select(["S1", "S5"], quick=True)
    rows = [
        row("spate", status="n/a", reason="start: x.yaml:3: http2 not supported yet"),
        row("h2o", rps=300.0, cpu=2.0),
        row("h2o", rep=2, status="flagged", rps=30.0, cpu=9.0, reason="7 failed"),
        row("spate", case="S5", scenario="S5", rps=100.0, cpu=4.0),
        row("nginx", case="S5", scenario="S5", rps=50.0, cpu=8.0),
    ]
    text = report.markdown(rows, cases, {"date": "2026-11-21", "cpu": "Test CPU"})
    assert "- cpu: Test CPU" in text
    assert text.count("## S1:") == 1 and text.count("## S5:") == 1
    assert "n/a [1]" in text
    assert "http2 not supported yet" in text
    assert "1 run(s) flagged and left out: 7 failed" in text
    assert "**2.00 µs** · 300/s" in text
    # S5: spate at 4 µs against nginx's 8 µs is half the CPU and twice the rate.
    assert "CPU 0.50× (vs nginx), req/s 2.00× (vs nginx)" in text


def test_scenario_selection_and_quick_subset():
    full = select(["S6"])
    quick = select(["S6"], quick=True)
    assert [c.conns for c in full] == [10, 100, 200, 400, 800]
    assert [c.conns for c in quick] == [100, 800]
    with pytest.raises(ValueError):
        select(["S9"])
    keys = [c.key for c in select()]
    assert len(keys) == len(set(keys))
    assert [c.scenario for c in select(["S3", "S1"])][0] == "S1"


def test_same_reason_is_one_note_and_columns_follow_the_fixed_server_order():
    cases = select(["S3"], quick=True)
    reason = "start: spate-S3.yaml:9: listen with ssl (TLS) is not supported yet"
    rows = []
    for c in cases:
        rows.append(row("nginx", case=c.key, scenario="S3", rps=10.0, cpu=3.0))
        rows.append(row("spate", case=c.key, scenario="S3", status="n/a", reason=reason))
    text = report.markdown(rows, cases, {})
    assert text.count("listen with ssl (TLS) is not supported yet") == 1
    assert text.count("n/a [1]") == len(cases)
    assert "| case | load | spate | nginx | spate ÷ best peer |" in text


def test_charts_are_skipped_without_matplotlib(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    cases = select(["S5"])
    rows = [row("spate", case="S5", scenario="S5", rps=1.0, cpu=1.0)]
    assert report.charts(rows, cases, str(tmp_path)) == 0
    assert list(tmp_path.iterdir()) == []


def test_floor_ratio_pairs_the_runs_of_one_repetition():
    cells = report.summarize(
        [
            row("spate", rep=1, rps=100.0, cpu=2.2),
            row("floor", rep=1, rps=100.0, cpu=2.0),
            row("spate", rep=2, rps=100.0, cpu=3.3),
            row("floor", rep=2, rps=100.0, cpu=3.0),
            row("spate", rep=3, rps=100.0, cpu=1.2),
            row("floor", rep=3, status="flagged", rps=100.0, cpu=0.1, reason="1 failed"),
            row("spate", rep=4, rps=100.0, cpu=4.0),
            row("floor", rep=4, rps=100.0, cpu=5.0),
        ]
    )["S1-6b"]
    (median, lo, hi), anchor = report.floor_ratio(cells)
    assert anchor == "floor"
    # Reps 1, 2 and 4 (the floor's rep 3 is flagged): 1.1, 1.1 and 0.8, while the ratio of
    # the medians would be 2.75 / 3.0.
    assert median == pytest.approx(1.1)
    assert (lo, hi) == (pytest.approx(0.8), pytest.approx(1.1))


def test_floor_ratio_without_a_floor_is_none():
    cells = report.summarize([row("spate", rps=1.0, cpu=1.0), row("h2o", rps=1.0, cpu=2.0)])
    assert report.floor_ratio(cells["S1-6b"]) == (None, None)


def test_each_floor_that_ran_gets_its_own_paired_ratio():
    rows = [
        row("spate", rep=1, rps=100.0, cpu=2.2, case="S5", scenario="S5"),
        row("floor", rep=1, rps=100.0, cpu=2.0, case="S5", scenario="S5"),
        row("floor-sized", rep=1, rps=100.0, cpu=2.2, case="S5", scenario="S5"),
    ]
    cells = report.summarize(rows)["S5"]
    assert report.floor_ratio(cells)[1] == "floor"
    (median, _, _), _ = report.floor_ratio(cells, "floor-sized")
    assert median == pytest.approx(1.0)
    assert report.floor_ratio(cells, "h2floor") == (None, None)
    text = report.markdown(rows, select(["S5"]), {})
    line = next(l for l in text.splitlines() if l.startswith("| 612 B"))
    assert "CPU 1.10× floor, paired" in line
    assert "CPU 1.00× floor-sized, paired" in line


def test_an_earlier_spate_build_is_paired_and_never_the_best_peer():
    rows = [
        row("spate", rep=1, rps=100.0, cpu=1.8, case="S5", scenario="S5"),
        row("spate-before", rep=1, rps=100.0, cpu=2.0, case="S5", scenario="S5"),
        row("h2o", rep=1, rps=100.0, cpu=3.0, case="S5", scenario="S5"),
    ]
    text = report.markdown(rows, select(["S5"]), {})
    line = next(l for l in text.splitlines() if l.startswith("| 612 B"))
    assert "CPU 0.60× (vs h2o)" in line
    assert "CPU 0.90× spate-before, paired" in line


def test_a_chart_per_scenario_with_both_figures(tmp_path):
    pytest.importorskip("matplotlib")
    cases = select(["S1", "S5"])
    rows = [
        row("spate", rps=400.0, cpu=1.0),
        row("h2o", rps=300.0, cpu=2.0),
        row("spate", case="S5", scenario="S5", rps=100.0, cpu=5.0),
    ]
    assert report.charts(rows, cases, str(tmp_path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["S1.png", "S5.png"]
    assert (tmp_path / "S1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_estimated_minutes_counts_preparation_once_per_pair_and_the_extras():
    from benchlib import cli

    # 252 pairs, one 2 s repetition each: about the 40 minutes a quick run takes here.
    assert cli.estimated_minutes(252, 1, 2, False) == 40
    # Three repetitions prepare each pair once, not three times.
    three = cli.estimated_minutes(3 * 287, 3, 5, False)
    assert three == round((287 * 7.5 + 3 * 287 * 5) / 60)
    assert cli.estimated_minutes(3 * 287, 3, 5, True) == three + 4


def test_a_flagged_cell_with_a_measured_cause_says_it_and_a_clean_one_does_not():
    flagged = report.Cell([row("h2o", status="flagged", rps=361.0, cpu=82.8, reason="920 failed")])
    notes = []
    assert report.format_cell(flagged, notes, "h2o", "HTTP/3 c1000").startswith("⚠")
    assert notes[0].startswith("h2o HTTP/3 c1000: every run flagged: 920 failed; measured cause, apart")
    assert "rcvbuf" in notes[0]
    clean = report.Cell([row("h2o", rps=27000.0, cpu=22.8)])
    notes = []
    report.format_cell(clean, notes, "h2o", "HTTP/3 c1000")
    assert notes == []
    # Another server's flagged cell in that row gets only what was flagged.
    other = report.Cell([row("caddy", status="flagged", rps=1.0, cpu=1.0, reason="1 failed")])
    report.format_cell(other, notes, "caddy", "HTTP/3 c1000")
    assert notes == ["caddy HTTP/3 c1000: every run flagged: 1 failed"]


def test_versions_name_the_http3_rows_own_h2o_and_h2load(monkeypatch):
    from benchlib import cli

    monkeypatch.setattr(cli, "VERSION_COMMANDS", [["h2o", "--version"]])
    monkeypatch.setattr(cli, "_h2o_quic", lambda given: "/peers/h2o/bin/h2o")
    monkeypatch.setattr(cli, "_h3_h2load", lambda given: "/peers/bin/h2load")
    seen = []

    def version(argv):
        seen.append(argv)
        return "h2o version 2.3.0" if "h2o" in " ".join(argv) else "h2load nghttp2/1.69.0"

    monkeypatch.setattr(cli, "_version", version)
    assert list(cli._versions()) == [
        "h2o version 2.3.0",
        "h2o version 2.3.0 (HTTP/3 rows)",
        "h2load nghttp2/1.69.0 (HTTP/3 rows)",
    ]
    assert seen[1] == ["env", "H2O_ROOT=/peers/h2o", "/peers/h2o/bin/h2o", "--version"]
    # Debian's own h2load, when it speaks HTTP/3, is the one already listed.
    monkeypatch.setattr(cli, "_h3_h2load", lambda given: "h2load")
    assert len(list(cli._versions())) == 2
