"""The seed's eunit tests of couch_replicator_scheduler, on plain data.

Each case keeps the seed's name and data. Times are seconds (the seed's
``{0, Sec, 0}`` timestamps); the clock is injected; the runner stands in
for the mocked ``couch_replicator_scheduler_sup`` (start gives a fresh
pid, stop does nothing).
"""

from __future__ import annotations

import itertools

import pytest

from actors.scheduler.core import (
    BACKOFF_INTERVAL,
    DEFAULT_HEALTH_THRESHOLD,
    DEFAULT_MAX_CHURN,
    DEFAULT_MAX_HISTORY,
    DEFAULT_MAX_JOBS,
    Event,
    LEASE_EXPIRED,
    EventType,
    InvalidJobSpec,
    InvalidSetting,
    JobRow,
    JobSpec,
    JobStartError,
    JobTable,
    Scheduling,
    Settings,
    backoff_seconds,
    consecutive_crashes,
    last_started,
    latest_crash_timestamp,
    oldest_job_first,
)

NOW = 1_700_000_000.0


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


class FakeRunner:
    """The seed's meck of scheduler_sup: start_child -> {ok, Pid}, terminate_child -> ok."""

    def __init__(self, fail: object = None) -> None:
        self.pids = itertools.count(1)
        self.fail = fail
        self.started: list = []
        self.stopped: list = []

    def start(self, job: JobRow):
        if self.fail is not None:
            raise JobStartError(self.fail)
        self.started.append(job.id)
        return f"<0.{next(self.pids)}.0>", None

    def stop(self, job: JobRow) -> None:
        self.stopped.append(job.id)


# ------------------------------------------------------------ history helpers


def crashed(when: float = 0) -> Event:
    return Event(EventType.CRASHED, when, "some_reason")


def started(when: float = 0) -> Event:
    return Event(EventType.STARTED, when)


def stopped(when: float = 0) -> Event:
    return Event(EventType.STOPPED, when)


def added() -> Event:
    return Event(EventType.ADDED, 0)


def history_job(history: list) -> JobRow:
    return JobRow(None, JobSpec(None), history)


_mock_pids = itertools.count(10_000)


def continuous(i: int) -> JobRow:
    return JobRow(i, JobSpec(i, continuous=True), [stopped(i + 1), started(i), added()])


def continuous_running(i: int) -> JobRow:
    return JobRow(i, JobSpec(i, continuous=True), [started(i), added()], pid=f"<0.{next(_mock_pids)}.0>")


def oneshot(i: int) -> JobRow:
    return JobRow(i, JobSpec(i), [stopped(i + 1), started(i), added()])


def oneshot_running(i: int) -> JobRow:
    return JobRow(i, JobSpec(i), [started(i), added()], pid=f"<0.{next(_mock_pids)}.0>")


def setup_jobs(
    jobs: list, settings: Settings | None = None, clock: FakeClock | None = None, runner: FakeRunner | None = None
) -> Scheduling:
    table = JobTable()
    for job in jobs:
        table.put(job)
    return Scheduling(runner or FakeRunner(), clock or FakeClock(), settings or mock_state(DEFAULT_MAX_JOBS), table)


def mock_state(max_jobs: int, max_churn: int = DEFAULT_MAX_CHURN) -> Settings:
    return Settings(max_jobs=max_jobs, max_churn=max_churn, max_history=DEFAULT_MAX_HISTORY)


def all_jobs(s: Scheduling) -> list[JobRow]:
    return sorted(s.table, key=lambda j: j.id)


def jobs_stopped(s: Scheduling) -> list:
    return [j.id for j in all_jobs(s) if j.pid is None]


def jobs_running(s: Scheduling) -> list:
    return [j.id for j in all_jobs(s) if j.pid is not None]


def run_stop_count(s: Scheduling) -> tuple[int, int]:
    return len(jobs_running(s)), len(jobs_stopped(s))


def oneshot_run_stop_count(s: Scheduling) -> tuple[int, int]:
    jobs = [j for j in all_jobs(s) if not j.spec.continuous]
    return sum(j.pid is not None for j in jobs), sum(j.pid is None for j in jobs)


