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
  visible.
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
from typing import Any, Dict, List, Optional, Tuple

from fdblayer.exceptions import (
    CommitUnknownResult,
    ConflictError,
    DiskFull,
    InvalidStoreURL,
    InvalidTransactionState,
    LockTimeout,
    ReadOnlyStore,
    ServerGone,
    StoreError,
    StoreUnavailable,
    TransactionTooOld,
)
from fdblayer.interface import Database
from fdblayer.urls import redact_url
from fdblayer.forks import ForkEpoch
from fdblayer.watches import WatchHub

__all__ = ["PostgresDatabase", "map_pg_error", "connection_is_broken", "key_prefixes", "SCHEMA_VERSION", "KEY_PREFIX_BYTES"]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: Bytes of a key in the index's ordering column (btree entries must stay
#: under a third of a page); longer keys add their sha256 for uniqueness.
KEY_PREFIX_BYTES = 1024
#: Seconds the conflict log keeps a commit's write ranges: a transaction
#: whose reads are older than that cannot commit (``TransactionTooOld``).
MAX_TRANSACTION_AGE = 30
#: Commits between two prunings of the conflict log.
PRUNE_EVERY = 256
#: Seconds to wait for a connection to open; for a row lock; for one statement.
CONNECT_TIMEOUT = 5
LOCK_TIMEOUT_MS = 30_000
STATEMENT_TIMEOUT_MS = 120_000
#: An idle connection kept in a transaction longer than this is ended by the
#: server (a SIGSTOPped client must not pin a snapshot forever).
IDLE_IN_TRANSACTION_MS = 300_000
_POOL_MAX = 16
_PREFIX_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,39}$")
#: Connections inherited across fork: kept referenced, never used or closed
#: (closing would end the parent's session on the shared socket).
_ABANDONED: List[Any] = []

KP = f"substring(k from 1 for {KEY_PREFIX_BYTES})"
KH = f"(CASE WHEN length(k) > {KEY_PREFIX_BYTES} THEN sha256(k) ELSE ''::bytea END)"


def check_prefix(prefix: str, url: str = "") -> str:
    """Validate a table prefix (letters, digits, ``_`` and ``-``; at most 40).

    Raises:
        InvalidStoreURL: when it is not such a name.
    """
    if not _PREFIX_RE.match(prefix or ""):
        raise InvalidStoreURL(
            f"store URL {url!r}: prefix {prefix!r} must be a letter or _ then up to 39 "
            "letters, digits, _ or -"
        )
    return prefix


def schema_sql(p: str) -> List[str]:
    """The statements creating a store's tables and functions under prefix ``p``."""
    kv, meta, writes, marks = (f'"{p}_{name}"' for name in ("kv", "meta", "writes", "marks"))
    return [
        f"CREATE TABLE IF NOT EXISTS {kv} (k bytea NOT NULL, v bytea NOT NULL)",
        f'CREATE UNIQUE INDEX IF NOT EXISTS "{p}_kv_key" ON {kv} (({KP}), ({KH}))',
        f"CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value bigint NOT NULL)",
        f"INSERT INTO {meta} VALUES ('commit_version', 0), ('pruned_version', 0), "
        f"('schema_version', {SCHEMA_VERSION}) ON CONFLICT DO NOTHING",
        f"CREATE UNLOGGED TABLE IF NOT EXISTS {writes} "
        "(version bigint NOT NULL, b bytea NOT NULL, e bytea NOT NULL)",
        f'CREATE INDEX IF NOT EXISTS "{p}_writes_version" ON {writes} (version)',
        f"CREATE TABLE IF NOT EXISTS {marks} (version bigint PRIMARY KEY, at timestamptz NOT NULL)",
        _ADD_FUNCTION.format(p=p),
        _COMMIT_FUNCTION.format(
            p=p, kv=kv, meta=meta, writes=writes, marks=marks, KP=KP, KH=KH,
            age=MAX_TRANSACTION_AGE, every=PRUNE_EVERY,
        ),
    ]


#: FoundationDB's atomic add: little-endian, wrapping, sized by the parameter.
_ADD_FUNCTION = """
CREATE OR REPLACE FUNCTION "{p}_add"(cur bytea, param bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE AS $f$
DECLARE
  n int := length(param);
  m int := coalesce(length(cur), 0);
  digits int[] := '{{}}';
  carry int := 0;
  s int;
BEGIN
  FOR i IN 0 .. n - 1 LOOP
    s := get_byte(param, i) + carry + CASE WHEN i < m THEN get_byte(cur, i) ELSE 0 END;
    digits := digits || (s & 255);
    carry := s >> 8;
  END LOOP;
  RETURN coalesce((SELECT decode(string_agg(lpad(to_hex(d), 2, '0'), '' ORDER BY o), 'hex')
                   FROM unnest(digits) WITH ORDINALITY AS t(d, o)), ''::bytea);
END $f$
"""

