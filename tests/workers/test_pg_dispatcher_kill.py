"""The dispatcher SIGKILLed during a drain (its supervisor
restarts it) on a PostgreSQL store: jobs come back, not blamed beyond what
README documents, none left held by the stopped host."""

from __future__ import annotations

import os
import signal
import time

import pytest

from actors import jobs
from fdblayer.jobs.job import JobState
from tests.workers.hosts import wait_for
from tests.workers.pg_faults import own_pg, pdb, pg_store, runlog  # noqa: F401
from tests.workers.test_workers_trust import dispatcher_pid

pytestmark = pytest.mark.slow


def test_dispatcher_killed_during_drain_leaves_nothing_held_and_blames_nothing_new(
    own_pg,  # noqa: F811 - the fixtures imported above
    pg_store,  # noqa: F811
    pdb,  # noqa: F811
    runlog,  # noqa: F811
    hosts,
):
    # leases far longer than the test looks. The long runs' WorkerLost (the
    # successor's pool clear killed them; their attempt counts) is what README
    # documents for a killed dispatcher: not checked.
    jobs.set_type_timeout(pdb, "q", 20)
    host = hosts(["q=p2_mod:stubborn"], store=pg_store, concurrency=2, run_log=runlog.path, extra=["--grace", "6"])
    long_ids = [jobs.enqueue(pdb, "q", {"s": 3, "n": n}, id=f"long{n}") for n in range(2)]
    wait_for(lambda: len(runlog("start")) == 2, 20, "both long runs to start")
    queued = [jobs.enqueue(pdb, "q", {"s": 8, "n": n}, id=f"short{n:02d}") for n in range(6)]
    dpid = dispatcher_pid(host, pdb)
    host.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "workers_draining" in host.log(), 10, "the drain")
    os.kill(dpid, signal.SIGKILL)
    rc = host.proc.wait(40)
    stopped_at = time.time()
    time.sleep(1.0)
    seen = {i: jobs.status(pdb, "q", i) for i in long_ids + queued}
    held = {
        i: (st.state.name, st.attempt) for i, st in seen.items() if st.state in (JobState.RUNNING, JobState.CLAIMED)
    }
    blamed = {
        i: (st.state.name, st.attempt, [e.get("type") for e in st.errors])
        for i, st in seen.items()
        if i in queued and (st.errors or (st.state is not JobState.FINISHED and st.attempt))
    }
    short_started = sorted({r["id"] for r in runlog("start") if r["id"].startswith("short")})
    assert not held and not blamed, (
        f"command rc={rc}; {time.time() - stopped_at:.1f}s after the command exited, held by the stopped host "
        f"(state, attempt): {held}; jobs queued before the stop, blamed (state, attempt, errors): {blamed}; "
        f"short jobs started after the stop signal: {short_started}\n"
        + "\n".join(line for line in host.log().splitlines() if "otpjobs.workers" in line)[-4000:]
    )
