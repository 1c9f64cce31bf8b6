"""The jobs API: create, inspect, accept and process jobs (couch_jobs' non-actor part).

Principle: each call checks every argument and encodes the job data first,
then runs as one store transaction. Bad input raises a named error before a
transaction starts, so it changes nothing. The first argument is a
``Database`` (the call runs in its own transaction, retried on conflict) or a
``Transaction`` (the call joins it; the caller commits), as with
``@fdb.transactional``; ``accept`` and the type-timeout calls take a
``Database``. No actor sits on this path: any process with a database
handle can call it. ``actors.jobs`` re-exports these functions.

A worker's loop::

    job, data = accept(db, "mytype", timeout=30)
    job = update(db, job, {"progress": 50})      # keeps the job alive
    finish(db, job, {"result": 42})              # Halt if the job was taken

``accept`` blocks on the store's pending watch (woken by the next
``add``), not by polling. Differences from the seed are documented on each
function.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional, Union, cast

from fdblayer.interface import Database, Transaction, kind_of, transactional
from fdblayer.jobs import activity, model, pending
from fdblayer.jobs.codec import check_stored_size, decode_data, encode_data
from fdblayer.jobs.exceptions import (
    EncodingError,
    Halt,
    InvalidArgument,
    JobsError,
    NoTypeTimeout,
    NotFound,
)
from fdblayer.jobs.job import Job, JobInfo, JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT, JobType, Layout
from fdblayer.jobs.validate import (
    LONGEST_WAIT,
    MAX_SCHED_TIME,
    check_flag,
    check_id,
    check_job,
    check_key_size,
    check_optional_sched_time,
    check_sched_time,
    check_timeout,
    check_type,
    check_type_timeout,
)
from fdblayer.watches import Watch

__all__ = [
    "add",
    "add_many",
    "remove",
    "get_job_data",
    "get_job_state",
    "get_job",
    "get_jobs",
    "accept",
    "finish",
    "update",
    "resubmit",
    "is_resubmitted",
    "set_type_timeout",
    "clear_type_timeout",
    "get_type_timeout",
    "get_types",
    "Job",
    "JobInfo",
    "JobState",
    "JobsError",
    "NotFound",
    "Halt",
    "NoTypeTimeout",
    "EncodingError",
    "InvalidArgument",
    "MIN_ACCEPT_WAIT",
]

logger = logging.getLogger(__name__)

Tx = Union[Database, Transaction]

#: The shortest wait of ``accept`` when ``max_sched_time`` is already past
#: (the seed's ?MIN_ACCEPT_WAIT_MSEC).
MIN_ACCEPT_WAIT = 0.1


def _check_tx(tx: Any) -> Tx:
    if kind_of(tx) is None:
        raise InvalidArgument(f"expected a Database or a Transaction, not {type(tx).__name__}")
    return cast(Tx, tx)


def _check_db(db: Any, what: str) -> Database:
    if not isinstance(db, Database):
        raise InvalidArgument(f"{what} takes a Database, not {type(db).__name__}")
    return db


def _check_job_key(job_type: Any, job_id: Any, layout: Layout) -> None:
    check_type(job_type)
    check_id(job_id, job_type)
    check_key_size(layout, job_type, job_id)


def _check_handle(job: Any) -> None:
    """A job handle from accept/update, whose key also fits the store."""
    check_job(job)
    check_key_size(DEFAULT_LAYOUT, job.type, job.id)


def _encode(data: Any, job_type: Any, job_id: str) -> bytes:
    try:
        encoded = encode_data(data)
        check_stored_size(job_id, encoded)
    except JobsError as exc:
        exc.job_type, exc.job_id = job_type, job_id
        raise
    return encoded


def _encode_optional(data: Any, job: Job) -> Optional[bytes]:
    return None if data is None else _encode(data, job.type, job.id)


# ---------------------------------------------------------------- job creation


def add(tx: Tx, type: JobType, job_id: str, data: dict[str, Any], scheduled_time: int = 0) -> None:
    """Add a job as pending, or resubmit the job if it exists.

    An existing job is resubmitted: a pending one rescheduled, a finished
    one re-enqueued, a running one flagged to re-enqueue when it finishes.
    The new data replaces the stored data unless the job is running (the
    seed never replaced it; later couch_jobs versions do as here).

    Args:
        tx: A Database or a Transaction.
        type: The job type (str, int or a tuple of those); it must have a
            type timeout.
        job_id: The job id, a non-empty str.
        data: The job data, a dict of JSON-compatible values.
        scheduled_time: Seconds since the epoch; 0 (the default) means now.

    Raises:
        InvalidArgument: A bad argument, or a type and id too long for a key.
        EncodingError: ``data`` is not JSON-compatible, or too large.
        NoTypeTimeout: ``type`` has no type timeout.
    """
    _check_tx(tx)
    _check_job_key(type, job_id, DEFAULT_LAYOUT)
    check_sched_time(scheduled_time)
    encoded = _encode(data, type, job_id)
    model.add(tx, DEFAULT_LAYOUT, type, job_id, encoded, scheduled_time)


def add_many(
    tx: Tx,
    type: JobType,
    jobs: Union[Mapping[str, dict[str, Any]], Iterable[tuple[str, dict[str, Any]]]],
    scheduled_time: int = 0,
) -> int:
    """Add many jobs of one type in one transaction, each as :func:`add` would.

    Every id and data is checked and encoded before the transaction starts:
    one bad job raises and nothing is written. Much faster than calling
    :func:`add` in a loop (one type-timeout read, one multi-key read of the
    existing jobs, one wake-up of the type's waiters).

    Args:
        tx: A Database or a Transaction.
        type: The job type; it must have a type timeout.
        jobs: A dict from job id to data, or ``(job_id, data)`` pairs with
            distinct ids.
        scheduled_time: Seconds since the epoch for every job; 0 means now.

    Returns:
        How many jobs were new (the others existed and were resubmitted).

    Raises:
        InvalidArgument: A bad argument, or a job id given twice.
        EncodingError: A job's data is not JSON-compatible, or too large.
        NoTypeTimeout: ``type`` has no type timeout.
    """
    _check_tx(tx)
    check_type(type)
    check_sched_time(scheduled_time)
    pairs = _job_pairs(jobs)
    encoded = []
    seen: set[str] = set()
    for job_id, data in pairs:
        _check_job_key(type, job_id, DEFAULT_LAYOUT)
        if job_id in seen:
            raise InvalidArgument(f"job id {job_id!r} is given twice", job_type=type, job_id=job_id)
        seen.add(job_id)
        encoded.append((job_id, _encode(data, type, job_id)))
    if not encoded:
        return 0
    return model.add_many(tx, DEFAULT_LAYOUT, type, encoded, scheduled_time)


def _job_pairs(jobs: Any) -> list[tuple[Any, Any]]:
    """``(job_id, data)`` pairs of a dict or of an iterable of pairs."""
    if isinstance(jobs, Mapping):
        return list(jobs.items())
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Iterable):
        raise InvalidArgument(f"jobs must be a dict or (job_id, data) pairs, not {type(jobs).__name__}")
    pairs = []
    for item in jobs:
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidArgument(f"each job must be a (job_id, data) pair, not {item!r:.80}")
        pairs.append(item)
    return pairs


def remove(tx: Tx, type: JobType, job_id: str) -> None:
    """Remove a job in any state; its worker, if running, gets Halt.

    Args:
        tx: A Database or a Transaction.
        type: The job type.
        job_id: The job id.

    Raises:
        InvalidArgument: A bad argument.
        NotFound: The job does not exist.
    """
    _check_tx(tx)
    _check_job_key(type, job_id, DEFAULT_LAYOUT)
    model.remove(tx, DEFAULT_LAYOUT, type, job_id)


def _state_and_data(tx: Tx, job_type: JobType, job_id: str) -> model.StateAndData:
    _check_tx(tx)
    _check_job_key(job_type, job_id, DEFAULT_LAYOUT)
    found = model.get_job_state_and_data(tx, DEFAULT_LAYOUT, job_type, job_id)
    if found is None:
        raise NotFound(
            f"job {job_id!r} of type {job_type!r} not found",
            job_type=job_type,
            job_id=job_id,
        )
    return found


def get_job_data(tx: Tx, type: JobType, job_id: str) -> dict[str, Any]:
    """Read a job's data.

    Args:
        tx: A Database or a Transaction.
        type: The job type.
        job_id: The job id.

    Returns:
        The decoded job data.

    Raises:
        InvalidArgument: A bad argument.
        NotFound: The job does not exist.
    """
    return decode_data(_state_and_data(tx, type, job_id)[2])


def get_job_state(tx: Tx, type: JobType, job_id: str) -> JobState:
    """Read a job's state.

    Args:
        tx: A Database or a Transaction.
        type: The job type.
        job_id: The job id.

    Returns:
        ``JobState.PENDING``, ``RUNNING`` or ``FINISHED`` (equal to the
        strings "pending", "running", "finished").

    Raises:
        InvalidArgument: A bad argument.
        NotFound: The job does not exist.
    """
    return _state_and_data(tx, type, job_id)[1]


def get_job(tx: Tx, type: JobType, job_id: str) -> JobInfo:
    """Read a job's whole record: state, data, scheduled time, resubmit flag.

    Raises:
        InvalidArgument: A bad argument.
        NotFound: The job does not exist.
    """
    _check_tx(tx)
    _check_job_key(type, job_id, DEFAULT_LAYOUT)
    info = model.get_job(tx, DEFAULT_LAYOUT, type, job_id)
    if info is None:
        raise NotFound(f"job {job_id!r} of type {type!r} not found", job_type=type, job_id=job_id)
    return info


def get_jobs(tx: Tx, type: Optional[JobType] = None) -> list[JobInfo]:
    """Read every job of a type (or of every type), in key order.

    Args:
        tx: A Database or a Transaction.
        type: The job type, or None for all jobs of all types (the seed's
            debug ``get_jobs/0``).

    Returns:
        A list of :class:`JobInfo`, sorted by job id within a type.

    Raises:
        InvalidArgument: A bad argument.
    """
    _check_tx(tx)
    if type is not None:
        check_type(type)
        check_key_size(DEFAULT_LAYOUT, type)
    return model.get_all_jobs(tx, DEFAULT_LAYOUT, type)


# ---------------------------------------------------------------- processing


def accept(
    db: Database,
    type: JobType,
    *,
    timeout: Optional[float] = None,
    max_sched_time: Optional[int] = None,
    no_schedule: bool = False,
) -> tuple[Job, dict[str, Any]]:
    """Take a pending job, waiting for one if needed.

    The job becomes running under a new lock, held by the returned handle.
    While none qualifies, the call blocks on the type's pending watch, so
    it wakes as soon as any process adds a job.

    Args:
        db: A Database (accept commits before it waits).
        type: The job type.
        timeout: Seconds to wait at most; None waits forever, 0 not at all.
        max_sched_time: Only jobs scheduled at or before this time (seconds
            since the epoch) qualify, and the wait ends at that time (at
            least 0.1 s from now), as in the seed. None: no limit.
        no_schedule: Only jobs with scheduled time 0 qualify, picked at
            random with two key lookups instead of a range read (for many
            jobs with random ids). Waits until ``timeout``; the seed's first
            version gave up after 0.1 s.

    Returns:
        ``(job, data)``: the job handle and its decoded data.

    Raises:
        InvalidArgument: A bad argument, or ``no_schedule`` with a
            ``max_sched_time``.
        NotFound: No job came before the timeout.
        NoTypeTimeout: ``type`` has no type timeout (no job can be added,
            so none is waited for).
    """
    return accept_job(
        db,
        type,
        timeout=timeout,
        max_sched_time=max_sched_time,
        no_schedule=no_schedule,
    )


def accept_job(
    db: Database,
    job_type: JobType,
    *,
    timeout: Optional[float] = None,
    max_sched_time: Optional[int] = None,
    no_schedule: bool = False,
    layout: Layout = DEFAULT_LAYOUT,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    rng: Optional[random.Random] = None,
) -> tuple[Job, dict[str, Any]]:
    """:func:`accept` with the layout, clocks and random source injectable.

    ``clock`` gives wall time (compared with scheduled times), ``monotonic``
    measures the wait.
    """
    _check_db(db, "accept")
    check_type(job_type)
    check_key_size(layout, job_type)
    timeout = check_timeout(timeout)
    check_optional_sched_time(max_sched_time, "max_sched_time")
    check_flag(no_schedule, "no_schedule")
    if no_schedule and max_sched_time not in (None, 0):
        raise InvalidArgument(
            "no_schedule accepts only jobs scheduled at time 0; it cannot be "
            f"combined with max_sched_time={max_sched_time}",
            job_type=job_type,
        )
    deadline = None if timeout is None else monotonic() + timeout
    if max_sched_time is not None and not no_schedule:
        wait = max(MIN_ACCEPT_WAIT, max_sched_time - clock())
        if wait < LONGEST_WAIT:  # a time years away bounds no wait
            deadline = monotonic() + wait if deadline is None else min(deadline, monotonic() + wait)
    limit = 0 if no_schedule else (MAX_SCHED_TIME if max_sched_time is None else max_sched_time)
    while True:
        found, watch = _try_accept(db, layout, job_type, limit, no_schedule, rng)
        if found is not None:
            job, data = found
            return job, decode_data(data)
        assert watch is not None  # none found: _try_accept watches the pending jobs
        if not _wait(watch, deadline, monotonic):
            raise NotFound(
                f"no pending job of type {job_type!r} before the timeout",
                job_type=job_type,
            )


@transactional
def _try_accept(
    tr: Transaction,
    layout: Layout,
    job_type: JobType,
    max_sched_time: int,
    no_schedule: bool,
    rng: Optional[random.Random],
) -> tuple[Optional[tuple[Job, bytes]], Optional[Watch]]:
    found = model.accept(tr, layout, job_type, max_sched_time, no_schedule, rng)
    if found is not None:
        return found, None
    if activity.read_type_timeout(tr, layout, job_type) is None:  # nothing can ever be added: do not wait
        raise NoTypeTimeout(f"job type {job_type!r} has no type timeout; set one first", job_type=job_type)
    return None, pending.watch_pending(tr, layout, job_type)


def _wait(watch: Watch, deadline: Optional[float], monotonic: Callable[[], float]) -> bool:
    """Wait for the pending watch until the deadline; True if it fired."""
    try:
        if deadline is None:
            return watch.wait()
        remaining = deadline - monotonic()
        return remaining > 0 and watch.wait(remaining)
    finally:
        watch.cancel()


def finish(tx: Tx, job: Job, data: Optional[dict[str, Any]] = None) -> None:
    """Finish a running job: it becomes finished, or pending if resubmitted.

    Args:
        tx: A Database or a Transaction.
        job: The handle from accept or update.
        data: The final job data, or None to keep the current data.

    Raises:
        InvalidArgument: A bad argument.
        EncodingError: ``data`` is not JSON-compatible, or too large.
        Halt: The job was removed or re-enqueued since it was accepted.
    """
    _check_tx(tx)
    _check_handle(job)
    encoded = _encode_optional(data, job)
    model.finish(tx, DEFAULT_LAYOUT, job, encoded)


def update(tx: Tx, job: Job, data: Optional[dict[str, Any]] = None) -> Job:
    """Record progress on a running job, which keeps it from being re-enqueued.

    Args:
        tx: A Database or a Transaction.
        job: The handle from accept or update.
        data: The new job data, or None to keep the current data.

    Returns:
        The handle, with the current resubmit flag and scheduled time.

    Raises:
        InvalidArgument: A bad argument.
        EncodingError: ``data`` is not JSON-compatible, or too large.
        Halt: The job was removed or re-enqueued since it was accepted.
    """
    _check_tx(tx)
    _check_handle(job)
    encoded = _encode_optional(data, job)
    return model.update(tx, DEFAULT_LAYOUT, job, encoded)


def resubmit(tx: Tx, job: Job, scheduled_time: Optional[int] = None) -> Job:
    """Ask for a job to run again (the worker's side of resubmission).

    A running job is flagged, and re-enqueued when it finishes; a pending
    job is rescheduled; a finished job is re-enqueued. As in the seed, the
    lock is not checked.

    Args:
        tx: A Database or a Transaction.
        job: A job handle.
        scheduled_time: The new scheduled time, or None to keep the current.

    Returns:
        The handle with the new resubmit flag and scheduled time.

    Raises:
        InvalidArgument: A bad argument.
        NotFound: The job does not exist.
    """
    _check_tx(tx)
    _check_handle(job)
    check_optional_sched_time(scheduled_time)
    value = model.resubmit(tx, DEFAULT_LAYOUT, job.type, job.id, scheduled_time)
    return job.replace(resubmit=value.resubmit, scheduled_time=value.sched_time)


def is_resubmitted(job: Job) -> bool:
    """Tell whether a handle (from update or resubmit) says the job is resubmitted.

    Raises:
        InvalidArgument: ``job`` is not a job handle.
    """
    if not isinstance(job, Job):
        raise InvalidArgument(f"expected a Job handle, not {type(job).__name__}")
    return job.resubmit


# ---------------------------------------------------------------- type timeouts


def set_type_timeout(db: Database, type: JobType, seconds: float) -> None:
    """Declare a job type: jobs silent for ``seconds`` are re-enqueued.

    Args:
        db: A Database.
        type: The job type.
        seconds: The activity timeout, a finite number > 0.

    Raises:
        InvalidArgument: A bad argument.
    """
    _check_db(db, "set_type_timeout")
    check_type(type)
    check_key_size(DEFAULT_LAYOUT, type)
    check_type_timeout(seconds)
    activity.set_type_timeout(db, DEFAULT_LAYOUT, type, seconds)


def clear_type_timeout(db: Database, type: JobType) -> None:
    """Forget a job type's timeout; no job of that type can be added after.

    Raises:
        InvalidArgument: A bad argument.
    """
    _check_db(db, "clear_type_timeout")
    check_type(type)
    check_key_size(DEFAULT_LAYOUT, type)
    activity.clear_type_timeout(db, DEFAULT_LAYOUT, type)


def get_type_timeout(db: Database, type: JobType) -> Optional[float]:
    """Read a job type's timeout in seconds.

    Returns:
        The timeout, or None when the type has none (the seed's not_found).

    Raises:
        InvalidArgument: A bad argument.
    """
    _check_db(db, "get_type_timeout")
    check_type(type)
    check_key_size(DEFAULT_LAYOUT, type)
    return activity.get_type_timeout(db, DEFAULT_LAYOUT, type)


def get_types(tx: Tx) -> list[JobType]:
    """Read every job type that has a timeout.

    Raises:
        InvalidArgument: A bad argument.
    """
    _check_tx(tx)
    return activity.get_types(tx, DEFAULT_LAYOUT)
