"""Row-level building blocks of the jobs data model.

Principle: a job's DATA row and its index rows (PENDING, ACTIVITY and the
two watch keys) change together; these helpers are the only code that
writes them, and :mod:`fdblayer.jobs.model` and :mod:`fdblayer.jobs.activity`
compose them into transitions inside one transaction. They never validate
and never commit.
"""

from __future__ import annotations

from typing import Optional

import fdb.tuple

from fdblayer.interface import Transaction
from fdblayer.jobs.exceptions import CorruptValue, JobsError
from fdblayer.jobs import pending
from fdblayer.jobs.codec import (
    PENDING_SEQ,
    JobValue,
    Seq,
    pack_activity_value,
    pack_job_value,
    report_bad_row,
    unpack_job_value,
)
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.tally import Tally

__all__ = [
    "get_job_val",
    "set_job_val",
    "maybe_enqueue",
    "update_activity",
    "clear_activity",
]


def get_job_val(tr: Transaction, key: bytes) -> Optional[JobValue]:
    """Read and decode a DATA row, or None when the job does not exist (or
    its row is corrupt, logged once: a write then replaces it)."""
    raw = tr.get(key)
    return None if raw is None else job_val_or_none(key, raw)


def job_val_or_none(key: bytes, raw: bytes) -> Optional[JobValue]:
    """:func:`unpack_job_value`, or None (logged once) for a corrupt row."""
    try:
        return unpack_job_value(raw)
    except CorruptValue as exc:
        report_bad_row("job", key, exc.message)
        return None


def set_job_val(tr: Transaction, key: bytes, value: JobValue) -> None:
    """Write a DATA row; a running value gets this commit's versionstamp."""
    if value.stamped:
        tr.set_versionstamped_value(key, pack_job_value(value))
    else:
        tr.set(key, pack_job_value(value))


def maybe_enqueue(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    sched_time: int,
    enqueue: bool,
    data: bytes,
    key: Optional[bytes] = None,
    tally: Optional[Tally] = None,
    priority: int = 0,
    counter: str = "pending",
) -> JobValue:
    """Write the job as pending (and enqueue it, at ``priority``, bumping
    ``counter``: see ``pending.enqueue``) or as finished (counters and
    watches bumped at once, or by ``tally``)."""
    if key is None:
        key = layout.data_key(job_type, job_id)
    if enqueue:
        value = JobValue(PENDING_SEQ, None, sched_time, False, data, priority)
        set_job_val(tr, key, value)
        pending.enqueue(tr, layout, job_type, sched_time, job_id, tally, priority, counter)
    else:
        value = JobValue(None, None, sched_time, False, data, priority)
        set_job_val(tr, key, value)
    return value


#: Attribute of a transaction counting its stamped activity rows.
_USER_VERSION_ATTR = "_otpjobs_activity_stamps"
_MAX_USER_VERSION = 0xFFFF


def next_user_version(tr: Transaction) -> int:
    """A user version unique within ``tr``'s commit (0, 1, 2...).

    Jobs accepted or updated in one transaction share the commit's
    versionstamp; their seq and ACTIVITY rows differ by this number.
    """
    n = getattr(tr, _USER_VERSION_ATTR, 0)
    if n > _MAX_USER_VERSION:
        raise JobsError(f"more than {_MAX_USER_VERSION + 1} jobs accepted or updated in one transaction")
    setattr(tr, _USER_VERSION_ATTR, n + 1)
    return n


def update_activity(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    old_seq: Seq,
    data: bytes,
    user_version: int = 0,
    tally: Optional[Tally] = None,
) -> None:
    """Move the job's ACTIVITY row to this commit's versionstamp (with the
    same ``user_version`` as the job's seq); counters and watches bumped at
    once, or by ``tally``."""
    tally = tally or Tally(tr, layout, deferred=False)
    clear_activity(tr, layout, job_type, old_seq, tally)
    tr.set_versionstamped_key(layout.activity_key_stamped(job_type, user_version), pack_activity_value(job_id, data))
    tally.bump(job_type, "running")
    tally.stamp(job_type)


def clear_activity(tr: Transaction, layout: Layout, job_type: JobType, seq: Seq, tally: Optional[Tally] = None) -> None:
    """Clear a running job's ACTIVITY row (nothing for other states)."""
    if isinstance(seq, fdb.tuple.Versionstamp):
        tr.clear(layout.activity_key(job_type, seq))
        (tally or Tally(tr, layout, deferred=False)).bump(job_type, "running", -1)
