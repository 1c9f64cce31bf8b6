"""Which of a set of processes have exited, through one pollable descriptor.

Thespian reports a child's death with an exit notice it can lose (see
``supervision.child_deaths``), and a lost notice used to be noticed only when
another one arrived. A :class:`DeathWatch` holds a pidfd per watched
process in one epoll set; the set's descriptor turns readable when any of
them exits, so an actor watches that single descriptor however many
children it has, and learns of every death from the kernel.

Every descriptor here is closed in a process forked from this one (the
actors' children are forked, not exec'd): a child never holds its
siblings' pidfds.
"""

from __future__ import annotations

import os
import select
import weakref
from typing import Any

from .procs import start_time

_live: weakref.WeakSet[DeathWatch] = weakref.WeakSet()


class DeathWatch:
    """A set of watched processes, each named by a key of the caller's."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._keys: dict[int, Any] = {}
        _live.add(self)

    def fileno(self) -> int:
        """The descriptor that is readable while a watched process has exited."""
        return self._epoll.fileno()

    def watch(self, pid: int, start: int | None, key: Any) -> int | None:
        """Watch process ``pid`` that started at ``start`` (None: unknown, not
        checked); :meth:`gone` will name it by ``key``. Returns a token for
        :meth:`forget`, or None if that process has already exited (or its
        number now names another process).

        Raises:
            OSError: the process cannot be watched (no pidfds on this kernel
                or in this sandbox, no descriptor left): the caller must learn
                of its death another way.
        """
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        now = start_time(pid)  # None: a zombie, or /proc unreadable (the pidfd says which)
        if (start is not None and now is not None and now != start) or _exited(fd):
            os.close(fd)
            return None
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except OSError:
            os.close(fd)
            raise
        self._keys[fd] = key
        return fd

    def forget(self, token: int | None, key: Any) -> None:
        """Stop watching the process ``watch`` gave ``token`` for under ``key``
        (idempotent; a token that now belongs to another key is left alone:
        a descriptor's number is reused once :meth:`gone` has closed it)."""
        if token is None or token not in self._keys or self._keys[token] != key:
            return
        del self._keys[token]
        self._epoll.unregister(token)
        os.close(token)

    def gone(self) -> list[Any]:
        """The keys of the watched processes that have exited since the last
        call; each is forgotten (its token closed) as it is returned. Never blocks."""
        out = []
        for fd, _ in self._epoll.poll(0):
            if fd in self._keys:
                key = self._keys[fd]
                out.append(key)
                self.forget(fd, key)
        return out

    def __len__(self) -> int:
        return len(self._keys)

    def close(self) -> None:
        """Close every descriptor (idempotent)."""
        for fd, key in list(self._keys.items()):
            self.forget(fd, key)
        self._epoll.close()

    def _drop_after_fork(self) -> None:
        for fd in self._keys:
            _close_quietly(fd)
        self._keys.clear()
        self._epoll.close()


def _exited(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has exited (its pidfd is readable)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _after_fork_in_child() -> None:
    for watch in list(_live):
        watch._drop_after_fork()
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
