"""One call of a ``@transactional`` function whose commit is sent apart.

Principle: where the store answers a commit over a connection
(PostgreSQL), a caller with other work to do (a worker host's dispatcher
building its next step) need not wait for the server: it builds the
transaction, sends its commit, works, and reads the answer later. What it
can rely on is what the decorated call gives: :meth:`Pipelined.wait`
returns the result of an attempt that committed, retrying as
``transactional`` does (a conflict, a lost connection: the body runs
again in the same transaction, its ``maybe_committed`` counted), or
raises what the call would. A transaction begun while a commit is in
flight reads the store as it was before that commit, and conflicts with
its writes as with any other commit's: keeping the two apart (or paying
the retry) is the caller's part. Elsewhere the commit is made at once
and :meth:`Pipelined.fileno` is None.
"""

from __future__ import annotations

import time
from typing import Any, Generic, Optional, TypeVar

from fdblayer.exceptions import is_retryable
from fdblayer.interface import CommitInFlight, Database, Transactional, run_retrying

__all__ = ["Pipelined"]

T = TypeVar("T")


class Pipelined(Generic[T]):
    """``func(db, *args, **kwargs)`` (``db`` its transaction argument, the
    first), its body run at once, its commit sent by :meth:`send` and
    answered by :meth:`wait`.

    Raises (from the constructor): what the body raises that no retry
    mends (bad arguments); a retryable failure is kept for :meth:`wait`.
    """

    __slots__ = ("_func", "_db", "_args", "_kwargs", "_tr", "_result", "_error", "_flight")

    def __init__(self, func: Transactional[T], db: Database, *args: Any, **kwargs: Any) -> None:
        self._func, self._db, self._args, self._kwargs = func, db, (db,) + args, kwargs
        self._tr = db.create_transaction()
        self._tr.deadline = time.monotonic() + func.retry_options[1]
        self._error: Optional[BaseException] = None
        self._flight: Optional[CommitInFlight] = None
        try:
            self._result: Optional[T] = func.__wrapped__(self._tr, *args, **kwargs)
        except BaseException as exc:
            if not is_retryable(exc):
                self._tr.cancel()
                raise
            self._error, self._result = exc, None

    @property
    def tentative(self) -> Optional[T]:
        """The result of the attempt built first (None if it failed): what a
        caller keeps its next transactions apart from while the commit is
        in flight. The result that counts is :meth:`wait`'s."""
        return self._result if self._error is None else None

    def send(self) -> None:
        """Send the commit (where commits are not sent apart: commit now)."""
        if self._error is not None or self._flight is not None:
            return
        try:
            self._flight = self._tr.start_commit()
        except BaseException as exc:  # noqa: BLE001 - sorted by wait(), as the retry loop would
            self._error = exc

    def fileno(self) -> Optional[int]:
        """A descriptor readable once the commit's answer is there; None when
        there is nothing to wait for (answered, failed, or not sent)."""
        return None if self._flight is None or self._error is not None else self._flight.fileno()

    def wait(self) -> T:
        """The result of the attempt that committed (sending the commit
        first if :meth:`send` was not called).

        Raises:
            RetryLimitExceeded: the retries are used up.
            StoreError: what the call raises that no retry mends.
        """
        self.send()
        if self._error is None:
            try:
                self._flight.finish()  # type: ignore[union-attr]
                return self._result  # type: ignore[return-value]
            except BaseException as exc:  # noqa: BLE001 - sorted by the retry loop
                self._error = exc
        retry_limit, timeout = self._func.retry_options
        error, self._error = self._error, None
        return run_retrying(
            self._func.__wrapped__, self._db, 0, self._args, self._kwargs, retry_limit, timeout, self._tr, error
        )
