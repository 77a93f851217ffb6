"""Child processes: start pinned, wait until listening, account CPU and RSS, stop by PID.

Every process the suite starts goes through `Launcher`, which remembers it so that `stop_all`
(called from a `finally`, also on Ctrl-C) can stop each one by its PID and then any descendant
it was seen to have.
"""

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


class StartError(RuntimeError):
    """A server did not come up; the message is the reason shown in the report."""


class Launcher:
    """Starts children and guarantees they are stopped."""

    def __init__(self):
        self._procs = []  # ManagedProcess, in start order
        self._started = []

    def start(self, name, argv, run_dir, cpu=None, env=None):
        """Start `argv` (pinned to `cpu` with taskset) with stdout/stderr in run_dir/name.log."""
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + list(argv)
        # One log per start, so a failure's reason is that start's own last lines.
        log_path = os.path.join(run_dir, "%s-%d.log" % (name, len(self._started) + 1))
        self._started.append(name)
        log = open(log_path, "ab")
        try:
            # A new session keeps the terminal's Ctrl-C away from servers: we stop them ourselves.
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=run_dir,
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            raise StartError("cannot run %s: %s" % (argv[0], e)) from e
        finally:
            log.close()
        proc = ManagedProcess(name, popen, log_path)
        self._procs.append(proc)
        return proc

    def stop_all(self):
        while self._procs:
            self._procs.pop().stop()


class ManagedProcess:
    """One started server: its PID, its log, and the processes under it."""

    def __init__(self, name, popen, log_path):
        self.name = name
        self.popen = popen
        self.pid = popen.pid
        self.log_path = log_path
        self._seen = {}  # pid -> start time, so a reused PID is never signalled

    def alive(self):
        return self.popen.poll() is None

    def wait_listening(self, port, timeout=10.0, host="127.0.0.1"):
        """Wait until `port` accepts a connection; StartError if the process dies first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise StartError(
                    "%s exited with status %s: %s"
                    % (self.name, self.popen.returncode, self.log_tail())
                )
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise StartError(
            "%s did not listen on %s:%d within %.0fs" % (self.name, host, port, timeout)
        )

    def log_tail(self, lines=3):
        try:
            with open(self.log_path, "rb") as f:
                text = f.read()[-4096:].decode("utf-8", "replace")
        except OSError:
            return ""
        tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
        return " | ".join(tail)

    def tree(self):
        """PIDs of this process and all its live descendants."""
        pids = descendants(self.pid)
        for pid in pids:
            self._seen.setdefault(pid, _start_time(pid))
        return pids

    def cpu_seconds(self):
        """utime+stime of the whole tree, plus children already reaped by its members."""
        return sum(_proc_cpu(pid) for pid in self.tree())

    def rss_kb(self):
        return sum(_proc_rss_kb(pid) for pid in self.tree())

    def stop(self, grace=3.0):
        """SIGTERM the root, SIGKILL after `grace`, then any descendant still around."""
        if self.alive():
            self.tree()
            _signal(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal(self.pid, signal.SIGKILL)
                try:
                    self.popen.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
        left = [
            pid
            for pid, started in sorted(self._seen.items())
            if pid != self.pid and _exists(pid) and _start_time(pid) == started
        ]
        for pid in left:
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + grace
        while any(_exists(pid) for pid in left) and time.monotonic() < deadline:
            time.sleep(0.02)


class RssSampler:
    """Samples a process tree's RSS in a thread while a load runs; `peak_kb` is the maximum."""

    def __init__(self, proc, interval=0.2):
        self.proc = proc
        self.interval = interval
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self):
        self.peak_kb = max(self.peak_kb, self.proc.rss_kb())


def run_bounded(argv, timeout, cpu=None):
    """Run a load generator to completion with a hard time bound; return (rc, output).

    On timeout or Ctrl-C the generator is killed by its PID before the exception propagates.
    """
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu)] + list(argv)
    # Its own process group, so that killing it also kills anything it started (which would
    # otherwise hold the output pipe open).
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = popen.communicate(timeout=timeout)
        return popen.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        _kill_group(popen.pid)
        out, _ = popen.communicate()
        return None, out.decode("utf-8", "replace") + "\n(killed after %.0fs)" % timeout
    except BaseException:
        _kill_group(popen.pid)
        popen.wait()
        raise


def run_bounded_all(argvs, timeout, cpu=None):
    """Run several load generators at once, each with the hard time bound; return, per argv,
    (rc, output, start) where `start` is when it was started, in seconds after the first.
    Outputs go to temporary files (many pipes read one after another could fill and stall).
    On timeout the late ones are killed by PID; on Ctrl-C all of them."""
    procs = []
    t0 = time.monotonic()
    try:
        for argv in argvs:
            if cpu is not None:
                argv = ["taskset", "-c", str(cpu)] + list(argv)
            out = tempfile.TemporaryFile()
            procs.append(
                (
                    subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    ),
                    out,
                    time.monotonic() - t0,
                )
            )
        results = []
        for popen, out, start in procs:
            left = max(0.1, timeout - (time.monotonic() - t0))
            try:
                rc = popen.wait(timeout=left)
                note = ""
            except subprocess.TimeoutExpired:
                _kill_group(popen.pid)
                popen.wait()
                rc, note = None, "\n(killed after %.0fs)" % timeout
            out.seek(0)
            results.append((rc, out.read().decode("utf-8", "replace") + note, start))
        return results
    except BaseException:
        for popen, _, _ in procs:
            if popen.poll() is None:
                _kill_group(popen.pid)
                popen.wait()
        raise
    finally:
        for _, out, _ in procs:
            out.close()


def free_port():
    """A port that was free on 127.0.0.1 a moment ago (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(root):
    """`root` and every live process below it, from /proc/*/stat parent links."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read_stat(int(entry))
            if stat:
                children.setdefault(int(stat[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in found or not _exists(pid):
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _read_stat(pid):
    """Fields of /proc/PID/stat after the command name: [state, ppid, ...], or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return data[data.rfind(")") + 2 :].split()


def _proc_cpu(pid):
    stat = _read_stat(pid)
    if not stat:
        return 0.0
    # Fields 14-17 of stat (utime, stime, cutime, cstime) are at 11-14 after the name.
    return sum(int(x) for x in stat[11:15]) / CLK_TCK


def _proc_rss_kb(pid):
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def _exists(pid):
    stat = _read_stat(pid)
    return bool(stat) and stat[0] != "Z"


def _start_time(pid):
    stat = _read_stat(pid)
    # Field 22 (starttime) is at 19 after the name.
    return stat[19] if stat and len(stat) > 19 else None


def _kill_group(pgid):
    """SIGKILL the process group led by `pgid` (a child started with start_new_session)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
