"""V1 (issue 37): the generated docroot, the shuffled URI lists, the cases and who runs them."""

import hashlib
import math
import os

import pytest

from benchlib import report, servers, varied
from benchlib.runner import COLUMNS, Runner, Settings, make_docroot
from benchlib.scenarios import select


def digest(root):
    """sha256 over every file's relative path and bytes, in sorted order."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    a = tmp_path_factory.mktemp("a")
    b = tmp_path_factory.mktemp("b")
    lists_a = varied.make(str(a / "htdocs"), str(a / "lists"))
    varied.make(str(b / "htdocs"), str(b / "lists"))
    return a, b, lists_a


def test_docroot_is_deterministic(made):
    a, b, _ = made
    assert digest(str(a / "htdocs")) == digest(str(b / "htdocs"))
    assert digest(str(a / "lists")) == digest(str(b / "lists"))


def test_docroot_has_the_sets_and_sizes_asked(made):
    a, _, _ = made
    root = a / "htdocs" / "v1"

    def file_sizes(name):
        return sorted(os.path.getsize(p) for p in (root / name).iterdir())

    assert file_sizes("one") == [4096]
    assert file_sizes("d50") == [4096] * 50
    assert file_sizes("d2000") == [4096] * 2000
    mixed = file_sizes("mixed")
    assert len(mixed) == 2000
    assert mixed[0] >= 100 and mixed[-1] <= 64 * 1024
    # Log-uniform: about as many files per factor of size, so the median sits near the
    # geometric middle (~2.6 KB) and each decade holds its share.
    median = mixed[1000]
    assert 1800 < median < 3600, median
    decade = sum(1 for s in mixed if 1000 <= s < 10000) / 2000
    assert abs(decade - 1 / math.log10(65536 / 100)) < 0.05, decade
    assert (root / "mixed" / "0000.txt").stat().st_size == varied.sizes("mixed")[0]


def test_files_are_distinct(made):
    a, _, _ = made
    for name in ("d50", "d2000", "mixed"):
        bodies = {p.read_bytes() for p in (a / "htdocs" / "v1" / name).iterdir()}
        assert len(bodies) == varied.SETS[name][0], name


def test_uri_lists_never_repeat_a_path_in_a_row_and_cover_every_file(made):
    _, _, lists = made
    for name in ("d50", "d2000", "mixed"):
        with open(lists[name]) as f:
            uris = f.read().split()
        count = varied.SETS[name][0]
        assert len(uris) >= varied.LIST_MIN and len(uris) % count == 0
        # h2load goes round the list: the pair (last, first) counts too.
        for prev, cur in zip(uris, uris[1:] + uris[:1]):
            assert prev != cur, name
        # Each round is a permutation of the set, and the rounds differ.
        rounds = [uris[i : i + count] for i in range(0, len(uris), count)]
        assert len(rounds) >= varied.ROUNDS_MIN
        for r in rounds:
            assert sorted(r) == varied.paths(name)
        assert len({tuple(r) for r in rounds}) == len(rounds)
        assert rounds[0] != varied.paths(name)  # shuffled, not in file order


def test_make_docroot_adds_v1_only_when_asked(tmp_path):
    docroot, _ = make_docroot(str(tmp_path / "x"))
    assert not os.path.exists(os.path.join(docroot, "v1"))
    docroot, _ = make_docroot(str(tmp_path / "y"), with_varied=True)
    assert os.path.getsize(os.path.join(docroot, "v1", "one", "4k.txt")) == 4096


def v1():
    return select(["V1"])


def test_v1_cases_each_transport_has_repeated_then_three_varied():
    cases = v1()
    assert cases == select(["V1"], quick=True)  # all of V1 is quick
    transports = {}
    for c in cases:
        if c.cold_requests:
            continue
        transports.setdefault(c.key.rsplit("-", 1)[0], []).append(c)
    assert sorted(transports) == sorted(
        ["V1-h2c", "V1-h1", "V1-tls-h2", "V1-tls-h1", "V1-h3", "V1-proxy"]
    )
    for prefix, cs in transports.items():
        assert [c.uris for c in cs] == ["", "d50", "d2000", "mixed"], prefix
        assert cs[0].path == "/v1/one/4k.txt" and not cs[0].baseline
        assert all(c.baseline == cs[0].key for c in cs[1:])
        assert all(c.conns == 100 and c.tool == "h2load" for c in cs)
    flags = {c.key: c.load_flags() for c in cases}
    assert flags["V1-h2c-one"] == "h2load -c100 -m10"
    assert flags["V1-h2c-d2000"] == "h2load -c100 -m10 -i d2000"
    assert flags["V1-h1-mixed"] == "h2load --h1 -c100 -i mixed"
    assert flags["V1-tls-h1-d50"] == "h2load --h1 -c100 -i d50"
    assert flags["V1-h3-d50"] == "h2load -c100 -m10 --alpn-list=h3 -i d50"
    by_key = {c.key: c for c in cases}
    assert by_key["V1-tls-h1-d50"].protocol == "h1" and by_key["V1-tls-h1-d50"].listener == "tls"
    assert by_key["V1-proxy-mixed"].mode == "proxy"
    # Cleartext HTTP/1.1 and h2c need different nginx listens: different server instances.
    assert by_key["V1-h1-one"].group != by_key["V1-h2c-one"].group
    # Over TLS ALPN picks: one instance serves both.
    assert by_key["V1-tls-h1-one"].group == by_key["V1-tls-h2-one"].group


def test_v1_proxy_runs_again_from_a_cold_start():
    by_key = {c.key: c for c in v1()}
    cold = by_key["V1-proxy-d2000-cold"]
    warm = by_key["V1-proxy-d2000"]
    assert (cold.mode, cold.uris, cold.baseline) == ("proxy", "d2000", "V1-proxy-one")
    assert cold.cold_requests == 20000 and not warm.cold_requests
    assert cold.load_flags() == warm.load_flags()
    # A group of its own: the runner starts a server for each of its repetitions.
    assert [c for c in v1() if c.group == cold.group] == [cold]


def test_v1_is_declared_for_the_right_servers(env):
    cases = v1()
    applies = {
        s.name: {c.key for c in cases if s.applies(c)}
        for s in servers.all_servers() + [servers.SpateBefore()]
    }
    everything = {c.key for c in cases}
    proxy = {c.key for c in cases if c.mode == "proxy"}
    for name in ("spate", "h2o", "nginx", "spate-before"):
        assert applies[name] == everything, name
    assert applies["nghttpx"] == proxy
    for name in ("nghttpd", "apache", "caddy", "floor", "floor-sized", "h2floor"):
        assert not applies[name], name
    # HTTP/3: n/a with a reason without the HTTP/3 h2load (and nginx has none at all).
    h3 = next(c for c in cases if c.listener == "quic")
    assert "HTTP/3" in servers.Spate().unsupported(h3, env)
    assert "HTTP/3" in servers.Nginx().unsupported(h3, env)
    assert "HTTP/3" in servers.H2o().unsupported(h3, env)


def test_v1_configs(env):
    by_key = {c.key: c for c in v1()}
    static = servers.Spate().render(env, by_key["V1-h2c-d2000"], 8080, None)
    assert "file.dir: /run/htdocs" in static
    proxy = servers.Spate().render(env, by_key["V1-proxy-d2000"], 8080, [9000])
    assert "proxy.reverse.url: http://127.0.0.1:9000/" in proxy
    block = servers.Nginx().server_block([by_key["V1-h1-one"]], 8080, None)
    assert block["listen"] == "listen 127.0.0.1:8080;"
    block = servers.Nginx().server_block([by_key["V1-h2c-one"]], 8080, None)
    assert block["listen"] == "listen 127.0.0.1:8080 http2;"
    block = servers.Nginx().server_block([by_key["V1-tls-h1-one"]], 8443, None)
    assert block["listen"] == "listen 127.0.0.1:8443 ssl http2;"


class RunEnv:
    h3_client = "/peers/h2load"

    def __init__(self, run_dir):
        self.run_dir = run_dir


def test_load_argv_reads_the_uri_file_whole_uris_first_to_last(tmp_path):
    runner = Runner(RunEnv(str(tmp_path)), Settings(True, 1, 1), [], [])
    by_key = {c.key: c for c in v1()}
    url = "https://127.0.0.1:8443/v1/d50/0000.txt"
    argv = runner.load_argv(by_key["V1-tls-h1-d50"], url, requests=5000)
    assert argv[:2] == ["h2load", "--h1"]
    assert "-m1" in argv and "-n5000" in argv
    assert argv[-2] == "-i" and url not in argv
    with open(argv[-1]) as f:
        lines = f.read().splitlines()
    assert lines == ["https://127.0.0.1:8443" + p for p in varied.uri_list("d50")]
    once = runner.uri_file(by_key["V1-tls-h1-d50"], url, once=True)
    with open(once) as f:
        assert f.read().splitlines() == ["https://127.0.0.1:8443" + p for p in varied.paths("d50")]
    h3 = runner.load_argv(by_key["V1-h3-mixed"], "https://127.0.0.1:1/v1/mixed/0000.txt", requests=9)
    assert h3[0] == "/peers/h2load" and "--alpn-list=h3" in h3 and "--h1" not in h3
    repeated = runner.load_argv(by_key["V1-h2c-one"], "http://127.0.0.1:1/v1/one/4k.txt", requests=9)
    assert repeated[-1] == "http://127.0.0.1:1/v1/one/4k.txt" and "-i" not in repeated


def row(server, case, cpu, status="ok"):
    r = {c: "" for c in COLUMNS}
    r.update(scenario="V1", case=case, label=case, load="", server=server, rep=1, status=status)
    r.update(rps=1000.0, cpu_us_per_req=cpu, requests=1000, peak_rss_kb=5000)
    return r


def test_report_puts_repeated_and_varied_side_by_side_with_ratios():
    cases = [c for c in v1() if c.key.startswith("V1-h2c-")]
    rows = [
        row("spate", "V1-h2c-one", 1.0),
        row("h2o", "V1-h2c-one", 2.0),
        row("nginx", "V1-h2c-one", 4.0),
        row("spate", "V1-h2c-d2000", 3.0),
        row("h2o", "V1-h2c-d2000", 3.0),
        row("nginx", "V1-h2c-d2000", 4.4, status="flagged"),
    ]
    text = report.markdown(rows, cases, {})
    table = text.split("## V1")[1]
    assert "| CPU ÷ repeated |" in table
    lines = [l for l in table.splitlines() if l.startswith("| h2c")]
    assert lines[0].startswith("| h2c, 4 KiB repeated |") and lines[0].endswith("|  |")
    assert lines[1].startswith("| h2c, 2,000 × 4 KiB shuffled |")
    # spate ÷ h2o on each line, and each server over its own repeated figure.
    assert "CPU 0.50× (vs h2o)" in lines[0]
    assert "CPU 1.00× (vs h2o)" in lines[1]
    assert lines[1].endswith("| spate 3.00×, h2o 1.50× |")  # nginx's runs were flagged


def h2load_output(done, data, protocol="http/1.1", non2xx=0):
    """h2load's summary as it prints it, with the figures the probe reads."""
    return (
        "starting benchmark...\nApplication protocol: %s\n\n"
        "finished in 100.00ms, 500.00 req/s, 1.00MB/s\n"
        "requests: %d total, %d started, %d done, %d succeeded, 0 failed, 0 errored, 0 timeout\n"
        "status codes: %d 2xx, 0 3xx, %d 4xx, 0 5xx\n"
        "traffic: 1.00MB (1) total, 1.00KB (1) headers (space savings 0.00%%), 1.00MB (%d) data\n"
        % (protocol, done, done, done, done - non2xx, done - non2xx, non2xx, data)
    )


