"""actors.jobs on a real node: subscriptions from inside an actor, and what
subscribing to a finished job gives.

One node per module. Bad input to every public call of actors.jobs is
tests/hostile/test_queue_api.py's (one suite for that surface).
"""

from __future__ import annotations


import pytest

from actors import jobs
from actors.jobs import JobState
from supervision import ChildSpec

from .jobs_fixtures import QueueNode, SubscriberActor, pid_alive, serving_node, wait_until

pytestmark = pytest.mark.timeout(120)

T = ("api", 7)


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    yield from serving_node(tmp_path_factory, "api", T, 30)


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


# ---------------------------------------------------------------- subscribing to a finished job


def test_waiting_on_the_none_subscribe_returns_for_a_finished_job_says_why(q):
    jobs.set_type_timeout(q.db, "done-sub", 5)
    jobs.add(q.db, "done-sub", "j", {"a": 1})
    job, _ = jobs.accept(q.db, "done-sub", timeout=0)
    jobs.finish(q.db, job, {"b": 2})
    sub, state, data = jobs.subscribe(q.db, "done-sub", "j", node=q.port)
    assert (sub, state, data) == (None, jobs.JobState.FINISHED, {"b": 2})
    with pytest.raises(jobs.InvalidArgument, match="subscribe returns None for a job that had already finished"):
        jobs.wait(sub, "finished", timeout=1)
