"""Retention: hosts (and a node's pool) remove finished and failed jobs past
``keep_finished`` / ``keep_failed``, never a pending or running one, every
counter exact; ``jobs.prune`` and ``otpjobs jobs prune`` do it at once.
Real hosts, real worker processes, small retention values."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from actors import jobs
from fdblayer.jobs import finished, overview
from fdblayer.jobs.job import JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from tests.workers.hosts import ROOT, wait_for

#: Real hosts and node pools waiting out retention periods: seconds each.
pytestmark = pytest.mark.slow


def _exact(db, job_type) -> dict:
    """The type's counters, checked against counting its rows."""
    tr = db.create_transaction()
    try:
        expected = overview.count_rows(tr, DEFAULT_LAYOUT, job_type)
    finally:
        tr.cancel()
    got = overview.type_counts(db, DEFAULT_LAYOUT, job_type, time.time())
    assert {k: got[k] for k in ("jobs", "pending", "failed")} == {
        k: expected[k] for k in ("jobs", "pending", "failed")
    }, job_type
    assert got["running"] + got["claimed"] == expected["running"]
    return got


def _exists(db, job_type, job_id) -> bool:
    try:
        jobs.status(db, job_type, job_id)
    except jobs.NotFound:
        return False
    return True


class Guard:
    """Reads the jobs that must stay (pending or running) all along, in a thread."""

    def __init__(self, db, keep: list) -> None:
        self.db, self.keep, self.missing, self.reads = db, keep, [], 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for job_type, job_id in self.keep:
                if not _exists(self.db, job_type, job_id):
                    self.missing.append((job_type, job_id))
            self.reads += 1
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert self.reads > 0 and self.missing == [], f"pending or running jobs went: {self.missing}"


def test_a_host_prunes_finished_and_failed_jobs_past_their_retention_and_nothing_else(hosts, db):
    hosts(
        ["sum=handlers_mod:add", "fail=handlers_mod:fail_until", "sleepy=handlers_mod:sleepy"],
        concurrency=3,
        extra=["--keep-finished", "1", "--keep-failed", "3", "--max-attempts", "1"],
    )
    later = jobs.enqueue(db, "sum", {"a": 1, "b": 1}, delay=600)  # pending all along
    running = jobs.enqueue(db, "sleepy", {"s": 60})  # running all along
    wait_for(lambda: jobs.status(db, "sleepy", running).state is JobState.RUNNING, 20, "the sleepy job to run")
    guard = Guard(db, [("sum", later), ("sleepy", running)])
    try:
        done = [jobs.enqueue(db, "sum", {"a": n, "b": 1}) for n in range(40)]
        failed = [jobs.enqueue(db, "fail", {}) for _ in range(5)]
        assert [jobs.result(db, "sum", i, timeout=30) for i in done] == [n + 1 for n in range(40)]
        ends = {}
        for job_id in failed:
            with pytest.raises(jobs.JobFailed):
                jobs.result(db, "fail", job_id, timeout=30)
            ends[job_id] = jobs.status(db, "fail", job_id).ended
        _exact(db, "sum")
        assert _exact(db, "fail")["failed"] == 5
        wait_for(lambda: not any(_exists(db, "sum", i) for i in done), 20, "the finished jobs to be pruned")
        _exact(db, "sum")

        def failed_pruned_in_time() -> bool:
            gone = [i for i in failed if not _exists(db, "fail", i)]
            assert all(time.time() - ends[i] >= 2.9 for i in gone), "a failed job went before keep_failed (3 s)"
            return len(gone) == len(failed)

        wait_for(failed_pruned_in_time, 20, "the failed jobs to be pruned")
    finally:
        guard.close()
    got = _exact(db, "sum")
    assert (got["jobs"], got["pending"], got["finished"], got["failed"]) == (1, 1, 0, 0)
    got = _exact(db, "fail")
    assert (got["jobs"], got["finished"], got["failed"]) == (0, 0, 0)
    assert jobs.status(db, "sleepy", running).state is JobState.RUNNING
    assert jobs.status(db, "sum", later).state is JobState.PENDING
    with pytest.raises(jobs.NotFound, match="may have been pruned"):
        jobs.result(db, "sum", done[0], timeout=1)
    with pytest.raises(jobs.NotFound, match="may have been pruned"):
        jobs.status(db, "fail", failed[0])
    tr = db.create_transaction()
    try:
        assert finished.due(tr, DEFAULT_LAYOUT, "sum", "succeeded", time.time() + 60, 10) == []
        assert not tr.get_range_startswith(DEFAULT_LAYOUT.failures_prefix("fail")), "recent failures pruned too"
    finally:
        tr.cancel()