# ------------------------------------------------------------ pure functions


@pytest.mark.parametrize(
    "ratio,n",
    [(1, 1), (2, 2), (4, 3), (8, 4), (16, 5), (32, 6), (64, 7), (128, 8), (256, 9), (512, 10), (1024, 11), (1024, 12)],
)
def test_backoff_micros(ratio: int, n: int) -> None:
    assert backoff_seconds(n) == ratio * BACKOFF_INTERVAL


@pytest.mark.parametrize(
    "expected,history",
    [
        (0, []),
        (0, [added()]),
        (0, [stopped()]),
        (0, [crashed()]),
        (1, [crashed(), added()]),
        (1, [crashed(), crashed()]),
        (1, [crashed(), stopped()]),
        (3, [crashed(), crashed(), crashed(), added()]),
        (2, [crashed(), crashed(), stopped()]),
        (1, [crashed(), started(), added()]),
        (2, [crashed(3), started(2), crashed(1), started(0)]),
        (0, [stopped(3), started(2), crashed(1), started(0)]),
        (1, [crashed(3), started(2), stopped(1), started(0)]),
        (0, [crashed(999), started(0)]),
        (1, [crashed(999), started(998), crashed(997), started(0)]),
    ],
)
def test_consecutive_crashes(expected: int, history: list) -> None:
    assert consecutive_crashes(history, DEFAULT_HEALTH_THRESHOLD) == expected


@pytest.mark.parametrize(
    "expected,history,threshold",
    [
        (0, [crashed(11), started(0)], 10),
        (1, [crashed(10), started(0)], 10),
    ],
)
def test_consecutive_crashes_non_default_threshold(expected: int, history: list, threshold: int) -> None:
    assert consecutive_crashes(history, threshold) == expected


@pytest.mark.parametrize(
    "expected,history",
    [
        (0, [added()]),
        (1, [crashed(1)]),
        (3, [crashed(3), started(2), crashed(1), started(0)]),
        (1, [started(3), stopped(2), crashed(1), started(0)]),
    ],
)
def test_latest_crash_timestamp(expected: int, history: list) -> None:
    assert latest_crash_timestamp(history) == expected


@pytest.mark.parametrize(
    "expected,history",
    [
        (0, [added()]),
        (0, [crashed(1)]),
        (1, [started(1)]),
        (1, [added(), started(1)]),
        (2, [started(2), started(1)]),
        (2, [crashed(3), started(2), started(1)]),
    ],
)
def test_last_started(expected: int, history: list) -> None:
    assert last_started(history_job(history)) == expected


def test_oldest_job_first() -> None:
    j0, j1, j2 = history_job([crashed()]), history_job([started(1)]), history_job([started(2)])

    def sort(jobs: list) -> list:
        return sorted(jobs, key=oldest_job_first)

    assert sort([]) == []
    assert sort([j1]) == [j1]
    assert sort([j2, j1]) == [j1, j2]
    assert sort([j2, j1, j0]) == [j0, j1, j2]


# ------------------------------------------------------------ scheduler_test_


def test_pending_jobs_simple() -> None:
    job1, job2 = oneshot(1), oneshot(2)
    s = setup_jobs([job2, job1])
    assert s.pending_jobs(0) == []
    assert s.pending_jobs(1) == [job1]
    assert s.pending_jobs(2) == [job1, job2]
    assert s.pending_jobs(3) == [job1, job2]


def test_pending_jobs_skip_crashed() -> None:
    clock = FakeClock()
    job = oneshot(1)
    job1 = JobRow(1, job.spec, [crashed(clock.now), started(clock.now)] + job.history)
    job2, job3 = oneshot(2), oneshot(3)
    s = setup_jobs([job2, job1, job3], clock=clock)
    assert s.pending_jobs(1) == [job2]
    assert s.pending_jobs(2) == [job2, job3]
    assert s.pending_jobs(3) == [job2, job3]


