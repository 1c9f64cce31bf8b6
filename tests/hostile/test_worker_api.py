"""Hostile input to the worker pools' calls of actors.jobs: a clear error, nothing written."""

from __future__ import annotations

import math

import pytest

import fdblayer
from actors import jobs

from .store import StoreFile, unchanged

T = "hostile-workers"


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    store = StoreFile(tmp_path_factory.mktemp("hostile-workers") / "store.db")
    db = fdblayer.open(store.url)
    jobs.set_type_timeout(db, T, 30)
    jobs.enqueue(db, T, {"x": 1}, id="there")
    try:
        yield store, db
    finally:
        db.close()
        store.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"data": {"bad": object()}},
        {"data": [1, 2]},
        {"data": {"x": math.nan}},
        {"data": {"big": "x" * 200_000}},
        {"id": ""},
        {"id": 7},
        {"id": "x" * 20_000},
        {"delay": -1},
        {"delay": math.inf},
        {"delay": "soon"},
        {"delay": 1, "at": 2},
        {"at": -5},
        {"at": 10.0**30},
        {"max_attempts": 0},
        {"max_attempts": 10**6},
        {"max_attempts": True},
        {"max_attempts": 2.5},
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": math.nan},
        {"timeout": "1"},
        {"timeout": 10.0**12},
        {"priority": -1},
        {"priority": 10},
        {"priority": True},
        {"priority": 1.0},
        {"priority": "0"},
    ],
)
def test_enqueue_refuses_bad_arguments_and_writes_nothing(w, kwargs):
    store, db = w
    data = kwargs.pop("data", {})
    unchanged(store, lambda: jobs.enqueue(db, T, data, **kwargs), jobs.JobsError)


@pytest.mark.parametrize("job_type", [None, 1.5, {"a": 1}, ("x", [1])])
def test_enqueue_refuses_bad_types(w, job_type):
    store, db = w
    unchanged(store, lambda: jobs.enqueue(db, job_type, {}), jobs.JobsError)


def test_enqueue_of_a_new_type_declares_it_with_the_default_timeout_in_its_transaction(w):
    from actors.settings.schema import lookup
    from actors.workers.client import DEFAULT_TYPE_TIMEOUT

    store, db = w
    assert DEFAULT_TYPE_TIMEOUT == lookup("worker", "type_timeout").default == 30, "[worker] type_timeout's default"
    job_id = jobs.enqueue(db, "first-enqueue", {"n": 1})
    assert jobs.get_type_timeout(db, "first-enqueue") == 30.0
    assert jobs.status(db, "first-enqueue", job_id).state == "pending"
    jobs.set_type_timeout(db, "first-enqueue", 7)
    jobs.enqueue(db, "first-enqueue", {"n": 2})
    assert jobs.get_type_timeout(db, "first-enqueue") == 7.0, "a type's own timeout is kept"
    tr = db.create_transaction()
    jobs.enqueue(tr, "joined-then-cancelled", {})
    tr.cancel()
    assert jobs.get_type_timeout(db, "joined-then-cancelled") is None, "declared in the enqueue's transaction only"


def test_a_refused_enqueue_of_a_new_type_declares_nothing(w):
    store, db = w
    unchanged(store, lambda: jobs.enqueue(db, "never-declared", {"bad": object()}), jobs.EncodingError)
    unchanged(store, lambda: jobs.enqueue(db, "never-declared", {}, delay=-1), jobs.InvalidArgument)
    assert jobs.get_type_timeout(db, "never-declared") is None


def test_the_couch_jobs_add_keeps_the_seeds_rule(w):
    store, db = w
    unchanged(store, lambda: jobs.add(db, "never-declared", "j", {}), jobs.NoTypeTimeout)
    unchanged(store, lambda: jobs.add_many(db, "never-declared", {"j": {}}), jobs.NoTypeTimeout)


@pytest.mark.parametrize(
    "call",
    [
        lambda db: jobs.result(db, T, "there", timeout=-1),
        lambda db: jobs.result(db, T, "there", timeout="long"),
        lambda db: jobs.result("not a db", T, "there", timeout=0),
        lambda db: jobs.result(db, T, "", timeout=0),
        lambda db: jobs.status(db, T, 5),
        lambda db: jobs.status(object(), T, "there"),
        lambda db: jobs.schedule(db, T, "not cron"),
        lambda db: jobs.schedule(db, T, 5),
        lambda db: jobs.schedule(db, T, "* * * * *", {"bad": object()}),
        lambda db: jobs.schedule(db, T, "* * * * * R"),  # croniter's random field: a tick per host and read
        lambda db: jobs.schedule(db, T, "R 3 * * *"),
        lambda db: jobs.schedule(db, T, "0 0 30 2 *"),  # never fires
        lambda db: jobs.schedule(db, T, "* * * * * * 2020"),
        lambda db: jobs.unschedule(db, None),
        lambda db: jobs.unschedule("db", T),
        lambda db: jobs.schedules("not a db"),
        lambda db: jobs.pause(db, "never-declared"),
        lambda db: jobs.pause(db, None),
        lambda db: jobs.resume(db, ("x", [1])),
        lambda db: jobs.resume("db", T),
        lambda db: jobs.handler(max_attempts=0),
        lambda db: jobs.handler(timeout=math.inf),
        lambda db: jobs.handler(backoff=(1, 2, 3)),
        lambda db: jobs.Retry(in_seconds=math.nan),
        lambda db: jobs.Snooze(-1),
    ],
)
def test_worker_calls_refuse_bad_arguments_and_write_nothing(w, call):
    store, db = w
    unchanged(store, lambda: call(db), jobs.JobsError)


@pytest.mark.parametrize(
    "call",
    [
        lambda db: jobs.prune("not a db"),
        lambda db: jobs.prune(None, T, 0),
        lambda db: jobs.prune(db, T, -1),
        lambda db: jobs.prune(db, T, math.nan),
        lambda db: jobs.prune(db, T, math.inf),
        lambda db: jobs.prune(db, T, 10**400),
        lambda db: jobs.enqueue(db, T, {}, delay=10**400),
        lambda db: jobs.prune(db, T, "1"),
        lambda db: jobs.prune(db, T, True),
        lambda db: jobs.prune(db, None, -0.5),
        lambda db: jobs.prune(db, 1.5, 0),
        lambda db: jobs.prune(db, {"a": 1}, 0),
        lambda db: jobs.prune(db, ("x", [1]), 0),
        lambda db: jobs.prune(db, "x" * 20_000, 0),
    ],
)
def test_prune_refuses_bad_arguments_and_removes_nothing(w, call):
    store, db = w
    unchanged(store, lambda: call(db), jobs.InvalidArgument)


def test_prune_takes_a_database_not_a_transaction_and_leaves_pending_jobs(w):
    store, db = w
    tr = db.create_transaction()
    try:
        unchanged(store, lambda: jobs.prune(tr, T, 0), jobs.InvalidArgument)
    finally:
        tr.cancel()
    before = store.snapshot()
    assert jobs.prune(db, T, 0) == 0 and jobs.prune(db, "never-declared", 0) == 0 and jobs.prune(db) == 0
    assert store.snapshot() == before, "nothing to prune: nothing written"
    assert jobs.status(db, T, "there").state == "pending"


def test_result_of_a_missing_job_is_not_found_and_a_pending_one_times_out(w):
    store, db = w
    unchanged(store, lambda: jobs.result(db, T, "missing", timeout=0), jobs.NotFound)
    with pytest.raises(TimeoutError):
        jobs.result(db, T, "there", timeout=0.05)
    assert jobs.status(db, T, "there").state == "pending"
