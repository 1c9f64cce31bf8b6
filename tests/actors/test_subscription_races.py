"""A subscription to a job that finishes while subscribe() is under way.

``actors.jobs.subscribe`` reads the job (running), then asks the jobs server
for the notifier and sends ``Subscribe``. If the job finishes in between and
the notifier has already handled the type monitor's ``TypeUpdated`` for that
finish (with no subscription for the job yet), no later update of the type
tells the new subscription: the notifier reads the job when the
subscription arrives and reports what changed since the client's read.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from actors import jobs
from actors.jobs import JobState
from actors.queue import client as queue_client

from .jobs_fixtures import serving_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

T = ("probe-sub-race", 1)


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    yield from serving_node(tmp_path_factory, "subrace", T, 60)


def test_finish_between_read_and_subscribe_is_reported(q, monkeypatch):
    """Deterministic: the job finishes right after subscribe() read it as running
    (a real worker's finish in another thread, 0.3 s before Subscribe reaches the
    notifier, i.e. a slow client or a busy node). The subscriber must still get
    ``finished`` (or subscribe must say it is finished)."""
    jobs.add(q.db, T, "det-1", {"v": 1})
    job, _ = jobs.accept(q.db, T, timeout=5)

    real_current = queue_client._current

    def current_then_finish(db, job_type, job_id):
        info = real_current(db, job_type, job_id)
        assert info.state is JobState.RUNNING
        jobs.finish(q.db, job, {"v": "done"})  # the worker finishes now
        time.sleep(0.3)  # the notifier handles this finish's TypeUpdated before Subscribe arrives
        return info

    monkeypatch.setattr(queue_client, "_current", current_then_finish)
    sub, state, _ = jobs.subscribe(q.db, T, "det-1", node=q.port)
    monkeypatch.setattr(queue_client, "_current", real_current)
    assert sub is not None and state is JobState.RUNNING
    try:
        assert jobs.get_job_state(q.db, T, "det-1") is JobState.FINISHED
        event = jobs.wait(sub, "finished", timeout=10)
        assert event is not None, "the job finished but its subscription never said so"
    finally:
        jobs.unsubscribe(sub)


def test_finish_racing_subscribe_unpatched(q):
    """Statistical, no patching: a worker thread finishes the job 0-15 ms after the
    subscriber starts subscribing; nothing else happens on the type afterwards."""
    rng = random.Random(7)
    misses = []
    n = 60
    for i in range(n):
        job_id = f"race-{i}"
        jobs.add(q.db, T, job_id, {"i": i})
        job, _ = jobs.accept(q.db, T, timeout=5)
        time.sleep(0.15)  # let the accept's notification pass (holdoff 50 ms)
        delay = rng.uniform(0, 0.015)

        def finisher(job=job, delay=delay):
            time.sleep(delay)
            jobs.finish(q.db, job, {"done": True})

        t = threading.Thread(target=finisher)
        t.start()
        sub, state, _ = jobs.subscribe(q.db, T, job_id, node=q.port)
        t.join()
        if sub is None:
            continue
        event = jobs.wait(sub, "finished", timeout=3)
        jobs.unsubscribe(sub)
        if event is None:
            misses.append((job_id, round(delay * 1000, 1), state.value))
    assert not misses, f"{len(misses)}/{n} subscriptions never reported finished: {misses[:10]}"
