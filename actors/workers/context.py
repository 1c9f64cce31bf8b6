"""What a pool's handler gets: its job context, and how its outcome is encoded.

The context is the one handler context (:class:`actors.handlers.JobContext`,
re-exported here) with a pool's part, built by :func:`pool_context`.

Principle: a handler sees its job (``ctx.id``, ``ctx.type``, ``ctx.data``,
``ctx.attempt``), reports progress without touching the job's input data
(``ctx.progress(**fields)``), and learns that its work is no longer wanted
(``ctx.stopping``); everything it returns or raises is bounded here, in
the worker's process, before it reaches the store. An ``async def``
handler has the same context and awaits what would block its event loop:
``await ctx.stopped(timeout)``, ``await ctx.progress_async(**fields)``.
"""

from __future__ import annotations

import functools
import traceback as tb
from typing import Any, Callable, Optional

import msgpack

from fdblayer.jobs import work
from fdblayer.jobs.codec import decode_data, encode_data
from fdblayer.jobs.exceptions import CorruptValue, EncodingError, InvalidArgument
from fdblayer.jobs.keys import DEFAULT_LAYOUT

from actors.handlers import JobContext, JobStopping, QueuedRun
from actors.workers.control import Cancel, Retry, Snooze

__all__ = [
    "JobContext",
    "pool_context",
    "UnstorableResult",
    "encode_result",
    "decode_result",
    "describe_error",
    "RESULT_LIMIT",
    "RESULT_WRAPPER",
    "PROGRESS_LIMIT",
    "TRACEBACK_LIMIT",
    "MESSAGE_LIMIT",
]

#: Bounds of what a job's work record keeps (it must fit one store value).
RESULT_LIMIT = 64_000
PROGRESS_LIMIT = 8_000
TRACEBACK_LIMIT = 8_000
MESSAGE_LIMIT = 2_000
#: Bytes the stored form of a result adds around the result's own encoding
#: (``{"result": ...}``): RESULT_LIMIT bounds the result itself.
RESULT_WRAPPER = len(msgpack.packb({"result": None}, use_bin_type=True)) - 1


def pool_context(
    job: Any, data: dict[str, Any], attempt: int, max_attempts: int, db_factory: Callable[[], Any]
) -> JobContext:
    """The context of a pool's run of ``job`` (its :class:`~actors.handlers.QueuedRun`
    part): ``ctx.progress`` writes to the store ``db_factory`` opens, in
    this process, bounded by :data:`PROGRESS_LIMIT`."""
    write = functools.partial(_write_progress, db_factory, job)
    ctx = JobContext(job.id, job.type, queued=QueuedRun(attempt, max_attempts, write))
    ctx.data = data
    return ctx


def _write_progress(db_factory: Callable[[], Any], job: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """Merge ``fields`` into ``job``'s progress record; the whole record.

    Raises:
        EncodingError: not JSON-compatible, or past :data:`PROGRESS_LIMIT` (nothing is written).
        Halt: the job is no longer this worker's.
    """
    try:
        size = len(encode_data(fields))
    except EncodingError as exc:  # past the store's own limit: told as progress, with its limit
        size = _size_past(exc, fields, PROGRESS_LIMIT) or 0
        if not size:
            raise
    if size > PROGRESS_LIMIT:
        raise EncodingError(f"progress encodes to {size} bytes; at most {PROGRESS_LIMIT}")
    return work.set_progress(db_factory(), DEFAULT_LAYOUT, job, fields, PROGRESS_LIMIT)


class UnstorableResult(EncodingError):
    """A handler returned a value the store cannot keep: not JSON-compatible,
    or encoding to more than :data:`RESULT_LIMIT` bytes.

    Running the handler again would return the same kind of value (and
    repeat its side effects), so :func:`describe_error` marks its error
    ``final``: the attempt ends the job, failed, whatever attempts are left.
    """


def encode_result(value: Any) -> bytes:
    """A handler's return value as stored (JSON values whose own encoding is
    at most RESULT_LIMIT bytes; the stored form adds RESULT_WRAPPER).

    Raises:
        UnstorableResult: not JSON-compatible, or too large (the message
            names the result, where in it the bad value is, and the limit).
    """
    try:
        encoded = encode_data({"result": value})
    except (EncodingError, InvalidArgument) as exc:
        size = _size_past(exc, value, RESULT_LIMIT)
        if size is not None:
            raise UnstorableResult(_too_large(size)) from None
        raise UnstorableResult(_not_json(str(exc))) from None
    except Exception as exc:  # noqa: BLE001 - a value whose own methods raise while it is walked
        raise UnstorableResult(_not_json(f"it cannot be encoded: {type(exc).__name__}: {exc}")) from None
    if len(encoded) - RESULT_WRAPPER > RESULT_LIMIT:
        raise UnstorableResult(_too_large(len(encoded) - RESULT_WRAPPER))
    return encoded


def _size_past(exc: Exception, value: Any, limit: int) -> Optional[int]:
    """The size of ``value``'s msgpack encoding when ``exc`` is the codec's
    refusal of a value past the store's limit and that size is past
    ``limit`` too; else None (``exc`` is about something else)."""
    if "encodes to" not in str(exc):
        return None
    try:
        size = len(msgpack.packb(value, use_bin_type=True))
    except Exception:  # noqa: BLE001 - not packable: not a size problem
        return None
    return size if size > limit else None


def _too_large(size: int) -> str:
    return (
        f"the handler's result is not storable: it encodes to {size:,} bytes; "
        f"results are limited to {RESULT_LIMIT:,} bytes (store large outputs elsewhere "
        "and return a reference)"
    )


def _not_json(why: str) -> str:
    """The codec's reason, told of the result: ``job data: set at data['result']['x'] ...``
    becomes ``a set at result['x'] ...``."""
    why = why.removeprefix("job data: ").replace("data['result']", "result")
    return f"the handler's result is not storable: {why}; results are JSON values of at most {RESULT_LIMIT:,} bytes"


def decode_result(encoded: Optional[bytes]) -> Any:
    """The value :func:`encode_result` encoded (None for None).

    Raises:
        CorruptValue: the stored result is not one this module wrote.
    """
    if encoded is None:
        return None
    value = decode_data(encoded)
    if not isinstance(value, dict):
        raise CorruptValue("the stored result is unreadable (not a result record)")
    return value.get("result")


def describe_error(exc: BaseException) -> dict:
    """``{"type", "message", "traceback"}`` of an exception, each bounded; an
    :class:`UnstorableResult` or a :class:`~actors.workers.control.Cancel`
    adds ``"final": True`` (the dispatcher then fails the job at once
    instead of retrying it), a ``Retry`` ``"retry_in"`` (seconds), a
    ``Snooze`` ``"snooze"`` (seconds) and a :class:`JobStopping` (what
    ``ctx.check()`` raises once the run is told to stop) ``"stopped": True``."""
    text = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-TRACEBACK_LIMIT:]
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises still gives an error
        message = f"<unprintable {type(exc).__name__}>"
    error: dict[str, Any] = {"type": type(exc).__name__, "message": message[:MESSAGE_LIMIT], "traceback": text}
    if isinstance(exc, (UnstorableResult, Cancel)):
        error["final"] = True
    elif isinstance(exc, Retry):
        error["retry_in"] = exc.in_seconds
    elif isinstance(exc, Snooze):
        error["snooze"] = exc.seconds
    elif isinstance(exc, JobStopping):
        error["stopped"] = True
    return error
