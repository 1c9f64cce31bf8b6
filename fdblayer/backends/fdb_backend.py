"""The FoundationDB backend: the official bindings under the layer's subspace.

Data model: every key of the layer lives under one subspace prefix::

    P = fdb.tuple.pack((prefix,))        # prefix from the URL, default "otpjobs"
    (P + key) = value                    # the layer's key ``key``

Principle: a thin wrapper. Reads, writes, atomic ``add``, watches,
versionstamps and conflict detection are FoundationDB's own; the wrapper adds
the prefix to every key, strips it from every key it returns, moves
versionstamp offsets by ``len(P)``, clamps key selectors that resolve outside
the subspace to ``b""`` / ``b"\\xff"`` (what they resolve to in a database of
its own), and turns ``fdb.FDBError`` into this layer's named errors.

The bindings are imported lazily: importing this module needs no libfdb_c;
``FdbDatabase.open`` raises ``StoreUnavailable("FoundationDB client library
libfdb_c not found: ...")`` when the library is missing. A handle never
crosses ``os.fork()`` (FoundationDB's network thread cannot): open the store
in the child.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, List, Optional, Sequence, cast

import fdb.tuple

from fdblayer.exceptions import (
    ConflictError,
    InvalidTransactionState,
    KeyTooLarge,
    LockTimeout,
    NoCommitVersion,
    StoreError,
    StoreUnavailable,
    TransactionTooLarge,
    ValueTooLarge,
)
from fdblayer.interface import (
    MAX_KEY_SIZE,
    MAX_TRANSACTION_SIZE,
    Database,
    ReadView,
    Transaction,
    VersionstampFuture,
    check_key,
    check_value,
    check_write_key,
    strinc,
)
from fdblayer.limits import check_versionstamp_template
from fdblayer.selectors import END_OF_KEYSPACE, KeyOrSelector, KeySelector, KeyValue, to_selector
from fdblayer.watches import Watch

__all__ = ["FdbDatabase", "FdbTransaction", "load_bindings", "API_VERSION"]

logger = logging.getLogger(__name__)

API_VERSION = 710
_ERRORS = {
    1020: ConflictError,
    1031: LockTimeout,
    2021: NoCommitVersion,
    2101: TransactionTooLarge,
    2102: KeyTooLarge,
    2103: ValueTooLarge,
}
_load_lock = threading.Lock()


def load_bindings() -> Any:
    """Import ``fdb`` and select API version 710 (once per process).

    Returns:
        The ``fdb`` module, ready to open databases.

    Raises:
        StoreUnavailable: when libfdb_c cannot be loaded.
    """
    import fdb as bindings

    with _load_lock:
        try:
            if not bindings.is_api_version_selected():
                bindings.api_version(API_VERSION)
            bindings.FDBError  # noqa: B018  (present once the C library is loaded)
        except Exception as exc:  # the bindings raise a bare Exception when the library is missing
            raise StoreUnavailable(f"FoundationDB client library libfdb_c not found: {exc}") from exc
    return bindings


def map_fdb_error(exc: BaseException) -> BaseException:
    """Turn an ``fdb.FDBError`` into the layer's named error (others unchanged)."""
    if type(exc).__name__ != "FDBError":
        return exc
    code: Any = getattr(exc, "code", None)  # the bindings' int, untyped
    cls = _ERRORS.get(code, StoreError)
    return cls(f"FoundationDB error {code}: {getattr(exc, 'description', exc)}", code=code)


