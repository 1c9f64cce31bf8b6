"""Leases, resubmits and stalls of worker hosts, with real hosts and real
signals: a stopped dispatcher or worker, a held store lock, a job
resubmitted while it runs, retries across a host restart, and the error a
job failed by its dead host's lost attempt reports."""

from __future__ import annotations

import os
import signal
import time

import pytest

from actors import jobs
from fdblayer.jobs.job import JobState
from tests.workers.hosts import wait_for
from tests.workers.test_stops_and_kills import ledger  # noqa: F401 - the fixture
from tests.workers.test_workers_trust import dispatcher_pid, kill_host


def _outcome(db, job_type, job_id, timeout):  # noqa: ANN001
    try:
        return jobs.result(db, job_type, job_id, timeout=timeout)
    except jobs.JobFailed as exc:
        st = jobs.status(db, job_type, job_id)
        return f"failed after {st.attempt}: {[e.get('type') for e in st.errors]} {exc}"


# ------------------------------------------------------------------ resubmitted while running, then its host dies
@pytest.mark.slow
def test_job_resubmitted_while_running_survives_its_hosts_death(hosts, db, ledger):  # noqa: F811
    jobs.set_type_timeout(db, "t", 2)
    a = hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="a")
    job_id = jobs.enqueue(db, "t", {"s": 60}, max_attempts=1)
    wait_for(lambda: ledger("start", job_id), 20, "the first submission to start")
    assert jobs.enqueue(db, "t", {"s": 60}, id=job_id, max_attempts=1) == job_id  # resubmitted while it runs
    kill_host(a)
    a.close()
    hosts(["t=stops_mod:quick"], concurrency=1, run_log=ledger.path, name="b")
    got = _outcome(db, "t", job_id, 20)
    assert got == "ok", f"the resubmission never ran: {got}"


@pytest.mark.slow
def test_job_resubmitted_while_running_then_drained_starts_afresh(hosts, db, ledger):  # noqa: F811
    a = hosts(["t=stops_mod:stubborn"], concurrency=1, run_log=ledger.path, extra=["--grace", "1"], name="a")
    job_id = jobs.enqueue(db, "t", {"s": 25}, max_attempts=2)
    wait_for(lambda: ledger("start", job_id), 20, "the first submission to start")
    jobs.enqueue(db, "t", {"s": 25}, id=job_id)  # resubmitted while it runs
    assert a.terminate() == 0
    st = jobs.status(db, "t", job_id)
    assert (st.state, st.attempt) == (JobState.PENDING, 0), st


# ------------------------------------------------------------------ the dispatcher stopped past the type timeout
@pytest.mark.slow
def test_sigstopped_dispatcher_its_job_reruns_elsewhere_once_and_late_outcome_discarded(hosts, db, ledger):  # noqa: F811
    jobs.set_type_timeout(db, "t", 2)
    a = hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="a")
    job_id = jobs.enqueue(db, "t", {"s": 4}, max_attempts=3)
    wait_for(lambda: ledger("start", job_id), 20, "the job to start on a")
    pid = dispatcher_pid(a, db)
    wait_for(lambda: jobs.status(db, "t", job_id).started is not None, 5, "the start written")
    os.kill(pid, signal.SIGSTOP)
    try:
        b = hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="b")
        wait_for(lambda: len(ledger("start", job_id)) >= 2, 20, "the job to run again on b")
        time.sleep(4.5)  # a's handler ends meanwhile (its END waits in the pipe)
    finally:
        os.kill(pid, signal.SIGCONT)
    got = _outcome(db, "t", job_id, 20)
    time.sleep(1.0)
    st = jobs.status(db, "t", job_id)
    starts = ledger("start", job_id)
    assert got == "slept" and st.attempt == 2 and len(starts) == 2, (got, st.attempt, starts, st.errors)
    assert "job_outcome_discarded" in a.log() or "job_lost" in a.log(), a.log()[-2000:]
    b.close()


# ------------------------------------------------------------------ a store hiccup longer than the type timeout
@pytest.mark.slow
@pytest.mark.parametrize("n_hosts", [1, 2])
def test_store_write_stall_past_type_timeout_does_not_blame_the_job(hosts, db, ledger, workdir, n_hosts):  # noqa: F811
    import sqlite3

    jobs.set_type_timeout(db, "t", 2)
    hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="a")
    if n_hosts == 2:
        hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="b")
    job_id = jobs.enqueue(db, "t", {"s": 9}, max_attempts=3)
    wait_for(lambda: jobs.status(db, "t", job_id).started is not None, 20, "the job to start")
    conn = sqlite3.connect(str(workdir / "store.db"), isolation_level=None, timeout=0)
    conn.execute("BEGIN IMMEDIATE")  # e.g. a backup or a sqlite3 shell holding the write lock
    time.sleep(5)
    conn.execute("ROLLBACK")
    conn.close()
    got = _outcome(db, "t", job_id, 20)
    st = jobs.status(db, "t", job_id)
    starts = ledger("start", job_id)
    assert (got, st.attempt, len(starts)) == ("slept", 1, 1), (got, st.attempt, len(starts), st.errors)


# ------------------------------------------------------------------ attempts used up by a dead host: the error told
@pytest.mark.slow
def test_job_failed_by_a_dead_hosts_lost_attempt_says_why(hosts, db, ledger):  # noqa: F811
    jobs.set_type_timeout(db, "t", 2)
    a = hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="a")
    job_id = jobs.enqueue(db, "t", {"s": 60}, max_attempts=1)
    wait_for(lambda: jobs.status(db, "t", job_id).started is not None, 20, "the start written")
    kill_host(a)
    a.close()
    hosts(["t=stops_mod:quick"], concurrency=1, run_log=ledger.path, name="b")
    with pytest.raises(jobs.JobFailed) as info:
        jobs.result(db, "t", job_id, timeout=20)
    st = jobs.status(db, "t", job_id)
    assert [e["type"] for e in st.errors] == ["WorkerLost"]
    assert info.value.error_type == "WorkerLost" and st.error is not None, (
        f"failed for good with no error: result says {str(info.value)!r}, status.error={st.error}"
    )


# ------------------------------------------------------------------ a worker process stopped past the type timeout
@pytest.mark.slow
def test_sigstopped_worker_keeps_its_job_and_finishes_it_once(hosts, db, ledger):  # noqa: F811
    jobs.set_type_timeout(db, "t", 2)
    hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="a")
    job_id = jobs.enqueue(db, "t", {"s": 3}, max_attempts=3)
    wait_for(lambda: jobs.status(db, "t", job_id).started is not None, 20, "the start written")
    pid = ledger("start", job_id)[0]["pid"]
    hosts(["t=stops_mod:polite"], concurrency=1, run_log=ledger.path, name="b")
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(5)
    finally:
        os.kill(pid, signal.SIGCONT)
    got = _outcome(db, "t", job_id, 20)
    st = jobs.status(db, "t", job_id)
    assert (got, st.attempt, len(ledger("start", job_id))) == ("slept", 1, 1), (got, st.attempt, st.errors)
