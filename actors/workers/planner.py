"""What a worker host's dispatcher does next, decided on plain data: the step planner.

Principle: every decision of the dispatcher's loop that needs no store and
no message is a pure function here. It is given the workers' loads
(:class:`WorkerLoad`), the kinds of the buffered jobs, the host's limits
(:class:`Limits`) and the clock as ``now``, always a parameter: the
dispatcher's monotonic clock for how long runs have been seen, wall time
(epoch seconds) for time limits and retry times. It answers with plain
values. The dispatcher (:mod:`actors.workers.dispatcher`) gathers the data,
asks, and performs the answer (store transactions, messages, timers).
Nothing here reads a clock, the store or an actor, and the module imports
only the standard library, so table tests drive it with made-up times.

Decided here:

- how many jobs to claim for the sync and the async types (:func:`wants`),
  which types ask in this step (:func:`claims`), and whether another step
  should follow (:func:`step_again`);
- which buffered jobs go to which worker (:func:`hand_out`);
- which worker's handler runs long (:func:`is_stuck`), and what the run
  watch does (:func:`watch`): give queued runs back, write starts now;
- which starts are written in a step (:func:`starts_due`);
- what a run past its time limit gets (:func:`limit_action`);
- how a finished attempt ends (:func:`attempt_end`) and how long a retry
  waits (:func:`retry_delay`);
- how many jobs a worker holds (:func:`prefetch_for`, :func:`run_mean`);
- how often leases are renewed (:func:`renew_interval`, :func:`renew_delay`).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

__all__ = [
    "WorkerLoad",
    "Limits",
    "HandOut",
    "WatchPlan",
    "LimitAction",
    "End",
    "AttemptEnd",
    "wants",
    "claims",
    "step_again",
    "refill_below",
    "is_stuck",
    "hand_out",
    "watch",
    "starts_due",
    "limit_action",
    "attempt_end",
    "retry_delay",
    "prefetch_for",
    "to_trim",
    "run_mean",
    "renew_interval",
    "renew_delay",
    "STUCK_AFTER",
    "MARK_AFTER",
    "MAX_PREFETCH",
    "PREFETCH_SECONDS",
    "LONG_RUN",
    "STEP_RETRY",
    "CANCEL_WAIT",
    "MAX_RENEW_INTERVAL",
    "MIN_RENEW_INTERVAL",
]

#: A sync run seen longer than this (seconds), or than twice the mean run,
#: holds no queued job: they are taken back for free workers.
STUCK_AFTER = 0.02
#: A start seen longer ago than this (seconds) is written to the store (the job
#: shows as running, and its attempt counts if its host dies); a briefer run's
#: start is written with its end.
MARK_AFTER = 0.005

#: Jobs a worker holds at most: one running, the rest next in its own queue, so that
#: a job's end and the next start need no message. How many it holds follows the
#: handlers' measured run time: enough for about PREFETCH_SECONDS of work, so quick
#: jobs go in batches and a long job never holds others back (then it is 1).
MAX_PREFETCH = 128
PREFETCH_SECONDS = 0.1
#: Handlers that run this long (seconds, moving mean) get one job per worker at a time.
LONG_RUN = 0.5
#: Claimed jobs a host holds beyond what its workers want soon go back to the
#: queue only when they are this much work (seconds, at the measured run
#: time), and at most once in TRIM_EVERY seconds: a mix of quick and slow
#: handlers moves the measured mean up and down, and jobs put back are claimed
#: again (each a store write).
TRIM_WORK = 1.0
TRIM_EVERY = 2.0
#: Seconds before a step (or a renewal) that failed on a store error runs again.
STEP_RETRY = 0.5
#: Seconds an async run cancelled past its time limit and the grace has to end
#: before its worker is stopped (its loop is blocked, or it ignores cancellation).
CANCEL_WAIT = 5.0
#: Longest and shortest pause between two lease renewals.
MAX_RENEW_INTERVAL = 5.0
MIN_RENEW_INTERVAL = 0.05


@dataclass(frozen=True)
class WorkerLoad:
    """One worker as the planner sees it.

    ``n`` is the worker's number (unique; of two equally loaded workers the
    lower number is served first). ``sync_held`` and ``async_held`` count the
    runs handed to it and not ended, queued or started. ``running_since`` is
    when (monotonic) the start of its current sync run was seen, None when
    no sync run is in its handler; ``async_running`` counts its started
    async runs. ``owes_release``: a take-back or release was sent to it and
    its answer not read yet, so it gets nothing meanwhile.
    """

    n: int
    sync_held: int = 0
    async_held: int = 0
    running_since: Optional[float] = None
    async_running: int = 0
    owes_release: bool = False


@dataclass(frozen=True)
class Limits:
    """A host's limits as they stand: ``concurrency`` workers, ``prefetch``
    sync jobs a worker holds, ``async_limit`` async runs a worker holds,
    ``run_seconds`` the moving mean of sync runs (None: not measured yet),
    ``any_async`` whether any served type has an async handler."""

    concurrency: int
    prefetch: int
    async_limit: int = 1
    run_seconds: Optional[float] = None
    any_async: bool = False


class TypeWork(Protocol):
    """What the planner reads of a served type (a :class:`~actors.workers.runs.TypeSlot`)."""

    maybe_work: bool
    is_async: bool
    max_attempts: int


# ---------------------------------------------------------------- claims
def refill_below(prefetch: int) -> int:
    """A worker holding more sync jobs than this gets none until it has run
    some: refills come half a prefetch at a time, in one message."""
    return prefetch // 2


def is_stuck(load: WorkerLoad, now: float, run_seconds: Optional[float]) -> bool:
    """True when the worker's current sync run was seen starting more than
    :data:`STUCK_AFTER` (or twice the mean run ``run_seconds``) before ``now``:
    no sync job should wait behind it. Async runs never make a worker stuck."""
    since = load.running_since
    return since is not None and now - since > max(STUCK_AFTER, 2 * (run_seconds or 0.0))


def wants(
    loads: Sequence[WorkerLoad],
    buffered_sync: int,
    buffered_async: int,
    limits: Limits,
    now: float,
    active: bool = True,
) -> dict[bool, int]:
    """Jobs to claim, ``{False: for the sync types, True: for the async ones}``.

    Nothing (both 0) when not ``active`` (the host drains or its pool is not
    up). Sync: for each worker that is low (at most :func:`refill_below`
    sync jobs) and not stuck, the room up to ``prefetch``, plus
    ``concurrency``, less the buffered sync jobs. Async (0 unless
    ``any_async``): the async room of every worker that owes no release,
    less the buffered async jobs. A result may be 0 or negative: claim none.
    """
    if not active:
        return {False: 0, True: 0}
    below = refill_below(limits.prefetch)
    room = sum(
        limits.prefetch - load.sync_held
        for load in loads
        if load.sync_held <= below and not is_stuck(load, now, limits.run_seconds)
    )
    async_want = 0
    if limits.any_async:
        async_want = sum(limits.async_limit - load.async_held for load in loads if not load.owes_release)
        async_want -= buffered_async
    return {False: room + limits.concurrency - buffered_sync, True: async_want}


def claims(order: Sequence[Any], types: Mapping[Any, TypeWork], want: Mapping[bool, int]) -> list[tuple]:
    """The claims of one step, in ``order``: ``(type, limit, max_attempts)``
    for each type that may have work and whose kind (sync or async) wants
    jobs; each such type asks for its kind's whole want."""
    out = []
    for job_type in order:
        slot = types[job_type]
        if slot.maybe_work and want[slot.is_async] > 0:
            out.append((job_type, want[slot.is_async], slot.max_attempts))
    return out


