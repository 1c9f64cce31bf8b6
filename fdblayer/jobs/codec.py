"""Encoding of job data and of the job value (the DATA row).

Principle: job data is checked and encoded *before* any transaction starts,
so data that cannot be stored raises :class:`EncodingError` and writes
nothing. The check is strict and total: what it accepts round-trips through
msgpack to an equal value, and is also valid JSON.

Job data decisions (the seed requires a map and encodes it with jiffy):

* The top-level value is a ``dict``; anything else is ``InvalidArgument``
  (the seed's guard ``is_map(JobData)``).
* Inside it: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
  ``float``, ``bool`` and ``None``, nested at most :data:`MAX_DEPTH` deep.
  Subclasses of those types (``IntEnum``, ``OrderedDict``, a str Enum) are
  accepted and read back as the base type, as ``json.dumps`` does.
* ``int`` is limited to signed 64 bits, ``[-2**63, 2**63 - 1]``.
* ``float`` must be finite: NaN and the infinities are not JSON.
* ``str`` (values and keys) must be encodable as UTF-8 (no lone
  surrogates).
* Refused, each with a message naming the path of the bad value: non-str
  dict keys, ``tuple`` (it would come back as a list), ``set``, ``bytes``,
  ``bytearray``, ``datetime``, ``Decimal`` and any other object; cycles
  (reported as too deep).
* Size: the encoded data is stored twice (the DATA row and the ACTIVITY
  row), each under the store's value limit (FoundationDB's 100,000 bytes);
  larger data is ``EncodingError`` too.

The job value is the seed's tuple ``(seq, lock, sched_time, resubmit,
data)``, tuple-packed, with ``data`` the msgpack bytes. A running job's
``seq`` is written as an incomplete versionstamp with
``set_versionstamped_value`` and reads back complete.
"""

from __future__ import annotations

import collections
import functools
import logging
import math
from typing import Any, NamedTuple, Optional, Union, cast

import fdb.tuple
import msgpack

from fdblayer.interface import MAX_KEY_SIZE, MAX_VALUE_SIZE
from fdblayer.jobs import fasttuple
from fdblayer.jobs.exceptions import CorruptValue, EncodingError, InvalidArgument
from fdblayer.jobs.keys import new_versionstamp

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_DEPTH",
    "INT_MIN",
    "INT_MAX",
    "KEY_SIZE_LIMIT",
    "VALUE_SIZE_LIMIT",
    "PENDING_SEQ",
    "Seq",
    "JobValue",
    "encode_data",
    "decode_data",
    "check_stored_size",
    "running_seq",
    "pack_job_value",
    "pack_bytes_element",
    "unpack_job_value",
    "pack_activity_value",
    "unpack_activity_value",
]

MAX_DEPTH = 256
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

# FoundationDB's limits, which every backend enforces.
KEY_SIZE_LIMIT = MAX_KEY_SIZE
VALUE_SIZE_LIMIT = MAX_VALUE_SIZE

# Room in the DATA row for everything but the data: a versionstamp (13
# bytes), a 32-character lock (34), a 64-bit time (10), the flag (1), the
# data's type code and terminator (2), and the 4-byte versionstamp offset.
_JOB_VALUE_OVERHEAD = 64

PENDING_SEQ = 0

Seq = Union[None, int, fdb.tuple.Versionstamp]

_EMPTY_DATA: bytes = msgpack.packb({})


def _path(parent: str, part: Any) -> str:
    return f"{parent}[{part!r}]"


def _check_value(value: Any, path: str, depth: int) -> None:
    """Raise EncodingError unless ``value`` is a storable JSON-like value."""
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str):
            _check_str(value, path)
        return
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise EncodingError(f"job data: integer at {path} is outside the signed 64-bit range")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EncodingError(f"job data: {value!r} at {path} is not a finite number")
        return
    if depth >= MAX_DEPTH:
        raise EncodingError(f"job data: nested deeper than {MAX_DEPTH} levels at {path} (or it contains a cycle)")
    if isinstance(value, dict):
        _check_dict(value, path, depth)
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_value(item, _path(path, index), depth + 1)
        return
    raise EncodingError(
        f"job data: {type(value).__name__} at {path} is not a JSON-compatible "
        "value (dict with str keys, list, str, int, float, bool or None)"
    )