class FdbDatabase(Database):
    """A FoundationDB database seen through the layer's subspace.

    Args:
        raw: an ``fdb.Database``.
        prefix: the subspace name; keys live under ``fdb.tuple.pack((prefix,))``.
    """

    def __init__(self, raw: Any, prefix: str) -> None:
        self._raw = raw
        self.prefix = cast(bytes, fdb.tuple.pack((prefix,)))
        self.prefix_end = strinc(self.prefix)
        self.max_key_size = MAX_KEY_SIZE - len(self.prefix)
        self._pid = os.getpid()
        self._closed = False

    @classmethod
    def open(cls, cluster_file: Optional[str], prefix: str) -> "FdbDatabase":
        """Open the cluster (None: the default cluster file) under ``prefix``.

        Raises:
            StoreUnavailable: when libfdb_c is missing or the cluster file is unusable.
        """
        bindings = load_bindings()
        try:
            raw = bindings.open(cluster_file) if cluster_file else bindings.open()
        except bindings.FDBError as exc:
            raise StoreUnavailable(f"cannot open FoundationDB cluster {cluster_file}: {exc}") from exc
        return cls(raw, prefix)

    def ping(self, timeout: float = 2.0) -> None:
        """Check that the cluster answers.

        Raises:
            StoreUnavailable: when no read completes within ``timeout`` seconds.
        """
        tr = self._raw.create_transaction()
        tr.options.set_timeout(int(timeout * 1000))
        try:
            tr.get(self.prefix).wait()
        except Exception as exc:  # an FDBError (timed_out, no cluster)
            raise StoreUnavailable(f"FoundationDB cluster not reachable: {exc}") from exc

    def raw(self) -> Any:
        """The underlying ``fdb.Database`` (checks for a fork)."""
        if self._pid != os.getpid():
            raise StoreUnavailable("a FoundationDB handle cannot cross os.fork(); open the store in the child")
        if self._closed:
            raise InvalidTransactionState("store is closed")
        return self._raw

    def create_transaction(self) -> "FdbTransaction":
        """A new transaction in the layer's subspace."""
        return FdbTransaction(self)

    def close(self) -> None:
        """Forget the handle (the bindings keep one network thread per process)."""
        self._closed = True

    def clear_all(self) -> None:
        """Remove every key of the layer's subspace (tests, tools)."""
        tr = self.raw().create_transaction()
        tr.clear_range(self.prefix, self.prefix_end)
        tr.commit().wait()


class _Reader(ReadView):
    """The read methods over a raw reader (a transaction or its snapshot)."""

    def __init__(self, db: FdbDatabase, raw_reader: Any) -> None:
        self._db = db
        self._reader = raw_reader

    def _call(self, future: Any) -> Any:
        try:
            return future.wait()
        except Exception as exc:  # FDBError: mapped to a named error
            mapped = map_fdb_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def _unprefix(self, key: bytes) -> bytes:
        if key < self._db.prefix:
            return b""
        if key >= self._db.prefix_end:
            return END_OF_KEYSPACE
        return key[len(self._db.prefix) :]

    def _raw_selector(self, selector: KeySelector) -> Any:
        bindings = load_bindings()
        return bindings.KeySelector(self._db.prefix + selector.key, selector.or_equal, selector.offset)

    def get(self, key: bytes) -> Optional[bytes]:
        """Read one key."""
        value = self._call(self._reader.get(self._db.prefix + check_key(key)))
        return bytes(value) if value.present() else None

    def get_many(self, keys: Sequence[bytes]) -> List[Optional[bytes]]:
        """Read several keys: every read is issued before the first wait."""
        futures = [self._reader.get(self._db.prefix + check_key(key)) for key in keys]
        values = [self._call(future) for future in futures]
        return [bytes(value) if value.present() else None for value in values]

    def get_key(self, selector: KeyOrSelector) -> bytes:
        """Resolve a selector, clamped to the subspace."""
        sel = to_selector(selector)
        return self._unprefix(bytes(self._call(self._reader.get_key(self._raw_selector(sel)))))

    def _bound(self, selector: KeySelector) -> bytes:
        if selector.offset == 1:
            return selector.key + b"\x00" if selector.or_equal else selector.key
        return self.get_key(selector)

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        """Rows with ``begin <= key < end`` inside the subspace."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        low = self._bound(to_selector(begin))
        high = min(self._bound(to_selector(end)), END_OF_KEYSPACE)
        if low >= high:
            return []
        p = self._db.prefix
        try:
            rows = list(self._reader.get_range(p + low, p + high, limit=limit, reverse=reverse))
        except Exception as exc:  # FDBError: mapped to a named error
            mapped = map_fdb_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        return [KeyValue(bytes(k)[len(p) :], bytes(v)) for k, v in rows]


class _FdbStamp(VersionstampFuture):
    """The versionstamp future of the bindings behind the layer's interface."""

    def __init__(self, raw_future: Any) -> None:
        super().__init__()
        self._raw_future = raw_future

    def is_ready(self) -> bool:
        return bool(self._raw_future.is_ready())

    def wait(self, timeout: Optional[float] = None) -> bytes:
        try:
            return bytes(self._raw_future.wait())
        except Exception as exc:  # FDBError: mapped to a named error
            mapped = map_fdb_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc


class FdbTransaction(_Reader, Transaction):
    """A transaction of the bindings, prefixed (see the module docstring)."""

    def __init__(self, db: FdbDatabase) -> None:
        self._tr = db.raw().create_transaction()
        super().__init__(db, self._tr)
        self._snapshot = _Reader(db, self._tr.snapshot)
        self._size = 0
        self._error: Optional[StoreError] = None
        self._watches: List[Watch] = []

    @property
    def db(self) -> FdbDatabase:
        return self._db

    @property
    def snapshot(self) -> ReadView:
        return self._snapshot

    def _account(self, size: int) -> None:
        if self._error is not None:
            raise self._error
        if self._size + size > MAX_TRANSACTION_SIZE:
            self._error = TransactionTooLarge(
                f"transaction of {self._size + size} bytes exceeds {MAX_TRANSACTION_SIZE}"
            )
            self._tr.reset()
            raise self._error
        self._size += size

    def _key(self, key: bytes) -> bytes:
        key = check_write_key(key)
        if len(key) > self._db.max_key_size:
            raise KeyTooLarge(f"key of {len(key)} bytes (+ prefix) exceeds {MAX_KEY_SIZE}")
        return self._db.prefix + key

    def set(self, key: bytes, value: bytes) -> None:
        full, value = self._key(key), check_value(value)
        self._account(len(full) + len(value))
        self._tr.set(full, value)

    def clear(self, key: bytes) -> None:
        full = self._key(key)
        self._account(len(full))
        self._tr.clear(full)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        begin, end = check_key(begin), min(check_key(end), END_OF_KEYSPACE)
        if begin >= end:
            return
        self._account(len(begin) + len(end))
        self._tr.clear_range(self._db.prefix + begin, self._db.prefix + end)

    def add(self, key: bytes, param: bytes) -> None:
        full, param = self._key(key), check_value(param)
        self._account(len(full) + len(param))
        self._tr.add(full, param)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        template = check_versionstamp_template(key, "key")
        value = check_value(value)
        body, pos = template[:-4], int.from_bytes(template[-4:], "little")
        self._key(body)
        moved = self._db.prefix + body + (pos + len(self._db.prefix)).to_bytes(4, "little")
        self._account(len(moved) + len(value))
        self._tr.set_versionstamped_key(moved, value)

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        full = self._key(key)
        template = check_versionstamp_template(value, "value")
        check_value(template[:-4])
        self._account(len(full) + len(template))
        self._tr.set_versionstamped_value(full, template)

    def get_versionstamp(self) -> VersionstampFuture:
        return _FdbStamp(self._tr.get_versionstamp())

    def watch(self, key: bytes) -> Watch:
        watch = Watch(check_key(key))
        raw_future = self._tr.watch(self._db.prefix + watch.key)

        def resolved(future: Any) -> None:
            try:
                future.wait()
            except Exception:  # noqa: BLE001 - FDBError: cancelled, or the transaction failed
                watch.cancel()
                return
            watch._fire()

        raw_future.on_ready(resolved)
        watch._on_cancel = lambda _w: raw_future.cancel()
        self._watches.append(watch)
        return watch

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        begin, end = check_key(begin), check_key(end)
        self._tr.add_read_conflict_range(self._db.prefix + begin, self._db.prefix + end)

    def commit(self) -> None:
        if self._error is not None:
            raise self._error
        self._call(self._tr.commit())

    def cancel(self) -> None:
        self._tr.cancel()
        for watch in self._watches:
            watch.cancel()

    def reset(self) -> None:
        self._tr.reset()
        self._size = 0
        self._error = None
        self._watches = []
