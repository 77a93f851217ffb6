"""Every load is bounded in requests and time; sizing follows the warm-up's rate."""

from benchlib.runner import Runner, Settings
from benchlib.scenarios import select
from benchlib.servers import all_servers


class FakeEnv:
    run_dir = "/tmp/x"


def runner(quick=True, reps=1):
    return Runner(FakeEnv(), Settings(quick, reps, load_cpu=1), all_servers(), select(quick=quick))


def case(key):
    return next(c for c in select() if c.key == key)


def test_h2load_runs_are_bounded_in_requests_and_time():
    r = runner(quick=False)
    argv = r.load_argv(case("S2-4k"), "http://127.0.0.1:1/4k.txt", requests=123456)
    assert argv[:2] == ["h2load", "-t1"]
    assert {"-c500", "-m100", "-n123456", "-w30", "-W30", "-T35", "-N10"} <= set(argv)
    assert r.timeout() == 60


def test_wrk_runs_are_bounded_in_time():
    argv = runner().load_argv(case("S6-c800"), "http://127.0.0.1:1/answer")
    assert argv == ["wrk", "-t1", "-c800", "-d2s", "--timeout", "5s", "http://127.0.0.1:1/answer"]


def test_request_count_follows_the_rate_within_limits():
    c = case("S1-6b")
    assert Runner.requests_for(c, 100000.0, 10) == 1_000_000
    assert Runner.requests_for(c, 10.0, 10) == 5000  # at least 10 per connection
    assert Runner.requests_for(c, 0.0, 10) == 50000  # warm-up failed: 100 per connection
    assert Runner.requests_for(c, 1e8, 10) == 50_000_000


def test_planned_runs_count_only_servers_that_take_part():
    r = runner()
    # S5 in quick mode: spate, h2o, nginx, apache and the two floors; not nghttpd nor nghttpx.
    s5 = [c for c in r.cases if c.scenario == "S5"]
    assert sum(1 for c in s5 for s in r.servers if s.applies(c)) == 6


def test_http3_runs_use_the_http3_h2load():
    r = runner(quick=False)
    r.env.h3_client = "/peers/h2load"
    argv = r.load_argv(case("Q1-6b"), "https://127.0.0.1:1/6b.txt", requests=1000)
    assert argv[0] == "/peers/h2load" and "--alpn-list=h3" in argv
    argv = r.load_argv(case("S3-6b"), "https://127.0.0.1:1/6b.txt", requests=1000)
    assert argv[0] == "h2load" and "--alpn-list=h3" not in argv


def test_each_repetition_turns_the_order_of_the_servers():
    ready = ["spate", "h2o", "floor"]
    orders = [Runner.rep_order(ready, rep) for rep in (1, 2, 3, 4)]
    assert orders == [
        ["spate", "h2o", "floor"],
        ["h2o", "floor", "spate"],
        ["floor", "spate", "h2o"],
        ["spate", "h2o", "floor"],
    ]
    assert Runner.rep_order([], 2) == []
