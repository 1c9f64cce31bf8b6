"""Work records: what worker pools keep beside each queue job, and their batch transitions.

Principle: a job run by a worker pool keeps its couch_jobs rows as they are
(the DATA row holds the caller's input data, which a worker never replaces)
plus one row of its own, its work record, written in the same transaction
as every transition of the job::

    (P, WORK, type, job_id) = {"a": attempts started, "m": max attempts or None,
                               "o": outcome ("succeeded" | "failed") or None,
                               "r": encoded result or None, "e": last error or None,
                               "p": progress fields, "w": worker host, "k": claimed,
                               "s": handler started, "f": ended}

A pool's dispatcher moves many jobs per transaction, so the store's one
writer is not the limit of a pool:

=================  =====================================================
:func:`claim`      due pending jobs -> running under new locks, attempt + 1,
                   *claimed* (a job whose attempts are used up -> finished,
                   failed)
:func:`mark_started`  claimed -> started (its handler runs), at the time
                   the handler started
:func:`complete`   running -> finished (succeeded or failed), or -> pending
                   at a retry time; a job whose lock was lost is left alone
:func:`renew`      running -> running with a fresh activity stamp (the lease)
:func:`release`    running -> pending now, attempt - 1 (never started, or
                   given back at a drain)
:func:`requeue_held_by`  running, held by a host whose dispatcher restarted ->
                   pending now, as the activity monitors' re-enqueue
                   (:func:`fdblayer.jobs.activity.requeue_silent`): attempt - 1
                   if its handler never started, else the attempt counts
=================  =====================================================

A pool's job held by a host is *claimed* from its claim until its handler
starts (``worker`` set, ``started`` None), then *started*; the type's
``claimed`` counter counts the former, so ``running - claimed`` handlers
run. Attempts are counted when a job is claimed and given back when it
is released without starting, so an attempt whose handler started and
whose worker died (SIGKILL, OOM, the machine lost) counts: a job that
kills its worker every time ends failed instead of looping. A record
that cannot be decoded (a bad value written behind the API's back) reads
as a fresh one and is logged: a stored value never stops a dispatcher.

Like :mod:`fdblayer.jobs.model`, nothing here validates arguments, sleeps or
talks to anything but the transaction; it knows nothing of actors.
"""

from __future__ import annotations

import logging
import os
import random
from enum import Enum
from typing import Any, Iterable, NamedTuple, Optional

import msgpack

from fdblayer.interface import Transaction, strinc, transactional
from fdblayer.jobs import activity, failures, finished, model, pending, rows
from fdblayer.jobs.codec import JobValue, running_seq, unpack_activity_value_or_none, unpack_job_value
from fdblayer.jobs.exceptions import EncodingError, Halt
from fdblayer.jobs.job import Job, JobState, job_state
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.tally import Tally, observe_run
from fdblayer.jobs.work_record import FAILED, SUCCEEDED, WORKER_LOST, WorkRecord, claimed_only, pool_state, with_error
from fdblayer.watches import Watch

__all__ = [
    "Claimed",
    "ClaimResult",
    "Outcome",
    "OutcomeKind",
    "enqueue",
    "prefetch_step",
    "step",
    "claim",
    "mark_started",
    "complete",
    "renew",
    "release",
    "requeue_held_by",
    "set_progress",
    "read",
    "read_many",
]

logger = logging.getLogger(__name__)


class Claimed(NamedTuple):
    """A job a claim made running: its handle, encoded data and attempt number."""

    job: Job
    data: bytes
    attempt: int
    max_attempts: int
    time_limit: Optional[float] = None  #: the job's own limit on a run (seconds), if it has one
    priority: int = 0


class ClaimResult(NamedTuple):
    """What :func:`claim` did.

    ``claimed``: the jobs now running; ``exhausted``: ids finished as failed
    because their attempts were used up; ``next_due``: the scheduled time of
    the earliest pending job not yet due (None if none); ``watch``: fires at
    the type's next enqueue (only when fewer jobs than asked were claimed);
    ``paused``: the type is paused (nothing claimed; the watch fires when
    it is resumed).
    """

    claimed: list
    exhausted: list
    next_due: Optional[int]
    watch: Optional[Watch]
    paused: bool = False


