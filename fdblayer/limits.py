"""FoundationDB's limits, and the checks every backend applies at the call.

Principle: every backend (SQLite, PostgreSQL, FoundationDB) refuses the same
writes with the same named errors, so a key, a value, an atomic add's
operand and a versionstamp template are checked by these functions, which
each backend's transaction calls before anything reaches its store; the pure helpers of atomic
adds and versionstamps live beside them. Re-exported by
:mod:`fdblayer.interface`.
"""

from __future__ import annotations

from typing import List, Optional

from fdblayer.exceptions import (
    InvalidVersionstampOffset,
    KeyOutsideLegalRange,
    KeyTooLarge,
    StoreTypeError,
    ValueTooLarge,
)
from fdblayer.selectors import END_OF_KEYSPACE

__all__ = [
    "MAX_KEY_SIZE",
    "MAX_VALUE_SIZE",
    "MAX_TRANSACTION_SIZE",
    "VERSIONSTAMP_SIZE",
    "check_key",
    "check_write_key",
    "check_value",
    "add_little_endian",
    "add_params",
    "apply_adds",
    "splice_versionstamp",
    "check_versionstamp_template",
    "strinc",
]

MAX_KEY_SIZE = 10_000
MAX_VALUE_SIZE = 100_000
MAX_TRANSACTION_SIZE = 10_000_000
VERSIONSTAMP_SIZE = 10


def check_key(key: object) -> bytes:
    """Validate a key given to a read or write.

    Raises:
        StoreTypeError: when the key is not bytes.
        KeyTooLarge: when it is longer than 10,000 bytes.
    """
    if type(key) is not bytes:  # the common case skips the isinstance and the copy
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise StoreTypeError(f"key must be bytes, got {type(key).__name__}: {key!r:.80}")
        key = bytes(key)
    if len(key) > MAX_KEY_SIZE:
        raise KeyTooLarge(f"key of {len(key)} bytes exceeds the limit of {MAX_KEY_SIZE}")
    return key


def check_write_key(key: object) -> bytes:
    """Validate a key given to a write: as ``check_key``, and below ``b'\\xff'``.

    Raises:
        KeyOutsideLegalRange: for keys in the system keyspace.
    """
    key = check_key(key)
    if key >= END_OF_KEYSPACE:
        raise KeyOutsideLegalRange(f"key {key!r:.80} is in the system keyspace (>= b'\\xff')")
    return key


def check_value(value: object) -> bytes:
    """Validate a value.

    Raises:
        StoreTypeError: when the value is not bytes.
        ValueTooLarge: when it is longer than 100,000 bytes.
    """
    if type(value) is not bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise StoreTypeError(f"value must be bytes, got {type(value).__name__}: {value!r:.80}")
        value = bytes(value)
    if len(value) > MAX_VALUE_SIZE:
        raise ValueTooLarge(f"value of {len(value)} bytes exceeds the limit of {MAX_VALUE_SIZE}")
    return value


def add_little_endian(current: Optional[bytes], param: bytes) -> bytes:
    """FoundationDB's atomic ``add``: little-endian, wrapping, sized by ``param``.

    The existing value is zero-padded or truncated to ``len(param)``, then the
    two unsigned little-endian integers are added modulo ``2**(8*len(param))``.
    """
    size = len(param)
    if size == 0:
        return b""
    base = (current or b"")[:size].ljust(size, b"\x00")
    total = int.from_bytes(base, "little") + int.from_bytes(param, "little")
    return (total % (1 << (8 * size))).to_bytes(size, "little")


def add_params(queued: List[List[int]]) -> List[bytes]:
    """The params of buffered adds kept as ``[[width, sum], ...]`` (consecutive
    adds of one width summed), each sum reduced to its width."""
    return [(total % (1 << (8 * width))).to_bytes(width, "little") for width, total in queued]


def apply_adds(current: Optional[bytes], queued: List[List[int]]) -> bytes:
    """``current`` after the buffered adds ``queued``, in order (see :func:`add_params`)."""
    value = current
    for param in add_params(queued):
        value = add_little_endian(value, param)
    return value if value is not None else b""


def splice_versionstamp(data: bytes, stamp: bytes) -> bytes:
    """Fill the placeholder of an API>=520 versionstamped key or value.

    The last 4 bytes of ``data`` are the little-endian position of the 10-byte
    placeholder; they are stripped and the placeholder replaced by ``stamp``.

    Raises:
        InvalidVersionstampOffset: when the position does not fit.
    """
    if len(data) < 4:
        raise InvalidVersionstampOffset("versionstamped data shorter than its 4-byte offset")
    pos = int.from_bytes(data[-4:], "little")
    body = data[:-4]
    if pos + VERSIONSTAMP_SIZE > len(body):
        raise InvalidVersionstampOffset(f"versionstamp offset {pos} + 10 exceeds the data length {len(body)}")
    return body[:pos] + stamp + body[pos + VERSIONSTAMP_SIZE :]


def check_versionstamp_template(data: object, what: str) -> bytes:
    """Validate the template of a versionstamped write (type and offset).

    Raises:
        StoreTypeError: when not bytes.
        InvalidVersionstampOffset: when the placeholder does not fit.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StoreTypeError(f"versionstamped {what} must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < 4:
        raise InvalidVersionstampOffset("versionstamped data shorter than its 4-byte offset")
    pos = int.from_bytes(data[-4:], "little")
    if pos + VERSIONSTAMP_SIZE > len(data) - 4:
        raise InvalidVersionstampOffset(f"versionstamp offset {pos} + 10 exceeds the data length {len(data) - 4}")
    return data


def strinc(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix``.

    Raises:
        StoreTypeError: when the prefix is empty or all ``0xff``.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise StoreTypeError(f"no key follows every key with prefix {prefix!r}")
    return stripped[:-1] + bytes([stripped[-1] + 1])
