"""A store handle's idle connections, shared by the SQLite and PostgreSQL handles.

Principle: a transaction takes a connection (:meth:`IdleConnections.checkout`)
and gives it back when it ends (the handle's own ``checkin``); the idle ones
wait in a list. Taking one is lock-free on the hot path (``list.pop`` is
atomic); only a handle that was forked or closed takes the lock, where the
handle's ``_check_fork`` drops (never reuses, never closes) what the parent
process held. A handle never crosses ``os.fork()`` with a connection.
"""

from __future__ import annotations

import threading
from typing import Generic, List, TypeVar

from fdblayer.exceptions import InvalidTransactionState
from fdblayer.forks import ForkEpoch

__all__ = ["IdleConnections"]

C = TypeVar("C")  #: the backend's connection


class IdleConnections(Generic[C]):
    """The checkout half of a handle's connection pool (a mixin).

    The handle sets ``_idle``, ``_lock``, ``_epoch`` (``ForkEpoch.value`` when
    made), ``_closed`` and ``where`` (for messages), and provides
    ``connect()`` and ``_check_fork()``."""

    _idle: List[C]
    _lock: threading.Lock
    _epoch: int
    _closed: bool
    where: str

    def connect(self) -> C:
        raise NotImplementedError

    def _check_fork(self) -> None:
        raise NotImplementedError

    def checkout(self) -> C:
        """A connection for one transaction (from the idle ones when possible).

        Raises:
            InvalidTransactionState: when the handle is closed.
            StoreError: when a new connection cannot be made (the handle's kind).
        """
        if self._epoch == ForkEpoch.value and not self._closed:
            try:
                return self._idle.pop()  # atomic: no lock on the hot path
            except IndexError:
                return self.connect()
        with self._lock:
            self._check_fork()
            if self._closed:
                raise InvalidTransactionState(f"store {self.where} is closed")
            if self._idle:
                return self._idle.pop()
        return self.connect()
