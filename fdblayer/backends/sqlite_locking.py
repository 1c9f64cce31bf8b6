"""How a SQLite transaction begins: a read snapshot, or the write lock
(a mixin of :class:`~fdblayer.backends.sqlite_transaction.SqliteTransaction`).

A read begins a deferred SQLite transaction, waiting out a transient
SQLITE_BUSY (a WAL restart). A write first takes its turn in the store's
FIFO ticket lock (``fairlock``), then SQLite's lock with bounded
exponential backoff, until the transaction's deadline; past it,
``LockTimeout`` names the process that holds the lock.

A transaction that has read takes the lock at its first write by
upgrading its snapshot (:meth:`SqliteLocking._upgrade`). SQLite refuses
that when anyone committed since the snapshot (or holds the lock now),
whatever they wrote; so what the transaction read on its snapshot is
kept: the values of the keys it read (``_fetched``, ``_checked``) and its
range, key-selector and conflict-range queries with their answers
(:meth:`SqliteLocking._recorded`). A refused upgrade ends the snapshot,
takes the lock as a write does, and reads them again: when every answer
is the same, the transaction's view is the store's now, and it goes on
under the lock; when one differs, ``ConflictError``. Snapshot reads
(``tr.snapshot``) are not checked, as on FoundationDB (a snapshot
``get_key`` is: stricter, never looser). So a transaction conflicts only
when something it read changed (by value rather than by version: a value
written back as it was is no conflict, which is still serializable, at
the commit), and the common case (a commit of other keys meanwhile: a
producer's enqueue beside the dispatcher's step) costs one lock
hand-over and the re-reads, not a retry.
"""

from __future__ import annotations

import random
import sqlite3
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from fdblayer.backends import fairlock
from fdblayer.exceptions import ConflictError, LockTimeout, StoreError
from fdblayer.forks import ForkEpoch
from fdblayer.backends.sqlite_sql import _BUSY_BACKOFF_MAX, _BUSY_BACKOFF_MIN, is_busy, read_keys

if TYPE_CHECKING:
    from fdblayer.backends.sqlite_backend import SqliteDatabase

__all__ = ["SqliteLocking"]

#: Rows (answers and queries) a snapshot's recorded reads may hold; past it
#: the transaction stops recording, and a refused upgrade is a conflict.
MAX_RECORDED_ROWS = 20_000
#: A write that changes nothing: running it upgrades a read transaction to
#: SQLite's write lock (or fails, the snapshot being stale or the lock held).
SQL_TAKE_WRITE_LOCK = "DELETE FROM meta WHERE 0"


