"""Job types and activity (the type and activity monitoring part of couch_jobs_fdb).

Principle: a job type exists while it has an activity timeout. Every accept,
update, finish, re-enqueue and remove of a job stamps its type's
WATCHES_ACTIVITY key with the commit's versionstamp, and a running job's
ACTIVITY row is keyed by the versionstamp of its last accept or update. So
the jobs active since a stamp are one range read, the jobs silent since a
stamp are the range before it, and a single watch tells a type's notifier
or activity monitor (actors, built on these functions) that something
changed.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Collection, Iterable, Optional

import fdb.tuple

from fdblayer.interface import Transaction, transactional
from fdblayer.jobs import transitions
from fdblayer.jobs.codec import decode_data, report_bad_row, unpack_activity_value_or_none
from fdblayer.jobs.validate import MAX_TYPE_TIMEOUT
from fdblayer.jobs.keys import ACTIVITY_TIMEOUT, JobType, Layout
from fdblayer.jobs.tally import Tally
from fdblayer.jobs.work_record import claimed_only
from fdblayer.watches import Watch

__all__ = [
    "unpack_timeout",
    "set_type_timeout",
    "clear_type_timeout",
    "get_type_timeout",
    "read_type_timeout",
    "get_types",
    "get_activity_vs",
    "get_activity_vs_and_watch",
    "get_active_since",
    "get_inactive_since",
    "re_enqueue_inactive",
    "requeue_silent",
    "check_inactive",
    "held_by",
    "release_strays",
]

logger = logging.getLogger(__name__)


@transactional
def set_type_timeout(tr: Transaction, layout: Layout, job_type: JobType, timeout: float) -> None:
    """Declare a job type, with the seconds after which a silent job is re-enqueued."""
    tr.set(layout.activity_timeout_key(job_type), fdb.tuple.pack((timeout,)))


@transactional
def clear_type_timeout(tr: Transaction, layout: Layout, job_type: JobType) -> None:
    """Forget a job type's timeout (its jobs stay; new ones cannot be added)."""
    tr.clear(layout.activity_timeout_key(job_type))


@transactional
def get_type_timeout(tr: Transaction, layout: Layout, job_type: JobType) -> Optional[float]:
    """Read a type's timeout in seconds (snapshot read), or None if unset."""
    return read_type_timeout(tr, layout, job_type)


def read_type_timeout(tr: Transaction, layout: Layout, job_type: JobType) -> Optional[float]:
    """:func:`get_type_timeout` for a transaction (no ``transactional`` wrapper:
    every add calls it)."""
    raw = tr.snapshot.get(layout.activity_timeout_key(job_type))
    return None if raw is None else unpack_timeout(raw)


def _timeout_now(tr: Transaction, layout: Layout, job_type: JobType) -> Optional[float]:
    """The type's timeout, read with a conflict: a change committed before
    ``tr`` commits makes it retry."""
    raw = tr.get(layout.activity_timeout_key(job_type))
    return None if raw is None else unpack_timeout(raw)


@functools.lru_cache(maxsize=1024)
def unpack_timeout(raw: bytes) -> Optional[float]:
    """A stored timeout as a reader can use it: bounded to
    :data:`MAX_TYPE_TIMEOUT`; None (logged) when it is no positive number."""
    try:
        (timeout,) = fdb.tuple.unpack(raw)
    except Exception as exc:  # noqa: BLE001 - a corrupt row reads as no timeout
        report_bad_row("type_timeout", raw, repr(exc)[:80])
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        report_bad_row("type_timeout", raw, f"not a positive number: {timeout!r}"[:80])
        return None
    if timeout > MAX_TYPE_TIMEOUT:
        report_bad_row("type_timeout", raw, f"{timeout!r} read as {MAX_TYPE_TIMEOUT:g}"[:80])
        return MAX_TYPE_TIMEOUT
    return float(timeout) if isinstance(timeout, int) else timeout