def test_probe_of_a_varied_case_needs_every_file_whole(monkeypatch, tmp_path):
    from benchlib import runner as runner_mod

    c = next(c for c in v1() if c.key == "V1-h1-mixed")
    calls = []
    answer = {}

    def fake_run(argv, timeout, cpu=None):
        calls.append(argv)
        return 0, answer["text"]

    monkeypatch.setattr(runner_mod, "run_bounded", fake_run)
    env = RunEnv(str(tmp_path))
    total = varied.expected_body_bytes("mixed")
    answer["text"] = h2load_output(2000, total)
    assert runner_mod.probe_varied(c, "http://127.0.0.1:1/x", "/f", env) is None
    assert calls[-1][:2] == ["h2load", "--h1"] and "-n2000" in calls[-1] and "-m1" in calls[-1]
    assert calls[-1][-2:] == ["-i", "/f"]
    answer["text"] = h2load_output(2000, total - 1)
    assert "body bytes" in runner_mod.probe_varied(c, "http://127.0.0.1:1/x", "/f", env)
    answer["text"] = h2load_output(2000, total, non2xx=3)
    assert "non-2xx" in runner_mod.probe_varied(c, "http://127.0.0.1:1/x", "/f", env)
    # The one-request probe checks the protocol HTTP/1.1 cases negotiated.
    answer["text"] = h2load_output(1, 4096, protocol="h2c")
    reason = runner_mod.probe(c, "http://127.0.0.1:1/v1/mixed/0000.txt")
    assert "expected http/1.1" in reason and "--h1" in calls[-1]
    answer["text"] = h2load_output(1, 4096, protocol="http/1.1")
    assert runner_mod.probe(c, "http://127.0.0.1:1/v1/mixed/0000.txt") is None


