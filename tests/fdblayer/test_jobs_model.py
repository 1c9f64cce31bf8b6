"""The seed's couch_jobs_tests cases that need no actors, at the data-model level.

Each test runs against a real store (the ``db`` fixture: a fresh SQLite file,
or FoundationDB when present) and with each of the seed's job types: a tuple
(``{<<"t1">>, 1024}``), an integer (42) and a plain string.
"""

from __future__ import annotations

import uuid

import pytest

import fdblayer
from fdblayer.jobs import activity, api, model, pending
from fdblayer.jobs.ids import new_job_id
from fdblayer.jobs.exceptions import EncodingError, Halt, InvalidArgument, NoTypeTimeout, NotFound
from fdblayer.jobs.job import Job, JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT

T1_TIMEOUT = 2
T2_TIMEOUT = 3
J1 = "j1"
J2 = "j2"

ODD_TYPES = [("t1", 1024), 42, "t1"]


@pytest.fixture(params=ODD_TYPES, ids=["tuple", "int", "str"])
def t(request, db):
    """The job type under test, with a type timeout (the seed's setup/0)."""
    api.set_type_timeout(db, request.param, T1_TIMEOUT)
    return request.param


@pytest.fixture
def t2(db, t):
    """A second job type: 42, or ("t2", 7) when 42 is the type under test."""
    other = ("t2", 7) if t == 42 else 42
    api.set_type_timeout(db, other, T2_TIMEOUT)
    return other


def get_job(db, job_type, job_id):
    return api.get_job(db, job_type, job_id)


@fdblayer.transactional
def in_tx(tr, func, *args, **kwargs):
    """Run an API call inside an explicit transaction (the seed's fabric2_fdb:transactional)."""
    return func(tr, *args, **kwargs)


# ---------------------------------------------------------------- creation


def test_add_remove_pending(db, t, t2):
    assert api.add(db, t, J1, {}) is None
    info = get_job(db, t, J1)
    assert info.state is JobState.PENDING and info.data == {}
    assert api.remove(db, t, J1) is None
    data = {"x": 42}
    in_tx(db, api.add, t2, J2, data)
    info = get_job(db, t2, J2)
    assert info.state == "pending" and info.data == data
    api.remove(db, t2, J2)
    assert api.get_jobs(db) == []


def test_get_job_data_and_state(db, t):
    data = {"x": 42}
    api.add(db, t, J1, data)
    assert api.get_job_data(db, t, J1) == data
    assert api.get_job_state(db, t, J1) is JobState.PENDING
    api.remove(db, t, J1)
    with pytest.raises(NotFound) as err:
        api.get_job_data(db, t, J1)
    assert (err.value.job_type, err.value.job_id) == (t, J1)
    with pytest.raises(NotFound):
        api.get_job_state(db, t, J1)


def test_add_remove_errors(db, t):
    with pytest.raises(NotFound):
        api.remove(db, 999, "x")
    with pytest.raises(EncodingError):
        api.add(db, t, J1, {1: 2})
    with pytest.raises(NoTypeTimeout) as err:
        api.add(db, "x", J1, {})
    assert isinstance(err.value, InvalidArgument)
    assert err.value.job_type == "x"
    api.add(db, t, J1, {})
    api.add(db, t, J1, {})
    api.remove(db, t, J1)
    assert api.get_jobs(db) == []


def test_resubmit_as_job_creator(db, t):
    data = {"x": 42}
    api.add(db, t, J1, data, 15)

    # A pending job is not resubmitted, only rescheduled.
    api.add(db, t, J1, data, 16)
    info = get_job(db, t, J1)
    assert (info.state, info.scheduled_time) == (JobState.PENDING, 16)

    job1, got = api.accept(db, t)
    assert got == data

    # A running job is flagged to be resubmitted.
    api.add(db, t, J1, data, 17)
    info = get_job(db, t, J1)
    assert (info.state, info.scheduled_time, info.resubmit) == (JobState.RUNNING, 17, True)

    api.finish(db, job1)
    info = get_job(db, t, J1)
    assert (info.state, info.scheduled_time) == (JobState.PENDING, 17)

    # A finished job is re-enqueued.
    job2, _ = api.accept(db, t)
    api.finish(db, job2)
    info = get_job(db, t, J1)
    assert (info.state, info.scheduled_time) == (JobState.FINISHED, 17)
    api.add(db, t, J1, data, 18)
    info = get_job(db, t, J1)
    assert (info.state, info.scheduled_time) == (JobState.PENDING, 18)