@transactional
def get_types(tr: Transaction, layout: Layout) -> list[JobType]:
    """Read every job type that has a timeout, in key order (a key that does
    not decode is skipped, logged once)."""
    prefix = layout.subspace(ACTIVITY_TIMEOUT)
    types = []
    for key, _ in tr.get_range_startswith(prefix):
        try:
            types.append(layout.unpack_activity_timeout_key(key))
        except Exception as exc:  # noqa: BLE001 - a corrupt key is skipped
            report_bad_row("type_key", key, repr(exc)[:80])
    return types


def _unpack_vs(key: bytes, raw: Optional[bytes]) -> Optional[fdb.tuple.Versionstamp]:
    """A stored activity versionstamp, or None (logged) when there is none or it is corrupt."""
    if raw is None:
        return None
    try:
        (vs,) = fdb.tuple.unpack(raw)
    except Exception as exc:  # noqa: BLE001 - read as no activity yet
        report_bad_row("activity_vs", key, repr(exc)[:80])
        return None
    if not isinstance(vs, fdb.tuple.Versionstamp) or not vs.is_complete():
        report_bad_row("activity_vs", key, "not a versionstamp")
        return None
    return vs


@transactional
def get_activity_vs(tr: Transaction, layout: Layout, job_type: JobType) -> Optional[fdb.tuple.Versionstamp]:
    """Read the versionstamp of the type's last activity, or None if none yet."""
    key = layout.watches_activity_key(job_type)
    return _unpack_vs(key, tr.get(key))


@transactional
def get_activity_vs_and_watch(
    tr: Transaction, layout: Layout, job_type: JobType
) -> tuple[Optional[fdb.tuple.Versionstamp], Watch]:
    """Read the type's activity versionstamp and watch it for the next change.

    Returns:
        ``(versionstamp or None, watch)``; the watch arms when ``tr`` commits.
    """
    key = layout.watches_activity_key(job_type)
    raw = tr.get(key)
    watch = tr.watch(key)
    return _unpack_vs(key, raw), watch


def _commit_stamp(vs: fdb.tuple.Versionstamp, user_version: int) -> fdb.tuple.Versionstamp:
    """``vs``'s commit with the given user version: the jobs one commit
    touched differ only in their user versions, and a stamp stands for its
    whole commit (its first or last row)."""
    return fdb.tuple.Versionstamp(vs.tr_version, user_version)


@transactional
def get_active_since(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    vs: fdb.tuple.Versionstamp,
    decode: bool = True,
) -> dict[str, object]:
    """Read the running jobs accepted or updated at or after ``vs``.

    Returns:
        A dict from job id to its data (decoded unless ``decode`` is False).
    """
    begin = layout.activity_key(job_type, _commit_stamp(vs, 0))
    end = layout.activity_prefix(job_type) + b"\xff"
    result: dict[str, object] = {}
    for key, raw in tr.get_range(begin, end):
        row = unpack_activity_value_or_none(key, raw)
        if row is None:
            continue
        job_id, data = row
        if decode:
            try:
                result[job_id] = decode_data(data)
            except Exception as exc:  # noqa: BLE001 - a corrupt row is skipped
                report_bad_row("activity_data", key, repr(exc)[:80])
        else:
            result[job_id] = data
    return result


@transactional
def get_inactive_since(tr: Transaction, layout: Layout, job_type: JobType, vs: fdb.tuple.Versionstamp) -> list[str]:
    """Read the ids of running jobs not accepted or updated after ``vs``."""
    begin = layout.activity_prefix(job_type)
    end = layout.activity_key(job_type, _commit_stamp(vs, 0xFFFF)) + b"\x00"
    rows_ = (unpack_activity_value_or_none(key, raw) for key, raw in tr.get_range(begin, end))
    return [row[0] for row in rows_ if row is not None]


