"""The store interface: a database, transactions and ``@transactional``.

Principle: one small transaction interface shaped like the official
FoundationDB Python bindings, implemented once per backend
(``sqlite_backend``, ``postgres_backend``, ``fdb_backend``). Keys and values
are ``bytes``, keys are packed with ``fdb.tuple`` and compare as unsigned
bytes (memcmp) on every backend. FoundationDB's size limits and their checks
live in :mod:`fdblayer.limits` (re-exported here); each backend's transaction
calls them at the call, before anything reaches its store, and counts its
own transaction size against ``MAX_TRANSACTION_SIZE``, so every backend
refuses the same writes with the same named errors.

Transactions are serializable. A transaction body may run more than once
(``transactional`` retries conflicts), so it must have no effect outside its
transaction: return data, act after the commit.
"""

from __future__ import annotations

import abc
import functools
import inspect
import logging
import random
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, TypeVar, Union, cast, overload

from fdblayer.exceptions import (
    CommitUnknownResult,
    InvalidTransactionState,
    RetryLimitExceeded,
    ServerGone,
    is_retryable,
)
from fdblayer.limits import (  # the interface's limits and checks (see __all__)
    MAX_KEY_SIZE,
    MAX_TRANSACTION_SIZE,
    MAX_VALUE_SIZE,
    VERSIONSTAMP_SIZE,
    add_little_endian,
    check_key,
    check_value,
    check_write_key,
    splice_versionstamp,
    strinc,
)
from fdblayer.selectors import END_OF_KEYSPACE, KeyOrSelector, KeySelector, KeyValue
from fdblayer.watches import Watch

__all__ = [
    "Database",
    "Transaction",
    "CommitInFlight",
    "ReadView",
    "VersionstampFuture",
    "transactional",
    "run_retrying",
    "kind_of",
    "MAX_KEY_SIZE",
    "MAX_VALUE_SIZE",
    "MAX_TRANSACTION_SIZE",
    "VERSIONSTAMP_SIZE",
    "check_key",
    "check_value",
    "check_write_key",
    "add_little_endian",
    "splice_versionstamp",
    "strinc",
]

logger = logging.getLogger(__name__)


#: Defaults of ``transactional``: attempts, seconds, and backoff bounds (seconds).
DEFAULT_RETRY_LIMIT = 100
DEFAULT_TIMEOUT = 60.0
BACKOFF_BASE = 0.001
BACKOFF_MAX = 0.1

T = TypeVar("T")
BytesLike = Union[bytes, bytearray, memoryview]


# --------------------------------------------------------------------------- futures


class VersionstampFuture:
    """The versionstamp of a transaction, known once it has committed.

    ``wait()`` returns the 10 bytes (8-byte big-endian commit version, 2-byte
    batch order) or raises the reason there is none (no writes, cancelled).
    """

    def __init__(self) -> None:
        self._done = threading.Event()
        self._stamp: Optional[bytes] = None
        self._error: Optional[BaseException] = None

    def set_result(self, stamp: bytes) -> None:
        """Resolve with the commit's 10-byte versionstamp."""
        self._stamp = stamp
        self._done.set()

    def set_exception(self, error: BaseException) -> None:
        """Resolve with the error explaining why there is no versionstamp."""
        self._error = error
        self._done.set()

    def is_ready(self) -> bool:
        """True once resolved."""
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bytes:
        """Return the versionstamp, waiting for the commit if needed.

        Raises:
            InvalidTransactionState: when not resolved within ``timeout``.
            NoCommitVersion: when the transaction wrote nothing.
        """
        if not self._done.wait(timeout):
            raise InvalidTransactionState("versionstamp not available: transaction not committed")
        if self._error is not None:
            raise self._error
        assert self._stamp is not None
        return self._stamp


# --------------------------------------------------------------------------- abstract API


