"""A drain (SIGTERM to ``otpjobs worker``) while the
PostgreSQL server is down for a few seconds: nothing lost, nothing left held,
no attempt counted."""

from __future__ import annotations

import signal
import time

import pytest

from actors import jobs
from fdblayer.jobs.job import JobState
from tests.workers.hosts import wait_for
from tests.workers.pg_faults import own_pg, pdb, pg_store, runlog  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "run_s, grace, down, n_queued",
    [(2, 6, 4, 4), (30, 2, 7, 4), (2, 8, 8, 0)],
    ids=["runs_end_in_grace", "grace_over_while_down", "runs_end_while_down"],
)
def test_drain_while_server_down(run_s, grace, down, n_queued, own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    jobs.set_type_timeout(pdb, "q", 20)
    host = hosts(
        ["q=p2_mod:stubborn"], store=pg_store, concurrency=2, run_log=runlog.path, extra=["--grace", str(grace)]
    )
    running = [jobs.enqueue(pdb, "q", {"s": run_s, "n": n}, id=f"run{n}") for n in range(2)]
    wait_for(lambda: len(runlog("start")) == 2, 20, "both runs to start")
    queued = [jobs.enqueue(pdb, "q", {"s": 1, "n": n}, id=f"queued{n}") for n in range(n_queued)]
    time.sleep(0.5)  # claimed into the buffer / workers' queues
    own_pg.kill("fast")
    host.proc.send_signal(signal.SIGTERM)
    time.sleep(down)
    own_pg.launch()
    rc = host.proc.wait(40)
    time.sleep(0.5)
    starts = {}
    for r in runlog("start"):
        starts[r["id"]] = starts.get(r["id"], 0) + 1
    seen = {i: jobs.status(pdb, "q", i) for i in running + queued}
    wrong = {}
    for i, st in seen.items():
        if i in running and run_s < grace:
            ok = st.state is JobState.FINISHED and st.outcome == "succeeded" and st.attempt == 1 and not st.errors
        else:
            ok = st.state is JobState.PENDING and st.attempt == 0 and not st.errors
        if not ok:
            wrong[i] = (st.state.name, st.outcome, st.attempt, [e.get("type") for e in st.errors], starts.get(i, 0))
    assert rc == 0 and not wrong, (
        f"rc={rc}; (state, outcome, attempt, errors, runs): {wrong}\n"
        + "\n".join(line for line in host.log().splitlines() if "otpjobs.workers" in line)[-3000:]
    )