#: The commit: conflict check, writes, conflict log, notification; one statement.
_COMMIT_FUNCTION = """
CREATE OR REPLACE FUNCTION "{p}_commit"(
  rv bigint, rb bytea[], re bytea[],
  cb bytea[], ce bytea[], sk bytea[], sv bytea[], dk bytea[], ak bytea[], ap bytea[],
  vk bytea[], vkpos int[], vkval bytea[], vvk bytea[], vv bytea[], vvpos int[]
) RETURNS bigint LANGUAGE plpgsql
-- Every statement here wants an index: the conflict log, unanalysed while it
-- grows, was otherwise scanned whole (1.2 ms a commit at 3,000 rows).
SET enable_seqscan = off AS $f$
DECLARE
  ver bigint;
  stamp bytea;
  old bigint;
  stamped bytea[] := '{{}}';
BEGIN
  UPDATE {meta} SET value = value + 1 WHERE name = 'commit_version' RETURNING value INTO ver;
  IF rv IS NOT NULL THEN
    IF rv < (SELECT value FROM {meta} WHERE name = 'pruned_version') THEN
      RAISE EXCEPTION 'transaction too old' USING ERRCODE = '40001', HINT = 'too_old';
    END IF;
    IF EXISTS (SELECT 1 FROM {writes} w, unnest(rb, re) AS r(b, e)
               WHERE w.version > rv AND w.b < r.e AND w.e > r.b) THEN
      RAISE EXCEPTION 'conflict' USING ERRCODE = '40001', HINT = 'conflict';
    END IF;
  END IF;
  IF cardinality(cb) > 0 THEN
    DELETE FROM {kv} USING unnest(cb, ce) AS r(b, e)
      WHERE {KP} >= substring(r.b from 1 for 1024) AND {KP} <= substring(r.e from 1 for 1024)
        AND k >= r.b AND k < r.e;
  END IF;
  IF cardinality(dk) > 0 THEN
    DELETE FROM {kv} WHERE k = ANY(dk)
      AND {KP} = ANY(ARRAY(SELECT substring(d from 1 for 1024) FROM unnest(dk) AS d));
  END IF;
  IF cardinality(sk) > 0 THEN
    INSERT INTO {kv} (k, v) SELECT * FROM unnest(sk, sv)
      ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
  END IF;
  FOR i IN 1 .. coalesce(cardinality(ak), 0) LOOP
    INSERT INTO {kv} (k, v) VALUES (ak[i], ap[i])
      ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = "{p}_add"({kv}.v, EXCLUDED.v);
  END LOOP;
  IF cardinality(vk) > 0 OR cardinality(vvk) > 0 THEN
    stamp := int8send(ver) || '\\x0000'::bytea;
    FOR i IN 1 .. coalesce(cardinality(vk), 0) LOOP
      stamped := stamped || overlay(vk[i] placing stamp from vkpos[i] + 1 for 10);
      INSERT INTO {kv} (k, v) VALUES (stamped[i], vkval[i])
        ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
    END LOOP;
    FOR i IN 1 .. coalesce(cardinality(vvk), 0) LOOP
      INSERT INTO {kv} (k, v) VALUES (vvk[i], overlay(vv[i] placing stamp from vvpos[i] + 1 for 10))
        ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
    END LOOP;
  END IF;
  INSERT INTO {writes} (version, b, e)
    SELECT ver, x, x || '\\x00'::bytea FROM unnest(dk || sk || ak || vvk || stamped) AS x
    UNION ALL SELECT ver, b, e FROM unnest(cb, ce) AS r(b, e);
  IF ver % {every} = 0 THEN
    INSERT INTO {marks} VALUES (ver, clock_timestamp());
    SELECT max(version) INTO old FROM {marks}
      WHERE at < clock_timestamp() - interval '{age} seconds';
    IF old IS NOT NULL THEN
      DELETE FROM {writes} WHERE version <= old;
      DELETE FROM {marks} WHERE version < old;
      UPDATE {meta} SET value = old WHERE name = 'pruned_version';
    END IF;
  END IF;
  PERFORM pg_notify('{p}_commits', '');
  RETURN ver;
END $f$
"""


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (libpq's run over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def map_pg_error(exc: BaseException, where: str, committing: bool = False) -> StoreError:
    """Turn a psycopg error into the named store error it stands for.

    Args:
        exc: the psycopg error.
        where: the store's description, for the message.
        committing: the error ended a commit call (a lost connection then
            leaves the outcome unknown).
    """
    import psycopg

    state = getattr(getattr(exc, "diag", None), "sqlstate", None) or ""
    message = first_line(exc)
    if state == "40001" and getattr(exc.diag, "message_hint", None) == "too_old":
        return TransactionTooOld(f"store {where}: the transaction's reads are too old to check")
    if state in ("40001", "40P01"):
        return ConflictError(f"store {where}: concurrent commit ({message})")
    if state == "55P03":
        return LockTimeout(f"store {where}: lock wait timed out ({message})")
    if state in ("53100",):
        return DiskFull(f"store {where}: disk full ({message})")
    if state == "25006":
        return ReadOnlyStore(f"store {where}: cannot write ({message})")
    if state.startswith("57P") or state.startswith("08") or isinstance(exc, psycopg.OperationalError) and not state:
        if committing:
            return CommitUnknownResult(
                f"store {where}: connection lost during commit; it may have committed ({message})"
            )
        return ServerGone(f"store {where}: server unreachable or connection lost ({message})")
    if state.startswith("57014"):
        return StoreUnavailable(f"store {where}: statement timed out ({message})")
    return StoreUnavailable(f"store {where}: {message}")


def connection_is_broken(exc: BaseException) -> bool:
    """True when ``exc`` means the connection itself is gone (not one statement)."""
    import psycopg

    state = getattr(getattr(exc, "diag", None), "sqlstate", None) or ""
    return isinstance(exc, psycopg.OperationalError) and (not state or state[:2] in ("08", "57"))


class PostgresDatabase(Database):
    """A handle on a store in a PostgreSQL database.

    Args:
        conninfo: a libpq connection URL or string (without ``prefix``).
        prefix: the tables' prefix (several stores can share one database).
        connect_timeout: seconds to wait for a connection to open.

    Raises:
        InvalidStoreURL: on a bad prefix.
        ServerGone: when the server cannot be reached.
        StoreUnavailable: when the store's schema is of another version.
    """

    key_conflicts = True

    def __init__(self, conninfo: str, prefix: str = "otpjobs", *, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:  # pragma: no cover - psycopg is a dependency
            raise StoreUnavailable(f"the PostgreSQL backend needs psycopg 3: {exc}") from exc
        self.prefix = check_prefix(prefix)
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
        from fdblayer.postgres_transaction import PostgresTransaction  # it imports this module

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

        options = (f"-c lock_timeout={LOCK_TIMEOUT_MS} -c statement_timeout={STATEMENT_TIMEOUT_MS} "
                   f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}")
        try:
            return psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=max(1, int(self.connect_timeout)),
                keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
                options=options, application_name=f"otpjobs[{os.getpid()}]",
            )
        except psycopg.Error as exc:
            raise map_pg_error(exc, self.where) from exc

    def _initialize(self) -> None:
        """Create the schema on first open (under an advisory lock); check its version."""
        import psycopg

        conn = self.connect()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"otpjobs-schema-{self.prefix}",))
                found = conn.execute("SELECT to_regclass(%s)", (f'"{self.prefix}_meta"',)).fetchone()[0]
                if found is None:
                    for statement in schema_sql(self.prefix):
                        conn.execute(statement)
                    logger.info("store_created store=%s schema_version=%d", self.where, SCHEMA_VERSION)
                else:
                    self._check_version(conn)
        except psycopg.Error as exc:
            raise map_pg_error(exc, self.where) from exc
        finally:
            conn.close()

    def _check_version(self, conn: Any) -> None:
        row = conn.execute(self.sql.schema_version).fetchone()
        version = None if row is None else row[0]
        if version != SCHEMA_VERSION:
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

    def checkout(self) -> Any:
        """A connection for one transaction (from the idle pool when possible).

        Raises:
            InvalidTransactionState: when the handle is closed.
            ServerGone: when a new connection cannot be made.
        """
        if self._epoch == ForkEpoch.value and not self._closed:
            try:
                return self._idle.pop()
            except IndexError:
                return self.connect()
        with self._lock:
            self._check_fork()
            if self._closed:
                raise InvalidTransactionState(f"store {self.where} is closed")
            if self._idle:
                return self._idle.pop()
        return self.connect()

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
        except Exception:  # a broken socket: nothing more to release
            pass

    # ------------------------------------------------------------ watches

    def hub(self) -> WatchHub:
        """This process's watch hub (started on first use)."""
        with self._lock:
            self._check_fork()
            if self._hub is None:
                self._hub = WatchHub(
                    _ValueReader(self).read, lambda: _Listener(self), name=f"postgres {self.prefix}"
                )
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

    def _alone(self, read: Any, *args: Any) -> Any:
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
            conn.execute(f'DROP FUNCTION IF EXISTS "{p}_commit"')
            conn.execute(f'DROP FUNCTION IF EXISTS "{p}_add"')
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


