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

Each of these moves the job's own rows with :mod:`fdblayer.jobs.transitions`
(the same batch functions couch_jobs' one-job calls use: ``claim`` starts
as ``model.accept`` does, ``complete`` stops as ``model.finish``, ``renew``
refreshes as ``model.update``, ``release`` and ``requeue_held_by`` requeue
as the activity monitors do) and adds the work record's part.

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
import random
from enum import Enum
from typing import Any, Callable, Collection, Iterable, NamedTuple, Optional

import msgpack

from fdblayer.interface import Transaction, transactional
from fdblayer.jobs import activity, failures, finished, model, pending, rows, transitions
from fdblayer.jobs.codec import JobValue, unpack_job_value
from fdblayer.jobs.due import due_keys, due_range, later_range, next_due
from fdblayer.jobs.exceptions import EncodingError
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

#: What :func:`read` gives of a job: its state, encoded data and work record.
PoolRead = tuple[JobState, bytes, WorkRecord]
#: What :func:`read_many_tolerant` gives: :data:`PoolRead`, then scheduled time and priority.
TolerantRead = tuple[JobState, bytes, WorkRecord, int, int]


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

    claimed: list[Claimed]
    exhausted: list[str]
    next_due: Optional[int]
    watch: Optional[Watch]
    paused: bool = False
    #: the pending keys the claim took out of the queue (claimed, exhausted or corrupt)
    keys: tuple[bytes, ...] = ()


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
    error: Optional[dict[str, Any]] = None
    retry_at: int = 0
    seconds: float = -1.0  #: how long the handler ran (-1: unknown)
    started: Optional[float] = None  #: when the handler started (epoch s), if known


# ---------------------------------------------------------------- producing

#: The work record of a job that never ran and has no options of its own:
#: a missing record reads as this one (``WorkRecord.unpack(None)``).
_FRESH = WorkRecord()


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
    new_id: bool = False,
) -> JobState:
    """Add a job as ``model.add`` does (at ``priority``) and give it a fresh
    work record (with the job's own ``max_attempts`` and ``time_limit``; a
    new job without them gets no stored record, which reads the same).

    A job that is running is flagged resubmitted and starts afresh when its
    attempt ends (see :func:`complete`): with this add's data, options and
    priority (a pool's handler never writes its job's data, so the new data
    is the next run's; the running handler keeps what it was given).
    ``new_id``: ``job_id`` was made for this add (see ``model.add``).

    Returns:
        The job's state after the add.

    Raises:
        NoTypeTimeout: ``job_type`` has no type timeout.
    """
    try:
        value = model.add(tr, layout, job_type, job_id, data, sched_time, priority, type_default=True, new_id=new_id)
    except model.AddedBefore as before:  # this add committed already: its record may have moved on since
        return job_state(before.value.lock, before.value.seq)
    state = job_state(value.lock, value.seq)
    work_key = layout.work_key(job_type, job_id)
    if state is JobState.RUNNING:  # the next run's data and options, read when this attempt ends
        if value.data != data:
            rows.set_job_val(tr, layout.data_key(job_type, job_id), value._replace(data=data))
        record = WorkRecord.unpack(tr.get(work_key))
        if (record.max_attempts, record.time_limit) != (max_attempts, time_limit):
            tr.set(work_key, record._replace(max_attempts=max_attempts, time_limit=time_limit).pack())
        return state
    record = WorkRecord(max_attempts=max_attempts, time_limit=time_limit)
    if not (new_id and record == _FRESH):  # a new job's fresh record is no row: it reads as fresh
        tr.set(work_key, record.pack())
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
    skip: Collection[bytes] = (),
) -> ClaimResult:
    """Make up to ``limit`` due pending jobs running, each under a new lock.

    Due means scheduled at or before ``int(now)``. Where the store has
    per-key conflicts, the jobs are picked at random among the first
    :func:`~fdblayer.jobs.due.claim_spread` due ones so that hosts claiming at once seldom
    collide (as :func:`pending.dequeue` does among up to
    :data:`pending.RANGE_LIMIT`). Priority 0 jobs
    come first, then those of priority 1, 2... (each queue in due order).
    A paused type claims nothing (read with a conflict: a claim that
    commits after a pause has seen it). Pending keys in ``skip`` are not
    taken (see :func:`step`).
    """
    if tr.get(layout.paused_key(job_type)) is not None:
        return ClaimResult([], [], None, pending.watch_pending(tr, layout, job_type), paused=True)
    due, queues = due_keys(tr, layout, job_type, int(now), limit, rng or random, skip)
    taken = tuple(key for key, _ in due)
    claimed: list[Claimed] = []
    exhausted: list[str] = []
    if due:
        tally = Tally(tr, layout)
        picks, records, exhausted = _take(tr, layout, job_type, due, now, default_max, tally)
        for job, pick, record in zip(
            transitions.start(tr, layout, job_type, picks, tally), picks, records, strict=True
        ):
            tr.set(layout.work_key(job_type, job.id), record.begin_attempt(worker, now).pack())
            max_attempts = record.max_attempts or default_max
            claimed.append(
                Claimed(job, pick.value.data, record.attempt + 1, max_attempts, record.time_limit, pick.value.priority)
            )
        tally.bump(job_type, "claimed", len(claimed))
        tally.write()
    if len(due) >= limit:
        return ClaimResult(claimed, exhausted, None, None, keys=taken)
    return ClaimResult(
        claimed,
        exhausted,
        next_due(tr, layout, job_type, int(now), queues),
        pending.watch_pending(tr, layout, job_type),
        keys=taken,
    )


