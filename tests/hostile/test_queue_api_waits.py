"""Hostile waits of the queue API: timeouts and scheduled times of years wait, never overflow.

A wait timeout is "None (forever) or a finite number of seconds >= 0"
(``fdblayer.jobs.validate.check_timeout``) and ``max_sched_time`` any
64-bit time. Timeouts beyond what ``threading`` or Thespian can wait
(``threading.TIMEOUT_MAX``, about 292 years; select()'s 24 days) and
``max_sched_time`` at or beyond ``MAX_SCHED_TIME`` once raised
``OverflowError``; ``accept``, ``subscribe`` and ``wait`` now wait.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import fdblayer
from actors import jobs
from fdblayer.jobs.validate import MAX_SCHED_TIME

from tests.actors.jobs_fixtures import QueueNode

from .store import StoreFile

pytestmark = pytest.mark.timeout(120)

T = "pending-hostile"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    store = StoreFile(tmp_path_factory.mktemp("pending-queue") / "store.db")
    handle = fdblayer.open(store.url)
    jobs.set_type_timeout(handle, T, 30)
    try:
        yield handle
    finally:
        handle.close()
        store.close()


def _accept_in_thread(db, **kwargs) -> dict:
    """Call ``accept`` in a thread while no job is pending, add one, and
    check that accept was called before the job existed and returned after
    (so it waited, whatever the scheduling of the threads)."""
    out: dict = {}
    entered = threading.Event()

    def run() -> None:
        try:
            out["entered"] = time.monotonic()
            entered.set()
            out["job"] = jobs.accept(db, T, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["error"] = exc
        out["returned"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert entered.wait(10), "the accepting thread did not start"
    time.sleep(0.05)  # let it reach its wait (if it has not, it finds the job at once: still correct)
    assert "returned" not in out, f"accept returned with no job pending: {out}"
    added = time.monotonic()
    jobs.add(db, T, "late", {"n": 1})
    thread.join(10)
    assert not thread.is_alive(), "accept did not take the job added while it waited"
    assert out["entered"] < added <= out["returned"], out
    return out


@settings(max_examples=5, deadline=None, database=None)
@given(timeout=st.floats(min_value=threading.TIMEOUT_MAX, allow_infinity=False))
@example(timeout=1e10)
@example(timeout=1e300)
def test_accept_with_a_huge_finite_timeout_waits_for_a_job(db, timeout) -> None:
    try:
        out = _accept_in_thread(db, timeout=timeout)
        assert "error" not in out, f"accept(timeout={timeout!r}) raised {out.get('error')!r}"
        assert out["job"][0].id == "late"
    finally:
        try:
            jobs.remove(db, T, "late")
        except jobs.NotFound:
            pass


@settings(max_examples=5, deadline=None, database=None)
@given(when=st.integers(MAX_SCHED_TIME, 2**63 - 1))
@example(when=MAX_SCHED_TIME)
def test_accept_with_a_far_max_sched_time_waits_for_a_job(db, when) -> None:
    try:
        out = _accept_in_thread(db, max_sched_time=when)
        assert "error" not in out, f"accept(max_sched_time={when}) raised {out.get('error')!r}"
        assert out["job"][0].id == "late"
    finally:
        try:
            jobs.remove(db, T, "late")
        except jobs.NotFound:
            pass


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    store = StoreFile(tmp_path_factory.mktemp("pending-node") / "store.db")
    q = QueueNode(store.url)
    try:
        jobs.set_type_timeout(q.db, "w", 30)
        q.wait_tree_up(n_types=1)
        jobs.add(q.db, "w", "j", {})
        yield q
    finally:
        q.stop()
        store.close()


@pytest.mark.parametrize("timeout", [1e10, 1e14, 1e300], ids=repr)
def test_subscribe_and_wait_take_a_huge_finite_timeout(node, timeout) -> None:
    sub, state, _ = jobs.subscribe(node.db, "w", "j", node=node.port, timeout=timeout)
    try:
        finished = []

        def finish_later() -> None:
            time.sleep(0.3)
            job, _ = jobs.accept(node.db, "w", timeout=5)
            jobs.finish(node.db, job)
            finished.append(time.monotonic())

        thread = threading.Thread(target=finish_later, daemon=True)
        thread.start()
        event = jobs.wait(sub, "finished", timeout=timeout)
        returned = time.monotonic()
        thread.join(10)
        assert event is not None and event[:3] == ("w", "j", "finished")
        assert finished and finished[0] <= returned, "wait returned before the job finished"
    finally:
        if sub is not None:
            jobs.unsubscribe(sub)
        jobs.add(node.db, "w", "j", {})
