"""Per-type job counts, kept by every transition so that reading them costs
a few keys whatever the queue's size.

Data model (beside the couch_jobs rows)::

    (JOBS, COUNTS, type, "jobs")     = int64 LE   jobs of the type (any state)
    (JOBS, COUNTS, type, "pending")  = int64 LE   rows in its PENDING index
    (JOBS, COUNTS, type, "running")  = int64 LE   rows in its ACTIVITY index
    (JOBS, COUNTS, type, "claimed")  = int64 LE   of those, worker-pool jobs a host
                                                  claimed whose handler has not started
    (JOBS, COUNTS, type, "failed")   = int64 LE   finished jobs whose worker-pool
                                                  outcome is ``failed``
    (JOBS, COUNTS, type, "counted")  = b"1"       the counters above are exact

Principle: the rows that change a state bump its counter with an atomic
add in the same transaction (FoundationDB: a conflict-free mutation;
SQLite: coalesced per transaction), so a counter is exact whenever the
``counted`` mark is there. A store written before the counters existed
(or repaired by hand) has no mark: the first :func:`read` counts the rows
once, in its own transaction, and sets the mark. ``finished`` is ``jobs -
pending - running``; :func:`read` shows ``running - claimed`` as running; ``scheduled`` (pending, not yet due) is counted from
the pending index, which is ordered by time, up to :data:`SCHEDULED_CAP`.
"""
from __future__ import annotations

import struct
from typing import Optional

from fdblayer.interface import Transaction, strinc, transactional
from fdblayer.jobs.job import JobState
from fdblayer.jobs.keys import JobType, Layout

__all__ = ["FIELDS", "EVENTS", "RUN_BUCKETS", "SCHEDULED_CAP", "Tally", "bump", "read", "recount", "tally",
           "observe_run", "read_events"]

#: The counters a type keeps.
FIELDS = ("jobs", "pending", "running", "claimed", "failed")
#: Counters of events since the type's first (never decremented): jobs added
#: (new, or finished and added again), attempts started (an accept, or a pool
#: handler's start), and the pools' outcomes: succeeded, failed for good, retried; and
#: jobs re-enqueued by the activity monitor.
EVENTS = ("added", "started", "succeeded", "failed_final", "retried", "reenqueued")
#: Upper bounds (seconds) of the run-time histogram of the pools' handler calls.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
#: At most this many not-yet-due jobs are counted (``scheduled_capped`` says when there are more).
SCHEDULED_CAP = 10_000
_MARK = "counted"
_PACK = struct.Struct("<q")


def bump(tr: Transaction, layout: Layout, job_type: JobType, name: str, n: int = 1) -> None:
    """Add ``n`` (may be negative) to one of the type's counters."""
    if n:
        tr.add(layout.count_key(job_type, name), _PACK.pack(n))


class Tally:
    """The counter bumps and watch stamps of a transition, written at once or
    once per key for a whole batch.

    A batch of transitions in one transaction (a worker pool's claim or
    complete) bumps the same few counters and stamps the same watch keys
    once per job; a deferred tally collects them and :meth:`write`, called
    before the transaction commits, writes each key once. What is written
    is what the bumps one by one would have written. With ``deferred=False``
    each call writes at once (a single transition).
    """

    __slots__ = ("tr", "layout", "deferred", "bumps", "stamped", "enqueued")

    def __init__(self, tr: Transaction, layout: Layout, deferred: bool = True) -> None:
        self.tr, self.layout, self.deferred = tr, layout, deferred
        self.bumps: dict = {}
        self.stamped: set = set()
        self.enqueued: dict = {}

    def bump(self, job_type: JobType, name: str, n: int = 1) -> None:
        """:func:`bump`."""
        if not self.deferred:
            bump(self.tr, self.layout, job_type, name, n)
            return
        key = (job_type, name)
        self.bumps[key] = self.bumps.get(key, 0) + n

    def stamp(self, job_type: JobType) -> None:
        """``rows.update_watch`` (deferred: one stamp a type)."""
        if not self.deferred:
            self._stamp(job_type)
            return
        self.stamped.add(job_type)

    def enqueue(self, job_type: JobType, n: int = 1) -> None:
        """The bump of the type's pending watch that ``pending.enqueue`` makes."""
        if not self.deferred:
            self.tr.add(self.layout.watches_pending_key(job_type), _PACK.pack(n))
            return
        self.enqueued[job_type] = self.enqueued.get(job_type, 0) + n

    def write(self) -> None:
        """Write what a deferred tally collected (and forget it)."""
        for (job_type, name), n in self.bumps.items():
            bump(self.tr, self.layout, job_type, name, n)
        for job_type, n in self.enqueued.items():
            self.tr.add(self.layout.watches_pending_key(job_type), _PACK.pack(n))
        for job_type in self.stamped:
            self._stamp(job_type)
        self.bumps, self.stamped, self.enqueued = {}, set(), {}

    def _stamp(self, job_type: JobType) -> None:
        from fdblayer.jobs import rows  # rows imports this module

        rows.update_watch(self.tr, self.layout, job_type)


