"""C1, on-the-fly compression: the page, every server's configuration, the load it sends and
the bytes per response the report shows."""

import gzip
import os

import pytest

from benchlib import page, report, servers
from benchlib.parsers import parse_h2load
from benchlib.runner import COLUMNS, Runner, Settings, _content
from benchlib.scenarios import COMPRESS_LEVELS, FILES, select

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def c1(key):
    return next(c for c in select(["C1"]) if c.key == key)


def test_c1_cases_are_file_and_proxied_in_br_then_gzip():
    cases = select(["C1"], quick=True)
    assert [c.key for c in cases] == [
        "C1-file-br",
        "C1-file-gzip",
        "C1-proxied-br",
        "C1-proxied-gzip",
    ]
    for c in cases:
        assert (c.tool, c.listener, c.conns, c.streams) == ("h2load", "tls", 100, 10)
        assert c.path == "/page100k.html"
    assert c1("C1-file-br").load_flags() == "h2load -c100 -m10 -H 'accept-encoding: br'"
    # After the seed scenarios, not sorted by name (then V1, issue 37's).
    order = [c.scenario for c in select()]
    assert order.index("C1") > max(i for i, s in enumerate(order) if s.startswith("S"))
    assert order[-1] == "V1" and "C1" not in order[order.index("V1") :]


def test_page_is_exact_deterministic_html_that_compresses_like_a_real_page():
    body = _content("page100k.html", FILES["page100k.html"])
    assert len(body) == 100000
    assert body == page.html_page(100000)
    assert body.startswith(b"<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>")
    assert body.endswith(b"</body>\n</html>\n")
    body.decode("ascii")
    # Not a repeated block, which any encoder shrinks to nothing: about a third is left.
    ratio = len(gzip.compress(body, 6)) / len(body)
    assert 0.2 < ratio < 0.45, ratio
    assert page.html_page(100000, seed=7) != body
    with pytest.raises(ValueError):
        page.html_page(100)


def test_h2o_and_spate_compress_at_the_same_levels_for_file_and_proxy(env):
    assert COMPRESS_LEVELS == {"br": 6, "gzip": 6}
    levels = "\ncompress:\n  br: 6\n  gzip: 6\n"
    for key in ("C1-file-br", "C1-proxied-gzip"):
        case = c1(key)
        h2o = servers.H2o().render(env, case, 8443, [9000], 1000)
        spate = servers.Spate().render(env, case, 8443, [9000], 1000)
        for text in (h2o, spate):
            assert levels in text, key
            assert "  ssl:\n    certificate-file: /run/cert.pem" in text
        # Line for line the same, but for spate's idle backend connections (h2o keeps all).
        assert spate.replace("        proxy.max-idle-connections: 1000\n", "") == h2o
    assert "file.dir: /run/htdocs" in servers.H2o().render(env, c1("C1-file-br"), 1, None)
    proxied = servers.H2o().render(env, c1("C1-proxied-br"), 1, [9000])
    assert "proxy.reverse.url: http://127.0.0.1:9000/" in proxied
    # Other scenarios stay uncompressed (S8 keeps the seed's br only).
    assert "compress" not in servers.Spate().render(env, select(["S7"])[0], 1, None)


def test_nginx_compresses_with_gzip_and_debians_brotli_filter_at_the_same_levels(
    tmp_path, monkeypatch, env
):
    module = tmp_path / "ngx_http_brotli_filter_module.so"
    module.write_bytes(b"")
    monkeypatch.setattr(servers, "NGINX_BROTLI", str(module))
    for group in ([c1("C1-file-br"), c1("C1-file-gzip")], [c1("C1-proxied-br")]):
        block = servers.Nginx().server_block(group, 8443, [9000])
        text = servers.nginx_config(env, "/tmp/x/ngx", **block)
        assert text.startswith("# nginx") and "\nload_module %s;\n" % module in text
        assert "gzip on; gzip_comp_level 6; gzip_proxied any; gzip_vary on;" in text
        assert "brotli on; brotli_comp_level 6;" in text
        assert "listen 127.0.0.1:8443 ssl http2;" in text
        assert "$" not in text.replace("$-placeholders", "")
    proxied = servers.nginx_config(
        env, "/t", **servers.Nginx().server_block([c1("C1-proxied-gzip")], 1, [9000])
    )
    assert "server 127.0.0.1:9000; keepalive 1000;" in proxied
    # The static peers and the proxies' backend send the page as it is.
    plain = servers.Nginx().server_block(select(["S7"]), 1, None)
    assert "gzip" not in plain["body"] and plain["modules"] == ""
    assert servers.Nginx().unsupported(c1("C1-file-br"), env) is None


