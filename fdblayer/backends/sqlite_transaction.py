"""Transactions of the SQLite backend (see ``sqlite_backend`` for the design).

Principle: a transaction is lazy. Its first read opens a deferred SQLite read
transaction (a snapshot, pinned by that read); its writes take SQLite's write
lock at commit, by upgrading the snapshot (when anyone committed since, its
recorded reads are checked again under the lock, and only one that changed is
a ConflictError: ``sqlite_locking``), or, when it has not read yet or is
pessimistic (a retry), at its first write with ``BEGIN IMMEDIATE`` behind the
fair write queue; COMMIT commits.

Like FoundationDB's client, a transaction keeps its writes in memory (as
``_pending``) and executes them in batches (``executemany``) at commit, or
before a read of a range holding one of them, a key-selector read or a
range clear, which SQLite must answer; point reads see them from memory
(read-your-writes). Point reads are
cached per transaction (``_known``): the SQLite snapshot a transaction reads
cannot change while it lives, so a second read of a key would return the
same bytes. An atomic ``add`` to a key the transaction has not read is
buffered without reading and runs as one upsert through the ``fdb_add`` SQL
function. None of this changes what a transaction sees or whether it
conflicts (as on FoundationDB, a conflict shows at commit): a transaction
that has read holds no lock while its body runs, so other processes' writers
wait only for its commit.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Collection, Dict, List, Optional, Sequence, Set, Tuple

from fdblayer.exceptions import InvalidTransactionState, NoCommitVersion, StoreError, TransactionTooLarge
from fdblayer.interface import (
    MAX_KEY_SIZE,
    MAX_TRANSACTION_SIZE,
    MAX_VALUE_SIZE,
    ReadView,
    Transaction,
    VersionstampFuture,
    add_little_endian,
    check_key,
    check_value,
    check_write_key,
    splice_versionstamp,
)
from fdblayer.backends.buffered import StampAndWatches
from fdblayer.limits import add_params, apply_adds, check_versionstamp_template
from fdblayer.selectors import END_OF_KEYSPACE, KeyOrSelector, KeySelector, KeyValue, to_selector
from fdblayer.forks import ForkEpoch
from fdblayer.backends.sqlite_locking import SqliteLocking
from fdblayer.backends.sqlite_sql import (
    SQL_ADD,
    SQL_BUMP_VERSION,
    SQL_CLEAR,
    SQL_CLEAR_RANGE,
    SQL_GET,
    SQL_PIN_SNAPSHOT,
    SQL_RANGE_ASC,
    SQL_RANGE_DESC,
    SQL_SET,
    map_sqlite_error,
    read_keys,
)
from fdblayer.watches import UNKNOWN_VALUE, Watch

if TYPE_CHECKING:
    from fdblayer.backends.sqlite_backend import SqliteDatabase

__all__ = ["SqliteTransaction"]

logger = logging.getLogger(__name__)

#: Buffered writes a range read scans for one in its range; more, and it flushes them.
_SCAN_MAX = 1024


class _SnapshotView(ReadView):
    """``tr.snapshot``: the same reads, adding no conflict (as on
    FoundationDB): a stale snapshot's upgrade does not check them again."""

    def __init__(self, tr: "SqliteTransaction") -> None:
        self._tr = tr

    def get(self, key: bytes) -> Optional[bytes]:
        return self._tr._read_many([key], check=False)[0]

    def get_many(self, keys: Sequence[bytes]) -> List[Optional[bytes]]:
        return self._tr._read_many(keys, check=False)

    def get_key(self, selector: KeyOrSelector) -> bytes:
        return self._tr.get_key(selector)

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        return self._tr._read_range(begin, end, limit, reverse, check=False)


