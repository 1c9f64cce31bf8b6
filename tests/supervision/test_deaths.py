"""DeathWatch: the kernel's word on which watched processes have exited."""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys

import pytest

from supervision.deaths import DeathWatch
from supervision.procs import start_time


@pytest.fixture
def watch():
    w = DeathWatch()
    yield w
    w.close()


@pytest.fixture
def sleeper():
    """Start ``sleep 30`` processes; each is killed and reaped after the test."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        started.append(subprocess.Popen(["sleep", "30"]))
        return started[-1]

    yield start
    for p in started:
        p.kill()
        p.wait()


def _exited(watch: DeathWatch) -> list:
    """What ``gone`` names once the watch's descriptor turns readable (5 s at most)."""
    assert select.select([watch], [], [], 5)[0] == [watch], "the descriptor turned readable"
    return watch.gone()


def test_the_descriptor_turns_readable_when_a_watched_process_exits_and_names_it(watch, sleeper):
    a, b = sleeper(), sleeper()
    watch.watch(a.pid, start_time(a.pid), "a")
    watch.watch(b.pid, start_time(b.pid), "b")
    assert select.select([watch], [], [], 0)[0] == [] and watch.gone() == []
    a.kill()
    assert _exited(watch) == ["a"] and len(watch) == 1, "named once, then forgotten"
    assert watch.gone() == []


def test_a_process_already_gone_or_replaced_is_not_watched(watch, sleeper):
    p = sleeper()
    start = start_time(p.pid)
    p.kill()
    p.wait()
    assert watch.watch(p.pid, start, "p") is None
    assert watch.watch(os.getpid(), (start_time(os.getpid()) or 0) + 1, "me") is None, "another start time"


def test_a_forgotten_process_is_never_named(watch, sleeper):
    p = sleeper()
    token = watch.watch(p.pid, start_time(p.pid), "p")
    watch.forget(token, "p")
    watch.forget(token, "p")  # idempotent
    p.kill()
    p.wait()
    assert watch.gone() == [] and len(watch) == 0


def test_a_stale_token_never_closes_the_watch_that_took_its_number(watch, sleeper):
    """gone() closes a dead process's pidfd; the next watch may get the same
    descriptor number, and a late forget of the dead one must leave it be."""
    a, b = sleeper(), sleeper()
    token_a = watch.watch(a.pid, start_time(a.pid), "a")
    a.kill()
    a.wait()
    assert _exited(watch) == ["a"]
    token_b = watch.watch(b.pid, start_time(b.pid), "b")
    assert token_b == token_a, "the kernel reuses the lowest free number"
    watch.forget(token_a, "a")  # the dead child's exit handled late
    assert len(watch) == 1 and _is_open(token_b)
    b.kill()
    assert _exited(watch) == ["b"]


def test_a_process_whose_start_is_unknown_is_watched_all_the_same(watch, sleeper):
    p = sleeper()
    assert watch.watch(p.pid, None, "p") is not None
    p.kill()
    assert _exited(watch) == ["p"]


def test_a_process_that_cannot_be_watched_is_an_error_not_a_death():
    """No descriptor left (or no pidfds at all): watch raises, so the caller
    does not take a live child for a dead one."""
    code = """
import os, resource, subprocess
from supervision.deaths import DeathWatch
from supervision.procs import start_time
watch = DeathWatch()
p = subprocess.Popen(["sleep", "30"])
start = start_time(p.pid)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) - 1, hard))
try:
    watch.watch(p.pid, start, "p")
    print("watched")
except OSError as exc:
    print("raised", exc.errno)
finally:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    p.kill()
    p.wait()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == f"raised {errno.EMFILE}", out.stderr


def test_a_forked_child_holds_none_of_the_watch_descriptors(watch, sleeper):
    p = sleeper()
    held = [watch.watch(p.pid, start_time(p.pid), "p"), watch.fileno()]
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked child
        open_now = [fd for fd in held if _is_open(fd)]
        os.write(w, repr(open_now).encode())
        os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 100) == b"[]"
        assert os.waitpid(child, 0)[1] == 0
        assert all(_is_open(fd) for fd in held), "the parent keeps its own"
    finally:
        os.close(r)
        p.send_signal(signal.SIGKILL)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


_MANY_DESCRIPTORS = r"""
import os, resource, select, subprocess, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
from supervision.procs import readable
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
pidfd = os.pidfd_open(child.pid)
assert pidfd >= 1024, pidfd
try:
    select.select([pidfd], [], [], 0)
    print("select took it")
except ValueError:
    print("select refused it")
print("before exit", readable([pidfd], 0))
print("after exit", readable([pidfd], 10) == [pidfd])
child.wait()
"""


def test_readable_takes_descriptors_past_1024():
    """``select`` refuses a descriptor numbered 1,024 or more; the waits on
    pidfds (a node's owner, a stop's census) must work in a process that
    holds more (a caller's sockets)."""
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1200:
        pytest.skip("the hard limit on open files is under 1,200: no descriptor past 1,024 can be opened")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", _MANY_DESCRIPTORS],
        env=dict(os.environ, PYTHONPATH=root),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:3] == ["select refused it", "before exit []", "after exit True"]