def _take(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    due: list[tuple[bytes, int]],
    now: float,
    default_max: int,
    tally: Tally,
) -> tuple[list[transitions.Pick], list[WorkRecord], list[str]]:
    """Take the ``due`` pending keys out of the queue (with a read conflict
    each) and sort their jobs: ``(picks to start, their work records, ids
    finished as failed because their attempts are used up)``. A key that
    names no job, or a job missing or running, is dropped (logged)."""
    ids = [pending.unpack_pending_key(key, prefix_len)[1] for key, prefix_len in due]
    for (key, _), job_id in zip(due, ids, strict=True):
        if job_id is None:
            tr.clear(key)  # a corrupt index key names no job: dropped, never claimed
    taken = [(key, job_id) for (key, _), job_id in zip(due, ids, strict=True) if job_id is not None]
    data_keys = [layout.data_key(job_type, job_id) for _, job_id in taken]
    raws = tr.get_many(data_keys + [layout.work_key(job_type, job_id) for _, job_id in taken])
    tally.bump(job_type, "pending", -len(taken))
    picks, records, exhausted = [], [], []
    n = len(taken)
    for (key, job_id), data_key, raw, raw_work in zip(taken, data_keys, raws[:n], raws[n:], strict=True):
        tr.add_read_conflict_key(key)
        tr.clear(key)
        current = None if raw is None else rows.job_val_or_none(data_key, raw)
        if current is None or current.lock is not None:
            state = "missing_or_unreadable" if current is None else "running"
            logger.critical("job_not_pending job=%r type=%r state=%s", job_id, job_type, state)
            continue
        record = WorkRecord.unpack(raw_work, job_id)
        if record.attempt + 1 > (record.max_attempts or default_max):
            _exhaust(tr, layout, job_type, job_id, data_key, current, record, default_max, now, tally)
            exhausted.append(job_id)
        else:
            picks.append(transitions.Pick(job_id, data_key, current))
            records.append(record)
    if exhausted:
        tally.bump(job_type, "failed", len(exhausted))
        tally.bump(job_type, "failed_final", len(exhausted))
        tally.stamp(job_type)
    return picks, records, exhausted


