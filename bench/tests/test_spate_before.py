from benchlib import servers
from benchlib.scenarios import select


def test_spate_before_runs_the_earlier_binary_only_when_given(env, tmp_path):
    (s,) = servers.by_name(["spate-before"])
    case = next(c for c in select(["S5"]))
    assert s.unsupported(case, env) == "no earlier spate binary (--spate-before BIN)"
    binary = tmp_path / "spate-old"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    env.spate_before = str(binary)
    assert s.unsupported(case, env) is None
    assert s.argv(env, "/tmp/x/c.yaml", case) == [str(binary), "-c", "/tmp/x/c.yaml"]
    # Not among the servers a plain run takes part with.
    assert "spate-before" not in [x.name for x in servers.all_servers()]
