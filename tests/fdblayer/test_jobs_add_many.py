"""``add_many``: many jobs in one transaction, each as ``add`` would add it.

Checked on every backend present: the result equals the same adds made one
by one in one transaction (a byte-for-byte dump of the store), existing jobs
are resubmitted, and a waiting acceptor wakes. Bad input (any one job's
making the whole call write nothing) is tests/hostile/test_queue_api.py's.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fdblayer
from fdblayer.jobs import api
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from fdblayer.jobs.exceptions import NotFound


def dump(db):
    """Every key and value of the store."""
    return [(kv.key, kv.value) for kv in db.get_range(b"", b"\xff")]


T = "bulk"


@pytest.fixture
def typed(db):
    api.set_type_timeout(db, T, 30)
    return db


def _accept(db, **options):
    """A pending job and its data, or None when there is none (no wait)."""
    try:
        return api.accept(db, T, timeout=0, **options)
    except NotFound:
        return None


def test_adds_new_jobs_as_pending(typed):
    created = api.add_many(typed, T, {f"j{i}": {"i": i} for i in range(250)})
    assert created == 250
    jobs = api.get_jobs(typed, T)
    assert len(jobs) == 250
    assert {info.state for info in jobs} == {api.JobState.PENDING}
    assert api.get_job_data(typed, T, "j7") == {"i": 7}
    accepted = set()
    while (result := _accept(typed)) is not None:
        accepted.add(result[0].id)
    assert accepted == {f"j{i}" for i in range(250)}


def test_pairs_and_scheduled_time(typed):
    assert api.add_many(typed, T, [("a", {}), ("b", {"x": [1, 2]})], scheduled_time=10**9) == 2
    assert _accept(typed, max_sched_time=10**9 - 1) is None
    assert _accept(typed, max_sched_time=10**9) is not None


def test_existing_jobs_are_resubmitted(typed):
    api.add(typed, T, "running", {"v": 0})
    api.add(typed, T, "finished", {"v": 0})
    handles = {}
    while (result := _accept(typed)) is not None:
        handles[result[0].id] = result[0]
    api.finish(typed, handles["finished"])
    api.add(typed, T, "pending", {"v": 0})
    created = api.add_many(typed, T, {"pending": {"v": 1}, "running": {"v": 1}, "finished": {"v": 1}, "new": {}})
    assert created == 1
    assert api.get_job_state(typed, T, "pending") == api.JobState.PENDING
    assert api.get_job_data(typed, T, "pending") == {"v": 1}
    assert api.get_job_state(typed, T, "finished") == api.JobState.PENDING
    assert api.get_job_state(typed, T, "running") == api.JobState.RUNNING
    assert api.get_job_data(typed, T, "running") == {"v": 0}  # its worker owns the data
    assert api.is_resubmitted(api.update(typed, handles["running"]))


def test_composes_in_a_caller_transaction(typed):
    @fdblayer.transactional
    def both(tr):
        api.add_many(tr, T, {"x": {}, "y": {}})
        api.remove(tr, T, "x")

    both(typed)
    assert [info.id for info in api.get_jobs(typed, T)] == ["y"]


def test_empty_is_a_no_op(typed):
    before = dump(typed)
    assert api.add_many(typed, T, {}) == 0
    assert dump(typed) == before


def test_wakes_a_waiting_acceptor(typed):
    got = []
    waiter = threading.Thread(target=lambda: got.append(api.accept(typed, T, timeout=20)))
    waiter.start()
    try:
        api.add_many(typed, T, {"wake": {"n": 1}})
    finally:
        waiter.join(25)
    assert got and got[0] is not None and got[0][0].id == "wake"


ids = st.sampled_from([f"k{i}" for i in range(8)])
states = st.sampled_from(["absent", "pending", "running", "finished"])


def _prepare(db, plan):
    """Put each planned job in its state (running and finished ones first,
    so that each accept finds only the job it is meant to take)."""
    api.set_type_timeout(db, T, 30)
    for job_id, state in plan.items():
        if state in ("running", "finished"):
            api.add(db, T, job_id, {"old": job_id})
            job, _ = api.accept(db, T, timeout=0)
            assert job.id == job_id
            if state == "finished":
                api.finish(db, job)
    for job_id, state in plan.items():
        if state == "pending":
            api.add(db, T, job_id, {"old": job_id})


def _view(db):
    """Each job's state, data and resubmit flag, and the pending queue's keys."""
    jobs = {info.id: (info.state, info.data, info.resubmit, info.scheduled_time) for info in api.get_jobs(db, T)}
    prefix = DEFAULT_LAYOUT.pending_prefix(T)
    queue = [kv.key for kv in db.get_range(prefix, prefix + b"\xff")]
    return jobs, queue


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.dictionaries(ids, states, max_size=5), new=st.dictionaries(ids, st.integers(0, 9), min_size=1))
def test_same_store_as_adds_one_by_one(tmp_path_factory, plan, new):
    directory = tmp_path_factory.mktemp("same")
    one_by_one = fdblayer.open(f"sqlite:///{directory}/a.db")
    bulk = fdblayer.open(f"sqlite:///{directory}/b.db")
    try:
        for db in (one_by_one, bulk):
            _prepare(db, plan)
        data = {job_id: {"n": n} for job_id, n in new.items()}

        @fdblayer.transactional
        def loop(tr):
            for job_id, value in data.items():
                api.add(tr, T, job_id, value)

        loop(one_by_one)
        api.add_many(bulk, T, data)
        assert _view(bulk) == _view(one_by_one)
    finally:
        one_by_one.close()
        bulk.close()
