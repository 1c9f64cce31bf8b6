"""Finished pool jobs by outcome and end time: what retention removes, oldest first.

Data model (beside the couch_jobs rows)::

    (JOBS, FINISHED, type, outcome, ended_ms, job_id) = b""
    (JOBS, FINISHED, type, "pruned") = int64 LE: the latest end time (ms) of a pruned job

Principle: the transaction that finishes a pool job (succeeded, or failed
for good) writes one key here, as :mod:`fdblayer.jobs.failures` does, so
that pruning (:mod:`fdblayer.jobs.retention`) reads one range per type and
outcome holding exactly the jobs it removes, whatever the queue's size.
A job that leaves the finished state by another path (removed, added
again, retried) clears its key in that transaction when its work record
says where it is (:func:`forget`); a key that still outlives its job is
stale, and pruning checks each key against the job's state and record in
its own transaction and drops a stale one. The end time of the key is
the record's ``ended`` in milliseconds, so the two are compared exactly.
"""

from __future__ import annotations

from typing import Optional

from fdblayer.interface import Transaction
from fdblayer.jobs import fasttuple
from fdblayer.jobs.codec import report_bad_row
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.tally import PACK
from fdblayer.jobs.work_record import FAILED, SUCCEEDED, WorkRecord

__all__ = ["OUTCOMES", "ms", "record", "forget", "forget_record", "due", "pruned_before", "mark_pruned"]

#: The outcomes indexed, each its own range.
OUTCOMES = (SUCCEEDED, FAILED)


def ms(ended: float) -> int:
    """An end time (epoch seconds) as the index keeps it."""
    return int(ended * 1000)


def record(tr: Transaction, layout: Layout, job_type: JobType, job_id: str, outcome: str, ended: float) -> None:
    """Note that ``job_id`` finished with ``outcome`` at ``ended`` (the work record's ``ended``)."""
    tr.set(layout.finished_key(job_type, outcome, ms(ended), job_id), b"")


def forget(tr: Transaction, layout: Layout, job_type: JobType, job_id: str, raw_work: Optional[bytes]) -> None:
    """Clear the key of a finished job whose stored work record is ``raw_work`` (if it has one)."""
    if raw_work is not None:
        forget_record(tr, layout, job_type, job_id, WorkRecord.unpack(raw_work, job_id))


def forget_record(tr: Transaction, layout: Layout, job_type: JobType, job_id: str, rec: WorkRecord) -> None:
    """:func:`forget` with the record already decoded."""
    if rec.outcome in OUTCOMES and rec.ended is not None:
        tr.clear(layout.finished_key(job_type, rec.outcome, ms(rec.ended), job_id))


def due(
    tr: Transaction, layout: Layout, job_type: JobType, outcome: str, before: float, limit: int
) -> list[tuple[bytes, int, str]]:
    """``(key, ended_ms, job_id)`` of up to ``limit`` keys of jobs that ended
    with ``outcome`` before ``before`` (epoch seconds), oldest first (a
    snapshot read: the caller checks each job in its transaction). A
    corrupt key is cleared and logged."""
    prefix = layout.finished_prefix(job_type, outcome)
    out = []
    for kv in tr.snapshot.get_range(prefix, layout.finished_before(job_type, outcome, ms(before)), limit=limit):
        try:
            ended_ms, job_id = fasttuple.unpack(kv.key, len(prefix))
        except Exception as exc:  # noqa: BLE001 - a corrupt index key names no job: dropped
            report_bad_row("finished", kv.key, repr(exc)[:80])
            tr.clear(kv.key)
            continue
        if isinstance(job_id, str) and isinstance(ended_ms, int):
            out.append((kv.key, ended_ms, job_id))
        else:
            report_bad_row("finished", kv.key, "not (ended_ms, job_id)")
            tr.clear(kv.key)
    return out


def pruned_before(tr: Transaction, layout: Layout, job_type: JobType) -> Optional[float]:
    """The latest end time (epoch seconds) of a job of ``job_type`` pruned so far, or None."""
    raw = tr.snapshot.get(layout.pruned_key(job_type))
    return PACK.unpack(raw)[0] / 1000 if raw is not None and len(raw) == 8 else None


def mark_pruned(tr: Transaction, layout: Layout, job_type: JobType, ended_ms: int) -> None:
    """Raise the type's "pruned up to" stamp to ``ended_ms`` (never lower it)."""
    key = layout.pruned_key(job_type)
    raw = tr.get(key)
    if raw is None or len(raw) != 8 or PACK.unpack(raw)[0] < ended_ms:
        tr.set(key, PACK.pack(ended_ms))
