"""A handler that crashes the interpreter in native code (a segfault): its
worker process dies, as with SIGKILL, instead of spinning on the signal."""

from __future__ import annotations

import textwrap

import pytest

from actors import jobs
from tests.workers.hosts import wait_for

pytestmark = pytest.mark.slow

FAULTS = """
import ctypes

def segv(ctx):
    ctypes.string_at(0)  # reads address 0: SIGSEGV

def fine(ctx):
    return ctx.data
"""


def test_a_segfaulting_handler_kills_its_worker_and_fails_after_its_attempts(hosts, db, workdir):
    """Found by a review (4 of 4): Thespian sets a Python handler for every
    signal in an actor's process, so the segfault's signal came back for
    ever: the job stayed running with no error, its worker spun on a CPU,
    and a stop put it back uncounted to do the same on the next host."""
    (workdir / "faults_mod.py").write_text(textwrap.dedent(FAULTS))
    jobs.set_type_timeout(db, "bad", 30)
    jobs.set_type_timeout(db, "good", 30)
    host = hosts(["bad=faults_mod:segv", "good=faults_mod:fine"], concurrency=2, extra=["--max-attempts", "2"])
    bad = jobs.enqueue(db, "bad", {})
    good = [jobs.enqueue(db, "good", {"n": n}) for n in range(10)]
    status = wait_for(lambda: (s := jobs.status(db, "bad", bad)).state.value == "finished" and s, 60, "the bad job")
    assert status.outcome == "failed" and status.attempt == 2, status
    assert [e["type"] for e in status.errors] == ["WorkerDied", "WorkerDied"], status.errors
    for e in status.errors:  # a README review: a SIGKILLed worker's job said "exited: 'exited'"
        assert "ended before the job did (killed, crashed or exited" in e["message"], e["message"]
    for n, job_id in enumerate(good):
        assert jobs.result(db, "good", job_id, timeout=30) == {"n": n}
    assert "Fatal Python error: Segmentation fault" in host.log(), "the fault's traceback reached the log"
    assert "faults_mod.py" in host.log()
    assert jobs.result(db, "good", jobs.enqueue(db, "good", {"n": 99}), timeout=30) == {"n": 99}, "the host goes on"