def test_add_replaces_data_unless_running(db, t):
    api.add(db, t, J1, {"v": 1})
    api.add(db, t, J1, {"v": 2})
    assert api.get_job_data(db, t, J1) == {"v": 2}
    job, _ = api.accept(db, t)
    api.update(db, job, {"v": 3})
    api.add(db, t, J1, {"v": 4})
    assert api.get_job_data(db, t, J1) == {"v": 3}
    api.finish(db, job)
    assert get_job(db, t, J1).state is JobState.PENDING
    assert api.get_job_data(db, t, J1) == {"v": 3}
    job, _ = api.accept(db, t)
    api.finish(db, job)
    api.add(db, t, J1, {"v": 5})
    assert api.get_job_data(db, t, J1) == {"v": 5}


# ---------------------------------------------------------------- processing


def test_basic_accept_and_finish(db, t):
    api.add(db, t, J1, {})
    job, data = api.accept(db, t)
    assert data == {} and isinstance(job, Job) and (job.type, job.id) == (t, J1)
    assert get_job(db, t, J1).state is JobState.RUNNING
    with pytest.raises(EncodingError):
        in_tx(db, api.finish, job, {1: 1})
    assert get_job(db, t, J1).state is JobState.RUNNING
    data = {"x": 42}
    in_tx(db, api.finish, job, data)
    info = get_job(db, t, J1)
    assert (info.state, info.data) == (JobState.FINISHED, data)


def test_job_processor_update(db, t):
    api.add(db, t, J1, {})
    job, _ = api.accept(db, t)

    job = in_tx(db, api.update, job, {"x": 1})
    assert isinstance(job, Job)
    info = get_job(db, t, J1)
    assert (info.data, info.state) == ({"x": 1}, JobState.RUNNING)

    job = in_tx(db, api.update, job)
    info = get_job(db, t, J1)
    assert (info.data, info.state) == ({"x": 1}, JobState.RUNNING)

    job = in_tx(db, api.update, job, {"x": 2})
    with pytest.raises(EncodingError):
        in_tx(db, api.update, job, {1: 1})
    info = get_job(db, t, J1)
    assert (info.data, info.state) == ({"x": 2}, JobState.RUNNING)

    api.finish(db, job, {"x": 3})
    info = get_job(db, t, J1)
    assert (info.data, info.state) == ({"x": 3}, JobState.FINISHED)


def test_update_moves_activity(db, t):
    api.add(db, t, J1, {"a": 1})
    job, _ = api.accept(db, t)
    vs1 = activity.get_activity_vs(db, DEFAULT_LAYOUT, t)
    assert activity.get_active_since(db, DEFAULT_LAYOUT, t, vs1) == {J1: {"a": 1}}
    api.update(db, job, {"a": 2})
    vs2 = activity.get_activity_vs(db, DEFAULT_LAYOUT, t)
    assert vs2 > vs1
    assert activity.get_active_since(db, DEFAULT_LAYOUT, t, vs2) == {J1: {"a": 2}}
    assert activity.get_inactive_since(db, DEFAULT_LAYOUT, t, vs1) == []
    assert activity.get_inactive_since(db, DEFAULT_LAYOUT, t, vs2) == [J1]
    api.finish(db, job)
    assert activity.get_active_since(db, DEFAULT_LAYOUT, t, vs1) == {}
    assert activity.get_activity_vs(db, DEFAULT_LAYOUT, t) > vs2


def test_resubmit_enqueues_job(db, t):
    api.add(db, t, J1, {})
    job1, _ = api.accept(db, t)
    resubmitted = api.resubmit(db, job1, 6)
    assert api.is_resubmitted(resubmitted)
    assert not api.is_resubmitted(job1)
    api.finish(db, job1)
    info = get_job(db, t, J1)
    assert (info.state, info.scheduled_time) == (JobState.PENDING, 6)
    job2, _ = api.accept(db, t)
    api.finish(db, job2)
    assert get_job(db, t, J1).state is JobState.FINISHED


def test_update_reports_resubmit(db, t):
    api.add(db, t, J1, {})
    job, _ = api.accept(db, t)
    assert not api.is_resubmitted(api.update(db, job))
    api.add(db, t, J1, {}, 5)
    job = api.update(db, job)
    assert api.is_resubmitted(job) and job.scheduled_time == 5