class OutcomeKind(str, Enum):
    """How an attempt ended (the values are the strings older callers pass)."""

    OK = "ok"  #: succeeded: ``result`` is the encoded result
    RETRY = "retry"  #: back to pending at ``retry_at``, the attempt counted
    SNOOZE = "snooze"  #: back to pending at ``retry_at``, the attempt not counted
    FAIL = "fail"  #: finished as failed


class Outcome(NamedTuple):
    """The end of one attempt, for :func:`complete`.

    ``kind``: an :class:`OutcomeKind` (or its value; anything else is
    refused by :func:`complete`); ``error`` a dict ``{"type", "message",
    "traceback"}`` for a retry or a failure.
    """

    job: Job
    kind: OutcomeKind
    result: Optional[bytes] = None
    error: Optional[dict] = None
    retry_at: int = 0
    seconds: float = -1.0  #: how long the handler ran (-1: unknown)
    started: Optional[float] = None  #: when the handler started (epoch s), if known


# ---------------------------------------------------------------- producing


@transactional
def enqueue(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    data: bytes,
    sched_time: int,
    max_attempts: Optional[int],
    time_limit: Optional[float] = None,
    priority: Optional[int] = None,
) -> JobState:
    """Add a job as ``model.add`` does (at ``priority``) and give it a fresh
    work record (with the job's own ``max_attempts`` and ``time_limit``).

    A job that is running keeps its record (it is flagged resubmitted and
    starts afresh when its attempt ends, see :func:`complete`).

    Returns:
        The job's state after the add.

    Raises:
        NoTypeTimeout: ``job_type`` has no type timeout.
    """
    value = model.add(tr, layout, job_type, job_id, data, sched_time, priority, type_default=True)
    state = job_state(value.lock, value.seq)
    if state is not JobState.RUNNING:
        tr.set(layout.work_key(job_type, job_id), WorkRecord(max_attempts=max_attempts, time_limit=time_limit).pack())
    return state


# ---------------------------------------------------------------- claiming


@transactional
def claim(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    now: float,
    limit: int,
    worker: str,
    default_max: int,
    rng: Optional[random.Random] = None,
) -> ClaimResult:
    """Make up to ``limit`` due pending jobs running, each under a new lock.

    Due means scheduled at or before ``int(now)``. Where the store has
    per-key conflicts, the jobs are picked at random among the first
    :data:`pending.RANGE_LIMIT` due ones so that hosts claiming at once
    seldom collide (as :func:`pending.dequeue` does). Priority 0 jobs
    come first, then those of priority 1, 2... (each queue in due order).
    A paused type claims nothing (read with a conflict: a claim that
    commits after a pause has seen it).
    """
    if tr.get(layout.paused_key(job_type)) is not None:
        return ClaimResult([], [], None, pending.watch_pending(tr, layout, job_type), paused=True)
    due, queues = _due_keys(tr, layout, job_type, int(now), limit, rng or random)
    keys = [key for key, _ in due]
    claimed: list[Claimed] = []
    exhausted: list[str] = []
    found = len(keys)
    if keys:
        ids = [pending.unpack_pending_key(key, prefix_len)[1] for key, prefix_len in due]
        for key in [k for k, i in zip(keys, ids, strict=True) if i is None]:
            tr.clear(key)  # a corrupt index key names no job: dropped, never claimed
        keys, ids = [k for k, i in zip(keys, ids, strict=True) if i is not None], [i for i in ids if i is not None]
        data_keys = [layout.data_key(job_type, i) for i in ids]
        work_keys = [layout.work_key(job_type, i) for i in ids]
        raws = tr.get_many(data_keys + work_keys)
        tally = Tally(tr, layout)
        locks = os.urandom(16 * len(ids)).hex()  # one system call for the batch's new locks
        tally.bump(job_type, "pending", -len(ids))
        for n, (key, job_id) in enumerate(zip(keys, ids, strict=True)):
            tr.add_read_conflict_key(key)
            tr.clear(key)
            got = _claim_one(
                tr,
                layout,
                job_type,
                job_id,
                data_keys[n],
                raws[n],
                raws[len(ids) + n],
                now,
                worker,
                default_max,
                tally,
                locks[32 * n : 32 * n + 32],
            )
            (claimed if isinstance(got, Claimed) else exhausted).append(got)
        exhausted = [e for e in exhausted if e is not None]
        tally.bump(job_type, "claimed", len(claimed))
        if exhausted:
            tally.bump(job_type, "failed", len(exhausted))
            tally.bump(job_type, "failed_final", len(exhausted))
            tally.stamp(job_type)
        tally.write()
    if found >= limit:
        return ClaimResult(claimed, exhausted, None, None)
    return ClaimResult(
        claimed,
        exhausted,
        _next_due(tr, layout, job_type, int(now), queues),
        pending.watch_pending(tr, layout, job_type),
    )


