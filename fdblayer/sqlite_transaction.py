"""Transactions of the SQLite backend (see ``sqlite_backend`` for the design).

Principle: a transaction is lazy. Its first read opens a deferred SQLite read
transaction (a snapshot); its first write takes SQLite's write lock, either
by upgrading the snapshot (which fails with ConflictError when anyone
committed since) or, when it has not read yet or is pessimistic (a retry),
with ``BEGIN IMMEDIATE`` behind the fair write queue. Writes go straight into
SQLite, so reads see them; COMMIT commits.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import time
from types import TracebackType
from typing import TYPE_CHECKING, List, Optional, Type

from fdblayer.exceptions import (
    InvalidTransactionState,
    LockTimeout,
    NoCommitVersion,
    StoreError,
    TransactionTooLarge,
)
from fdblayer.interface import (
    MAX_TRANSACTION_SIZE,
    ReadView,
    Transaction,
    VersionstampFuture,
    add_little_endian,
    check_key,
    check_value,
    check_versionstamp_template,
    check_write_key,
    splice_versionstamp,
)
from fdblayer.selectors import END_OF_KEYSPACE, KeyOrSelector, KeySelector, KeyValue, to_selector
from fdblayer.sqlite_backend import (
    _BUSY_BACKOFF_MAX,
    _BUSY_BACKOFF_MIN,
    SQL_BUMP_VERSION,
    SQL_CLEAR,
    SQL_CLEAR_RANGE,
    SQL_GET,
    SQL_PIN_SNAPSHOT,
    SQL_SET,
    _is_busy,
    map_sqlite_error,
)
from fdblayer.watches import Watch

if TYPE_CHECKING:
    from fdblayer.sqlite_backend import SqliteDatabase

__all__ = ["SqliteTransaction"]

logger = logging.getLogger(__name__)


class _Guard:
    """``with tr._guard():`` maps sqlite3 errors to store errors and ends ``tr``."""

    __slots__ = ("_tr",)

    def __init__(self, tr: "SqliteTransaction") -> None:
        self._tr = tr

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        if exc is None or not isinstance(exc, sqlite3.Error):
            return False
        error = map_sqlite_error(exc, self._tr.db.path)
        self._tr._fail(error)
        raise error from exc


class _SnapshotView(ReadView):
    """``tr.snapshot``: the same reads (SQLite reads never add finer conflicts)."""

    def __init__(self, tr: "SqliteTransaction") -> None:
        self._tr = tr

    def get(self, key: bytes) -> Optional[bytes]:
        return self._tr.get(key)

    def get_key(self, selector: KeyOrSelector) -> bytes:
        return self._tr.get_key(selector)

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        return self._tr.get_range(begin, end, limit=limit, reverse=reverse)


class SqliteTransaction(Transaction):
    """A transaction on an ``SqliteDatabase`` (see the module docstring).

    Args:
        db: the database.
        pessimistic: take the write lock before the first read.
    """

    def __init__(self, db: SqliteDatabase, pessimistic: bool = False) -> None:
        self._db = db
        self.pessimistic = pessimistic
        self._snapshot_view = _SnapshotView(self)
        self._init_state()

    def _init_state(self) -> None:
        self._conn: Optional[sqlite3.Connection] = None
        self._conn_pid = 0
        self._mode: Optional[str] = None  # None, "read" or "write"
        self._gate_held = False
        self._version: Optional[int] = None
        self._size = 0
        self._watches: List[Watch] = []
        self._stamp: Optional[VersionstampFuture] = None
        self._closed: Optional[str] = None  # None, "committed" or "cancelled"
        self._error: Optional[StoreError] = None

    @property
    def db(self) -> SqliteDatabase:
        return self._db

    @property
    def snapshot(self) -> ReadView:
        return self._snapshot_view

    # ------------------------------------------------------------ lifecycle

    def _ensure_usable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed is not None:
            raise InvalidTransactionState(f"transaction already {self._closed}; call reset()")
        if self._conn is not None and self._conn_pid != os.getpid():
            raise InvalidTransactionState("transaction crossed os.fork(); create a new one")

    def _guard(self) -> "_Guard":
        """Turn sqlite3 errors into store errors that end the transaction."""
        return _Guard(self)

    def _fail(self, error: StoreError) -> None:
        """Discard the SQLite transaction; every later call raises ``error``."""
        self._error = error
        self._release(rollback=True)

    def _release(self, rollback: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            if rollback and conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error as exc:
                    logger.warning("Store %s: rollback failed: %s", self._db.path, exc)
            self._db.checkin(conn, self._conn_pid)
        if self._gate_held:
            self._gate_held = False
            self._db.gate().release()
        self._mode = None

    def _lock_deadline(self) -> float:
        if self.deadline is not None:
            return self.deadline
        return time.monotonic() + self._db.lock_timeout

    def _begin_read(self) -> None:
        self._conn = self._db.checkout()
        self._conn_pid = os.getpid()
        conn = self._conn

        def begin() -> None:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute("BEGIN")
            conn.execute(SQL_PIN_SNAPSHOT).fetchall()  # the snapshot starts now

        try:  # no snapshot yet: a transient SQLITE_BUSY (WAL restart) is waited out
            self._db._retry_busy(begin, self._lock_deadline())
        except StoreError as error:
            self._fail(error)
            raise
        self._mode = "read"

    def _begin_write(self) -> None:
        deadline = self._lock_deadline()
        if not self._db.gate().acquire(deadline):
            raise LockTimeout(f"store {self._db.path}: write queue wait timed out")
        self._gate_held = True
        try:
            self._conn = self._db.checkout()
        except StoreError as error:
            self._fail(error)
            raise
        self._conn_pid = os.getpid()
        delay = _BUSY_BACKOFF_MIN
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    error = map_sqlite_error(exc, self._db.path)
                    self._fail(error)
                    raise error from exc
            if time.monotonic() > deadline:
                self._release(rollback=True)
                raise LockTimeout(f"store {self._db.path}: write lock wait timed out")
            time.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, _BUSY_BACKOFF_MAX)
        self._mode = "write"

    def _bump_version(self) -> None:
        assert self._conn is not None
        with self._guard():
            self._version = self._conn.execute(SQL_BUMP_VERSION).fetchone()[0]

    def _upgrade(self) -> None:
        """Read -> write: the next write statement takes the lock, or raises
        ConflictError (via ``_guard``) when anyone committed since the snapshot."""
        self._mode = "write"

    def _read_conn(self) -> sqlite3.Connection:
        self._ensure_usable()
        if self._mode is None:
            if self.pessimistic:
                self._begin_write()
            else:
                self._begin_read()
        assert self._conn is not None
        return self._conn

    def _write_conn(self, size: int) -> sqlite3.Connection:
        self._ensure_usable()
        if self._size + size > MAX_TRANSACTION_SIZE:
            self._fail(
                TransactionTooLarge(
                    f"transaction of {self._size + size} bytes exceeds {MAX_TRANSACTION_SIZE}"
                )
            )
            assert self._error is not None
            raise self._error
        if self._mode is None:
            self._begin_write()
        elif self._mode == "read":
            self._upgrade()
        self._size += size
        assert self._conn is not None
        return self._conn

    def commit(self) -> None:
        """Commit; resolve the versionstamp and arm the watches (see ``Transaction``)."""
        self._ensure_usable()
        if self._watches and self._mode is None:
            self._read_conn()
        watched = [(w, self._get(w.key)) for w in self._watches] if self._watches else []
        wrote = self._mode == "write"
        if wrote and self._stamp is not None and self._version is None:
            self._bump_version()
        if self._conn is not None:
            with self._guard():
                self._conn.execute("COMMIT")
        self._release(rollback=False)
        self._closed = "committed"
        if wrote:
            self._db.notify_commit()
        if self._stamp is not None:
            if wrote:
                self._stamp.set_result(self._stamp_bytes())
            else:
                self._stamp.set_exception(NoCommitVersion("transaction committed no writes"))
        if watched:
            hub = self._db.hub()
            for watch, value in watched:
                hub.register(watch.key, value, watch)

    def cancel(self) -> None:
        """Discard every write and watch; later calls raise until ``reset``."""
        self._release(rollback=True)
        if self._closed is None:
            self._closed = "cancelled"
        for watch in self._watches:
            watch.cancel()
        if self._stamp is not None and not self._stamp.is_ready():
            self._stamp.set_exception(InvalidTransactionState("transaction cancelled"))

    def reset(self) -> None:
        """Discard everything and start afresh (keeps ``pessimistic`` and ``deadline``)."""
        self.cancel()
        self._init_state()

    def on_error(self, error: BaseException) -> None:
        """Back off and reset; the retry takes the write lock first (cannot conflict)."""
        super().on_error(error)
        self.pessimistic = True

    def __del__(self) -> None:
        if getattr(self, "_conn", None) is not None and self._conn_pid == os.getpid():
            self._release(rollback=True)

    # ------------------------------------------------------------ reads

    def _get(self, key: bytes) -> Optional[bytes]:
        conn = self._read_conn()
        with self._guard():
            row = conn.execute(SQL_GET, (key,)).fetchone()
        return None if row is None else row[0]

    def get(self, key: bytes) -> Optional[bytes]:
        """Read one key (``None`` when absent)."""
        return self._get(check_key(key))

    def _resolve(self, conn: sqlite3.Connection, selector: KeySelector) -> bytes:
        key, or_equal, offset = selector.key, selector.or_equal, selector.offset
        if offset >= 1:
            op = ">" if or_equal else ">="
            sql = f"SELECT k FROM kv WHERE k {op} ? ORDER BY k LIMIT 1 OFFSET ?"
            row = conn.execute(sql, (key, offset - 1)).fetchone()
            return END_OF_KEYSPACE if row is None else min(row[0], END_OF_KEYSPACE)
        op = "<=" if or_equal else "<"
        sql = f"SELECT k FROM kv WHERE k {op} ? ORDER BY k DESC LIMIT 1 OFFSET ?"
        row = conn.execute(sql, (key, -offset)).fetchone()
        return b"" if row is None else min(row[0], END_OF_KEYSPACE)

    def _bound(self, conn: sqlite3.Connection, selector: KeySelector) -> bytes:
        """A key bound equivalent to the selector (no query for the usual shapes)."""
        if selector.offset == 1:
            return selector.key + b"\x00" if selector.or_equal else selector.key
        return self._resolve(conn, selector)

    def get_key(self, selector: KeyOrSelector) -> bytes:
        """Resolve a key selector against the transaction's view."""
        sel = to_selector(selector)
        conn = self._read_conn()
        with self._guard():
            return self._resolve(conn, sel)

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        """Rows with ``begin <= key < end`` (see ``ReadView.get_range``)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        begin_sel, end_sel = to_selector(begin), to_selector(end)
        conn = self._read_conn()
        with self._guard():
            low = self._bound(conn, begin_sel)
            high = min(self._bound(conn, end_sel), END_OF_KEYSPACE)
            if low >= high:
                return []
            order = "DESC" if reverse else "ASC"
            sql = f"SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k {order}"
            if limit:
                rows = conn.execute(sql + " LIMIT ?", (low, high, limit)).fetchall()
            else:
                rows = conn.execute(sql, (low, high)).fetchall()
        return [KeyValue(k, v) for k, v in rows]

    # ------------------------------------------------------------ writes

    def set(self, key: bytes, value: bytes) -> None:
        """Write one key (see ``Transaction.set``)."""
        key, value = check_write_key(key), check_value(value)
        conn = self._write_conn(len(key) + len(value))
        with self._guard():
            conn.execute(SQL_SET, (key, value))

    def clear(self, key: bytes) -> None:
        """Remove one key."""
        key = check_write_key(key)
        conn = self._write_conn(len(key))
        with self._guard():
            conn.execute(SQL_CLEAR, (key,))

    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Remove ``[begin, end)``."""
        begin, end = check_key(begin), check_key(end)
        end = min(end, END_OF_KEYSPACE)
        if begin >= end:
            return
        conn = self._write_conn(len(begin) + len(end))
        with self._guard():
            conn.execute(SQL_CLEAR_RANGE, (begin, end))

    def add(self, key: bytes, param: bytes) -> None:
        """Atomic little-endian add (FoundationDB's ``add``)."""
        key, param = check_write_key(key), check_value(param)
        conn = self._write_conn(len(key) + len(param))
        with self._guard():
            row = conn.execute(SQL_GET, (key,)).fetchone()
            conn.execute(SQL_SET, (key, add_little_endian(row and row[0], param)))

    def _stamp_bytes(self) -> bytes:
        """This transaction's versionstamp (taken now, under the write lock, if needed)."""
        if self._version is None:
            self._bump_version()
        assert self._version is not None
        return self._version.to_bytes(8, "big") + b"\x00\x00"

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        """Write at ``key`` with its placeholder replaced by the commit's versionstamp."""
        template = check_versionstamp_template(key, "key")
        check_write_key(splice_versionstamp(template, b"\x00" * 10))
        value = check_value(value)
        conn = self._write_conn(len(template) + len(value))
        final = splice_versionstamp(template, self._stamp_bytes())
        with self._guard():
            conn.execute(SQL_SET, (final, value))

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        """Write at ``key`` a value whose placeholder is the commit's versionstamp."""
        key = check_write_key(key)
        template = check_versionstamp_template(value, "value")
        check_value(template[:-4])
        conn = self._write_conn(len(key) + len(template))
        with self._guard():
            conn.execute(SQL_SET, (key, splice_versionstamp(template, self._stamp_bytes())))

    def get_versionstamp(self) -> VersionstampFuture:
        """The future of this transaction's versionstamp (ask before ``commit``)."""
        if self._stamp is None:
            self._stamp = VersionstampFuture()
            if self._closed is not None:
                self._stamp.set_exception(
                    InvalidTransactionState("get_versionstamp() must be called before commit")
                )
        return self._stamp

    def watch(self, key: bytes) -> Watch:
        """A watch on ``key``, armed when this transaction commits."""
        self._ensure_usable()
        watch = Watch(check_key(key))
        self._watches.append(watch)
        return watch

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        """Pin the snapshot: any commit after it makes this transaction's writes conflict."""
        check_key(begin), check_key(end)
        self._read_conn()
