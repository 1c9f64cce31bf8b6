"""Priorities in the pools' queue: among due jobs a lower number is claimed
first, equal ones in due order; every transition keeps a job's priority
and the counters exact. A real SQLite store; the clock is passed in."""

from __future__ import annotations

import random
import time

import pytest

import fdblayer
from fdblayer.jobs import activity, api, overview, type_controls, work
from fdblayer.jobs.codec import JobValue, encode_data, pack_job_value, unpack_job_value
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L

T = "prio"
DATA = encode_data({})


@pytest.fixture
def db(tmp_path):
    database = fdblayer.open(f"sqlite:///{tmp_path / 'store.db'}?synchronous=NORMAL")
    api.set_type_timeout(database, T, 30)
    yield database
    database.close()


def _claim(db, n: int, now: float | None = None) -> list:
    return [c.job.id for c in work.claim(db, L, T, time.time() if now is None else now, n, "h", 3).claimed]


def test_lower_priorities_are_claimed_first_and_equal_ones_in_due_order(db):
    now = int(time.time())
    for job_id, priority, due in (
        ("p5-a", 5, now - 20),
        ("p5-b", 5, now - 30),
        ("p0-a", 0, 0),
        ("p9", 9, 0),
        ("p2", 2, now - 1),
        ("p0-b", 0, now - 5),
        ("p2-later", 2, now + 100),
    ):
        work.enqueue(db, L, T, job_id, DATA, due, None, priority=priority)
    assert _claim(db, 3, now) == ["p0-a", "p0-b", "p2"]
    assert _claim(db, 10, now) == ["p5-b", "p5-a", "p9"], "p2-later is not due"
    result = work.claim(db, L, T, now, 10, "h", 3)
    assert result.claimed == [] and result.next_due == now + 100, "a timer for a prioritized delayed job"
    assert _claim(db, 10, now + 100) == ["p2-later"]


def test_a_priority_survives_retry_release_and_lease_expiry(db):
    work.enqueue(db, L, T, "j", DATA, 0, 5, priority=4)
    work.enqueue(db, L, T, "other", DATA, 0, 5, priority=6)
    (c,) = work.claim(db, L, T, time.time(), 1, "h", 5).claimed
    assert c.job.id == "j" and c.priority == 4
    work.complete(db, L, [work.Outcome(c.job, "retry", None, {"type": "E"}, 0)], time.time())
    (c,) = work.claim(db, L, T, time.time(), 1, "h", 5).claimed
    assert (c.job.id, c.priority) == ("j", 4), "a retry keeps its priority (4 before 6)"
    work.release(db, L, [c.job])
    (c,) = work.claim(db, L, T, time.time(), 1, "h", 5).claimed
    assert (c.job.id, c.priority) == ("j", 4)
    from fdblayer.jobs import activity

    activity.re_enqueue_inactive(db, L, T, ["j"])
    assert overview.job_view(db, L, T, "j")["priority"] == 4 and _claim(db, 1) == ["j"]


def test_enqueue_again_moves_a_pending_job_to_its_new_priority(db):
    work.enqueue(db, L, T, "a", DATA, 0, None, priority=7)
    work.enqueue(db, L, T, "b", DATA, 0, None, priority=3)
    work.enqueue(db, L, T, "a", DATA, 0, None, priority=1)
    assert [v["id"] for v in overview.list_jobs(db, L, T, "pending", 10, 0, time.time())[1]] == ["a", "b"]
    assert _claim(db, 2) == ["a", "b"]


def test_pending_pages_and_counts_see_every_priority(db):
    now = time.time()
    work.enqueue(db, L, T, "soon", DATA, 0, None, priority=3)
    work.enqueue(db, L, T, "late", DATA, int(now) + 500, None, priority=8)
    work.enqueue(db, L, T, "plain", DATA, 0, None)
    total, page = overview.list_jobs(db, L, T, "pending", 10, 0, now)
    assert total == 3 and [v["id"] for v in page] == ["plain", "soon", "late"]
    assert [(v["id"], v["priority"]) for v in page] == [("plain", 0), ("soon", 3), ("late", 8)]
    assert overview.type_counts(db, L, T, now)["scheduled"] == 1
    assert [v["id"] for v in overview.queue_status(db, L, now)["delayed"]] == ["late"]
    api.remove(db, T, "late")
    assert (
        overview.type_counts(db, L, T, now)["pending"] == 2
        and overview.list_jobs(db, L, T, "pending", 10, 0, now)[0] == 2
    )


