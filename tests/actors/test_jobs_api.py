"""actors.jobs on a real node: subscriptions from inside an actor, and bad input
to every public entry (the named error, and the store unchanged).

One node per module. Bad-input cases dump every key of the store before and
after the call (``get_range`` over everything) and assert equality.
"""
from __future__ import annotations

import math

import pytest

from actors import jobs
from actors.jobs import Job, JobState
from supervision import ChildSpec

from .jobs_fixtures import QueueNode, SubscriberActor, dump, pid_alive, wait_until

pytestmark = pytest.mark.timeout(120)

T = ("api", 7)


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('api')}/store.db"
    node = QueueNode(url)
    try:
        jobs.set_type_timeout(node.db, T, 30)
        node.wait_tree_up(n_types=1)
        yield node
    finally:
        node.stop()


# ---------------------------------------------------------------- client actors


def start_subscriber(q: QueueNode, name: str):
    spec = ChildSpec(name, SubscriberActor, {"store": q.store_url}, restart="temporary")
    return q.client.start_child(q.client.node, spec)


def test_subscribe_from_inside_an_actor(q):
    actor = start_subscriber(q, "sub-actor-1")
    jobs.add(q.db, T, "ca1", {"v": 1})
    ref, state, data = q.client.call(actor, ("subscribe", T, "ca1"), 10)
    assert ref and (state, data) == ("pending", {"v": 1})

    job, _ = jobs.accept(q.db, T, timeout=5)
    wait_until(lambda: ("ca1", "running", {"v": 1}) in q.client.call(actor, "events"), 10, "a running event")
    jobs.update(q.db, job, {"v": 2})
    wait_until(lambda: ("ca1", "running", {"v": 2}) in q.client.call(actor, "events"), 10, "a running update")
    jobs.finish(q.db, job, {"v": 3})
    wait_until(lambda: ("ca1", "finished", {"v": 3}) in q.client.call(actor, "events"), 10, "a finished event")
    assert [e[1] for e in q.client.call(actor, "events")] == ["running", "running", "finished"]

    # a finished job answers at once; unknown jobs and types are NotFound
    assert q.client.call(actor, ("subscribe", T, "ca1")) == (None, "finished", {"v": 3})
    assert isinstance(q.client.call(actor, ("subscribe", T, "nope")), jobs.NotFound)
    assert isinstance(q.client.call(actor, ("subscribe", "no-type", "ca1")), jobs.NotFound)
    assert isinstance(q.client.call(actor, ("subscribe", 1.5, "ca1")), jobs.InvalidArgument)
    q.client.terminate_child(q.client.node, "sub-actor-1")


def test_a_dead_subscriber_actor_is_dropped(q):
    notifier = q.notifier_for(T)
    notifier_pid = q.pid(notifier)
    actor = start_subscriber(q, "sub-actor-2")
    jobs.add(q.db, T, "ca2", {})
    q.client.call(actor, ("subscribe", T, "ca2"), 10)
    actor_pid = q.pid(actor)
    q.client.terminate_child(q.client.node, "sub-actor-2")
    wait_until(lambda: not pid_alive(actor_pid), 10, "the subscriber actor to exit")

    # events for the dead subscriber go nowhere; the notifier lives on and serves others
    sub, _, _ = jobs.subscribe(q.db, T, "ca2", node=q.port)
    job, _ = jobs.accept(q.db, T, timeout=5)
    assert jobs.wait(sub, timeout=10)[2] == JobState.RUNNING
    jobs.finish(q.db, job)
    assert jobs.wait(sub, JobState.FINISHED, timeout=10) is not None
    assert q.pid(notifier) == notifier_pid


# ---------------------------------------------------------------- bad input


@pytest.fixture
def store(q):
    """The shared store with a pending job ("p") and a running job ("r") of T."""
    for job_id in ("p", "r"):
        try:
            jobs.remove(q.db, T, job_id)
        except jobs.NotFound:
            pass
    jobs.add(q.db, T, "r", {"x": 1})
    job, _ = jobs.accept(q.db, T, timeout=5)
    jobs.add(q.db, T, "p", {"x": 2}, 10**9)
    sub, _, _ = jobs.subscribe(q.db, T, "p", node=q.port)
    yield q.db, job, sub
    jobs.unsubscribe(sub)


