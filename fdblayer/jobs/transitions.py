"""The transitions of a running job, each written once, for a batch.

Principle: a job that starts, renews, ends or loses its run changes its
DATA row, its PENDING and ACTIVITY index rows, its type's counters and
watch stamps together, in one transaction. Those writes live here and
nowhere else, each as one function over a batch of jobs:

=================  ==========================================  =====================================
function           transition                                  callers (one job / many)
=================  ==========================================  =====================================
:func:`start`      pending -> running, under new locks         ``model.accept`` / ``work.claim``
:func:`refresh`    running -> running, a new activity stamp    ``model.update`` / ``work.renew``
:func:`stop`       running -> pending (at a time) or finished  ``model.finish`` / ``work.complete``
:func:`requeue`    running -> pending now, the lock stale      ``activity.re_enqueue_inactive``,
                                                               ``work.release``, ``work.requeue_held_by``
=================  ==========================================  =====================================

couch_jobs' calls are these with one job; a worker pool's dispatcher calls
them with its whole batch and adds what only a pool has (the work record's
attempt, outcome and error, the finished and failure indexes). The lock
check that every call on a held job starts with is :func:`held` (or
:func:`held_or_halt` for one job).

Counters and watch stamps go through a :class:`~fdblayer.jobs.tally.Tally`
that the caller writes before its transaction commits; nothing here
validates, commits or reads a clock but the ``now`` it is given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple, Optional

from fdblayer.interface import Transaction
from fdblayer.jobs import rows
from fdblayer.jobs.codec import JobValue, running_seq
from fdblayer.jobs.exceptions import Halt
from fdblayer.jobs.job import Job, job_state
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.tally import Tally
from fdblayer.jobs.work_record import WORKER_LOST, WorkRecord, claimed_only, with_error

__all__ = ["Held", "Pick", "Stop", "held", "held_or_halt", "running", "start", "refresh", "stop", "requeue"]


class Held(NamedTuple):
    """A running job as a transaction read it: its handle (with the lock its
    row holds), DATA key and row, and work record (a fresh one if it has none)."""

    job: Job
    key: bytes
    value: JobValue
    record: WorkRecord


class Pick(NamedTuple):
    """A pending job taken out of its queue, to :func:`start`: id, DATA key and row."""

    job_id: str
    key: bytes
    value: JobValue


class Stop(NamedTuple):
    """How :func:`stop` ends a run: back to pending at ``at`` (None: finished),
    with ``data`` as the job's data (None: keep it)."""

    held: Held
    at: Optional[int]
    data: Optional[bytes] = None


# ---------------------------------------------------------------- reading


def _read(
    tr: Transaction, layout: Layout, pairs: Sequence[tuple[JobType, str]]
) -> list[tuple[bytes, Optional[JobValue], WorkRecord]]:
    """``(DATA key, row or None, work record)`` of each ``(type, id)``, read
    at once (one ``get_many``); a corrupt row reads as None (logged once)."""
    keys = [layout.data_key(t, i) for t, i in pairs]
    raws = tr.get_many(keys + [layout.work_key(t, i) for t, i in pairs])
    n = len(pairs)
    out = []
    for (_, job_id), key, raw, raw_work in zip(pairs, keys, raws[:n], raws[n:], strict=True):
        value = None if raw is None else rows.job_val_or_none(key, raw)
        out.append((key, value, WorkRecord.unpack(raw_work, job_id)))
    return out


def held(tr: Transaction, layout: Layout, jobs: Sequence[Job]) -> list[Optional[Held]]:
    """Each job as :class:`Held` if its row still holds the job's lock, else
    None (removed, re-enqueued, finished, or its row corrupt), in order."""
    found = _read(tr, layout, [(j.type, j.id) for j in jobs])
    return [
        None if value is None or value.lock != job.lock else Held(job, key, value, record)
        for job, (key, value, record) in zip(jobs, found, strict=True)
    ]


def held_or_halt(tr: Transaction, layout: Layout, job: Job) -> Held:
    """:func:`held` of one job, or :class:`Halt` saying why it is not held."""
    ((key, value, record),) = _read(tr, layout, [(job.type, job.id)])
    if value is None:
        raise Halt(f"job {job.id!r} of type {job.type!r} was removed", job_type=job.type, job_id=job.id)
    if value.lock != job.lock:
        raise Halt(
            f"job {job.id!r} of type {job.type!r} is no longer held by this lock "
            f"(it is {job_state(value.lock, value.seq).value})",
            job_type=job.type,
            job_id=job.id,
        )
    return Held(job, key, value, record)