def test_one_job_starts() -> None:
    s = setup_jobs([oneshot(1)])
    assert run_stop_count(s) == (0, 1)
    s.reschedule()
    assert run_stop_count(s) == (1, 0)


def test_no_jobs_start_if_max_is_0() -> None:
    s = setup_jobs([oneshot(1)], mock_state(0))
    s.reschedule()
    assert run_stop_count(s) == (0, 1)


def test_one_job_starts_if_max_is_1() -> None:
    s = setup_jobs([oneshot(1), oneshot(2)], mock_state(1))
    s.reschedule()
    assert run_stop_count(s) == (1, 1)


def test_max_churn_does_not_throttle_initial_start() -> None:
    s = setup_jobs([oneshot(1), oneshot(2)], mock_state(DEFAULT_MAX_JOBS, 0))
    s.reschedule()
    assert run_stop_count(s) == (2, 0)


def test_excess_oneshot_only_jobs() -> None:
    s = setup_jobs([oneshot_running(1), oneshot_running(2)])
    assert run_stop_count(s) == (2, 0)
    s.settings = mock_state(1)
    s.reschedule()
    assert run_stop_count(s) == (1, 1)
    s.settings = mock_state(0)
    s.reschedule()
    assert run_stop_count(s) == (0, 2)


def test_excess_continuous_only_jobs() -> None:
    s = setup_jobs([continuous_running(1), continuous_running(2)])
    assert run_stop_count(s) == (2, 0)
    s.settings = mock_state(1)
    s.reschedule()
    assert run_stop_count(s) == (1, 1)
    s.settings = mock_state(0)
    s.reschedule()
    assert run_stop_count(s) == (0, 2)


def test_excess_prefer_continuous_first() -> None:
    s = setup_jobs([continuous_running(1), oneshot_running(2), continuous_running(3)])
    assert run_stop_count(s) == (3, 0)
    assert oneshot_run_stop_count(s) == (1, 0)
    s.settings = mock_state(2)
    s.reschedule()
    assert run_stop_count(s) == (2, 1)
    assert oneshot_run_stop_count(s) == (1, 0)
    s.settings = mock_state(1)
    s.reschedule()
    assert oneshot_run_stop_count(s) == (1, 0)
    s.settings = mock_state(0)
    s.reschedule()
    assert oneshot_run_stop_count(s) == (0, 1)


def test_stop_oldest_first() -> None:
    s = setup_jobs([continuous_running(7), continuous_running(4), continuous_running(5)], mock_state(2))
    s.reschedule()
    assert run_stop_count(s) == (2, 1)
    assert jobs_stopped(s) == [4]
    s.settings = mock_state(1)
    s.reschedule()
    assert jobs_running(s) == [7]


def test_start_oldest_first() -> None:
    s = setup_jobs([continuous(7), continuous(2), continuous(5)], mock_state(1))
    s.reschedule()
    assert run_stop_count(s) == (1, 2)
    assert jobs_running(s) == [2]
    s.settings = mock_state(2)
    s.reschedule()
    assert jobs_stopped(s) == [7]


def test_dont_stop_if_nothing_pending() -> None:
    s = setup_jobs([continuous_running(1), continuous_running(2)], mock_state(2))
    s.reschedule()
    assert run_stop_count(s) == (2, 0)


def test_max_churn_limits_number_of_rotated_jobs() -> None:
    jobs = [continuous(1), continuous_running(2), continuous(3), continuous_running(4)]
    s = setup_jobs(jobs, mock_state(2, 1))
    s.reschedule()
    assert jobs_stopped(s) == [2, 3]


def test_if_pending_less_than_running_start_all_pending() -> None:
    jobs = [continuous(1), continuous_running(2), continuous(3), continuous_running(4), continuous_running(5)]
    s = setup_jobs(jobs, mock_state(3))
    s.reschedule()
    assert jobs_running(s) == [1, 2, 5]


