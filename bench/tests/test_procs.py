"""Process handling: a started tree is seen whole, measured, and stopped by PID."""

import os
import sys
import time

import pytest

from benchlib.procs import Launcher, StartError, free_port, run_bounded, run_bounded_all


def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_stop_all_stops_the_whole_tree(tmp_path):
    launcher = Launcher()
    # A parent that ignores SIGTERM and has a child: both must still be stopped.
    script = "trap '' TERM; sleep 30 & sleep 30 & wait"
    proc = launcher.start("tree", ["sh", "-c", script], str(tmp_path))
    deadline = time.monotonic() + 5
    while len(proc.tree()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = proc.tree()
    assert len(pids) == 3 and pids[0] == proc.pid
    launcher.stop_all()
    assert all(gone(pid) for pid in pids)


def test_cpu_and_rss_are_read_from_proc(tmp_path):
    launcher = Launcher()
    busy = (
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
        "time.sleep(30)\n"
    )
    try:
        proc = launcher.start("busy", [sys.executable, "-c", busy], str(tmp_path))
        # On a loaded machine the child may take several times 0.3 s to get its CPU.
        deadline = time.monotonic() + 10
        while proc.cpu_seconds() < 0.25 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.cpu_seconds() >= 0.25
        assert proc.rss_kb() > 1000
    finally:
        launcher.stop_all()


def test_wait_listening_reports_an_early_exit_with_the_log(tmp_path):
    launcher = Launcher()
    proc = launcher.start(
        "fails", ["sh", "-c", "echo 'x.yaml:3: ssl is not supported yet'; exit 1"], str(tmp_path)
    )
    with pytest.raises(StartError, match="not supported yet"):
        proc.wait_listening(free_port(), timeout=5)
    launcher.stop_all()


def test_run_bounded_kills_a_load_that_overruns():
    start = time.monotonic()
    rc, out = run_bounded(["sh", "-c", "echo started; sleep 30"], timeout=0.5)
    assert rc is None
    assert "started" in out and "killed after" in out
    assert time.monotonic() - start < 5


def test_taskset_pins_the_child(tmp_path):
    if not os.path.exists("/usr/bin/taskset") or os.cpu_count() < 2:
        pytest.skip("needs taskset and two CPUs")
    rc, out = run_bounded(["grep", "Cpus_allowed_list", "/proc/self/status"], 5, cpu=1)
    assert rc == 0 and out.split()[-1] == "1"


def test_loads_side_by_side_each_output_kept_and_the_late_ones_killed():
    start = time.monotonic()
    results = run_bounded_all(
        [
            ["sh", "-c", "sleep 0.2; echo first"],
            ["sh", "-c", "echo second; exit 3"],
            ["sh", "-c", "echo third; sleep 30"],
        ],
        timeout=1.0,
    )
    # Side by side: the whole batch within the bound, not the sum of the three.
    assert time.monotonic() - start < 5
    (rc1, out1, start1), (rc2, out2, start2), (rc3, out3, _) = results
    assert (rc1, out1) == (0, "first\n") and (rc2, out2) == (3, "second\n")
    assert rc3 is None and "third" in out3 and "killed after" in out3
    assert 0 <= start1 <= start2 < 1  # when each started, in seconds after the first