class ReadView(abc.ABC):
    """The read methods shared by a transaction and its ``snapshot`` view."""

    @abc.abstractmethod
    def get(self, key: bytes) -> Optional[bytes]:
        """Read one key.

        Returns:
            The value, or None when the key is absent.
        """

    def get_many(self, keys: Sequence[bytes]) -> List[Optional[bytes]]:
        """Read several keys at once (FoundationDB: in parallel).

        Returns:
            The values in the order of ``keys``, None for an absent key.
        """
        return [self.get(key) for key in keys]

    @abc.abstractmethod
    def get_key(self, selector: KeyOrSelector) -> bytes:
        """Resolve a key selector to a key (``b''`` or ``b'\\xff'`` at the edges)."""

    @abc.abstractmethod
    def get_range(
        self,
        begin: KeyOrSelector,
        end: KeyOrSelector,
        limit: int = 0,
        reverse: bool = False,
    ) -> List[KeyValue]:
        """Read the rows with ``begin <= key < end`` (keys or selectors).

        Args:
            begin: first key (or selector) of the range, inclusive.
            end: key (or selector) after the range, exclusive.
            limit: at most this many rows; 0 means no limit.
            reverse: rows in descending key order (the limit then keeps the last ones).

        Returns:
            A list of ``KeyValue`` rows.
        """

    def __getitem__(self, key: Union[bytes, slice]) -> Any:
        if isinstance(key, slice):
            begin = b"" if key.start is None else key.start
            end = END_OF_KEYSPACE if key.stop is None else key.stop
            return self.get_range(begin, end)
        return self.get(key)

    def get_range_startswith(self, prefix: bytes, limit: int = 0, reverse: bool = False) -> List[KeyValue]:
        """Read every row whose key starts with ``prefix``."""
        prefix = check_key(prefix)
        end = strinc(prefix) if prefix.rstrip(b"\xff") else END_OF_KEYSPACE
        return self.get_range(prefix, end, limit=limit, reverse=reverse)


class CommitInFlight:
    """A commit already answered (what ``Transaction.start_commit`` returns
    where commits are not sent apart)."""

    def fileno(self) -> Optional[int]:
        """A descriptor readable once the answer is there; None: answered."""
        return None

    def finish(self) -> None:
        """Wait for the commit's answer (here: it has one)."""


_COMMITTED = CommitInFlight()


