"""Job transitions of the data model (the seed's couch_jobs_fdb), one transaction each.

Principle: every state change of a job is a few reads and writes inside one
store transaction, so it is atomic and serializable on every backend; the
functions here never commit, sleep, retry or talk to anything but ``tr``.
They take already validated and encoded arguments (``fdblayer.jobs.api``
checks and encodes before a transaction starts).

Each public function is ``@transactional``: given a ``Database`` it runs in
its own transaction, given a ``Transaction`` it joins it. The seed's ``JTx``
(a transaction plus the cached directory prefix) becomes the pair ``(tr,
layout)``: the layout is an immutable value, so there is no cache to
initialise or refresh and the seed's ``init_cache`` has no equivalent.

The data model and the meaning of ``seq`` are in :mod:`fdblayer.jobs.keys`;
types and activity (type timeouts, activity versionstamps, re-enqueue of
inactive jobs) are in :mod:`fdblayer.jobs.activity`.
Transitions, each one function writing the DATA row and its index rows
(PENDING, ACTIVITY, the watch keys) together; those of a running job are
:mod:`fdblayer.jobs.transitions`' batch functions called with one job (a
worker pool's dispatcher calls the same functions with its whole batch):

====================  ==========================================
transition            function
====================  ==========================================
(none) -> pending     :func:`add`
pending -> running    :func:`accept`
running -> running    :func:`update` (new versionstamp, activity)
running -> finished   :func:`finish` (or -> pending if resubmitted)
finished -> pending   :func:`resubmit`, :func:`add`
pending -> pending    :func:`resubmit` (new scheduled time)
running -> pending    :func:`activity.re_enqueue_inactive`
any -> (none)         :func:`remove`
====================  ==========================================
"""

from __future__ import annotations

import logging
import random
import weakref
from typing import Any, Callable, Iterable, Optional

import fdb.tuple

from fdblayer.interface import Transaction, transactional
from fdblayer.jobs import activity, finished, pending, rows, transitions
from fdblayer.jobs.codec import (
    PENDING_SEQ,
    JobValue,
    Seq,
    decode_data,
    report_bad_row,
)
from fdblayer.jobs.exceptions import CorruptValue, JobsError, NotFound, NoTypeTimeout
from fdblayer.jobs.job import Job, JobInfo, JobState, job_state
from fdblayer.jobs.keys import DATA, JobType, Layout
from fdblayer.jobs.tally import FRESH, Tally, bump
from fdblayer.jobs.work_record import FAILED, WorkRecord, claimed_only

__all__ = [
    "stored_priority",
    "add",
    "add_many",
    "remove",
    "remove_value",
    "get_job_state_and_data",
    "get_job_states",
    "get_jobs",
    "get_job",
    "get_all_jobs",
    "accept",
    "finish",
    "resubmit",
    "update",
    "update_held",
    "clear_all",
]

logger = logging.getLogger(__name__)

StateAndData = tuple[Seq, JobState, bytes]


# ---------------------------------------------------------------- job creation


class AddedBefore(Exception):
    """:func:`add` of a ``new_id`` found the job: an earlier attempt of this
    same add committed and its answer was lost (``CommitUnknownResult``),
    since no other add can know the id. Nothing is written: resubmitting it
    would run the job twice. ``value`` is the job's row."""

    def __init__(self, value: JobValue) -> None:
        super().__init__("the job was added by an earlier attempt of this add")
        self.value = value