def _due_keys(
    tr: Transaction, layout: Layout, job_type: JobType, now: int, limit: int, rng: Any
) -> tuple[list, Optional[list[int]]]:
    """``(key, prefix length)`` of up to ``limit`` due pending jobs, lower
    priorities first (see :func:`claim`), and the priorities 1-9 with pending
    jobs if it had to read them (None if priority 0 was enough)."""
    spread = tr.db.key_conflicts
    out: list = []
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
        prefix = layout.pending_prefix(job_type, priority)
        found = tr.snapshot.get_range(
            prefix,
            layout.pending_end(job_type, now, priority),
            limit=max(want, pending.RANGE_LIMIT) if spread else want,
        )
        keys = [kv.key for kv in found]
        if spread and len(keys) > want:
            keys = rng.sample(keys, want)
        out += [(key, len(prefix)) for key in keys]
    return out, read


def _next_due(
    tr: Transaction, layout: Layout, job_type: JobType, now: int, queues: Optional[list[int]] = None
) -> Optional[int]:
    """The scheduled time of the earliest pending job not yet due, any
    priority (``queues``: the priorities 1-9 already read in this
    transaction, else read here; a queue the claim emptied finds nothing)."""
    times = []
    for priority in [0] + (pending.priorities(tr, layout, job_type) if queues is None else queues):
        prefix = layout.pending_prefix(job_type, priority)
        later = tr.snapshot.get_range(layout.pending_end(job_type, now, priority), strinc(prefix), limit=1)
        if later:
            sched_time = pending.unpack_pending_key(later[0].key, len(prefix))[0]
            if sched_time is not None:
                times.append(sched_time)
    return min(times) if times else None


def _claim_one(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    key: bytes,
    raw: Optional[bytes],
    raw_work: Optional[bytes],
    now: float,
    worker: str,
    default_max: int,
    tally: Tally,
    lock: str,
) -> Any:
    """Claim one dequeued job: a Claimed, its id (exhausted), or None (inconsistent row)."""
    current = None if raw is None else rows.job_val_or_none(key, raw)
    if current is None or current.lock is not None:
        logger.critical(
            "job_not_pending job=%r type=%r state=%s",
            job_id,
            job_type,
            "missing_or_unreadable" if current is None else "running",
        )
        return None
    record = WorkRecord.unpack(raw_work, job_id)
    attempt = record.attempt + 1
    max_attempts = record.max_attempts or default_max
    work_key = layout.work_key(job_type, job_id)
    if attempt > max_attempts:
        lost = record.errors and record.errors[-1].get("attempt") == record.attempt  # its loss is in the history
        error = (
            record.error
            if lost
            else {
                "type": WORKER_LOST,
                "message": (f"attempt {record.attempt} of {max_attempts} ended without an outcome (its worker died)"),
                "traceback": "",
            }
        )
        rows.maybe_enqueue(
            tr, layout, job_type, job_id, current.sched_time, False, current.data, key, tally, current.priority
        )
        ended = record.end_attempt(FAILED, record.result, None, now)
        tr.set(
            work_key,
            (
                ended
                if lost
                else ended._replace(error=error, errors=with_error(record.errors, record.attempt, now, error))
            ).pack(),
        )
        failures.record(tr, layout, job_type, job_id, now)
        finished.record(tr, layout, job_type, job_id, FAILED, now)
        return job_id
    uv = rows.next_user_version(tr)
    rows.set_job_val(
        tr, key, JobValue(running_seq(uv), lock, current.sched_time, False, current.data, current.priority)
    )
    rows.update_activity(tr, layout, job_type, job_id, None, current.data, uv, tally)
    tr.set(work_key, record.begin_attempt(worker, now).pack())
    return Claimed(
        Job(job_type, job_id, lock, current.sched_time, False),
        current.data,
        attempt,
        max_attempts,
        record.time_limit,
        current.priority,
    )


