"""Producing jobs for worker pools and reading their results, from any process.

Every call is store transactions only: no node or worker host needs to be
reachable, as with the rest of :mod:`actors.jobs`::

    job_id = enqueue(db, "emails", {"to": "ann@example.com"})
    value = result(db, "emails", job_id, timeout=30)     # blocks on a store watch

``enqueue`` follows the queue's rules for an id that exists (a pending job
is rescheduled, a finished one runs again with a fresh attempt count, a
running one runs again once its attempt ends; each with this enqueue's
data, options and priority), and works before any worker
host ever ran: a type with no activity timeout yet is declared with
``[worker] type_timeout``'s default (30 s) in the enqueue's own transaction.
(The couch_jobs-level ``add`` keeps the seed's rule: ``NoTypeTimeout``.) Scheduled times are whole
seconds, as couch_jobs' are: ``delay`` and ``at`` are rounded up, so a job
never starts early.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Optional

from fdblayer.interface import Database, Transaction, transactional
from fdblayer.jobs.api import _check_tx, _encode  # one encoder, one tx check for the whole API
from fdblayer.jobs import activity, type_controls, work
from fdblayer.jobs import schedules as periodic
from fdblayer.jobs.codec import decode_data
from fdblayer.jobs.ids import new_job_id
from fdblayer.jobs.exceptions import InvalidArgument, JobFailed, NoTypeTimeout, NotFound
from fdblayer.jobs.job import JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT, MAX_PRIORITY
from fdblayer.jobs.work_record import FAILED, SUCCEEDED
from fdblayer.jobs.codec import INT_MAX
from fdblayer.jobs.validate import check_id, check_key_size, check_timeout, check_type

from actors.settings.schema import known
from actors.workers.context import decode_result
from actors.workers.control import MAX_DELAY
from actors.workers.schedule import check_cron, next_tick

__all__ = [
    "JobFailed",
    "JobStatus",
    "enqueue",
    "pause",
    "resume",
    "prune",
    "result",
    "status",
    "schedule",
    "unschedule",
    "schedules",
    "MAX_ATTEMPTS",
    "DEFAULT_TYPE_TIMEOUT",
    "declare_type",
]

#: The most attempts a job may be given.
MAX_ATTEMPTS = 1000

#: The activity timeout (seconds) an enqueue gives a type that has none: the
#: default of ``[worker] type_timeout``, as a worker host gives the types it serves.
DEFAULT_TYPE_TIMEOUT = float(known("worker", "type_timeout").default)


def _check_db(db: Any, what: str) -> Database:
    if not isinstance(db, Database):
        raise InvalidArgument(f"{what} takes a Database, not {type(db).__name__}")
    return db


def _seconds(value: Any, name: str) -> float:
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
    except OverflowError:  # an int beyond any float
        ok = False
    if not ok:
        raise InvalidArgument(f"{name} must be a finite number of seconds >= 0, not {value!r:.80}")
    return float(value)


def _sched_time(delay: Any, at: Any, now: float) -> int:
    if delay is not None and at is not None:
        raise InvalidArgument("give delay or at, not both")
    if delay is not None:
        due = now + _seconds(delay, "delay")
    elif at is not None:
        due = _seconds(at, "at")
    else:
        return 0
    if due > INT_MAX:
        raise InvalidArgument(f"the job would be due at {due:.0f}, beyond any date the store holds")
    return 0 if due <= now else math.ceil(due)


def check_priority(value: Any) -> Optional[int]:
    """None, or an int from 0 to :data:`~fdblayer.jobs.keys.MAX_PRIORITY`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRIORITY:
        raise InvalidArgument(f"priority must be an int from 0 (first) to {MAX_PRIORITY}, not {value!r:.80}")
    return value


def check_time_limit(value: Any) -> Optional[float]:
    """None, or seconds more than 0 and at most a year."""
    if value is None:
        return None
    seconds = _seconds(value, "timeout")
    if not 0 < seconds <= MAX_DELAY:
        raise InvalidArgument(f"timeout must be more than 0 and at most {MAX_DELAY:.0f} seconds, not {value!r:.80}")
    return seconds


