"""The arguments of a PostgreSQL transaction's commit call, from its buffer
(a mixin of :class:`~fdblayer.backends.postgres_transaction.PostgresTransaction`).

The commit function (``postgres_sql``) takes the transaction's read ranges
and read version, its clears, sets, adds, versionstamped writes and
guesses as parallel arrays, and a note naming the keys it changed (for the
watch hubs). Both are built here from the buffer the transaction owns
(see its module docstring for what each attribute holds).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from fdblayer.backends.postgres_arrays import ByteaArray, Int4Array
from fdblayer.limits import add_params

__all__ = ["CommitArgs"]


def _bytea(items: Sequence[Optional[bytes]]) -> Optional[ByteaArray]:
    """A ``bytea[]`` argument: None (SQL NULL) for no items."""
    return ByteaArray(items) if items else None


def _int4(items: Sequence[int]) -> Optional[Int4Array]:
    """An ``int[]`` argument: None (SQL NULL) for no items."""
    return Int4Array(items) if items else None


class CommitArgs:
    """What a commit sends, read from the transaction's buffer."""

    _read_version: Optional[int]
    _read_keys: set[bytes]
    _read_ranges: List[Tuple[bytes, bytes]]
    _sets: Dict[bytes, Optional[bytes]]
    _adds: Dict[bytes, List[List[int]]]
    _cleared: List[Tuple[bytes, bytes]]
    _stamped_keys: Dict[Tuple[bytes, int], bytes]
    _stamped_values: Dict[bytes, Tuple[bytes, int]]
    _expected: Dict[bytes, Optional[bytes]]

    def _changed_keys(self) -> Optional[Tuple[List[bytes], List[bytes]]]:
        """``(keys certainly changed, keys maybe changed)`` by this commit, or
        None when it cannot say (cleared ranges, versionstamped keys): a
        nonzero add and a stamped value always change a key; a set or a
        clear may write what was there."""
        if self._cleared or self._stamped_keys:
            return None
        certain, maybe = list(self._stamped_values), list(self._sets)
        for key, queued in self._adds.items():
            (certain if len(queued) == 1 and queued[0][1] % (1 << (8 * queued[0][0])) else maybe).append(key)
        return certain, maybe

    def _commit_args(self) -> Tuple[Any, ...]:
        """The commit function's arguments: each array encoded at once
        (``postgres_arrays``), an empty one sent as NULL, which the function
        reads alike (12 of the 17 are empty in an enqueue)."""
        checked = bool(self._read_keys or self._read_ranges)
        rb = [k for k in self._read_keys] + [b for b, _ in self._read_ranges]
        re_ = [k + b"\x00" for k in self._read_keys] + [e for _, e in self._read_ranges]
        sets = [(k, v) for k, v in self._sets.items() if v is not None]
        adds = [(k, p) for k, queued in self._adds.items() for p in add_params(queued)]
        return (
            self._read_version if checked else None,
            _bytea(rb),
            _bytea(re_),
            _bytea([b for b, _ in self._cleared]),
            _bytea([e for _, e in self._cleared]),
            _bytea([k for k, _ in sets]),
            _bytea([v for _, v in sets]),
            _bytea([k for k, v in self._sets.items() if v is None]),
            _bytea([k for k, _ in adds]),
            _bytea([p for _, p in adds]),
            _bytea([t for t, _ in self._stamped_keys]),
            _int4([pos for _, pos in self._stamped_keys]),
            _bytea(list(self._stamped_keys.values())),
            _bytea(list(self._stamped_values)),
            _bytea([t for t, _ in self._stamped_values.values()]),
            _int4([pos for _, pos in self._stamped_values.values()]),
            _bytea(list(self._expected)),
            _bytea(list(self._expected.values())),
        )