# ---------------------------------------------------------------- ending attempts


def prefetch_step(tr: Transaction, layout: Layout, jobs: Iterable[Job], types: Iterable[JobType]) -> None:
    """Read at once what :func:`mark_started` and :func:`complete` of
    ``jobs`` and :func:`claim` of ``types`` read first, in this transaction
    (``Transaction.prefetch``: one round trip where reads are round trips)."""
    keys = [k for j in jobs for k in (layout.data_key(j.type, j.id), layout.work_key(j.type, j.id))]
    types = list(types)  # the pause keys a claim reads first, the pending watch it arms when the queue runs dry
    tr.prefetch(keys + [layout.paused_key(t) for t in types] + [layout.watches_pending_key(t) for t in types])


@transactional
def step(
    tr: Transaction, layout: Layout, outcomes: list, starts: list, claims: list, now: float, worker: str
) -> tuple[list, list]:
    """A worker host's step, one transaction: record ``starts`` (:func:`mark_started`),
    end ``outcomes`` (:func:`complete`) and claim for ``claims`` = ``[(type,
    limit, default_max)]`` (:func:`claim`), what they read first read at once. Returns ``(lost jobs,
    [ClaimResult per claim])``."""
    prefetch_step(tr, layout, [job for job, _ in starts] + [o.job for o in outcomes], [t for t, _, _ in claims])
    lost = mark_started(tr, layout, starts) if starts else []
    lost += complete(tr, layout, outcomes, now) if outcomes else []
    results = [claim(tr, layout, t, now, limit, worker, default_max) for t, limit, default_max in claims]
    return lost, results


def _held(tr: Transaction, layout: Layout, jobs: list) -> list:
    """``(job, key, current value, record)`` of each job still held by its lock, else None."""
    data_keys = [layout.data_key(j.type, j.id) for j in jobs]
    raws = tr.get_many(data_keys + [layout.work_key(j.type, j.id) for j in jobs])
    held = []
    for n, job in enumerate(jobs):
        current = None if raws[n] is None else rows.job_val_or_none(data_keys[n], raws[n])
        if current is None or current.lock != job.lock:
            held.append(None)
        else:
            held.append((job, data_keys[n], current, WorkRecord.unpack(raws[len(jobs) + n], job.id)))
    return held


def _count_start(tally: Tally, job_type: JobType, record: WorkRecord) -> None:
    """A claimed job's handler started (or its attempt ends before the start
    was recorded): one less claimed, one more start."""
    if claimed_only(record):
        tally.bump(job_type, "claimed", -1)
        tally.bump(job_type, "started")


@transactional
def mark_started(tr: Transaction, layout: Layout, starts: list) -> list:
    """Record that the handlers of ``starts`` = ``[(job, epoch seconds)]``
    started; returns the jobs whose lock was lost (left alone)."""
    lost = []
    tally = Tally(tr, layout)
    for (job, when), held in zip(starts, _held(tr, layout, [job for job, _ in starts]), strict=True):
        if held is None:
            lost.append(job)
            continue
        record = held[3]
        if claimed_only(record):
            _count_start(tally, job.type, record)
            tr.set(layout.work_key(job.type, job.id), record._replace(started=when).pack())
    tally.write()
    return lost