def check_max_attempts(value: Any) -> Optional[int]:
    """None, or an int from 1 to :data:`MAX_ATTEMPTS`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise InvalidArgument(f"max_attempts must be an int from 1 to {MAX_ATTEMPTS}, not {value!r:.80}")
    return value


def enqueue(
    db: Any,
    type: Any,
    data: Optional[dict] = None,
    *,
    id: Optional[str] = None,
    delay: Optional[float] = None,
    at: Optional[float] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[float] = None,
    priority: Optional[int] = None,
) -> str:
    """Add a job for a worker pool; returns its id.

    Args:
        db: a Database, or a Transaction to join.
        type: the job type; one with no activity timeout yet gets
            :data:`DEFAULT_TYPE_TIMEOUT` in the same transaction (a worker
            host serving it, or ``set_type_timeout``, may set another).
        data: the handler's ``ctx.data``, a dict of JSON values (None: ``{}``).
        id: the job id; None makes a fresh one (32 hex digits, a UUID 7:
            ids made in a later millisecond sort after, see
            :mod:`fdblayer.jobs.ids`).
        delay: seconds from now before the job is due.
        at: the time (seconds since the epoch) the job is due.
        max_attempts: attempts before the job fails for good; None: the
            handler's declared default, else the host's (3 unless
            ``--max-attempts``).
        priority: 0 (first) to 9: among due jobs of the type a lower number
            starts first, equal ones in due order (a hand-written worker's
            ``accept`` sees only priority 0); None: the handler's declared
            ``priority``, else 0.
        timeout: seconds a run of this job may take (then its handler sees
            ``ctx.stopping``, and past the host's grace it is stopped: the
            attempt fails as ``JobTimeout``); None: the handler's declared
            ``timeout``, else the host's ``--job-timeout`` (none by default).

    Raises:
        InvalidArgument: a bad argument (nothing is written).
        EncodingError: ``data`` is not JSON-compatible or too large.
        NoTypeTimeout: the stored timeout of ``type`` is unreadable (corrupt).
    """
    _check_tx(db)
    check_type(type)
    job_id = new_job_id() if id is None else check_id(id, type)
    check_key_size(DEFAULT_LAYOUT, type, job_id)
    sched_time = _sched_time(delay, at, time.time())
    max_attempts = check_max_attempts(max_attempts)
    time_limit = check_time_limit(timeout)
    priority = check_priority(priority)
    encoded = _encode({} if data is None else data, type, job_id)
    _declare_and_enqueue(db, type, job_id, encoded, sched_time, max_attempts, time_limit, priority, id is None)
    return job_id


@transactional
def _declare_and_enqueue(
    tr: Transaction,
    job_type: Any,
    job_id: str,
    encoded: bytes,
    sched_time: int,
    max_attempts: Optional[int],
    time_limit: Optional[float] = None,
    priority: Optional[int] = None,
    new_id: bool = False,
) -> None:
    args = (tr, DEFAULT_LAYOUT, job_type, job_id, encoded, sched_time, max_attempts, time_limit, priority, new_id)
    try:  # the add reads the type's timeout anyway: declare only when it says there is none
        work.enqueue(*args)
    except NoTypeTimeout:  # raised before anything is written
        declare_type(tr, job_type)
        work.enqueue(*args)


def declare_type(tr: Transaction, job_type: Any, timeout: float = DEFAULT_TYPE_TIMEOUT) -> bool:
    """Give ``job_type`` an activity timeout in ``tr`` unless it has one
    (a stored one, even unreadable, is left as it is); True if it did.

    Two producers declaring the same new type at once both write the same
    value; one racing ``set_type_timeout`` conflicts with this read, so the
    type never silently loses a timeout someone set.
    """
    key = DEFAULT_LAYOUT.activity_timeout_key(job_type)
    if tr.snapshot.get(key) is not None:
        return False
    tr.add_read_conflict_key(key)
    activity.set_type_timeout(tr, DEFAULT_LAYOUT, job_type, timeout)
    return True


@dataclass(frozen=True)
class JobStatus:
    """A job as a worker pool sees it.

    ``state`` is the queue's (pending, running, finished), or ``claimed``
    for a job a worker host holds whose handler has not started (then
    ``worker`` is the host and ``started`` None; ``started`` is when the
    handler started); ``outcome`` is
    ``"succeeded"`` or ``"failed"`` once finished by a pool (None before, and
    for jobs finished by a hand-written worker); ``error`` the last
    attempt's error (``{"type", "message", "traceback"}``); ``errors`` the
    error of each failed attempt, oldest first (``{"attempt", "at", "type",
    "message", "traceback"}``; the newest 10 kept, tracebacks cut to their
    last 2,000 characters).
    """

    type: Any
    id: str
    state: JobState
    data: dict
    attempt: int
    max_attempts: Optional[int]
    outcome: Optional[str]
    result: Any
    error: Optional[dict]
    progress: dict
    worker: Optional[str]
    started: Optional[float]
    ended: Optional[float]
    errors: tuple = ()


def _status_of(job_type: Any, job_id: str, found: Optional[tuple]) -> JobStatus:
    if found is None:
        raise NotFound(f"job {job_id!r} of type {job_type!r} not found", job_type=job_type, job_id=job_id)
    state, data, rec = found
    return JobStatus(
        job_type,
        job_id,
        state,
        decode_data(data),
        rec.attempt,
        rec.max_attempts,
        rec.outcome,
        decode_result(rec.result),
        rec.error,
        rec.progress,
        rec.worker,
        rec.started,
        rec.ended,
        rec.errors,
    )


def _not_found(db: Any, job_type: Any, job_id: str) -> Any:
    """Raise NotFound for a missing job, saying it may have been pruned when
    the type's jobs were (one key read, on this path only)."""
    from fdblayer.jobs import finished

    pruned = transactional(finished.pruned_before)(db, DEFAULT_LAYOUT, job_type)
    hint = (
        ""
        if pruned is None
        else (
            f" (it may have been pruned: finished jobs of this type are removed after their retention, "
            f"the latest removed had ended at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(pruned))})"
        )
    )
    raise NotFound(f"job {job_id!r} of type {job_type!r} not found{hint}", job_type=job_type, job_id=job_id)