def unchanged(db, call, error):
    before = dump(db)
    with pytest.raises(error) as info:
        call()
    assert dump(db) == before
    assert isinstance(info.value, jobs.JobsError) and str(info.value)
    return info.value


BAD_TYPES = [None, 1.5, True, b"t", [], ("t", None), {"t"}]
BAD_IDS = [None, 1, b"j", "", ("j",)]
LONG_ID = "j" * 10_001
UNENCODABLE = [{1: 2}, {"a": {1, 2}}, {"a": b"x"}, {"a": object()}, {"a": math.nan}, {"a": 2**64}]
TOO_BIG = {"a": "x" * 100_001}


@pytest.mark.parametrize("bad", BAD_TYPES, ids=repr)
def test_bad_type_everywhere(q, store, bad):
    db, job, _ = store
    calls = [
        lambda: jobs.add(db, bad, "j", {}),
        lambda: jobs.remove(db, bad, "p"),
        lambda: jobs.get_job_data(db, bad, "p"),
        lambda: jobs.get_job_state(db, bad, "p"),
        lambda: jobs.get_job(db, bad, "p"),
        lambda: jobs.accept(db, bad, timeout=0),
        lambda: jobs.set_type_timeout(db, bad, 5),
        lambda: jobs.clear_type_timeout(db, bad),
        lambda: jobs.get_type_timeout(db, bad),
        lambda: jobs.update(db, Job(bad, "r", job.lock)),
        lambda: jobs.finish(db, Job(bad, "r", job.lock)),
        lambda: jobs.resubmit(db, Job(bad, "r", job.lock)),
        lambda: jobs.subscribe(db, bad, "p", node=q.port),
    ]
    if bad is not None:  # get_jobs(db, None) lists every type
        calls.append(lambda: jobs.get_jobs(db, bad))
    for call in calls:
        unchanged(db, call, jobs.InvalidArgument)


@pytest.mark.parametrize("bad", BAD_IDS + [LONG_ID], ids=lambda b: repr(b)[:20])
def test_bad_or_oversized_id_everywhere(q, store, bad):
    db, job, _ = store
    for call in [
        lambda: jobs.add(db, T, bad, {}),
        lambda: jobs.remove(db, T, bad),
        lambda: jobs.get_job_data(db, T, bad),
        lambda: jobs.get_job_state(db, T, bad),
        lambda: jobs.subscribe(db, T, bad, node=q.port),
    ] + ([] if bad is LONG_ID else [
        lambda: jobs.update(db, Job(T, bad, job.lock)),
        lambda: jobs.finish(db, Job(T, bad, job.lock)),
    ]):
        unchanged(db, call, jobs.InvalidArgument)


@pytest.mark.parametrize("call", ["update", "finish"])
def test_oversized_id_in_a_job_handle(q, store, call):
    db, job, _ = store
    unchanged(db, lambda: getattr(jobs, call)(db, Job(T, LONG_ID, job.lock)), jobs.InvalidArgument)


@pytest.mark.parametrize("data", UNENCODABLE + [TOO_BIG], ids=lambda d: repr(d)[:20])
def test_unencodable_or_oversized_data(q, store, data):
    db, job, _ = store
    for call in [
        lambda: jobs.add(db, T, "new", data),
        lambda: jobs.add(db, T, "p", data),
        lambda: jobs.update(db, job, data),
        lambda: jobs.finish(db, job, data),
    ]:
        unchanged(db, call, jobs.EncodingError)


def test_unknown_type_and_job(q, store):
    db, _, _ = store
    err = unchanged(db, lambda: jobs.add(db, "nope", "j", {}), jobs.NoTypeTimeout)
    assert err.job_type == "nope"
    unchanged(db, lambda: jobs.subscribe(db, "nope", "p", node=q.port), jobs.NotFound)
    unchanged(db, lambda: jobs.subscribe(db, T, "missing", node=q.port), jobs.NotFound)
    unchanged(db, lambda: jobs.remove(db, T, "missing"), jobs.NotFound)
    unchanged(db, lambda: jobs.get_job_state(db, T, "missing"), jobs.NotFound)
    unchanged(db, lambda: jobs.accept(db, "nope", timeout=0), jobs.NoTypeTimeout)  # as add: at once, never a wait
    assert jobs.get_type_timeout(db, "nope") is None


