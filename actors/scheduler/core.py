"""The scheduler's job table and policy, on plain data (no actors, no I/O).

Principle: everything couch_replicator_scheduler decides — which jobs run,
which wait, which are rotated out, how long a crashing job is backed off,
what a job's summary says — is computed here from a :class:`JobTable` (the
seed's ETS table), a :class:`Settings` value (its ``#state{}``) and an
injected clock. Starting and stopping job processes is delegated to a
:class:`Runner` (the seed's ``couch_replicator_scheduler_sup``, which its
eunit tests mock), so the seed's tests run here unchanged on plain data.

Data model, per job (``Job``)::

    id        -> spec (JobSpec), pid (None when not running), monitor,
                 history [Event(type, when, reason), ...] newest first,
                 stats (last reported by the job), checkpoint (last state)

Times are the clock's wall seconds (``clock.time()``), as the seed's
``os:timestamp()``. Deviation from the seed, on purpose: ``pending_jobs``
considers only jobs that are not running (the seed folded over running
jobs too, whose "start" was then a no-op that cost a slot's turn).
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import itertools
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

from actors.scheduler.model import (  # noqa: F401 - the vocabulary, re-exported for the scheduler's users
    SchedulerError,
    InvalidSetting,
    InvalidJobSpec,
    InvalidRequest,
    JobNotFound,
    EventType,
    RunState,
    Event,
    JobSpec,
    JobRow,
    Settings,
    is_showable_time,
    iso8601,
    DEFAULT_HEALTH_THRESHOLD,
    DEFAULT_MAX_JOBS,
    DEFAULT_MAX_CHURN,
    DEFAULT_MAX_HISTORY,
    DEFAULT_INTERVAL,
    LEASE_EXPIRED,
)

log = logging.getLogger(__name__)

MAX_BACKOFF_EXPONENT = 10
BACKOFF_INTERVAL = 30.0  # seconds


# ------------------------------------------------------------ pure functions


def backoff_seconds(crash_count: int) -> float:
    """How long a job that crashed ``crash_count`` times in a row waits:
    ``2 ** min(crash_count - 1, 10) * 30`` seconds (0 for no crash)."""
    if crash_count <= 0:
        return 0.0
    return (1 << min(crash_count - 1, MAX_BACKOFF_EXPONENT)) * BACKOFF_INTERVAL


def consecutive_crashes(history: list, health_threshold: float) -> int:
    """Count the crashes that each came within ``health_threshold`` seconds
    of the event before them, newest first; a ``stopped`` right after a
    ``started`` (a healthy run) or a crash long after the previous event
    ends the count."""
    count = 0
    i, n = 0, len(history)
    while i < n:
        event = history[i]
        if event.type is EventType.CRASHED and i + 1 < n:
            if event.when - history[i + 1].when > health_threshold:
                return count
            count += 1
        elif event.type is EventType.STOPPED and i + 1 < n and history[i + 1].type is EventType.STARTED:
            return count
        i += 1
    return count


def latest_crash_timestamp(history: list) -> float:
    """When the newest crash happened (0 if never)."""
    for event in history:
        if event.type is EventType.CRASHED:
            return event.when
    return 0.0


def last_started(job: JobRow) -> float:
    """When the job last started (0 if never)."""
    for event in job.history:
        if event.type is EventType.STARTED:
            return event.when
    return 0.0


def oldest_job_first(job: JobRow) -> float:
    """Sort key putting the job that started longest ago first."""
    return last_started(job)


def not_recently_crashed(job: JobRow, now: float, health_threshold: float) -> bool:
    """False while a crashing job is still within its backoff."""
    history = job.history
    head = history[0].type if history else None
    if head is EventType.STOPPED or (head is EventType.ADDED and len(history) == 1):
        return True
    crashes = consecutive_crashes(history, health_threshold)
    return now - latest_crash_timestamp(history) >= backoff_seconds(crashes)


def is_continuous(job: JobRow) -> bool:
    return bool(job.spec.continuous)


def reason_text(reason: Any) -> str:
    """A crash reason as text for JSON (an exception as ``Type: message``)."""
    if isinstance(reason, str):
        return reason
    if isinstance(reason, BaseException):
        text = str(reason)
        return f"{type(reason).__name__}: {text}" if text else type(reason).__name__
    return repr(reason)


# ------------------------------------------------------------------ table


def _ready_at(job: JobRow, health_threshold: float) -> float:
    """From when ``job`` is not recently crashed (see not_recently_crashed)."""
    history = job.history
    head = history[0].type if history else None
    if head is EventType.STOPPED or (head is EventType.ADDED and len(history) == 1):
        return float("-inf")
    crashes = consecutive_crashes(history, health_threshold)
    return latest_crash_timestamp(history) + backoff_seconds(crashes)


def _idle_entry(job: JobRow, health_threshold: float) -> tuple:
    return ((last_started(job), str(job.id)), _ready_at(job, health_threshold), job)


def _category(job: JobRow) -> str | None:
    head = job.history[0].type if job.history else None
    if job.pid is not None:
        return "running"
    if head is EventType.CRASHED:
        return "crashed"
    if head in (EventType.ADDED, EventType.STOPPED):
        return "pending"
    return None


class JobTable:
    """The job table: jobs by id (and by monitor ref; actor addresses are
    not hashable), with running/idle indexes and the sums the
    stats gauges need kept up to date on every write, so that counts and
    averages cost O(1) and a reschedule scans only idle jobs."""

    def __init__(self) -> None:
        self._jobs: dict[Any, JobRow] = {}
        self._running: dict[Any, JobRow] = {}
        # id -> ((last_started, str(id)), ready_at, job): computed once per write
        self._idle: dict[Any, tuple] = {}
        self.health_threshold: float = DEFAULT_HEALTH_THRESHOLD
        self._by_monitor: dict[Any, JobRow] = {}
        self._sums: dict[str, list] = {"pending": [0, 0.0], "running": [0, 0.0], "crashed": [0, 0.0]}

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: Any) -> bool:
        return job_id in self._jobs

    def __iter__(self) -> Iterator[JobRow]:
        return iter(list(self._jobs.values()))

    def get(self, job_id: Any) -> JobRow | None:
        return self._jobs.get(job_id)

    def by_monitor(self, ref: Any) -> JobRow | None:
        return self._by_monitor.get(ref)

    def running_jobs(self) -> list[JobRow]:
        return list(self._running.values())

    def idle_jobs(self) -> Iterable[JobRow]:
        return [entry[2] for entry in self._idle.values()]

    def ready_idle(self, now: float, health_threshold: float) -> Iterator[tuple]:
        """``(pending key, ready_at, job)`` of the idle jobs not backing off at ``now``."""
        if health_threshold != self.health_threshold:
            self.health_threshold = health_threshold
            for job in list(self._idle.values()):
                self._idle[job[2].id] = _idle_entry(job[2], health_threshold)
        return (entry for entry in self._idle.values() if entry[1] <= now)

    def running_count(self) -> int:
        return len(self._running)

    def pending_count(self) -> int:
        """Jobs without a process (the seed's pending_job_count: crashed ones too)."""
        return len(self._idle)

    def put(self, job: JobRow) -> JobRow:
        """Insert or replace the row ``job.id``."""
        old = self._jobs.get(job.id)
        if old is not None:
            self._unindex(old)
        self._jobs[job.id] = job
        self._index(job)
        return job

    def update(self, job: JobRow, **changes: Any) -> JobRow:
        """Replace ``job``'s row with a copy carrying ``changes``."""
        return self.put(dataclasses.replace(job, **changes))

    def delete(self, job_id: Any) -> JobRow | None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            self._unindex(job)
        return job

    def category_stats(self, now: float) -> dict[str, tuple[int, int]]:
        """Per category (pending, running, crashed): count and average age in
        seconds of the newest history event."""
        out = {}
        for cat, (n, total) in self._sums.items():
            out[cat] = (n, round((n * now - total) / n) if n else 0)
        return out

    def _index(self, job: JobRow) -> None:
        if job.pid is not None:
            self._running[job.id] = job
            if job.monitor is not None:
                self._by_monitor[job.monitor] = job
        else:
            self._idle[job.id] = _idle_entry(job, self.health_threshold)
        cat = _category(job)
        if cat is not None:
            acc = self._sums[cat]
            acc[0] += 1
            acc[1] += job.history[0].when

    def _unindex(self, job: JobRow) -> None:
        self._running.pop(job.id, None)
        self._idle.pop(job.id, None)
        if job.monitor is not None and self._by_monitor.get(job.monitor) is job:
            del self._by_monitor[job.monitor]
        cat = _category(job)
        if cat is not None:
            acc = self._sums[cat]
            acc[0] -= 1
            acc[1] -= job.history[0].when


# ----------------------------------------------------------------- policy


class JobStartError(SchedulerError):
    """A runner could not start a job; ``reason`` goes to its history."""

    def __init__(self, reason: Any) -> None:
        super().__init__(reason_text(reason))
        self.reason = reason


class Runner(Protocol):
    """Starts and stops job processes for the :class:`Scheduling` policy."""

    def start(self, job: JobRow) -> tuple[Any, Any]:
        """Start ``job``; return ``(pid, monitor)`` or raise JobStartError."""

    def stop(self, job: JobRow) -> None:
        """Stop ``job``'s process (no exit notice must follow)."""


class Clock(Protocol):
    def time(self) -> float: ...


class Scheduling:
    """The seed's scheduler logic over a JobTable. Each public method is one
    step the scheduler actor takes for one message.

    Args:
        runner: starts and stops job processes.
        clock: gives ``time()`` (wall seconds) for history events.
        settings: the tunables.
        table: an existing table (tests), else a new empty one.
        fenced: True while the node's lease fence has run out: document
            jobs (``db_name``) then stay pending, as a run would return at
            once (``lease_expired``) and the next reschedule would start it
            again; the first reschedule after it holds again starts them.
    """

    COUNTERS = ("adds", "removes", "starts", "stops", "crashes")

    def __init__(
        self,
        runner: Runner,
        clock: Clock,
        settings: Settings | None = None,
        table: JobTable | None = None,
        fenced: Callable[[], bool] | None = None,
    ) -> None:
        self.runner = runner
        self.fenced = fenced
        self.clock = clock
        self.settings = settings or Settings()
        self.table = table if table is not None else JobTable()
        self.counters = dict.fromkeys(self.COUNTERS, 0)

    # ---------------------------------------------------------- requests
    def add_job(self, spec: JobSpec, crashes: int = 0, reason: Any = None, checkpoint: Any = None) -> JobRow:
        """Add a job, replacing (stopping) one with the same id, and start
        it at once if there is room. ``crashes``: the job crashed that many
        times in a row before (under this scheduler's predecessor): it is
        added crashing, backing off for that count from now (not started).
        ``checkpoint``: its handler's last one (its first run resumes there)."""
        self.maybe_remove_job(spec.id)
        now = self.clock.time()
        crashed = [Event(EventType.CRASHED, now, reason)] * min(crashes, MAX_BACKOFF_EXPONENT + 1)
        history = (crashed + [Event(EventType.ADDED, now)])[: self.settings.max_history]
        job = self.table.put(JobRow(spec.id, spec, history, checkpoint=checkpoint))
        if not crashed:
            self.maybe_start_newly_added_job(job)
        self.counters["adds"] += 1
        return job

    def remove_job(self, job_id: Any) -> bool:
        """Stop and forget a job; False if there was none."""
        return self.maybe_remove_job(job_id)

    def reschedule(self) -> None:
        """Stop excess jobs, start pending ones, rotate continuous ones."""
        running = self.table.running_count()
        pending = self.table.pending_count()
        self.stop_excess_jobs(running)
        self.start_pending_jobs(running, pending)
        self.rotate_jobs(running, pending)

    def job_exited(self, job: JobRow, reason: Any) -> None:
        """A running job's process exited (the seed's DOWN): ``normal``
        completes it; ``lease_expired`` (its node's lease fence ran out: the
        document may be another node's) stops it, pending again without a
        crash or a backoff, started by a later reschedule once its lease is
        renewed; anything else is a crash."""
        if reason == "normal":
            log.info("job_completed job=%r", job.id)
            self.table.delete(job.id)
        elif reason == LEASE_EXPIRED:
            log.warning("job_fenced job=%r: its lease may have run out, pending again", job.id)
            job = self.update_state_stopped(job)
            if self.fenced is not None and not self.fenced():  # renewed before its exit was read:
                self.start_job(job)  # the processor's Reschedule found it still running
        else:
            self.handle_crashed_job(job, reason)

    def handle_crashed_job(self, job: JobRow, reason: Any) -> None:
        """A transient job is removed; a permanent one records the crash and
        pending jobs may take its slot."""
        if job.spec.transient:
            log.error("job_transient_failed job=%r reason=%s: removed", job.id, reason_text(reason))
            self.table.delete(job.id)
            return
        self.update_state_crashed(job, reason)
        if len(self.table) < self.settings.max_jobs:
            # O(total jobs): only worth it when the table is small.
            self.start_pending_jobs()

    # ------------------------------------------------------------ policy
    def maybe_start_newly_added_job(self, job: JobRow) -> None:
        """Start a new job at once when every job of the table (itself
        included) fits in ``max_jobs``; otherwise others may be waiting, and
        the next reschedule picks who runs. (The seed tests ``total <
        max_jobs``: the last of exactly ``max_jobs`` jobs then waited a whole
        interval with a slot free; see docs/deviations.md.)"""
        max_jobs = self.settings.max_jobs
        if len(self.table) <= max_jobs and self.table.running_count() < max_jobs:
            self.start_job(job)

    def maybe_remove_job(self, job_id: Any) -> bool:
        job = self.table.get(job_id)
        if job is None:
            return False
        self.stop_job(job)
        self.table.delete(job_id)
        self.counters["removes"] += 1
        return True

    def pending_jobs(self, count: int) -> list[JobRow]:
        """Up to ``count`` jobs without a process that are not backing off,
        the longest since they last started first."""
        if count <= 0:
            return []
        ready = self.table.ready_idle(self.clock.time(), self.settings.health_threshold)
        if self.fence_out():
            ready = (entry for entry in ready if entry[2].spec.db_name is None)
        # Keys are unique (they end with the id), so jobs are never compared.
        return [entry[2] for entry in heapq.nsmallest(count, ready)]

    def fence_out(self) -> bool:
        """True while the node's lease fence has run out (see ``fenced``)."""
        return self.fenced is not None and self.fenced()

    def held_back(self, job: JobRow) -> bool:
        """True when ``job`` is a document's and the fence has run out: a
        run would return at once, so it stays pending."""
        return job.spec.db_name is not None and self.fence_out()

    def start_jobs(self, count: int) -> None:
        for job in self.pending_jobs(count):
            self.start_job(job)

    def stop_jobs(self, count: int, continuous: bool) -> int:
        """Stop up to ``count`` running jobs of one kind, oldest first."""
        if count <= 0:
            return 0
        candidates = [j for j in self.table.running_jobs() if is_continuous(j) == continuous]
        chosen = heapq.nsmallest(count, candidates, key=oldest_job_first)
        for job in chosen:
            self.stop_job(job)
        return len(chosen)

    def stop_excess_jobs(self, running: int) -> None:
        """Over max_jobs: stop continuous jobs first, then one-shot ones."""
        stop_count = running - self.settings.max_jobs
        if stop_count > 0:
            stopped = self.stop_jobs(stop_count, True)
            if stop_count - stopped > 0:
                self.stop_jobs(stop_count - stopped, False)

    def start_pending_jobs(self, running: int | None = None, pending: int | None = None) -> None:
        if running is None:
            running, pending = self.table.running_count(), self.table.pending_count()
        assert pending is not None  # given with running
        max_jobs = self.settings.max_jobs
        if running < max_jobs and pending > 0:
            self.start_jobs(max_jobs - running)

    def rotate_jobs(self, running: int, pending: int) -> None:
        """All slots taken and jobs waiting: swap up to max_churn continuous
        jobs (one-shot jobs are never rotated out)."""
        settings = self.settings
        if running == settings.max_jobs and pending > 0:
            rotate = min(pending, running, settings.max_churn)
            if self.fence_out():  # stop no more than can start: document jobs wait
                rotate = len(self.pending_jobs(rotate))
            self.start_jobs(self.stop_jobs(rotate, True))

    # --------------------------------------------------------- transitions
    def start_job(self, job: JobRow) -> None:
        if job.pid is not None:
            return
        if self.held_back(job):
            return  # it would stop at once: it waits for the fence to hold again
        try:
            pid, monitor = self.runner.start(job)
        except JobStartError as exc:
            log.warning("job_start_failed job=%r reason=%s", job.id, reason_text(exc.reason))
            self.update_state_crashed(job, exc.reason)
            return
        self.update_state_started(job, pid, monitor)

    def stop_job(self, job: JobRow) -> None:
        if job.pid is None:
            return
        self.runner.stop(job)
        self.update_state_stopped(job)

    def update_state_started(self, job: JobRow, pid: Any, monitor: Any) -> JobRow:
        self.counters["starts"] += 1
        return self.table.update(job, pid=pid, monitor=monitor, history=self._history(job, EventType.STARTED))

    def update_state_stopped(self, job: JobRow) -> JobRow:
        self.counters["stops"] += 1
        return self.table.update(job, pid=None, monitor=None, history=self._history(job, EventType.STOPPED))

    def update_state_crashed(self, job: JobRow, reason: Any) -> JobRow:
        self.counters["crashes"] += 1
        return self.table.update(job, pid=None, monitor=None, history=self._history(job, EventType.CRASHED, reason))

    def _history(self, job: JobRow, kind: EventType, reason: Any = None) -> list:
        history = [Event(kind, self.clock.time(), reason)] + job.history
        return history[: self.settings.max_history]

    # -------------------------------------------------------------- views
    def stats(self) -> dict:
        """The seed's counters and gauges."""
        cats = self.table.category_stats(self.clock.time())
        out = dict(self.counters)
        out.update(
            total=len(self.table),
            pending=cats["pending"][0],
            running=cats["running"][0],
            crashed=cats["crashed"][0],
            avg_pending=cats["pending"][1],
            avg_running=cats["running"][1],
            avg_crashed=cats["crashed"][1],
        )
        return out

    def job_summary(self, job_id: Any) -> dict | None:
        """State, error count and last update of a job (None if gone)."""
        job = self.table.get(job_id)
        if job is None:
            return None
        errors = consecutive_crashes(job.history, self.settings.health_threshold)
        info = None
        if job.pid is not None:
            state = RunState.RUNNING
        elif errors == 0:
            state = RunState.PENDING
        else:
            state = RunState.CRASHING
            info = next((reason_text(e.reason) for e in job.history if e.type is EventType.CRASHED), None)
        spec = job.spec
        return {
            "source": spec.source,
            "target": spec.target,
            "handler": spec.handler,
            "state": state.value,
            "info": info,
            "error_count": errors,
            "last_updated": iso8601(job.history[0].when) if job.history else None,
            "start_time": iso8601(spec.start_time),
            "proxy": None,
        }

    def job_json(self, job: JobRow, node: Any = None) -> dict:
        """A job as the seed's job_ejson (plus reported stats as ``info``)."""
        history = []
        for event in job.history:
            entry = {"timestamp": iso8601(event.when), "type": event.type.value}
            if event.type is EventType.CRASHED:
                entry["reason"] = reason_text(event.reason)
            history.append(entry)
        spec = job.spec
        return {
            "id": job.id,
            "pid": None if job.pid is None else str(job.pid),
            "source": spec.source,
            "target": spec.target,
            "handler": spec.handler,
            "continuous": spec.continuous,
            "database": spec.db_name,
            "user": spec.user,
            "doc_id": spec.doc_id,
            "history": history,
            "node": node,
            "start_time": iso8601(spec.start_time),
            "info": dict(job.stats),
        }

    def jobs(self, node: Any = None, extra: Iterable[JobRow] = ()) -> list[dict]:
        """Every job as :meth:`job_json`, then ``extra`` (rows of stopped
        jobs whose code still runs, no longer in the table)."""
        return [self.job_json(j, node) for j in itertools.chain(self.table, extra)]

    def jobs_page(
        self, limit: int, skip: int, node: Any = None, extra: Iterable[JobRow] = ()
    ) -> tuple[int, list[dict]]:
        """``(total, one page of job dicts)`` in id order, building only the
        page's dicts; ``extra`` as for :meth:`jobs`.

        Raises:
            InvalidRequest: ``limit`` or ``skip`` is not an int >= 0.
        """
        for name, value in (("limit", limit), ("skip", skip)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidRequest(name, value, "must be an int >= 0")
        ordered = sorted(itertools.chain(self.table, extra), key=lambda j: str(j.id))
        return len(ordered), [self.job_json(j, node) for j in ordered[skip : skip + limit]]


def apply_settings(
    settings: Settings, values: Mapping[str, Any], on_error: Callable[[InvalidSetting], None] | None = None
) -> Settings:
    """Apply several settings, validating each."""
    for key, value in values.items():
        try:
            settings = settings.with_setting(key, value)
        except InvalidSetting as exc:
            if on_error is None:
                raise
            on_error(exc)
    return settings
