"""The pending queue of each job type (the seed's couch_jobs_pending).

Principle: a pending job is one empty row ``(P, PENDING, type, sched_time,
job_id)``, so the queue is ordered by scheduled time and dequeueing is a
range read. A worker pool's job of priority 1 to 9 (0, the default, is
the seed's row) is the row ``(P, PRIO_PENDING, type, priority,
sched_time, job_id)``: one queue per priority, read after the lower ones
(:func:`priorities`), so a type that never uses priorities pays one empty
range read for them. Every enqueue bumps the type's ``WATCHES_PENDING`` counter, the
key an idle worker watches, so workers block on the store instead of
polling.

Concurrent workers must not all fight for the first row: ``dequeue`` reads
up to :data:`RANGE_LIMIT` of the earliest rows at snapshot isolation, picks
one at random and adds a read conflict on that row only. Two workers then
conflict only when they pick the same row, and the loser retries. Where
writers commit one at a time anyway (``Database.key_conflicts`` False:
the SQLite backend) the spread buys little, and ``dequeue`` reads only the
earliest row (an accept on a deep queue no longer reads 256 rows). With
``no_schedule`` it does the same among the jobs scheduled at time 0. (It
once picked the row nearest a random id instead, with two key-selector
reads, as the seed does; the ids the API makes now grow with time
(:mod:`fdblayer.jobs.ids`), and a random id nearly always fell past the
newest: jobs went newest first.)

All functions take a transaction (or, where decorated, a database) and a
:class:`~fdblayer.jobs.keys.Layout`; none validates its arguments (the API
does).
"""

from __future__ import annotations

import logging
import random
from typing import Optional


from fdblayer.interface import Transaction, strinc
from fdblayer.jobs import fasttuple
from fdblayer.jobs.codec import report_bad_row
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.tally import Tally, bump
from fdblayer.watches import Watch

__all__ = [
    "RANGE_LIMIT",
    "enqueue",
    "enqueue_many",
    "dequeue",
    "remove",
    "priorities",
    "priorities_probe",
    "pending_count",
    "watch_pending",
]

logger = logging.getLogger(__name__)

# How many of the earliest pending rows a dequeue picks from. The seed reads
# 1024; in Python each row read costs about a microsecond (1024 rows made an
# accept on a deep queue 3x slower), while 256 still keeps two of 8
# concurrent workers picking the same row at about 1 in 8 per round on
# FoundationDB, where only that row conflicts. (On SQLite any concurrent
# commit conflicts, so the spread buys nothing there.)
RANGE_LIMIT = 256


def enqueue(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    sched_time: int,
    job_id: str,
    tally: Optional[Tally] = None,
    priority: int = 0,
    counter: str = "pending",
) -> None:
    """Put a job in its type's pending queue and wake the type's watchers.

    Args:
        tr: The transaction.
        layout: The key layout.
        job_type: The job type.
        sched_time: The job's scheduled time.
        job_id: The job id.
        tally: Bump the counter and the watch through it (None: at once).
        priority: The job's priority (0 to 9).
        counter: The counter the new pending row bumps: ``pending``, or
            ``counts.FRESH`` for a job just added under a new id (its job,
            pending row and ``added`` event in that one add).
    """
    tally = tally or Tally(tr, layout, deferred=False)
    tr.set(layout.pending_key(job_type, sched_time, job_id, priority), b"")
    tally.enqueue(job_type)
    tally.bump(job_type, counter)


def enqueue_many(tr: Transaction, layout: Layout, job_type: JobType, sched_time: int, job_ids: list[str]) -> None:
    """:func:`enqueue` of several jobs, waking the type's watchers once."""
    if not job_ids:
        return
    for job_id in job_ids:
        tr.set(layout.pending_key(job_type, sched_time, job_id), b"")
    tally = Tally(tr, layout, deferred=False)
    tally.enqueue(job_type, len(job_ids))
    tally.bump(job_type, "pending", len(job_ids))


def remove(tr: Transaction, layout: Layout, job_type: JobType, job_id: str, sched_time: int, priority: int = 0) -> None:
    """Take a pending job out of the pending queue (call it for a pending job only: its count drops)."""
    tr.clear(layout.pending_key(job_type, sched_time, job_id, priority))
    bump(tr, layout, job_type, "pending", -1)