def test_bad_handles_and_options(q, store):
    db, job, _ = store
    for bad in ["r", None, {"type": T, "id": "r"}, Job(T, "r", "")]:
        unchanged(db, lambda: jobs.update(db, bad), jobs.InvalidArgument)
        unchanged(db, lambda: jobs.finish(db, bad), jobs.InvalidArgument)
        unchanged(db, lambda: jobs.resubmit(db, bad), jobs.InvalidArgument)
    with pytest.raises(jobs.InvalidArgument):
        jobs.is_resubmitted("r")
    for kwargs in [{"timeout": -1}, {"timeout": "1"}, {"no_schedule": True, "max_sched_time": 5}]:
        unchanged(db, lambda: jobs.accept(db, T, **kwargs), jobs.InvalidArgument)
    unchanged(db, lambda: jobs.add(db, T, "j", {}, -1), jobs.InvalidArgument)
    unchanged(db, lambda: jobs.add(db, T, "j", []), jobs.InvalidArgument)
    for bad in [0, -1, math.nan, "5", None]:
        unchanged(db, lambda: jobs.set_type_timeout(db, "t9", bad), jobs.InvalidArgument)
    for bad_db in [None, "sqlite:///x.db", object()]:
        unchanged(db, lambda: jobs.add(bad_db, T, "j", {}), jobs.InvalidArgument)
        unchanged(db, lambda: jobs.subscribe(bad_db, T, "p", node=q.port), jobs.InvalidArgument)
    # a stale lock is Halt, and changes nothing
    unchanged(db, lambda: jobs.update(db, Job(T, "r", "0" * 32)), jobs.Halt)


def test_bad_subscription_arguments(q, store):
    db, _, sub = store
    for bad in ["abc", True, 1.5]:
        unchanged(db, lambda: jobs.subscribe(db, T, "p", node=bad), jobs.InvalidArgument)
    for bad in ["x", None, ("ref", T, "p")]:
        unchanged(db, lambda: jobs.unsubscribe(bad), jobs.InvalidArgument)
    for bad in [[], "abc", ["abc"], [sub, "x"]]:
        unchanged(db, lambda: jobs.wait(bad, timeout=0.01), jobs.InvalidArgument)
    for bad in [-1, "1", True]:
        unchanged(db, lambda: jobs.wait(sub, timeout=bad), jobs.InvalidArgument)


def test_wait_rejects_an_unknown_state(q, store):
    db, _, sub = store
    unchanged(db, lambda: jobs.wait(sub, "bogus", timeout=0.01), jobs.InvalidArgument)


def test_wait_rejects_a_nan_timeout(q, store):
    db, _, sub = store
    unchanged(db, lambda: jobs.wait(sub, timeout=math.nan), jobs.InvalidArgument)


def test_wait_rejects_none(q, store):
    db, _, _ = store
    unchanged(db, lambda: jobs.wait(None, timeout=0.01), jobs.InvalidArgument)


@pytest.mark.parametrize("bad", [-1, "1"], ids=repr)
def test_subscribe_rejects_a_bad_timeout(q, store, bad):
    db, _, _ = store
    unchanged(db, lambda: jobs.subscribe(db, T, "p", node=q.port, timeout=bad), jobs.InvalidArgument)


def test_waiting_on_the_none_subscribe_returns_for_a_finished_job_says_why(q):
    jobs.set_type_timeout(q.db, "done-sub", 5)
    jobs.add(q.db, "done-sub", "j", {"a": 1})
    job, _ = jobs.accept(q.db, "done-sub", timeout=0)
    jobs.finish(q.db, job, {"b": 2})
    sub, state, data = jobs.subscribe(q.db, "done-sub", "j", node=q.port)
    assert (sub, state, data) == (None, jobs.JobState.FINISHED, {"b": 2})
    with pytest.raises(jobs.InvalidArgument, match="subscribe returns None for a job that had already finished"):
        jobs.wait(sub, "finished", timeout=1)