def _exhaust(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    key: bytes,
    current: JobValue,
    record: WorkRecord,
    default_max: int,
    now: float,
    tally: Tally,
) -> None:
    """pending -> finished, failed: a dequeued job whose attempts are used up
    (its last attempt's worker died without an outcome, or it was lost)."""
    max_attempts = record.max_attempts or default_max
    lost = record.errors and record.errors[-1].get("attempt") == record.attempt  # its loss is in the history
    rows.maybe_enqueue(
        tr, layout, job_type, job_id, current.sched_time, False, current.data, key, tally, current.priority
    )
    ended = record.end_attempt(FAILED, record.result, None, now)
    if not lost:
        error = {
            "type": WORKER_LOST,
            "message": f"attempt {record.attempt} of {max_attempts} ended without an outcome (its worker died)",
            "traceback": "",
        }
        ended = ended._replace(error=error, errors=with_error(record.errors, record.attempt, now, error))
    else:  # the job's error is that loss, as the history says
        last = record.errors[-1]
        ended = ended._replace(error={k: last.get(k, "") for k in ("type", "message", "traceback")})
    tr.set(layout.work_key(job_type, job_id), ended.pack())
    failures.record(tr, layout, job_type, job_id, now)
    finished.record(tr, layout, job_type, job_id, FAILED, now)


# ---------------------------------------------------------------- ending attempts


def prefetch_step(
    tr: Transaction,
    layout: Layout,
    jobs: Iterable[Job],
    claims: Iterable[tuple[JobType, int]],
    now: float,
    skipped: int = 0,
) -> None:
    """Read at once what :func:`mark_started` and :func:`complete` of
    ``jobs`` and :func:`claim` of ``claims`` = ``[(type, limit)]`` at ``now``
    read first, in this transaction (``Transaction.prefetch``: one round trip
    where reads are round trips): the jobs' rows; each type's pause key, the
    pending watch a claim arms when the queue runs dry, its due jobs of
    priority 0, whether it has jobs of other priorities, and its next due
    job of priority 0 (``skipped``: the claims pass over that many keys)."""
    keys = [k for j in jobs for k in (layout.data_key(j.type, j.id), layout.work_key(j.type, j.id))]
    ranges = []
    for job_type, limit in claims:  # the same ranges as the claim's reads, so that they hit
        keys += [layout.paused_key(job_type), layout.watches_pending_key(job_type)]
        ranges.append(due_range(tr, layout, job_type, int(now), 0, limit, skipped))
        ranges.append(pending.priorities_probe(layout, job_type))
        ranges.append(later_range(layout, job_type, int(now), 0))
    tr.prefetch(keys, ranges)


@transactional
def step(
    tr: Transaction,
    layout: Layout,
    outcomes: list[Outcome],
    starts: list[tuple[Job, float]],
    claims: list[tuple[JobType, int, int]],
    now: float,
    worker: str,
    held: Optional[Callable[[], Collection[str]]] = None,
    skip: Collection[bytes] = (),
) -> tuple[list[Job], list[ClaimResult]]:
    """A worker host's step, one transaction: record ``starts`` (:func:`mark_started`),
    end ``outcomes`` (:func:`complete`) and claim for ``claims`` = ``[(type,
    limit, default_max)]`` (:func:`claim`), what they read first read at once. Returns ``(lost jobs,
    [ClaimResult per claim])``.

    A retry after a commit whose answer was lost (``tr.maybe_committed``)
    first puts back, uncounted, the jobs of the claimed types that
    ``worker`` holds claimed and not started and that are neither among
    ``held()`` (the ids the caller holds) nor this step's: the lost attempt's claims, which
    the caller never saw and nobody would run before their leases ran out.

    ``skip``: pending keys the claims pass over, those another step took
    whose commit may be in flight (:class:`fdblayer.pipelined.Pipelined`):
    this step's reads may not see it, and taking them again would only
    conflict. The caller keeps that step's other jobs out of this one."""
    jobs = [job for job, _ in starts] + [o.job for o in outcomes]
    if tr.maybe_committed and held is not None:
        known = set(held()) | {job.id for job in jobs}  # this step's outcomes are no longer held by the caller
        for job_type, _, _ in claims:
            activity.release_strays(tr, layout, job_type, worker, known)
    prefetch_step(tr, layout, jobs, [(t, limit) for t, limit, _ in claims], now, len(skip))
    lost = mark_started(tr, layout, starts) if starts else []
    lost += complete(tr, layout, outcomes, now) if outcomes else []
    results = [claim(tr, layout, t, now, limit, worker, default_max, None, skip) for t, limit, default_max in claims]
    return lost, results


