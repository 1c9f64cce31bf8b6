"""Per-type counts stay exact through every transition: after each of a
long random run of operations (the couch_jobs API, the worker pools' batch
transitions, re-enqueues of silent jobs, fresh enqueues counted by one
add) the counters read what counting the rows says. A real SQLite store;
the clock is the store's, no sleep."""

from __future__ import annotations

import random
import time

import pytest

import fdblayer
from fdblayer.jobs import activity, api, counts, finished, model, overview, retention, work
from fdblayer.jobs.codec import encode_data
from fdblayer.jobs.exceptions import Halt, NotFound
from fdblayer.jobs.ids import new_job_id
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
from fdblayer.jobs.job import JobState
from fdblayer.jobs.work_record import FAILED, SUCCEEDED

T = "counted"


@pytest.fixture
def db(tmp_path):
    database = fdblayer.open(f"sqlite:///{tmp_path / 'store.db'}?synchronous=NORMAL")
    api.set_type_timeout(database, T, 30)
    yield database
    database.close()


def _check(db) -> None:
    tr = db.create_transaction()
    expected = overview.count_rows(tr, L, T)
    tr.cancel()
    got = overview.type_counts(db, L, T, time.time())
    shown = dict(expected, running=expected["running"] - expected["claimed"])  # held, handler running
    assert {k: got[k] for k in expected} == shown
    assert got["finished"] == expected["jobs"] - expected["pending"] - expected["running"]


def _states(db) -> dict:
    return {job_id: state for job_id, (_, state, _) in model.get_jobs(db, L, T).items()}


def _no_stale_finished_keys(db) -> None:
    """Every key of the finished index names a finished job with that outcome and end time."""
    tr = db.create_transaction()
    try:
        for outcome in finished.OUTCOMES:
            for _, ended_ms, job_id in finished.due(tr, L, T, outcome, time.time() + 3600, 10_000):
                found = work.read(tr, L, T, job_id)
                assert found is not None and found[0] is JobState.FINISHED, (outcome, job_id, found)
                assert found[2].outcome == outcome and finished.ms(found[2].ended) == ended_ms
    finally:
        tr.cancel()


def _prune(db, rng: random.Random) -> None:
    """Prune (everything finished, or only one outcome, or nothing) in small
    batches; nothing pending or running goes, and nothing finished stays
    that was due."""
    before = _states(db)
    keep = {SUCCEEDED: rng.choice([0, 3600, None]), FAILED: rng.choice([0, 3600, None])}
    removed, more = retention.prune_type(db, L, T, keep, time.time() + 1, batch=rng.randrange(1, 4))
    after = _states(db)
    gone = set(before) - set(after)
    assert len(gone) == removed and not more
    assert all(before[job_id] is JobState.FINISHED for job_id in gone)
    assert all(after[job_id] is state for job_id, state in before.items() if job_id in after)


def _ids(rng: random.Random) -> str:
    return f"j{rng.randrange(12)}"


