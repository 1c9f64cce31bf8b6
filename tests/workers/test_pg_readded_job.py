"""A job removed and re-added under the same id while its
old handler still runs: never two handlers of that id at once on one host."""

from __future__ import annotations


import pytest

from actors import jobs
from tests.workers.hosts import wait_for
from tests.workers.pg_faults import own_pg, pdb, pg_store, runlog  # noqa: F401

pytestmark = pytest.mark.slow


def test_readded_job_never_runs_beside_its_removed_run(own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    jobs.set_type_timeout(pdb, "q", 20)
    hosts(["q=p2_mod:polite"], store=pg_store, concurrency=2, run_log=runlog.path)
    jobs.enqueue(pdb, "q", {"s": 30}, id="dup")
    wait_for(lambda: runlog("start", "dup"), 20, "the first run")
    jobs.remove(pdb, "q", "dup")
    jobs.enqueue(pdb, "q", {"s": 2}, id="dup")
    wait_for(lambda: len(runlog("start", "dup")) == 2, 20, "the second run")
    wait_for(lambda: len(runlog(None, "dup")) >= 4, 30, "both runs to end")
    first_start, second_start = runlog("start", "dup")[:2]
    first_end = [r for r in runlog(None, "dup") if r["event"] != "start" and r["pid"] == first_start["pid"]][0]
    overlap = first_end["t"] - second_start["t"]
    assert overlap <= 0, (
        f"the removed run (pid {first_start['pid']}) stopped {overlap:.2f}s after the re-added job's run "
        f"(pid {second_start['pid']}) started on the same host"
    )
