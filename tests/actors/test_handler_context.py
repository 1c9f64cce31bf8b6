"""The one handler context (actors.handlers.JobContext): worker pools and
scheduler jobs build the same class, each with its own part, and share one
stop path (stopping, the waits, check) that a lease fence also ends."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

import pytest

from fdblayer.jobs.exceptions import Halt

import actors.scheduler.job as scheduler_job
import actors.workers.context as pool
from actors.handlers import ContextPartMissing, JobContext, JobStopping, QueuedRun, StopSignal
from actors.scheduler.model import LEASE_EXPIRED, JobSpec


class _Job:
    id, type = "j1", "mail"


def pool_ctx() -> JobContext:
    return pool.pool_context(_Job(), {"to": "a@b"}, 2, 5, lambda: None)


def scheduled_ctx(events: queue.Queue, stop: StopSignal | None = None, fence: Any = None) -> JobContext:
    spec = JobSpec("s1", handler="m:f", continuous=True, options={"n": 1}, db_name="db", source="sqlite:///a")
    return scheduler_job.scheduler_context(spec, {"seq": 3}, events, stop or StopSignal(), fence)


class _Fence:
    """A lease fence whose deadline the test sets (monotonic seconds)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def left(self) -> float:
        return self.deadline - time.monotonic()


# ------------------------------------------------------------------ one type


def test_pools_and_scheduler_jobs_build_the_same_class() -> None:
    assert pool.JobContext is scheduler_job.JobContext is JobContext
    assert type(pool_ctx()) is type(scheduled_ctx(queue.Queue())) is JobContext


def test_a_pools_context_has_its_run_and_neutral_scheduler_fields() -> None:
    ctx = pool_ctx()
    assert (ctx.id, ctx.job_id, ctx.type, ctx.data, ctx.attempt, ctx.max_attempts) == (
        "j1",
        "j1",
        "mail",
        {"to": "a@b"},
        2,
        5,
    )
    assert (ctx.options, ctx.continuous, ctx.source, ctx.last_checkpoint, ctx.spec) == ({}, False, None, None, None)
    with pytest.raises(ContextPartMissing, match="ctx.progress"):
        ctx.checkpoint(1)
    with pytest.raises(ContextPartMissing):
        ctx.report(n=1)


def test_a_scheduler_jobs_context_has_its_spec_and_neutral_pool_fields() -> None:
    events: queue.Queue = queue.Queue()
    ctx = scheduled_ctx(events)
    assert (ctx.id, ctx.job_id, ctx.type, ctx.options, ctx.continuous, ctx.source, ctx.target) == (
        "s1",
        "s1",
        None,
        {"n": 1},
        True,
        "sqlite:///a",
        None,
    )
    assert (ctx.last_checkpoint, ctx.data, ctx.attempt, ctx.max_attempts) == ({"seq": 3}, {}, 1, None)
    ctx.checkpoint({"seq": 4})
    ctx.report(docs_read=7)
    assert ctx.last_checkpoint == {"seq": 4}
    assert [events.get_nowait(), events.get_nowait()] == [("checkpoint", {"seq": 4}), ("report", {"docs_read": 7})]
    with pytest.raises(ContextPartMissing, match="ctx.report"):
        ctx.progress(step=1)


# ------------------------------------------------------------------ progress


def test_progress_returns_the_whole_record_and_a_lost_job_is_stopping() -> None:
    written: list[dict] = []

    def write(fields: dict) -> dict:
        written.append(fields)
        if fields.get("lost"):
            raise Halt("taken over")
        return {"a": 1, **fields}

    ctx = JobContext("j1", "mail", queued=QueuedRun(2, 5, write))  # a fake store write
    assert ctx.progress(b=2) == {"a": 1, "b": 2} and not ctx.stopping
    assert asyncio.run(ctx.progress_async(c=3)) == {"a": 1, "c": 3}
    with pytest.raises(Halt):
        ctx.progress(lost=True)
    assert ctx.stopping and written == [{"b": 2}, {"c": 3}, {"lost": True}]


# ------------------------------------------------------------------ stopping


@pytest.mark.parametrize("build", [pool_ctx, lambda: scheduled_ctx(queue.Queue())], ids=["pool", "scheduler"])
def test_every_context_stops_the_same_way(build: Any) -> None:
    ctx = build()
    assert ctx.wait(0.01) is False and ctx.wait_stopping(0) is False and not ctx.stopping
    ctx.check()
    threading.Timer(0.05, ctx.request_stop).start()
    assert ctx.wait_stopping(10) is True and ctx.stopping
    assert asyncio.run(ctx.stopped(0)) is True
    with pytest.raises(JobStopping):
        ctx.check()


def test_an_expired_fence_ends_every_wait_and_makes_the_exit_lease_expired() -> None:
    stop = StopSignal()
    fence = _Fence(time.monotonic() + 0.1)
    ctx = scheduled_ctx(queue.Queue(), stop, fence)
    assert not ctx.stopping and not ctx.fenced
    t0 = time.monotonic()
    assert asyncio.run(ctx.stopped(5)) is True, "the awaitable wait reads the fence too"
    assert 0.05 < time.monotonic() - t0 < 2 and ctx.fenced and ctx.stopping
    assert ctx.wait_stopping() is True
    assert scheduler_job.exit_reason("normal", ctx, stop) == LEASE_EXPIRED
    stop.set()
    assert scheduler_job.exit_reason("shutdown", ctx, stop) == "shutdown", "asked to stop: not the fence's doing"


def test_a_fence_seen_expired_stays_expired_when_it_moves_on() -> None:
    """A document job that returned because it saw its fence expired
    stopped, it did not complete: the doc processor renewing the leases just
    after (the fence moved on) must not turn its exit into ``normal``, which
    would record a continuous document as completed and never run it again
    (a test_docs_overlap failure)."""
    stop = StopSignal()
    fence = _Fence(time.monotonic() - 1)
    ctx = scheduled_ctx(queue.Queue(), stop, fence)
    assert ctx.wait(5) is True, "the handler sees its fence expired and returns"
    fence.deadline = time.monotonic() + 60  # the leases were renewed before the runner read the exit
    assert ctx.fenced and ctx.stopping, "a stop the handler was told of is not taken back"
    assert scheduler_job.exit_reason("normal", ctx, stop) == LEASE_EXPIRED


def test_a_fence_never_seen_expired_does_not_stop_the_job() -> None:
    fence = _Fence(time.monotonic() + 60)
    ctx = scheduled_ctx(queue.Queue(), StopSignal(), fence)
    assert ctx.wait(0.01) is False and not ctx.fenced
    assert scheduler_job.exit_reason("normal", ctx, StopSignal()) == "normal"


def test_a_transient_job_is_never_fenced() -> None:
    spec = JobSpec("t", handler="m:f")
    ctx = scheduler_job.scheduler_context(spec, None, queue.Queue(), StopSignal(), _Fence(time.monotonic() - 1))
    assert not ctx.fenced and not ctx.stopping
    assert scheduler_job.exit_reason("normal", ctx, StopSignal()) == "normal"