@pytest.mark.parametrize("seed", [1234, 7, 99])
def test_counts_match_the_rows_after_every_operation(db, seed):
    rng = random.Random(seed)
    held: list = []  # jobs accepted through the couch_jobs API
    fresh: list = []  # ids made for their enqueue (counted as fresh jobs)
    claimed: list = []  # jobs claimed by the worker pools' batch transition
    _check(db)  # the first read counts and marks
    for _ in range(600):
        op = rng.choice(
            [
                "add",
                "add_later",
                "add_many",
                "remove",
                "accept",
                "finish",
                "update",
                "resubmit",
                "enqueue",
                "enqueue_fresh",
                "enqueue_fresh_retried",
                "remove_fresh",
                "add_fresh_again",
                "add_pool",
                "remove_pool",
                "claim",
                "start",
                "complete",
                "release",
                "reenqueue",
                "recover",
                "prune",
            ]
        )
        try:
            if op == "add":
                api.add(db, T, _ids(rng), {"n": 1})
            elif op == "add_later":
                api.add(db, T, _ids(rng), {}, scheduled_time=int(time.time()) + 3600)
            elif op == "add_many":
                api.add_many(db, T, [(f"m{n}", {}) for n in rng.sample(range(6), 3)])
            elif op == "remove":
                api.remove(db, T, _ids(rng))
            elif op == "accept":
                held.append(api.accept(db, T, timeout=0)[0])
            elif op == "finish" and held:
                api.finish(db, held.pop(rng.randrange(len(held))))
            elif op == "update" and held:
                i = rng.randrange(len(held))
                held[i] = api.update(db, held[i], {"u": 1})
            elif op == "resubmit" and held:
                i = rng.randrange(len(held))
                held[i] = api.resubmit(db, held[i])
            elif op == "enqueue":
                work.enqueue(db, L, T, f"w{rng.randrange(6)}", encode_data({}), 0, 2)
            elif op == "enqueue_fresh":
                fresh.append(new_job_id())
                work.enqueue(db, L, T, fresh[-1], encode_data({}), 0, rng.choice([None, 2]), new_id=True)
            elif op == "enqueue_fresh_retried":  # the retry of an attempt whose commit answer was lost
                fresh.append(new_job_id())
                tr = db.create_transaction()
                tr.maybe_committed = 1
                work.enqueue(tr, L, T, fresh[-1], encode_data({}), 0, None, new_id=True)
                tr.commit()
            elif op == "remove_fresh" and fresh:
                api.remove(db, T, rng.choice(fresh))
            elif op == "add_fresh_again" and fresh:
                api.add(db, T, rng.choice(fresh), {"again": 1})
            elif op == "add_pool":  # the couch_jobs add of a pool job: a finished one runs again
                api.add(db, T, f"w{rng.randrange(6)}", {})
            elif op == "remove_pool":
                api.remove(db, T, f"w{rng.randrange(6)}")
            elif op == "prune":
                _prune(db, rng)
            elif op == "claim":
                claimed += work.claim(db, L, T, time.time(), rng.randrange(1, 4), "host", 2).claimed
            elif op == "start" and claimed:
                work.mark_started(db, L, [(rng.choice(claimed).job, time.time())])
            elif op == "recover":
                work.requeue_held_by(db, L, T, "host")
                claimed.clear()
            elif op == "complete" and claimed:
                done = [claimed.pop(rng.randrange(len(claimed))) for _ in range(min(len(claimed), 2))]
                kinds = [rng.choice(["ok", "retry", "fail"]) for _ in done]
                work.complete(
                    db,
                    L,
                    [
                        work.Outcome(c.job, k, b"\x01" if k == "ok" else None, None if k == "ok" else {"type": "E"}, 0)
                        for c, k in zip(done, kinds)
                    ],
                    time.time(),
                )
            elif op == "release" and claimed:
                work.release(db, L, [claimed.pop().job])
            elif op == "reenqueue":
                running = (
                    activity.get_inactive_since(db, L, T, activity.get_activity_vs(db, L, T))
                    if activity.get_activity_vs(db, L, T) is not None
                    else []
                )
                activity.re_enqueue_inactive(db, L, T, running[:2])
        except (NotFound, Halt):
            pass  # a removed or taken-over job: the op changes nothing
        _check(db)
        _no_stale_finished_keys(db)


def test_a_store_without_counters_is_counted_once_on_first_read(db):
    for n in range(5):
        api.add(db, T, f"old{n}", {})
    api.accept(db, T, timeout=0)
    tr = db.create_transaction()
    tr.clear_range_startswith(L.counts_prefix(T))  # as a store written before the counters
    tr.commit()
    _add_fresh(db)  # counted by its own add, which the recount must not count again
    got = overview.type_counts(db, L, T, time.time())
    assert (got["jobs"], got["pending"], got["running"], got["finished"]) == (6, 5, 1, 0)
    api.add(db, T, "new", {})
    _add_fresh(db)
    assert overview.type_counts(db, L, T, time.time())["pending"] == 7


def _add_fresh(db) -> str:
    job_id = new_job_id()
    work.enqueue(db, L, T, job_id, encode_data({}), 0, None, new_id=True)
    return job_id


def test_a_fresh_enqueue_counts_as_one_job_added_and_pending_until_it_leaves(db):
    ids = {_add_fresh(db) for _ in range(3)}
    got = overview.type_counts(db, L, T, time.time())
    assert (got["jobs"], got["pending"], got["finished"]) == (3, 3, 0)
    claimed = work.claim(db, L, T, time.time(), 2, "host", 1).claimed
    (left,) = ids - {c.job.id for c in claimed}
    work.complete(db, L, [work.Outcome(claimed[0].job, "ok", b"\x01")], time.time())
    api.remove(db, T, left)
    got = overview.type_counts(db, L, T, time.time())
    assert (got["jobs"], got["pending"], got["claimed"], got["finished"]) == (2, 0, 1, 1)
    assert counts.read_events(db, L, T)["added"] == 3
    _check(db)


def test_scheduled_counts_the_jobs_not_yet_due(db):
    now = int(time.time())
    api.add(db, T, "due", {})
    for n in range(3):
        api.add(db, T, f"later{n}", {}, scheduled_time=now + 100 + n)
    got = overview.type_counts(db, L, T, now)
    assert (got["pending"], got["scheduled"], got["scheduled_capped"]) == (4, 3, False)
    assert overview.type_counts(db, L, T, now + 101)["scheduled"] == 1


def test_events_and_the_run_time_histogram(db):
    api.add(db, T, "a", {})
    api.add(db, T, "b", {})
    job, _ = api.accept(db, T, timeout=0)
    api.finish(db, job)
    api.add(db, T, job.id, {})  # a finished job added again
    claimed = work.claim(db, L, T, time.time(), 5, "host", 1).claimed
    outcomes = [
        work.Outcome(claimed[0].job, "ok", b"\x01", seconds=0.003),
        work.Outcome(claimed[1].job, "fail", None, {"type": "E"}, seconds=2.0),
    ]
    work.complete(db, L, outcomes, time.time())
    events = counts.read_events(db, L, T)
    assert {k: events[k] for k in counts.EVENTS} == {
        "added": 3,
        "started": 3,
        "succeeded": 1,
        "failed_final": 1,
        "retried": 0,
        "snoozed": 0,
        "reenqueued": 0,
    }
    run = events["run"]
    assert run["count"] == 2 and abs(run["sum"] - 2.003) < 1e-6
    assert dict(run["buckets"])[0.005] == 1 and dict(run["buckets"])[2.5] == 2 and run["buckets"][-1][1] == 2