def _count_start(tally: Tally, job_type: JobType, record: WorkRecord) -> None:
    """A claimed job's handler started (or its attempt ends before the start
    was recorded): one less claimed, one more start."""
    if claimed_only(record):
        tally.bump(job_type, "claimed", -1)
        tally.bump(job_type, "started")


@transactional
def mark_started(tr: Transaction, layout: Layout, starts: list[tuple[Job, float]]) -> list[Job]:
    """Record that the handlers of ``starts`` = ``[(job, epoch seconds)]``
    started; returns the jobs whose lock was lost (left alone)."""
    lost = []
    tally = Tally(tr, layout)
    for (job, when), held in zip(starts, transitions.held(tr, layout, [job for job, _ in starts]), strict=True):
        if held is None:
            lost.append(job)
            continue
        record = held.record
        if claimed_only(record):
            _count_start(tally, job.type, record)
            tr.set(layout.work_key(job.type, job.id), record._replace(started=when).pack())
    tally.write()
    return lost


@transactional
def complete(tr: Transaction, layout: Layout, outcomes: list[Outcome], now: float) -> list[Job]:
    """End many attempts (:class:`Outcome`); returns the jobs whose lock was lost.

    A lost job (removed, or re-enqueued and perhaps running elsewhere) is
    not touched: its late outcome is discarded, so no job is finished twice.
    A job resubmitted while it ran goes back to pending with a fresh record
    whatever the outcome, as couch_jobs' ``finish`` does.
    """
    kinds = [OutcomeKind(o.kind) for o in outcomes]  # ValueError for another kind, before any write
    lost = []
    stops = []
    tally = Tally(tr, layout)
    for outcome, kind, held in zip(
        outcomes, kinds, transitions.held(tr, layout, [o.job for o in outcomes]), strict=True
    ):
        if held is None:
            lost.append(outcome.job)
            continue
        job, record = held.job, held.record
        _count_start(tally, job.type, record)
        observe_run(tally, job.type, outcome.seconds)
        tally.bump(job.type, _EVENT_OF_KIND[kind])
        at, ended = _ended(record, outcome, kind, held.value, now)
        stops.append(transitions.Stop(held, at))
        tr.set(layout.work_key(job.type, job.id), ended.pack())
        if at is None:
            finished.record(tr, layout, job.type, job.id, SUCCEEDED if kind is OutcomeKind.OK else FAILED, now)
            if kind is OutcomeKind.FAIL:
                tally.bump(job.type, "failed")
                failures.record(tr, layout, job.type, job.id, now)
    transitions.stop(tr, layout, stops, tally)
    tally.write()
    return lost


def _ended(
    record: WorkRecord, outcome: Outcome, kind: OutcomeKind, current: JobValue, now: float
) -> tuple[Optional[int], WorkRecord]:
    """Where an attempt's end sends its job (pending at a time, or finished:
    None) and its new work record. A job resubmitted while it ran goes back
    to pending at its scheduled time with a fresh record, whatever the outcome."""
    if current.resubmit:
        return current.sched_time, WorkRecord(max_attempts=record.max_attempts, time_limit=record.time_limit)
    if kind is OutcomeKind.RETRY:
        return outcome.retry_at, record.end_attempt(None, record.result, outcome.error, now, outcome.started)
    if kind is OutcomeKind.SNOOZE:  # again at retry_at, this attempt not counted, no error kept
        ended = record.end_attempt(None, record.result, None, now, outcome.started)
        return outcome.retry_at, ended._replace(attempt=max(0, record.attempt - 1), error=record.error)
    if kind is OutcomeKind.OK:
        return None, record.end_attempt(SUCCEEDED, outcome.result, None, now, outcome.started)
    return None, record.end_attempt(FAILED, None, outcome.error, now, outcome.started)


#: The event counter each outcome kind bumps.
_EVENT_OF_KIND = {
    OutcomeKind.OK: "succeeded",
    OutcomeKind.RETRY: "retried",
    OutcomeKind.SNOOZE: "snoozed",
    OutcomeKind.FAIL: "failed_final",
}


