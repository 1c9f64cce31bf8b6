"""Messages between a worker host's dispatcher, its workers and its clients.

Plain frozen dataclasses, pickled across processes. The dispatcher sends a
worker :class:`UsePipe` once (a Thespian message), then
:class:`RunJobs`, :class:`StopJob`, :class:`TakeBack` and :class:`Release`
on that pipe (:mod:`actors.workers.commands`); a worker answers on its
report channel (:mod:`actors.workers.channel`), not with messages. Clients call the
dispatcher with :class:`Drain` and :class:`GetStatus`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["UsePipe", "RunJob", "RunJobs", "StopJob", "TakeBack", "Release", "Drain", "GetStatus"]


@dataclass(frozen=True)
class UsePipe:
    """Info to a worker: read every command from the pipe named ``path``
    (:class:`~actors.workers.commands.CommandReader`), from now on; keep the
    journal of ended runs (:mod:`actors.workers.journal`) in ``journal_dir``
    under ``host_key`` (none when empty)."""

    path: str
    journal_dir: str = ""
    host_key: str = ""


@dataclass(frozen=True, repr=False)
class RunJob:
    """One run of a :class:`RunJobs` batch: run ``handler`` on the job."""

    token: int
    job: Any
    data: bytes
    attempt: int
    max_attempts: int
    handler: str
    is_async: bool = False  #: an ``async def`` handler: awaited on the worker's event loop
    #: wall time (epoch s) after which the run must not start (its lease may
    #: have run out: the host was frozen); the worker hands it back. 0: none.
    start_by: float = 0.0

    def __repr__(self) -> str:
        return f"RunJob(token={self.token}, attempt={self.attempt})"


@dataclass(frozen=True, repr=False)
class RunJobs:
    """Info to a worker: run these, the sync ones in order, one at a time (a
    worker holds a few so that a job's end and the next job's start need no
    message), the async ones on its event loop, up to ``async_limit`` at
    once, with the store at ``store``; record each start and end on the
    pipe named ``channel``."""

    runs: tuple
    store: str
    channel: str
    async_limit: int = 100

    def __repr__(self) -> str:  # Thespian formats every message it sends: keep that cheap
        return f"RunJobs(n={len(self.runs)})"


@dataclass(frozen=True)
class TakeBack:
    """Info to a worker: hand back the runs not yet started (a RELEASED
    record); the running handler goes on."""


@dataclass(frozen=True)
class Release:
    """Info to a worker: hand back the runs not yet started (a RELEASED
    record) and tell the running handler to stop (a drain)."""


@dataclass(frozen=True)
class StopJob:
    """Info to a worker: the job of ``token`` was removed, taken over, or the
    host is shutting down (its handler sees ``ctx.stopping``); with
    ``cancel``, an async run's task is cancelled too (past its time limit
    and the grace)."""

    token: int
    cancel: bool = False


@dataclass(frozen=True)
class Drain:
    """Call: claim no more jobs, put claimed ones that have not started back
    in the queue, give running handlers ``grace`` seconds, then put what
    still runs back too. Answers ``{"finished": n, "released": n}``."""

    grace: float


@dataclass(frozen=True)
class GetStatus:
    """Call: the host's status (types, concurrency, busy workers and their jobs)."""
