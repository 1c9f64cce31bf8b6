"""Transactions of the PostgreSQL backend (see ``postgres_backend`` for the design).

Principle: round trips are the cost, so a transaction makes as few as it
can. Every read statement also returns ``commit_version``: the first one
is sent with ``BEGIN ISOLATION LEVEL REPEATABLE READ`` in one round trip
(a pipeline) and fixes the transaction's snapshot and read version. A
*lone* transaction (``lone=True``: the database's own ``get`` and
``get_range``, which read once) sends its read without ``BEGIN``: one
statement is one snapshot, and nothing is left to end. Should a lone
transaction read again, its second read opens a snapshot and fails it
with ``ConflictError`` (``transactional`` retries) if the first read's keys
were written in between, so every read of a transaction sees one state.
Writes stay in memory until ``commit`` sends them all in one call of the
store's commit function, with the key ranges this transaction read. Reads
see the transaction's own writes: point reads from the buffer, range reads
by merging the buffer into the rows of the snapshot.

The buffer, applied at commit in this order (which gives every sequence of
calls its FoundationDB meaning):

- ``_cleared``: ranges cleared (a later ``set`` in one is kept in ``_sets``);
- ``_sets``: key -> value, or None for a cleared key (the last write wins);
- ``_adds``: key -> ``[[width, sum], ...]``, atomic adds to keys whose value
  this transaction does not know (folded, applied on the server);
- versionstamped keys and values (the stamp is the commit's version).

An add to a key whose value the buffer determines is computed here and
becomes a set; a non-snapshot read of a key with pending adds reads it
(adding a conflict) and folds the adds into a set, as FoundationDB does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from fdblayer.exceptions import (
    CommitUnknownResult,
    ConflictError,
    InvalidTransactionState,
    NoCommitVersion,
    StoreError,
    TransactionTooLarge,
)
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
from fdblayer.limits import apply_adds, check_versionstamp_template
from fdblayer.backends import postgres_direct as direct
from fdblayer.backends.postgres_arrays import ByteaArray
from fdblayer.backends.postgres_sql import connection_is_broken, first_line, key_prefixes, map_pg_error
from fdblayer.backends.postgres_own_writes import OwnWrites
from fdblayer.backends.postgres_commit_args import CommitArgs
from fdblayer.backends.postgres_in_flight import CommitSent
from fdblayer.backends.postgres_read_ahead import MANY, SLACK, ReadAhead
from fdblayer.selectors import END_OF_KEYSPACE, KeyOrSelector, KeySelector, KeyValue, to_selector
from fdblayer.forks import ForkEpoch
from fdblayer.watches import UNKNOWN_CHANGES, Watch, change_note

if TYPE_CHECKING:
    from fdblayer.backends.postgres_backend import PostgresDatabase

__all__ = ["PostgresTransaction"]

logger = logging.getLogger(__name__)


#: libpq's PQTRANS_IDLE: no transaction block open on the connection.
_IDLE = 0


def _answered(exc: BaseException, before: int) -> bool:
    """True when the commit function's statement, after ``before`` others,
    ran before ``exc`` (a failure after it was then the flush's)."""
    return getattr(exc, "succeeded", 0) > before


class _SnapshotView(ReadView):
    """``tr.snapshot``: the same reads, adding no read conflicts."""

    def __init__(self, tr: "PostgresTransaction") -> None:
        self._tr = tr

    def get(self, key: bytes) -> Optional[bytes]:
        return self._tr._read(check_key(key), snapshot=True)

    def get_many(self, keys: Sequence[bytes]) -> List[Optional[bytes]]:
        return self._tr._read_many([check_key(k) for k in keys], snapshot=True)

    def get_key(self, selector: KeyOrSelector) -> bytes:
        return self._tr._get_key(to_selector(selector), snapshot=True)

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        return self._tr._get_range(begin, end, limit, reverse, snapshot=True)


class PostgresTransaction(ReadAhead, OwnWrites, CommitArgs, StampAndWatches, Transaction):
    """A transaction on a ``PostgresDatabase`` (see the module docstring)."""

    def __init__(self, db: "PostgresDatabase", lone: bool = False) -> None:
        self._db = db
        #: The first read runs without a snapshot (for one-read transactions).
        self.lone = lone
        self._snapshot_view: Optional[_SnapshotView] = None
        #: After a commit with guesses failed, ``expect_many`` reads (kept by ``reset``).
        self._expect_reads = False
        self._init_state()

    def _init_state(self) -> None:
        self._conn: Any = None  # checked out by the first read or the commit
        self._epoch = ForkEpoch.value
        self._mode: Optional[str] = None  # None, "lone" (one read ran alone) or "snapshot"
        self._read_version: Optional[int] = None
        self._first_reads: List[Tuple[bytes, bytes]] = []  # ranges read in "lone" mode
        self._size = 0
        self._watches: List[Watch] = []
        self._stamp: Optional[VersionstampFuture] = None
        self._closed: Optional[str] = None  # None, "committed" or "cancelled"
        self._error: Optional[StoreError] = None
        self._known: Dict[bytes, Optional[bytes]] = {}  # snapshot values read (and guesses taken)
        self._expected: Dict[bytes, Optional[bytes]] = {}  # guessed values, checked at commit
        #: Forward ranges prefetched: (begin, end) -> (the limit read with, the snapshot's rows).
        self._ranges: Dict[Tuple[bytes, bytes], Tuple[int, List[Tuple[bytes, bytes]]]] = {}
        self._sets: Dict[bytes, Optional[bytes]] = {}  # own writes (None: cleared)
        self._adds: Dict[bytes, List[List[int]]] = {}
        self._cleared: List[Tuple[bytes, bytes]] = []
        #: Versionstamped writes, the last one of a key kept (as a set's):
        #: (template, position) -> value, and key -> (template, position).
        self._stamped_keys: Dict[Tuple[bytes, int], bytes] = {}
        self._stamped_values: Dict[bytes, Tuple[bytes, int]] = {}
        self._read_keys: set[bytes] = set()
        self._read_ranges: List[Tuple[bytes, bytes]] = []

    @property
    def db(self) -> "PostgresDatabase":
        return self._db

    @property
    def snapshot(self) -> ReadView:
        if self._snapshot_view is None:
            self._snapshot_view = _SnapshotView(self)
        return self._snapshot_view

    # ------------------------------------------------------------ lifecycle

    def _ensure_usable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed is not None:
            raise InvalidTransactionState(f"transaction already {self._closed}; call reset()")
        if self._epoch != ForkEpoch.value:
            raise InvalidTransactionState("transaction crossed os.fork(); create a new one")

    def _failure(self, exc: BaseException, committing: bool = False, unflushed: bool = False) -> StoreError:
        """Map a psycopg error, end the transaction with it, and return it to raise.

        The connection is kept when only the statement failed (a conflict):
        after a failed commit it is idle; after a failed read its snapshot
        is rolled back. A lost connection is dropped. ``unflushed``: the
        commit function returned; what failed is the flush after it.
        """
        if unflushed:
            error: StoreError = CommitUnknownResult(
                f"store {self._db.where}: may have committed, not known to be durable ({first_line(exc)})"
            )
        else:
            error = map_pg_error(exc, self._db.where, committing)
        self._error = error
        if committing and self._expected:
            self._expect_reads = True  # a guess may be what failed: the retries read
        conn = self._conn
        broken = conn is None or conn.closed or conn.broken or connection_is_broken(exc)
        if committing and not broken:
            self._conn = None
            self._db.checkin(conn, self._epoch)
        else:
            self._drop_connection(broken=broken)
        return error

    def _drop_connection(self, broken: bool) -> None:
        conn, self._conn = self._conn, None
        in_snapshot, self._mode = self._mode == "snapshot", None
        if conn is None:
            return
        if broken:
            self._db.discard(conn, self._epoch)
            return
        if in_snapshot or conn.pgconn.transaction_status != _IDLE:  # a first read's BEGIN, then its failure
            try:
                conn.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - the connection is unusable: forget it
                self._db.discard(conn, self._epoch)
                return
        self._db.checkin(conn, self._epoch)

    def _query(self, sql: str, params: Tuple[Any, ...]) -> List[Tuple[Any, ...]]:
        """Run a read statement (each returns ``commit_version`` too; see the
        module docstring), opening the snapshot with the first one.

        Returns:
            The data rows (the version row removed).

        Raises:
            ConflictError: a lone transaction's first read changed before its second.
        """
        self._ensure_usable()
        rows: List[Tuple[Any, ...]]
        try:
            if self._conn is None:
                self._conn = self._db.checkout()
            conn = self._conn
            if self._mode == "snapshot":
                rows = direct.run(conn, sql, params)
            elif self._mode is None and self.lone:
                rows = direct.run(conn, sql, params)
                self._mode = "lone"
            else:  # the first read, or a lone transaction's second
                rows = direct.run(conn, sql, params, before=(self._db.sql.begin,))
                self._mode = "snapshot"
        except StoreError as exc:  # checkout failed
            self._error = exc
            raise
        except Exception as exc:
            raise self._failure(exc) from exc
        version = int.from_bytes(rows[0][1], "big", signed=True)
        if self._read_version is not None and self._read_version != version:
            self._check_first_reads(version)
        self._read_version = version
        return rows[1:]

    def _check_first_reads(self, version: int) -> None:
        """The snapshot is newer than the first read: fail unless nothing it read changed."""
        if not self._first_reads:
            return
        reads, self._first_reads = self._first_reads, []
        first = self._read_version
        params = (ByteaArray(b for b, _ in reads), ByteaArray(e for _, e in reads), first, first)
        try:
            changed = direct.run(self._conn, self._db.sql.changed_since, params)[0][0]
        except Exception as exc:
            raise self._failure(exc) from exc
        if changed:
            self._error = ConflictError(
                f"store {self._db.where}: keys read were written before the transaction's second read"
            )
            self._drop_connection(broken=False)
            raise self._error

    def _note_read(self, begin: bytes, end: bytes) -> None:
        """Remember a range a lone read covered, for ``_check_first_reads``."""
        if self._mode == "lone":
            self._first_reads.append((begin, end))

    def commit(self) -> None:
        """Commit; resolve the versionstamp and arm the watches (see ``Transaction``)."""
        self.start_commit().finish()

    def start_commit(self) -> CommitSent:
        """Send the commit (see ``Transaction.start_commit``): one round
        trip whose answer ``finish()`` reads."""
        self._ensure_usable()
        watched = [(w, self._view_value(w.key)) for w in self._watches] if self._watches else None
        wrote = bool(self._sets or self._adds or self._cleared or self._stamped_keys or self._stamped_values)
        if self._expected and not wrote:
            self._check_expected()
        if not wrote:
            self._drop_connection(broken=False)
            return CommitSent(self, None, "", watched)
        note = change_note(self._changed_keys())
        return CommitSent(self, self._send_commit(note), note, watched)

    def _committed(self, version: Optional[int], note: str, watched: Optional[list[Any]]) -> None:
        """What follows a commit's answer: the versionstamp resolved, the
        watches armed, a note that names no keys sent apart."""
        self._closed = "committed"
        if version is not None and note == UNKNOWN_CHANGES:  # a note that names the keys reaches the hub by its NOTIFY
            self._db.notify_commit()
        if self._stamp is not None:
            if version is not None:
                self._stamp.set_result(version.to_bytes(8, "big") + b"\x00\x00")
            else:
                self._stamp.set_exception(NoCommitVersion("transaction committed no writes"))
        if watched:
            hub = self._db.hub()
            for watch, value in watched:
                hub.register(watch.key, value, watch, version if self._wrote(watch.key) else self._read_version)

    def _wrote(self, key: bytes) -> bool:
        """True when this transaction wrote ``key`` (its watch's value is then the commit's)."""
        return key in self._sets or key in self._adds or key in self._stamped_values or self._in_cleared(key)

    def _send_commit(self, note: str) -> Any:
        """Send the commit function: one round trip (with the end of the
        snapshot, and with ``flush=apart`` the flush after the commit);
        :meth:`_commit_answer` reads its answer.

        Raises:
            StoreError: the commit could not be sent (nothing was written).
        """
        args = self._commit_args() + (note,)
        sql = self._db.sql
        before = ("ROLLBACK",) if self._mode == "snapshot" else ()
        try:
            if self._conn is None:
                self._conn = self._db.checkout()
            conn = self._conn
            if self._db.flush_apart:  # until COMMIT, one implicit transaction; then the flush
                return direct.send(conn, sql.commit_unflushed, args, before=before, after=("COMMIT", sql.flush))
            return direct.send(conn, sql.commit, args, before=before)
        except StoreError as exc:  # checkout failed: nothing was sent
            self._error = exc
            raise
        except Exception as exc:
            self._mode = None
            raise self._failure(exc, committing=True) from exc

    def _commit_answer(self, sent: Any) -> int:
        """The commit's version, once the server answered :meth:`_send_commit`.

        Raises:
            CommitUnknownResult: the connection was lost, or (``flush=apart``)
                the commit ended and its flush failed: a server crash may
                still take it back.
        """
        conn = self._conn
        try:
            rows = sent.collect()
            self._mode = None
            version: int = rows[0][0]
        except Exception as exc:
            self._mode = None
            unflushed = self._db.flush_apart and _answered(exc, sent.before)
            raise self._failure(exc, committing=True, unflushed=unflushed) from exc
        self._conn = None
        self._db.checkin(conn, self._epoch)
        return version

    def cancel(self) -> None:
        """Discard every write and watch; later calls raise until ``reset``."""
        self._drop_connection(broken=self._error is not None)
        if self._closed is None:
            self._closed = "cancelled"
        for watch in self._watches:
            watch.cancel()
        if self._stamp is not None and not self._stamp.is_ready():
            self._stamp.set_exception(InvalidTransactionState("transaction cancelled"))

    def reset(self) -> None:
        """Discard everything and start afresh (keeps ``deadline``)."""
        self.cancel()
        self._init_state()

    def __del__(self) -> None:
        if getattr(self, "_conn", None) is not None and self._epoch == ForkEpoch.value:
            try:
                self._drop_connection(broken=False)
            except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to release
                pass

    # ------------------------------------------------------------ the view

    def _view_value(self, key: bytes) -> Optional[bytes]:
        """The value this transaction sees (a snapshot read where it must read)."""
        return self._read(key, snapshot=True)

    def _read(self, key: bytes, snapshot: bool) -> Optional[bytes]:
        self._ensure_usable()
        if key in self._sets:
            return self._sets[key]
        queued = self._adds.get(key)
        if queued is None and self._in_cleared(key):
            return None
        value = self._known[key] if key in self._known else self._fetch([key])[key]
        if not snapshot:
            self._read_keys.add(key)
        if queued is None:
            return value
        value = apply_adds(value, queued)
        if not snapshot:  # the read made the key known: the adds become a set
            del self._adds[key]
            self._sets[key] = value
        return value

    def _read_many(self, keys: List[bytes], snapshot: bool) -> List[Optional[bytes]]:
        self._ensure_usable()
        missing = [
            k
            for k in dict.fromkeys(keys)
            if k not in self._known and k not in self._sets and (k in self._adds or not self._in_cleared(k))
        ]
        if missing:
            self._fetch(missing)
        return [self._read(k, snapshot) for k in keys]

    def _fetch(self, keys: List[bytes]) -> Dict[bytes, Optional[bytes]]:
        """Read keys from the snapshot into ``_known``."""
        sql = self._db.sql
        found: Dict[bytes, Optional[bytes]] = {}
        for start in range(0, len(keys), MANY):
            chunk = keys[start : start + MANY]
            if len(chunk) == 1:
                rows = self._query(sql.get, (chunk[0], chunk[0]))
            else:
                rows = self._query(sql.get_many, (key_prefixes(chunk), ByteaArray(chunk)))
            values = dict(rows)
            for key in chunk:
                found[key] = values.get(key)
                self._note_read(key, key + b"\x00")
        self._known.update(found)
        return found

    # ------------------------------------------------------------ reads

    def get(self, key: bytes) -> Optional[bytes]:
        """Read one key (``None`` when absent)."""
        if type(key) is not bytes or len(key) > MAX_KEY_SIZE:
            key = check_key(key)
        return self._read(key, snapshot=False)

    def get_many(self, keys: Sequence[bytes]) -> List[Optional[bytes]]:
        """Read several keys; those not yet known in one query."""
        return self._read_many([check_key(k) for k in keys], snapshot=False)

    def get_key(self, selector: KeyOrSelector) -> bytes:
        """Resolve a key selector against the transaction's view."""
        return self._get_key(to_selector(selector), snapshot=False)

    def _get_key(self, sel: KeySelector, snapshot: bool) -> bytes:
        key = check_key(sel.key)
        if sel.offset >= 1:
            start = key + b"\x00" if sel.or_equal else key
            rows = self._merged(start, END_OF_KEYSPACE, sel.offset, False, snapshot)
            return min(rows[-1].key, END_OF_KEYSPACE) if len(rows) == sel.offset else END_OF_KEYSPACE
        end = key + b"\x00" if sel.or_equal else key
        rows = self._merged(b"", min(end, END_OF_KEYSPACE), 1 - sel.offset, True, snapshot)
        return min(rows[-1].key, END_OF_KEYSPACE) if len(rows) == 1 - sel.offset else b""

    def _bound(self, sel: KeySelector, snapshot: bool) -> bytes:
        if sel.offset == 1:
            return check_key(sel.key) + b"\x00" if sel.or_equal else check_key(sel.key)
        return self._get_key(sel, snapshot)

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        """Rows with ``begin <= key < end`` (see ``ReadView.get_range``)."""
        return self._get_range(begin, end, limit, reverse, snapshot=False)

    def _get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int, reverse: bool, snapshot: bool
    ) -> List[KeyValue]:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self._ensure_usable()
        low = self._bound(to_selector(begin), snapshot)
        high = min(self._bound(to_selector(end), snapshot), END_OF_KEYSPACE)
        if low >= high:
            return []
        return self._merged(low, high, limit, reverse, snapshot)

    def _merged(self, low: bytes, high: bytes, limit: int, reverse: bool, snapshot: bool) -> List[KeyValue]:
        """The rows of ``[low, high)`` in this transaction's view; records the
        read conflict range (up to the last row when the limit cut it)."""
        self._ensure_usable()
        if low >= high:
            return []
        overlay = self._overlay(low, high)
        rows: List[KeyValue] = []
        cursor_low, cursor_high = low, high
        while True:
            want = 0 if not limit else limit - len(rows) + len(overlay) + SLACK
            chunk = self._chunk(cursor_low, cursor_high, want, reverse) if limit else 0
            db_rows = self._db_range(cursor_low, cursor_high, chunk, reverse)
            rows = self._merge(
                rows,
                db_rows,
                overlay,
                cursor_low,
                cursor_high,
                reverse,
                final=not limit or len(db_rows) < chunk,
            )
            if not limit or len(rows) >= limit or len(db_rows) < chunk:
                break
            last = db_rows[-1][0]
            if reverse:
                cursor_high = last
            else:
                cursor_low = last + b"\x00"
        if limit and len(rows) > limit:
            rows = rows[:limit]
        if not snapshot:
            if limit and len(rows) == limit:
                last = rows[-1].key
                self._read_ranges.append((last, high) if reverse else (low, last + b"\x00"))
            else:
                self._read_ranges.append((low, high))
            self._fold_adds(rows)
        return rows

    def _chunk(self, low: bytes, high: bytes, want: int, reverse: bool) -> int:
        """Rows to ask for the next chunk of ``[low, high)``: ``want``, or
        as many as a prefetch read of it holds when that is fewer and not
        the whole range (the merge asks the store for more only if it
        needs them: buffered keys it must skip)."""
        cached = None if reverse else self._ranges.get((low, high))
        if cached is not None and len(cached[1]) >= cached[0]:
            return min(want, cached[0])
        return want

    def _db_range(self, low: bytes, high: bytes, limit: int, reverse: bool) -> List[Tuple[bytes, bytes]]:
        prefetched = None if reverse else self._prefetched_range(low, high, limit)
        if prefetched is not None:
            rows = prefetched
        else:
            sql = self._db.sql
            rows = self._query(sql.range_desc if reverse else sql.range_asc, (low, high, low, high, limit or None))
        if limit and len(rows) == limit:  # the part the rows depend on
            last = rows[-1][0]
            self._note_read(last, high) if reverse else self._note_read(low, last + b"\x00")
        else:
            self._note_read(low, high)
        return rows

    # ------------------------------------------------------------ writes

    def _prepare_write(self, size: int) -> None:
        self._ensure_usable()
        if self._size + size > MAX_TRANSACTION_SIZE:
            self._error = TransactionTooLarge(
                f"transaction of {self._size + size} bytes exceeds {MAX_TRANSACTION_SIZE}"
            )
            self._drop_connection(broken=False)
            raise self._error
        self._size += size

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
        self._prepare_write(len(key) + len(value))
        self._sets[key] = value
        self._adds.pop(key, None)
        if self._stamped_values:  # the last write wins, a stamped value's too
            self._stamped_values.pop(key, None)

    def clear(self, key: bytes) -> None:
        """Remove one key."""
        if type(key) is not bytes or len(key) > MAX_KEY_SIZE or key >= END_OF_KEYSPACE:
            key = check_write_key(key)
        self._prepare_write(len(key))
        self._sets[key] = None
        self._adds.pop(key, None)
        if self._stamped_values:
            self._stamped_values.pop(key, None)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Remove ``[begin, end)``."""
        begin, end = check_key(begin), check_key(end)
        end = min(end, END_OF_KEYSPACE)
        if begin >= end:
            return
        self._prepare_write(len(begin) + len(end))
        for buffer in (self._sets, self._adds, self._stamped_values):
            for key in [k for k in buffer if begin <= k < end]:
                del buffer[key]
        self._cleared.append((begin, end))

    def add(self, key: bytes, param: bytes) -> None:
        """Atomic little-endian add (FoundationDB's ``add``).

        Computed here when this transaction's own writes fix the key's value;
        otherwise applied on the server at commit, reading nothing.
        """
        if type(key) is not bytes or type(param) is not bytes or key >= END_OF_KEYSPACE:
            key, param = check_write_key(key), check_value(param)
        elif len(key) > MAX_KEY_SIZE or len(param) > MAX_VALUE_SIZE:
            key, param = check_write_key(key), check_value(param)
        self._prepare_write(len(key) + len(param))
        if key in self._sets:
            self._sets[key] = add_little_endian(self._sets[key], param)
            return
        if key not in self._adds and self._in_cleared(key):
            self._sets[key] = add_little_endian(None, param)
            return
        queued = self._adds.setdefault(key, [])
        width = len(param)
        if queued and queued[-1][0] == width:
            queued[-1][1] += int.from_bytes(param, "little")
        else:
            queued.append([width, int.from_bytes(param, "little")])

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        """Write at ``key`` with its placeholder replaced by the commit's versionstamp."""
        template = check_versionstamp_template(key, "key")
        check_write_key(splice_versionstamp(template, b"\x00" * 10))
        value = check_value(value)
        self._prepare_write(len(template) + len(value))
        pos = int.from_bytes(template[-4:], "little")
        self._stamped_keys[template[:-4], pos] = value

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        """Write at ``key`` a value whose placeholder is the commit's versionstamp."""
        key = check_write_key(key)
        template = check_versionstamp_template(value, "value")
        check_value(template[:-4])
        self._prepare_write(len(key) + len(template))
        self._sets.pop(key, None)
        self._adds.pop(key, None)
        self._stamped_values[key] = (template[:-4], int.from_bytes(template[-4:], "little"))

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        """Make the commit fail if another commit after this one's reads wrote in ``[begin, end)``."""
        begin, end = check_key(begin), check_key(end)
        self._ensure_usable()
        if begin < end:
            if self._mode is None:  # fixes the read version the check starts from
                self._query(self._db.sql.version_only, ())
            self._read_ranges.append((begin, end))
