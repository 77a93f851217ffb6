"""The HTTP/2 floor: which cases it runs, its command line, one process per body size."""

from benchlib import servers
from benchlib.scenarios import select


def case(key):
    return next(c for c in select() if c.key == key)


class FakeProc:
    def __init__(self, argv):
        self.argv = argv
        self.stopped = False

    def wait_listening(self, port):
        pass

    def stop(self):
        self.stopped = True


class FakeLauncher:
    """Records what would be started, pinned where."""

    def __init__(self):
        self.started = []

    def start(self, name, argv, run_dir, cpu):
        proc = FakeProc(argv)
        self.started.append((name, proc, cpu))
        return proc


def test_h2floor_runs_the_cleartext_h2_cases_only():
    floor = servers.H2Floor()
    for key in ("S1-6b", "S1-4k", "S2-6b", "S2-4k"):
        assert floor.applies(case(key))
    for key in ("S3-6b", "S4-clear-6b", "S5", "S6-c100", "Q1-6b"):
        assert not floor.applies(case(key))
    assert not servers.Floor().applies(case("S1-6b"))
    assert floor.canned


def test_h2floor_says_why_without_its_binary(env):
    assert "no h2floor binary at /nonexistent/h2floor" in servers.H2Floor().unsupported(
        case("S1-6b"), env
    )


def test_h2floor_argv_carries_the_body_size_of_the_case(env):
    assert servers.H2Floor().argv(env, 9000, case("S1-6b")) == ["/nonexistent/h2floor", "9000", "6"]
    assert servers.H2Floor().argv(env, 9001, case("S2-4k")) == [
        "/nonexistent/h2floor",
        "9001",
        "4096",
    ]


def test_h2floor_starts_one_process_per_case_and_stops_them_all(env):
    env.launcher = FakeLauncher()
    env.server_cpu = 0
    cases = [case("S1-6b"), case("S1-4k")]
    inst = servers.H2Floor().start(env, cases)
    six, four = inst.for_case(cases[0]), inst.for_case(cases[1])
    assert six.port != four.port
    assert six.proc.argv[1:] == [str(six.port), "6"]
    assert four.proc.argv[1:] == [str(four.port), "4096"]
    assert [(name, cpu) for name, _, cpu in env.launcher.started] == [("h2floor", 0)] * 2
    inst.stop()
    assert six.proc.stopped and four.proc.stopped


def test_h2floor_is_known_by_name_and_listed_last():
    assert [s.name for s in servers.by_name(["h2floor"])] == ["h2floor"]
    assert [s.name for s in servers.all_servers()][-4:] == [
        "floor",
        "floor-sized",
        "h2floor",
        "floor-files",
    ]
