"""Arrays sent to PostgreSQL in its binary wire format, encoded at once.

psycopg dumps a list parameter element by element in Python (finding the
element type, then each element's dumper); the store sends lists of up to
thousands of keys in every commit and batched read, and that dumping was
a tenth of an enqueue's time and more of a big step's. A list wrapped in
:class:`ByteaArray` or :class:`Int4Array` is encoded here in one join
instead, by the dumpers :func:`register` installs on a connection.
"""

from __future__ import annotations

import struct
from typing import Any, Optional, Sequence, cast

__all__ = ["ByteaArray", "Int4Array", "register"]

#: ndim, has-nulls flag, element type, then (length, lower bound) of the one dimension.
_HEADER = struct.Struct("!iiIii")
_EMPTY = struct.Struct("!iiI")
_LENGTH = struct.Struct("!i")
_INT4 = struct.Struct("!ii")  # an int4 element: its length (4), its value
_NULL = _LENGTH.pack(-1)
BYTEA, INT4 = 17, 23
BYTEA_ARRAY, INT4_ARRAY = 1001, 1007


class ByteaArray(list):  # type: ignore[type-arg]
    """A ``bytea[]`` parameter: bytes elements, or None for NULL."""


class Int4Array(list):  # type: ignore[type-arg]
    """An ``int4[]`` parameter: int elements that fit 32 bits."""


def encode_bytea(items: Sequence[Optional[bytes]]) -> bytes:
    """The binary wire format of a one-dimensional ``bytea[]``."""
    if not items:
        return _EMPTY.pack(0, 0, BYTEA)
    if None in items:
        pack = _LENGTH.pack
        body = b"".join(_NULL if e is None else pack(len(e)) + e for e in items)
        return _HEADER.pack(1, 1, BYTEA, len(items), 1) + body
    present = cast(Sequence[bytes], items)  # no None among them
    parts: list[bytes] = [b""] * (2 * len(present))  # each length then its bytes, interleaved in C
    parts[0::2] = map(_LENGTH.pack, map(len, present))
    parts[1::2] = present
    return _HEADER.pack(1, 0, BYTEA, len(items), 1) + b"".join(parts)


def encode_int4(items: Sequence[int]) -> bytes:
    """The binary wire format of a one-dimensional ``int4[]``."""
    if not items:
        return _EMPTY.pack(0, 0, INT4)
    pack = _INT4.pack
    return _HEADER.pack(1, 0, INT4, len(items), 1) + b"".join(pack(4, e) for e in items)


_DUMPERS: list[Any] = []


def _dumpers() -> list[Any]:
    """The two dumper classes (made once; psycopg is imported only here)."""
    if not _DUMPERS:
        from psycopg.adapt import Dumper
        from psycopg.pq import Format

        class ByteaArrayDumper(Dumper):
            format = Format.BINARY
            oid = BYTEA_ARRAY

            def dump(self, obj: Any) -> bytes:
                return encode_bytea(obj)

        class Int4ArrayDumper(Dumper):
            format = Format.BINARY
            oid = INT4_ARRAY

            def dump(self, obj: Any) -> bytes:
                return encode_int4(obj)

        _DUMPERS[:] = [(ByteaArray, ByteaArrayDumper), (Int4Array, Int4ArrayDumper)]
    return _DUMPERS


def register(adapters: Any) -> None:
    """Install the two dumpers on a connection's (or a context's) adapters."""
    for cls, dumper in _dumpers():
        adapters.register_dumper(cls, dumper)
