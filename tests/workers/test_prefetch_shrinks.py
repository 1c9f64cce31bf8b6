"""A host whose handlers turn out slower than it measured holds no more
claimed jobs than its workers will want soon (``Dispatcher._trim_buffer``):
a more urgent job added meanwhile runs next, not after the whole backlog."""

from __future__ import annotations

import pytest

from actors import jobs
from tests.workers.hosts import run_ledger, wait_for

pytestmark = pytest.mark.slow


def test_a_priority_0_job_does_not_wait_behind_the_backlog_a_host_claimed(hosts, db, workdir):
    """Found by a review (session 31, 3 of 3): after quick jobs the host's
    prefetch was 128; it claimed 18 of 20 priority-9 jobs of 0.3 s at once,
    and a priority-0 job added next started after all 20 (5.5 s later)."""
    jobs.set_type_timeout(db, "p", 30)
    log_path = workdir / "runs.jsonl"
    host = hosts(["p=handlers_mod:sleepy"], concurrency=1, run_log=log_path)
    ledger = run_ledger(log_path)
    for n in range(5):  # quick runs: the measured run time is about nothing
        jobs.result(db, "p", jobs.enqueue(db, "p", {"s": 0.0}, id=f"quick{n}"), timeout=30)
    slow = [jobs.enqueue(db, "p", {"s": 0.3}, id=f"slow{n:02d}", priority=9) for n in range(20)]
    wait_for(lambda: any(e["id"].startswith("slow") for e in ledger("start")), 30, "the backlog to start")
    urgent = jobs.enqueue(db, "p", {"s": 0.0}, id="urgent", priority=0)
    jobs.result(db, "p", urgent, timeout=30)
    [started] = ledger("start", urgent)
    before = [e["id"] for e in ledger("start") if e["id"].startswith("slow") and e["t"] < started["t"]]
    assert len(before) <= 5, f"the urgent job started after {len(before)} of the 20 slow ones"
    assert "reason=prefetch_shrank" in host.log()
    for job_id in slow:
        assert jobs.result(db, "p", job_id, timeout=30) == "slept"
