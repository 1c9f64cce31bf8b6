"""The networked backend: one PostgreSQL database shared by many machines (psycopg 3).

Data model (tables named after the URL's ``prefix``, default ``otpjobs``)::

    {p}_kv(k bytea, v bytea)      -- the keyspace; unique index on
                                  -- (substring(k, 1, 1024), sha256(k) if longer):
                                  -- ordered by memcmp like FoundationDB, and
                                  -- keys up to 10,000 bytes fit a btree
    {p}_meta(name, value)         -- commit_version, pruned_version, schema_version
    {p}_writes(version, b, e)     -- UNLOGGED: the key ranges each commit wrote,
                                  -- kept MAX_TRANSACTION_AGE seconds
    {p}_commit(...)               -- the commit, one statement (below)

Principle: FoundationDB's optimistic concurrency, implemented with a
PostgreSQL snapshot and a conflict log, so that the guarantees are the
interface's and not PostgreSQL's:

- A transaction reads in a ``REPEATABLE READ`` snapshot whose first statement
  also reads ``commit_version``: its *read version*. It records the key
  ranges it read (point reads, range reads up to their last row, explicit
  conflict ranges; snapshot reads record nothing) and buffers its writes in
  memory (``postgres_transaction``).
- ``commit`` is one call of ``{p}_commit`` in its own transaction: it bumps
  ``commit_version`` (the row lock serialises commits: the next one starts
  only after this one is visible), refuses with SQLSTATE 40001 when a commit
  after the read version wrote a range this one read (``ConflictError``),
  applies the clears, sets, atomic adds and versionstamped writes, logs the
  ranges it wrote, and ``NOTIFY``s. Blind writes check nothing: they never
  conflict. Versionstamps are the commit version (8 bytes big-endian) and
  two zero bytes, so they increase in commit order as the commits become
  visible. A version is never below the server's start time in
  microseconds, so versions seen never come back after a server crash
  (see ``flush=apart`` below; schema version 4).
- Which order is total, and for how long the lock is held: every commit
  of a store is in one order (its version), the order its commits become
  visible in; the conflict check, versionstamps (the activity monitors'
  scan of a type's activity keys by stamp) and the watch notes rely on
  it, and nothing needs an order per type beyond it. With the default
  ``flush=commit`` the commit's transaction holds the order lock, and
  PostgreSQL's lock on the notification queue, through its WAL flush: the
  store commits about one transaction per flush, whatever the clients
  (``bench/bench_pg_commits.py``). With ``flush=apart`` (a URL parameter)
  the function's transaction ends without waiting for its flush, so both
  locks go when its work is done, and the same round trip then commits a
  one-record transaction (``pg_logical_emit_message``) with the session's
  ``synchronous_commit``, which returns once the WAL up to it, so the
  commit, is flushed: concurrent commits share flushes. The committer is
  still answered only once its commit is durable (a failed flush is
  ``CommitUnknownResult``), and any commit that read it is durable only
  after it (the WAL is one sequence); what changes is that another
  client may read a commit a server crash then takes back. Its version
  is not issued again: the server's next life numbers from its start
  time in microseconds (the activity monitors, hosts' lifelines, type
  monitors and watch hubs keep versions they saw across a crash and
  compare later ones with them; this holds unless the server's clock
  went back across the crash). It needs ``EXECUTE`` on that function
  (PostgreSQL grants it to everyone by default; checked at open); each
  commit then takes two transaction ids, and a logical decoding
  consumer of the database sees one more message a commit.
- Conflicts are per key (``key_conflicts`` True): the queue spreads its
  workers over the first pending keys, as on FoundationDB.
- A read version older than the pruned part of the log (``MAX_TRANSACTION_AGE``)
  cannot be checked: such a commit fails with ``TransactionTooOld``
  (retryable), as FoundationDB's ``transaction_too_old`` after 5 s.

Watches: a ``LISTEN`` connection per process and handle wakes the watch hub
on every commit's ``NOTIFY`` (no polling); the hub then reads the watched
keys in one statement. A lost server is survived: the listener reconnects
and the next read compares the values again.

Errors: a lost connection or a server that cannot be reached is
``ServerGone`` (retryable: ``transactional`` waits for the server up to its
deadline); a commit whose answer was lost is ``CommitUnknownResult``
(retryable, as FoundationDB's 1021: the transaction may have committed);
a full disk is ``DiskFull``; a read-only server ``ReadOnlyStore``.
Connections are made with ``connect_timeout`` and TCP keepalives and run
with ``lock_timeout`` and ``statement_timeout``, so no call hangs.

A handle never crosses ``os.fork()``: the child opens new connections and
never touches (or closes) the parent's.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, Callable, ClassVar, Dict, List, Optional, TypeVar

from fdblayer.exceptions import InvalidStoreURL, StoreUnavailable
from fdblayer.urls import PG_FLUSH_MODES
from fdblayer.forks import ForkEpoch
from fdblayer.interface import Database
from fdblayer.backends.postgres_sql import (
    KEY_PREFIX_BYTES,
    SCHEMA_VERSION,
    UPGRADABLE_FROM,
    Statements,
    check_prefix,
    connection_is_broken,
    first_line,
    key_prefixes,
    map_pg_error,
    schema_sql,
    upgrade_sql,
)
from fdblayer.backends.pooling import IdleConnections
from fdblayer.backends import postgres_direct as direct
from fdblayer.backends.postgres_arrays import ByteaArray
from fdblayer.backends.postgres_arrays import register as register_arrays
from fdblayer.backends.postgres_transaction import PostgresTransaction
from fdblayer.urls import redact_url
from fdblayer.watches import UNPLACED, WatchHub, note_names

__all__ = [
    "PostgresDatabase",
    "map_pg_error",
    "connection_is_broken",
    "key_prefixes",
    "SCHEMA_VERSION",
    "KEY_PREFIX_BYTES",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Seconds to wait for a connection to open; for a row lock; for one statement.
CONNECT_TIMEOUT = 5
LOCK_TIMEOUT_MS = 30_000
STATEMENT_TIMEOUT_MS = 120_000
#: An idle connection kept in a transaction longer than this is ended by the
#: server (a SIGSTOPped client must not pin a snapshot forever).
IDLE_IN_TRANSACTION_MS = 300_000
#: Every read of the store is an index lookup or an index range read in key
#: order, most with a LIMIT. The index orders by the key's first 1024 bytes
#: only, so a range read in key order needs an incremental sort (per group
#: of long keys sharing those bytes) over an index scan that stops at the
#: LIMIT. With the table's statistics stale (a queue's rows churn faster
#: than autovacuum analyses them) the planner chose instead to read the
#: whole range and sort it: a claim's first 272 due jobs of 20,000 took
#: 8.8 ms instead of 0.3. A full sort or a sequential scan is never right
#: here, so both are off for the store's connections.
SCAN_OPTIONS = "-c enable_sort=off -c enable_seqscan=off"
_POOL_MAX = 16
#: Connections inherited across fork: kept referenced, never used or closed
#: (closing would end the parent's session on the shared socket).
_ABANDONED: List[Any] = []


class PostgresDatabase(IdleConnections[Any], Database):
    """A handle on a store in a PostgreSQL database.

    Args:
        conninfo: a libpq connection URL or string (without ``prefix``).
        prefix: the tables' prefix (several stores can share one database).
        connect_timeout: seconds to wait for a connection to open.
        flush: ``"commit"`` (a commit's flush waits under its locks) or
            ``"apart"`` (after them; see the module docstring).

    Raises:
        InvalidStoreURL: on a bad prefix or flush.
        ServerGone: when the server cannot be reached.
        StoreUnavailable: when the store's schema is of another version, or
            ``flush="apart"`` may not call the function it flushes with.
    """

    key_conflicts = True

    def __init__(
        self,
        conninfo: str,
        prefix: str = "otpjobs",
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        flush: str = "commit",
    ) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:  # pragma: no cover - psycopg is a dependency
            raise StoreUnavailable(f"the PostgreSQL backend needs psycopg 3: {exc}") from exc
        self.prefix = check_prefix(prefix)
        if flush not in PG_FLUSH_MODES:
            raise InvalidStoreURL(f"store flush {flush!r}: must be one of {', '.join(PG_FLUSH_MODES)}")
        self.conninfo = conninfo
        self.connect_timeout = connect_timeout
        redacted = _redact(conninfo)
        self.where = redacted + ("&" if "?" in redacted else "?") + f"prefix={prefix}"  # one word in logs
        self._lock = threading.Lock()
        self._epoch = ForkEpoch.value
        self._idle: List[Any] = []
        self._hub: Optional[WatchHub] = None
        self._closed = False
        self._lone = threading.local()
        self.sql = Statements(prefix)
        #: ``flush="apart"``: a commit's flush waits after its locks are
        #: released (see the module docstring).
        self.flush_apart = flush == "apart"

        self._transaction_class = PostgresTransaction
        self._initialize()

    def __repr__(self) -> str:
        return f"<PostgresDatabase {self.where}>"

    # ------------------------------------------------------------ connections

    def connect(self) -> Any:
        """A new autocommit connection with the store's session settings.

        Raises:
            ServerGone: when the server cannot be reached.
        """
        import psycopg

        options = (
            f"-c lock_timeout={LOCK_TIMEOUT_MS} -c statement_timeout={STATEMENT_TIMEOUT_MS} "
            f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS} {SCAN_OPTIONS}"
        )
        try:
            conn = psycopg.connect(
                self.conninfo,
                autocommit=True,
                connect_timeout=max(1, int(self.connect_timeout)),
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
                options=options,
                application_name=f"otpjobs[{os.getpid()}]",
            )
        except psycopg.Error as exc:
            raise map_pg_error(exc, self.where) from exc
        register_arrays(conn.adapters)
        return conn

    def _initialize(self) -> None:
        """Check the schema's version, creating the schema first on a first
        open and upgrading an older one (each under an advisory lock). A
        current store costs one statement on a connection then kept for the
        first transaction."""
        import psycopg

        conn = self.connect()
        try:
            try:
                row = conn.execute(self.sql.schema_version).fetchone()
            except psycopg.errors.UndefinedTable:
                row = None
            if row is None or row[0] in UPGRADABLE_FROM:  # new, being created, or older
                self._create_or_upgrade(conn)
            else:
                self._check_version_row(row, conn)
            if self.flush_apart and not conn.execute(self.sql.can_flush_apart).fetchone()[0]:
                raise StoreUnavailable(
                    f"store {self.where}: flush=apart needs EXECUTE on pg_logical_emit_message for this user"
                )
        except psycopg.Error as exc:
            conn.close()
            raise map_pg_error(exc, self.where) from exc
        except BaseException:
            conn.close()
            raise
        self.checkin(conn, self._epoch)

    def _create_or_upgrade(self, conn: Any) -> None:
        """Under the advisory lock: create the schema unless another process
        did, upgrade it from a version in :data:`UPGRADABLE_FROM`, then check its version."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"otpjobs-schema-{self.prefix}",))
            found = conn.execute("SELECT to_regclass(%s)", (f'"{self.prefix}_meta"',)).fetchone()[0]
            if found is None:
                for statement in schema_sql(self.prefix):
                    conn.execute(statement)
                logger.info("store_created store=%s schema_version=%d", self.where, SCHEMA_VERSION)
                return
            row = conn.execute(self.sql.schema_version).fetchone()
            if row is not None and row[0] in UPGRADABLE_FROM:
                for statement in upgrade_sql(self.prefix):
                    conn.execute(statement)
                logger.info("store_upgraded store=%s from=%d schema_version=%d", self.where, row[0], SCHEMA_VERSION)
                return
            self._check_version_row(row, conn)

    def _check_version_row(self, row: Any, conn: Any) -> None:
        """Refuse a store this program cannot use: one of an unknown version,
        or a later one that does not declare it still readable by this
        version's programs (``oldest_reader``, see :data:`OLDEST_READER`)."""
        version = None if row is None else row[0]
        if version == SCHEMA_VERSION:
            return
        if isinstance(version, int) and version > SCHEMA_VERSION:
            oldest = conn.execute(self.sql.oldest_reader).fetchone()
            if oldest is not None and isinstance(oldest[0], int) and oldest[0] <= SCHEMA_VERSION:
                logger.info(
                    "store_newer store=%s schema_version=%d oldest_reader=%d this_program=%d",
                    self.where,
                    version,
                    oldest[0],
                    SCHEMA_VERSION,
                )
                return
        raise StoreUnavailable(
            f"store {self.where}: its schema is version {version}, this program knows "
            f"version {SCHEMA_VERSION}; open it with the version that made it, or use another prefix"
        )

    def _check_fork(self) -> None:
        """After os.fork(): drop (never reuse, never close) the parent's connections."""
        if self._epoch == ForkEpoch.value:
            return
        _ABANDONED.extend(self._idle)
        self._idle = []
        if self._hub is not None:
            _ABANDONED.append(self._hub)
        self._hub = None
        self._lock = threading.Lock()
        self._epoch = ForkEpoch.value

    def checkin(self, conn: Any, epoch: int) -> None:
        """Give back a connection whose transaction ended (a broken one is dropped)."""
        if epoch != ForkEpoch.value:
            _ABANDONED.append(conn)
            return
        if conn.closed or conn.broken:
            return
        if not self._closed and self._epoch == epoch and len(self._idle) < _POOL_MAX:
            self._idle.append(conn)
            return
        conn.close()

    def discard(self, conn: Any, epoch: int) -> None:
        """Drop a connection in an unknown state (it is closed, never pooled)."""
        if epoch != ForkEpoch.value:
            _ABANDONED.append(conn)
            return
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a broken socket: nothing more to release
            pass

    # ------------------------------------------------------------ watches

    def hub(self) -> WatchHub:
        """This process's watch hub (started on first use)."""
        with self._lock:
            self._check_fork()
            if self._hub is None:
                self._hub = WatchHub(_ValueReader(self).read, lambda: _Listener(self), name=f"postgres {self.prefix}")
            return self._hub

    def notify_commit(self) -> None:
        """Wake this process's watch thread after a local commit."""
        hub = self._hub
        if hub is not None and self._epoch == ForkEpoch.value:
            hub.wake()

    # ------------------------------------------------------------ Database API

    def create_transaction(self) -> Any:
        """A new transaction (lone while this thread runs ``get``/``get_range``)."""
        return self._transaction_class(self, lone=getattr(self._lone, "active", False))

    def get(self, key: bytes) -> Optional[bytes]:
        """Read one key in its own transaction: one round trip."""
        return self._alone(super().get, key)

    def get_range(self, begin: Any, end: Any, limit: int = 0, reverse: bool = False) -> List[Any]:
        """Read a range in its own transaction: one round trip for plain keys."""
        return self._alone(super().get_range, begin, end, limit, reverse)

    def _alone(self, read: Callable[..., _T], *args: Any) -> _T:
        self._lone.active = True
        try:
            return read(*args)
        finally:
            self._lone.active = False

    def ping(self) -> None:
        """Check that the server answers (raises ``ServerGone`` otherwise)."""
        conn = self.checkout()
        try:
            conn.execute("SELECT 1").fetchone()
        except Exception as exc:
            self.discard(conn, ForkEpoch.value)
            raise map_pg_error(exc, self.where) from exc
        self.checkin(conn, ForkEpoch.value)

    def drop(self) -> None:
        """Remove the store's tables and functions (every key is lost)."""
        conn = self.connect()
        try:
            p = self.prefix
            for table in ("kv", "meta", "writes", "marks"):
                conn.execute(f'DROP TABLE IF EXISTS "{p}_{table}"')
            names = [f"{p}_commit", f"{p}_add", f"{p}_add_bytes"]
            # Every overload (an upgraded store keeps its older commit function).
            for (signature,) in conn.execute(
                "SELECT oid::regprocedure::text FROM pg_proc WHERE proname = ANY(%s)", (names,)
            ).fetchall():
                conn.execute(f"DROP FUNCTION IF EXISTS {signature}")
        finally:
            conn.close()

    def close(self) -> None:
        """Close idle connections, stop the watch thread, cancel pending watches."""
        with self._lock:
            self._check_fork()
            self._closed = True
            idle, self._idle = self._idle, []
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()
        for conn in idle:
            conn.close()


def _redact(conninfo: str) -> str:
    """The connection string without its password (for messages and logs)."""
    if "://" in conninfo:
        return redact_url(conninfo)
    return re.sub(r"password\s*=\s*\S+", "password=***", conninfo)


class _Listener:
    """The hub's wake-up source: ``LISTEN`` on the store's channel.

    ``fd`` is the connection's socket, or -1 while the server is away (the
    hub then polls ``drain``, which reconnects). ``drain`` reports a change
    on every notification and after every reconnection (notifications may
    have been missed meanwhile).
    """

    names: ClassVar[set[bytes]] = {UNPLACED}
    #: Each commit's notification names the keys it changed (``note_names``).
    keyed = True

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        self._conn: Any = None
        self.fd = -1
        self._lost = False
        self._open()

    def _open(self) -> bool:
        try:
            conn = self._db.connect()
            conn.execute(f'LISTEN "{self._db.sql.channel}"')
        except Exception as exc:  # noqa: BLE001 - any failure to listen: polled again, then retried
            logger.debug("store_listener_unavailable store=%s error=%s", self._db.where, first_line(exc))
            self._conn, self.fd = None, -1
            return False
        self._conn, self.fd = conn, conn.fileno()
        if self._lost:
            logger.info("store_listener_back store=%s", self._db.where)
            self._lost = False
        return True

    def drain(self) -> set[bytes]:
        if self._conn is None:
            return set(self.names) if self._open() else set()
        pgconn = self._conn.pgconn
        seen: set[bytes] = set()
        try:
            pgconn.consume_input()
            while (notice := pgconn.notifies()) is not None:
                seen |= _placed(notice.extra)
        except Exception as exc:  # noqa: BLE001 - the server went away: reconnect, then re-check
            logger.warning("store_listener_lost store=%s reason=%r", self._db.where, first_line(exc))
            self._db.discard(self._conn, ForkEpoch.value)
            self._conn, self.fd = None, -1
            self._lost = True
            return set(self.names) if self._open() else set()
        return seen

    def close(self) -> None:
        if self._conn is not None:
            self._db.discard(self._conn, ForkEpoch.value)
            self._conn, self.fd = None, -1


def _placed(payload: bytes) -> set[bytes]:
    """What a commit's notification says it changed: its version, then its
    note (``watches.note_names``); an empty payload (a program of schema
    version 2) or an unreadable one says nothing, so the hub reads."""
    version, _, note = payload.decode(errors="replace").partition(" ")
    if not version.isdigit():
        return {UNPLACED}
    return note_names(int(version), note)


class _ValueReader:
    """Reads watched keys for the hub thread, on its own connection."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        self._conn: Any = None
        self._version: Optional[int] = None

    def read(self, keys: List[bytes], force: bool) -> Optional[Dict[bytes, Optional[bytes]]]:
        try:
            if self._conn is None:
                self._conn = self._db.connect()
            rows = direct.run(self._conn, self._db.sql.watched, (key_prefixes(keys), ByteaArray(keys)))
        except Exception:  # the hub reads again shortly (``WatchHub.READ_RETRY_FIRST``), on a new connection
            if self._conn is not None:
                self._db.discard(self._conn, ForkEpoch.value)
            self._conn, self._version = None, None
            raise
        version = next((row[2] for row in rows if row[0] is None), None)
        if version == self._version and not force:
            return None
        self._version = version
        return {bytes(k): bytes(v) for k, v, _ in rows if k is not None}
