"""The embedded backend: one SQLite file in WAL mode, shared by many processes.

Data model (one file ``<name>.db``, with ``-wal``, ``-shm``, ``-notify`` and
``-lock`` beside it)::

    kv(k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID   -- the keyspace; BLOB
                                                            -- order is memcmp, FDB's
    meta('commit_version') = n   -- +1 per transaction that uses a versionstamp,
                                 -- under the write lock

Principle (serializable, provably): a transaction starts lazily. Its first
read opens a deferred SQLite read transaction, a consistent snapshot. Its
first write must hold SQLite's single write lock: a transaction that has read
upgrades, and WAL mode refuses the upgrade (SQLITE_BUSY_SNAPSHOT) when anyone
committed since the snapshot, or SQLITE_BUSY while another writer holds the
lock; both become ``ConflictError``. So a transaction that writes has seen no
commit between its first read and its commit: its reads are still true when it
commits, which is serializability (stricter than FoundationDB's key-range
conflicts: snapshot reads and read-conflict ranges are whole-store here).
Writes then go straight into SQLite (read-your-writes for free) and COMMIT
commits. A retried transaction is pessimistic: it takes the write lock
(``BEGIN IMMEDIATE``) before its first read, so it cannot conflict again.

Lock waits never use SQLite's busy handler (``busy_timeout`` is 0): writers
queue in a FIFO ticket lock (``fairlock``) and then take SQLite's lock with
bounded exponential backoff and jitter, so no process starves.

Versionstamps: a transaction that uses one increments ``commit_version``
while holding the write lock, so stamps (8-byte big-endian version + 2-byte
batch 0) strictly increase in commit order across processes. Transactions
without versionstamps leave the counter alone (one page write less).

Watches: after each write commit the committer writes one byte to
``<name>.db-notify``; every process's watch thread waits on inotify for it
(see ``watches``). A process SIGKILLed mid-transaction leaves the file
consistent: SQLite rolls the uncommitted WAL frames back.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import time
import urllib.parse
from types import TracebackType
from typing import Dict, List, Mapping, Optional, Type

from fdblayer import fairlock
from fdblayer.exceptions import (
    ConflictError,
    DiskFull,
    InvalidTransactionState,
    LockTimeout,
    NoCommitVersion,
    ReadOnlyStore,
    StoreError,
    StoreUnavailable,
    TransactionTooLarge,
)
from fdblayer.interface import (
    MAX_TRANSACTION_SIZE,
    Database,
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
from fdblayer.watches import DirectoryNotifier, Watch, WatchHub

__all__ = ["SqliteDatabase", "SqliteTransaction", "SYNCHRONOUS_MODES"]

logger = logging.getLogger(__name__)

SYNCHRONOUS_MODES = ("FULL", "NORMAL")

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO meta (name, value) VALUES ('commit_version', 0)",
)
SQL_DATA_VERSION = "PRAGMA data_version"
SQL_PIN_SNAPSHOT = "SELECT 1 FROM kv LIMIT 1"
SQL_BUMP_VERSION = (
    "UPDATE meta SET value = value + 1 WHERE name = 'commit_version' RETURNING value"
)
SQL_GET = "SELECT v FROM kv WHERE k = ?"
SQL_SET = "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)"
SQL_CLEAR = "DELETE FROM kv WHERE k = ?"
SQL_CLEAR_RANGE = "DELETE FROM kv WHERE k >= ? AND k < ?"

#: Default bound, in seconds, of a wait for the write lock outside ``transactional``.
DEFAULT_LOCK_TIMEOUT = 30.0
_BUSY_BACKOFF_MIN = 0.0002
_BUSY_BACKOFF_MAX = 0.01

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_SQLITE_READONLY, _SQLITE_FULL = 8, 13
#: Connections inherited across fork: kept referenced, never used or closed.
_ABANDONED: List[sqlite3.Connection] = []


def map_sqlite_error(exc: sqlite3.Error, path: str) -> StoreError:
    """Turn an sqlite3 error into the named store error it stands for."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return ConflictError(f"store {path}: concurrent commit ({exc})")
    if primary == _SQLITE_FULL:
        return DiskFull(f"store {path}: disk or database full ({exc})")
    if primary == _SQLITE_READONLY:
        return ReadOnlyStore(f"store {path}: cannot write ({exc})")
    if isinstance(exc, (sqlite3.OperationalError, sqlite3.DatabaseError)):
        return StoreUnavailable(f"store {path}: {exc}")
    return StoreError(f"store {path}: {exc}")


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