@transactional
def add(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    data: bytes,
    sched_time: int,
    priority: Optional[int] = None,
    type_default: bool = False,
    new_id: bool = False,
) -> JobValue:
    """Add a job, or resubmit it if it exists (the seed's ``add/5``).

    A new job is enqueued as pending. An existing job is resubmitted with
    :func:`resubmit`: a pending one is rescheduled, a finished one
    re-enqueued, a running one flagged to be re-enqueued when it finishes.
    The new data replaces the old one unless the job is running (its worker
    owns the data then), as later versions of couch_jobs do; the seed kept
    the old data in every case.

    Args:
        tr: A database or transaction.
        layout: The key layout.
        job_type: The job type; it must have a type timeout.
        job_id: The job id.
        data: The encoded job data.
        sched_time: The scheduled time (seconds since the epoch, 0: now).
        priority: 0 (first) to 9 among due jobs (a worker pool's); None:
            0 for a new job, an existing job's own (with ``type_default``:
            the type's declared one, :func:`stored_priority`, for both).
        type_default: read the type's declared priority with the job and
            its type timeout (one round trip) when ``priority`` is None.
        new_id: ``job_id`` was made just now for this add, so no job can
            have it: its row is not read and the job is counted as one
            fresh enqueue (``counts.FRESH``: one add where three counters
            take one each), except on a retry after an unknown commit
            (``tr.maybe_committed``), which reads it: a job found is this
            add's own, :class:`AddedBefore` is raised and nothing written.
            With ``type_default`` the type's rows are taken to be what
            this process last saw, checked when the transaction commits
            (``Transaction.expect_many``: no read round trip on
            PostgreSQL; a wrong guess fails the commit and the retry reads).

    Returns:
        The job's DATA row as it will be committed.

    Raises:
        NoTypeTimeout: ``job_type`` has no type timeout.
    """
    key = layout.data_key(job_type, job_id)
    # A new id on a first attempt names no job: its row is not read, and the
    # job is counted as one fresh enqueue. A retry after an unknown commit
    # reads it: the first attempt may have added it (AddedBefore).
    fresh = new_id and not tr.maybe_committed
    if priority is None and type_default:  # one round trip for the three, or none
        timeout_key, priority_key = layout.activity_timeout_key(job_type), layout.type_priority_key(job_type)
        timeout, declared, raw = _type_and_job_rows(tr, timeout_key, priority_key, None if fresh else key, new_id)
        priority = stored_priority(declared)
    elif fresh:
        timeout, raw = tr.get(layout.activity_timeout_key(job_type)), None
    else:
        timeout, raw = tr.get_many([layout.activity_timeout_key(job_type), key])  # one round trip
    if timeout is None:
        raise NoTypeTimeout(
            f"job type {job_type!r} has no type timeout; set one first",
            job_type=job_type,
            job_id=job_id,
        )
    current = None if raw is None else rows.job_val_or_none(key, raw)
    if current is not None and new_id:
        raise AddedBefore(current)
    if current is not None:
        return _resubmit(tr, layout, job_type, job_id, key, current, sched_time, data, priority)
    if not fresh:  # a fresh job is counted by its one FRESH add
        bump(tr, layout, job_type, "jobs")
        bump(tr, layout, job_type, "added")
    counter = FRESH if fresh else "pending"
    return rows.maybe_enqueue(tr, layout, job_type, job_id, sched_time, True, data, key, None, priority or 0, counter)


#: A type's timeout and declared priority rows as this process last saw them,
#: per store handle (what :func:`add` guesses for a new id's job).
_SEEN: weakref.WeakKeyDictionary[Any, dict[bytes, Optional[bytes]]] = weakref.WeakKeyDictionary()
_SEEN_MAX = 4096


def _type_and_job_rows(
    tr: Transaction, timeout_key: bytes, priority_key: bytes, key: Optional[bytes], new_id: bool
) -> tuple[Optional[bytes], Optional[bytes], Optional[bytes]]:
    """The type's timeout row, its priority row and the job's row (None
    when ``key`` is: not read): guessed (the type's rows as last seen here,
    when the type was seen declared, and the job absent) for a new id,
    else read; the type's rows remembered for the next add."""
    seen = _SEEN.get(tr.db)
    if seen is None or len(seen) > _SEEN_MAX:
        seen = _SEEN[tr.db] = {}
    guess = seen.get(timeout_key)
    keys = [timeout_key, priority_key] + ([] if key is None else [key])
    if new_id and guess is not None and priority_key in seen:
        values = tr.expect_many(keys, [guess, seen[priority_key], None][: len(keys)])
    else:
        values = tr.get_many(keys)
    seen[timeout_key], seen[priority_key] = values[0], values[1]
    return values[0], values[1], values[2] if key is not None else None


