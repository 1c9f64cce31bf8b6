"""Recent failures: which jobs of a type failed for good lately, newest first.

Data model (beside the couch_jobs rows)::

    (JOBS, FAILURES, type, ended_ms, job_id) = b""

Principle: the attempt that fails a job for good (a handler's error after
its last attempt, or attempts used up by dead workers) writes one key in the
same transaction, and clears with a blind range clear every key of the type
older than :data:`RETAIN` (no read, so no conflict). Readers find the latest
failures with one reverse range read whatever the queue's size, instead of
scanning every job. An entry can outlive its failure (the job was retried,
removed or resubmitted since): readers check each against the job's work
record and skip it; age clears it.
"""

from __future__ import annotations

from fdblayer.interface import Transaction, strinc
from fdblayer.jobs import fasttuple
from fdblayer.jobs.codec import report_bad_row
from fdblayer.jobs.keys import JobType, Layout

__all__ = ["RETAIN", "record", "forget", "latest_ids"]

#: Seconds a failure stays in the index.
RETAIN = 7 * 86400.0


def record(tr: Transaction, layout: Layout, job_type: JobType, job_id: str, now: float) -> None:
    """Note that ``job_id`` failed for good at ``now``, and forget failures older than :data:`RETAIN`."""
    tr.set(layout.failure_key(job_type, int(now * 1000), job_id), b"")
    tr.clear_range(layout.failures_prefix(job_type), layout.failures_before(job_type, int((now - RETAIN) * 1000)))


def forget(tr: Transaction, layout: Layout, job_type: JobType, job_id: str, ended: float) -> None:
    """Clear the entry :func:`record` wrote for ``job_id`` failing at ``ended`` (a pruned job's)."""
    tr.clear(layout.failure_key(job_type, int(ended * 1000), job_id))


def latest_ids(tr: Transaction, layout: Layout, job_type: JobType, limit: int) -> list[str]:
    """The ids of up to ``limit`` entries, newest first (distinct; entries may be stale, see above)."""
    prefix = layout.failures_prefix(job_type)
    ids: list[str] = []
    for kv in tr.snapshot.get_range(prefix, strinc(prefix), limit=limit * 2, reverse=True):
        try:
            _, job_id = fasttuple.unpack(kv.key, len(prefix))
        except Exception as exc:  # noqa: BLE001 - a corrupt index key is skipped
            report_bad_row("failures", kv.key, repr(exc)[:80])
            continue
        if isinstance(job_id, str) and job_id not in ids:
            ids.append(job_id)
        if len(ids) == limit:
            break
    return ids