@transactional
def complete(tr: Transaction, layout: Layout, outcomes: list, now: float) -> list:
    """End many attempts (:class:`Outcome`); returns the jobs whose lock was lost.

    A lost job (removed, or re-enqueued and perhaps running elsewhere) is
    not touched: its late outcome is discarded, so no job is finished twice.
    A job resubmitted while it ran goes back to pending with a fresh record
    whatever the outcome, as couch_jobs' ``finish`` does.
    """
    kinds = [OutcomeKind(o.kind) for o in outcomes]  # ValueError for another kind, before any write
    lost = []
    tally = Tally(tr, layout)
    for outcome, kind, held in zip(outcomes, kinds, _held(tr, layout, [o.job for o in outcomes]), strict=True):
        if held is None:
            lost.append(outcome.job)
            continue
        job, key, current, record = held
        work_key = layout.work_key(job.type, job.id)
        _count_start(tally, job.type, record)
        observe_run(tally, job.type, outcome.seconds)
        tally.bump(job.type, _EVENT_OF_KIND[kind])
        rows.clear_activity(tr, layout, job.type, current.seq, tally)
        tally.stamp(job.type)
        if current.resubmit:
            rows.maybe_enqueue(
                tr, layout, job.type, job.id, current.sched_time, True, current.data, key, tally, current.priority
            )
            tr.set(work_key, WorkRecord(max_attempts=record.max_attempts, time_limit=record.time_limit).pack())
        elif kind is OutcomeKind.RETRY:
            rows.maybe_enqueue(
                tr, layout, job.type, job.id, outcome.retry_at, True, current.data, key, tally, current.priority
            )
            tr.set(work_key, record.end_attempt(None, record.result, outcome.error, now, outcome.started).pack())
        elif kind is OutcomeKind.SNOOZE:  # again at retry_at, this attempt not counted, no error kept
            rows.maybe_enqueue(
                tr, layout, job.type, job.id, outcome.retry_at, True, current.data, key, tally, current.priority
            )
            ended = record.end_attempt(None, record.result, None, now, outcome.started)
            tr.set(work_key, ended._replace(attempt=max(0, record.attempt - 1), error=record.error).pack())
        else:
            rows.maybe_enqueue(
                tr, layout, job.type, job.id, current.sched_time, False, current.data, key, tally, current.priority
            )
            finished.record(tr, layout, job.type, job.id, SUCCEEDED if kind is OutcomeKind.OK else FAILED, now)
            if kind is OutcomeKind.OK:
                tr.set(work_key, record.end_attempt(SUCCEEDED, outcome.result, None, now, outcome.started).pack())
            else:
                tally.bump(job.type, "failed")
                failures.record(tr, layout, job.type, job.id, now)
                tr.set(work_key, record.end_attempt(FAILED, None, outcome.error, now, outcome.started).pack())
    tally.write()
    return lost


#: The event counter each outcome kind bumps.
_EVENT_OF_KIND = {
    OutcomeKind.OK: "succeeded",
    OutcomeKind.RETRY: "retried",
    OutcomeKind.SNOOZE: "snoozed",
    OutcomeKind.FAIL: "failed_final",
}


@transactional
def renew(tr: Transaction, layout: Layout, jobs: list) -> list:
    """Renew the lease of many running jobs (a fresh activity stamp, data
    untouched); returns the jobs whose lock was lost."""
    lost = []
    tally = Tally(tr, layout)
    for job, held in zip(jobs, _held(tr, layout, jobs), strict=True):
        if held is None:
            lost.append(job)
            continue
        _, key, current, _record = held
        uv = rows.next_user_version(tr)
        rows.set_job_val(tr, key, current._replace(seq=running_seq(uv)))
        rows.update_activity(tr, layout, job.type, job.id, current.seq, current.data, uv, tally)
    tally.write()
    return lost


@transactional
def release(tr: Transaction, layout: Layout, jobs: list) -> int:
    """Put held jobs back in the queue, due now, their attempt not counted
    (claimed and never started, or given back at a drain); returns how many
    were still held."""
    released = 0
    tally = Tally(tr, layout)
    for held in _held(tr, layout, jobs):
        if held is None:
            continue
        job, key, current, record = held
        if claimed_only(record):
            tally.bump(job.type, "claimed", -1)
        rows.clear_activity(tr, layout, job.type, current.seq, tally)
        rows.maybe_enqueue(
            tr, layout, job.type, job.id, current.sched_time, True, current.data, key, tally, current.priority
        )
        tr.set(layout.work_key(job.type, job.id), record.unclaimed().pack())
        released += 1
    for job_type in {job.type for job in jobs}:
        tally.stamp(job_type)
    tally.write()
    return released


