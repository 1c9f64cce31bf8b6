"""Messages between a worker host's dispatcher, its workers and its clients.

Plain frozen dataclasses, pickled across processes. The dispatcher sends a
worker :class:`RunJob` and :class:`StopJob`; a worker answers each run
with one :class:`JobDone`. Clients call the dispatcher with :class:`Drain`
and :class:`GetStatus`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["RunJob", "RunJobs", "StopJob", "JobDone", "JobsDone", "Release", "Released", "Drain", "GetStatus"]


@dataclass(frozen=True, repr=False)
class RunJob:
    """One run of a :class:`RunJobs` batch: run ``handler`` on the job."""

    token: int
    job: Any
    data: bytes
    attempt: int
    max_attempts: int
    handler: str

    def __repr__(self) -> str:
        return f"RunJob(token={self.token}, attempt={self.attempt})"


@dataclass(frozen=True, repr=False)
class RunJobs:
    """Info to a worker: run these, in order, one at a time (a worker holds a
    few so that a job's end and the next job's start need no message), with
    the store at ``store``; answer :class:`JobsDone` to ``reply_to``."""

    runs: tuple
    store: str
    reply_to: Any

    def __repr__(self) -> str:  # Thespian formats every message it sends: keep that cheap
        return f"RunJobs(n={len(self.runs)})"


@dataclass(frozen=True)
class Release:
    """Info to a worker: drop the jobs not yet started and answer
    :class:`Released`; tell the running handler to stop."""


@dataclass(frozen=True)
class Released:
    """Info to the dispatcher: the tokens a worker dropped without starting them."""

    worker: Any
    tokens: tuple


@dataclass(frozen=True)
class StopJob:
    """Info to a worker: the job of ``token`` was removed, taken over, or the
    host is shutting down (its handler sees ``ctx.stopping``)."""

    token: int


@dataclass(frozen=True, repr=False)
class JobDone:
    """Info to the dispatcher: the run of ``token`` ended.

    ``result`` is the encoded return value when ``error`` is None; ``error``
    is ``{"type", "message", "traceback"}`` when the handler raised (or its
    return value could not be encoded).
    """

    token: int
    result: Optional[bytes] = None
    error: Optional[dict] = None
    seconds: float = 0.0

    def __repr__(self) -> str:
        return f"JobDone(token={self.token}, ok={self.error is None})"


@dataclass(frozen=True, repr=False)
class JobsDone:
    """Info to the dispatcher: the runs a worker ended since its last report."""

    worker: Any
    done: tuple

    def __repr__(self) -> str:
        return f"JobsDone(n={len(self.done)})"


@dataclass(frozen=True)
class Drain:
    """Call: claim no more jobs, put claimed ones that have not started back
    in the queue, give running handlers ``grace`` seconds, then put what
    still runs back too. Answers ``{"finished": n, "released": n}``."""

    grace: float


@dataclass(frozen=True)
class GetStatus:
    """Call: the host's status (types, concurrency, busy workers and their jobs)."""
