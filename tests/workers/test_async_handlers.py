"""``async def`` handlers (issue 29, item 5): awaited on an event loop in
their worker, many at once, beside the sync ones. Real hosts, real worker
processes, a ledger of runs written by the handlers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import textwrap
import time

import pytest

import fdblayer
from actors import jobs
from fdblayer.jobs.model import JobState
from tests.workers.hosts import wait_for

ASYNC = """
import asyncio, json, os, time

def _log(ctx, event, **more):
    with open(os.environ["ASYNC_LOG"], "a") as f:
        f.write(json.dumps({"id": ctx.id, "type": ctx.type, "event": event, "attempt": ctx.attempt,
                            "pid": os.getpid(), "t": time.time(), **more}) + "\\n")

async def stops_loop(ctx):
    asyncio.get_running_loop().stop()
    await asyncio.sleep(0.05)
    return "went on"

async def nap(ctx):
    _log(ctx, "start")
    await asyncio.sleep(ctx.data.get("s", 1.0))
    _log(ctx, "end")
    return ctx.data.get("n")

def sync_nap(ctx):
    _log(ctx, "start")
    time.sleep(ctx.data.get("s", 1.0))
    _log(ctx, "end")
    return ctx.data.get("n")

async def polite(ctx):
    _log(ctx, "start")
    stopped = await ctx.stopped(ctx.data.get("s", 60))
    _log(ctx, "stopping" if stopped else "end")
    if stopped and ctx.data.get("raise"):
        raise RuntimeError("stopped")
    return "stopped" if stopped else "slept"

async def stubborn(ctx):
    _log(ctx, "start")
    try:
        await asyncio.sleep(60)  # ignores ctx.stopping
    except asyncio.CancelledError:
        _log(ctx, "cancelled")
        raise
    return "late"

async def blocks(ctx):
    _log(ctx, "start")
    time.sleep(60)  # blocks the event loop: cancelling cannot reach it
    return "late"

async def _doubled(ctx):
    await asyncio.sleep(0.01)
    return ctx.data["n"] * 2

def returns_awaitable(ctx):  # a sync callable whose call gives a coroutine (a wrapper, a partial...)
    return _doubled(ctx)

async def forks(ctx):
    _log(ctx, "start")
    child = os.fork()
    if child == 0:
        return "child"  # the forked process exits here: it is not a worker
    os.waitpid(child, 0)
    await asyncio.sleep(0.2)
    return "parent"