def step_again(outcomes_waiting: bool, types: Mapping[Any, TypeWork], want: Mapping[bool, int]) -> bool:
    """After a step: True when another should follow (outcomes wait, or a
    type that may have work has a kind that still wants jobs)."""
    return outcomes_waiting or any(s.maybe_work and want[s.is_async] > 0 for s in types.values())


# ---------------------------------------------------------------- hand-out
@dataclass(frozen=True)
class HandOut:
    """Which buffered jobs go where, by their position in the buffer.

    ``to`` is ``(position, worker n)`` in buffer order; ``kept`` the
    positions no worker has room for now (they stay first in line, in
    order); ``taken`` how many positions from the front were looked at:
    those not in ``to`` or ``kept`` are dropped (lost jobs), those from
    ``taken`` on stay as they are.
    """

    to: tuple = ()
    kept: tuple = ()
    taken: int = 0


def hand_out(
    kinds: Iterable[Optional[bool]], loads: Sequence[WorkerLoad], limits: Limits, now: float, idle_only: bool = False
) -> HandOut:
    """Give buffered jobs to the least loaded workers (the lower number first
    between equals).

    ``kinds`` is the buffer from the front, each job's kind: False sync,
    True async, None lost (dropped). It is read lazily and no further than
    needed: the hand-out stops once no worker has room of either kind.
    A sync job goes to a worker that owes no release, holds at most
    :func:`refill_below` sync jobs (with ``idle_only``, none) and is not
    stuck, until it holds ``prefetch``. An async job (only when
    ``any_async``) goes to a worker that owes no release and holds fewer
    than ``async_limit`` async runs, whatever its sync runs do.
    """
    below = 0 if idle_only else refill_below(limits.prefetch)
    heaps: dict[bool, list] = {False: [], True: []}
    caps = {False: limits.prefetch, True: limits.async_limit}
    for load in loads:
        if load.owes_release:
            continue
        if load.sync_held <= below and not is_stuck(load, now, limits.run_seconds):
            heaps[False].append((load.sync_held, load.n))
        if limits.any_async and load.async_held < limits.async_limit:
            heaps[True].append((load.async_held, load.n))
    for heap in heaps.values():
        heapq.heapify(heap)
    to: list = []
    kept: list = []
    taken = 0
    for position, kind in enumerate(kinds):
        if all(not heap or heap[0][0] >= caps[k] for k, heap in heaps.items()):
            break
        taken = position + 1
        if kind is None:
            continue
        heap = heaps[kind]
        if not heap or heap[0][0] >= caps[kind]:
            kept.append(position)
            continue
        held, n = heapq.heappop(heap)
        to.append((position, n))
        heapq.heappush(heap, (held + 1, n))
    return HandOut(tuple(to), tuple(kept), taken)


