"""The PostgreSQL server restarted (fast stop + start, or
its backends terminated) while a host with several workers claims and finishes
many short jobs: each job runs to success once, none left held, attempts right."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from actors import jobs
from fdblayer.jobs.job import JobState
import psycopg

from tests.procs import group_pids
from tests.workers.pg_faults import own_pg, pdb, per_id, pg_store, runlog, terminate_backends  # noqa: F401

pytestmark = pytest.mark.slow

N = 300


def _summary(pdb, ids, runlog):  # noqa: ANN001, F811 - the fixtures' values, passed on
    ends = per_id(runlog("end"))
    starts = per_id(runlog("start"))
    bad = {}
    for i in ids:
        st = jobs.status(pdb, "q", i)
        if st.state is not JobState.FINISHED or st.outcome != "succeeded" or st.attempt != 1 or ends[i] != 1:
            bad[i] = (st.state.name, st.outcome, st.attempt, [e.get("type") for e in st.errors], starts[i], ends[i])
    return bad


def _wait_all(pdb, ids, timeout):  # noqa: ANN001, F811 - the fixture's value, passed on
    deadline = time.time() + timeout
    left = list(ids)
    while left and time.time() < deadline:
        left = [i for i in left if jobs.status(pdb, "q", i).state is not JobState.FINISHED]
        if left:
            time.sleep(0.5)
    return left


@pytest.mark.parametrize("fault", ["fast_restart", "terminate_backends"])
def test_jobs_finish_once_across_server_faults(fault, own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    jobs.set_type_timeout(pdb, "q", 6)
    host = hosts(["q=p2_mod:nap"], store=pg_store, concurrency=3, run_log=runlog.path, extra=["--max-attempts", "5"])
    ids = [f"j{n:04d}" for n in range(N)]
    for n, i in enumerate(ids):
        jobs.enqueue(pdb, "q", {"s": 0.01, "n": n}, id=i)
    faults = 0
    deadline = time.time() + 20
    while time.time() < deadline and faults < 4:
        if len(runlog("end")) >= 40 * (faults + 1):
            if fault == "fast_restart":
                own_pg.kill("fast")
                time.sleep(0.5)
                own_pg.launch()
            else:
                terminate_backends(own_pg)
            faults += 1
        time.sleep(0.01)
    assert faults >= 2, f"only {faults} faults injected"
    left = _wait_all(pdb, ids, 40)
    bad = _summary(pdb, ids, runlog)
    held = [i for i in ids if jobs.status(pdb, "q", i).state in (JobState.RUNNING,)]
    assert not left and not bad, (
        f"{fault} x{faults}: {len(left)} not finished ({left[:5]}), held {held[:5]}; "
        f"wrong (state, outcome, attempt, errors, starts, ends): {dict(list(bad.items())[:8])}\n"
        + "\n".join(line for line in host.log().splitlines() if "job" in line and "released" not in line)[-3000:]
    )


@pytest.mark.parametrize("rounds", [6])
def test_jobs_finish_once_across_terminate_storms(rounds, own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    """Terminate every backend in a tight loop for 0.3 s, several times, while
    jobs flow: commits whose answers are lost among them."""
    jobs.set_type_timeout(pdb, "q", 30)
    host = hosts(["q=p2_mod:nap"], store=pg_store, concurrency=3, run_log=runlog.path, extra=["--max-attempts", "5"])
    ids = [f"j{n:04d}" for n in range(N * 2)]
    for n, i in enumerate(ids):
        jobs.enqueue(pdb, "q", {"s": 0.005, "n": n}, id=i)
    done = 0
    killed = 0
    deadline = time.time() + 20
    while time.time() < deadline and done < rounds:
        if len(runlog("end")) >= 60 * (done + 1):
            until = time.time() + 0.3
            while time.time() < until:
                killed += terminate_backends(own_pg)
                time.sleep(0.002)
            done += 1
        time.sleep(0.01)
    left = _wait_all(pdb, ids, 25)
    bad = _summary(pdb, ids, runlog)
    log = host.log()
    assert not left and not bad, (
        f"{done} storms, {killed} backends terminated: {len(left)} not finished "
        f"{[(i, jobs.status(pdb, 'q', i).state.name) for i in left[:5]]}; "
        f"wrong (state, outcome, attempt, errors, starts, ends): {dict(list(bad.items())[:8])}\n"
        f"step_failed={log.count('step_failed')} renew_failed={log.count('renew_failed')}"
    )


def test_handler_progress_across_a_7s_server_outage_is_not_blamed(own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    """README: a call fails with ServerGone, retryable, and ``transactional``
    tries a new connection until its deadline (60 s by default). A handler's
    ``ctx.progress`` during a 7 s restart should wait, not fail the attempt."""
    jobs.set_type_timeout(pdb, "q", 30)
    hosts(["q=p2_mod:progressing"], store=pg_store, concurrency=1, run_log=runlog.path)
    job_id = jobs.enqueue(pdb, "q", {"s": 4, "n": 7}, max_attempts=3)
    deadline = time.time() + 20
    while not runlog("start") and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    own_pg.kill("fast")
    time.sleep(7)
    own_pg.launch()
    assert jobs.result(pdb, "q", job_id, timeout=30) == 7
    st = jobs.status(pdb, "q", job_id)
    assert st.attempt == 1 and not st.errors, (st.attempt, [(e.get("type"), e.get("message")[:200]) for e in st.errors])


def test_a_job_added_as_the_hosts_backends_die_starts_promptly(own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    """The backends of an idle host (its store listener and watch reader
    among them) terminated, and a job added at once from another process,
    before the host's listener is back: the job still starts within
    seconds, far below the type timeout after which the host's lifeline
    would find it anyway. No wake-up is lost across a reconnection."""
    jobs.set_type_timeout(pdb, "q", 60)
    host = hosts(["q=p2_mod:nap"], store=pg_store, concurrency=2, run_log=runlog.path)
    assert host.node_pgid
    rng = random.Random(7)
    for n in range(12):
        time.sleep(0.3)  # idle again: its pending watch armed, its hub's reads done
        assert terminate_backends(own_pg, group_pids(host.node_pgid)) >= 2, "the listener and the reader at least"
        time.sleep(rng.choice([0, 0, 0.001, 0.005]))
        job_id = jobs.enqueue(pdb, "q", {"s": 0.001, "n": n})
        try:
            assert jobs.result(pdb, "q", job_id, timeout=6) == n
        except TimeoutError:
            pytest.fail(f"job {n} added after the termination never started:\n{host.log()[-4000:]}")


def _backends_of(server, pids) -> list:  # noqa: ANN001
    """The server's backend pids serving connections of processes ``pids``."""
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, application_name FROM pg_stat_activity WHERE backend_type = 'client backend'"
        ).fetchall()
    names = {f"otpjobs[{p}]" for p in pids}
    return [pid for pid, app in rows if app in names]