def test_resubmit_custom_schedtime(db, t):
    api.add(db, t, J1, {}, 7)
    job, _ = api.accept(db, t)
    api.resubmit(db, job, 9)
    api.finish(db, job)
    info = get_job(db, t, J1)
    assert (info.scheduled_time, info.state) == (9, JobState.PENDING)


def test_resubmit_pending_and_finished(db, t):
    api.add(db, t, J1, {}, 3)
    job, _ = api.accept(db, t)
    api.finish(db, job)
    again = api.resubmit(db, job)
    assert not again.resubmit and again.scheduled_time == 3
    info = get_job(db, t, J1)
    assert (info.state, info.scheduled_time) == (JobState.PENDING, 3)
    api.resubmit(db, job, 8)
    assert get_job(db, t, J1).scheduled_time == 8
    with pytest.raises(NotFound):
        api.accept(db, t, max_sched_time=7, timeout=0)
    job2, _ = api.accept(db, t, max_sched_time=8)
    assert job2.id == J1 and job2.lock != job.lock
    api.remove(db, t, J1)
    with pytest.raises(NotFound):
        api.resubmit(db, job2)


def test_accept_max_schedtime(db, t):
    api.add(db, t, J1, {}, 5000)
    api.add(db, t, J2, {}, 3000)
    with pytest.raises(NotFound):
        api.accept(db, t, max_sched_time=1000)
    job, _ = api.accept(db, t, max_sched_time=3000)
    assert job.id == J2
    job, _ = api.accept(db, t, max_sched_time=9000)
    assert job.id == J1


def test_accept_no_schedule(db, t):
    job_count = 25
    ids = [uuid.uuid4().hex for _ in range(job_count)]
    for job_id in ids:
        api.add(db, t, job_id, {})
    with pytest.raises(InvalidArgument):
        api.accept(db, t, no_schedule=True, max_sched_time=1)
    accepted = [api.accept(db, t, no_schedule=True, timeout=0)[0].id for _ in range(job_count)]
    assert sorted(accepted) == sorted(ids)
    with pytest.raises(NotFound):
        api.accept(db, t, no_schedule=True, timeout=0)


def test_accept_no_schedule_never_starves_the_oldest_of_time_ordered_ids(db, t):
    """Ids made by ``new_job_id`` grow with time, so a pick near a random
    128-bit id would nearly always land past the newest one and take jobs
    newest first. The point is drawn between the ids there are (or, where
    every concurrent commit conflicts anyway, the first is taken): a
    hundred picks from the same queue land across it."""
    ids = [new_job_id() for _ in range(200)]
    for job_id in ids:
        api.add(db, t, job_id, {})
    order = {job_id: n for n, job_id in enumerate(sorted(ids))}
    positions = []
    for _ in range(100):
        tr = db.create_transaction()
        positions.append(order[pending.dequeue(tr, DEFAULT_LAYOUT, t, None, no_schedule=True)])
        tr.cancel()  # nothing taken for good: every pick sees the same queue
    assert sum(p < 100 for p in positions) >= 25, positions  # about 50 (100 first: SQLite)


def test_accept_no_schedule_skips_scheduled_jobs(db, t):
    api.add(db, t, J1, {}, 10)
    with pytest.raises(NotFound):
        api.accept(db, t, no_schedule=True, timeout=0)
    assert api.accept(db, t, timeout=0)[0].id == J1


def test_accept_timeout_zero_does_not_wait(db, t):
    with pytest.raises(NotFound) as err:
        api.accept(db, t, timeout=0)
    assert err.value.job_type == t


def test_remove_running_job(db, t):
    api.add(db, t, J1, {})
    job, _ = api.accept(db, t)
    vs = activity.get_activity_vs(db, DEFAULT_LAYOUT, t)
    api.remove(db, t, J1)
    with pytest.raises(NotFound):
        api.remove(db, t, J1)
    with pytest.raises(Halt) as err:
        api.update(db, job)
    assert (err.value.job_type, err.value.job_id) == (t, J1)
    with pytest.raises(Halt):
        api.finish(db, job)
    # The activity row went with the job.
    assert activity.get_active_since(db, DEFAULT_LAYOUT, t, vs) == {}
    assert activity.get_inactive_since(db, DEFAULT_LAYOUT, t, vs) == []