# ---------------------------------------------------------------- the run watch
@dataclass(frozen=True)
class WatchPlan:
    """What one look at the running handlers decides: ``take_back`` the
    ``(worker n, queued sync runs)`` to ask back, ``write_starts`` whether a
    step should write starts now, ``busy`` whether any handler runs (watch
    again)."""

    take_back: tuple = ()
    write_starts: bool = False
    busy: bool = False


def watch(
    loads: Sequence[WorkerLoad],
    seen: Iterable[float],
    now: float,
    run_seconds: Optional[float],
    draining: bool = False,
) -> WatchPlan:
    """The run watch's decisions at ``now``: a worker whose sync handler is
    stuck (:func:`is_stuck`) gives back the sync runs queued behind it,
    unless it owes a release or the host drains; starts are written when
    one of the unwritten starts (their ``seen`` times) is older than
    :data:`MARK_AFTER`."""
    take_back = []
    busy = False
    for load in loads:
        if load.running_since is None and not load.async_running:
            continue
        busy = True
        queued = load.sync_held - 1
        if is_stuck(load, now, run_seconds) and queued > 0 and not load.owes_release and not draining:
            take_back.append((load.n, queued))
    write = any(now - t > MARK_AFTER for t in seen)
    return WatchPlan(tuple(take_back), write, busy)


def starts_due(marks: Iterable[tuple[Any, float, bool]], now: float) -> list:
    """Of the unwritten starts ``(token, seen, lost)``, the tokens to write in
    this step: seen more than :data:`MARK_AFTER` before ``now`` and not lost."""
    return [token for token, seen, lost in marks if now - seen > MARK_AFTER and not lost]


# ---------------------------------------------------------------- time limits
class LimitAction(Enum):
    """What a run gets at a look at its time limit."""

    NONE = "none"
    STOP = "stop"  # past its limit: told to stop (ctx.stopping)
    CANCEL = "cancel"  # an async run past the limit and the grace: its task is cancelled
    KILL = "kill"  # past the limit and the grace (and CANCEL_WAIT if async): its worker is stopped


def limit_action(
    started: Optional[float],
    limit: Optional[float],
    now: float,
    grace: float,
    is_async: bool = False,
    timed_out: bool = False,
    cancelled: bool = False,
    killing: bool = False,
) -> LimitAction:
    """The action on a run that ``started`` (epoch s) with a time ``limit``
    (seconds, None: none) at wall time ``now``; ``timed_out``, ``cancelled``
    and ``killing`` say what it got already. Each action comes once, in the
    order STOP, CANCEL (async only), KILL; a run not started, without a limit
    or being killed gets NONE."""
    if limit is None or started is None or killing:
        return LimitAction.NONE
    over = now - started - limit
    if over > 0 and not timed_out:
        return LimitAction.STOP
    if over > grace and is_async and not cancelled:
        return LimitAction.CANCEL
    if over > grace + (CANCEL_WAIT if is_async else 0.0):
        return LimitAction.KILL
    return LimitAction.NONE