def prune(db: Any, type: Any = None, older_than: Optional[float] = None) -> int:
    """Remove finished pool jobs past their retention now; returns how many.

    Only jobs a worker pool finished (succeeded, or failed for good) go;
    a pending or running job never does. Batches of at most 500 jobs, each
    its own transaction (so this takes a Database), every counter kept
    exact. Hosts do the same by themselves (``[worker] keep_finished`` and
    ``keep_failed``); this is for a store no host serves, or to free space
    at once.

    Args:
        db: a Database.
        type: the job type; None: every type.
        older_than: seconds since a job ended (succeeded or failed) for it to
            go (0: every finished pool job); None: the defaults of ``[worker]
            keep_finished`` and ``keep_failed`` (a day and a week).

    Raises:
        InvalidArgument: a bad argument (nothing is removed).
    """
    if older_than is None:
        keep = {
            SUCCEEDED: float(known("worker", "keep_finished").default),
            FAILED: float(known("worker", "keep_failed").default),
        }
    else:
        older_than = _seconds(older_than, "older_than")
        keep = {SUCCEEDED: older_than, FAILED: older_than}
    return prune_kept(db, type, keep)


def prune_kept(db: Any, type: Any, keep: dict) -> int:
    """:func:`prune` of one type (None: every type) with ``keep``: seconds a
    job is kept once ended, by outcome (``"succeeded"``, ``"failed"``;
    None: for ever), as a host prunes."""
    from fdblayer.jobs import retention

    _check_db(db, "prune")
    if type is not None:
        check_type(type)
        check_key_size(DEFAULT_LAYOUT, type)
    if all(seconds is None for seconds in keep.values()):
        return 0
    now = time.time()
    types = activity.get_types(db, DEFAULT_LAYOUT) if type is None else [type]
    return sum(retention.prune_type(db, DEFAULT_LAYOUT, job_type, keep, now)[0] for job_type in types)


def pause(db: Any, type: Any) -> bool:
    """Pause a type: no host starts its jobs (those running finish; jobs a
    host claimed and had not started go back to the queue; enqueues and
    periodic ticks go on); returns True if it was paused already.

    Raises:
        NotFound: no such type (it has no activity timeout).
        InvalidArgument: a bad argument.
    """
    return _set_paused(db, type, True)


def resume(db: Any, type: Any) -> bool:
    """Resume a paused type (hosts waiting on it look again at once);
    returns True if it was paused.

    Raises:
        NotFound: no such type.
        InvalidArgument: a bad argument.
    """
    return _set_paused(db, type, False)


def _set_paused(db: Any, job_type: Any, paused: bool) -> bool:
    _check_tx(db)
    check_type(job_type)
    try:
        return type_controls.set_paused(db, DEFAULT_LAYOUT, job_type, paused)
    except NoTypeTimeout:
        raise NotFound(f"no job type {job_type!r} (it has no activity timeout)", job_type=job_type) from None


def status(db: Any, type: Any, id: str) -> JobStatus:
    """Read a job with its work record (attempts, progress, outcome, error).

    Raises:
        NotFound: no such job.
        InvalidArgument: a bad argument.
    """
    _check_tx(db)
    check_type(type)
    check_id(id, type)
    check_key_size(DEFAULT_LAYOUT, type, id)
    found = work.read(db, DEFAULT_LAYOUT, type, id)
    return _status_of(type, id, found) if found is not None else _not_found(db, type, id)


@transactional
def _read_or_watch(tr: Transaction, job_type: Any, job_id: str) -> tuple:
    found = work.read(tr, DEFAULT_LAYOUT, job_type, job_id)
    if found is None or found[0] is JobState.FINISHED:
        return found, None
    return found, tr.watch(DEFAULT_LAYOUT.data_key(job_type, job_id))


