"""the job hosts' memory of completed runs refuses a
legitimately re-added job of the same id.

A one-shot document completes (rev 1); it is then replaced (rev 2, same
scheduler job id: the id is derived from db and doc id only) and rev 2's
job crashes (backing off, not running). The scheduler actor is SIGKILLed
within COMPLETED_MEMORY of rev 1's completion: the hosts list rev 1's
completion, the doc processor re-adds rev 2 with again=True and the new
scheduler answers ALREADY_COMPLETED: rev 2 is recorded completed, never run.
"""

from __future__ import annotations

import time

import pytest

from .jobs_fixtures import wait_until
from .test_docs_restarts import FIX, _kill_scheduler, _lines, _wait_new_scheduler, node  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _view(n):
    status, view = n.request("GET", "/_scheduler/docs/_replicator/once")
    return view if status == 200 else None


def test_a_replaced_document_is_not_refused_as_completed_after_a_scheduler_restart(node, tmp_path):  # noqa: F811
    ledger, flag = tmp_path / "runs.log", tmp_path / "go"
    flag.touch()  # rev 1 completes at once
    body = {"handler": f"{FIX}:until_file", "continuous": False, "options": {"log": str(ledger), "path": str(flag)}}
    status, answer = node.request("PUT", "/_replicator/once", body)
    assert status == 201
    wait_until(lambda: (_view(node) or {}).get("state") == "completed", 30, "rev 1 completed", step=0.1)
    completed_at = time.monotonic()

    body2 = {"_rev": answer["rev"], "handler": f"{FIX}:crash", "continuous": False, "options": {"log": str(ledger)}}
    status, _ = node.request("PUT", "/_replicator/once", body2)
    assert status == 201, _
    wait_until(lambda: (_view(node) or {}).get("state") == "crashing", 30, "rev 2 crashing", step=0.1)
    assert time.monotonic() - completed_at < 40, "too slow: past the hosts' memory"

    old = _kill_scheduler(node)
    _wait_new_scheduler(node, old)
    time.sleep(8)  # a few processor ticks: rev 2 re-added to the new scheduler
    view = _view(node)
    assert view is not None and view.get("state") != "completed", (
        f"rev 2 (which never completed) was recorded completed after the scheduler restart: {view}; {_lines(ledger)}"
    )
