"""The index of recent failures (``fdblayer.jobs.failures``) on a real store of each backend.

The attempt that fails a job for good writes its entry in the same
transaction; the status page reads the latest ones with one range read;
entries older than RETAIN go when a later failure is written; a job
retried since is not shown as failed. The clock is passed in, no sleep.
"""

from __future__ import annotations

import time

import pytest

from fdblayer.jobs import api, failures, overview, work
from fdblayer.jobs.codec import encode_data
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L

T = "mail"
ERROR = {"type": "ValueError", "message": "bad address", "traceback": ""}


@pytest.fixture(autouse=True)
def typed(db):
    """Each backend's fresh store (conftest's ``db``) with the type declared."""
    api.set_type_timeout(db, T, 30)


def fail(db, job_id: str, now: float, kind: str = "fail") -> None:
    """Add ``job_id`` (one attempt allowed), claim it, end its attempt with ``kind`` at ``now``."""
    api.add(db, T, job_id, {"to": job_id})
    claimed = work.claim(db, L, T, now, 1, "host", 1).claimed
    assert [c.job.id for c in claimed] == [job_id]
    outcome = work.Outcome(claimed[0].job, kind, {"ok": 1} if kind == "ok" else None, None if kind == "ok" else ERROR)
    assert work.complete(db, L, [outcome], now) == []


def latest(db, limit: int = 10) -> list[str]:
    tr = db.create_transaction()
    try:
        return failures.latest_ids(tr, L, T, limit)
    finally:
        tr.cancel()


def test_failures_for_good_are_listed_newest_first_and_successes_are_not(db):
    now = time.time()
    for n, job_id in enumerate(["a", "b", "c"]):
        fail(db, job_id, now + n)
    fail(db, "fine", now + 5, kind="ok")
    assert latest(db) == ["c", "b", "a"]
    assert latest(db, 2) == ["c", "b"]
    status = overview.queue_status(db, L, now + 10)
    assert [(f["id"], f["error"]["message"]) for f in status["failures"]] == [
        ("c", "bad address"),
        ("b", "bad address"),
        ("a", "bad address"),
    ]


def test_old_failures_are_cleared_by_a_later_one(db):
    now = time.time()
    fail(db, "old", now - failures.RETAIN - 60)
    fail(db, "recent", now - 60)
    assert latest(db) == ["recent", "old"]
    fail(db, "new", now)
    assert latest(db) == ["new", "recent"]


def test_a_job_retried_since_its_failure_is_not_shown_as_failed(db):
    now = time.time()
    fail(db, "a", now)
    fail(db, "b", now + 1)
    work.enqueue(db, L, T, "b", encode_data({"to": "b"}), 0, None)  # what `jobs retry` does
    assert latest(db) == ["b", "a"]  # the entry is stale...
    assert [f["id"] for f in overview.queue_status(db, L, now + 2)["failures"]] == ["a"]  # ...and skipped