def result(db: Any, type: Any, id: str, timeout: Optional[float] = None) -> Any:
    """Wait until the job is finished and return its handler's return value.

    Blocks on a store watch of the job (no node, no polling). A job finished
    by a hand-written worker (``finish``) returns its final data.

    Raises:
        JobFailed: the job failed for good (``error_type``, ``error_message``,
            ``traceback``, ``attempts``).
        TimeoutError: ``timeout`` seconds passed first.
        NotFound: no such job (or it was removed while waited on); the
            message says when it may have been pruned (its type's jobs were).
        InvalidArgument: a bad argument.
    """
    _check_db(db, "result")
    check_type(type)
    check_id(id, type)
    check_key_size(DEFAULT_LAYOUT, type, id)
    timeout = check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        found, watch = _read_or_watch(db, type, id)
        st = _status_of(type, id, found) if found is not None else _not_found(db, type, id)
        if watch is None:
            return _finished_value(st)
        try:
            left = None if deadline is None else deadline - time.monotonic()
            if (left is not None and left <= 0) or not _waited(watch, left, deadline):
                raise TimeoutError(f"job {id!r} of type {type!r} is still {st.state.value} after {timeout}s")
        finally:
            watch.cancel()


def _waited(watch: Any, left: Optional[float], deadline: Optional[float]) -> bool:
    """Wait on ``watch`` (at most ``left`` s; None: for as long as it takes).
    False only when the deadline passed; a watch the store cancelled (its
    watch thread stopped) counts as a change: the caller reads again."""
    watch.wait(left)
    return deadline is None or watch.fired() or time.monotonic() < deadline


def _finished_value(st: JobStatus) -> Any:
    if st.outcome == FAILED:
        err = st.error or {}
        raise JobFailed(
            f"job {st.id!r} of type {st.type!r} failed after {st.attempt} attempt(s): "
            f"{err.get('type', 'Error')}: {err.get('message', '')}",
            job_type=st.type,
            job_id=st.id,
            error_type=err.get("type", ""),
            error_message=err.get("message", ""),
            traceback=err.get("traceback", ""),
            attempts=st.attempt,
        )
    if st.outcome == SUCCEEDED:
        return st.result
    return st.data


def schedule(db: Any, type: Any, cron: str, data: Optional[dict] = None) -> None:
    """Give a job type a periodic schedule: one job per tick, with ``data``,
    enqueued exactly once by whichever worker host serving the type fires
    first; ticks missed while no host ran are not replayed (only the latest).
    A type no one declared yet gets :data:`DEFAULT_TYPE_TIMEOUT`, in the same
    transaction, as :func:`enqueue` gives it.

    Raises:
        InvalidArgument: not a cron expression (see :mod:`actors.workers.schedule`), or a bad argument.
        EncodingError: ``data`` is not JSON-compatible.
    """
    _check_db(db, "schedule")
    check_type(type)
    check_key_size(DEFAULT_LAYOUT, type, "tick-00000000000")
    cron = check_cron(cron)
    encoded = _encode({} if data is None else data, type, "tick")
    _declare_and_schedule(db, type, cron, encoded, int(time.time()))


@transactional
def _declare_and_schedule(tr: Transaction, job_type: Any, cron: str, encoded: bytes, now: int) -> None:
    declare_type(tr, job_type)
    periodic.set_schedule(tr, DEFAULT_LAYOUT, job_type, cron, encoded, now)


def unschedule(db: Any, type: Any) -> bool:
    """Remove a job type's periodic schedule (its jobs stay); True if it had one."""
    _check_db(db, "unschedule")
    check_type(type)
    check_key_size(DEFAULT_LAYOUT, type)
    return _unschedule(db, type)


@transactional
def _unschedule(tr: Transaction, job_type: Any) -> bool:
    if tr.get(DEFAULT_LAYOUT.schedule_key(job_type)) is None:
        return False
    periodic.clear_schedule(tr, DEFAULT_LAYOUT, job_type)
    return True


def schedules(db: Any, now: Optional[float] = None) -> list:
    """The periodic schedules kept in the store (they outlive the hosts and
    calls that set them, until :func:`unschedule`), in type order: dicts of
    ``type``, ``cron``, ``data`` (None if unreadable), ``last_tick`` (the last
    tick enqueued, or the time the schedule was set) and ``next_tick``
    (seconds since the epoch; None for a cron expression that no longer reads)."""
    _check_db(db, "schedules")
    now = time.time() if now is None else now
    out = []
    for job_type, sched in periodic.get_schedules(db, DEFAULT_LAYOUT).items():
        try:
            data = decode_data(sched.data)
        except Exception:  # noqa: BLE001 - a damaged stored value is shown as unreadable, never fatal
            data = None
        out.append(
            {
                "type": job_type,
                "cron": sched.cron,
                "data": data,
                "last_tick": sched.last,
                "next_tick": next_tick(sched.cron, now),
            }
        )
    return out