def stored_priority(raw: Optional[bytes]) -> int:
    """A type's declared priority row (``Layout.type_priority_key``) read as
    a priority: 0 when absent; a stored value that is not one (logged) 0."""
    if raw is None:
        return 0
    try:
        (priority,) = fdb.tuple.unpack(raw)
    except Exception as exc:  # noqa: BLE001 - a bad stored value reads as the default
        report_bad_row("type_priority", raw, repr(exc)[:80])
        return 0
    return priority if isinstance(priority, int) and not isinstance(priority, bool) and 0 <= priority <= 9 else 0


@transactional
def add_many(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    jobs: list[tuple[str, bytes]],
    sched_time: int,
) -> int:
    """Add many jobs of one type, each as :func:`add` would, in one transaction.

    The type timeout is read once and the existing DATA rows with one
    ``get_many``; new jobs are enqueued with one bump of the pending counter
    per transaction (the buffered adds fold).

    Args:
        tr: A database or transaction.
        layout: The key layout.
        job_type: The job type; it must have a type timeout.
        jobs: ``(job_id, encoded data)`` pairs with distinct ids.
        sched_time: The scheduled time of every job (0: now).

    Returns:
        How many of the jobs were new (the others were resubmitted).

    Raises:
        NoTypeTimeout: ``job_type`` has no type timeout.
    """
    if activity.read_type_timeout(tr, layout, job_type) is None:
        raise NoTypeTimeout(f"job type {job_type!r} has no type timeout; set one first", job_type=job_type)
    keys = [layout.data_key(job_type, job_id) for job_id, _ in jobs]
    created = []
    for (job_id, data), key, raw in zip(jobs, keys, tr.get_many(keys), strict=True):
        current = None if raw is None else rows.job_val_or_none(key, raw)
        if current is None:  # new, or a corrupt row that this write replaces
            rows.set_job_val(tr, key, JobValue(PENDING_SEQ, None, sched_time, False, data))
            created.append(job_id)
        else:
            _resubmit(tr, layout, job_type, job_id, key, current, sched_time, data)
    pending.enqueue_many(tr, layout, job_type, sched_time, created)
    bump(tr, layout, job_type, "jobs", len(created))
    bump(tr, layout, job_type, "added", len(created))
    return len(created)


@transactional
def remove(tr: Transaction, layout: Layout, job_type: JobType, job_id: str) -> None:
    """Remove a job in any state.

    A running job's worker gets ``Halt`` at its next update or finish. The
    job's activity row is cleared and the activity watch stamped, so that
    subscribers see the job go (the seed left the activity row behind).

    Raises:
        NotFound: The job does not exist.
    """
    key = layout.data_key(job_type, job_id)
    current = rows.get_job_val(tr, key)
    if current is None:
        raise NotFound(_missing(job_type, job_id), job_type=job_type, job_id=job_id)
    record = WorkRecord.unpack(tr.get(layout.work_key(job_type, job_id)), job_id)
    remove_value(tr, layout, job_type, job_id, key, current, record)