class Transaction(ReadView):
    """A serializable transaction: reads see one consistent state plus own writes.

    A transaction is used from one thread at a time. Writes take effect only
    when ``commit`` succeeds; an error, ``cancel`` or ``reset`` discards them.

    Attributes:
        deadline: ``time.monotonic()`` value after which waits for a lock give
            up with ``LockTimeout`` (None: the backend's default wait).
        maybe_committed: how many earlier attempts of this transaction ended
            in ``CommitUnknownResult`` (set by :meth:`on_error`): any of them
            may have committed, so a body whose work must not be done twice
            looks for its own earlier writes when this is not 0.
    """

    deadline: Optional[float] = None
    maybe_committed: int = 0

    @property
    @abc.abstractmethod
    def snapshot(self) -> ReadView:
        """A read view whose reads add no read conflicts."""

    @property
    @abc.abstractmethod
    def db(self) -> "Database":
        """The database this transaction belongs to."""

    @abc.abstractmethod
    def set(self, key: bytes, value: bytes) -> None:
        """Write ``value`` at ``key``."""

    @abc.abstractmethod
    def clear(self, key: bytes) -> None:
        """Remove ``key`` (a no-op when absent)."""

    @abc.abstractmethod
    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Remove every key with ``begin <= key < end``."""

    @abc.abstractmethod
    def add(self, key: bytes, param: bytes) -> None:
        """Atomically add the little-endian integer ``param`` to the value at ``key``."""

    @abc.abstractmethod
    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        """Write ``value`` at ``key`` with its placeholder filled by the commit's versionstamp."""

    @abc.abstractmethod
    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        """Write ``value`` with its placeholder filled by the commit's versionstamp."""

    @abc.abstractmethod
    def get_versionstamp(self) -> VersionstampFuture:
        """The future of this transaction's versionstamp (resolved by commit)."""

    @abc.abstractmethod
    def watch(self, key: bytes) -> Watch:
        """A watch on ``key``, armed at commit, fired when its value changes afterwards."""

    @abc.abstractmethod
    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        """Make the commit fail if another transaction wrote in ``[begin, end)``."""

    @abc.abstractmethod
    def commit(self) -> None:
        """Make every write durable and visible, atomically.

        Raises:
            ConflictError: on a conflict (retryable).
            StoreUnavailable: when the store cannot be written.
        """

    def start_commit(self) -> "CommitInFlight":
        """Send the commit without waiting for its answer, where the store
        answers over a connection (PostgreSQL); elsewhere commit now.
        ``finish()`` on what it returns waits for the answer and ends as
        :meth:`commit` does (raising what it raises); its ``fileno()`` is a
        descriptor that turns readable when the answer is there (None: no
        wait). Until ``finish`` has returned or raised, the transaction
        serves nothing else; other transactions run meanwhile, and one
        that began before this commit was answered and commits after it
        conflicts with its writes as with any other commit's (two commits
        sent at once may be made in either order).

        Raises:
            StoreError: what :meth:`commit` raises, here or from ``finish``.
        """
        self.commit()
        return _COMMITTED

    @abc.abstractmethod
    def cancel(self) -> None:
        """Discard every write; the transaction cannot be used until ``reset``."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Discard every write and make the transaction new again."""

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.set(key, value)

    def __delitem__(self, key: Union[bytes, slice]) -> None:
        if isinstance(key, slice):
            begin = b"" if key.start is None else key.start
            end = END_OF_KEYSPACE if key.stop is None else key.stop
            self.clear_range(begin, end)
        else:
            self.clear(key)

    def clear_range_startswith(self, prefix: bytes) -> None:
        """Remove every key that starts with ``prefix``."""
        prefix = check_key(prefix)
        end = strinc(prefix) if prefix.rstrip(b"\xff") else END_OF_KEYSPACE
        self.clear_range(prefix, end)

    def prefetch(self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes, int]] = ()) -> None:
        """A hint: ``keys``, and the ranges ``(begin, end, limit)`` (read
        forward from ``begin``), will be read in this transaction. A backend
        whose reads are round trips (PostgreSQL) reads them now, all in one
        statement, and later reads of them are answered from what it read;
        elsewhere nothing happens. Adds no conflict and changes no result: a
        later read of a key or range adds its conflict as it always does."""

    def expect_many(self, keys: Sequence[bytes], values: Sequence[Optional[bytes]]) -> List[Optional[bytes]]:
        """Read ``keys`` as ``get_many`` does, where the caller believes each
        holds the ``values`` (None: absent); returns the values the
        transaction takes them to hold.

        A backend whose reads are round trips (PostgreSQL) may return
        ``values`` without reading and check them when it commits: if a key
        then holds anything else the commit fails with ``ConflictError``, as
        a read conflict does, and the transaction's retries (``on_error``
        then the call again) read for real. Elsewhere this is ``get_many``.
        Either way what the transaction saw is what the keys held at its
        commit, so the guess changes no result, only the round trips; a
        transaction that writes nothing checks its guesses at commit too.
        """
        if len(keys) != len(values):
            raise ValueError("expect_many needs one value per key")
        for value in values:
            if value is not None:
                check_value(value)  # a bad guess is refused as on a backend that keeps it
        return self.get_many(keys)

    def add_read_conflict_key(self, key: bytes) -> None:
        """Make the commit fail if another transaction wrote ``key``."""
        key = check_key(key)
        self.add_read_conflict_range(key, key + b"\x00")

    def on_error(self, error: BaseException) -> None:
        """Prepare a retry after ``error``: back off, then reset.

        Raises:
            BaseException: ``error`` itself when it is not retryable.
        """
        if not is_retryable(error):
            raise error
        if isinstance(error, CommitUnknownResult):
            self.maybe_committed += 1
        self._retries = getattr(self, "_retries", 0) + 1
        cap = min(BACKOFF_MAX, BACKOFF_BASE * (2 ** (self._retries - 1)))
        time.sleep(random.uniform(0, cap))
        self.reset()