class SqliteLocking:
    """Beginning reads and writes; the transaction supplies ``_db``,
    ``deadline``, ``_conn``, ``_mode``, ``_gate_held``, ``_revalidated``, ``_reads``,
    ``_read_rows``, ``_fetched``, ``_checked``, ``_conflict_keys``,
    ``_fail``, ``_release`` and ``_sqlite_failure``."""

    if TYPE_CHECKING:  # what the transaction supplies, for the type checker
        _db: SqliteDatabase
        deadline: Optional[float]
        _conn: Optional[sqlite3.Connection]
        _mode: Optional[str]
        _gate_held: bool
        _revalidated: bool
        _reads: Optional[List[Tuple[str, Sequence[Any], List[Any]]]]
        _read_rows: int

        def _fail(self, error: StoreError) -> None: ...
        def _release(self, rollback: bool) -> None: ...
        def _sqlite_failure(self, exc: sqlite3.Error) -> StoreError: ...

        _checked: Set[bytes]
        _fetched: Dict[bytes, Optional[bytes]]
        _conflict_keys: Set[bytes]

    def _lock_deadline(self) -> float:
        if self.deadline is not None:
            return self.deadline
        return time.monotonic() + self._db.lock_timeout

    def _checkout(self) -> sqlite3.Connection:
        conn = self._conn = self._db.checkout()
        self._epoch = ForkEpoch.value
        return conn

    def _begin_read(self) -> None:
        conn = self._conn = self._db.checkout()
        self._epoch = ForkEpoch.value

        def begin() -> None:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute("BEGIN")  # the snapshot starts at the first read

        try:
            begin()
        except sqlite3.Error as exc:
            self._begin_failed(exc, begin)
        self._mode = "read"

    def _begin_failed(self, exc: sqlite3.Error, begin: Callable[[], None]) -> None:
        """A BEGIN failed: wait out a transient SQLITE_BUSY (WAL restart), else fail."""
        if not is_busy(exc):
            raise self._sqlite_failure(exc) from exc
        try:  # no snapshot yet: nothing to lose by trying again
            self._db._retry_busy(begin, self._lock_deadline())
        except StoreError as error:
            self._fail(error)
            raise

    def _begin_write(self) -> None:
        deadline = self._lock_deadline()
        if not self._db.gate().acquire(deadline):
            raise LockTimeout(self._lock_held_message())
        self._gate_held = True
        try:
            conn = self._checkout()
        except StoreError as error:
            self._fail(error)
            raise
        self._begin_immediate(conn, deadline)

    def _begin_immediate(self, conn: sqlite3.Connection, deadline: float) -> None:
        """``BEGIN IMMEDIATE`` on ``conn`` (the gate held), retried with
        backoff while another connection holds the lock, until ``deadline``."""
        delay = _BUSY_BACKOFF_MIN
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.Error as exc:
                if not is_busy(exc):
                    raise self._sqlite_failure(exc) from exc
            if time.monotonic() > deadline:
                self._release(rollback=True)
                raise LockTimeout(self._lock_held_message())
            time.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, _BUSY_BACKOFF_MAX)
        self._mode = "write"

    # ------------------------------------------------------------ the snapshot's upgrade

    def _recorded(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> List[Any]:
        """The rows of a read query; on a snapshot (before the first write),
        the query and its answer are kept for :meth:`_revalidate`."""
        rows = conn.execute(sql, params).fetchall()
        if self._mode == "read" and self._reads is not None:
            self._read_rows += len(rows) + 1
            if self._read_rows > MAX_RECORDED_ROWS:
                self._reads = None  # too much to check again: a refused upgrade conflicts
            else:
                self._reads.append((sql, params, rows))
        return rows

    def _upgrade(self) -> None:
        """Before the first write of a transaction that has read: take
        SQLite's write lock, by upgrading the snapshot or, when SQLite
        refuses (a commit since, or the lock held), by :meth:`_revalidate`.

        Raises:
            ConflictError: something this transaction read has changed.
            LockTimeout: the lock was not free before the deadline.
        """
        if self._mode != "read":
            return
        conn = self._conn
        assert conn is not None
        try:
            conn.execute(SQL_TAKE_WRITE_LOCK)
        except sqlite3.Error as exc:
            if not is_busy(exc) or self._reads is None:
                raise self._sqlite_failure(exc) from exc
            self._note_conflict_keys(conn)
            self._revalidate(conn)
        self._mode = "write"

    def _revalidate(self, conn: sqlite3.Connection) -> None:
        """End the stale snapshot, take the lock as a write does (the gate,
        then ``BEGIN IMMEDIATE``), and run the recorded reads again: the
        same answers, or ``ConflictError``."""
        reads, self._reads = self._reads or [], None
        self._revalidated = True
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        deadline = self._lock_deadline()
        try:
            if not self._db.gate().acquire(deadline):
                raise LockTimeout(self._lock_held_message())
            self._gate_held = True
            self._begin_immediate(conn, deadline)
        except LockTimeout as timeout:
            self._fail(timeout)  # the transaction ends: its snapshot is gone
            raise
        try:
            changed = self._points_changed(conn) or any(
                conn.execute(sql, params).fetchall() != rows for sql, params, rows in reads
            )
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        if changed:
            conflict = ConflictError(f"store {self._db.path}: a value this transaction read has changed since")
            self._fail(conflict)
            raise conflict

    def _lock_held_message(self) -> str:
        holder = fairlock.describe_holder(self._db.gate().holder())
        return (
            f"store {self._db.path}: the write lock is held by {holder} and was not released "
            f"in time (reads go on; writes wait for it to commit or exit)"
        )

    def _note_conflict_keys(self, conn: sqlite3.Connection) -> None:
        """Read the single-key read conflicts (``_conflict_keys``) on the
        stale snapshot, still open, as checked point reads."""
        keys = [key for key in self._conflict_keys if key not in self._fetched]
        try:
            found = read_keys(conn, keys)
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        self._fetched.update((key, found.get(key)) for key in keys)
        self._checked.update(self._conflict_keys)

    def _points_changed(self, conn: sqlite3.Connection) -> bool:
        """True when a key read for real (not a snapshot read) holds another
        value now than the snapshot gave (under the lock, at revalidation)."""
        found = read_keys(conn, list(self._checked))
        return any(found.get(key) != self._fetched[key] for key in self._checked)
