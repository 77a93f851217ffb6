"""The h2load and wrk parsers against outputs captured on the project's machine."""

import os

import pytest

from benchlib.parsers import ParseError, parse_h2load, parse_wrk

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_h2load_clean_run():
    r = parse_h2load(fixture("h2load_clean.txt"))
    assert r.rps == pytest.approx(47123.24)
    assert r.completed == 20000
    assert r.duration_s == pytest.approx(0.42442)
    assert r.protocol == "h2c"
    assert r.problems == {}


def test_h2load_tls_run_records_protocol_and_cipher():
    r = parse_h2load(fixture("h2load_tls_clean.txt"))
    assert r.protocol == "h2 TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256"
    assert r.completed == 20000
    assert r.problems == {}


def test_h2load_non_2xx_is_a_problem():
    r = parse_h2load(fixture("h2load_404.txt"))
    assert r.non2xx == 2000
    assert r.failed == 2000
    assert r.errored == 0
    assert r.duration_s == pytest.approx(0.04909)  # "finished in 49.09ms"
    assert set(r.problems) == {"failed", "non-2xx"}


def test_h2load_goaway_mid_run_counts_failed_and_errored():
    # nginx closes an HTTP/2 connection after keepalive_requests (1000 by default).
    r = parse_h2load(fixture("h2load_goaway_after_1000.txt"))
    assert r.completed == 10061
    assert r.failed == 10000
    assert r.errored == 10000
    assert r.non2xx == 0
    assert "Process Request Failure:992" in r.notes
    assert r.problems["errored"] == 10000


def test_h2load_server_out_of_connections():
    r = parse_h2load(fixture("h2load_worker_connections.txt"))
    assert (r.completed, r.failed, r.errored) == (15850, 4430, 4430)


def test_h2load_refused_connections_fail_every_request():
    r = parse_h2load(fixture("h2load_refused.txt"))
    assert r.rps == 0
    assert r.completed == 0
    assert r.duration_s == pytest.approx(256e-6)
    assert r.problems == {"failed": 10, "errored": 10, "no responses": 1}


def test_h2load_timeouts():
    r = parse_h2load(fixture("h2load_timeout.txt"))
    assert r.timeout == 2
    assert r.failed == 4
    assert "timeout" in r.problems


def test_h2load_without_summary_is_a_parse_error():
    with pytest.raises(ParseError, match="could not connect"):
        parse_h2load("starting benchmark...\nclient could not connect to host\n")
    with pytest.raises(ParseError):
        parse_h2load("")


def test_wrk_clean_run():
    r = parse_wrk(fixture("wrk_clean.txt"))
    assert r.rps == pytest.approx(49194.22)
    assert r.completed == 54101
    assert r.duration_s == pytest.approx(1.10)
    assert r.problems == {}


def test_wrk_non_2xx():
    r = parse_wrk(fixture("wrk_404.txt"))
    assert r.non2xx == 53215
    assert r.problems == {"non-2xx": 53215}


def test_wrk_socket_errors():
    r = parse_wrk(fixture("wrk_worker_connections.txt"))
    assert r.completed == 24
    assert r.socket_errors == 19101
    assert r.timeout == 0
    assert set(r.problems) == {"socket errors"}


def test_wrk_socket_timeouts_are_counted_apart():
    text = fixture("wrk_clean.txt").replace(
        "Requests/sec:", "  Socket errors: connect 1, read 2, write 3, timeout 4\nRequests/sec:"
    )
    r = parse_wrk(text)
    assert (r.socket_errors, r.timeout) == (6, 4)


def test_wrk_no_response_at_all():
    r = parse_wrk(fixture("wrk_timeout.txt"))
    assert r.completed == 0
    assert r.problems == {"no responses": 1}


def test_wrk_refused_is_a_parse_error_with_the_reason():
    with pytest.raises(ParseError, match="Connection refused"):
        parse_wrk(fixture("wrk_refused.txt"))
