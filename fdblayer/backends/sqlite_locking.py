"""How a SQLite transaction begins: a read snapshot, or the write lock
(a mixin of :class:`~fdblayer.backends.sqlite_transaction.SqliteTransaction`).

A read begins a deferred SQLite transaction, waiting out a transient
SQLITE_BUSY (a WAL restart). A write first takes its turn in the store's
FIFO ticket lock (``fairlock``), then SQLite's lock with bounded
exponential backoff, until the transaction's deadline; past it,
``LockTimeout`` names the process that holds the lock.
"""

from __future__ import annotations

import random
import sqlite3
import time
from typing import TYPE_CHECKING, Callable, Optional

from fdblayer.backends import fairlock
from fdblayer.exceptions import LockTimeout, StoreError
from fdblayer.forks import ForkEpoch
from fdblayer.backends.sqlite_sql import _BUSY_BACKOFF_MAX, _BUSY_BACKOFF_MIN, is_busy

if TYPE_CHECKING:
    from fdblayer.backends.sqlite_backend import SqliteDatabase

__all__ = ["SqliteLocking"]


class SqliteLocking:
    """Beginning reads and writes; the transaction supplies ``_db``,
    ``deadline``, ``_conn``, ``_mode``, ``_gate_held``, ``_fail``,
    ``_release`` and ``_sqlite_failure``."""

    if TYPE_CHECKING:  # what the transaction supplies, for the type checker
        _db: SqliteDatabase
        deadline: Optional[float]
        _conn: Optional[sqlite3.Connection]
        _mode: Optional[str]
        _gate_held: bool

        def _fail(self, error: StoreError) -> None: ...
        def _release(self, rollback: bool) -> None: ...
        def _sqlite_failure(self, exc: sqlite3.Error) -> StoreError: ...

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

    def _lock_held_message(self) -> str:
        holder = fairlock.describe_holder(self._db.gate().holder())
        return (
            f"store {self._db.path}: the write lock is held by {holder} and was not released "
            f"in time (reads go on; writes wait for it to commit or exit)"
        )