def dequeue(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    max_sched_time: int,
    no_schedule: bool,
    rng: Optional[random.Random] = None,
) -> Optional[str]:
    """Remove one job from the pending queue and return its id.

    Args:
        tr: The transaction.
        layout: The key layout.
        job_type: The job type.
        max_sched_time: Only jobs scheduled at or before this time qualify
            (ignored with ``no_schedule``).
        no_schedule: Only jobs with scheduled time 0 qualify, and one is
            picked as among due ones.
        rng: The random source (tests pass a seeded one).

    Returns:
        The id of the dequeued job, or None when no job qualifies.
    """
    rng = rng or _RNG
    if no_schedule:  # the jobs due at time 0, read as the others are
        prefix = layout.pending_time_prefix(job_type, 0)
        key = _random_key_in_range(tr, prefix, strinc(prefix), rng)
    else:
        prefix = layout.pending_prefix(job_type)
        end = layout.pending_end(job_type, max_sched_time)
        key = _random_key_in_range(tr, prefix, end, rng)
    if key is None:
        return None
    tr.add_read_conflict_key(key)
    tr.clear(key)
    job_id = _unpack_job_id(layout, job_type, key)
    if job_id is not None:  # a corrupt key was never counted
        bump(tr, layout, job_type, "pending", -1)
    return job_id


def priorities(tr: Transaction, layout: Layout, job_type: JobType) -> list[int]:
    """The priorities 1-9 that have pending jobs of ``job_type``, lowest
    first (snapshot reads: one empty range read when there are none)."""
    prefix = layout.prio_pending_prefix(job_type)
    found: list[int] = []
    begin, end, limit = priorities_probe(layout, job_type)
    while True:
        rows = tr.snapshot.get_range(begin, end, limit=limit)
        if not rows:
            return found
        try:
            priority = fasttuple.unpack(rows[0].key, len(prefix))[0]
        except Exception as exc:  # noqa: BLE001 - a corrupt key: the rest of the queues are skipped
            report_bad_row("pending", rows[0].key, repr(exc)[:80])
            return found
        if not isinstance(priority, int) or not 0 < priority < 10:
            report_bad_row("pending", rows[0].key, "not a priority")
            return found
        found.append(priority)
        begin = strinc(layout.pending_prefix(job_type, priority))


def priorities_probe(layout: Layout, job_type: JobType) -> tuple[bytes, bytes, int]:
    """``(begin, end, limit)`` of :func:`priorities`' first read (the lowest
    priority 1-9 with pending jobs), for a caller that prefetches it."""
    prefix = layout.prio_pending_prefix(job_type)
    return prefix, strinc(prefix), 1


def _unpack_job_id(layout: Layout, job_type: JobType, key: bytes) -> Optional[str]:
    return unpack_pending_key(key, len(layout.pending_prefix(job_type)))[1]


def unpack_pending_key(key: bytes, prefix_len: int) -> tuple[Optional[int], Optional[str]]:
    """``(sched_time, job_id)`` of a PENDING key, or ``(None, None)`` (logged
    once) when the key does not decode: the caller clears such a key."""
    try:
        sched_time, job_id = fasttuple.unpack(key, prefix_len)
    except Exception as exc:  # noqa: BLE001 - a corrupt index key is dropped
        report_bad_row("pending", key, repr(exc)[:80])
        return None, None
    if not isinstance(sched_time, int) or not isinstance(job_id, str):
        report_bad_row("pending", key, "wrong shape")
        return None, None
    return sched_time, job_id


def _random_key_in_range(tr: Transaction, begin: bytes, end: bytes, rng: random.Random) -> Optional[bytes]:
    """Pick one of the first RANGE_LIMIT keys of ``[begin, end)`` at random
    (the first key where key-level conflicts do not exist)."""
    limit = RANGE_LIMIT if tr.db.key_conflicts else 1
    rows = tr.snapshot.get_range(begin, end, limit=limit)
    if not rows:
        return None
    if len(rows) == 1:
        return rows[0].key
    return rows[rng.randrange(len(rows))].key


def pending_count(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    max_sched_time: Optional[int] = None,
    limit: int = 0,
) -> int:
    """Count the pending jobs of a type, at snapshot isolation.

    Args:
        tr: The transaction.
        layout: The key layout.
        job_type: The job type.
        max_sched_time: Count only jobs scheduled at or before this time.
        limit: Stop counting at this many (0: count all).

    Returns:
        The number of pending jobs.
    """
    begin = layout.pending_prefix(job_type)
    if max_sched_time is None:
        rows = tr.snapshot.get_range_startswith(begin, limit=limit)
    else:
        end = layout.pending_end(job_type, max_sched_time)
        rows = tr.snapshot.get_range(begin, end, limit=limit)
    return len(rows)


def watch_pending(tr: Transaction, layout: Layout, job_type: JobType) -> Watch:
    """Return a watch that fires at the next enqueue of ``job_type``.

    The watch is armed when ``tr`` commits; ``accept`` waits on it.
    """
    return tr.watch(layout.watches_pending_key(job_type))


_RNG = random.Random()
