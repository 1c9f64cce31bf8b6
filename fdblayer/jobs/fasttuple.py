"""Fast paths of the tuple encoding for the jobs layer's row values.

Principle: byte-for-byte the encoding of ``fdb.tuple``, for the element
kinds the jobs layer stores in values (None, bool, 64-bit ints, str, bytes,
versionstamps), without the bindings' generic machinery, which costs tens
of microseconds per row on the hot path (accept, update, finish each pack
and unpack a job value). Anything else (floats, nested tuples, huge ints,
a malformed encoding) is handed to ``fdb.tuple`` itself, so the result is
always what ``fdb.tuple`` gives: the property tests compare the two.

The tuple layer's codes used here: 0x00 None; 0x01 bytes and 0x02 UTF-8
str, each with zero bytes escaped as ``00 ff`` and a zero terminator;
0x14 the integer 0, 0x15-0x1c a positive integer of 1-8 big-endian bytes,
0x0c-0x13 a negative one (ones' complement); 0x26 False, 0x27 True; 0x33
a 12-byte versionstamp.
"""

from __future__ import annotations

import struct
from typing import Any, cast

import fdb.tuple

__all__ = ["pack", "pack_with_versionstamp", "unpack"]

_Versionstamp = fdb.tuple.Versionstamp
_INCOMPLETE = b"\xff" * 10
_SIZE_LIMITS = tuple((1 << (8 * n)) - 1 for n in range(9))


class _Unsupported(Exception):
    """An element the fast path leaves to ``fdb.tuple``."""


def _pack_int(value: int) -> bytes:
    if value == 0:
        return b"\x14"
    if 0 < value < _SIZE_LIMITS[8]:  # 2**64 - 1 itself takes the long form, as in the bindings
        size = (value.bit_length() + 7) // 8
        return bytes((0x14 + size,)) + value.to_bytes(size, "big")
    if -_SIZE_LIMITS[8] < value < 0:
        size = ((-value).bit_length() + 7) // 8
        return bytes((0x14 - size,)) + (value + _SIZE_LIMITS[size]).to_bytes(size, "big")
    raise _Unsupported


def _pack_element(value: Any, out: list[bytes], stamp_at: list[int]) -> None:
    kind = type(value)
    if value is None:
        out.append(b"\x00")
    elif kind is str:
        out.append(b"\x02" + value.encode("utf-8").replace(b"\x00", b"\x00\xff") + b"\x00")
    elif kind is bytes:
        out.append(b"\x01" + value.replace(b"\x00", b"\x00\xff") + b"\x00")
    elif kind is bool:
        out.append(b"\x27" if value else b"\x26")
    elif kind is int:
        out.append(_pack_int(value))
    elif kind is _Versionstamp:
        if not value.is_complete():
            stamp_at.append(sum(map(len, out)) + 1)
        out.append(b"\x33" + value.to_bytes())
    else:
        raise _Unsupported


def _pack(fields: tuple[Any, ...]) -> tuple[bytes, list[int]]:
    out: list[bytes] = []
    stamp_at: list[int] = []
    for value in fields:
        _pack_element(value, out, stamp_at)
    return b"".join(out), stamp_at


def pack(fields: tuple[Any, ...]) -> bytes:
    """``fdb.tuple.pack(fields)`` (an incomplete versionstamp is refused there)."""
    try:
        packed, stamp_at = _pack(fields)
    except _Unsupported:
        return cast(bytes, fdb.tuple.pack(fields))
    if stamp_at:
        return cast(bytes, fdb.tuple.pack(fields))  # raises as the bindings do
    return packed


def pack_with_versionstamp(fields: tuple[Any, ...]) -> bytes:
    """``fdb.tuple.pack_with_versionstamp(fields)``: one incomplete versionstamp,
    its position appended as 4 little-endian bytes."""
    try:
        packed, stamp_at = _pack(fields)
    except _Unsupported:
        return cast(bytes, fdb.tuple.pack_with_versionstamp(fields))
    if len(stamp_at) != 1:
        return cast(bytes, fdb.tuple.pack_with_versionstamp(fields))  # raises as the bindings do
    return packed + struct.pack("<L", stamp_at[0])


def _read_escaped(raw: bytes, pos: int) -> tuple[bytes, int]:
    """The escaped bytes from ``pos`` to their terminator, and the next position."""
    end = raw.find(b"\x00", pos)
    while end >= 0 and raw[end + 1 : end + 2] == b"\xff":
        end = raw.find(b"\x00", end + 2)
    if end < 0:
        raise _Unsupported
    return raw[pos:end].replace(b"\x00\xff", b"\x00"), end + 1


def _read_element(raw: bytes, pos: int) -> tuple[Any, int]:
    code = raw[pos]
    pos += 1
    if code == 0x02:
        text, pos = _read_escaped(raw, pos)
        return text.decode("utf-8"), pos
    if code == 0x01:
        return _read_escaped(raw, pos)
    if 0x14 <= code <= 0x1C:
        end = pos + code - 0x14
        if end > len(raw):
            raise _Unsupported
        return int.from_bytes(raw[pos:end], "big"), end
    if 0x0C <= code < 0x14:
        size = 0x14 - code
        end = pos + size
        if end > len(raw):
            raise _Unsupported
        return int.from_bytes(raw[pos:end], "big") - _SIZE_LIMITS[size], end
    if code == 0x00:
        return None, pos
    if code == 0x26:
        return False, pos
    if code == 0x27:
        return True, pos
    if code == 0x33 and pos + 12 <= len(raw):
        return _versionstamp(bytes(raw[pos : pos + 10]), raw[pos + 10] << 8 | raw[pos + 11]), pos + 12
    raise _Unsupported


def _versionstamp(tr_version: bytes, user_version: int) -> fdb.tuple.Versionstamp:
    """``Versionstamp.from_bytes`` for 10 bytes and a 16-bit user version
    (valid by construction) without its checks: a pool's step reads one
    in every job row it ends, and the checks were half the row's unpacking."""
    stamp = _new(_Versionstamp)
    stamp.tr_version = None if tr_version == _INCOMPLETE else tr_version
    stamp.user_version = user_version
    return stamp


_new = object.__new__


def unpack(raw: bytes, prefix_len: int = 0) -> tuple[Any, ...]:
    """``fdb.tuple.unpack(raw, prefix_len)``."""
    values = []
    pos, size = prefix_len, len(raw)
    try:
        while pos < size:
            value, pos = _read_element(raw, pos)
            values.append(value)
    except (_Unsupported, UnicodeDecodeError, IndexError):
        return cast(tuple[Any, ...], fdb.tuple.unpack(raw, prefix_len))
    return tuple(values)
