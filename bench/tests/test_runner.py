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


def test_a_cold_case_starts_a_server_for_each_repetition_and_probes_after(monkeypatch):
    import benchlib.runner as runner_mod

    cold = case("V1-proxy-d2000-cold")
    events = []

    class Inst:
        port = 1234
        backend = None

        def __init__(self, name, n):
            self.name, self.n = name, n

        def for_case(self, c):
            return self

        def stop(self):
            events.append(("stop", self.name, self.n))

    class Srv:
        canned = False

        def __init__(self, name):
            self.name, self.started = name, 0

        def applies(self, c):
            return True

        def unsupported(self, c, env):
            return None

        def start(self, env, cases):
            assert cases == [cold]
            self.started += 1
            events.append(("start", self.name, self.started))
            return Inst(self.name, self.started)

    class Env(FakeEnv):
        h3_client = None

    r = Runner(Env(), Settings(True, 2, load_cpu=1), [Srv("spate"), Srv("h2o")], [cold])

    def measure(server, inst, c, url, rep, requests, seconds=None):
        events.append(("measure", server.name, inst.n, requests))
        row = r.base_row(server, c, rep)
        return row

    monkeypatch.setattr(r, "measure", measure)
    # The probe after h2o's second run finds a wrong body.
    monkeypatch.setattr(runner_mod, "probe", lambda *a, **k: None)
    monkeypatch.setattr(
        runner_mod,
        "probe_varied",
        lambda c, url, f, env: "bad body" if events[-1][1:3] == ("h2o", 2) else None,
    )
    monkeypatch.setattr(r, "uri_file", lambda *a, **k: "/dev/null")
    rows = r.run()
    assert events == [
        ("start", "spate", 1), ("measure", "spate", 1, 20000), ("stop", "spate", 1),
        ("start", "h2o", 1), ("measure", "h2o", 1, 20000), ("stop", "h2o", 1),
        ("start", "h2o", 2), ("measure", "h2o", 2, 20000), ("stop", "h2o", 2),
        ("start", "spate", 2), ("measure", "spate", 2, 20000), ("stop", "spate", 2),
    ]  # fmt: skip
    assert [(x["server"], x["rep"], x["status"]) for x in rows] == [
        ("spate", 1, "ok"), ("h2o", 1, "ok"), ("h2o", 2, "error"), ("spate", 2, "ok"),
    ]  # fmt: skip
    assert rows[2]["reason"] == "probe after the run: bad body"
