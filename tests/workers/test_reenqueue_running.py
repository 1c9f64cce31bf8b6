"""A pool job enqueued again (same id) while it runs: it runs again once
its attempt ends, with the new enqueue's data and options."""

from __future__ import annotations

import textwrap

import pytest

from actors import jobs
from fdblayer.jobs import overview
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from tests.workers.hosts import run_ledger, wait_for

pytestmark = pytest.mark.slow

HANDLER = """
import json, os, time

def echo(ctx):
    with open(os.environ["RUN_LOG"], "a") as f:
        f.write(json.dumps({"id": ctx.id, "event": "start", "v": ctx.data["v"], "t": time.time(),
                            "attempt": ctx.attempt, "max_attempts": ctx.max_attempts}) + "\\n")
    ctx.wait_stopping(ctx.data["s"])
    return ctx.data["v"]
"""


def test_a_job_enqueued_again_while_it_runs_reruns_with_the_new_data_and_options(hosts, db, workdir):
    """Found by a review (session 31, 3 of 3): the rerun got the old data,
    and the new ``max_attempts`` and ``timeout`` were dropped silently
    (the new priority was taken)."""
    (workdir / "echo_mod.py").write_text(textwrap.dedent(HANDLER))
    jobs.set_type_timeout(db, "e", 30)
    log_path = workdir / "runs.jsonl"
    hosts(["e=echo_mod:echo"], concurrency=1, run_log=log_path)
    ledger = run_ledger(log_path)
    job_id = jobs.enqueue(db, "e", {"v": "old", "s": 1.0}, id="x")
    wait_for(lambda: ledger("start", job_id), 30, "the first run")
    jobs.enqueue(db, "e", {"v": "new", "s": 0.0}, id="x", max_attempts=7, timeout=5)
    wait_for(lambda: len(ledger("start", job_id)) == 2, 30, "the second run")
    assert jobs.result(db, "e", job_id, timeout=30) == "new"
    assert [(r["v"], r["max_attempts"]) for r in ledger("start", job_id)] == [("old", 3), ("new", 7)]
    view = overview.job_view(db, DEFAULT_LAYOUT, "e", job_id)
    assert (view["max_attempts"], view["time_limit"], view["data"]) == (7, 5, {"v": "new", "s": 0.0})
