"""A host stops (its drain tells running handlers to stop), a handler lets
``JobStopping`` out, and the dispatcher is SIGKILLed before it writes that
end: its successor reads the end from the worker's journal. The run was
stopped by the host, not failed by the job, so the job goes back to the
queue with its attempt uncounted, as a live dispatcher does it
(``job_released reason=stopped_by_drain``), not retried nor failed."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest

from actors import jobs
from supervision.runtime import runtime_dir
from tests.workers.hosts import wait_for
from tests.workers.test_workers_trust import dispatcher_pid, read_all

pytestmark = pytest.mark.slow

GATE_HANDLER = '''
import os, time

def run(ctx):
    """Marks its start, waits to be told to stop, marks that, then waits
    for the test's go before it lets JobStopping out of ctx.check()."""
    d = ctx.data["dir"]
    open(os.path.join(d, "started"), "w").close()
    ctx.wait_stopping(120)
    open(os.path.join(d, "stopping"), "w").close()
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.01)
    open(os.path.join(d, "raising"), "w").close()
    ctx.check()
    return "not stopped"
'''


def _journaled(worker: int) -> bool:
    """Whether the worker ``worker`` has written a record to its journal."""
    return any(p.stat().st_size > 0 for p in Path(runtime_dir()).glob(f"jr-*-{worker}-*"))


def test_a_drain_stopped_run_read_from_the_journal_is_released_not_counted(hosts, db, workdir):
    """Before: the successor applied the journaled ``stopped`` end as the
    job's failure (``max_attempts`` 1: failed for good)."""
    (workdir / "gate_mod.py").write_text(textwrap.dedent(GATE_HANDLER))
    marks = workdir / "marks"
    marks.mkdir()
    jobs.set_type_timeout(db, "g", 30)
    host = hosts(["g=gate_mod:run"], concurrency=1, extra=["--max-attempts", "1", "--grace", "60"])
    jobs.enqueue(db, "g", {"dir": str(marks)}, id="gated")
    wait_for(lambda: (marks / "started").exists(), 30, "the handler's start")
    host.proc.send_signal(signal.SIGTERM)  # the drain: the running handler is told to stop
    wait_for(lambda: (marks / "stopping").exists(), 30, "the handler told to stop")
    pid = dispatcher_pid(host, db)
    (worker,) = host.worker_pids()
    os.kill(pid, signal.SIGSTOP)  # it reads the end on its channel but cannot write it
    try:
        (marks / "go").touch()
        wait_for(lambda: _journaled(worker), 30, "the worker's journal record of the run's end")
    finally:
        os.kill(pid, signal.SIGKILL)

    def settled():
        state, record = read_all(db, "g", ["gated"])["gated"]
        return (state, record) if state != "running" else None

    state, record = wait_for(settled, 60, "the successor's handling of the journaled end")
    assert state == "pending", f"a run the host stopped is not the job's failure: {state} {record}\n{host.log()}"
    assert record.attempt == 0 and not record.errors, record
    assert "reason=stopped_by_drain" in host.log()
