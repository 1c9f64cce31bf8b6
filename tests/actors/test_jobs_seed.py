"""The seed's couch_jobs_tests cases that need the actors, end to end on a real node.

One node per module (the queue tree on a SQLite file in a temp dir). Like
the seed's per-test setup/teardown (``application:start/stop`` and
``clear_jobs``), each test starts from a stopped ``couch_jobs_sup``, an
empty store, T1 = ("t1", 1024) with timeout 2 and T2 = 42 with timeout 3,
and a freshly started ``couch_jobs_sup``. Workers of accept_blocking are
real processes. Nothing sleeps to synchronise: waits have deadlines.
"""

from __future__ import annotations

import os
import selectors
import signal
import time

import pytest

from actors import jobs
from actors.jobs import JobState
from actors.names import ACTIVITY_MONITOR_SUP, JOBS_SERVER, NOTIFIER_SUP
from supervision import CallFailed, NoProc

from .jobs_fixtures import (
    QueueNode,
    clear_store,
    kill_worker,
    pid_alive,
    read_line,
    spawn_worker,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

T1, T2 = ("t1", 1024), 42
T1_TIMEOUT, T2_TIMEOUT = 2, 3
J1, J2 = "j1", "j2"


@pytest.fixture(scope="module")
def qnode(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('seed')}/store.db"
    node = QueueNode(url)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def q(qnode):
    """The seed's setup: jobs cleared, T1 and T2 declared, the tree up with their actors.

    (Tests that crash actors restart couch_jobs_sup themselves, as the seed's
    restart_app does, so the supervisor's restart intensity starts afresh.)
    """
    clear_store(qnode.db)
    jobs.set_type_timeout(qnode.db, T1, T1_TIMEOUT)
    jobs.set_type_timeout(qnode.db, T2, T2_TIMEOUT)
    qnode.wait_tree_up(n_types=2)
    return qnode


def restart_app(q: QueueNode) -> None:
    q.restart_app()
    q.wait_tree_up(n_types=2)


def wait_dead(pid: int, what: str) -> None:
    wait_until(lambda: not pid_alive(pid), 10, f"{what} (pid {pid}) to exit")


# ---------------------------------------------------------------- the server


def test_type_timeouts_and_server(q):
    q.force_check_types()
    assert jobs.get_type_timeout(q.db, T1) == T1_TIMEOUT
    assert len(q.kids(ACTIVITY_MONITOR_SUP)) == 2
    assert len(q.kids(NOTIFIER_SUP)) == 2
    assert q.notifier_for(T1) is not None

    jobs.set_type_timeout(q.db, "t3", 8)
    q.force_check_types()
    assert len(q.kids(ACTIVITY_MONITOR_SUP)) == 3
    assert len(q.kids(NOTIFIER_SUP)) == 3

    jobs.clear_type_timeout(q.db, "t3")
    q.force_check_types()
    assert len(q.kids(ACTIVITY_MONITOR_SUP)) == 2
    assert len(q.kids(NOTIFIER_SUP)) == 2
    with pytest.raises(jobs.NotFound):
        q.notifier_for("t3")
    assert jobs.get_type_timeout(q.db, "t3") is None


def test_dead_notifier_restarts_jobs_server(q):
    q.force_check_types()
    server_pid = q.pid(JOBS_SERVER)
    notifier_pids = q.kid_pids(NOTIFIER_SUP)
    os.kill(notifier_pids[0], signal.SIGKILL)
    wait_dead(server_pid, "the jobs server")
    pids = q.wait_tree_up(n_types=2)
    assert pids["server"] != server_pid
    assert not set(q.kid_pids(NOTIFIER_SUP)) & set(notifier_pids)


@pytest.mark.slow
def test_bad_messages_restart_couch_jobs_server(q):
    restart_app(q)
    pid1 = q.pid(JOBS_SERVER)
    q.client.cast(JOBS_SERVER, "bad_cast")
    wait_dead(pid1, "the jobs server after a bad cast")
    restart_app(q)

    pid2 = q.pid(JOBS_SERVER)
    with pytest.raises((CallFailed, NoProc)):
        q.client.call(JOBS_SERVER, "bad_call", 30)
    wait_dead(pid2, "the jobs server after a bad call")
    restart_app(q)

    pid3 = q.pid(JOBS_SERVER)
    q.client.send(JOBS_SERVER, "a_random_message")
    wait_dead(pid3, "the jobs server after a bad info message")
    restart_app(q)
    assert len({pid1, pid2, pid3, q.pid(JOBS_SERVER)}) == 4


@pytest.mark.slow
@pytest.mark.parametrize("sup", [NOTIFIER_SUP, ACTIVITY_MONITOR_SUP], ids=["notifier", "activity_monitor"])
def test_bad_messages_restart_per_type_actor(q, sup):
    """bad_messages_restart_notifier / bad_messages_restart_activity_monitor."""
    restart_app(q)

    def victim():
        return q.kids(sup)[0].addr

    addr = victim()
    pid = q.pid(addr)
    q.client.cast(addr, "bad_cast")
    wait_dead(pid, "the actor after a bad cast")
    restart_app(q)

    addr = victim()
    pid = q.pid(addr)
    with pytest.raises((CallFailed, NoProc)):
        q.client.call(addr, "bad_call", 30)
    wait_dead(pid, "the actor after a bad call")
    restart_app(q)

    addr = victim()
    pid = q.pid(addr)
    q.client.send(addr, "a_bad_message")
    wait_dead(pid, "the actor after a bad info message")
    restart_app(q)


# ---------------------------------------------------------------- accept


def nothing_printed(proc, seconds: float) -> bool:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        return not sel.select(seconds)
    finally:
        sel.unregister(proc.stdout)


def test_accept_blocking(q):
    w1 = spawn_worker("accept", q.store_url, T1)
    w2 = None
    try:
        assert "ready" in read_line(w1)
        jobs.add(q.db, T1, J1, {})
        got = read_line(w1, 10)
        assert (got["id"], got["data"]) == (J1, {})

        # As in the seed, the second acceptor starts after the first returned
        # (started together, either could have taken J1).
        w2 = spawn_worker("accept", q.store_url, T1)
        assert "ready" in read_line(w2)
        assert nothing_printed(w2, 0.5)  # the seed's 500 ms "timeout"
        jobs.add(q.db, T1, J2, {})
        got = read_line(w2, 10)
        assert (got["id"], got["data"]) == (J2, {})
    finally:
        kill_worker(w1)
        if w2 is not None:
            kill_worker(w2)


# ---------------------------------------------------------------- subscriptions


def test_subscribe(q):
    db = q.db
    jobs.add(db, T1, J1, {"z": 1})

    with pytest.raises(jobs.NotFound):
        jobs.subscribe(db, "xyz", J1, node=q.port)
    with pytest.raises(jobs.NotFound):
        jobs.subscribe(db, T1, "j5", node=q.port)

    res0 = jobs.subscribe(db, T1, J1, node=q.port)
    sub0, state, data = res0
    assert sub0 is not None and (state, data) == (JobState.PENDING, {"z": 1})
    assert jobs.subscribe(db, T1, J1, node=q.port) == res0
    assert jobs.unsubscribe(sub0) is None

    sub, state, data = jobs.subscribe(db, T1, J1, node=q.port)
    assert (state, data) == (JobState.PENDING, {"z": 1})

    job, _ = jobs.accept(db, T1, timeout=5)
    assert jobs.wait(sub, timeout=5) == (T1, J1, JobState.RUNNING, {"z": 1})

    # intermediate running updates are reported
    jobs.update(db, job, {"z": 2})
    assert jobs.wait(sub, timeout=5) == (T1, J1, JobState.RUNNING, {"z": 2})

    jobs.finish(db, job, {"z": 3})
    assert jobs.wait(sub, JobState.FINISHED, timeout=5) == (T1, J1, JobState.FINISHED, {"z": 3})
    assert jobs.wait(sub, timeout=0.05) is None

    assert jobs.subscribe(db, T1, J1, node=q.port) == (None, JobState.FINISHED, {"z": 3})

    jobs.remove(db, T1, J1)
    with pytest.raises(jobs.NotFound):
        jobs.subscribe(db, T1, J1, node=q.port)


def test_subscribe_wait_multiple(q):
    db = q.db
    jobs.add(db, T1, J1, {})
    jobs.add(db, T1, J2, {})
    s1, state1, data1 = jobs.subscribe(db, T1, J1, node=q.port)
    s2, state2, data2 = jobs.subscribe(db, T1, J2, node=q.port)
    assert (state1, data1, state2, data2) == (JobState.PENDING, {}, JobState.PENDING, {})
    subs = [s1, s2]

    pjob1, _ = jobs.accept(db, T1, timeout=5)
    assert jobs.wait(subs, timeout=5)[2] == JobState.RUNNING
    assert jobs.wait(subs, timeout=0.05) is None

    pjob2, _ = jobs.accept(db, T1, timeout=5)
    assert jobs.wait(subs, timeout=5)[2] == JobState.RUNNING
    assert jobs.wait(subs, timeout=0.05) is None

    jobs.update(db, pjob1, {"q": 5})
    jobs.update(db, pjob2, {"r": 6})
    got = [jobs.wait(subs, timeout=5), jobs.wait(subs, timeout=5)]
    assert all(g is not None and g[2] == JobState.RUNNING for g in got)
    assert sorted(g[1] for g in got) == sorted([pjob1.id, pjob2.id])

    jobs.finish(db, pjob1)
    event = jobs.wait(subs, JobState.FINISHED, timeout=5)
    assert event is not None and event[1:] == (pjob1.id, JobState.FINISHED, {"q": 5})
    assert jobs.wait(subs, JobState.FINISHED, timeout=0.05) is None

    # unsubscribe flushes the finished event of the second job
    jobs.finish(db, pjob2)
    jobs.unsubscribe(s1)
    jobs.unsubscribe(s2)
    assert jobs.wait(subs, JobState.FINISHED, timeout=0.05) is None


def test_enqueue_inactive(q):
    """With a 0.5 s type timeout, not the seed's 2 s."""
    t, timeout = "short", 0.5
    jobs.set_type_timeout(q.db, t, timeout)
    q.force_check_types()

    jobs.add(q.db, t, J1, {"y": 1})
    job, _ = jobs.accept(q.db, t, timeout=5)
    start = time.monotonic()
    sub, state, data = jobs.subscribe(q.db, t, J1, node=q.port)
    assert (state, data) == (JobState.RUNNING, {"y": 1})
    assert jobs.wait(sub, JobState.PENDING, timeout=3 * timeout + 5) == (t, J1, JobState.PENDING, {"y": 1})
    assert time.monotonic() - start >= timeout * 0.9
    assert jobs.get_job_state(q.db, t, J1) == JobState.PENDING

    # the old worker's lock is stale now
    with pytest.raises(jobs.Halt):
        jobs.update(q.db, job)
    with pytest.raises(jobs.Halt):
        jobs.finish(q.db, job)
