"""Which due jobs a claim reads: the ranges of a type's pending queues, the
spread it picks among, and when its next job falls due.

Principle: a claim takes priority 0's due jobs first, then those of
priorities 1-9 (each queue in due order), and where the store has per-key
conflicts it reads more due rows than it takes (:func:`claim_spread`) and
picks among them at random, so that hosts claiming at once seldom take the
same job. The ranges are functions of their own so that a step can prefetch
exactly what the claim will read (``work.prefetch_step``).
"""

from __future__ import annotations

from typing import Any, Collection, Optional

from fdblayer.interface import Transaction, strinc
from fdblayer.jobs import pending
from fdblayer.jobs.keys import JobType, Layout

__all__ = ["due_keys", "due_range", "later_range", "next_due", "claim_spread", "SPREAD_MIN", "SPREAD_PER_JOB"]


def due_keys(
    tr: Transaction, layout: Layout, job_type: JobType, now: int, limit: int, rng: Any, skip: Collection[bytes] = ()
) -> tuple[list[tuple[bytes, int]], Optional[list[int]]]:
    """``(key, prefix length)`` of up to ``limit`` due pending jobs, lower
    priorities first (see :func:`fdblayer.jobs.work.claim`), and the priorities 1-9 with pending
    jobs if it had to read them (None if priority 0 was enough). Keys in
    ``skip`` (taken by a claim whose commit this transaction's reads may
    not see yet) are passed over."""
    spread = tr.db.key_conflicts
    out: list[tuple[bytes, int]] = []
    queues = iter([0])
    read: Optional[list[int]] = None
    while len(out) < limit:
        priority = next(queues, None)
        if priority is None:
            if read is not None:
                break
            read = pending.priorities(tr, layout, job_type)  # read only when needed
            queues = iter(read)
            continue
        want = limit - len(out)
        prefix, end, read_limit = due_range(tr, layout, job_type, now, priority, want, len(skip))
        keys = [kv.key for kv in tr.snapshot.get_range(prefix, end, limit=read_limit)]
        if skip:
            keys = [key for key in keys if key not in skip]
        if spread and len(keys) > want:
            keys = rng.sample(keys, want)
        out += [(key, len(prefix)) for key in keys]
    return out, read


def due_range(
    tr: Transaction, layout: Layout, job_type: JobType, now: int, priority: int, want: int, skipped: int = 0
) -> tuple[bytes, bytes, int]:
    """``(begin, end, limit)`` a claim reads for ``want`` due jobs of
    ``priority``: where the store has per-key conflicts, up to
    :func:`claim_spread` of them, to pick among at random; ``skipped`` more
    when it passes over that many keys."""
    limit = (claim_spread(want) if tr.db.key_conflicts else want) + skipped
    return layout.pending_prefix(job_type, priority), layout.pending_end(job_type, now, priority), limit


#: A claim of ``want`` jobs picks among the first ``SPREAD_PER_JOB * want``
#: due ones, at least ``SPREAD_MIN`` and at most :data:`pending.RANGE_LIMIT`.
SPREAD_MIN = 64
SPREAD_PER_JOB = 32


def claim_spread(want: int) -> int:
    """How many due jobs a claim of ``want`` reads to pick among at random
    (all of them when ``want`` is more). Two claims of ``w`` jobs each that
    run at once pick about ``w * w / spread`` jobs alike, one of them then
    failing as a conflict and retrying: 1 in 64 for ``w`` = 1, 1 in 8 for
    4; from 8 on it reads 256 rows, as every claim once did. Reading 256
    rows to claim one job cost a host running 10 ms jobs on PostgreSQL more
    than the conflicts it avoided (a claim step of one job: 1,403 -> 1,119
    us)."""
    return max(want, min(pending.RANGE_LIMIT, max(SPREAD_MIN, SPREAD_PER_JOB * want)))


def later_range(layout: Layout, job_type: JobType, now: int, priority: int) -> tuple[bytes, bytes, int]:
    """``(begin, end, limit)`` that reads the earliest job of ``priority`` not yet due."""
    return layout.pending_end(job_type, now, priority), strinc(layout.pending_prefix(job_type, priority)), 1


def next_due(
    tr: Transaction, layout: Layout, job_type: JobType, now: int, queues: Optional[list[int]] = None
) -> Optional[int]:
    """The scheduled time of the earliest pending job not yet due, any
    priority (``queues``: the priorities 1-9 already read in this
    transaction, else read here; a queue the claim emptied finds nothing)."""
    times = []
    for priority in [0] + (pending.priorities(tr, layout, job_type) if queues is None else queues):
        begin, end, limit = later_range(layout, job_type, now, priority)
        later = tr.snapshot.get_range(begin, end, limit=limit)
        if later:
            sched_time = pending.unpack_pending_key(later[0].key, len(layout.pending_prefix(job_type, priority)))[0]
            if sched_time is not None:
                times.append(sched_time)
    return min(times) if times else None