def test_nginx_without_the_brotli_module_runs_gzip_only(monkeypatch, env):
    monkeypatch.setattr(servers, "NGINX_BROTLI", "/nonexistent/brotli.so")
    reason = servers.Nginx().unsupported(c1("C1-file-br"), env)
    assert "libnginx-mod-http-brotli-filter" in reason
    assert servers.Nginx().unsupported(c1("C1-file-gzip"), env) is None
    block = servers.Nginx().server_block([c1("C1-file-gzip")], 1, None)
    assert "brotli" not in block["body"] and block["modules"] == ""


def test_who_takes_part_in_c1():
    case = c1("C1-file-gzip")
    taking_part = [s.name for s in servers.all_servers() if s.applies(case)]
    assert taking_part == ["spate", "h2o", "nginx"]


def test_load_sends_the_encoding_and_warm_up_is_one_round_for_slow_requests(monkeypatch, env):
    r = Runner(env, Settings(True, 1, load_cpu=1), servers.all_servers(), select(["C1"]))
    case = c1("C1-proxied-gzip")
    argv = r.load_argv(case, "https://127.0.0.1:1/page100k.html", requests=5000)
    assert argv[argv.index("-H") + 1] == "accept-encoding: gzip"
    assert {"-c100", "-m10", "-n5000"} <= set(argv)
    rounds = []

    def round_(case, url, requests):
        rounds.append(requests)
        return 400.0, requests / 400.0  # a 100 KB page at br 6: milliseconds a response

    monkeypatch.setattr(r, "h2load_round", round_)
    # 1000 requests at 400/s last 2.5 s, more than a quarter run: no second round.
    assert r.warm_up(case, "u") == (1000, 2.5)
    assert rounds == [1000]
    rounds.clear()
    # At 100/s the fewest requests of a run (10 per connection) last 10 s, not 2: the time
    # bounds stretch to match, so a slow peer is not cut short.
    monkeypatch.setattr(r, "h2load_round", lambda c, u, n: (rounds.append(n) or 100.0, n / 100))
    requests, seconds = r.warm_up(case, "u")
    assert (requests, seconds) == (1000, 10.0)
    argv = r.load_argv(case, "u", requests=requests, seconds=seconds)
    assert "-T35" in argv and r.timeout(seconds) == 60
    assert "-T11" in r.load_argv(case, "u", requests=requests)
    rounds.clear()
    # Cheap requests keep the two rounds (the first is mostly connection setup).
    monkeypatch.setattr(r, "h2load_round", lambda c, u, n: (rounds.append(n) or 1e6, 0.01))
    assert r.warm_up(select(["S1"])[0], "u") == (2_000_000, 2)
    assert rounds == [10000, 500000]


def test_h2load_data_bytes_are_parsed():
    with open(os.path.join(FIXTURES, "h2load_tls_clean.txt")) as f:
        assert parse_h2load(f.read()).data_bytes == 120000


def row(server, case, cpu, size, status="ok"):
    r = {c: "" for c in COLUMNS}
    r.update(
        scenario="C1",
        case=case,
        label=case,
        load="",
        server=server,
        rep=1,
        status=status,
        rps=500.0,
        cpu_us_per_req=cpu,
        requests=1000,
        bytes_per_resp=size,
    )
    return r


def test_report_shows_bytes_per_response_and_spates_size_against_the_smallest_peer():
    rows = [
        row("spate", "C1-file-br", 2000.0, 27000.0),
        row("h2o", "C1-file-br", 2500.0, 28000.0),
        row("nginx", "C1-file-br", 3000.0, 27500.0),
    ]
    cells = report.summarize(rows)["C1-file-br"]
    ratio, best = report.bytes_ratio(cells)
    assert best == "nginx" and ratio == pytest.approx(27000 / 27500)
    text = report.markdown(rows, select(["C1"]), {})
    assert "**2,000.00 µs** · 500/s · 27,000 B" in text
    assert "CPU 0.80× (vs h2o), req/s 1.00× (vs h2o), bytes 0.982× (vs nginx)" in text
    assert "the page is 100,000 bytes" in text
    # Rows from before C1 (no bytes_per_resp column) still report.
    old = {k: v for k, v in row("h2o", "C1-file-br", 1.0, "").items() if k != "bytes_per_resp"}
    assert report.Cell([old]).bytes is None


def test_probe_refuses_a_page_sent_as_it_is():
    from benchlib.runner import probe_encoding

    reason = probe_encoding(c1("C1-file-br"), "https://127.0.0.1:1/page100k.html", 100000)
    assert reason == "h2load -n1: 100000 body bytes for a 100000-byte page: not compressed"
