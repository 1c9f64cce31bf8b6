"""A host frozen (SIGSTOP) for longer than its type's timeout, then thawed:
another host re-ran its jobs meanwhile, so it must start none of the runs
its workers still queued (their leases may have expired): those go back,
and nothing another host finished is run again."""

from __future__ import annotations

import os
import signal
import time

import pytest

from actors import jobs
from tests.workers.hosts import wait_for
from tests.workers.test_workers_trust import enqueue_many, ledger, read_all, trust_dir  # noqa: F401

pytestmark = pytest.mark.slow

N = 300
TIMEOUT = 2.0


def _signal_host(host, sig: int) -> None:  # noqa: ANN001
    os.killpg(host.node_pgid, sig)
    os.killpg(host.proc.pid, sig)


def test_a_thawed_host_starts_no_run_another_host_finished(hosts, db, trust_dir):  # noqa: F811
    """Found by a review (session 31, 2 of 2 on SQLite and on PostgreSQL):
    0-4 ms after SIGCONT the frozen host's workers started the runs they
    had queued, for jobs the other host had finished seconds before."""
    jobs.set_type_timeout(db, "t", TIMEOUT)
    run_log = trust_dir / "runs.jsonl"
    a = hosts(["t=trust_mod:run"], name="a", concurrency=2, run_log=run_log)
    hosts(["t=trust_mod:run"], name="b", concurrency=2, run_log=run_log)
    ids = [f"j{n:03d}" for n in range(N)]
    enqueue_many(db, "t", [(i, {"s": 0.03}) for i in ids])
    a_workers = set(a.worker_pids())
    wait_for(lambda: sum(e["pid"] in a_workers for e in ledger(run_log)) >= 10, 30, "host a to run jobs")
    _signal_host(a, signal.SIGSTOP)
    time.sleep(3 * TIMEOUT)
    thawed = time.time()
    _signal_host(a, signal.SIGCONT)
    deadline = time.time() + 60
    while time.time() < deadline and not all(s == "finished" for s, _ in read_all(db, "t", ids).values()):
        time.sleep(0.2)
    entries = ledger(run_log)
    ended_at: dict = {}
    for e in entries:
        if e["event"] == "end" and e.get("ok"):
            ended_at.setdefault(e["id"], e["t"])
    late = [
        (e["id"], round(e["t"] - thawed, 3))
        for e in entries
        if e["event"] == "start" and e["pid"] in a_workers and e["t"] >= thawed and e["t"] > ended_at.get(e["id"], 1e20)
    ]
    assert not late, f"started by the thawed host after another host had finished them (id, s after SIGCONT): {late}"
    assert all(s == "finished" for s, _ in read_all(db, "t", ids).values())
