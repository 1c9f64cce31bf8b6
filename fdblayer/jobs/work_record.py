"""A worker pool's record of a job: attempts, outcome, result, errors, progress.

Data model (beside the couch_jobs rows, written in the same transaction as
every transition of the job, see :mod:`fdblayer.jobs.work`)::

    (P, WORK, type, job_id) = {"a": attempts started, "m": max attempts or None,
                               "o": outcome ("succeeded" | "failed") or None,
                               "r": encoded result or None, "e": last error or None,
                               "p": progress fields, "w": worker host, "k": claimed,
                               "s": handler started, "f": ended,
                               "x": [error of each failed attempt, oldest first],
                               "t": the job's limit on a run (seconds) or None}

Each entry of the error history is ``{"attempt", "at", "type", "message",
"traceback"}``; the newest :data:`ERRORS_KEPT` are kept, their tracebacks
cut to their last :data:`HISTORY_TRACEBACK` characters (the last error,
``e``, keeps its own whole), and older entries go first while the history
would encode to more than :data:`HISTORY_LIMIT` bytes: with the largest
result and progress a record still fits one store value.

A record that cannot be decoded (a bad value written behind the API's
back) reads as a fresh one and is logged: a stored value never stops a
reader. Pure values: nothing here touches a transaction.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any, NamedTuple, Optional, cast

import msgpack

from fdblayer.jobs.job import JobState

__all__ = [
    "SUCCEEDED",
    "FAILED",
    "WORKER_LOST",
    "ERRORS_KEPT",
    "HISTORY_TRACEBACK",
    "HISTORY_LIMIT",
    "WorkRecord",
    "with_error",
    "claimed_only",
    "pool_state",
]

logger = logging.getLogger(__name__)

SUCCEEDED = "succeeded"
FAILED = "failed"

#: What a worker that died mid-attempt leaves as the attempt's error.
WORKER_LOST = "WorkerLost"
#: Failed attempts whose error the history keeps (the newest), the characters
#: of each traceback kept there, and the bytes the history encodes to at most.
ERRORS_KEPT = 10
HISTORY_TRACEBACK = 2_000
HISTORY_LIMIT = 20_000


class WorkRecord(NamedTuple):
    """A job's work record (see the module docstring for the stored form).

    A named tuple, as :class:`~fdblayer.jobs.codec.JobValue`: a pool makes
    two per job, and a tuple is built several times faster than a frozen
    dataclass. Its ``progress`` is never changed in place (a merge makes a
    new dict).
    """

    attempt: int = 0
    max_attempts: Optional[int] = None
    outcome: Optional[str] = None
    result: Optional[bytes] = None
    error: Optional[dict[str, Any]] = None
    progress: dict[str, Any] = {}  # noqa: RUF012 - never mutated: shared safely
    worker: Optional[str] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    claimed: Optional[float] = None
    errors: tuple[dict[str, Any], ...] = ()
    time_limit: Optional[float] = None

    def pack(self) -> bytes:
        return cast(
            bytes,
            _PACKB(
                {
                    "a": self.attempt,
                    "m": self.max_attempts,
                    "o": self.outcome,
                    "r": self.result,
                    "e": self.error,
                    "p": self.progress,
                    "w": self.worker,
                    "s": self.started,
                    "f": self.ended,
                    "k": self.claimed,
                    "x": list(self.errors),
                    "t": self.time_limit,
                }
            ),
        )

    @classmethod
    def unpack(cls, raw: Optional[bytes], where: Any = None) -> "WorkRecord":
        """Decode a stored record; None or an undecodable value is a fresh record."""
        if raw is None:
            return cls()
        try:
            d = _UNPACKB(raw)
            record = cls(
                _count(d.get("a")),
                _opt_int(d.get("m")),
                _opt_str(d.get("o")),
                _opt_bytes(d.get("r")),
                d.get("e") if isinstance(d.get("e"), dict) else None,
                d.get("p") if isinstance(d.get("p"), dict) else {},
                _opt_str(d.get("w")),
                _opt_float(d.get("s")),
                _opt_float(d.get("f")),
                _opt_float(d.get("k")),
                _errors(d.get("x")),
                _opt_positive(d.get("t")),
            )
        except Exception as exc:  # noqa: BLE001 - survive a bad stored value: log it, start afresh
            logger.warning("work_record_unreadable job=%r error=%r", where, exc)
            return cls()
        return record

    def begin_attempt(self, worker: str, now: float) -> "WorkRecord":
        """The record of its next attempt, claimed by ``worker`` at ``now`` (not started)."""
        return WorkRecord(
            self.attempt + 1,
            self.max_attempts,
            None,
            self.result,
            self.error,
            {},
            worker,
            None,
            None,
            now,
            self.errors,
            self.time_limit,
        )

    def end_attempt(
        self,
        outcome: Optional[str],
        result: Optional[bytes],
        error: Optional[dict[str, Any]],
        now: float,
        started: Optional[float] = None,
    ) -> "WorkRecord":
        """The record of its attempt ended at ``now``: finished (``outcome``) or
        to be retried (``outcome`` None, ``result`` kept); ``started`` fills
        in a start not recorded yet. A failed attempt's ``error`` joins the
        error history."""
        errors = self.errors if error is None else with_error(self.errors, self.attempt, now, error)
        return WorkRecord(
            self.attempt,
            self.max_attempts,
            outcome,
            result,
            error,
            self.progress,
            self.worker,
            _first(self.started, started, now),
            now,
            self.claimed,
            errors,
            self.time_limit,
        )

    def unclaimed(self) -> "WorkRecord":
        """The record of an attempt given back without counting it."""
        return self._replace(attempt=max(0, self.attempt - 1), started=None, worker=None, claimed=None)


def with_error(
    errors: tuple[dict[str, Any], ...], attempt: int, at: float, error: dict[str, Any]
) -> tuple[dict[str, Any], ...]:
    """``errors`` with the entry of a failed attempt added, bounded (see the
    module docstring)."""
    traceback = str(error.get("traceback") or "")
    if len(traceback) > HISTORY_TRACEBACK:
        traceback = "...\n" + traceback[-HISTORY_TRACEBACK:]
    entry = {
        "attempt": attempt,
        "at": at,
        "type": error.get("type"),
        "message": error.get("message"),
        "traceback": traceback,
    }
    out = (tuple(errors) + (entry,))[-ERRORS_KEPT:]
    while len(out) > 1 and len(_PACKB(list(out))) > HISTORY_LIMIT:
        out = out[1:]
    return out


def _errors(value: Any) -> tuple[dict[str, Any], ...]:
    """A stored error history, its malformed entries dropped."""
    if not value or not isinstance(value, list):  # most records have none: no generator made
        return ()
    return tuple(e for e in value[-ERRORS_KEPT:] if isinstance(e, dict))


def _opt_positive(v: Any) -> Optional[float]:
    value = _opt_float(v)
    return value if value is not None and value > 0 else None


def _first(*values: Optional[float]) -> Optional[float]:
    return next((v for v in values if v is not None), None)


def claimed_only(record: WorkRecord) -> bool:
    """True for the record of a job a host claimed whose handler has not
    started (read together with the job being running)."""
    return record.worker is not None and record.started is None and record.outcome is None


def pool_state(state: JobState, record: WorkRecord) -> JobState:
    """A job's state as the pools show it: ``claimed`` for a running job
    whose handler has not started, else the queue's state."""
    return JobState.CLAIMED if state is JobState.RUNNING and claimed_only(record) else state


_PACKB = functools.partial(msgpack.packb, use_bin_type=True)  # a Packer is not thread-safe: one per call
_UNPACKB = functools.partial(msgpack.unpackb, raw=False)


#: The largest count a stored record may hold: bounded where read, so that a
#: record written by anything else cannot make its next write unencodable.
_COUNT_MAX = 2**31 - 1


def _count(v: Any) -> int:
    """A stored attempt count; ValueError (the record reads as fresh) unless
    an int from 0 to ``_COUNT_MAX``."""
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _COUNT_MAX:
        raise ValueError(f"attempt count {v!r:.40}")
    return v


def _opt_int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= _COUNT_MAX else None


def _opt_str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _opt_bytes(v: Any) -> Optional[bytes]:
    return v if isinstance(v, bytes) else None


def _opt_float(v: Any) -> Optional[float]:
    """A stored time or duration: a finite number (inf or nan read as missing)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)
