"""The embedded backend: one SQLite file in WAL mode, shared by many processes.

Data model (one file ``<name>.db``, with ``-wal``, ``-shm``, ``-notify`` and
``-lock`` beside it)::

    kv(k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID   -- the keyspace; BLOB
                                                            -- order is memcmp, FDB's
    meta('commit_version') = n   -- +1 per transaction that uses a versionstamp,
                                 -- under the write lock

Principle (serializable, provably): a transaction starts lazily. Its first
read opens a deferred SQLite read transaction, a consistent snapshot. Its
writes wait in its memory buffer, and its first flush (at commit, or a read
of a range it wrote) must hold SQLite's single write lock: a transaction that
has read upgrades its snapshot. WAL mode refuses the upgrade
(SQLITE_BUSY_SNAPSHOT) when anyone committed since the snapshot, or
SQLITE_BUSY while another writer holds the lock; then the transaction takes
the lock anew and reads again what it read for real (``sqlite_locking``):
the same answers, and it commits under the lock; one different,
``ConflictError``. So a transaction that writes commits only where its reads
are still true, which is serializability. Conflicts are by value (a value
written back as it was is none) and snapshot reads add none, as on
FoundationDB (whose conflicts are by version). ``key_conflicts`` stays
False: one writer at a time, so the queue gains nothing by spreading claims.
A retried transaction is pessimistic: it takes the write lock
(``BEGIN IMMEDIATE``) before its first read, so it cannot conflict again.

Lock waits never use SQLite's busy handler (``busy_timeout`` is 0): writers
queue in a FIFO ticket lock (``fairlock``) and then take SQLite's lock with
bounded exponential backoff and jitter, so no process starves.

Versionstamps: a transaction that uses one increments ``commit_version``
while holding the write lock, so stamps (8-byte big-endian version + 2-byte
batch 0) strictly increase in commit order across processes. Transactions
without versionstamps leave the counter alone (one page write less).

Checkpoints: a commit does not copy the WAL back into the database file
(SQLite's automatic checkpoint would, every ~1,000 pages, with two fsyncs:
milliseconds on the commit that trips it, about a fifth of the mean commit
time at NORMAL). Each writing process runs PASSIVE checkpoints on a thread
of its own (``_Checkpointer``) after every :data:`CHECKPOINT_ROWS` rows it
wrote (a row dirties at most a page or so); SQLite's own stays as a backstop
at :data:`BACKSTOP_CHECKPOINT_PAGES`, should that thread fall behind (under
steady writes it does: see there).

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
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional

from fdblayer.backends import fairlock
from fdblayer.exceptions import StoreError, StoreUnavailable
from fdblayer.forks import ForkEpoch
from fdblayer.interface import Database, add_little_endian
from fdblayer.backends.sqlite_sql import (
    _BUSY_BACKOFF_MAX,
    _BUSY_BACKOFF_MIN,
    SCHEMA,
    SQL_DATA_VERSION,
    SQL_PIN_SNAPSHOT,
    is_busy,
    map_sqlite_error,
)
from fdblayer.backends.pooling import IdleConnections
from fdblayer.backends.sqlite_transaction import SqliteTransaction
from fdblayer.watches import DirectoryNotifier, WatchHub

__all__ = ["SqliteDatabase", "SYNCHRONOUS_MODES", "ForkEpoch", "map_sqlite_error"]

logger = logging.getLogger(__name__)

SYNCHRONOUS_MODES = ("FULL", "NORMAL")

#: Rows written by this process between two background PASSIVE checkpoints
#: (about SQLite's default of 1,000 WAL pages: a row dirties a page at most,
#: rarely two, and rows of one commit often share pages).
CHECKPOINT_ROWS = 1000
#: SQLite's own automatic checkpoint, left as a backstop (commits past it
#: pay), per ``synchronous`` mode. Under steady writes the thread's PASSIVE
#: checkpoints never cover the whole WAL when the next write begins, so the
#: WAL restarts only at this backstop and grows up to it. At FULL every
#: commit fsyncs the WAL, and while the file grows each fsync also writes
#: its size (ext4's journal): 330 us an enqueue against 200 once the file
#: has its size, for the first ~2,400 commits of a new WAL at 8,000 pages.
#: SQLite's default of 1,000 pages keeps that phase short (and the WAL at
#: 4 MB), and the commit that trips it copies only what the thread has not.
#: At NORMAL no commit fsyncs: there the higher backstop saves the commits
#: the checkpoints they would pay (7% of an enqueue).
BACKSTOP_CHECKPOINT_PAGES = {"FULL": 1000, "NORMAL": 8000}

#: Default bound, in seconds, of a wait for the write lock outside ``transactional``.
DEFAULT_LOCK_TIMEOUT = 30.0
#: Connections inherited across fork: kept referenced, never used or closed.
_ABANDONED: List[sqlite3.Connection] = []


#: Held by this module's background threads while they are inside SQLite,
#: and by ``os.fork()`` while it forks: a child never starts with a SQLite
#: mutex (the allocator's, the VFS's) locked by a thread it does not have.
_FORK_GUARD = threading.Lock()
os.register_at_fork(
    before=_FORK_GUARD.acquire,
    after_in_parent=_FORK_GUARD.release,
    after_in_child=_FORK_GUARD.release,
)


def _sql_add(current: Optional[bytes], param: bytes) -> bytes:
    """The ``fdb_add(current, param)`` SQL function: ``add_little_endian``."""
    return add_little_endian(current, param)


class SqliteDatabase(IdleConnections[sqlite3.Connection], Database):
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

    key_conflicts = False  # one writer at a time: spreading claims buys nothing

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
        self.where = self.path  # in messages, as every handle says where it is
        self.synchronous = synchronous.upper()
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self._extra_pragmas = dict(extra_pragmas or {})
        self.fair = fair
        self._lock = threading.Lock()
        self._epoch = ForkEpoch.value
        self._idle: List[sqlite3.Connection] = []
        self._hub: Optional[WatchHub] = None
        self._notify_fd: Optional[int] = None
        self._gate: Optional[fairlock.TicketLock] = None
        self._checkpointer: Optional[_Checkpointer] = None
        self._closed = False
        self._transaction_class = SqliteTransaction
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
                conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=0)
            else:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0)
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, self.path) from exc
        conn.create_function("fdb_add", 2, _sql_add, deterministic=True)
        pragmas = [
            "busy_timeout = 0",
            f"synchronous = {self.synchronous}",
            f"wal_autocheckpoint = {BACKSTOP_CHECKPOINT_PAGES[self.synchronous]}",
        ]
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
        """Set WAL mode and create the schema, waiting out concurrent openers.

        Opening a store that is already set up only reads (WAL mode and the
        schema are checked, not rewritten), so it never waits for the write
        lock: a stalled writer elsewhere does not hold up new processes.
        """
        conn = self.connect()
        try:
            deadline = time.monotonic() + self.lock_timeout
            if self._retry_busy(lambda: self._is_set_up(conn), deadline):
                return
            mode = self._retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0], deadline)
            if str(mode).lower() != "wal":
                raise StoreUnavailable(f"store {self.path}: cannot use WAL mode (got {mode!r})")
            if not self.read_only:
                self._retry_busy(lambda: self._create_schema(conn), deadline)
        finally:
            conn.close()

    @staticmethod
    def _is_set_up(conn: sqlite3.Connection) -> bool:
        """True when the file is in WAL mode with the whole schema (a read only)."""
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            return False
        tables = {
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('kv', 'meta')")
        }
        if tables != {"kv", "meta"}:
            return False
        return conn.execute("SELECT 1 FROM meta WHERE name = 'commit_version'").fetchone() is not None

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

    def _retry_busy(self, action: Callable[[], Any], deadline: float) -> Any:
        """Run ``action``, waiting out SQLITE_BUSY with backoff until ``deadline``."""
        delay = _BUSY_BACKOFF_MIN
        while True:
            try:
                return action()
            except sqlite3.Error as exc:
                if not is_busy(exc) or time.monotonic() > deadline:
                    raise map_sqlite_error(exc, self.path) from exc
            time.sleep(random.uniform(0, delay))
            delay = min(delay * 2, _BUSY_BACKOFF_MAX)

    def _check_fork(self) -> None:
        """After os.fork(): drop (never reuse, never close) the parent's handles."""
        if self._epoch == ForkEpoch.value:
            return
        _ABANDONED.extend(self._idle)
        self._idle = []
        self._hub = None
        self._notify_fd = None
        self._gate = None
        self._checkpointer = None  # its thread did not survive the fork
        self._lock = threading.Lock()
        self._epoch = ForkEpoch.value

    def checkin(self, conn: sqlite3.Connection, epoch: int) -> None:
        """Give back a connection after its transaction ended.

        Args:
            conn: the connection.
            epoch: ``ForkEpoch.value`` when it was checked out.
        """
        if epoch != ForkEpoch.value:
            _ABANDONED.append(conn)
            return
        # No lock (list.append is atomic): a connection given back while
        # close() runs may stay pooled, and is closed when the pool is freed.
        if not self._closed and self._epoch == epoch and len(self._idle) < 16:
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

    def notify_commit(self, rows: int = 1) -> None:
        """Tell every process's watch thread that a write transaction committed
        (of about ``rows`` rows: the checkpoint thread counts them)."""
        fd, hub, checkpointer = self._notify_fd, self._hub, self._checkpointer
        if fd is None or checkpointer is None or self._epoch != ForkEpoch.value:
            fd, hub, checkpointer = self._open_notify()
        checkpointer.committed(rows)
        try:
            os.pwrite(fd, b"\x01", 0)
        except OSError as exc:
            logger.warning("store_notify_failed store=%s error=%s", self.path, exc)
        if hub is not None:
            hub.wake()

    def _open_notify(self) -> tuple[int, Optional[WatchHub], Any]:
        """What a write commit pokes, made once per process: the notify file's
        descriptor, the watch hub (if any) and the checkpoint thread."""
        with self._lock:
            self._check_fork()
            if self._notify_fd is None:
                self._notify_fd = os.open(self.path + "-notify", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if self._checkpointer is None:
                self._checkpointer = _Checkpointer(self)
            return self._notify_fd, self._hub, self._checkpointer

    # ------------------------------------------------------------ Database API

    def create_transaction(self) -> "SqliteTransaction":
        """A new transaction (optimistic until a conflict makes it pessimistic)."""
        return self._transaction_class(self)

    def close(self) -> None:
        """Close idle connections, stop the watch thread, cancel pending watches."""
        with self._lock:
            self._check_fork()
            self._closed = True
            idle, self._idle = self._idle, []
            hub, self._hub = self._hub, None
            fd, self._notify_fd = self._notify_fd, None
            gate, self._gate = self._gate, None
            checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        if hub is not None:
            hub.close()
        for conn in idle:
            conn.close()
        if fd is not None:
            os.close(fd)
        if gate is not None:
            gate.close()


class _Checkpointer:
    """A thread that checkpoints the WAL so that commits do not have to.

    Write commits of this process call :meth:`committed` with the rows they
    wrote (an int addition); past :data:`CHECKPOINT_ROWS` the thread is
    woken and runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection:
    it copies what no reader still needs and never blocks a writer or
    reader (the copy and its fsyncs run with the GIL released). A failed
    checkpoint is logged and retried at the next wake-up; nothing is lost
    by one (the WAL holds the commits).
    """

    def __init__(self, db: SqliteDatabase) -> None:
        # A weak reference: an unclosed store is still freed (and this thread
        # then ends), as it was before it had a thread.
        self._db = weakref.ref(db)
        self._path = db.path
        weakref.finalize(db, self._stop_soon)
        self._rows = 0
        self._wake = threading.Event()
        self._stopping = False
        self._failing = False
        self._thread = threading.Thread(
            target=self._run, name=f"checkpoint {os.path.basename(self._path)}", daemon=True
        )
        self._thread.start()

    def committed(self, rows: int) -> None:
        """Count the rows of a write commit; wake the thread past the threshold."""
        self._rows += rows
        if self._rows >= CHECKPOINT_ROWS:
            self._rows = 0
            self._wake.set()

    def close(self) -> None:
        """Stop the thread (a checkpoint under way finishes first)."""
        self._stop_soon()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _stop_soon(self) -> None:
        self._stopping = True
        self._wake.set()

    def _run(self) -> None:
        conn: Optional[sqlite3.Connection] = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                conn = self._checkpoint(conn)
        finally:
            if conn is not None:
                with _FORK_GUARD:
                    conn.close()

    def _checkpoint(self, conn: Optional[sqlite3.Connection]) -> Optional[sqlite3.Connection]:
        """Run one PASSIVE checkpoint; return the connection to keep."""
        try:
            with _FORK_GUARD:
                if conn is None:
                    db = self._db()
                    if db is None:
                        return None
                    conn = db.connect()
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (sqlite3.Error, StoreError) as exc:
            if isinstance(exc, sqlite3.Error) and is_busy(exc):
                return conn  # another process is checkpointing: its work counts
            if not self._failing:  # one line per run of failures, not one per wake-up
                logger.warning("store_checkpoint_failed store=%s error=%s", self._path, exc)
            self._failing = True
            return conn
        if self._failing:
            logger.info("store_checkpoint_back store=%s", self._path)
            self._failing = False
        return conn


class _ValueReader:
    """Reads watched keys for the hub thread, on its own connection."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self._conn: Optional[sqlite3.Connection] = None
        self._version: Optional[int] = None

    def read(self, keys: List[bytes], force: bool) -> Optional[Dict[bytes, Optional[bytes]]]:
        with _FORK_GUARD:  # runs on the hub's thread
            return self._read(keys, force)

    def _read(self, keys: List[bytes], force: bool) -> Optional[Dict[bytes, Optional[bytes]]]:
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
        except sqlite3.Error as exc:  # busy too: the hub reads again, forced, after a backoff
            raise map_sqlite_error(exc, self._db.path) from exc
        self._version = version
        return values