class SqliteDatabase(Database):
    """A handle on an SQLite store file.

    Args:
        path: the database file (created when missing, unless read-only).
        synchronous: ``"FULL"`` (durable on power loss, the default) or
            ``"NORMAL"`` (durable on process crash; may lose the last commits
            on power loss).
        read_only: open the file read-only (writes raise ``ReadOnlyStore``).
        lock_timeout: seconds a transaction outside ``transactional`` waits
            for the write lock before ``LockTimeout``.
        extra_pragmas: more ``PRAGMA name = value`` for every connection
            (e.g. ``max_page_count`` in tests).
        fair: queue writers in FIFO order (``fairlock``); False leaves only
            the backoff loop on SQLite's lock (for measurements).

    Raises:
        StoreUnavailable: when the file cannot be opened or set up.
    """

    def __init__(
        self,
        path: str,
        synchronous: str = "FULL",
        *,
        read_only: bool = False,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        extra_pragmas: Optional[Mapping[str, object]] = None,
        fair: bool = True,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
        self.path = os.path.abspath(path)
        self.synchronous = synchronous.upper()
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self._extra_pragmas = dict(extra_pragmas or {})
        self.fair = fair
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._idle: List[sqlite3.Connection] = []
        self._hub: Optional[WatchHub] = None
        self._notify_fd: Optional[int] = None
        self._gate: Optional[fairlock.TicketLock] = None
        self._closed = False
        self._initialize()

    def __repr__(self) -> str:
        return f"<SqliteDatabase {self.path} synchronous={self.synchronous}>"

    # ------------------------------------------------------------ connections

    def connect(self) -> sqlite3.Connection:
        """A new connection with every setting of the store (all setup lives here).

        Raises:
            StoreUnavailable: when the file cannot be opened.
        """
        try:
            if self.read_only:
                uri = "file:" + urllib.parse.quote(self.path) + "?mode=ro"
                conn = sqlite3.connect(
                    uri, uri=True, isolation_level=None, check_same_thread=False, timeout=0
                )
            else:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=0
                )
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, self.path) from exc
        pragmas = ["busy_timeout = 0", f"synchronous = {self.synchronous}"]
        pragmas += [f"{name} = {value}" for name, value in self._extra_pragmas.items()]
        deadline = time.monotonic() + self.lock_timeout
        try:
            for pragma in pragmas:  # a transient SQLITE_BUSY (WAL restart) is waited out
                self._retry_busy(lambda: conn.execute(f"PRAGMA {pragma}").fetchall(), deadline)
        except StoreError:
            conn.close()
            raise
        return conn

    def _initialize(self) -> None:
        """Set WAL mode and create the schema, waiting out concurrent openers."""
        conn = self.connect()
        try:
            deadline = time.monotonic() + self.lock_timeout
            mode = self._retry_busy(
                lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0], deadline
            )
            if str(mode).lower() != "wal":
                raise StoreUnavailable(f"store {self.path}: cannot use WAL mode (got {mode!r})")
            if not self.read_only:
                self._retry_busy(lambda: self._create_schema(conn), deadline)
        finally:
            conn.close()

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute("COMMIT")
        except sqlite3.Error:
            conn.execute("ROLLBACK")
            raise

    def _retry_busy(self, action, deadline: float):  # type: ignore[no-untyped-def]
        delay = _BUSY_BACKOFF_MIN
        while True:
            try:
                return action()
            except sqlite3.Error as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise map_sqlite_error(exc, self.path) from exc
            time.sleep(random.uniform(0, delay))
            delay = min(delay * 2, _BUSY_BACKOFF_MAX)

    def _check_fork(self) -> None:
        """After os.fork(): drop (never reuse, never close) the parent's handles."""
        if self._pid == os.getpid():
            return
        _ABANDONED.extend(self._idle)
        self._idle = []
        self._hub = None
        self._notify_fd = None
        self._gate = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def checkout(self) -> sqlite3.Connection:
        """A connection for one transaction (reused from the idle pool when possible).

        Raises:
            StoreError: when the database is closed.
        """
        with self._lock:
            self._check_fork()
            if self._closed:
                raise InvalidTransactionState(f"store {self.path} is closed")
            if self._idle:
                return self._idle.pop()
        return self.connect()

    def checkin(self, conn: sqlite3.Connection, pid: int) -> None:
        """Give back a connection after its transaction ended."""
        with self._lock:
            if pid != os.getpid():
                _ABANDONED.append(conn)
                return
            if not self._closed and len(self._idle) < 16:
                self._idle.append(conn)
                return
        conn.close()

    def gate(self) -> fairlock.TicketLock:
        """The FIFO queue in front of SQLite's write lock (per process, fork-aware)."""
        with self._lock:
            self._check_fork()
            if self._gate is None:
                path = self.path + "-lock"
                self._gate = fairlock.TicketLock(path) if self.fair else fairlock.ThreadLock(path)
            return self._gate

    # ------------------------------------------------------------ watches

    def hub(self) -> WatchHub:
        """This process's watch hub (started on first use)."""
        with self._lock:
            self._check_fork()
            if self._hub is None:
                directory, base = os.path.split(self.path)
                names = (base + "-notify", base + "-wal")
                self._hub = WatchHub(
                    _ValueReader(self).read,
                    lambda: DirectoryNotifier(directory, names),
                    recheck_names=(base + "-wal",),
                    name=base,
                )
            return self._hub

    def notify_commit(self) -> None:
        """Tell every process's watch thread that a write transaction committed."""
        with self._lock:
            self._check_fork()
            if self._notify_fd is None:
                self._notify_fd = os.open(
                    self.path + "-notify", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644
                )
            fd, hub = self._notify_fd, self._hub
        try:
            os.pwrite(fd, b"\x01", 0)
        except OSError as exc:
            logger.warning("Store %s: cannot write the notify file: %s", self.path, exc)
        if hub is not None:
            hub.wake()

    # ------------------------------------------------------------ Database API

    def create_transaction(self) -> "SqliteTransaction":
        """A new transaction (optimistic until a conflict makes it pessimistic)."""
        return SqliteTransaction(self)

    def close(self) -> None:
        """Close idle connections, stop the watch thread, cancel pending watches."""
        with self._lock:
            self._check_fork()
            self._closed = True
            idle, self._idle = self._idle, []
            hub, self._hub = self._hub, None
            fd, self._notify_fd = self._notify_fd, None
            gate, self._gate = self._gate, None
        if hub is not None:
            hub.close()
        for conn in idle:
            conn.close()
        if fd is not None:
            os.close(fd)
        if gate is not None:
            gate.close()


class _ValueReader:
    """Reads watched keys for the hub thread, on its own connection."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self._conn: Optional[sqlite3.Connection] = None
        self._version: Optional[int] = None

    def read(self, keys: List[bytes], force: bool) -> Optional[Dict[bytes, Optional[bytes]]]:
        if self._conn is None:
            self._conn = self._db.connect()
        conn = self._conn
        try:
            conn.execute("BEGIN")
            try:
                conn.execute(SQL_PIN_SNAPSHOT).fetchall()
                version = conn.execute(SQL_DATA_VERSION).fetchone()[0]
                if version == self._version and not force:
                    return None
                values: Dict[bytes, Optional[bytes]] = {}
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    rows = conn.execute(f"SELECT k, v FROM kv WHERE k IN ({marks})", chunk)
                    values.update(rows.fetchall())
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if _is_busy(exc):
                return None if not force else self.read(keys, force)
            raise map_sqlite_error(exc, self._db.path) from exc
        self._version = version
        return values


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