def remove_value(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    key: bytes,
    current: JobValue,
    record: WorkRecord,
    tally: Optional[Tally] = None,
) -> None:
    """:func:`remove` of a job whose DATA row (``current``, at ``key``) and
    work record (``record``; a fresh one if it has none) ``tr`` has read;
    counters and the watch bumped at once, or by ``tally`` (a batch)."""
    tally = tally or Tally(tr, layout, deferred=False)
    state = job_state(current.lock, current.seq)
    if state is JobState.PENDING:
        pending.remove(tr, layout, job_type, job_id, current.sched_time, current.priority)
    rows.clear_activity(tr, layout, job_type, current.seq, tally)
    tr.clear(key)
    tally.bump(job_type, "jobs", -1)
    if state is JobState.FINISHED:
        finished.forget_record(tr, layout, job_type, job_id, record)  # its retention key goes with it
        if record.outcome == FAILED:
            tally.bump(job_type, "failed", -1)
    elif state is JobState.RUNNING and claimed_only(record):
        tally.bump(job_type, "claimed", -1)
    tr.clear(layout.work_key(job_type, job_id))  # the worker pools' record goes with the job
    tally.stamp(job_type)


@transactional
def get_job_state_and_data(tr: Transaction, layout: Layout, job_type: JobType, job_id: str) -> Optional[StateAndData]:
    """Read a job's ``(seq, state, encoded data)``, or None if it does not exist."""
    current = rows.get_job_val(tr, layout.data_key(job_type, job_id))
    if current is None:
        return None
    return current.seq, job_state(current.lock, current.seq), current.data


@transactional
def get_job_states(
    tr: Transaction, layout: Layout, job_type: JobType, job_ids: Iterable[str]
) -> dict[str, Optional[StateAndData]]:
    """Read ``(seq, state, encoded data)`` of many jobs with one ``get_many``.

    Returns:
        A dict from each id to its triple, or to None when it does not exist.
    """
    job_ids = list(job_ids)
    raws = tr.get_many([layout.data_key(job_type, job_id) for job_id in job_ids])
    states: dict[str, Optional[StateAndData]] = {}
    for job_id, raw in zip(job_ids, raws, strict=True):
        value = None if raw is None else rows.job_val_or_none(layout.data_key(job_type, job_id), raw)
        if value is None:
            states[job_id] = None
        else:
            states[job_id] = value.seq, job_state(value.lock, value.seq), value.data
    return states


@transactional
def get_jobs(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    id_filter: Optional[Callable[[str], bool]] = None,
) -> dict[str, StateAndData]:
    """Read every job of a type with one range read (the seed's ``get_jobs/3``).

    Args:
        tr: A database or transaction.
        layout: The key layout.
        job_type: The job type.
        id_filter: Keep only the ids for which this returns True.

    Returns:
        A dict from job id to ``(seq, state, encoded data)``, in id order.
    """
    prefix = layout.data_prefix(job_type)
    result: dict[str, StateAndData] = {}
    for key, raw in tr.get_range_startswith(prefix):
        job_id = job_id_from_key(key, prefix)
        if job_id is None or (id_filter is not None and not id_filter(job_id)):
            continue
        value = rows.job_val_or_none(key, raw)
        if value is not None:
            result[job_id] = (value.seq, job_state(value.lock, value.seq), value.data)
    return result


def job_id_from_key(key: bytes, prefix: bytes) -> Optional[str]:
    """The job id of a DATA key, or None (logged once) when the key does not decode."""
    try:
        (job_id,) = fdb.tuple.unpack(key, len(prefix))
    except Exception as exc:  # noqa: BLE001 - a corrupt key is skipped
        report_bad_row("job_key", key, repr(exc)[:80])
        return None
    if not isinstance(job_id, str):
        report_bad_row("job_key", key, "job id is not a string")
        return None
    return job_id


@transactional
def get_job(tr: Transaction, layout: Layout, job_type: JobType, job_id: str) -> Optional[JobInfo]:
    """Read one job's whole record (the seed's debug ``get_job/2``)."""
    current = rows.get_job_val(tr, layout.data_key(job_type, job_id))
    if current is None:
        return None
    return _job_info(job_type, job_id, current)


