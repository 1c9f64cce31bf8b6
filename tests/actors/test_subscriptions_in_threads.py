"""Subscriptions of one process's threads to one job.

The threads of a process share one inbox (one address), where an Erlang
client has one process per waiter: each thread must still be a subscriber
of its own, so that two threads waiting on one job both get its events,
and one thread's ``unsubscribe`` ends only its own. (Within one thread,
subscribing twice gives the same subscription, as couch_jobs does within
one process: ``test_jobs_seed.py::test_subscribe``.)
"""

from __future__ import annotations

import threading

import pytest

from actors import jobs
from actors.jobs import JobState

from .jobs_fixtures import serving_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

T = ("probe-sub-threads", 1)


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    yield from serving_node(tmp_path_factory, "subthreads", T, 60)


def _finish(q, job_id: str) -> None:
    job, _ = jobs.accept(q.db, T, timeout=10)
    assert job.id == job_id
    jobs.finish(q.db, job, {"done": job_id})


def _subscribed_in_threads(q, job_id: str, n: int = 2) -> list:
    """``n`` subscriptions to ``job_id``, each made by a thread of its own."""
    subs: list = [None] * n

    def subscribe(i: int) -> None:
        subs[i] = jobs.subscribe(q.db, T, job_id, node=q.port)[0]

    threads = [threading.Thread(target=subscribe, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert all(subs)
    return subs


def test_two_threads_waiting_on_one_job_both_get_its_end(q):
    jobs.add(q.db, T, "a", {})
    first, second = _subscribed_in_threads(q, "a")
    assert first.ref != second.ref
    got: dict = {}

    def wait(name: str, sub) -> None:
        got[name] = jobs.wait(sub, "finished", timeout=10)

    waiters = [threading.Thread(target=wait, args=item) for item in (("first", first), ("second", second))]
    for waiter in waiters:
        waiter.start()
    _finish(q, "a")
    for waiter in waiters:
        waiter.join(15)
    for name in ("first", "second"):
        assert got[name] is not None, f"the {name} waiter got no event"
        assert got[name][1:3] == ("a", JobState.FINISHED)


def test_one_unsubscribe_leaves_the_other_subscription(q):
    jobs.add(q.db, T, "b", {})
    gone, kept = _subscribed_in_threads(q, "b")
    jobs.unsubscribe(gone)
    _finish(q, "b")
    event = jobs.wait(kept, "finished", timeout=10)
    assert event is not None
    assert event[1:3] == ("b", JobState.FINISHED)


def test_threads_subscribing_first_at_once_share_one_inbox(q):
    """Found by CI (session 31, 1 run in 2,050 tests): the first two threads
    of a process to subscribe, at once, each made an inbox (an endpoint of
    its own) and the second replaced the first in the process's table; the
    first thread's events went to the inbox no wait read, and it waited out
    its timeout."""
    import os

    from actors.queue import client as queue_client

    queue_client._inboxes.pop((os.getpid(), q.port), None)  # noqa: SLF001 - as in a fresh process
    start = threading.Barrier(8)
    made: list = []

    def first_use() -> None:
        start.wait()
        made.append(queue_client._inbox(queue_client._client(q.port)))  # noqa: SLF001

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert len(made) == 8 and len({id(inbox) for inbox in made}) == 1