def _check_dict(value: dict[Any, Any], path: str, depth: int) -> None:
    for key, item in value.items():
        if not isinstance(key, str):
            raise EncodingError(f"job data: key {key!r} at {path} is a {type(key).__name__}; keys must be str")
        _check_str(key, path)
        _check_value(item, _path(path, key), depth + 1)


def _check_str(value: str, path: str) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodingError(f"job data: str at {path} is not valid UTF-8: {exc}") from None


def _plain_ok(value: Any, depth: int) -> bool:
    """True when ``value`` is storable and made only of the exact base types.

    The common case, checked without building paths or messages. False
    says nothing more: :func:`_check_value` then walks the value again,
    accepting subclasses and naming the path of what it refuses.
    """
    kind = type(value)
    if kind is str:
        return value.isascii() or _utf8_ok(value)
    if kind is int:
        return bool(INT_MIN <= value <= INT_MAX)
    if kind is float:
        return bool(value - value == 0.0)  # false for NaN and the infinities
    if value is None or kind is bool:
        return True
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _utf8_ok(key)):
                return False
            if not _plain_ok(item, depth + 1):
                return False
        return True
    if kind is list:
        for item in value:
            if not _plain_ok(item, depth + 1):
                return False
        return True
    return False


def _utf8_ok(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_data(data: Any) -> bytes:
    """Check and encode job data.

    Args:
        data: The job data, a dict of JSON-compatible values.

    Returns:
        The msgpack encoding of ``data``.

    Raises:
        InvalidArgument: ``data`` is not a dict.
        EncodingError: ``data`` holds a value that is not JSON-compatible, or
            its encoding is larger than the store can hold.
    """
    if not isinstance(data, dict):
        raise InvalidArgument(f"job data must be a dict, not {type(data).__name__}")
    if not data:
        return _EMPTY_DATA
    if not _plain_ok(data, 0):
        _check_dict(data, "data", 0)
    try:
        encoded: bytes = msgpack.packb(data, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodingError(f"job data cannot be encoded: {exc}") from None
    if len(encoded) + _JOB_VALUE_OVERHEAD > VALUE_SIZE_LIMIT:
        raise EncodingError(
            f"job data encodes to {len(encoded)} bytes; at most "
            f"{VALUE_SIZE_LIMIT - _JOB_VALUE_OVERHEAD} bytes fit in a store value"
        )
    return encoded


def decode_data(encoded: bytes) -> dict[str, Any]:
    """Decode job data written by :func:`encode_data`.

    Raises:
        CorruptValue: ``encoded`` is not such data.
    """
    try:
        return cast(dict[str, Any], msgpack.unpackb(encoded, raw=False, use_list=True))
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the same corrupt data
        raise CorruptValue(f"undecodable job data ({_reason(exc)})") from None


def check_stored_size(job_id: str, encoded: bytes) -> None:
    """Check that ``encoded`` data fits in both rows that store it.

    The escaping of zero bytes by the tuple encoding is counted.

    Raises:
        EncodingError: A row would exceed the store's value limit.
    """
    escaped = len(encoded) + encoded.count(0)
    if job_id.isascii():
        packed_id = len(job_id) + job_id.count("\x00") + 2
    else:
        packed_id = len(fdb.tuple.pack((job_id,)))
    overhead = max(_JOB_VALUE_OVERHEAD, packed_id + 2)
    if escaped + overhead > VALUE_SIZE_LIMIT:
        raise EncodingError(
            f"job data of {len(encoded)} bytes does not fit in a store value of at most {VALUE_SIZE_LIMIT} bytes",
            job_id=job_id,
        )


class JobValue(NamedTuple):
    """The decoded DATA row of one job (a named tuple: made on every
    transition, and a tuple is built several times faster than a frozen
    dataclass).

    Attributes:
        seq: 0 when pending, None when finished, a versionstamp when running.
        lock: The running job's lock, else None.
        sched_time: The scheduled time, seconds since the epoch (0: now).
        resubmit: Whether a running job is to be re-enqueued when it finishes.
        data: The msgpack-encoded job data.
        priority: 0 (the default, first) to 9; stored only when not 0, so a
            row of the seed's shape reads as priority 0.
    """

    seq: Seq
    lock: str | None
    sched_time: int
    resubmit: bool
    data: bytes
    priority: int = 0

    @property
    def stamped(self) -> bool:
        """True when ``seq`` is to be filled in by the commit's versionstamp."""
        return isinstance(self.seq, fdb.tuple.Versionstamp) and not self.seq.is_complete()


def pack_job_value(value: JobValue) -> bytes:
    """Pack a job value; stamped values are for ``set_versionstamped_value``."""
    if value.lock is None:
        # Pending and finished rows: the packed head recurs (concatenative
        # encoding, as for keys), only the data differs.
        head = _unlocked_head(value.seq, value.sched_time, value.resubmit)
        tail = fdb.tuple.pack((value.priority,)) if value.priority else b""
        return head + pack_bytes_element(value.data) + tail
    fields: tuple[Any, ...] = (value.seq, value.lock, value.sched_time, value.resubmit, value.data)
    if value.priority:
        fields += (value.priority,)
    if value.stamped:
        return fasttuple.pack_with_versionstamp(fields)
    return fasttuple.pack(fields)


def pack_bytes_element(data: bytes) -> bytes:
    """Return ``fdb.tuple.pack((data,))`` for bytes, without the generic packer.

    The tuple layer's byte-string encoding: type code 0x01, the bytes with
    each zero escaped as ``00 ff``, then a zero terminator.
    """
    return b"\x01" + data.replace(b"\x00", b"\x00\xff") + b"\x00"


@functools.lru_cache(maxsize=4096)
def _unlocked_head(seq: Optional[int], sched_time: int, resubmit: bool) -> bytes:
    return cast(bytes, fdb.tuple.pack((seq, None, sched_time, resubmit)))


def unpack_job_value(raw: bytes) -> JobValue:
    """Unpack a DATA row value.

    Raises:
        CorruptValue: ``raw`` is not a job value as this module writes them.
    """
    try:
        seq, lock, sched_time, resubmit, data, *more = fasttuple.unpack(raw)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the same corrupt row
        raise CorruptValue(f"undecodable job value ({_reason(exc)})") from None
    priority = more[0] if len(more) == 1 else 0
    if not (
        isinstance(seq, (fdb.tuple.Versionstamp, int, type(None)))
        and isinstance(lock, (str, type(None)))
        and isinstance(sched_time, int)
        and isinstance(resubmit, bool)
        and isinstance(data, bytes)
        and len(more) <= 1
        and isinstance(priority, int)
        and not isinstance(priority, bool)
        and 0 <= priority <= 9
    ):
        raise CorruptValue("job value of the wrong shape")
    return JobValue(seq, lock, sched_time, resubmit, data, priority)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:80]}"


