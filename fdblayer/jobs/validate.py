"""Argument checks of the jobs API, run before any transaction starts.

Principle: bad input changes nothing. Every public entry checks all its
arguments here first and raises :class:`InvalidArgument` (or
:class:`EncodingError` for job data) with a message that names the argument
and the bad value; only then does it touch the store.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import fdb.tuple

from fdblayer.jobs.codec import INT_MAX, INT_MIN, KEY_SIZE_LIMIT
from fdblayer.jobs.exceptions import InvalidArgument
from fdblayer.jobs.job import Job
from fdblayer.jobs.keys import Layout

__all__ = [
    "MAX_TYPE_DEPTH",
    "MAX_SCHED_TIME",
    "check_type",
    "check_id",
    "check_key_size",
    "check_sched_time",
    "check_optional_sched_time",
    "check_timeout",
    "check_type_timeout",
    "check_job",
    "check_flag",
]

MAX_TYPE_DEPTH = 8

# The seed's ?UNDEFINED_MAX_SCHEDULED_TIME: "no limit" for max_sched_time.
MAX_SCHED_TIME = 1 << 36

# Room in the longest key (PENDING) for everything but type and id: the
# layer prefix is added separately; subspace and a 64-bit time take 11 bytes.
_KEY_OVERHEAD = 16


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_ok(value: Any, depth: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return _utf8_ok(value)
    if isinstance(value, int):
        return INT_MIN <= value <= INT_MAX
    if isinstance(value, tuple) and value and depth < MAX_TYPE_DEPTH:
        return all(_type_ok(item, depth + 1) for item in value)
    return False


def _utf8_ok(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_type(job_type: Any) -> Any:
    """Check a job type.

    Args:
        job_type: A str, a 64-bit int, or a non-empty tuple of those (nested
            at most :data:`MAX_TYPE_DEPTH` deep).

    Returns:
        ``job_type`` unchanged.

    Raises:
        InvalidArgument: ``job_type`` is of another kind.
    """
    if type(job_type) is str and job_type.isascii():
        return job_type
    if not _type_ok(job_type, 0):
        raise InvalidArgument(
            f"job type must be a str, an int or a non-empty tuple of those, not {_short(job_type)}",
            job_type=job_type,
        )
    return job_type


def check_id(job_id: Any, job_type: Any = None) -> str:
    """Check a job id: a non-empty str encodable as UTF-8.

    Raises:
        InvalidArgument: ``job_id`` is not such a str.
    """
    if type(job_id) is str and job_id and job_id.isascii():
        return job_id
    if not isinstance(job_id, str):
        raise InvalidArgument(f"job id must be a str, not {type(job_id).__name__}: {_short(job_id)}", job_type=job_type)
    if not job_id:
        raise InvalidArgument("job id must not be empty", job_type=job_type)
    if not _utf8_ok(job_id):
        raise InvalidArgument(f"job id is not valid UTF-8 (a lone surrogate?): {_short(job_id)}", job_type=job_type)
    return job_id


def check_key_size(layout: Layout, job_type: Any, job_id: str | None = None) -> None:
    """Check that the longest key of a job fits in the store's key limit.

    Raises:
        InvalidArgument: The type and id are too long.
    """
    size = len(layout.prefix) + _KEY_OVERHEAD + _packed_size(job_type)
    if job_id is not None:
        if job_id.isascii():
            size += len(job_id) + job_id.count("\x00") + 2
        else:
            size += len(fdb.tuple.pack((job_id,)))
    if size > KEY_SIZE_LIMIT:
        what = "job type is" if job_id is None else "job type and id are"
        raise InvalidArgument(
            f"{what} too long: the job's longest key would be {size:,} bytes, over the "
            f"store's limit of {KEY_SIZE_LIMIT:,}",
            job_type=job_type,
            job_id=job_id,
        )


@functools.lru_cache(maxsize=4096)
def _packed_size(job_type: Any) -> int:
    return len(fdb.tuple.pack((job_type,)))


def check_sched_time(sched_time: Any, name: str = "scheduled_time") -> int:
    """Check a scheduled time: an int of seconds since the epoch, >= 0.

    Raises:
        InvalidArgument: ``sched_time`` is not such an int.
    """
    if isinstance(sched_time, bool) or not isinstance(sched_time, int):
        raise InvalidArgument(f"{name} must be an int, not {_short(sched_time)}")
    if not 0 <= sched_time <= INT_MAX:
        raise InvalidArgument(f"{name} must be >= 0 and fit in 64 bits, not {sched_time}")
    return sched_time


def check_optional_sched_time(sched_time: Any, name: str = "scheduled_time") -> int | None:
    """Like :func:`check_sched_time`, but None is allowed."""
    if sched_time is None:
        return None
    return check_sched_time(sched_time, name)


#: The longest wait a timeout asks for (about three years); a longer finite
#: timeout waits forever, as None does (no clock or lock can wait longer than
#: ``threading.TIMEOUT_MAX``, about 292 years, anyway).
LONGEST_WAIT = 10.0**8
#: Longest type timeout (about three years): every reader can turn it into a
#: timer and a date; a longer one is refused where written and read as this.
MAX_TYPE_TIMEOUT = LONGEST_WAIT


def check_timeout(timeout: Any, name: str = "timeout") -> float | None:
    """Check a wait timeout: None (forever) or a finite number of seconds >= 0.

    Returns:
        The timeout as a float, or None for None and for any timeout of
        :data:`LONGEST_WAIT` seconds or more (both wait forever).

    Raises:
        InvalidArgument: ``timeout`` is not such a number.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgument(f"{name} must be a number of seconds, not {_short(timeout)}")
    if not math.isfinite(timeout) or timeout < 0:
        raise InvalidArgument(f"{name} must be finite and >= 0, not {timeout!r}")
    return None if timeout >= LONGEST_WAIT else float(timeout)


def check_type_timeout(seconds: Any) -> int | float:
    """Check a type's activity timeout: a finite number of seconds > 0.

    Raises:
        InvalidArgument: ``seconds`` is not such a number.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidArgument(f"type timeout must be a number of seconds, not {_short(seconds)}")
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_TYPE_TIMEOUT:
        raise InvalidArgument(f"type timeout must be > 0 and at most {MAX_TYPE_TIMEOUT:g} s, not {seconds!r}")
    return seconds


def check_job(job: Any) -> Job:
    """Check a job handle returned by ``accept`` or ``update``.

    Raises:
        InvalidArgument: ``job`` is not a :class:`Job` with a lock.
    """
    if not isinstance(job, Job):
        raise InvalidArgument(f"job must be a Job handle returned by accept, not {_short(job)}")
    check_type(job.type)
    check_id(job.id, job.type)
    if not isinstance(job.lock, str) or not job.lock:
        raise InvalidArgument("job handle has no lock", job_type=job.type, job_id=job.id)
    return job


def check_flag(value: Any, name: str) -> bool:
    """Check a bool option.

    Raises:
        InvalidArgument: ``value`` is not a bool.
    """
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a bool, not {_short(value)}")
    return value
