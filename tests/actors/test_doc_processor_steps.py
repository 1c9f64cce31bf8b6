"""The doc processor's lease steps on a bare instance (no actors), with its
clock and store calls replaced: when a replaced document may run again, and
the Reschedule that a restored fence owes the scheduler."""

from __future__ import annotations

import math
import time
import types

from actors.docs import processor
from actors.docs.processor import REPLACED_AFTER, DocProcessor, Owned
from actors.scheduler.fence import LeaseFence
from actors.scheduler.host import KILL_GRACE
from actors.scheduler.job import STOP_GRACE
from actors.scheduler.protocol import RemoveJobs, Reschedule
from fdblayer import docs as store_docs
from fdblayer.docs import leases as doc_leases


class _Clock:
    """The processor's ``time`` module, advanced by the stubs."""

    def __init__(self) -> None:
        self.wall, self.mono = 1_700_000_000.0, 1000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def perf_counter(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def bare_processor(fence: LeaseFence, clock: _Clock) -> tuple[DocProcessor, list, list]:
    """A processor with what the lease steps use; returns it, the calls it
    made to the scheduler ``(wall time, message, callback)`` and the
    bring-forwards it wrote ``(job ids, due)``."""
    p = object.__new__(DocProcessor)
    calls: list = []
    brought: list = []
    p.db = None
    p.timeout = 30.0
    p.store_timeout = 10.0
    p.owned = {}
    p.sched = "sched"
    p._removing = set()
    p._replaced = {}
    p._reschedule_owed = False
    p.fence = fence
    p.counters = dict.fromkeys(("accepted", "renewed", "renew_rounds", "lost", "given_up"), 0)
    p.renew_ms = 0.0
    p.call_async = lambda to, msg, cb, timeout: calls.append((clock.time(), msg, cb))  # type: ignore[method-assign]
    p._bring_forward_tx = lambda db, ids, due: brought.append((list(ids), due))
    return p, calls, brought


def lease(name: str) -> store_docs.Lease:
    job = types.SimpleNamespace(id=f"_replicator/{name}")
    return store_docs.Lease(job, "_replicator", name, "1-x")


def test_a_replaced_document_may_run_again_only_once_its_old_run_was_surely_stopped(monkeypatch):
    """The renewal that finds a document replaced puts it back due an owner
    timeout later (a bound the lease fence enforces even if nothing else is
    heard); once the scheduler confirms the old job's removal, however long
    the renewal round took, it is brought forward to that confirmation plus
    the run's stop and kill grace. A replaced document never added here is
    brought forward at once."""
    clock = _Clock()
    monkeypatch.setattr(processor, "time", clock)
    p, calls, brought = bare_processor(LeaseFence(None), clock)
    running, unadded = lease("a"), lease("b")
    p.owned[running.job.id] = Owned(running, {"id": "job-a"}, added_to="sched", renewed_at=clock.mono)
    p.owned[unadded.job.id] = Owned(unadded, {"id": "job-b"}, renewed_at=clock.mono)
    seen = {}

    def slow_renew(db, leases, states, done, now, timeout=None, not_before=None):
        seen["asked_at"], seen["not_before"] = now, not_before
        clock.advance(2.5)  # a renewal round of a few batches
        return {held.job.id: (doc_leases.CHANGED, None) for held in leases}

    monkeypatch.setattr(doc_leases, "renew", slow_renew)
    p._renew_all({}, set())
    assert seen["not_before"] >= seen["asked_at"] + p.timeout
    assert brought == [([unadded.job.id], int(clock.wall))], "no run of it here: due at once"
    ((_, msg, answered),) = [c for c in calls if isinstance(c[1], RemoveJobs)]
    assert msg.job_ids == ["job-a"]
    clock.advance(4.0)  # the scheduler was busy
    answered(None, None)
    ((ids, due),) = brought[1:]
    assert ids == [running.job.id] and due >= clock.wall + STOP_GRACE + KILL_GRACE
    assert due == math.ceil(clock.wall + REPLACED_AFTER) and not p._replaced


def test_a_fence_restored_before_the_scheduler_is_known_still_asks_for_a_reschedule(tmp_path):
    """A restarted processor renews the documents it takes back before it
    has looked the scheduler up; if its fence had run out, the Reschedule
    that starts the jobs left pending is sent once the scheduler is known,
    not at the scheduler's next interval."""
    fence = LeaseFence(str(tmp_path / "fence"))
    fence.set(time.monotonic() - 5)  # the previous incarnation's fence, run out
    p, calls, _ = bare_processor(fence, _Clock())
    p.sched = None
    held = lease("a")
    p.owned[held.job.id] = Owned(held, {"id": "job-a"}, added_to="taken_back", renewed_at=time.monotonic())
    p._move_fence()  # _take_back's renewal, in _setup
    assert calls == []
    p.sched = "sched"  # the first tick's _observe finds the scheduler
    p._move_fence()  # its renewal
    assert [m for _, m, _ in calls if isinstance(m, Reschedule)], "the restored fence was never told to the scheduler"
    p._move_fence()
    assert len([m for _, m, _ in calls if isinstance(m, Reschedule)]) == 1, "owed once"