def test_running_less_than_pending_swap_all_running() -> None:
    jobs = [continuous(1), continuous(2), continuous(3), continuous_running(4), continuous_running(5)]
    s = setup_jobs(jobs, mock_state(2))
    s.reschedule()
    assert jobs_stopped(s) == [3, 4, 5]


def test_oneshot_dont_get_rotated() -> None:
    s = setup_jobs([oneshot_running(1), continuous(2)], mock_state(1))
    s.reschedule()
    assert jobs_running(s) == [1]


def test_rotate_continuous_only_if_mixed() -> None:
    s = setup_jobs([continuous(1), oneshot_running(2), continuous_running(3)], mock_state(2))
    s.reschedule()
    assert jobs_running(s) == [1, 2]


def test_oneshot_dont_get_starting_priority() -> None:
    s = setup_jobs([continuous(1), oneshot(2), continuous_running(3)], mock_state(1))
    s.reschedule()
    assert jobs_running(s) == [1]


def test_oneshot_will_hog_the_scheduler() -> None:
    """One-shot jobs can starve others once they hold every slot."""
    jobs = [oneshot_running(1), oneshot_running(2), oneshot(3), continuous(4)]
    s = setup_jobs(jobs, mock_state(2))
    s.reschedule()
    assert jobs_running(s) == [1, 2]


def test_if_excess_is_trimmed_rotation_doesnt_happen() -> None:
    s = setup_jobs([continuous(1), continuous_running(2), continuous_running(3)], mock_state(1))
    s.reschedule()
    assert jobs_running(s) == [3]


def test_if_transient_job_crashes_it_gets_removed() -> None:
    job = JobRow("job1", JobSpec("job1", continuous=True, db_name=None), [added()], pid="<0.999.999>")
    s = setup_jobs([job], Settings(max_history=3))
    assert len(s.table) == 1
    s.job_exited(s.table.get("job1"), "failed")
    assert len(s.table) == 0


def test_if_permanent_job_crashes_it_stays_in_ets() -> None:
    job = JobRow("job1", JobSpec("job1", continuous=True, db_name="db1"), [added()], pid="<0.999.999>")
    s = setup_jobs([job], Settings(max_jobs=1, max_history=3))
    assert len(s.table) == 1
    s.job_exited(s.table.get("job1"), "failed")
    assert len(s.table) == 1
    latest = s.table.get("job1").history[0]
    assert latest.type is EventType.CRASHED and latest.reason == "failed"


# ------------------------------------------------------------ beyond the seed


def permanent(job_id: str, continuous_: bool = True) -> JobSpec:
    return JobSpec(job_id, handler="m:f", continuous=continuous_, db_name="db1")


def test_add_job_replaces_a_job_with_the_same_id() -> None:
    runner = FakeRunner()
    s = Scheduling(runner, FakeClock(), Settings(max_jobs=10))
    s.add_job(permanent("a"))
    first_pid = s.table.get("a").pid
    s.add_job(permanent("a"))
    assert runner.stopped == ["a"] and s.table.get("a").pid != first_pid
    assert s.counters["adds"] == 2 and s.counters["removes"] == 1 and len(s.table) == 1


def test_a_job_added_with_its_past_crashes_backs_off_for_them() -> None:
    """Re-added after its scheduler restarted, a job that had crashed twice
    in a row waits out the backoff of two crashes (60 s) from its re-add,
    as if those crashes had just happened, then starts."""
    clock = FakeClock()
    s = Scheduling(FakeRunner(), clock, Settings(max_jobs=10))
    s.add_job(permanent("a"), crashes=2, reason="boom")
    assert jobs_running(s) == [] and s.table.get("a").history[0].reason == "boom"
    clock.now += backoff_seconds(2) - 1
    s.reschedule()
    assert jobs_running(s) == []
    clock.now += 1
    s.reschedule()
    assert jobs_running(s) == ["a"]