class Statements:
    """The SQL texts of one prefix (built once per handle)."""

    def __init__(self, p: str) -> None:
        kv, meta = f'"{p}_kv"', f'"{p}_meta"'
        self.begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
        self.read_version = f"SELECT value FROM {meta} WHERE name = 'commit_version'"
        self.schema_version = f"SELECT value FROM {meta} WHERE name = 'schema_version'"
        # Every read returns the commit version first, as (NULL, 8 bytes big-endian).
        version = f"SELECT NULL::bytea, int8send(value) FROM {meta} WHERE name = 'commit_version'"
        self.version_only = version
        self.get = (f"{version} UNION ALL SELECT k, v FROM {kv} "
                    f"WHERE {KP} = substring(%s from 1 for {KEY_PREFIX_BYTES}) AND k = %s")
        self.get_many = (f"{version} UNION ALL SELECT k, v FROM {kv} "
                         f"WHERE {KP} = ANY(%s::bytea[]) AND k = ANY(%s::bytea[])")
        bounds = (f"{KP} >= substring(%s from 1 for {KEY_PREFIX_BYTES}) "
                  f"AND {KP} <= substring(%s from 1 for {KEY_PREFIX_BYTES}) AND k >= %s AND k < %s")
        self.range_asc = (f"({version}) UNION ALL (SELECT k, v FROM {kv} WHERE {bounds} "
                          f"ORDER BY {KP}, k LIMIT %s)")
        self.range_desc = (f"({version}) UNION ALL (SELECT k, v FROM {kv} WHERE {bounds} "
                           f"ORDER BY {KP} DESC, k DESC LIMIT %s)")
        self.changed_since = (
            f'SELECT EXISTS (SELECT 1 FROM "{p}_writes" w, unnest(%s::bytea[], %s::bytea[]) AS r(b, e) '
            "WHERE w.version > %s AND w.b < r.e AND w.e > r.b) "
            f"OR %s < (SELECT value FROM {meta} WHERE name = 'pruned_version')"
        )
        self.commit = (
            f'SELECT "{p}_commit"(%s, %s::bytea[], %s::bytea[], %s::bytea[], %s::bytea[], '
            "%s::bytea[], %s::bytea[], %s::bytea[], %s::bytea[], %s::bytea[], "
            "%s::bytea[], %s::int[], %s::bytea[], %s::bytea[], %s::bytea[], %s::int[])"
        )
        self.watched = (
            f"SELECT NULL::bytea, NULL::bytea, value FROM {meta} WHERE name = 'commit_version' "
            f"UNION ALL SELECT k, v, NULL FROM {kv} WHERE {KP} = ANY(%s::bytea[]) AND k = ANY(%s::bytea[])"
        )
        self.channel = f"{p}_commits"


