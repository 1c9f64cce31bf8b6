"""The counter bumps and watch stamps every transition of the jobs model writes.

Data model: a type's counters are ``(JOBS, COUNTS, type, name) = int64 LE``
(see :mod:`fdblayer.jobs.counts` for what each one counts and how they are
read); its activity watch key ``(JOBS, WATCHES_ACTIVITY, type)`` holds the
versionstamp of the last commit that changed one of its jobs' activity.

Principle: the rows that change a state bump its counter with an atomic
add in the same transaction (FoundationDB: a conflict-free mutation;
SQLite and PostgreSQL: coalesced per transaction), and stamp the watch,
so a counter is exact and a watcher wakes. This is the bottom of the jobs
model: it imports nothing of it but the key layout.
"""

from __future__ import annotations

import struct

import fdb.tuple

from fdblayer.interface import Transaction
from fdblayer.jobs.keys import JobType, Layout, new_versionstamp

__all__ = ["FRESH", "RUN_BUCKETS", "Tally", "bump", "stamp_watch", "observe_run"]

#: Upper bounds (seconds) of the run-time histogram of the pools' handler calls.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
PACK = struct.Struct("<q")
#: The counter of fresh enqueues: each is one job, one pending row and one
#: ``added`` event (see :mod:`fdblayer.jobs.counts`).
FRESH = "fresh"
# The value of a WATCHES_ACTIVITY key: a lone versionstamp, the same bytes
# for every write (the store fills the placeholder in at commit).
_STAMPED_WATCH_VALUE = fdb.tuple.pack_with_versionstamp((new_versionstamp(),))


def stamp_watch(tr: Transaction, layout: Layout, job_type: JobType) -> None:
    """Stamp the type's activity watch key, waking notifiers and monitors."""
    tr.set_versionstamped_value(layout.watches_activity_key(job_type), _STAMPED_WATCH_VALUE)


def bump(tr: Transaction, layout: Layout, job_type: JobType, name: str, n: int = 1) -> None:
    """Add ``n`` (may be negative) to one of the type's counters."""
    if n:
        tr.add(layout.count_key(job_type, name), PACK.pack(n))


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
        self.bumps: dict[tuple[JobType, str], int] = {}
        self.stamped: set[JobType] = set()
        self.enqueued: dict[JobType, int] = {}

    def bump(self, job_type: JobType, name: str, n: int = 1) -> None:
        """:func:`bump`."""
        if not self.deferred:
            bump(self.tr, self.layout, job_type, name, n)
            return
        key = (job_type, name)
        self.bumps[key] = self.bumps.get(key, 0) + n

    def stamp(self, job_type: JobType) -> None:
        """:func:`stamp_watch` (deferred: one stamp a type)."""
        if not self.deferred:
            self._stamp(job_type)
            return
        self.stamped.add(job_type)

    def enqueue(self, job_type: JobType, n: int = 1) -> None:
        """The bump of the type's pending watch that ``pending.enqueue`` makes."""
        if not self.deferred:
            self.tr.add(self.layout.watches_pending_key(job_type), PACK.pack(n))
            return
        self.enqueued[job_type] = self.enqueued.get(job_type, 0) + n

    def write(self) -> None:
        """Write what a deferred tally collected (and forget it)."""
        for (job_type, name), n in self.bumps.items():
            bump(self.tr, self.layout, job_type, name, n)
        for job_type, n in self.enqueued.items():
            self.tr.add(self.layout.watches_pending_key(job_type), PACK.pack(n))
        for job_type in self.stamped:
            self._stamp(job_type)
        self.bumps, self.stamped, self.enqueued = {}, set(), {}

    def _stamp(self, job_type: JobType) -> None:
        stamp_watch(self.tr, self.layout, job_type)


def observe_run(tally: Tally, job_type: JobType, seconds: float) -> None:
    """Count one handler call of ``seconds`` in the type's run-time histogram
    (buckets as :data:`RUN_BUCKETS`, a count and a sum in microseconds)."""
    if not seconds >= 0:  # unknown (or NaN): not observed
        return
    bucket = next((i for i, bound in enumerate(RUN_BUCKETS) if seconds <= bound), len(RUN_BUCKETS))
    tally.bump(job_type, f"run_le_{bucket}")
    tally.bump(job_type, "run_count")
    tally.bump(job_type, "run_sum_us", int(min(seconds, 1e9) * 1e6))