def test_each_client_walks_its_own_order(tmp_path):
    """h2load hands all connections of a process one list from its start; in lockstep they
    would ask for the same path at once. The varied lines run one process per client, each
    with its own seeded order, the requests split between them."""
    runner = Runner(RunEnv(str(tmp_path)), Settings(True, 1, 1, v1_conns_per_load=1), [], [])
    by_key = {c.key: c for c in v1()}
    url = "http://127.0.0.1:8080/v1/d2000/0000.txt"
    # The default: ten processes of ten connections, each process its own order.
    default = Runner(RunEnv(str(tmp_path)), Settings(True, 1, 1), [], [])
    tens = default.load_argvs(by_key["V1-h2c-d2000"], url, requests=100_000)
    assert len(tens) == 10 and all("-c10" in a and "-n10000" in a for a in tens)
    argvs = runner.load_argvs(by_key["V1-h2c-d2000"], url, requests=100_050)
    assert len(argvs) == 100
    lists = []
    for argv in argvs:
        assert "-c1" in argv and "-m10" in argv and "-n1001" in argv and argv[-2] == "-i"
        with open(argv[-1]) as f:
            lines = f.read().splitlines()
        assert lines[0].startswith("http://127.0.0.1:8080/v1/d2000/")
        paths = [l.split("8080", 1)[1] for l in lines]
        assert sorted(paths[:2000]) == varied.paths("d2000")  # a whole round first
        for prev, cur in zip(paths, paths[1:] + paths[:1]):
            assert prev != cur
        lists.append(tuple(paths))
    assert len(set(lists)) == 100
    # No two clients start on the same path often: in lockstep every one would.
    firsts = [l[0] for l in lists]
    assert len(set(firsts)) > 90
    # The same orders in every run and for every server (other port, same paths).
    again = runner.load_argvs(by_key["V1-h2c-d2000"], url.replace("8080", "9090"), requests=500)
    with open(again[7][-1]) as f:
        assert tuple(l.split("9090", 1)[1] for l in f.read().splitlines()) == lists[7]
    assert "-n5" in again[7]  # 500 requests over 100 clients
    # The repeated line has the same shape, one process per client, over its one URL.
    one = "http://127.0.0.1:8080/v1/one/4k.txt"
    repeated = runner.load_argvs(by_key["V1-h2c-one"], one, requests=1000)
    assert len(repeated) == 100
    assert all("-c1" in a and "-n10" in a and a[-1] == one and "-i" not in a for a in repeated)
    # --v1-conns-per-load 100: the old shape, one process, one order for every connection.
    lockstep = Runner(RunEnv(str(tmp_path)), Settings(True, 1, 1, v1_conns_per_load=100), [], [])
    one_process = lockstep.load_argvs(by_key["V1-h2c-d2000"], url, requests=100_050)
    assert len(one_process) == 1 and "-c100" in one_process[0] and "-n100050" in one_process[0]
    # Other scenarios: one process for all the connections.
    s1 = next(c for c in select(["S1"]) if c.key == "S1-4k")
    assert len(runner.load_argvs(s1, "http://127.0.0.1:1/4k.txt", requests=1000)) == 1


