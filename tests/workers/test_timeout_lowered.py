"""A type's timeout lowered while hosts run its jobs: every host renews its
leases at the new interval at once (it watches the timeout), so a healthy
long run is never taken for a silent one (``WorkerLost``)."""

from __future__ import annotations

import pytest

from actors import jobs
from tests.workers.hosts import run_ledger, wait_for

pytestmark = pytest.mark.slow


def test_a_lowered_timeout_never_blames_a_healthy_run(hosts, db, workdir):
    """Found by a review (session 31, 5 of 5): the renewal interval was
    computed once, at the host's start (timeout 8 s: every 2 s); another
    host checking with the new timeout (1 s) re-enqueued the running job,
    its attempt counted as ``WorkerLost``, and it ran twice at once."""
    jobs.set_type_timeout(db, "long", 8)
    log_path = workdir / "runs.jsonl"
    hosts(["long=handlers_mod:sleepy"], name="a", concurrency=1, run_log=log_path)
    ledger = run_ledger(log_path)
    job_id = jobs.enqueue(db, "long", {"s": 6.0}, id="long1", max_attempts=1)
    wait_for(lambda: ledger("start", job_id), 30, "the long run to start")
    jobs.set_type_timeout(db, "long", 1)
    hosts(["long=handlers_mod:sleepy"], name="b", concurrency=1, run_log=log_path)  # checks every second
    assert jobs.result(db, "long", job_id, timeout=30) == "slept"
    assert len(ledger("start", job_id)) == 1, "run once"
