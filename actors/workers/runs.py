"""What a worker host's dispatcher keeps of its jobs, workers and types, and its pure rules.

Principle: plain values and functions, no actor: a job this host claimed
(:class:`Running`), one worker as the dispatcher sees it (:class:`Slot`),
one served type (:class:`TypeSlot`), how many jobs a worker holds
(:func:`prefetch_for`) and how long a retry waits (:func:`retry_delay`).
The dispatcher and its mixins (upkeep, ticks, drain) share them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Optional

from fdblayer.jobs import work

from actors.settings.schema import known
from actors.workers.channel import Channel

__all__ = [
    "Running",
    "Slot",
    "TypeSlot",
    "prefetch_for",
    "retry_delay",
    "short",
    "MAX_PREFETCH",
    "PREFETCH_SECONDS",
    "LONG_RUN",
    "STEP_RETRY",
    "CALL_TIMEOUT",
    "CANCEL_WAIT",
]

#: Seconds a call to the pool's supervisor may take.
CALL_TIMEOUT = 10.0
#: Seconds an async run cancelled past its time limit and the grace has to end
#: before its worker is stopped (its loop is blocked, or it ignores cancellation).
CANCEL_WAIT = 5.0

#: Jobs a worker holds at most: one running, the rest next in its own queue, so that
#: a job's end and the next start need no message. How many it holds follows the
#: handlers' measured run time: enough for about PREFETCH_SECONDS of work, so quick
#: jobs go in batches and a long job never holds others back (then it is 1).
MAX_PREFETCH = 128
PREFETCH_SECONDS = 0.1
#: Handlers that run this long (seconds, moving mean) get one job per worker at a time.
LONG_RUN = 0.5
#: Seconds before a step that failed on a store error runs again.
STEP_RETRY = 0.5


def prefetch_for(run_seconds: float) -> int:
    """Jobs a worker holds, for handlers that take ``run_seconds`` (a moving
    mean): about :data:`PREFETCH_SECONDS` of work, at least two (one runs,
    the next waits in the worker, so the worker never waits for a message)
    unless jobs are long (:data:`LONG_RUN`), then one (a long job never
    waits behind another in one worker while others could take it)."""
    if run_seconds >= LONG_RUN:
        return 1
    return max(2, min(MAX_PREFETCH, int(PREFETCH_SECONDS / max(run_seconds, 1e-6))))


def retry_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number ``attempt`` (1 after the first failure):
    ``base * 2**(attempt-1)``, at most ``cap``, times a jitter in [0.5, 1)."""
    exp = min(cap, base * (2 ** min(attempt - 1, 60)))
    return exp * (0.5 + (rng or random).random() / 2)


@dataclass
class Running:
    """A job this host claimed: in the buffer (``worker`` None) or handed to a
    worker; ``started`` (epoch s) once its handler started, ``seen`` (the
    dispatcher's monotonic clock) when it learned so."""

    claimed: work.Claimed
    token: int
    worker: Any = None
    started: Optional[float] = None
    seen: float = 0.0
    marked: bool = False
    lost: bool = False
    timed_out: bool = False  # past its time limit: told to stop
    killing: bool = False  # past its limit and the grace: its worker is being stopped
    is_async: bool = False  # an async handler's run (set when handed to a worker)
    cancelled: bool = False  # an async run past its limit and the grace: its task was cancelled


@dataclass
class Slot:
    """One worker as the dispatcher sees it: its runs in the order it runs
    them (the first sync one may be in its handler: ``current``; the async
    ones started are in ``inflight``, ``async_held`` counts its async runs),
    its channel, and whether it owes a RELEASED record (a take-back or
    release was sent)."""

    addr: Any
    ref: Any
    channel: Channel
    n: int
    runs: dict = field(default_factory=dict)  # token -> Running, in order
    current: Optional[Running] = None
    owes_release: int = 0
    inflight: dict = field(default_factory=dict)  # token -> Running: async runs started, not ended
    async_held: int = 0  # async runs in runs (queued or started)
    pidfd: Optional[int] = None  # the worker's process, once it said hello


def worker_default(key: str) -> Any:
    """``[worker] key``'s default, read from the settings schema (the one
    place a default is written; seconds for times)."""
    return known("worker", key).default


#: Retry delays of a failed attempt: ``base * 2**(attempt-1)`` seconds, at
#: most ``cap`` (:func:`retry_delay`), unless a handler declares its own.
DEFAULT_BACKOFF = (1.0, 3600.0)


@dataclass
class TypeSlot:
    """What the dispatcher knows of one served type."""

    handler: str
    max_attempts: int
    timeout: float = float(worker_default("type_timeout"))
    time_limit: Optional[float] = None
    backoff: tuple = DEFAULT_BACKOFF
    maybe_work: bool = True
    watch: Any = None
    due_at: Optional[float] = None
    due_timer: Optional[int] = None
    schedule: Optional[str] = None
    tick_timer: Optional[int] = None
    tick_at: Optional[float] = None
    fired: bool = field(default=False)
    lifeline_vs: Any = None
    paused: bool = False
    is_async: bool = False  # an async def handler: many runs at once per worker


def short(text: Any, limit: int = 200) -> str:
    text = str(text).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