def test_an_unknown_outcome_kind_is_refused_and_writes_nothing(db):
    api.add(db, T, "a", {})
    api.add(db, T, "b", {})
    claimed = work.claim(db, L, T, time.time(), 2, "host", 1).claimed
    before = list(db.get_range(b"", b"\xff"))
    with pytest.raises(ValueError):  # it used to count as a failure
        work.complete(
            db,
            L,
            [work.Outcome(claimed[0].job, work.OutcomeKind.OK, b"\x01"), work.Outcome(claimed[1].job, "done", None)],
            time.time(),
        )
    assert list(db.get_range(b"", b"\xff")) == before
    assert {o.value for o in work.OutcomeKind} == {"ok", "retry", "snooze", "fail"}


def test_prune_removes_finished_pool_jobs_by_outcome_and_age_in_batches(db):
    now = time.time()
    for n in range(12):
        work.enqueue(db, L, T, f"p{n}", encode_data({}), 0, 1)
    claimed = work.claim(db, L, T, now, 9, "host", 1).claimed  # three stay pending
    work.mark_started(db, L, [(claimed[-1].job, now)])  # one running, one claimed: never touched
    ends = claimed[:7]
    work.complete(db, L, [work.Outcome(c.job, "ok", b"\x01") for c in ends[:4]], now - 100)
    work.complete(db, L, [work.Outcome(c.job, "fail", None, {"type": "E"}) for c in ends[4:]], now - 100)
    api.add(db, T, "hand", {})  # a couch_jobs job finished by a hand-written worker: not a pool job
    api.finish(db, api.accept(db, T, timeout=0)[0])
    _check(db)
    assert retention.prune_type(db, L, T, {SUCCEEDED: 200, FAILED: 200}, now) == (0, False)
    assert retention.prune_type(db, L, T, {SUCCEEDED: 50, FAILED: None}, now, batch=3, max_batches=1) == (3, True)
    _check(db)
    assert retention.prune_type(db, L, T, {SUCCEEDED: 50, FAILED: None}, now, batch=3) == (1, False)
    assert overview.type_counts(db, L, T, now)["failed"] == 3
    assert retention.prune_type(db, L, T, {SUCCEEDED: 50, FAILED: 50}, now, batch=2) == (3, False)
    _check(db)
    got = overview.type_counts(db, L, T, now)
    assert (got["jobs"], got["pending"], got["claimed"], got["running"], got["finished"], got["failed"]) == (
        6,
        3,
        1,
        1,
        1,
        0,
    )
    assert set(_states(db)) == {c.job.id for c in claimed[7:]} | {f"p{n}" for n in range(12)} - {
        c.job.id for c in claimed
    } | {"hand"}
    tr = db.create_transaction()
    assert finished.pruned_before(tr, L, T) == pytest.approx(now - 100, abs=0.002)
    assert not tr.get_range_startswith(L.failures_prefix(T)), "a pruned job's entry in recent failures goes too"
    tr.cancel()


def test_a_job_run_again_before_the_prune_is_left_alone(db):
    now = time.time()
    for job_id in ("again", "retried", "removed"):
        work.enqueue(db, L, T, job_id, encode_data({}), 0, 1)
    claimed = work.claim(db, L, T, now, 3, "host", 1).claimed
    work.complete(
        db,
        L,
        [work.Outcome(c.job, "ok" if c.job.id != "retried" else "fail", b"\x01", {"type": "E"}) for c in claimed],
        now - 100,
    )
    tr = db.create_transaction()  # the pruner's read of the index...
    due = finished.due(tr, L, T, SUCCEEDED, now, 10) + finished.due(tr, L, T, FAILED, now, 10)
    tr.cancel()
    assert sorted(job_id for _, _, job_id in due) == ["again", "removed", "retried"]
    work.enqueue(db, L, T, "again", encode_data({}), 0, 1)  # ...then the same id enqueued again
    api.add(db, T, "retried", {})  # and a failed job added again (as `jobs retry`)
    api.remove(db, T, "removed")
    stale = db.create_transaction()
    for key, _, _ in due:  # the keys as a store written before the clearing paths would hold them
        stale.set(key, b"")
    stale.commit()
    assert retention.prune_type(db, L, T, {SUCCEEDED: 0, FAILED: 0}, now) == (0, False)
    assert _states(db) == {"again": JobState.PENDING, "retried": JobState.PENDING}
    _check(db)
    _no_stale_finished_keys(db)
