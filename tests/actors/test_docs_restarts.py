"""Permanent jobs (documents) across a SIGKILL of the scheduler actor.

A real node (the CLI, through tests.actors.docs_node_main), documents over
HTTP, handlers that append to a ledger; the scheduler actor's process is
SIGKILLed and its supervisor restarts it: a one-shot document that
completed in between, before the doc processor recorded it, must not run
again (its job host remembers the completion for the new scheduler).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

import fdblayer
from actors.names import SCHEDULER
from fdblayer import docs as store_docs

from .jobs_fixtures import wait_until
from .test_docs_failover import CliNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FIX = "tests.actors.scheduler_fixtures"


def _lines(path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _kill_scheduler(node: CliNode) -> int:
    old = node.client.get_pid(SCHEDULER)
    os.kill(old, signal.SIGKILL)
    return old


def _wait_new_scheduler(node: CliNode, old: int) -> None:
    def up():
        pid = node.client.get_pid(SCHEDULER)
        return pid != old and node.sched.stats() is not None

    wait_until(up, 30, "the scheduler restarted")


@pytest.fixture
def node(tmp_path):
    # owner timeout 30 s: the doc processor ticks every 2 s (min(30/3, 2))
    n = CliNode(f"sqlite:///{tmp_path}/store.db", tmp_path, "a", owner_timeout=30)
    try:
        yield n.wait_up()
    finally:
        if n.proc.poll() is None:
            n.kill()


def test_a_completed_one_shot_document_is_not_run_again_after_a_scheduler_restart(node, tmp_path):
    ledger, flag = tmp_path / "runs.log", tmp_path / "go"
    body = {"handler": f"{FIX}:until_file", "continuous": False, "options": {"log": str(ledger), "path": str(flag)}}
    assert node.request("PUT", "/_replicator/once", body)[0] == 201
    wait_until(
        lambda: [line for line in _lines(ledger) if line[0] == "start"], 30, "the one-shot doc to start", step=0.05
    )
    time.sleep(3)  # its running state recorded by a tick
    sched_pid = node.client.get_pid(SCHEDULER)
    flag.touch()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(line[0] == "done" for line in _lines(ledger)):
        time.sleep(0.002)
    os.kill(sched_pid, signal.SIGKILL)  # right after it completed, before the next tick records it
    _wait_new_scheduler(node, sched_pid)

    def settled():
        status, view = node.request("GET", "/_scheduler/docs/_replicator/once")
        return view if status == 200 and view["state"] == "completed" else None

    view = wait_until(settled, 30, "the document to show completed", step=0.1)
    time.sleep(3)
    starts = [line for line in _lines(ledger) if line[0] == "start"]
    assert len(starts) == 1, f"the completed one-shot job ran {len(starts)} times: {_lines(ledger)}; {view}"


def test_a_crashing_documents_backoff_survives_a_scheduler_restart(node, tmp_path):
    """A document crashed once and backs off 30 s when the scheduler is
    SIGKILLed: the doc processor re-adds it with its count of crashes, and
    the new scheduler keeps it backing off (it used to run it at once)."""
    ledger = tmp_path / "runs.log"
    body = {"handler": f"{FIX}:crash", "continuous": True, "options": {"log": str(ledger)}}
    assert node.request("PUT", "/_replicator/bad", body)[0] == 201

    def crashing():
        status, view = node.request("GET", "/_scheduler/docs/_replicator/bad")
        return view if status == 200 and view["state"] == "crashing" else None

    view = wait_until(crashing, 30, "the crash to be recorded", step=0.1)
    assert view["error_count"] == 1
    assert len(_lines(ledger)) == 1  # backing off 30 s now
    old = _kill_scheduler(node)
    _wait_new_scheduler(node, old)
    time.sleep(8)  # well inside the 30 s backoff
    starts = _lines(ledger)
    status, view = node.request("GET", "/_scheduler/docs/_replicator/bad")
    assert len(starts) == 1, (
        f"a job backing off for 30 s ran again {len(starts) - 1} time(s) within 8 s of a scheduler restart; "
        f"doc now {view['state']} error_count={view['error_count']}"
    )


def _titled(node: CliNode, title: bytes) -> list[int]:
    from tests.procs import group_pids

    found = []
    for pid in group_pids(node.info["pgid"]):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(title):
                    found.append(pid)
        except OSError:
            pass
    return found


def test_a_documents_checkpoint_survives_its_scheduler_tree_killed(node, tmp_path):
    """Found by a review (2 of 2; 7 of 7 documents in a larger run, and 10 of
    10 after a fail-over): the checkpoint lived only in the scheduler, so a
    SIGKILLed scheduler tree (its job hosts with it) restarted the document
    from nothing, though the README says a restarted job resumes there. It
    is now kept in the document's row, written with the lease renewals."""
    import json

    ledger = tmp_path / "cp.log"
    body = {"handler": f"{FIX}:checkpoint_ledger", "continuous": True, "options": {"ledger": str(ledger)}}
    assert node.request("PUT", "/_replicator/cp", body)[0] == 201
    store = fdblayer.open(f"sqlite:///{tmp_path}/store.db")
    try:  # checkpoints every 0.1 s; the doc processor's tick (2 s) writes the latest to its row

        def stored():  # noqa: ANN202
            kept = store_docs.get(store, "_replicator", "cp").checkpoint
            return kept if kept and kept["n"] >= 10 else None

        before = wait_until(stored, 30, "a checkpoint of n >= 10 in the document's row", step=0.1)
    finally:
        store.close()
    (tree,) = _titled(node, b"SchedulerTree")
    os.kill(tree, signal.SIGKILL)
    starts = wait_until(lambda: len(_lines(ledger)) >= 2 and _lines(ledger), 60, "the restarted run", step=0.1)
    resumed = json.loads(starts[1][1])
    assert resumed is not None and resumed["n"] >= before["n"], f"the restarted run resumed from {resumed}: {starts}"
