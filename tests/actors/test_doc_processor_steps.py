"""The doc processor's lease steps on a bare instance (no actors), with its
clock and store calls replaced: when a replaced document may run again, and
the Reschedule that a restored fence owes the scheduler."""

from __future__ import annotations

import math
import time
import types

import pytest

from actors.docs import processor, renewals
from actors.docs.processor import DocProcessor
from actors.docs.renewals import REPLACED_AFTER, Owned
from actors.scheduler.fence import LeaseFence
from actors.scheduler.host import KILL_GRACE
from actors.scheduler.job import STOP_GRACE
from actors.scheduler.protocol import AddJob, JobStates, RemoveJobs, Reschedule
from fdblayer import docs as store_docs
from supervision import CallTimeout
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


def patch_clock(monkeypatch, clock: _Clock) -> None:
    """The processor and its lease keeping read ``clock``."""
    monkeypatch.setattr(processor, "time", clock)
    monkeypatch.setattr(renewals, "time", clock)


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
    p._adding = None
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
    patch_clock(monkeypatch, clock)
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


def test_a_slow_round_moves_the_fence_after_each_batch_and_the_timer_skips_fresh_leases(tmp_path, monkeypatch):
    """Thousands of leases on a loaded machine make a renewal round take
    seconds: the oldest leases are renewed first, each batch's leases count
    as renewed when that batch began (not when the round did) and the fence
    moves as each batch commits, so it follows the oldest lease, not the
    round's start. The lease timer then leaves alone a lease renewed (by
    the tick) less than a quarter of a period ago."""
    clock = _Clock()
    patch_clock(monkeypatch, clock)
    monkeypatch.setattr(doc_leases, "RENEW_BATCH", 2)
    fence = LeaseFence(str(tmp_path / "fence"))
    p, _, _ = bare_processor(fence, clock)
    p.tick_every = 2.0
    held = [lease(f"d{i}") for i in range(6)]
    for i, one in reversed(list(enumerate(held))):  # owned newest first: renewed oldest first all the same
        p.owned[one.job.id] = Owned(one, {"id": f"job-{i}"}, added_to="sched", renewed_at=clock.mono - 10 + i)
    round_start = clock.mono
    fences = []

    def slow_renew(db, leases, states, done, now, timeout=None, not_before=None):
        fences.append(fence.deadline())
        clock.advance(3.0)  # one batch on a loaded machine
        return {one.job.id: (doc_leases.KEPT, one) for one in leases}

    monkeypatch.setattr(doc_leases, "renew", slow_renew)
    p._renew_all({}, set())
    renewed = [p.owned[one.job.id].renewed_at - round_start for one in held]
    assert renewed == [0, 0, 3, 3, 6, 6], "the oldest first, each as of its own batch's start"
    share = renewals.FENCE_SHARE * p.timeout
    assert fences[1:] == [round_start - 8 + share, round_start - 6 + share], "moved after each batch"
    assert fence.deadline() == round_start + share
    for one in held[4:]:
        p.owned[one.job.id].renewed_at = clock.mono - 0.4  # the tick's own renewal, just now
    before = {one.job.id: p.owned[one.job.id].renewed_at for one in held}
    p._renew()
    assert [p.owned[one.job.id].renewed_at != before[one.job.id] for one in held] == [True] * 4 + [False] * 2


def test_a_document_released_while_its_add_is_in_flight_is_removed_once_the_add_is_answered(tmp_path, monkeypatch):
    """A tick adds its documents to the scheduler one call at a time; a
    renewal between two of those calls can find a document lost (its node
    was paused past the owner timeout) or replaced while its AddJob is in
    flight. The job is removed once that call is answered (however the
    scheduler ordered the two), the fence does not move until the removal
    is confirmed (the add may start the job meanwhile), and the tick adds no
    document it no longer holds: else the job would run here for good,
    beside the node that took the document."""
    clock = _Clock()
    patch_clock(monkeypatch, clock)
    fence = LeaseFence(str(tmp_path / "fence"))
    fence.set(clock.mono - 1)  # run out while the node was paused
    p, calls, brought = bare_processor(fence, clock)
    p._stale, p.node, p.scheduler_name = False, "node", "scheduler"
    held = [lease(name) for name in ("a", "b", "c")]
    for one in held:
        p.owned[one.job.id] = Owned(one, {"id": f"job-{one.doc_id}"}, renewed_at=clock.mono)
    tick = p._observe()
    next(tick)  # WhereIs
    add_a = tick.send("sched")
    assert isinstance(add_a.msg, AddJob) and add_a.msg.spec["id"] == "job-a"
    outcomes = {held[0].job.id: (doc_leases.LOST, None), held[1].job.id: (doc_leases.CHANGED, None)}
    p._apply(outcomes | {held[2].job.id: (doc_leases.KEPT, held[2])}, {}, clock.mono)
    assert fence.deadline() < clock.mono, "a's removal comes first"
    assert not [m for _, m, _ in calls if isinstance(m, Reschedule)]
    assert brought == [([held[1].job.id], int(clock.wall))], "b, never added, is due at once"
    add_c = tick.send("ok")
    assert add_c.msg.spec["id"] == "job-c", "b, released, is not added"
    ((_, remove, removed),) = [c for c in calls if isinstance(c[1], RemoveJobs)]
    assert remove.job_ids == ["job-a"]
    states = tick.send("ok")
    assert isinstance(states.msg, JobStates) and states.msg.job_ids == ["job-c"]
    removed(True, None)
    assert fence.deadline() > clock.mono, "then the fence holds again"
    assert [m for _, m, _ in calls if isinstance(m, Reschedule)], "and the jobs it stopped are rescheduled"


def test_a_document_whose_add_timed_out_has_its_job_removed_when_released(monkeypatch):
    """An AddJob that timed out may still be applied by the scheduler: the
    document counts as maybe added, so losing it later removes its job, and
    the next tick adds it as a fresh job."""
    clock = _Clock()
    patch_clock(monkeypatch, clock)
    p, calls, _ = bare_processor(LeaseFence(None), clock)
    p._stale, p.node, p.scheduler_name = False, "node", "scheduler"
    held = lease("a")
    p.owned[held.job.id] = Owned(held, {"id": "job-a"}, renewed_at=clock.mono)
    tick = p._observe()
    next(tick)
    tick.send("sched")
    with pytest.raises(StopIteration) as ended:  # nothing added: no states to read
        tick.throw(CallTimeout("sched", "AddJob", 10.0))
    assert ended.value.value[0][held.job.id]["state"] == "error"
    again = p._add_request(p.owned[held.job.id])
    assert isinstance(again, AddJob) and not again.again
    p._apply({held.job.id: (doc_leases.LOST, None)}, {}, clock.mono)
    assert [m.job_ids for _, m, _ in calls if isinstance(m, RemoveJobs)] == [["job-a"]]