def test_check_get_jobs(db, t, t2):
    api.add(db, t, J1, {})
    api.add(db, t2, J2, {})
    summary = sorted((repr(i.type), i.id, i.state, i.data) for i in api.get_jobs(db))
    assert summary == sorted([(repr(t2), J2, JobState.PENDING, {}), (repr(t), J1, JobState.PENDING, {})])
    api.accept(db, t)
    states = {(i.id, i.state) for i in api.get_jobs(db)}
    assert states == {(J2, JobState.PENDING), (J1, JobState.RUNNING)}
    assert [i.id for i in api.get_jobs(db, t)] == [J1]
    by_id = model.get_jobs(db, DEFAULT_LAYOUT, t2)
    assert list(by_id) == [J2] and by_id[J2][1] is JobState.PENDING
    assert model.get_jobs(db, DEFAULT_LAYOUT, t2, lambda job_id: False) == {}


def test_get_job_states_of_many(db, t):
    api.add(db, t, J1, {"a": 1})
    states = model.get_job_states(db, DEFAULT_LAYOUT, t, [J1, "nope"])
    assert states["nope"] is None
    seq, state, _ = states[J1]
    assert (seq, state) == (0, JobState.PENDING)


def test_a_check_across_a_timeout_change_re_enqueues_nothing(db, t):
    """A monitor read the stamp under one timeout, the timeout was then
    changed (lengthened here): its next check re-enqueues nothing (a job
    silent for the old timeout may not be for the new one) and starts over;
    the check after that, under the new timeout, re-enqueues as usual."""
    api.add(db, t, J1, {})
    job, _ = api.accept(db, t, timeout=0)
    vs, _ = activity.check_inactive(db, DEFAULT_LAYOUT, t, None, T1_TIMEOUT)
    api.set_type_timeout(db, t, T1_TIMEOUT * 10)
    vs, requeued = activity.check_inactive(db, DEFAULT_LAYOUT, t, vs, T1_TIMEOUT)
    assert requeued == [] and get_job(db, t, job.id).state is JobState.RUNNING
    _, requeued = activity.check_inactive(db, DEFAULT_LAYOUT, t, vs, T1_TIMEOUT * 10)
    assert requeued == [job.id]


def test_enqueue_inactive_re_enqueues(db, t):
    """The re-enqueue half of the seed's enqueue_inactive, one monitor check at a time."""
    api.add(db, t, J1, {"y": 1})
    api.add(db, t, J2, {"y": 2})
    job1, _ = api.accept(db, t, timeout=0)
    job2, _ = api.accept(db, t, timeout=0)
    # First check: only reads the versionstamp.
    vs, requeued = activity.check_inactive(db, DEFAULT_LAYOUT, t, None)
    assert vs is not None and requeued == []
    # One worker stays active, the other goes silent.
    api.update(db, job2)
    vs, requeued = activity.check_inactive(db, DEFAULT_LAYOUT, t, vs)
    assert requeued == [job1.id]
    info = get_job(db, t, job1.id)
    assert (info.state, info.data) == (JobState.PENDING, {"y": int(job1.id[1])})
    assert get_job(db, t, job2.id).state is JobState.RUNNING
    # After the job was re-enqueued, its old worker cannot touch it anymore.
    with pytest.raises(Halt):
        api.update(db, job1)
    with pytest.raises(Halt):
        api.finish(db, job1)
    job3, _ = api.accept(db, t, timeout=0)
    assert job3.id == job1.id
    api.finish(db, job3)
    # Skips jobs gone or no longer running.
    assert activity.re_enqueue_inactive(db, DEFAULT_LAYOUT, t, [job1.id, "gone"]) == []


def test_type_timeouts(db, t):
    assert api.get_type_timeout(db, t) == T1_TIMEOUT
    api.set_type_timeout(db, "t3", 8)
    assert api.get_type_timeout(db, "t3") == 8
    assert "t3" in api.get_types(db) and t in api.get_types(db)
    api.clear_type_timeout(db, "t3")
    assert api.get_type_timeout(db, "t3") is None
    assert "t3" not in api.get_types(db)
    api.set_type_timeout(db, "t4", 0.5)
    assert api.get_type_timeout(db, "t4") == 0.5


def test_calls_join_a_transaction(db, t):
    """Calls given a transaction commit with it, or not at all."""
    tr = db.create_transaction()
    api.add(tr, t, J1, {"a": 1})
    assert api.get_job_state(tr, t, J1) is JobState.PENDING
    tr.cancel()
    with pytest.raises(NotFound):
        api.get_job_state(db, t, J1)

    @fdblayer.transactional
    def add_two(tr):
        api.add(tr, t, J1, {})
        api.add(tr, t, J2, {})

    add_two(db)
    assert sorted(i.id for i in api.get_jobs(db, t)) == [J1, J2]


