"""Retention: finished pool jobs removed once they are old enough, in bounded batches.

Principle: a pool job that finished (succeeded, or failed for good) has a
key in :mod:`fdblayer.jobs.finished`, by outcome and end time. A batch
reads the oldest keys of one type and outcome that ended before a cutoff
(one range read, only what it removes), reads those jobs' rows in its own
transaction (so a job re-enqueued, retried or removed since conflicts or
is seen as it is now), and removes each job that is still finished with
that outcome and end time with :func:`fdblayer.jobs.model.remove_value` (its
DATA row, work record and counters, as any removal); every key it read
goes, stale or not. Nothing pending or running is ever touched: a job is
removed only when its own row says it is finished, in the removing
transaction. A failed job's entry in the index of recent failures goes
with it, and the type's "pruned up to" stamp rises to the latest end time
removed, so that a reader of a missing job can say it may have been pruned.

Like :mod:`fdblayer.jobs.model`, nothing here validates, sleeps or talks
to anything but the transaction; a batch is one transaction of at most
:data:`BATCH` jobs.
"""

from __future__ import annotations

from typing import Optional

from fdblayer.interface import Database, Transaction, transactional
from fdblayer.jobs import failures, finished, model, rows
from fdblayer.jobs.job import JobState, job_state
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.tally import Tally
from fdblayer.jobs.work_record import FAILED, WorkRecord

__all__ = ["BATCH", "prune_batch", "prune_type"]

#: Jobs a batch removes at most (one transaction).
BATCH = 500


@transactional
def prune_batch(
    tr: Transaction, layout: Layout, job_type: JobType, outcome: str, before: float, limit: int = BATCH
) -> tuple[int, int]:
    """Remove up to ``limit`` jobs of ``job_type`` that finished with
    ``outcome`` before ``before`` (epoch seconds); returns ``(removed, keys
    read)`` (fewer keys read than ``limit``: none is left before the cutoff)."""
    due = finished.due(tr, layout, job_type, outcome, before, limit)
    if not due:
        return 0, 0
    ids = [job_id for _, _, job_id in due]
    data_keys = [layout.data_key(job_type, job_id) for job_id in ids]
    raws = tr.get_many(data_keys + [layout.work_key(job_type, job_id) for job_id in ids])
    removed, latest, seen, tally = 0, None, set(), Tally(tr, layout)
    for n, (key, ended_ms, job_id) in enumerate(due):
        tr.clear(key)  # the job goes, or the key outlived it (stale): either way it is read once
        raw = raws[n]
        current = None if raw is None else rows.job_val_or_none(data_keys[n], raw)
        if current is None or job_id in seen or job_state(current.lock, current.seq) is not JobState.FINISHED:
            continue
        rec = WorkRecord.unpack(raws[len(due) + n], job_id)
        if rec.outcome != outcome or rec.ended is None or finished.ms(rec.ended) != ended_ms:
            continue  # finished again since, or by another path: this key is stale
        seen.add(job_id)
        model.remove_value(tr, layout, job_type, job_id, data_keys[n], current, rec, tally)
        if outcome == FAILED:
            failures.forget(tr, layout, job_type, job_id, rec.ended)
        removed += 1
        latest = ended_ms if latest is None else max(latest, ended_ms)
    tally.write()
    if latest is not None:
        finished.mark_pruned(tr, layout, job_type, latest)
    return removed, len(due)


def prune_type(
    db: Database,
    layout: Layout,
    job_type: JobType,
    keep: dict[str, float],
    now: float,
    batch: int = BATCH,
    max_batches: Optional[int] = None,
) -> tuple[int, bool]:
    """Prune ``job_type``: for each outcome in ``keep`` (outcome -> seconds
    kept, None: for ever), the jobs that ended more than that long before
    ``now``, :func:`prune_batch` after batch, each its own transaction, at
    most ``max_batches`` per outcome. Returns ``(removed, more)``: ``more``
    is True when a batch was full at the last one allowed (more may be due)."""
    removed, more = 0, False
    for outcome, seconds in keep.items():
        if seconds is None:
            continue
        n = 0
        while max_batches is None or n < max_batches:
            got, read = prune_batch(db, layout, job_type, outcome, max(0.0, now - seconds), batch)
            removed += got
            n += 1
            if read < batch:
                break
        else:
            more = True
    return removed, more