@transactional
def read(tr: Transaction, layout: Layout, job_type: JobType, now: float) -> dict:
    """The type's counts: ``jobs, pending, scheduled, claimed, running,
    finished, failed`` and ``scheduled_capped`` (True when more than
    :data:`SCHEDULED_CAP` jobs are not yet due). ``running`` counts the
    jobs whose handler (or hand-written worker) runs; ``claimed`` the pools'
    jobs held by a host whose handler has not started.

    Counts the rows once first when the type was never counted.
    """
    if tr.snapshot.get(layout.count_key(job_type, _MARK)) is None:
        values = recount(tr, layout, job_type)
    else:
        raws = tr.snapshot.get_many([layout.count_key(job_type, name) for name in FIELDS])
        values = {name: _unpack(raw) for name, raw in zip(FIELDS, raws)}
    prefix = layout.pending_prefix(job_type)
    future = tr.snapshot.get_range(layout.pending_end(job_type, int(now)), strinc(prefix),
                                   limit=SCHEDULED_CAP + 1)
    return {"jobs": values["jobs"], "pending": values["pending"],
            "scheduled": min(len(future), SCHEDULED_CAP), "scheduled_capped": len(future) > SCHEDULED_CAP,
            "claimed": min(values["claimed"], values["running"]),
            "running": max(0, values["running"] - values["claimed"]),
            "finished": max(0, values["jobs"] - values["pending"] - values["running"]),
            "failed": values["failed"]}


def recount(tr: Transaction, layout: Layout, job_type: JobType) -> dict:
    """Count the type's rows and set its counters (and mark) to the result."""
    values = tally(tr, layout, job_type)
    for name, value in values.items():
        tr.set(layout.count_key(job_type, name), _PACK.pack(value))
    tr.set(layout.count_key(job_type, _MARK), b"1")
    return values


def tally(tr: Transaction, layout: Layout, job_type: JobType) -> dict:
    """What the counters should say, from the rows themselves (reads every job)."""
    from fdblayer.jobs import model, work  # they import this module

    jobs = model.get_jobs(tr, layout, job_type)
    pending = sum(1 for _, state, _ in jobs.values() if state is JobState.PENDING)
    running = sum(1 for _, state, _ in jobs.values() if state is JobState.RUNNING)
    finished = [job_id for job_id, (_, state, _) in jobs.items() if state is JobState.FINISHED]
    failed = sum(1 for entry in work.read_many(tr, layout, job_type, finished)
                 if entry is not None and entry[2].outcome == work.FAILED)
    held = [job_id for job_id, (_, state, _) in jobs.items() if state is JobState.RUNNING]
    claimed = sum(1 for entry in work.read_many(tr, layout, job_type, held)
                  if entry is not None and work.claimed_only(entry[2]))
    return {"jobs": len(jobs), "pending": pending, "running": running, "claimed": claimed, "failed": failed}


def observe_run(tally: Tally, job_type: JobType, seconds: float) -> None:
    """Count one handler call of ``seconds`` in the type's run-time histogram
    (buckets as :data:`RUN_BUCKETS`, a count and a sum in microseconds)."""
    if not seconds >= 0:  # unknown (or NaN): not observed
        return
    bucket = next((i for i, bound in enumerate(RUN_BUCKETS) if seconds <= bound), len(RUN_BUCKETS))
    tally.bump(job_type, f"run_le_{bucket}")
    tally.bump(job_type, "run_count")
    tally.bump(job_type, "run_sum_us", int(min(seconds, 1e9) * 1e6))


@transactional
def read_events(tr: Transaction, layout: Layout, job_type: JobType) -> dict:
    """The type's event counters and run-time histogram: ``{event: n, ...,
    "run": {"buckets": [(bound, cumulative count), ..., (inf, count)],
    "count": n, "sum": seconds}}``."""
    names = list(EVENTS) + [f"run_le_{i}" for i in range(len(RUN_BUCKETS) + 1)] + ["run_count", "run_sum_us"]
    raws = tr.snapshot.get_many([layout.count_key(job_type, name) for name in names])
    values = {name: _unpack(raw) for name, raw in zip(names, raws)}
    cumulative, buckets = 0, []
    for i, bound in enumerate(RUN_BUCKETS + (float("inf"),)):
        cumulative += values[f"run_le_{i}"]
        buckets.append((bound, cumulative))
    out = {event: values[event] for event in EVENTS}
    out["run"] = {"buckets": buckets, "count": values["run_count"], "sum": values["run_sum_us"] / 1e6}
    return out


def _unpack(raw: Optional[bytes]) -> int:
    """A stored counter; a missing or malformed one reads as 0."""
    if raw is None or len(raw) != 8:
        return 0
    return max(0, _PACK.unpack(raw)[0])