_REPORTED: "collections.OrderedDict[tuple[Any, ...], None]" = collections.OrderedDict()


def report_bad_row(what: str, key: bytes, error: Any) -> None:
    """Log a stored row that a reader skips, once per (what, key) while the
    process remembers it (the last 1,024), so a scan that meets it every
    second does not flood the log."""
    mark = (what, bytes(key[:200]))
    if mark in _REPORTED:
        _REPORTED.move_to_end(mark)
        return
    _REPORTED[mark] = None
    if len(_REPORTED) > 1024:
        _REPORTED.popitem(last=False)
    logger.warning("stored_value_skipped what=%s key=%r error=%s", what, bytes(key[:80]), error)


def unpack_activity_value_or_none(key: bytes, raw: bytes) -> Optional[tuple[str, bytes]]:
    """:func:`unpack_activity_value`, or None (logged) for a corrupt row."""
    try:
        job_id, data = unpack_activity_value(raw)
    except Exception as exc:  # noqa: BLE001 - a corrupt index row is skipped
        report_bad_row("activity", key, _reason(exc))
        return None
    if not isinstance(job_id, str) or not isinstance(data, bytes):
        report_bad_row("activity", key, "wrong shape")
        return None
    return job_id, data


def running_seq(user_version: int = 0) -> fdb.tuple.Versionstamp:
    """Return the seq of a job value being accepted or updated (``user_version``
    as for :meth:`~fdblayer.jobs.keys.Layout.activity_key_stamped`)."""
    return new_versionstamp(user_version)


def pack_activity_value(job_id: str, data: bytes) -> bytes:
    """Pack an ACTIVITY row value ``(job_id, data)``."""
    return fasttuple.pack((job_id, data))


def unpack_activity_value(raw: bytes) -> tuple[str, bytes]:
    """Unpack an ACTIVITY row value into ``(job_id, data)``."""
    job_id, data = fasttuple.unpack(raw)
    return job_id, data