@transactional
def requeue_held_by(tr: Transaction, layout: Layout, job_type: JobType, worker: str) -> list:
    """:func:`~fdblayer.jobs.activity.requeue_silent` every running job of ``job_type`` that host
    ``worker`` holds (a restarted dispatcher takes back what its
    predecessor claimed); returns their ids."""
    prefix = layout.activity_prefix(job_type)
    found = (unpack_activity_value_or_none(kv.key, kv.value) for kv in tr.get_range(prefix, prefix + b"\xff"))
    ids = [row[0] for row in found if row is not None]
    raws = tr.get_many([layout.work_key(job_type, job_id) for job_id in ids])
    tally = Tally(tr, layout)
    done = [
        job_id
        for job_id, raw in zip(ids, raws, strict=True)
        if raw is not None
        and WorkRecord.unpack(raw, job_id).worker == worker
        and activity.requeue_silent(tr, layout, job_type, job_id, tally)
    ]
    tally.write()
    return done


@transactional
def set_progress(tr: Transaction, layout: Layout, job: Job, fields: dict, limit: int) -> dict:
    """Merge ``fields`` into a running job's progress; returns the whole progress.

    Raises:
        Halt: the job is gone or another lock holds it.
        EncodingError: the merged progress encodes to more than ``limit``
            bytes (nothing is written).
    """
    (held,) = _held(tr, layout, [job])
    if held is None:
        raise Halt(
            f"job {job.id!r} of type {job.type!r} is no longer held by this lock", job_type=job.type, job_id=job.id
        )
    record = held[3]
    progress = {**record.progress, **fields}
    size = len(msgpack.packb(progress, use_bin_type=True))
    if size > limit:
        raise EncodingError(
            f"the merged progress encodes to {size} bytes; at most {limit}", job_type=job.type, job_id=job.id
        )
    tr.set(layout.work_key(job.type, job.id), record._replace(progress=progress).pack())
    return progress


# ---------------------------------------------------------------- reading


@transactional
def read(tr: Transaction, layout: Layout, job_type: JobType, job_id: str) -> Optional[tuple]:
    """``(state, data bytes, record)`` of a job (the state as :func:`pool_state`
    says), or None if it does not exist."""
    raw, raw_work = tr.get_many([layout.data_key(job_type, job_id), layout.work_key(job_type, job_id)])
    if raw is None:
        return None
    value = unpack_job_value(raw)
    record = WorkRecord.unpack(raw_work, job_id)
    return pool_state(job_state(value.lock, value.seq), record), value.data, record


@transactional
def read_many(tr: Transaction, layout: Layout, job_type: JobType, job_ids: list) -> list:
    """:func:`read` of many jobs of one type, in order."""
    keys = [layout.data_key(job_type, i) for i in job_ids]
    raws = tr.get_many(keys + [layout.work_key(job_type, i) for i in job_ids])
    out = []
    for n, job_id in enumerate(job_ids):
        if raws[n] is None:
            out.append(None)
            continue
        value = unpack_job_value(raws[n])
        out.append((job_state(value.lock, value.seq), value.data, WorkRecord.unpack(raws[len(job_ids) + n], job_id)))
    return out


def read_many_tolerant(tr: Transaction, layout: Layout, job_type: JobType, job_ids: list) -> list:
    """``(state, data bytes, record, scheduled time, priority)`` of each job,
    None for one that is missing or whose row is corrupt (logged once), in
    order."""
    keys = [layout.data_key(job_type, i) for i in job_ids]
    raws = tr.snapshot.get_many(keys + [layout.work_key(job_type, i) for i in job_ids])
    out = []
    for n, job_id in enumerate(job_ids):
        value = None if raws[n] is None else rows.job_val_or_none(keys[n], raws[n])
        if value is None:
            out.append(None)
            continue
        record = WorkRecord.unpack(raws[len(job_ids) + n], job_id)
        out.append(
            (pool_state(job_state(value.lock, value.seq), record), value.data, record, value.sched_time, value.priority)
        )
    return out
