"""What a PostgreSQL transaction reads ahead or takes on trust (a mixin of
:class:`~fdblayer.backends.postgres_transaction.PostgresTransaction`).

Principle: a round trip costs more than the rows it brings, so a
transaction that knows what it will read reads it in one statement
(:meth:`ReadAhead.prefetch`: keys and forward ranges, answered later from
the snapshot's rows), and one that knows what keys hold takes them on
trust and has its commit check them (:meth:`ReadAhead.expect_many`: the
commit function compares each guess with the key under its lock and fails
as a conflict, after which the transaction's retries read). Neither
changes what a transaction sees or whether it may commit.

The state it uses (owned by the transaction): ``_known`` (key -> value
read or taken), ``_ranges`` ((begin, end) -> (limit read, rows)),
``_expected`` (key -> guessed value) and ``_expect_reads`` (kept across
retries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from fdblayer.backends.postgres_arrays import ByteaArray
from fdblayer.backends.postgres_sql import key_prefixes
from fdblayer.exceptions import ConflictError, StoreError
from fdblayer.interface import MAX_KEY_SIZE, check_key, check_value

if TYPE_CHECKING:
    from fdblayer.backends.postgres_backend import PostgresDatabase

__all__ = ["ReadAhead", "SLACK", "MANY"]

#: Rows a limited range read asks for beyond its limit (and the keys it must
#: skip), so that a few of the transaction's own clears cost no second query;
#: a prefetch reads a range with the same slack, so that the read hits it.
SLACK = 16
MANY = 1000  # keys per multi-key query


class ReadAhead:
    """Prefetched keys and ranges, and guesses checked at commit."""

    _db: PostgresDatabase
    _error: Optional[StoreError]
    _known: Dict[bytes, Optional[bytes]]
    _sets: Dict[bytes, Optional[bytes]]
    _adds: Dict[bytes, List[List[int]]]
    _ranges: Dict[Tuple[bytes, bytes], Tuple[int, List[Tuple[bytes, bytes]]]]
    _expected: Dict[bytes, Optional[bytes]]
    _expect_reads: bool

    if TYPE_CHECKING:  # the transaction's own steps, declared for the type checker only

        def _ensure_usable(self) -> None: ...
        def _in_cleared(self, key: bytes) -> bool: ...
        def _fetch(self, keys: List[bytes]) -> Dict[bytes, Optional[bytes]]: ...
        def _query(self, sql: str, params: Tuple[Any, ...]) -> List[Tuple[Any, ...]]: ...
        def _note_read(self, begin: bytes, end: bytes) -> None: ...
        def _read_many(self, keys: List[bytes], snapshot: bool) -> List[Optional[bytes]]: ...
        def _drop_connection(self, broken: bool) -> None: ...

    def prefetch(self, keys: Sequence[bytes], ranges: Sequence[Tuple[bytes, bytes, int]] = ()) -> None:
        """Read ``keys`` and the forward ``ranges`` from the snapshot in one
        statement (see ``Transaction``); a later read of one of those ranges
        with at most its limit (or of a range that had fewer rows) is
        answered from it."""
        keys = [check_key(k) if type(k) is not bytes or len(k) > MAX_KEY_SIZE else k for k in keys]
        self._ensure_usable()
        missing = [
            k for k in dict.fromkeys(keys) if k not in self._known and k not in self._sets and not self._in_cleared(k)
        ]
        todo = [
            (check_key(b), check_key(e), limit + SLACK)  # what the range read will ask of the store
            for b, e, limit in ranges
            if b < e and (b, e) not in self._ranges
        ]
        if not todo or len(missing) > MANY:
            if missing:
                self._fetch(missing)
            missing = []
        if todo:
            self._fetch_with_ranges(missing, todo)

    def _fetch_with_ranges(self, keys: List[bytes], ranges: List[Tuple[bytes, bytes, int]]) -> None:
        params: List[Any] = [key_prefixes(keys), ByteaArray(keys)]
        for low, high, limit in ranges:
            params += [low, high, low, high, limit]
        found: Dict[bytes, Optional[bytes]] = dict.fromkeys(keys)
        by_range: List[List[Tuple[bytes, bytes]]] = [[] for _ in ranges]
        for k, v, tag in self._query(self._db.sql.prefetch(len(ranges)), tuple(params)):
            if tag:
                by_range[tag - 1].append((k, v))
            else:
                found[k] = v
        for key in keys:
            self._note_read(key, key + b"\x00")
        self._known.update(found)
        for (low, high, limit), rows in zip(ranges, by_range, strict=True):
            self._note_read(low, high)
            self._ranges[(low, high)] = (limit, rows)

    def expect_many(self, keys: Sequence[bytes], values: Sequence[Optional[bytes]]) -> List[Optional[bytes]]:
        """Take ``keys`` to hold ``values`` without reading, checked by the
        commit (see ``Transaction``); keys this transaction already read or
        wrote, and every key after a commit with guesses failed, are read."""
        if len(keys) != len(values):
            raise ValueError("expect_many needs one value per key")
        keys = [check_key(k) if type(k) is not bytes or len(k) > MAX_KEY_SIZE else k for k in keys]
        for value in values:
            if value is not None:
                check_value(value)
        self._ensure_usable()
        if self._expect_reads:
            return self._read_many(keys, snapshot=False)
        for key, value in zip(keys, values, strict=True):
            if key in self._known or key in self._sets or key in self._adds or self._in_cleared(key):
                continue  # seen already: read below, never guessed
            self._expected[key] = value
            self._known[key] = value
        return self._read_many(keys, snapshot=False)

    def _check_expected(self) -> None:
        """A transaction that writes nothing: read its guessed keys (in its
        snapshot, or alone) and fail as a conflict if one holds another value."""
        guessed, self._expected = self._expected, {}
        for key in guessed:
            del self._known[key]
        found = self._fetch(list(guessed))
        if any(found[k] != v for k, v in guessed.items()):
            self._expect_reads = True
            self._error = ConflictError(f"store {self._db.where}: a key did not hold the value the transaction took")
            self._drop_connection(broken=False)
            raise self._error

    def _prefetched_range(self, low: bytes, high: bytes, limit: int) -> Optional[List[Tuple[bytes, bytes]]]:
        """The snapshot's rows of the forward range ``[low, high)`` up to
        ``limit`` (0: all) if a prefetch read them, else None."""
        cached = self._ranges.get((low, high))
        if cached is None or not (len(cached[1]) < cached[0] or 0 < limit <= cached[0]):
            return None
        return cached[1][:limit] if limit else cached[1]