# ---------------------------------------------------------------- an attempt's end
class End(Enum):
    """How an attempt ends in the store."""

    OK = "ok"
    SNOOZE = "snooze"  # back in the queue, uncounted
    RETRY = "retry"
    FAIL = "fail"  # for good


@dataclass(frozen=True)
class AttemptEnd:
    """An attempt's end: its ``kind``, the ``delay`` (seconds) before the job
    runs again (a snooze's or a retry's), and ``retry_at`` (epoch s, rounded
    up; 0: at once)."""

    kind: End
    delay: float = 0.0
    retry_at: int = 0


def attempt_end(
    error: Optional[dict],
    attempt: int,
    max_attempts: int,
    backoff: tuple,
    now: float,
    retry_now: bool = False,
    rng: Optional[random.Random] = None,
) -> AttemptEnd:
    """How attempt number ``attempt`` of ``max_attempts`` ends at wall time ``now``.

    No ``error``: OK. An error with a numeric ``snooze``: SNOOZE that long.
    Attempts left and the error not ``final``: RETRY at once with
    ``retry_now``, else after the error's numeric ``retry_in``, else after
    :func:`retry_delay` on ``backoff`` (``(base, cap)``; ``rng`` for its
    jitter). Otherwise FAIL.
    """
    if error is None:
        return AttemptEnd(End.OK)
    snooze = error.get("snooze")
    if isinstance(snooze, (int, float)):
        return AttemptEnd(End.SNOOZE, float(snooze), math.ceil(now + snooze))
    if attempt < max_attempts and not error.get("final"):
        asked = error.get("retry_in")
        if retry_now:
            delay = 0.0
        elif isinstance(asked, (int, float)):
            delay = float(asked)
        else:
            base, cap = backoff
            delay = retry_delay(attempt, base, cap, rng)
        return AttemptEnd(End.RETRY, delay, math.ceil(now + delay) if delay > 0 else 0)
    return AttemptEnd(End.FAIL)


def retry_delay(attempt: int, base: float, cap: float, rng: Optional[random.Random] = None) -> float:
    """Seconds before retry number ``attempt`` (1 after the first failure):
    ``base * 2**(attempt-1)``, at most ``cap``, times a jitter in [0.5, 1)."""
    exp = min(cap, base * (2 ** min(attempt - 1, 60)))
    return exp * (0.5 + (rng or random).random() / 2)


# ---------------------------------------------------------------- prefetch
def prefetch_for(run_seconds: float) -> int:
    """Jobs a worker holds, for handlers that take ``run_seconds`` (a moving
    mean): about :data:`PREFETCH_SECONDS` of work, at least two (one runs,
    the next waits in the worker, so the worker never waits for a message)
    unless jobs are long (:data:`LONG_RUN`), then one (a long job never
    waits behind another in one worker while others could take it)."""
    if run_seconds >= LONG_RUN:
        return 1
    return max(2, min(MAX_PREFETCH, int(PREFETCH_SECONDS / max(run_seconds, 1e-6))))


def to_trim(excess: int, concurrency: int, run_seconds: Optional[float], since_last: float) -> int:
    """How many of the ``excess`` buffered sync jobs (beyond what the workers
    want soon) a host puts back: none within :data:`TRIM_EVERY` seconds of
    the last time, nor up to one a worker, nor while they are less than
    :data:`TRIM_WORK` seconds of work at ``run_seconds``; else all."""
    if since_last < TRIM_EVERY or excess <= concurrency or run_seconds is None:
        return 0
    return excess if excess * run_seconds >= TRIM_WORK else 0


def run_mean(previous: Optional[float], seconds: float) -> float:
    """The moving mean of sync run times after a run of ``seconds``
    (``previous`` None: the first run sets it)."""
    return seconds if previous is None else 0.8 * previous + 0.2 * seconds


# ---------------------------------------------------------------- leases
def renew_interval(type_timeouts: Iterable[float]) -> float:
    """Seconds between two renewals of the held jobs' leases: a quarter of
    the shortest type timeout (so a lease has four renewals of slack),
    within :data:`MIN_RENEW_INTERVAL` and :data:`MAX_RENEW_INTERVAL`."""
    return max(MIN_RENEW_INTERVAL, min([MAX_RENEW_INTERVAL] + [t / 4 for t in type_timeouts]))


def renew_delay(interval: float, failed: bool) -> float:
    """Seconds until the next renewal: ``interval``, or after a store error
    sooner (at most :data:`STEP_RETRY`)."""
    return min(interval, STEP_RETRY) if failed else interval