@transactional
def get_all_jobs(tr: Transaction, layout: Layout, job_type: Optional[JobType] = None) -> list[JobInfo]:
    """Read the records of every job of a type, or of every type (the
    seed's ``get_jobs/0``), in key order."""
    prefix = layout.subspace(DATA) if job_type is None else layout.data_prefix(job_type)
    infos = []
    for key, raw in tr.get_range_startswith(prefix):
        try:
            job_type, job_id = layout.unpack_data_key(key)
        except Exception as exc:  # noqa: BLE001 - a corrupt key is skipped
            report_bad_row("job_key", key, repr(exc)[:80])
            continue
        value = rows.job_val_or_none(key, raw)
        if value is not None:
            infos.append(_job_info(job_type, job_id, value))
    return infos


# ---------------------------------------------------------------- processing


@transactional
def accept(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    max_sched_time: int,
    no_schedule: bool,
    rng: Optional[random.Random] = None,
) -> Optional[tuple[Job, bytes]]:
    """Take one pending job and mark it running under a new lock.

    Args:
        tr: A database or transaction.
        layout: The key layout.
        job_type: The job type.
        max_sched_time: Only jobs scheduled at or before this time qualify.
        no_schedule: Pick among jobs with scheduled time 0, at random.
        rng: The random source of the pick (tests pass a seeded one).

    Returns:
        ``(job, encoded data)``, or None when no job qualifies (the caller
        then waits on :func:`pending.watch_pending` from the same
        transaction).

    Raises:
        JobsError: The pending queue names a job that is missing or running
            (the store is inconsistent; this is logged as critical).
    """
    job_id = pending.dequeue(tr, layout, job_type, max_sched_time, no_schedule, rng)
    if job_id is None:
        return None
    key = layout.data_key(job_type, job_id)
    current = rows.get_job_val(tr, key)
    if current is None or current.lock is not None:
        state = "missing" if current is None else "running"
        message = f"pending job {job_id!r} of type {job_type!r} is {state}"
        logger.critical("job_not_pending job=%r type=%r state=%s", job_id, job_type, state)
        raise JobsError(message, job_type=job_type, job_id=job_id)
    tally = Tally(tr, layout)
    (job,) = transitions.start(tr, layout, job_type, [transitions.Pick(job_id, key, current)], tally)
    tally.bump(job_type, "started")
    tally.write()
    return job, current.data


@transactional
def finish(tr: Transaction, layout: Layout, job: Job, data: Optional[bytes]) -> JobValue:
    """Finish a running job, or re-enqueue it if it was resubmitted.

    Args:
        tr: A database or transaction.
        layout: The key layout.
        job: The handle from accept or update.
        data: New encoded data, or None to keep the current data.

    Returns:
        The job's new DATA row.

    Raises:
        Halt: The job is gone or another lock holds it.
    """
    held = transitions.held_or_halt(tr, layout, job)
    tally = Tally(tr, layout)
    at = held.value.sched_time if held.value.resubmit else None
    (value,) = transitions.stop(tr, layout, [transitions.Stop(held, at, data)], tally)
    tally.write()
    return value


@transactional
def resubmit(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    sched_time: Optional[int],
    data: Optional[bytes] = None,
) -> JobValue:
    """Run a job (again) at ``sched_time``, whatever its state.

    * finished: re-enqueued as pending;
    * pending: rescheduled (moved in the pending queue if the time changed);
    * running: flagged, so that :func:`finish` re-enqueues it.

    Args:
        tr: A database or transaction.
        layout: The key layout.
        job_type: The job type.
        job_id: The job id.
        sched_time: The new scheduled time, or None to keep the current one.
        data: New encoded data for a pending or finished job, or None to
            keep it (a running job's data is never replaced).

    Returns:
        The job's new DATA row.

    Raises:
        NotFound: The job does not exist.
    """
    key = layout.data_key(job_type, job_id)
    current = rows.get_job_val(tr, key)
    if current is None:
        raise NotFound(_missing(job_type, job_id), job_type=job_type, job_id=job_id)
    return _resubmit(tr, layout, job_type, job_id, key, current, sched_time, data)


