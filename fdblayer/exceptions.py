"""Errors of the store layer.

Principle: one root, ``StoreError``, with a few named subclasses that carry an
integer ``code`` where FoundationDB has one (so logs read the same on both
backends). Whether an error may be retried is decided by the predicate
``is_retryable``, not by catching a subclass, as in the FoundationDB bindings.
Errors of the jobs data model live in ``fdblayer.jobs.exceptions``, not here.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "StoreError",
    "ConflictError",
    "LockTimeout",
    "KeyTooLarge",
    "ValueTooLarge",
    "TransactionTooLarge",
    "KeyOutsideLegalRange",
    "InvalidTransactionState",
    "NoCommitVersion",
    "InvalidVersionstampOffset",
    "RetryLimitExceeded",
    "InvalidStoreURL",
    "StoreUnavailable",
    "DiskFull",
    "ReadOnlyStore",
    "StoreTypeError",
    "ServerGone",
    "CommitUnknownResult",
    "TransactionTooOld",
    "is_retryable",
    "RETRYABLE_FDB_CODES",
]


class StoreError(Exception):
    """Root of every store-layer error.

    Attributes:
        code: FoundationDB error code when one exists, else ``None``.
    """

    code: Optional[int] = None
    #: True or False overrides the code's verdict in ``is_retryable``.
    retryable: Optional[bool] = None

    def __init__(self, message: str = "", *, code: Optional[int] = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code


class ConflictError(StoreError):
    """The transaction conflicted with a concurrent commit (``not_committed``).

    Retryable: ``transactional`` runs the body again.
    """

    code = 1020


class TransactionTooOld(ConflictError):
    """The transaction's reads are older than the store can check (``transaction_too_old``).

    Retryable: the retry reads afresh.
    """

    code = 1007


class CommitUnknownResult(StoreError):
    """The connection was lost while a commit was under way: it may have committed.

    Retryable, as FoundationDB's ``commit_unknown_result``: a transaction
    retried after it must be idempotent (read, then write what it read).
    """

    code = 1021


class LockTimeout(StoreError):
    """The store's write lock could not be taken before the deadline.

    Retryable (``transactional`` stops at its own deadline anyway).
    """

    code = 1031


class KeyTooLarge(StoreError):
    """A key is longer than 10,000 bytes; nothing was written."""

    code = 2102


class ValueTooLarge(StoreError):
    """A value is longer than 100,000 bytes; nothing was written."""

    code = 2103


class TransactionTooLarge(StoreError):
    """The transaction's writes exceed 10,000,000 bytes; nothing is written."""

    code = 2101


class KeyOutsideLegalRange(StoreError):
    """A key written at or after ``b'\\xff'`` (the system keyspace)."""

    code = 2004


class InvalidTransactionState(StoreError):
    """The transaction was used after commit or cancel (``used_during_commit``)."""

    code = 2017


class NoCommitVersion(StoreError):
    """A versionstamp was asked of a transaction that wrote nothing."""

    code = 2021


class InvalidVersionstampOffset(StoreError):
    """A versionstamped key/value whose placeholder offset is out of bounds."""

    code = 2000


class RetryLimitExceeded(StoreError):
    """``transactional`` gave up: too many attempts or past its deadline.

    Attributes:
        attempts: how many times the body ran.
        elapsed: seconds since the first attempt.
        last_error: the retryable error of the last attempt.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        elapsed: float,
        last_error: Optional[BaseException],
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.elapsed = elapsed
        self.last_error = last_error


class InvalidStoreURL(StoreError, ValueError):
    """A store URL with an unknown scheme, a bad path or a bad parameter."""


class StoreUnavailable(StoreError):
    """The store cannot be used: library missing, disk full, read-only, I/O error."""


class ServerGone(StoreUnavailable):
    """The store's server cannot be reached, or the connection to it was lost.

    Retryable: ``transactional`` tries again (a new connection) until its
    deadline, so a server restart is waited out.
    """

    retryable = True


class DiskFull(StoreUnavailable):
    """The disk (or the database's page limit) is full; the write was not committed."""

    code = 1523


class ReadOnlyStore(StoreUnavailable):
    """The store file cannot be written (read-only file, directory or mount)."""


class StoreTypeError(StoreError, TypeError):
    """A key, value or parameter of the wrong type (keys and values are bytes)."""

    code = 2000


#: FoundationDB error codes that ``fdb.Transaction.on_error`` retries.
RETRYABLE_FDB_CODES = frozenset({1007, 1009, 1020, 1021, 1031, 1037, 1038, 1213})


def is_retryable(err: BaseException) -> bool:
    """Tell whether ``transactional`` may run the body again after ``err``.

    Args:
        err: any exception raised by a transaction body or commit.

    Returns:
        True when the error's FoundationDB code is one that FoundationDB
        retries (conflicts 1020, timeouts 1031, too old 1007, ...), whether it
        is a ``StoreError`` of this layer or a raw ``fdb.FDBError``.
    """
    if not isinstance(err, StoreError) and type(err).__name__ != "FDBError":
        return False
    verdict = getattr(err, "retryable", None)
    if verdict is not None:
        return bool(verdict)
    return getattr(err, "code", None) in RETRYABLE_FDB_CODES
