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
    (JOBS, COUNTS, type, "fresh")    = int64 LE   jobs added under a new id and
                                                  pending at once, counted here
                                                  instead of in jobs, pending and
                                                  the added event (see below)

Principle: the rows that change a state bump its counter
(:mod:`fdblayer.jobs.tally`) in the same transaction, so a counter is
exact whenever the ``counted`` mark is there. A store written before the
counters existed (or repaired by hand) has no mark: the first read
(``overview.type_counts``) counts the rows once, in its own transaction, and sets the
mark. A fresh enqueue (``model.add`` of an id made for it) makes one add
to ``fresh`` where an add of a known id makes three (``jobs``, ``pending``
and the ``added`` event); the reads below fold ``fresh`` into all three, and
a recount moves it into ``added`` and zeroes it. ``finished`` is ``jobs -
pending - running``; :func:`shown` shows ``running - claimed`` as running; ``scheduled`` (pending, not yet due)
is counted from the pending index, which is ordered by time, up to
:data:`SCHEDULED_CAP`. This module is the counters' record, below the
transitions; the recount from the rows is beside the views, in
:mod:`fdblayer.jobs.overview`.
"""

from __future__ import annotations

from typing import Any, Optional

from fdblayer.interface import Transaction, strinc, transactional
from fdblayer.jobs import pending
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.tally import FRESH, PACK, RUN_BUCKETS

__all__ = ["FIELDS", "EVENTS", "FRESH", "SCHEDULED_CAP", "stored", "store", "scheduled", "shown", "read_events"]

#: The counters a type keeps.
FIELDS = ("jobs", "pending", "running", "claimed", "failed")
#: Counters of events since the type's first (never decremented): jobs added
#: (new, or finished and added again), attempts started (an accept, or a pool
#: handler's start), and the pools' outcomes: succeeded, failed for good, retried,
#: snoozed (again later, the attempt not counted); and
#: jobs re-enqueued by the activity monitor.
EVENTS = ("added", "started", "succeeded", "failed_final", "retried", "snoozed", "reenqueued")
#: At most this many not-yet-due jobs are counted (``scheduled_capped`` says when there are more).
SCHEDULED_CAP = 10_000
_MARK = "counted"
_STORED = FIELDS + (FRESH,)


def stored(tr: Transaction, layout: Layout, job_type: JobType) -> Optional[dict[str, int]]:
    """The type's counters (:data:`FIELDS`) as stored, snapshot reads; None
    when the type was never counted (``fdblayer.jobs.overview.type_counts``
    then recounts it)."""
    if tr.snapshot.get(layout.count_key(job_type, _MARK)) is None:
        return None
    raws = tr.snapshot.get_many([layout.count_key(job_type, name) for name in _STORED])
    values = {name: _signed(raw) for name, raw in zip(_STORED, raws, strict=True)}
    fresh = values.pop(FRESH)  # the jobs and pending counters go below 0 as fresh jobs leave
    values["jobs"] += fresh
    values["pending"] += fresh
    return {name: max(0, value) for name, value in values.items()}


def store(tr: Transaction, layout: Layout, job_type: JobType, values: dict[str, int]) -> None:
    """Set the type's counters to ``values`` (counted from its rows) and mark them exact."""
    for name, value in values.items():
        tr.set(layout.count_key(job_type, name), PACK.pack(value))
    fresh_key = layout.count_key(job_type, FRESH)
    fresh = _signed(tr.get(fresh_key))
    if fresh:  # its jobs are counted in values now; their added events move to ``added``
        tr.add(layout.count_key(job_type, "added"), PACK.pack(fresh))
        tr.set(fresh_key, PACK.pack(0))
    tr.set(layout.count_key(job_type, _MARK), b"1")


def scheduled(tr: Transaction, layout: Layout, job_type: JobType, now: float) -> int:
    """Pending jobs of the type not yet due at ``now``, counted from the
    pending index up to :data:`SCHEDULED_CAP` + 1."""
    future = 0
    for priority in [0] + pending.priorities(tr, layout, job_type):
        prefix = layout.pending_prefix(job_type, priority)
        future += len(
            tr.snapshot.get_range(
                layout.pending_end(job_type, int(now), priority), strinc(prefix), limit=SCHEDULED_CAP + 1 - future
            )
        )
        if future > SCHEDULED_CAP:
            break
    return future


def shown(values: dict[str, int], future: int) -> dict[str, int]:
    """What the views show of the counters ``values`` and ``future`` jobs not
    yet due: ``jobs, pending, scheduled, claimed, running, finished, failed``
    and ``scheduled_capped``; ``running`` counts the jobs whose handler (or
    hand-written worker) runs, ``claimed`` the pools' jobs held by a host
    whose handler has not started."""
    return {
        "jobs": values["jobs"],
        "pending": values["pending"],
        "scheduled": min(future, SCHEDULED_CAP),
        "scheduled_capped": future > SCHEDULED_CAP,
        "claimed": min(values["claimed"], values["running"]),
        "running": max(0, values["running"] - values["claimed"]),
        "finished": max(0, values["jobs"] - values["pending"] - values["running"]),
        "failed": values["failed"],
    }


@transactional
def read_events(tr: Transaction, layout: Layout, job_type: JobType) -> dict[str, Any]:
    """The type's event counters and run-time histogram: ``{event: n, ...,
    "run": {"buckets": [(bound, cumulative count), ..., (inf, count)],
    "count": n, "sum": seconds}}``."""
    names = list(EVENTS) + [f"run_le_{i}" for i in range(len(RUN_BUCKETS) + 1)] + ["run_count", "run_sum_us", FRESH]
    raws = tr.snapshot.get_many([layout.count_key(job_type, name) for name in names])
    values = {name: _unpack(raw) for name, raw in zip(names, raws, strict=True)}
    values["added"] += values[FRESH]
    cumulative, buckets = 0, []
    for i, bound in enumerate(RUN_BUCKETS + (float("inf"),)):
        cumulative += values[f"run_le_{i}"]
        buckets.append((bound, cumulative))
    out: dict[str, Any] = {event: values[event] for event in EVENTS}
    out["run"] = {"buckets": buckets, "count": values["run_count"], "sum": values["run_sum_us"] / 1e6}
    return out


def _unpack(raw: Optional[bytes]) -> int:
    """A stored counter; a missing or malformed one reads as 0, as does one below 0."""
    return max(0, _signed(raw))


def _signed(raw: Optional[bytes]) -> int:
    """A stored counter, below 0 too; a missing or malformed one reads as 0."""
    if raw is None or len(raw) != 8:
        return 0
    value: int = PACK.unpack(raw)[0]
    return value