def key_prefixes(keys: List[bytes]) -> List[bytes]:
    """The index column of each key (its first ``KEY_PREFIX_BYTES`` bytes)."""
    return [k[:KEY_PREFIX_BYTES] for k in keys]


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

    names = {b"commit"}

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
        except Exception as exc:
            logger.debug("Store %s: listener cannot connect: %s", self._db.where, first_line(exc))
            self._conn, self.fd = None, -1
            return False
        self._conn, self.fd = conn, conn.fileno()
        if self._lost:
            logger.info("store_listener_back store=%s", self._db.where)
            self._lost = False
        return True

    def drain(self) -> set:
        if self._conn is None:
            return set(self.names) if self._open() else set()
        pgconn = self._conn.pgconn
        try:
            pgconn.consume_input()
            seen = False
            while pgconn.notifies() is not None:
                seen = True
        except Exception as exc:  # the server went away: reconnect, then re-check
            logger.warning("store_listener_lost store=%s reason=%r", self._db.where, first_line(exc))
            self._db.discard(self._conn, ForkEpoch.value)
            self._conn, self.fd = None, -1
            self._lost = True
            return set(self.names) if self._open() else set()
        return set(self.names) if seen else set()

    def close(self) -> None:
        if self._conn is not None:
            self._db.discard(self._conn, ForkEpoch.value)
            self._conn, self.fd = None, -1


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
            rows = self._conn.execute(
                self._db.sql.watched, (key_prefixes(keys), keys), binary=True
            ).fetchall()
        except Exception as exc:
            if self._conn is not None:
                self._db.discard(self._conn, ForkEpoch.value)
            self._conn, self._version = None, None
            logger.debug("Store %s: watch read failed: %s", self._db.where, first_line(exc))
            return None
        version = next((row[2] for row in rows if row[0] is None), None)
        if version == self._version and not force:
            return None
        self._version = version
        return {bytes(k): bytes(v) for k, v, _ in rows if k is not None}

