"""Several processes on one store: no job lost, none accepted twice, watches wake.

Workers are separate Python processes (``subprocess``, never a fork of the
test process) that open the store by URL. They report to the test on their
stdout, one line per event, and the test waits on those pipes with a
deadline; nothing sleeps. Every process is killed in ``finally`` if it is
still alive.
"""

from __future__ import annotations

import collections
import os
import selectors
import subprocess
import sys
import time
from typing import Iterator

import pytest

from fdblayer.jobs import api
from fdblayer.jobs.job import JobState

T = "mp"
JOBS = 2000
WORKERS = 4
DEADLINE = 120.0

_PREAMBLE = """
import sys, time
import fdblayer
from fdblayer.jobs import api
url, job_type = sys.argv[1], sys.argv[2]
db = fdblayer.open(url)
"""

# Accepts and finishes jobs, one line per finished job, until it accepts a
# "stop-" job (the test adds one per worker once every job is reported).
WORKER = (
    _PREAMBLE
    + """
name = sys.argv[3]
while True:
    job, data = api.accept(db, job_type, timeout=60)
    api.finish(db, job, {"by": name})
    print(job.id, flush=True)
    if job.id.startswith("stop-"):
        break
db.close()
"""
)

ADDER = (
    _PREAMBLE
    + """
count = int(sys.argv[3])
for i in range(count):
    api.add(db, job_type, "job-%05d" % i, {"i": i})
print("added", flush=True)
db.close()
"""
)

# Blocks in accept; the clock hook says when the empty dequeue has committed
# (its watch is armed) and the call is about to wait on it.
BLOCKED_ACCEPT = (
    _PREAMBLE
    + """
from fdblayer.jobs.api import accept_job
calls = 0
def monotonic():
    global calls
    calls += 1
    if calls == 2:
        print("waiting", flush=True)
    return time.monotonic()
job, data = accept_job(db, job_type, timeout=60, monotonic=monotonic)
print(job.id, data["n"], flush=True)
api.finish(db, job)
db.close()
"""
)


class Procs:
    """Child processes whose stdout lines are read with a deadline."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.selector = selectors.DefaultSelector()
        self.partial: dict[str, bytes] = collections.defaultdict(bytes)

    def start(self, name: str, script: str, *args: str) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self.procs[name] = proc
        self.selector.register(proc.stdout, selectors.EVENT_READ, name)

    def lines(self, deadline: float) -> Iterator[tuple[str, str]]:
        """Yield ``(process name, line)`` until every stdout closes or the deadline."""
        while self.selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"deadline passed; alive: {self.alive()}")
            for key, _ in self.selector.select(remaining):
                name = key.data
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    self.selector.unregister(key.fileobj)
                    continue
                data = self.partial[name] + chunk
                *complete, self.partial[name] = data.split(b"\n")
                for line in complete:
                    yield name, line.decode()

    def alive(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is None]

    def wait(self, name: str, deadline: float) -> None:
        """Wait for a process to exit; fail with its stderr unless it exits 0."""
        proc = self.procs[name]
        code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        if code != 0:
            raise AssertionError(f"{name} exited {code}: {proc.stderr.read().decode()}")

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        self.selector.close()


@pytest.fixture
def procs() -> Iterator[Procs]:
    group = Procs()
    try:
        yield group
    finally:
        group.kill_all()


@pytest.mark.slow
def test_many_workers_accept_each_job_exactly_once(db, store_url, procs):
    api.set_type_timeout(db, T, 60)
    deadline = time.monotonic() + DEADLINE
    for w in range(WORKERS):
        procs.start(f"w{w}", WORKER, store_url, T, f"w{w}")
    procs.start("adder", ADDER, store_url, T, str(JOBS))

    ledger: dict[str, list[str]] = collections.defaultdict(list)
    lines = procs.lines(deadline)
    reported = 0
    for name, line in lines:
        if name == "adder":
            assert line == "added"
            continue
        ledger[line].append(name)
        reported += 1
        if reported == JOBS:
            break
    procs.wait("adder", deadline)
    for w in range(WORKERS):
        api.add(db, T, f"stop-{w}", {})
    for name, line in lines:
        ledger[line].append(name)
    for w in range(WORKERS):
        procs.wait(f"w{w}", deadline)

    expected = {f"job-{i:05d}" for i in range(JOBS)} | {f"stop-{w}" for w in range(WORKERS)}
    assert set(ledger) == expected
    twice = {job_id: names for job_id, names in ledger.items() if len(names) != 1}
    assert twice == {}
    # Every job is finished, by the worker whose ledger names it.
    infos = api.get_jobs(db, T)
    assert len(infos) == JOBS + WORKERS
    for info in infos:
        assert info.state is JobState.FINISHED
        assert info.data == {"by": ledger[info.id][0]}
    split = collections.Counter(names[0] for names in ledger.values())
    print(f"\naccepted per worker: {dict(sorted(split.items()))}")


def test_blocked_accept_is_woken_by_add_from_another_process(db, store_url, procs):
    api.set_type_timeout(db, T, 60)
    deadline = time.monotonic() + 60
    procs.start("acceptor", BLOCKED_ACCEPT, store_url, T)
    lines = procs.lines(deadline)
    assert next(lines) == ("acceptor", "waiting")
    assert procs.alive() == ["acceptor"]
    # A job of another type does not satisfy it.
    api.set_type_timeout(db, "other", 60)
    api.add(db, "other", "x", {"n": 0})
    added = time.monotonic()
    api.add(db, T, "wake", {"n": 7})
    assert next(lines) == ("acceptor", "wake 7")
    woke = time.monotonic() - added
    procs.wait("acceptor", deadline)
    assert api.get_job_state(db, T, "wake") is JobState.FINISHED
    assert api.get_job_state(db, "other", "x") is JobState.PENDING
    print(f"\nwoken {woke * 1000:.1f} ms after the add began")