def test_a_row_of_the_seeds_shape_reads_as_priority_0_and_a_bad_priority_is_corrupt():
    old = JobValue(0, None, 5, False, b"d")
    assert unpack_job_value(pack_job_value(old)).priority == 0
    assert unpack_job_value(pack_job_value(old._replace(priority=9))).priority == 9
    from fdblayer.jobs.exceptions import CorruptValue

    with pytest.raises(CorruptValue):
        unpack_job_value(pack_job_value(old._replace(priority=12)))


@pytest.mark.parametrize("seed", [3, 17])
def test_counts_stay_exact_with_priorities_through_random_transitions(db, seed):
    rng = random.Random(seed)
    claimed: list = []
    for _ in range(300):
        op = rng.choice(["enqueue", "enqueue", "claim", "complete", "release", "remove"])
        job_id = f"j{rng.randrange(10)}"
        try:
            if op == "enqueue":
                work.enqueue(
                    db, L, T, job_id, DATA, rng.choice([0, int(time.time()) + 100]), 3, priority=rng.randrange(10)
                )
            elif op == "claim":
                claimed += work.claim(db, L, T, time.time(), rng.randrange(1, 4), "h", 3).claimed
            elif op == "complete" and claimed:
                c = claimed.pop(rng.randrange(len(claimed)))
                kind = rng.choice(["ok", "retry", "fail", "snooze"])
                work.complete(
                    db,
                    L,
                    [work.Outcome(c.job, kind, None, None if kind in ("ok", "snooze") else {"type": "E"}, 0)],
                    time.time(),
                )
            elif op == "release" and claimed:
                work.release(db, L, [claimed.pop().job])
            elif op == "remove":
                api.remove(db, T, job_id)
                claimed = [c for c in claimed if c.job.id != job_id]
        except api.NotFound:
            pass
        tr = db.create_transaction()
        expected = overview.count_rows(tr, L, T)
        tr.cancel()
        got = overview.type_counts(db, L, T, time.time())
        assert got["pending"] == expected["pending"] and got["jobs"] == expected["jobs"]
        listed = overview.list_jobs(db, L, T, "pending", 1000, 0, time.time())[1]
        assert len(listed) == expected["pending"], "every pending job is in one of the queues, once"


def test_declare_types_keeps_a_timeout_sets_priorities_and_writes_nothing_when_unchanged(db):
    declared = {T: (99.0, 3), "fresh": (12.0, None)}
    assert type_controls.declare_types(db, L, declared) == 2  # T's priority, fresh's timeout
    assert activity.get_type_timeout(db, L, T) == 30  # the timeout it had is kept
    assert activity.get_type_timeout(db, L, "fresh") == 12.0
    assert _priority(db, T) == 3 and _priority(db, "fresh") == 0
    assert type_controls.declare_types(db, L, declared) == 0  # a host started again: nothing to write
    assert type_controls.declare_types(db, L, {T: (99.0, None)}) == 1  # its handler no longer declares one
    assert _priority(db, T) == 0


@fdblayer.transactional
def _priority(tr, job_type):
    return type_controls.type_priority(tr, L, job_type)


def test_a_types_controls_are_read_and_watched_in_one_call(db):
    """``type_controls.watch_controls``: the pause and timeout as they are,
    and a watch on each of pause, timeout and schedule that fires when it
    changes (a worker host's one read of them)."""
    from fdblayer.jobs import schedules

    activity.set_type_timeout(db, L, "c", 30)
    activity.set_type_timeout(db, L, "d", 10)
    type_controls.set_paused(db, L, "d", True)
    found = type_controls.watch_controls(db, L, ["c", "d", "none"])
    assert [(c.paused, c.timeout) for c in found.values()] == [(False, 30), (True, 10), (False, None)]
    c = found["c"]
    assert not any(w.is_ready() for w in (c.pause_watch, c.timeout_watch, c.schedule_watch))
    activity.set_type_timeout(db, L, "c", 3)
    assert c.timeout_watch.wait(10) and not c.pause_watch.is_ready()
    schedules.set_schedule(db, L, "c", "* * * * *", encode_data({}), int(time.time()))
    assert c.schedule_watch.wait(10)
    type_controls.set_paused(db, L, "c", True)
    assert c.pause_watch.wait(10)
    for controls in found.values():
        for watch in (controls.pause_watch, controls.timeout_watch, controls.schedule_watch):
            watch.cancel()