def test_results_of_the_clients_add_up(monkeypatch, tmp_path):
    from benchlib import parsers
    from benchlib import runner as runner_mod

    runner = Runner(RunEnv(str(tmp_path)), Settings(True, 1, 1, v1_conns_per_load=1), [], [])
    c = next(c for c in v1() if c.key == "V1-h1-d50")
    outs = [(0, h2load_output(500, 4096 * 500), 0.01 * i) for i in range(100)]
    outs[3] = (0, h2load_output(500, 4096 * 497, non2xx=3), 0.03)
    monkeypatch.setattr(runner_mod, "run_bounded_all", lambda argvs, t, cpu=None: outs)
    rc, res = runner.run_load(c, runner.load_argvs(c, "http://127.0.0.1:1/x", requests=50000), 30)
    assert res.completed == 50000 and res.non2xx == 3
    assert res.data_bytes == 4096 * (50000 - 3)
    # From the first start to the last finish: 0.99 s + 100 ms.
    assert abs(res.duration_s - 1.09) < 1e-9 and abs(res.rps - 50000 / 1.09) < 1e-6
    outs[5] = (None, "(killed after 30s)", 0.05)
    rc, res = runner.run_load(c, runner.load_argvs(c, "http://127.0.0.1:1/x", requests=50000), 30)
    assert isinstance(res, parsers.ParseError) and "client 5 of 100" in str(res)