@transactional
def renew(tr: Transaction, layout: Layout, jobs: list[Job]) -> list[Job]:
    """Renew the lease of many running jobs (a fresh activity stamp, data
    untouched); returns the jobs whose lock was lost."""
    found = transitions.held(tr, layout, jobs)
    helds = [h for h in found if h is not None]
    tally = Tally(tr, layout)
    transitions.refresh(tr, layout, helds, [None] * len(helds), tally)
    tally.write()
    return [job for job, h in zip(jobs, found, strict=True) if h is None]


@transactional
def release(tr: Transaction, layout: Layout, jobs: list[Job]) -> int:
    """Put held jobs back in the queue, due now, their attempt not counted
    (claimed and never started, or given back at a drain); returns how many
    were still held."""
    helds = [h for h in transitions.held(tr, layout, jobs) if h is not None]
    tally = Tally(tr, layout)
    transitions.requeue(tr, layout, helds, tally, 0.0, forgive=True)
    tally.write()
    return len(helds)


@transactional
def requeue_held_by(tr: Transaction, layout: Layout, job_type: JobType, worker: str) -> list[str]:
    """:func:`~fdblayer.jobs.activity.requeue_silent` every running job of ``job_type`` that host
    ``worker`` holds (a restarted dispatcher takes back what its
    predecessor claimed); returns their ids."""
    helds = activity.held_by(tr, layout, job_type, worker)
    tally = Tally(tr, layout)
    done = activity.requeue_silent(tr, layout, helds, tally)
    tally.write()
    return done


@transactional
def set_progress(tr: Transaction, layout: Layout, job: Job, fields: dict[str, Any], limit: int) -> dict[str, Any]:
    """Merge ``fields`` into a running job's progress; returns the whole progress.

    Raises:
        Halt: the job is gone or another lock holds it.
        EncodingError: the merged progress encodes to more than ``limit``
            bytes (nothing is written).
    """
    record = transitions.held_or_halt(tr, layout, job).record
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
def read(tr: Transaction, layout: Layout, job_type: JobType, job_id: str) -> Optional[PoolRead]:
    """``(state, data bytes, record)`` of a job (the state as :func:`pool_state`
    says), or None if it does not exist."""
    raw, raw_work = tr.get_many([layout.data_key(job_type, job_id), layout.work_key(job_type, job_id)])
    if raw is None:
        return None
    value = unpack_job_value(raw)
    record = WorkRecord.unpack(raw_work, job_id)
    return pool_state(job_state(value.lock, value.seq), record), value.data, record


@transactional
def read_many(tr: Transaction, layout: Layout, job_type: JobType, job_ids: list[str]) -> list[Optional[PoolRead]]:
    """:func:`read` of many jobs of one type, in order (the state as the
    couch_jobs row says)."""
    keys = [layout.data_key(job_type, i) for i in job_ids]
    raws = tr.get_many(keys + [layout.work_key(job_type, i) for i in job_ids])
    n = len(job_ids)
    out: list[Optional[PoolRead]] = []
    for job_id, raw, raw_work in zip(job_ids, raws[:n], raws[n:], strict=True):
        if raw is None:
            out.append(None)
            continue
        value = unpack_job_value(raw)
        out.append((job_state(value.lock, value.seq), value.data, WorkRecord.unpack(raw_work, job_id)))
    return out


def read_many_tolerant(
    tr: Transaction, layout: Layout, job_type: JobType, job_ids: list[str]
) -> list[Optional[TolerantRead]]:
    """``(state, data bytes, record, scheduled time, priority)`` of each job,
    None for one that is missing or whose row is corrupt (logged once), in
    order."""
    keys = [layout.data_key(job_type, i) for i in job_ids]
    raws = tr.snapshot.get_many(keys + [layout.work_key(job_type, i) for i in job_ids])
    n = len(job_ids)
    out: list[Optional[TolerantRead]] = []
    for job_id, key, raw, raw_work in zip(job_ids, keys, raws[:n], raws[n:], strict=True):
        value = None if raw is None else rows.job_val_or_none(key, raw)
        if value is None:
            out.append(None)
            continue
        record = WorkRecord.unpack(raw_work, job_id)
        out.append(
            (pool_state(job_state(value.lock, value.seq), record), value.data, record, value.sched_time, value.priority)
        )
    return out