def test_newly_added_job_starts_at_once_while_every_job_fits_in_max_jobs() -> None:
    """The last of exactly max_jobs jobs starts at once (the seed's ``total <
    max_jobs`` left it waiting an interval with a slot free); past max_jobs a
    newcomer does not take a slot before jobs that waited longer."""
    s = Scheduling(FakeRunner(), FakeClock(), Settings(max_jobs=2))
    s.add_job(permanent("a"))
    s.add_job(permanent("b"))
    assert jobs_running(s) == ["a", "b"]
    s.add_job(permanent("c"))
    assert jobs_running(s) == ["a", "b"]
    s.remove_job("a")  # a slot is free, c waited for it
    s.add_job(permanent("d"))
    assert jobs_running(s) == ["b"]
    s.reschedule()
    assert jobs_running(s) == ["b", "c"]


def test_normal_exit_removes_the_job_and_remove_job_stops_it() -> None:
    runner = FakeRunner()
    s = Scheduling(runner, FakeClock(), Settings(max_jobs=10))
    s.add_job(permanent("a"))
    s.add_job(permanent("b"))
    s.job_exited(s.table.get("a"), "normal")
    assert "a" not in s.table
    assert s.remove_job("b") and runner.stopped == ["b"] and len(s.table) == 0
    assert not s.remove_job("b")


def test_crash_backoff_grows_and_expires_with_the_clock() -> None:
    clock = FakeClock()
    s = Scheduling(FakeRunner(), clock, Settings(max_jobs=10))
    s.add_job(permanent("a"))
    for n in (1, 2, 3):
        s.job_exited(s.table.get("a"), RuntimeError("boom"))
        assert s.table.get("a").pid is None
        clock.now += backoff_seconds(n) - 1
        s.reschedule()
        assert s.table.get("a").pid is None, f"restarted within the backoff of crash {n}"
        clock.now += 1
        s.reschedule()
        assert s.table.get("a").pid is not None, f"not restarted after the backoff of crash {n}"
        clock.now += 1
    summary = s.job_summary("a")
    assert summary["state"] == "running" and summary["error_count"] == 3


def test_a_fenced_exit_is_a_stop_restarted_by_the_next_reschedule_without_backoff() -> None:
    """lease_expired: the node's lease fence ran out, the job returned so
    another node may take the document. Not a crash: no error count, no
    backoff; it runs again once a reschedule finds it a slot."""
    clock = FakeClock()
    s = Scheduling(FakeRunner(), clock, Settings(max_jobs=10))
    s.add_job(permanent("a"))
    for _ in range(3):
        s.job_exited(s.table.get("a"), LEASE_EXPIRED)
        job = s.table.get("a")
        assert job.pid is None and job.history[0].type is EventType.STOPPED
        assert s.job_summary("a")["state"] == "pending" and s.counters["crashes"] == 0
        s.reschedule()
        assert s.table.get("a").pid is not None, "a fenced job waits for no backoff"
    assert s.job_summary("a")["error_count"] == 0


def test_no_document_job_starts_while_the_fence_has_run_out() -> None:
    """A document job started past the node's lease fence would return at
    once (lease_expired), and every reschedule would start it again: under
    load that churn kept the scheduler too busy to confirm the doc
    processor's removals, so its fence never moved on (test_docs_overlap's
    2,000 documents: 30,000 starts in 3 minutes, none ticking). While the
    fence has run out document jobs wait, unchanged and without a history
    event; other jobs start; the first reschedule after it holds again
    starts them."""
    fence = {"expired": True}
    s = Scheduling(FakeRunner(), FakeClock(), Settings(max_jobs=10), fenced=lambda: fence["expired"])
    s.add_job(permanent("doc"))
    s.add_job(JobSpec("plain", handler="m:f"))
    assert s.table.get("plain").pid is not None, "a job without a document holds no lease"
    doc = s.table.get("doc")
    assert doc.pid is None and [e.type for e in doc.history] == [EventType.ADDED]
    s.reschedule()
    assert s.table.get("doc").pid is None and s.counters["starts"] == 1
    fence["expired"] = False
    s.reschedule()
    assert s.table.get("doc").pid is not None