async def flaky(ctx):
    _log(ctx, "start")
    await asyncio.sleep(0.05)
    await ctx.progress_async(attempt=ctx.attempt)
    if ctx.attempt < 2:
        raise ValueError(f"failed attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}
"""


@pytest.fixture
def ledger(workdir, monkeypatch):
    (workdir / "async_mod.py").write_text(textwrap.dedent(ASYNC))
    path = workdir / "async.log"
    monkeypatch.setenv("ASYNC_LOG", str(path))

    def read(event: str | None = None, job_id: str | None = None) -> list:
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in rows if (event is None or r["event"] == event) and (job_id is None or r["id"] == job_id)]

    return read


def _enqueue(db, job_type: str, datas: list, **kw) -> list:
    """Every job in one transaction (one claim can take them all)."""

    @fdblayer.transactional
    def add(tr):
        return [jobs.enqueue(tr, job_type, data, **kw) for data in datas]

    return add(db)


def _most_at_once(rows: list) -> int:
    """The most runs between their start and end at one time."""
    edges = sorted(
        [(r["t"], 1) for r in rows if r["event"] == "start"] + [(r["t"], -1) for r in rows if r["event"] == "end"],
        key=lambda e: (e[0], e[1]),
    )
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.slow
def test_fifty_async_handlers_sleeping_a_second_finish_in_about_a_second_on_one_worker(hosts, db, ledger):
    hosts(["a=async_mod:nap"], concurrency=1)
    started = time.monotonic()
    ids = _enqueue(db, "a", [{"s": 1.0, "n": n} for n in range(50)])
    assert [jobs.result(db, "a", i, timeout=30) for i in ids] == list(range(50))
    took = time.monotonic() - started
    assert took < 5.0, f"50 runs of 1 s took {took:.1f} s on one worker: they did not overlap (50 s in a row)"
    rows = ledger()
    assert len({r["pid"] for r in rows}) == 1, "one worker process ran them all"
    assert _most_at_once(rows) >= 40, "they awaited at once"


@pytest.mark.slow
def test_async_concurrency_bounds_the_runs_awaiting_at_once_in_a_worker(hosts, db, ledger):
    hosts(["a=async_mod:nap"], concurrency=1, extra=["--async-concurrency", "5"])
    ids = _enqueue(db, "a", [{"s": 0.5, "n": n} for n in range(20)])
    started = time.monotonic()
    assert [jobs.result(db, "a", i, timeout=30) for i in ids] == list(range(20))
    assert time.monotonic() - started >= 1.9, "four rounds of 5 at once, not 20 at once"
    assert _most_at_once(ledger()) == 5


@pytest.mark.slow
def test_sync_and_async_handlers_mix_on_one_host_and_one_worker(hosts, db, ledger):
    hosts(["s=async_mod:sync_nap", "a=async_mod:nap"], concurrency=1)
    started = time.monotonic()
    sync_ids = _enqueue(db, "s", [{"s": 1.0, "n": n} for n in range(3)])
    async_ids = _enqueue(db, "a", [{"s": 1.0, "n": n} for n in range(20)])
    assert [jobs.result(db, "a", i, timeout=30) for i in async_ids] == list(range(20))
    async_done = time.monotonic() - started
    assert [jobs.result(db, "s", i, timeout=30) for i in sync_ids] == list(range(3))
    took = time.monotonic() - started
    assert async_done < 3.0, f"the async runs waited for the sync ones ({async_done:.1f} s)"
    assert took < 6.0, f"3 sync runs of 1 s one after the other, the async ones beside them: {took:.1f} s"
    rows = ledger()
    assert len({r["pid"] for r in rows}) == 1
    spans = {
        kind: [(r["t"], e["t"]) for r in ledger("start") if r["type"] == kind for e in ledger("end", r["id"])]
        for kind in ("s", "a")
    }
    assert any(a0 < s1 and s0 < a1 for a0, a1 in spans["a"] for s0, s1 in spans["s"]), (
        "async runs awaited while a sync handler ran in the same worker"
    )
    assert _most_at_once([r for r in rows if r["type"] == "s"]) == 1, "sync runs still one at a time"


@pytest.mark.slow
def test_an_async_handler_sees_stopping_at_its_time_limit(hosts, db, ledger):
    hosts(["p=async_mod:polite"], concurrency=1, extra=["--max-attempts", "1", "--grace", "10"])
    started = time.monotonic()
    job_id = jobs.enqueue(db, "p", {"s": 60, "raise": True}, timeout=1)
    with pytest.raises(jobs.JobFailed) as info:
        jobs.result(db, "p", job_id, timeout=30)
    assert info.value.error_type == "JobTimeout" and "stopped" in info.value.error_message
    assert time.monotonic() - started < 8, "await ctx.stopped() woke at the limit, well before the grace"


@pytest.mark.slow
def test_an_async_handler_sees_stopping_when_its_job_is_removed(hosts, db, ledger):
    jobs.set_type_timeout(db, "p", 2)  # leases renew every 0.5 s: the loss is seen at once
    host = hosts(["p=async_mod:polite"], concurrency=1)
    job_id = jobs.enqueue(db, "p", {"s": 60})
    wait_for(lambda: ledger("start", job_id), 20, "the handler to start")
    jobs.remove(db, "p", job_id)
    wait_for(lambda: ledger("stopping", job_id), 10, "await ctx.stopped()")
    wait_for(lambda: "job_outcome_discarded" in host.log(), 10, "the discard")


@pytest.mark.slow
def test_an_async_handler_that_ignores_its_limit_is_cancelled_and_its_neighbours_go_on(hosts, db, ledger):
    host = hosts(
        ["x=async_mod:stubborn", "a=async_mod:nap"], concurrency=1, extra=["--max-attempts", "1", "--grace", "1"]
    )
    started = time.monotonic()
    stuck = jobs.enqueue(db, "x", {}, timeout=1)
    wait_for(lambda: ledger("start", stuck), 20, "the stubborn handler to start")
    neighbour = jobs.enqueue(db, "a", {"s": 4, "n": 7})
    with pytest.raises(jobs.JobFailed) as info:
        jobs.result(db, "x", stuck, timeout=30)
    assert info.value.error_type == "JobTimeout" and "CancelledError" in info.value.error_message
    assert time.monotonic() - started < 10, "cancelled about 2 s in (limit + grace), not after 60 s"
    assert ledger("cancelled", stuck)
    assert jobs.result(db, "a", neighbour, timeout=30) == 7
    assert jobs.status(db, "a", neighbour).attempt == 1, "the worker was not stopped under its other runs"
    assert "async_run_cancelled" in host.log() and "job_killed" not in host.log()


@pytest.mark.slow
def test_an_async_handler_that_blocks_its_loop_past_its_limit_has_its_worker_stopped(hosts, db, ledger):
    host = hosts(["b=async_mod:blocks"], concurrency=1, extra=["--max-attempts", "1", "--grace", "1"])
    started = time.monotonic()
    job_id = jobs.enqueue(db, "b", {}, timeout=1)
    with pytest.raises(jobs.JobFailed) as info:
        jobs.result(db, "b", job_id, timeout=45)
    assert info.value.error_type == "JobTimeout"
    assert time.monotonic() - started < 20, "limit 1 s + grace 1 s + 5 s for the cancellation, then the kill"
    assert "async_run_cancelled" in host.log() and "job_killed" in host.log()


@pytest.mark.slow
def test_an_async_handler_that_raises_is_retried_and_reports_progress(hosts, db, ledger):
    hosts(["f=async_mod:flaky", "c=async_mod:returns_awaitable"], concurrency=1, extra=["--max-attempts", "3"])
    assert jobs.result(db, "c", jobs.enqueue(db, "c", {"n": 21}), timeout=30) == 42, "an awaitable is awaited"
    job_id = jobs.enqueue(db, "f", {})
    assert jobs.result(db, "f", job_id, timeout=30) == {"attempt": 2}
    st = jobs.status(db, "f", job_id)
    assert [e["type"] for e in st.errors] == ["ValueError"] and st.progress == {"attempt": 2}
    assert [r["attempt"] for r in ledger("start", job_id)] == [1, 2]


@pytest.mark.slow
def test_a_worker_killed_with_ten_async_runs_in_flight_blames_each_once(hosts, db, ledger):
    host = hosts(["a=async_mod:nap"], concurrency=1, extra=["--max-attempts", "2"])
    ids = _enqueue(db, "a", [{"s": 3.0, "n": n} for n in range(10)])
    wait_for(lambda: len(ledger("start")) == 10, 20, "ten runs in flight")
    (pid,) = {r["pid"] for r in ledger("start")}
    os.kill(pid, signal.SIGKILL)
    assert [jobs.result(db, "a", i, timeout=60) for i in ids] == list(range(10)), "none is lost"
    for job_id in ids:
        assert [r["attempt"] for r in ledger("start", job_id)] == [1, 2], "each ran again once"
        st = jobs.status(db, "a", job_id)
        assert st.attempt == 2 and [e["type"] for e in st.errors] == ["WorkerDied"]
    assert host.log().count("worker_died") == 10


@pytest.mark.slow
def test_sigterm_drains_async_runs_in_flight(hosts, db, ledger):
    host = hosts(["p=async_mod:polite", "x=async_mod:stubborn"], concurrency=1, extra=["--grace", "2"])
    polite = _enqueue(db, "p", [{"s": 60}] * 8)
    stubborn = _enqueue(db, "x", [{}] * 2)
    wait_for(lambda: len(ledger("start")) == 10, 20, "ten runs in flight")
    asked = time.monotonic()
    assert host.terminate() == 0
    assert time.monotonic() - asked < 15
    assert [jobs.result(db, "p", i, timeout=1) for i in polite] == ["stopped"] * 8, (
        "told to stop, they returned within the grace: their results are kept"
    )
    for job_id in stubborn:
        st = jobs.status(db, "x", job_id)
        assert st.state is JobState.PENDING and st.attempt == 0, "still running past the grace: back in the queue"


@pytest.mark.slow
def test_a_process_forked_in_an_async_handler_exits_when_the_handler_returns_in_it(hosts, db, ledger):
    hosts(["k=async_mod:forks", "a=async_mod:nap"], concurrency=1)
    naps = _enqueue(db, "a", [{"s": 0.5, "n": n} for n in range(5)])
    job_id = jobs.enqueue(db, "k", {})
    assert jobs.result(db, "k", job_id, timeout=30) == "parent"
    assert [jobs.result(db, "a", i, timeout=30) for i in naps] == list(range(5))
    assert len(ledger("start", job_id)) == 1 and all(len(ledger("end", i)) == 1 for i in naps), (
        "the child ran nothing more"
    )


def test_ctx_stopped_wakes_from_another_thread_and_times_out():
    from actors.workers.context import pool_context

    class Job:
        id, type = "j", "t"

    ctx = pool_context(Job(), {}, 1, 3, lambda: None)

    async def main():
        assert await ctx.stopped(0.05) is False
        waiting = asyncio.ensure_future(ctx.stopped(10))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        await asyncio.to_thread(ctx.request_stop)
        assert await waiting is True and time.monotonic() - t0 < 1
        assert await ctx.stopped() is True and ctx.stopping

    asyncio.run(main())


def test_async_handlers_are_told_apart():
    import functools

    from actors.handlers import is_async

    async def a(ctx):
        return None

    def s(ctx):
        return None

    class Call:
        async def __call__(self, ctx):
            return None

    assert is_async(a) and is_async(functools.partial(a)) and is_async(Call())
    assert not is_async(s) and not is_async(Call) and not is_async(functools.partial(s))


def test_async_concurrency_is_a_setting_and_a_flag_with_bounds(workdir):
    from actors.settings import config as config_mod
    from actors.workers.host import check, spec_from_config
    from fdblayer.jobs.exceptions import InvalidArgument

    cfg = config_mod.load(None, {("node", "store"): f"sqlite:///{workdir}/s.db"})
    assert cfg.worker.async_concurrency == 100
    spec = spec_from_config(cfg, ["a=async_mod:nap"], [])
    assert spec.async_concurrency == 100

    class Args:
        async_concurrency = 0

    with pytest.raises(InvalidArgument, match="async concurrency must be from 1 to 10000"):
        check(spec_from_config(cfg, ["a=handlers_mod:noop"], [], Args()))


@pytest.mark.slow
def test_an_async_handler_stopping_its_loop_does_not_strand_its_neighbours(hosts, db, ledger):
    """Found by a review (2 of 2): a handler's ``loop.stop()`` ended the
    worker's loop for good; that job stayed running and the async runs
    queued behind it in that worker stayed claimed until the host stopped,
    while another worker idled. The loop now runs on."""
    host = hosts(["a=async_mod:nap", "b=async_mod:stops_loop"], concurrency=1)
    bad = jobs.enqueue(db, "b", {})
    ids = _enqueue(db, "a", [{"s": 0.2, "n": n} for n in range(5)])
    assert jobs.result(db, "b", bad, timeout=20) == "went on"
    assert [jobs.result(db, "a", i, timeout=20) for i in ids] == list(range(5))
    assert "async_loop_stopped" in host.log()
    assert jobs.result(db, "b", jobs.enqueue(db, "b", {}), timeout=20) == "went on", "and again"