@transactional
def update(tr: Transaction, layout: Layout, job: Job, data: Optional[bytes]) -> Job:
    """Record a running job's progress: new data and a fresh activity stamp.

    Args:
        tr: A database or transaction.
        layout: The key layout.
        job: The handle from accept or update.
        data: New encoded data, or None to keep the current data.

    Returns:
        The handle with the job's current ``resubmit`` flag and scheduled time.

    Raises:
        Halt: The job is gone or another lock holds it.
    """
    return update_held(tr, layout, transitions.held_or_halt(tr, layout, job), data)


def update_held(tr: Transaction, layout: Layout, held: transitions.Held, data: Optional[bytes]) -> Job:
    """:func:`update` of a job the caller already read as held in ``tr``
    (:func:`transitions.held`), without reading it again."""
    tally = Tally(tr, layout)
    (value,) = transitions.refresh(tr, layout, [held], [data], tally)
    tally.write()
    return held.job.replace(resubmit=value.resubmit, scheduled_time=value.sched_time)


@transactional
def clear_all(tr: Transaction, layout: Layout) -> None:
    """Remove every key of the layer (tests and tools)."""
    tr.clear_range_startswith(layout.prefix)


# ---------------------------------------------------------------- helpers


def _missing(job_type: JobType, job_id: str) -> str:
    return f"job {job_id!r} of type {job_type!r} not found"


def _failed(raw_work: Optional[bytes]) -> bool:
    """True when a work record says the job failed for good."""
    return raw_work is not None and WorkRecord.unpack(raw_work).outcome == FAILED


def _job_info(job_type: JobType, job_id: str, value: JobValue) -> JobInfo:
    """A job's record; data that does not decode reads as None (logged once)."""
    try:
        data = decode_data(value.data)
    except CorruptValue as exc:
        report_bad_row("job_data", f"{job_type!r}/{job_id!r}".encode(), exc.message)
        data = None
    return JobInfo(
        type=job_type,
        id=job_id,
        state=job_state(value.lock, value.seq),
        data=data,
        scheduled_time=value.sched_time,
        resubmit=value.resubmit,
        seq=value.seq,
        lock=value.lock,
    )


def _resubmit(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    job_id: str,
    key: bytes,
    current: JobValue,
    sched_time: Optional[int],
    data: Optional[bytes],
    priority: Optional[int] = None,
) -> JobValue:
    new_time = current.sched_time if sched_time is None else sched_time
    new_data = current.data if data is None else data
    new_priority = current.priority if priority is None else priority
    state = job_state(current.lock, current.seq)
    if state is JobState.FINISHED:
        bump(tr, layout, job_type, "added")  # a finished job added again
        work_key = layout.work_key(job_type, job_id)
        finished.forget(tr, layout, job_type, job_id, tr.get(work_key))  # no longer finished: not pruned
        if _failed(tr.get(work_key)):  # no longer a failed (finished) job: its record says so too
            bump(tr, layout, job_type, "failed", -1)
            tr.set(work_key, WorkRecord.unpack(tr.get(work_key))._replace(outcome=None).pack())
        return rows.maybe_enqueue(tr, layout, job_type, job_id, new_time, True, new_data, key, priority=new_priority)
    if state is JobState.PENDING:
        value = JobValue(PENDING_SEQ, None, new_time, False, new_data, new_priority)
        if new_time != current.sched_time or new_priority != current.priority:
            pending.remove(tr, layout, job_type, job_id, current.sched_time, current.priority)
            pending.enqueue(tr, layout, job_type, new_time, job_id, priority=new_priority)
        if value != current:
            rows.set_job_val(tr, key, value)
        return value
    value = JobValue(current.seq, current.lock, new_time, True, current.data, new_priority)
    rows.set_job_val(tr, key, value)
    return value