def test_jobs_finish_once_across_stopped_backends(own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    """The backends serving a host stop (SIGSTOP: a backend stuck on I/O or
    descheduled) for 2 s, three times, while jobs flow, one of them perhaps
    in the middle of a commit holding the store's order: each job still runs
    to success once, and once the backends go on, the rest are done."""
    jobs.set_type_timeout(pdb, "q", 10)
    host = hosts(["q=p2_mod:nap"], store=pg_store, concurrency=3, run_log=runlog.path, extra=["--max-attempts", "5"])
    ids = [f"j{n:04d}" for n in range(N)]
    for n, i in enumerate(ids):
        jobs.enqueue(pdb, "q", {"s": 0.01, "n": n}, id=i)
    stops = 0
    deadline = time.time() + 30
    while time.time() < deadline and stops < 3:
        if len(runlog("end")) >= 50 * (stops + 1):
            stopped = _backends_of(own_pg, group_pids(host.node_pgid))
            assert stopped, "the host has backends"
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(2)
            finally:
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            stops += 1
        time.sleep(0.01)
    assert stops == 3, f"only {stops} stops"
    left = _wait_all(pdb, ids, 40)
    bad = _summary(pdb, ids, runlog)
    assert not left and not bad, (
        f"{len(left)} not finished ({left[:5]}); wrong (state, outcome, attempt, errors, starts, ends): "
        f"{dict(list(bad.items())[:8])}\n{host.log()[-3000:]}"
    )