def test_job_handle_pickles(db, t):
    import pickle

    api.add(db, t, J1, {})
    job, _ = api.accept(db, t)
    again = pickle.loads(pickle.dumps(job))
    assert again == job
    api.finish(db, again)
    err = pickle.loads(pickle.dumps(Halt("gone", job_type=t, job_id=J1)))
    assert isinstance(err, Halt) and (err.job_type, err.job_id, str(err)) == (t, J1, "gone")


def test_pending_count_and_watch(db, t):
    from fdblayer.jobs import pending

    @fdblayer.transactional
    def count_and_watch(tr, max_sched_time=None):
        return (
            pending.pending_count(tr, DEFAULT_LAYOUT, t, max_sched_time),
            pending.watch_pending(tr, DEFAULT_LAYOUT, t),
        )

    count, watch = count_and_watch(db)
    assert count == 0 and not watch.is_ready()
    api.add(db, t, J1, {}, 5)
    api.add(db, t, J2, {}, 50)
    assert watch.wait(10)
    count, watch = count_and_watch(db, 10)
    assert count == 1
    watch.cancel()
    assert count_and_watch(db)[0] == 2


def test_activity_watch_fires_on_update(db, t):
    api.add(db, t, J1, {"n": 1})
    job, _ = api.accept(db, t)
    vs, watch = activity.get_activity_vs_and_watch(db, DEFAULT_LAYOUT, t)
    assert vs == activity.get_activity_vs(db, DEFAULT_LAYOUT, t)
    assert not watch.is_ready()
    api.update(db, job, {"n": 2})
    assert watch.wait(10)
    raw = activity.get_active_since(db, DEFAULT_LAYOUT, t, vs, decode=False)
    assert list(raw) == [J1] and isinstance(raw[J1], bytes)
    assert activity.get_activity_vs(db, DEFAULT_LAYOUT, "no-such-type") is None


def test_accept_deadline_follows_the_injected_clocks(db, t):
    """With max_sched_time past and the monotonic clock jumping, accept gives up at once."""
    ticks = iter(range(0, 10_000, 100))
    with pytest.raises(NotFound):
        api.accept_job(db, t, max_sched_time=5, clock=lambda: 1000.0, monotonic=lambda: float(next(ticks)))


def test_clear_all_empties_the_layer(db, t):
    api.add(db, t, J1, {})
    api.accept(db, t)
    model.clear_all(db, DEFAULT_LAYOUT)
    assert db.get_range(DEFAULT_LAYOUT.prefix, DEFAULT_LAYOUT.prefix + b"\xff") == []


def test_jobs_accepted_and_updated_in_one_transaction_keep_their_own_activity(db):
    """Every versionstamp of one commit is the same: each job's seq and
    ACTIVITY row must still be its own, or a silent worker's jobs after the
    first would never be re-enqueued."""
    import fdblayer
    from fdblayer.jobs import activity, model
    from fdblayer.jobs.validate import MAX_SCHED_TIME
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    api.set_type_timeout(db, "one-tx", 30)
    for i in range(3):
        api.add(db, "one-tx", f"j{i}", {"i": i})

    @fdblayer.transactional
    def accept_three(tr):
        return [model.accept(tr, DEFAULT_LAYOUT, "one-tx", MAX_SCHED_TIME, False)[0] for _ in range(3)]

    held = accept_three(db)
    assert len(activity.get_active_since(db, DEFAULT_LAYOUT, "one-tx", _zero_vs())) == 3

    @fdblayer.transactional
    def update_all(tr):
        return [api.update(tr, job, {"tick": 1}) for job in held]

    update_all(db)
    vs, _ = activity.check_inactive(db, DEFAULT_LAYOUT, "one-tx", None)
    _, reenqueued = activity.check_inactive(db, DEFAULT_LAYOUT, "one-tx", vs)
    assert sorted(reenqueued) == ["j0", "j1", "j2"]
    assert all(api.get_job_state(db, "one-tx", f"j{i}") == api.JobState.PENDING for i in range(3))


def _zero_vs():
    import fdb.tuple

    return fdb.tuple.Versionstamp(b"\x00" * 10, 0)