def test_start_failure_is_recorded_as_a_crash() -> None:
    s = Scheduling(FakeRunner(fail="no_such_handler"), FakeClock(), Settings(max_jobs=10))
    s.add_job(permanent("a"))
    job = s.table.get("a")
    assert job.pid is None and job.history[0].type is EventType.CRASHED
    summary = s.job_summary("a")
    assert summary["state"] == "crashing" and summary["info"] == "no_such_handler"


def test_job_summary_states_and_history_capped_at_max_history() -> None:
    clock = FakeClock()
    s = Scheduling(FakeRunner(), clock, Settings(max_jobs=1, max_history=4))
    s.add_job(permanent("a"))  # the only job fits in max_jobs 1: started at once
    assert s.job_summary("a")["state"] == "running"
    assert s.job_summary("zzz") is None
    for _ in range(5):
        s.reschedule()
        clock.now += 10_000
        s.job_exited(s.table.get("a"), "boom")
        clock.now += 10_000
    assert len(s.table.get("a").history) == 4
    assert [e["type"] for e in s.jobs()[0]["history"]] == ["crashed", "started", "crashed", "started"]


def test_stats_counters_and_gauges() -> None:
    clock = FakeClock()
    s = Scheduling(FakeRunner(), clock, Settings(max_jobs=3, max_churn=0))  # no rotation: d stays pending
    for name in "abcd":
        s.add_job(permanent(name))
    s.reschedule()
    clock.now += 10
    s.job_exited(s.table.get("a"), "boom")
    clock.now += 10
    stats = s.stats()
    assert stats["adds"] == 4 and stats["crashes"] == 1
    assert (stats["running"], stats["pending"], stats["crashed"], stats["total"]) == (2, 1, 1, 4)
    assert stats["avg_running"] == 20 and stats["avg_crashed"] == 10 and stats["avg_pending"] == 20


def test_settings_are_validated() -> None:
    settings = Settings()
    assert settings.with_setting("max_jobs", 0).max_jobs == 0
    assert settings.with_setting("interval", "5000").interval == 5000
    for key, value in [
        ("max_churn", 0),
        ("max_history", 0),
        ("interval", -1),
        ("max_jobs", -1),
        ("max_jobs", "x"),
        ("max_jobs", 1.5),
        ("bogus", 1),
    ]:
        with pytest.raises(InvalidSetting):
            settings.with_setting(key, value)


def test_job_spec_validation() -> None:
    spec = JobSpec.from_dict({"id": "r", "source": "sqlite:///a.db", "target": "sqlite:///b.db", "continuous": True})
    assert spec.kind == "replicate" and spec.transient and spec.continuous
    assert JobSpec.from_dict({"id": "h", "handler": "pkg.mod:fn"}).kind == "handler"
    for bad in [
        {"id": "x"},
        {"id": "", "handler": "a:b"},
        {"id": "x", "handler": "nocolon"},
        {"id": "x", "handler": "a:b", "continuous": "yes"},
        {"id": "x", "handler": "a:b", "what": 1},
        {"id": "x", "handler": "a:b", "options": []},
        "not a dict",
    ]:
        with pytest.raises(InvalidJobSpec):
            JobSpec.from_dict(bad)


def test_a_scheduler_jobs_context_has_the_pools_stop_waits() -> None:
    """One handler runtime: a scheduler job's context is the pools' JobContext
    (wait_stopping, await stopped), woken by its host's stop from another thread."""
    import asyncio
    import queue
    import threading
    import time

    from actors.handlers import JobContext, StopSignal
    from actors.scheduler.job import scheduler_context

    stop = StopSignal()
    ctx = scheduler_context(permanent("ctx"), None, queue.Queue(), stop)
    assert isinstance(ctx, JobContext) and not ctx.stopping
    assert ctx.wait_stopping(0.01) is False

    async def handler() -> tuple[bool, float]:
        began = time.monotonic()
        threading.Timer(0.05, stop.set).start()  # the host asks, from its own thread
        return await ctx.stopped(10), time.monotonic() - began

    woken, waited = asyncio.run(handler())
    assert woken and waited < 5 and ctx.stopping and ctx.wait_stopping(0) is True