def running(tr: Transaction, layout: Layout, job_type: JobType, job_ids: Sequence[str]) -> list[Held]:
    """The jobs among ``job_ids`` that run under any lock, as :class:`Held`
    (with that lock), in order; the others (gone, pending, finished) left out."""
    found = _read(tr, layout, [(job_type, i) for i in job_ids])
    return [
        Held(Job(job_type, job_id, value.lock, value.sched_time, value.resubmit), key, value, record)
        for job_id, (key, value, record) in zip(job_ids, found, strict=True)
        if value is not None and value.lock is not None
    ]


# ---------------------------------------------------------------- writing


def start(tr: Transaction, layout: Layout, job_type: JobType, picks: Sequence[Pick], tally: Tally) -> list[Job]:
    """pending -> running: each picked job (already out of its queue) runs
    under a new lock with this commit's versionstamp as its seq and a fresh
    activity row; returns their handles, in order. The caller counts the
    start (couch_jobs' ``started``, a pool's ``claimed``)."""
    locks = os.urandom(16 * len(picks)).hex()  # one system call for the batch: 32 hex digits a lock
    jobs = []
    for n, (job_id, key, value) in enumerate(picks):
        lock = locks[32 * n : 32 * n + 32]
        uv = rows.next_user_version(tr)
        rows.set_job_val(tr, key, JobValue(running_seq(uv), lock, value.sched_time, False, value.data, value.priority))
        rows.update_activity(tr, layout, job_type, job_id, None, value.data, uv, tally)
        jobs.append(Job(job_type, job_id, lock, value.sched_time, False))
    return jobs


def refresh(
    tr: Transaction, layout: Layout, helds: Sequence[Held], datas: Sequence[Optional[bytes]], tally: Tally
) -> list[JobValue]:
    """running -> running: each held job gets this commit's versionstamp as
    its seq and a fresh activity row (the lease), its data replaced by
    ``datas`` where one is given (None: kept); returns the new rows."""
    values = []
    for (job, key, current, _record), data in zip(helds, datas, strict=True):
        new_data = current.data if data is None else data
        uv = rows.next_user_version(tr)
        value = current._replace(seq=running_seq(uv), data=new_data)
        rows.set_job_val(tr, key, value)
        rows.update_activity(tr, layout, job.type, job.id, current.seq, new_data, uv, tally)
        values.append(value)
    return values


def stop(tr: Transaction, layout: Layout, stops: Sequence[Stop], tally: Tally) -> list[JobValue]:
    """running -> pending at ``stop.at``, or -> finished (``at`` None): the
    run's activity row cleared, the job's watch stamped; returns the new rows.
    What the run's work record says is the caller's (a pool's outcome)."""
    values = []
    for (job, key, current, _record), at, data in stops:
        new_data = current.data if data is None else data
        rows.clear_activity(tr, layout, job.type, current.seq, tally)
        tally.stamp(job.type)
        enqueue = at is not None
        sched_time = current.sched_time if at is None else at
        values.append(
            rows.maybe_enqueue(
                tr, layout, job.type, job.id, sched_time, enqueue, new_data, key, tally, current.priority
            )
        )
    return values


def requeue(tr: Transaction, layout: Layout, helds: Sequence[Held], tally: Tally, now: float, forgive: bool) -> None:
    """running -> pending now (at its scheduled time), its lock stale: a run
    whose host is gone or stalled (``forgive`` False), or given back
    (``forgive`` True: a pool's release).

    A pool job's attempt is given back when its handler never started, or
    always with ``forgive``; one whose handler started and that is not
    forgiven keeps the attempt, and its record gets a ``WorkerLost`` error
    at ``now`` (its next claim fails it for good if its attempts are used up).
    """
    for job, _key, _value, record in helds:
        work_key = layout.work_key(job.type, job.id)
        if claimed_only(record):
            tally.bump(job.type, "claimed", -1)
        if forgive or claimed_only(record):
            tr.set(work_key, record.unclaimed().pack())
        elif record.worker is not None and record.outcome is None:  # its handler started: the attempt is lost
            error = {
                "type": WORKER_LOST,
                "message": f"attempt {record.attempt} stopped renewing its lease "
                f"(its host {record.worker} died or stalled)",
                "traceback": "",
            }
            tr.set(
                work_key,
                record._replace(error=error, errors=with_error(record.errors, record.attempt, now, error)).pack(),
            )
        if not forgive:
            tally.bump(job.type, "reenqueued")
    stop(tr, layout, [Stop(h, h.value.sched_time) for h in helds], tally)
