"""Errors of the jobs data model.

Principle: one root, ``JobsError``, and a few named subclasses that carry the
job's identity as fields (``job_type``, ``job_id``) next to a readable
message. They replace the seed's ``{error, Reason}`` tuples:

============================  =====================================
seed                          here
============================  =====================================
``{error, not_found}``        :class:`NotFound`
``{error, halt}``             :class:`Halt`
``{error, no_type_timeout}``  :class:`NoTypeTimeout`
``{json_encoding_error, _}``  :class:`EncodingError`
function_clause / badarg      :class:`InvalidArgument`
============================  =====================================

Every error pickles with its fields, so it can cross a process or actor
boundary unchanged.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "JobsError",
    "NotFound",
    "Halt",
    "InvalidArgument",
    "NoTypeTimeout",
    "EncodingError",
    "JobFailed",
    "CorruptValue",
]


class JobsError(Exception):
    """Root of every error raised by the jobs data model.

    Attributes:
        message: The human-readable message.
        job_type: The job type concerned, or None.
        job_id: The job id concerned, or None.
    """

    def __init__(self, message: str, *, job_type: Any = None, job_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.job_type = job_type
        self.job_id = job_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (type(self), self.message, self.job_type, self.job_id),
        )


def _rebuild(cls: type[JobsError], message: str, job_type: Any, job_id: str | None) -> JobsError:
    """Unpickle an error with its keyword-only fields."""
    return cls(message, job_type=job_type, job_id=job_id)


class NotFound(JobsError):
    """The job does not exist, or no job was available before a timeout."""


class Halt(JobsError):
    """The caller's lock on a job is stale.

    The job was removed, finished, or re-enqueued (and maybe accepted by
    another worker) since the caller accepted it: the caller must stop
    working on it.
    """


class InvalidArgument(JobsError):
    """An argument has the wrong type, is out of range or too large."""


class NoTypeTimeout(InvalidArgument):
    """The job type has no activity timeout, so it is unknown to the queue.

    A type must be declared with ``set_type_timeout`` before jobs of that type
    can be added.
    """


class EncodingError(JobsError):
    """Job data is not a JSON-compatible value, or is too large to store."""


class CorruptValue(JobsError):
    """A stored row cannot be decoded (written by something else, or damaged).

    Scans skip such rows (and log them once); a call that asks for exactly
    that row gets this error instead of a crash.
    """


class JobFailed(JobsError):
    """A job run by a worker pool failed for good (its last attempt raised,
    or its attempts were used up by dying workers).

    Attributes:
        error_type: The name of the exception class the handler raised.
        error_message: Its message.
        traceback: The handler's traceback, as text (bounded).
        attempts: How many attempts were made.
    """

    def __init__(
        self,
        message: str,
        *,
        job_type: Any = None,
        job_id: str | None = None,
        error_type: str = "",
        error_message: str = "",
        traceback: str = "",
        attempts: int = 0,
    ) -> None:
        super().__init__(message, job_type=job_type, job_id=job_id)
        self.error_type = error_type
        self.error_message = error_message
        self.traceback = traceback
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_failed,
            (
                self.message,
                self.job_type,
                self.job_id,
                self.error_type,
                self.error_message,
                self.traceback,
                self.attempts,
            ),
        )


def _rebuild_failed(
    message: str, job_type: Any, job_id: Any, error_type: str, error_message: str, traceback: str, attempts: int
) -> JobFailed:
    return JobFailed(
        message,
        job_type=job_type,
        job_id=job_id,
        error_type=error_type,
        error_message=error_message,
        traceback=traceback,
        attempts=attempts,
    )