def test_a_finished_job_run_again_is_not_pruned_while_pending(hosts, db):
    hosts(["sum=handlers_mod:add"], extra=["--keep-finished", "3"])
    job_id = jobs.enqueue(db, "sum", {"a": 1, "b": 2})
    assert jobs.result(db, "sum", job_id, timeout=20) == 3
    jobs.enqueue(db, "sum", {"a": 2, "b": 2}, id=job_id, delay=600)  # the same id, again, later
    other = jobs.enqueue(db, "sum", {"a": 0, "b": 0})
    assert jobs.result(db, "sum", other, timeout=20) == 0
    wait_for(lambda: not _exists(db, "sum", other), 20, "the other job to be pruned")
    assert jobs.status(db, "sum", job_id).state is JobState.PENDING
    assert _exact(db, "sum")["jobs"] == 1


def test_zero_keeps_for_ever_and_jobs_prune_removes_at_once(hosts, db, workdir, store_url):
    hosts(
        ["sum=handlers_mod:add", "fail=handlers_mod:fail_until"],
        extra=["--keep-finished", "0", "--keep-failed", "0", "--max-attempts", "1"],
    )
    done = [jobs.enqueue(db, "sum", {"a": n, "b": 0}) for n in range(5)]
    bad = jobs.enqueue(db, "fail", {})
    later = jobs.enqueue(db, "sum", {"a": 0, "b": 0}, delay=600)
    assert [jobs.result(db, "sum", i, timeout=20) for i in done] == list(range(5))
    with pytest.raises(jobs.JobFailed):
        jobs.result(db, "fail", bad, timeout=20)
    time.sleep(2.5)
    assert all(_exists(db, "sum", i) for i in done) and _exists(db, "fail", bad), "0: kept for ever"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "actors", "jobs", "prune", *args, "--store", store_url],
            cwd=workdir,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=60,
        )

    refused = cli("sum", "--older-than", "-1")
    assert refused.returncode == 2 and "older-than" in refused.stderr
    out = cli()  # the config's retention (defaults: a day, a week): nothing is that old
    assert out.returncode == 0 and json.loads(out.stdout) == {"pruned": 0, "type": None}
    out = cli("sum", "--older-than", "0")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"pruned": 5, "type": "sum"}
    assert not any(_exists(db, "sum", i) for i in done) and _exists(db, "sum", later)
    assert _exists(db, "fail", bad), "only the type asked for"
    assert jobs.prune(db, older_than=3600) == 0
    assert jobs.prune(db, older_than=0) == 1
    assert (_exact(db, "sum")["jobs"], _exact(db, "fail")["jobs"], _exact(db, "fail")["failed"]) == (1, 0, 0)


def test_a_nodes_pool_prunes_with_its_worker_settings(workdir, store_url, db):
    from supervision.system import stop_node
    from tests.procs import free_port

    port = free_port()
    (workdir / "node.ini").write_text(
        f"[node]\nstore = {store_url}\nport = {port}\nhttp_port = 0\n"
        "[workers]\nsum = handlers_mod:add\n"
        "[worker]\nconcurrency = 1\nkeep_finished = 1\n"
    )
    log = open(workdir / "node.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors", "node", "start", "--config", str(workdir / "node.ini")],
        cwd=workdir,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: jobs.get_type_timeout(db, "sum"), 30, "the node to declare the type")
        job_id = jobs.enqueue(db, "sum", {"a": 3, "b": 4})
        assert jobs.result(db, "sum", job_id, timeout=30) == 7
        wait_for(lambda: not _exists(db, "sum", job_id), 20, "the node's pool to prune the job")
        assert _exact(db, "sum")["jobs"] == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_node(port)
        log.close()