class SqliteTransaction(SqliteLocking, StampAndWatches, Transaction):
    """A transaction on an ``SqliteDatabase`` (see the module docstring).

    Args:
        db: the database.
        pessimistic: take the write lock before the first read.
    """

    def __init__(self, db: SqliteDatabase, pessimistic: bool = False) -> None:
        self._db = db
        self.pessimistic = pessimistic
        self._snapshot_view: Optional[_SnapshotView] = None
        self._init_state()

    def _init_state(self) -> None:
        self._conn: Optional[sqlite3.Connection] = None
        self._epoch = ForkEpoch.value  # of the checkout of ``_conn``
        self._mode: Optional[str] = None  # None, "read" or "write"
        self._gate_held = False
        self._revalidated = False  # a stale snapshot was upgraded (``SqliteLocking._revalidate``)
        self._version: Optional[int] = None
        self._size = 0
        self._watches: List[Watch] = []
        self._stamp: Optional[VersionstampFuture] = None
        self._closed: Optional[str] = None  # None, "committed" or "cancelled"
        self._error: Optional[StoreError] = None
        self._ok = True  # neither closed nor failed (the hot paths' one-attribute check)
        self._known: Dict[bytes, Optional[bytes]] = {}  # this transaction's view
        self._pending: Dict[bytes, Optional[bytes]] = {}  # unflushed sets (None: clear)
        self._cleared = False  # a clear was buffered since the last flush
        self._adds: Dict[bytes, List[List[int]]] = {}  # unflushed adds to unread keys
        self._rows = 0  # rows written (told to the store's checkpoint thread)
        self._reads: Optional[List[Tuple[str, Sequence[object], List[object]]]] = []  # the snapshot's reads (_recorded)
        self._fetched: Dict[bytes, Optional[bytes]] = {}  # the values point reads found on the snapshot
        self._checked: Set[bytes] = set()  # of those, the keys read for real (not snapshot reads)
        self._conflict_keys: Set[bytes] = set()  # read conflicts on single keys, read only if the upgrade is refused
        self._pinned = False  # a read ran: the snapshot is fixed
        self._read_rows = 0
        #: Versionstamped writes, applied at commit once the lock is held (as
        #: on PostgreSQL, reads do not see them before): template -> value,
        #: and key -> value template; the last write of a key wins.
        self._stamped_keys: Dict[bytes, bytes] = {}
        self._stamped_values: Dict[bytes, bytes] = {}

    @property
    def db(self) -> SqliteDatabase:
        return self._db

    @property
    def snapshot(self) -> ReadView:
        if self._snapshot_view is None:
            self._snapshot_view = _SnapshotView(self)
        return self._snapshot_view

    # ------------------------------------------------------------ lifecycle

    def _ensure_usable(self) -> None:
        if self._ok and self._epoch == ForkEpoch.value:
            return
        if self._error is not None:
            raise self._error
        if self._closed is not None:
            raise InvalidTransactionState(f"transaction already {self._closed}; call reset()")
        if self._epoch != ForkEpoch.value and self._conn is not None:
            raise InvalidTransactionState("transaction crossed os.fork(); create a new one")

    def _sqlite_failure(self, exc: sqlite3.Error) -> StoreError:
        """Map an sqlite3 error, end the transaction with it, and return it to raise."""
        error = map_sqlite_error(exc, self._db.path)
        self._fail(error)
        return error

    def _fail(self, error: StoreError) -> None:
        """Discard the SQLite transaction; every later call raises ``error``."""
        self._error = error
        self._ok = False
        self._release(rollback=True)

    def _release(self, rollback: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            if rollback and conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error as exc:
                    logger.warning("store_rollback_failed store=%s error=%s", self._db.path, exc)
            self._db.checkin(conn, self._epoch)
        if self._gate_held:
            self._gate_held = False
            self._db.gate().release()
        self._mode = None

    def _bump_version(self) -> None:
        assert self._conn is not None
        self._upgrade()
        try:
            self._version = self._conn.execute(SQL_BUMP_VERSION).fetchone()[0]
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        self._mode = "write"  # the UPDATE took the write lock

    def _read_conn(self) -> sqlite3.Connection:
        """The connection, for a read that runs at once (it pins the snapshot)."""
        if self._mode is not None and self._ok and self._epoch == ForkEpoch.value:
            self._pinned = True
            return self._conn  # type: ignore[return-value]  # a mode means a connection
        self._ensure_usable()
        if self._mode is None:
            if self.pessimistic:
                self._begin_write()
            else:
                self._begin_read()
        assert self._conn is not None
        self._pinned = True
        return self._conn

    def _buffered_within(self, low: bytes, high: bytes) -> bool:
        """True when a buffered write (set, clear or add) falls in ``[low, high)``.

        A range read flushes the buffer only then: a read of a range the
        transaction has not written is answered by its snapshot as it is, so
        a transaction that reads after writing elsewhere (a step: ends, then
        claims) keeps its snapshot, and takes the lock only at commit. A
        buffer of more than ``_SCAN_MAX`` writes counts as within (flushed
        as before): a loop of range reads and writes elsewhere (a prune)
        must not rescan a growing buffer at every read."""
        if len(self._pending) + len(self._adds) > _SCAN_MAX:
            return True  # a large buffer is flushed, not scanned at every range read
        if any(low <= key < high for key in self._pending):
            return True
        return bool(self._adds) and any(low <= key < high for key in self._adds)

    def _flushed_conn(self) -> sqlite3.Connection:
        """The connection, with the buffered writes executed (for SQL-level reads)."""
        conn = self._read_conn()
        if self._pending or self._adds:
            self._flush()
        return conn

    def _prepare_write(self, size: int) -> None:
        """Account for a write of ``size`` bytes; a transaction that has not
        started takes the write lock now (blind writes never conflict)."""
        self._ensure_usable()
        if self._size + size > MAX_TRANSACTION_SIZE:
            self._fail(TransactionTooLarge(f"transaction of {self._size + size} bytes exceeds {MAX_TRANSACTION_SIZE}"))
            assert self._error is not None
            raise self._error
        if self._mode is None:
            self._begin_write()
        self._size += size

    def _flush(self) -> None:
        """Execute the buffered writes, in batches (one statement kind each)."""
        assert self._conn is not None
        self._upgrade()  # a transaction that read takes the lock first
        pending, adds = self._pending, self._adds
        self._pending, self._adds = {}, {}
        sets: Collection[Tuple[bytes, Optional[bytes]]]
        if self._cleared:
            self._cleared = False
            sets = [(k, v) for k, v in pending.items() if v is not None]
            clears = [(k,) for k, v in pending.items() if v is None]
        else:  # only sets: the dict's items are the rows
            sets, clears = pending.items(), []
        try:
            if sets:
                self._conn.executemany(SQL_SET, sets)
            if clears:
                self._conn.executemany(SQL_CLEAR, clears)
            if adds:
                self._conn.executemany(SQL_ADD, [(k, p) for k, ps in adds.items() for p in add_params(ps)])
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        if sets or clears or adds:
            self._mode = "write"  # the first write took SQLite's write lock
            self._rows += len(pending) + len(adds)

    def commit(self) -> None:
        """Commit; resolve the versionstamp and arm the watches (see ``Transaction``)."""
        if not self._ok or self._epoch != ForkEpoch.value:
            self._ensure_usable()
        watched = self._watched_values() if self._watches else None
        if self._stamped_keys or self._stamped_values:
            self._apply_stamps()
        if self._pending or self._adds:
            self._flush()
        wrote = self._mode == "write"
        if wrote and self._stamp is not None and self._version is None:
            self._bump_version()
        conn = self._conn
        if conn is not None:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._sqlite_failure(exc) from exc
            self._conn = None
            self._db.checkin(conn, self._epoch)
        if self._gate_held:
            self._release(rollback=False)
        self._mode = None
        self._closed = "committed"
        self._ok = False
        if wrote:
            self._db.notify_commit(self._rows)
        if self._stamp is not None:
            self._resolve_stamp(wrote)
        if watched:
            hub = self._db.hub()
            for watch, value in watched:
                hub.register(watch.key, value, watch)

    def _watched_values(self) -> list[tuple[Watch, Optional[bytes]]]:
        """The value each watched key has at commit (what its watch compares
        with); ``UNKNOWN_VALUE`` once a stale snapshot was revalidated (its
        reads span two states: a change between them must fire the watch)."""
        if self._revalidated:
            return [(w, UNKNOWN_VALUE) for w in self._watches]
        if self._mode is None:
            self._read_conn()
        return [(w, self._get(w.key)) for w in self._watches]

    def _apply_stamps(self) -> None:
        """Take the commit's version (and with it the lock), and buffer the
        versionstamped writes with their stamps filled in."""
        stamp = self._stamp_bytes()
        for template, value in self._stamped_keys.items():
            self._pending[splice_versionstamp(template, stamp)] = value
        for key, template in self._stamped_values.items():
            self._pending[key] = splice_versionstamp(template, stamp)
        self._stamped_keys, self._stamped_values = {}, {}

    def _resolve_stamp(self, wrote: bool) -> None:
        assert self._stamp is not None
        if wrote:
            assert self._version is not None
            self._stamp.set_result(self._version.to_bytes(8, "big") + b"\x00\x00")
        else:
            self._stamp.set_exception(NoCommitVersion("transaction committed no writes"))

    def cancel(self) -> None:
        """Discard every write and watch; later calls raise until ``reset``."""
        self._release(rollback=True)
        if self._closed is None:
            self._closed = "cancelled"
            self._ok = False
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
        if getattr(self, "_conn", None) is not None and self._epoch == ForkEpoch.value:
            self._release(rollback=True)

    # ------------------------------------------------------------ reads

    def _get(self, key: bytes) -> Optional[bytes]:
        """Read through this transaction's view: its writes, then what it read."""
        known = self._known
        if key in known:
            return known[key]
        if key in self._adds:
            return self._apply_adds(key)
        return self._fetch(key)

    def _fetch(self, key: bytes) -> Optional[bytes]:
        """Read ``key`` from SQLite (its snapshot cannot change: cache the value)."""
        conn = self._read_conn()
        try:
            row = conn.execute(SQL_GET, (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        value = None if row is None else row[0]
        self._known[key] = value
        if self._mode == "read":
            self._fetched[key] = value
        return value

    def get_many(self, keys: Sequence[bytes]) -> List[Optional[bytes]]:
        """Read several keys; those not yet in this transaction's view in one query."""
        return self._read_many(keys, check=True)

    def _read_many(self, keys: Sequence[bytes], check: bool) -> List[Optional[bytes]]:
        """``get_many``; with ``check``, the keys whose values came from the
        snapshot are checked again if it goes stale (``_points_changed``)."""
        keys = [key if type(key) is bytes and len(key) <= MAX_KEY_SIZE else check_key(key) for key in keys]
        self._ensure_usable()
        known, adds = self._known, self._adds
        missing = [key for key in keys if key not in known and key not in adds]
        if len(missing) == 1:
            self._fetch(missing[0])  # the point query
        elif missing:
            self._fetch_many(list(dict.fromkeys(missing)))
        values = [known[key] if key in known else self._get(key) for key in keys]
        if check and self._mode == "read":
            fetched = self._fetched
            self._checked.update(key for key in keys if key in fetched)
        return values

    def _fetch_many(self, keys: List[bytes]) -> None:
        """Read distinct ``keys`` from SQLite into the view (``read_keys``)."""
        conn = self._read_conn()
        try:
            found = read_keys(conn, keys)
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        values = [(key, found.get(key)) for key in keys]
        self._known.update(values)
        if self._mode == "read":
            self._fetched.update(values)

    def _apply_adds(self, key: bytes) -> Optional[bytes]:
        """Fold the buffered adds of ``key`` into its value (now a plain set)."""
        value = apply_adds(self._fetch(key), self._adds.pop(key))
        self._known[key] = self._pending[key] = value
        return value

    def get(self, key: bytes) -> Optional[bytes]:
        """Read one key (``None`` when absent)."""
        if type(key) is not bytes or len(key) > MAX_KEY_SIZE:
            key = check_key(key)
        self._ensure_usable()
        value = self._get(key)
        if self._mode == "read" and key in self._fetched:
            self._checked.add(key)
        return value

    def _resolve(self, conn: sqlite3.Connection, selector: KeySelector) -> bytes:
        key, or_equal, offset = selector.key, selector.or_equal, selector.offset
        if offset >= 1:
            op = ">" if or_equal else ">="
            sql = f"SELECT k FROM kv WHERE k {op} ? ORDER BY k LIMIT 1 OFFSET ?"
            rows = self._recorded(conn, sql, (key, offset - 1))
            return min(rows[0][0], END_OF_KEYSPACE) if rows else END_OF_KEYSPACE
        op = "<=" if or_equal else "<"
        sql = f"SELECT k FROM kv WHERE k {op} ? ORDER BY k DESC LIMIT 1 OFFSET ?"
        rows = self._recorded(conn, sql, (key, -offset))
        return min(rows[0][0], END_OF_KEYSPACE) if rows else b""

    def _bound(self, conn: sqlite3.Connection, selector: KeySelector) -> bytes:
        """A key bound equivalent to the selector (no query for the usual shapes)."""
        if selector.offset == 1:
            return selector.key + b"\x00" if selector.or_equal else selector.key
        return self._resolve(conn, selector)

    def get_key(self, selector: KeyOrSelector) -> bytes:
        """Resolve a key selector against the transaction's view."""
        sel = to_selector(selector)
        conn = self._flushed_conn()
        try:
            return self._resolve(conn, sel)
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        """Rows with ``begin <= key < end`` (see ``ReadView.get_range``)."""
        return self._read_range(begin, end, limit, reverse, check=True)

    def _read_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int, reverse: bool, check: bool
    ) -> List[KeyValue]:
        """``get_range``; with ``check``, the query and its answer are
        recorded (``_recorded``) for the stale snapshot's revalidation."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        begin_sel, end_sel = to_selector(begin), to_selector(end)
        plain = begin_sel.offset == 1 and end_sel.offset == 1  # bounds known without a query
        conn = self._read_conn() if plain else self._flushed_conn()
        try:
            low = self._bound(conn, begin_sel)
            high = min(self._bound(conn, end_sel), END_OF_KEYSPACE)
            if low >= high:
                return []
            if plain and self._buffered_within(low, high):
                self._flush()  # SQLite must see the writes this read would see
            sql = SQL_RANGE_DESC if reverse else SQL_RANGE_ASC
            params: Tuple[object, ...] = (low, high)
            if limit:
                sql, params = sql + " LIMIT ?", (low, high, limit)
            rows = self._recorded(conn, sql, params) if check else conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        return [KeyValue(k, v) for k, v in rows]

    # ------------------------------------------------------------ writes

    def _buffer(self, key: bytes, value: Optional[bytes]) -> None:
        """Record a set (or, with None, a clear) to execute at the next flush."""
        self._known[key] = self._pending[key] = value
        if self._adds:
            self._adds.pop(key, None)
        if self._stamped_values:
            self._stamped_values.pop(key, None)

    def set(self, key: bytes, value: bytes) -> None:
        """Write one key (see ``Transaction.set``)."""
        if (
            type(key) is not bytes
            or type(value) is not bytes
            or len(key) > MAX_KEY_SIZE
            or key >= END_OF_KEYSPACE
            or len(value) > MAX_VALUE_SIZE
        ):
            key, value = check_write_key(key), check_value(value)
        size = len(key) + len(value)
        if (
            self._mode is not None
            and self._ok
            and self._epoch == ForkEpoch.value
            and self._size + size <= MAX_TRANSACTION_SIZE
        ):
            self._size += size
        else:
            self._prepare_write(size)
        self._known[key] = self._pending[key] = value
        if self._adds:
            self._adds.pop(key, None)
        if self._stamped_values:
            self._stamped_values.pop(key, None)

    def clear(self, key: bytes) -> None:
        """Remove one key."""
        if type(key) is not bytes or len(key) > MAX_KEY_SIZE or key >= END_OF_KEYSPACE:
            key = check_write_key(key)
        self._prepare_write(len(key))
        self._buffer(key, None)
        self._cleared = True

    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Remove ``[begin, end)``."""
        begin, end = check_key(begin), check_key(end)
        end = min(end, END_OF_KEYSPACE)
        if begin >= end:
            return
        self._prepare_write(len(begin) + len(end))
        conn = self._flushed_conn()
        self._upgrade()
        try:
            self._rows += max(conn.execute(SQL_CLEAR_RANGE, (begin, end)).rowcount, 1)
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
        self._mode = "write"
        self._known.clear()  # rows read or written in the range are gone
        for key in [k for k in self._stamped_values if begin <= k < end]:
            del self._stamped_values[key]

    def add(self, key: bytes, param: bytes) -> None:
        """Atomic little-endian add (FoundationDB's ``add``).

        A key this transaction has read or written is added to at once;
        otherwise the add is buffered and runs as one ``SQL_ADD`` at the next
        flush, with no read (unless the transaction reads the key first).
        """
        if type(key) is not bytes or type(param) is not bytes or key >= END_OF_KEYSPACE:
            key, param = check_write_key(key), check_value(param)
        elif len(key) > MAX_KEY_SIZE or len(param) > MAX_VALUE_SIZE:
            key, param = check_write_key(key), check_value(param)
        size = len(key) + len(param)
        queued = self._adds.get(key)
        if (  # the common case: one more bump of a counter this transaction bumped
            queued is not None
            and queued[-1][0] == len(param)
            and self._ok
            and self._epoch == ForkEpoch.value
            and self._size + size <= MAX_TRANSACTION_SIZE
        ):
            self._size += size
            queued[-1][1] += int.from_bytes(param, "little")
            return
        self._prepare_write(size)
        known = self._known
        if key in known:
            value = add_little_endian(known[key], param)
            known[key] = self._pending[key] = value
        else:
            self._buffer_add(key, param)

    def _buffer_add(self, key: bytes, param: bytes) -> None:
        """Queue an add to an unread key; same-width adds fold into one.

        Adds of one width compose modulo ``2**(8*width)``, so a run of them
        (the jobs layer bumps one counter per job) flushes as one upsert.
        Each queued add is ``[width, sum]``, the sum an int reduced at flush.
        """
        params = self._adds.get(key)
        width = len(param)
        if params is None:
            self._adds[key] = [[width, int.from_bytes(param, "little")]]
        elif params[-1][0] == width:
            params[-1][1] += int.from_bytes(param, "little")
        else:
            params.append([width, int.from_bytes(param, "little")])

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
        self._prepare_write(len(template) + len(value))
        self._stamped_keys[template] = value

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        """Write at ``key`` a value whose placeholder is the commit's versionstamp."""
        key = check_write_key(key)
        template = check_versionstamp_template(value, "value")
        check_value(template[:-4])
        self._prepare_write(len(key) + len(template))
        self._pending.pop(key, None)  # the last write of the key wins
        self._known.pop(key, None)
        if self._adds:
            self._adds.pop(key, None)
        self._stamped_values[key] = template

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        """Make the commit fail if ``[begin, end)`` changes after this
        transaction's snapshot: its rows are read there and recorded, so
        the upgrade checks them again (``SqliteLocking._revalidate``). A
        single key (a claim's, one per job) is only noted: a refused upgrade
        reads the noted keys on the stale snapshot, in one query, first."""
        check_key(begin), check_key(end)
        pinned = self._pinned
        conn = self._read_conn()
        if self._mode != "read" or begin >= end:
            return
        try:
            if not pinned:
                conn.execute(SQL_PIN_SNAPSHOT).fetchall()  # a deferred BEGIN reads nothing yet
            if end == begin + b"\x00":
                self._conflict_keys.add(begin)
            else:
                self._recorded(conn, SQL_RANGE_ASC, (begin, min(end, END_OF_KEYSPACE)))
        except sqlite3.Error as exc:
            raise self._sqlite_failure(exc) from exc