@transactional
def re_enqueue_inactive(
    tr: Transaction, layout: Layout, job_type: JobType, job_ids: Iterable[str], now: Optional[float] = None
) -> list[str]:
    """Put running jobs back in the pending queue; their locks become stale
    (a worker pool's job as :func:`requeue_silent` says; ``now``, default
    the wall clock, dates a lost attempt's error).

    Ids of jobs that are gone or no longer running are skipped (the seed
    re-enqueued any job that still existed).

    Returns:
        The ids that were re-enqueued.
    """
    tally = Tally(tr, layout)
    done = requeue_silent(tr, layout, transitions.running(tr, layout, job_type, list(job_ids)), tally, now)
    tally.write()
    return done


def requeue_silent(
    tr: Transaction, layout: Layout, helds: list[transitions.Held], tally: Tally, now: Optional[float] = None
) -> list[str]:
    """Put running jobs whose lease expired back in the queue, due now (the
    activity monitors' and the hosts' lifeline re-enqueue); their locks
    become stale (:func:`fdblayer.jobs.transitions.requeue`: a pool's job
    whose handler never started gets its attempt back; one whose handler
    started keeps it, with a ``WorkerLost`` error dated ``now``). Returns
    their ids."""
    transitions.requeue(tr, layout, helds, tally, time.time() if now is None else now, forgive=False)
    return [h.job.id for h in helds]


@transactional
def check_inactive(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    vs: Optional[fdb.tuple.Versionstamp],
    timeout: Optional[float] = None,
) -> tuple[Optional[fdb.tuple.Versionstamp], list[str]]:
    """One activity-monitor check: re-enqueue the jobs silent since ``vs``.

    With ``vs`` None (the first check, or after the timeout changed) nothing
    is re-enqueued; the current versionstamp is only read, as in the seed's
    ``check_activity``. ``timeout``: the type timeout the caller waited
    after reading ``vs``; when the type's timeout is another one now (it was
    changed meanwhile: a job silent for the old one may not be for the new
    one) nothing is re-enqueued either, in the same transaction.

    Returns:
        ``(versionstamp to pass to the next check, re-enqueued ids)``.
    """
    new_vs = get_activity_vs(tr, layout, job_type)
    if vs is None or (timeout is not None and _timeout_now(tr, layout, job_type) != timeout):
        return new_vs, []
    job_ids = get_inactive_since(tr, layout, job_type, vs)
    return new_vs, re_enqueue_inactive(tr, layout, job_type, job_ids)


def running_jobs(
    tr: Transaction, layout: Layout, job_type: JobType, skip: Collection[str] = ()
) -> list[transitions.Held]:
    """The running jobs of ``job_type`` (read through the type's activity
    rows), each with the lock it runs under; those whose ids are in ``skip``
    left out."""
    prefix = layout.activity_prefix(job_type)
    found = (unpack_activity_value_or_none(kv.key, kv.value) for kv in tr.get_range(prefix, prefix + b"\xff"))
    ids = [row[0] for row in found if row is not None and row[0] not in skip]
    return transitions.running(tr, layout, job_type, ids)


def held_by(
    tr: Transaction, layout: Layout, job_type: JobType, worker: str, skip: Collection[str] = ()
) -> list[transitions.Held]:
    """The running jobs of ``job_type`` that host ``worker`` holds, those
    whose ids are in ``skip`` left out."""
    return [h for h in running_jobs(tr, layout, job_type, skip) if h.record.worker == worker]


def release_strays(tr: Transaction, layout: Layout, job_type: JobType, worker: str, held: Collection[str]) -> None:
    """Put back, uncounted, the jobs of ``job_type`` that ``worker`` holds
    claimed and not started and that are not in ``held``."""
    strays = [h for h in held_by(tr, layout, job_type, worker, held) if claimed_only(h.record)]
    if strays:
        logger.warning("jobs_released host=%s type=%s count=%d reason=commit_unknown", worker, job_type, len(strays))
        tally = Tally(tr, layout)
        transitions.requeue(tr, layout, strays, tally, 0.0, forgive=True)
        tally.write()
