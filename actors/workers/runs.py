"""What a worker host's dispatcher keeps of its jobs, workers and types.

Principle: plain values, no actor: a job this host claimed
(:class:`Running`), one worker as the dispatcher sees it (:class:`Slot`),
one served type (:class:`TypeSlot`). The dispatcher and its parts share
them. The rules on them (how many jobs a worker holds, how long a retry
waits, ...) are in :mod:`actors.workers.planner`; the ones callers used to
import from here (:func:`prefetch_for`, :func:`retry_delay` and their
constants) are still re-exported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from fdblayer.jobs import work

from actors.settings.schema import known
from actors.workers.channel import Channel
from actors.workers.commands import CommandPipe
from actors.workers.planner import (
    CANCEL_WAIT,
    LONG_RUN,
    MAX_PREFETCH,
    PREFETCH_SECONDS,
    STEP_RETRY,
    WorkerLoad,
    prefetch_for,
    retry_delay,
)

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
    #: still held at the end of a drain's grace: its worker is being stopped.
    #: An end read before the worker's death is kept (the run is no longer
    #: late); a run still late once its worker is gone goes back uncounted.
    late: bool = False


@dataclass
class Slot:
    """One worker as the dispatcher sees it: its runs in the order it runs
    them (the first sync one may be in its handler: ``current``; the async
    ones started are in ``inflight``, ``async_held`` counts its async runs),
    its report channel and its command pipe, and whether it owes a RELEASED
    record (a take-back or release was sent)."""

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
    commands: Optional[CommandPipe] = None  # the pipe every command to the worker goes through
    #: the host is stopping it (a run past its limit and the grace): it gets
    #: no more jobs, and what it runs beside that run is put back uncounted
    #: when it dies, even if that run ended before the kill landed
    killing: bool = False

    def load(self) -> WorkerLoad:
        """This worker as the planner (:mod:`actors.workers.planner`) sees it."""
        current = self.current
        return WorkerLoad(
            self.n,
            len(self.runs) - self.async_held,
            self.async_held,
            None if current is None else current.seen,
            len(self.inflight),
            bool(self.owes_release),
        )


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
    rechecking: bool = False  # the lifeline asked for this claim, no watch did
    lifeline_vs: Any = None
    paused: bool = False
    control_watches: tuple = ()  # fire when its pause, timeout or schedule changes (type_controls.Controls)
    controls_fired: bool = False
    lease_timeout: Optional[float] = None  # the timeout the leases are renewed for, as last read
    is_async: bool = False  # an async def handler: many runs at once per worker


def short(text: Any, limit: int = 200) -> str:
    text = str(text).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
