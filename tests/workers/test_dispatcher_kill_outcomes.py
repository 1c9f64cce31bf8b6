"""A dispatcher SIGKILLed in a drain of short jobs: a handler that had
returned before the kill keeps its outcome (the successor reads what the
dead dispatcher had not written yet), so its job is neither failed as
``WorkerLost`` nor run again."""

from __future__ import annotations

import os
import signal
import time

import pytest

from actors import jobs
from tests.workers.hosts import wait_for
from tests.workers.test_workers_trust import (
    dispatcher_pid,
    enqueue_many,
    ledger,
    read_all,
    starts_by_id,
    trust_dir,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.slow

N = 600
KILLS = 3


def _dispatcher(host, db) -> int | None:  # noqa: ANN001
    """The host's dispatcher's pid, or None while there is not one."""
    try:
        return dispatcher_pid(host, db)
    except AssertionError:
        return None


def test_outcomes_a_killed_dispatcher_had_not_written_are_kept(hosts, db, trust_dir):  # noqa: F811
    """Before (session 30's review, reproduced in 31): 4 of 600 jobs whose
    handler had succeeded were failed as ``WorkerLost`` (max_attempts=1)."""
    jobs.set_type_timeout(db, "t", 30)
    run_log = trust_dir / "runs.jsonl"
    host = hosts(["t=trust_mod:run"], concurrency=4, run_log=run_log, extra=["--max-attempts", "1"])
    ids = [f"j{n:04d}" for n in range(N)]
    enqueue_many(db, "t", [(i, {"s": 0.004}) for i in ids])
    for kill in range(KILLS):
        wait_for(lambda k=kill: len(ledger(run_log)) >= (kill + 1) * N // (KILLS + 1), 60, "runs before the kill")
        pid = wait_for(lambda: _dispatcher(host, db), 30, "the dispatcher")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda p=pid: _dispatcher(host, db) not in (None, p), 30, "the dispatcher's successor")
    deadline = time.time() + 60
    while time.time() < deadline:
        seen = read_all(db, "t", ids)
        if all(state == "finished" for state, _ in seen.values()):
            break
        time.sleep(0.2)
    entries = ledger(run_log)
    ended = {e["id"] for e in entries if e["event"] == "end"}
    starts = starts_by_id(entries)
    assert all(state == "finished" for state, _ in seen.values()), "every job finished"
    assert host.log().count("jobs_recovered") == KILLS, "each kill found jobs held: the test tested something"
    blamed = {i: r.outcome for i, (_, r) in seen.items() if i in ended and r.outcome != "succeeded"}
    twice = {i: len(s) for i, s in starts.items() if len(s) > 1}
    assert not blamed and not twice, (
        f"handlers that returned, then failed as lost: {blamed}; run twice: {twice}\n"
        + "\n".join(line for line in host.log().splitlines() if "recovered" in line or "journal" in line)
    )