class Database(abc.ABC):
    """A handle on one store, shared by the threads of a process.

    A handle never crosses ``os.fork()``: a child re-opens its connections
    lazily on first use.

    Attributes:
        max_key_size: the longest key a caller may use (FoundationDB's 10,000
            bytes, less the subspace prefix on the FoundationDB backend).
        key_conflicts: True when writers commit in parallel and two
            transactions conflict only if one wrote a key the other read
            (FoundationDB, PostgreSQL); False when one writer commits at a
            time (the SQLite backend, whose conflicts are also per value
            read). Layers use it to decide whether spreading concurrent
            writers over different keys buys anything.
    """

    max_key_size: int = MAX_KEY_SIZE
    key_conflicts: bool = True

    @abc.abstractmethod
    def create_transaction(self) -> Transaction:
        """A new transaction."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections and stop the watch thread; pending watches are cancelled."""

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def get(self, key: bytes) -> Optional[bytes]:
        """Read one key in its own transaction."""
        return _db_get(self, key)

    def set(self, key: bytes, value: bytes) -> None:
        """Write one key in its own transaction."""
        _db_set(self, key, value)

    def clear(self, key: bytes) -> None:
        """Remove one key in its own transaction."""
        _db_clear(self, key)

    def get_range(
        self, begin: KeyOrSelector, end: KeyOrSelector, limit: int = 0, reverse: bool = False
    ) -> List[KeyValue]:
        """Read a range in its own transaction."""
        return _db_get_range(self, begin, end, limit, reverse)


# --------------------------------------------------------------------------- transactional


def _tr_index(func: Callable[..., Any]) -> int:
    """Position of the ``tr`` parameter (the first one when none is named so)."""
    names = list(inspect.signature(func).parameters)
    return names.index("tr") if "tr" in names else 0


class Transactional(Protocol[T]):
    """What :func:`transactional` returns: the body's result type is kept
    (its arguments are not checked: a Database may stand for ``tr``)."""

    __wrapped__: Callable[..., T]
    retry_options: tuple[int, float]  #: ``(retry_limit, timeout)``

    def __call__(self, *args: Any, **kwargs: Any) -> T: ...


@overload
def transactional(func: Callable[..., T], *, retry_limit: int = ..., timeout: float = ...) -> Transactional[T]: ...


@overload
def transactional(
    func: None = None, *, retry_limit: int = ..., timeout: float = ...
) -> Callable[[Callable[..., T]], Transactional[T]]: ...


def transactional(
    func: Optional[Callable[..., T]] = None,
    *,
    retry_limit: int = DEFAULT_RETRY_LIMIT,
    timeout: float = DEFAULT_TIMEOUT,
) -> Any:
    """Run a function in a transaction, retrying conflicts (usable bare or with arguments).

    The ``tr`` argument (the first one when no parameter is named ``tr``) is a
    ``Database`` or a ``Transaction``. Given a transaction the function is just
    called: only the outermost call commits. Given a database, a transaction is
    created, the body run and committed; on a retryable error the transaction
    backs off (exponentially, with jitter) and the body runs again. Any other
    error cancels the transaction, discarding all its writes, and propagates.

    Args:
        func: the body; must not be a generator function.
        retry_limit: most attempts before ``RetryLimitExceeded``; an
            attempt that failed because the store could not be reached
            (``ServerGone``) does not count: the call waits for the store
            until ``timeout``.
        timeout: seconds after the first attempt before ``RetryLimitExceeded``.

    Raises:
        TypeError: when decorating a generator function.
        RetryLimitExceeded: when retries are exhausted.
    """
    if func is None:
        return functools.partial(transactional, retry_limit=retry_limit, timeout=timeout)
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise TypeError(f"@transactional cannot wrap generator function {func.__qualname__}")
    index = _tr_index(func)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        if "tr" in kwargs:
            target = kwargs["tr"]
        elif len(args) > index:
            target = args[index]
        else:
            raise TypeError(f"{func.__qualname__}() needs a Database or Transaction argument")
        kind = kind_of(target)
        if kind is Transaction:
            return func(*args, **kwargs)
        if kind is not Database:
            raise TypeError(f"{func.__qualname__}() needs a Database or Transaction, got {type(target).__name__}")
        return run_retrying(func, target, index, args, kwargs, retry_limit, timeout)

    setattr(wrapper, "retry_options", (retry_limit, timeout))  # noqa: B010 - read by fdblayer.pipelined
    return cast(Transactional[T], wrapper)


