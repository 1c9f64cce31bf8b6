"""a restarted doc processor's _remove_stale takes a removed
run that is still ending (Jobs() lists those since 472458e) for the live
job of a document it took back: it never adds the job, JobStates answers
None for it, and the document is recorded completed (a continuous one).

The removal is made here with a direct RemoveJob right after the processor
is SIGKILLed; in production the same state comes from a processor that gave
up its leases (store unreachable: _give_up_old_leases removes the jobs, the
queue jobs stay running under its lock, doc.node names the node) and then
died within the runs' stop grace.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from actors.names import DOC_PROCESSOR

from .jobs_fixtures import wait_until
from .test_docs_failover import CliNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_taken_back_document_whose_run_is_ending_is_added_again(tmp_path):
    node = CliNode(f"sqlite:///{tmp_path}/store.db", tmp_path, "a", owner_timeout=10)
    log = tmp_path / "d.log"

    def lines():
        return [line.split() for line in log.read_text().splitlines()] if log.exists() else []

    try:
        node.wait_up()
        body = {
            "handler": "tests.actors.scheduler_fixtures:lingering",
            "continuous": True,
            "isolation": "thread",
            "options": {"log": str(log), "linger": 3.5},
        }
        assert node.request("PUT", "/_replicator/d", body)[0] == 201
        wait_until(lambda: any(line[0] == "start" for line in lines()), 30, "d to start", step=0.05)
        time.sleep(3)  # its running state recorded
        (job_id,) = [j["id"] for j in node.sched.jobs() if j["database"] == "_replicator"]
        old = node.client.get_pid(DOC_PROCESSOR)
        assert node.sched.remove_job(job_id)  # the run now ends for 3.5 s
        os.kill(old, signal.SIGKILL)  # at once: before its next tick (every 2 s) sees the job gone
        assert job_id in [j["id"] for j in node.sched.jobs()]  # Jobs() lists the ending run (what _remove_stale reads)
        wait_until(lambda: node.client.get_pid(DOC_PROCESSOR) not in (None, old), 30, "the doc processor restarted")
        time.sleep(8)
        status, view = node.request("GET", "/_scheduler/docs/_replicator/d")
        starts = [line for line in lines() if line[0] == "start"]
        assert view.get("state") != "completed", f"a continuous document was recorded completed: {view}; {lines()}"
        assert len(starts) == 2, f"d did not run again: {view}; {lines()}"
    finally:
        if node.proc.poll() is None:
            node.kill()