#: ``type(x)`` -> Transaction or Database: ``isinstance`` against an ABC
#: runs Python code (about 1 us), a dict lookup does not.
_KINDS: Dict[type, Optional[type]] = {}


def kind_of(target: Any) -> Optional[type]:
    """``Transaction``, ``Database`` or None: what ``target`` is an instance of.

    The same answer as ``isinstance``, remembered per type (the hot paths ask
    it for every call).
    """
    kind = _KINDS.get(type(target))
    return kind if kind is not None else _kind(target)


def _kind(target: Any) -> Optional[type]:
    if isinstance(target, Transaction):
        kind: Optional[type] = Transaction
    elif isinstance(target, Database):
        kind = Database
    else:
        kind = None
    if kind is not None:
        _KINDS[type(target)] = kind
    return kind


def run_retrying(
    func: Callable[..., T],
    db: Database,
    index: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    retry_limit: int,
    timeout: float,
    tr: Optional[Transaction] = None,
    failed: Optional[BaseException] = None,
) -> T:
    """The retry loop of ``transactional`` for one call of the undecorated
    ``func`` given a database (its transaction argument at ``index``);
    ``tr`` and ``failed``: a transaction of ``db`` whose first attempt of
    this call failed so, to go on from (its ``deadline`` set)."""
    if tr is None:
        tr = db.create_transaction()
        tr.deadline = time.monotonic() + timeout
    started = cast(float, tr.deadline) - timeout
    attempts = counted = 0  # counted: the attempts that failed other than by an unreachable server
    err = failed
    while True:
        if err is not None:
            attempts = max(attempts, 1)
            if not is_retryable(err):
                tr.cancel()
                raise err
            elapsed = time.monotonic() - started
            if not isinstance(err, ServerGone):  # waiting for the server is bounded by the deadline alone
                counted += 1
            if counted >= retry_limit or elapsed >= timeout:
                tr.cancel()
                raise RetryLimitExceeded(
                    f"{func.__qualname__}: gave up after {attempts} attempts in {elapsed:.3f}s: {err}",
                    attempts=attempts,
                    elapsed=elapsed,
                    last_error=err,
                ) from err
            logger.debug("transaction_retry function=%s attempt=%d error=%s", func.__qualname__, attempts, err)
            tr.on_error(err)
        attempts += 1
        call_args, call_kwargs = _with_tr(args, kwargs, index, tr)
        try:
            result = func(*call_args, **call_kwargs)
            tr.commit()
            return result
        except BaseException as exc:  # noqa: BLE001 - sorted at the top of the loop
            err = exc


def _with_tr(
    args: tuple[Any, ...], kwargs: dict[str, Any], index: int, tr: Transaction
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with the transaction in place of the database."""
    if "tr" in kwargs:
        return args, {**kwargs, "tr": tr}
    return args[:index] + (tr,) + args[index + 1 :], kwargs


@transactional
def _db_get(tr: Transaction, key: bytes) -> Optional[bytes]:
    return tr.get(key)


@transactional
def _db_set(tr: Transaction, key: bytes, value: bytes) -> None:
    tr.set(key, value)


@transactional
def _db_clear(tr: Transaction, key: bytes) -> None:
    tr.clear(key)


@transactional
def _db_get_range(
    tr: Transaction, begin: KeyOrSelector, end: KeyOrSelector, limit: int, reverse: bool
) -> List[KeyValue]:
    return tr.get_range(begin, end, limit=limit, reverse=reverse)


__all__ += ["KeySelector", "KeyValue"]
