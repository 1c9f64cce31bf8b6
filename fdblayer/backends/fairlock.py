"""A first-come first-served lock shared by processes, built on fcntl locks.

Principle: SQLite's write lock is unfair (a process that just committed takes
it again before a sleeping waiter wakes), so writers first queue here. The
lock is a ticket queue in a small file beside the store::

    bytes [0, 8)            ticket counter, little-endian (guarded by a lock on byte 0)
    byte  SLOT_BASE + t % N locked by the holder of ticket t until it releases

A writer takes the next ticket and locks its own slot byte in one step
(under the counter lock), then waits until the slot of ticket ``t - 1`` is
free: writers pass in ticket order. Locks are Linux open-file-description
locks (``F_OFD_*``), released by the kernel when their holder dies, so a
SIGKILLed holder cannot wedge the queue. A waiter that gives up or dies lets
its successor pass early: the queue then only loses fairness, never safety,
because SQLite's own write lock still guarantees exclusion.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
import weakref
from typing import Optional

__all__ = ["TicketLock", "ThreadLock", "describe_holder"]

logger = logging.getLogger(__name__)

_COUNTER_LOCK = 0
#: Bytes [8, 12): the pid of the last process that took its turn (the holder
#: while the lock is held), so a waiter that gives up can say who holds it.
_HOLDER_OFFSET = 8
SLOT_BASE = 4096
SLOTS = 1 << 20
_F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)
_F_OFD_SETLKW = getattr(fcntl, "F_OFD_SETLKW", 38)
# struct flock on Linux 64-bit: short type, short whence, off_t start, off_t len, pid_t pid.
_FLOCK = struct.Struct("hhxxxxqqi4x")
_POLL_MIN = 0.00002
_POLL_MAX = 0.0005
_SPINS = 20
#: Every open lock: a forked child closes its inherited copies at once, since an
#: inherited descriptor would keep the parent's locks alive after the parent died.
_OPEN_LOCKS: "weakref.WeakSet[TicketLock]" = weakref.WeakSet()


def _close_inherited() -> None:
    for lock in list(_OPEN_LOCKS):
        lock.close_inherited()


os.register_at_fork(after_in_child=_close_inherited)


class TicketLock:
    """A FIFO lock across processes (and the threads of one process).

    Args:
        path: the lock file (created when missing).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._threads = threading.Lock()
        self._slot: Optional[int] = None
        self._pid = os.getpid()
        _OPEN_LOCKS.add(self)

    def close_inherited(self) -> None:
        """In a forked child: drop the parent's descriptor without touching its locks."""
        if self._pid != os.getpid() and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _fcntl(self, cmd: int, kind: int, start: int) -> bool:
        try:
            fcntl.fcntl(self._fd, cmd, _FLOCK.pack(kind, os.SEEK_SET, start, 1, 0))
            return True
        except (BlockingIOError, PermissionError):
            return False

    def _take_ticket(self) -> int:
        self._fcntl(_F_OFD_SETLKW, fcntl.F_WRLCK, _COUNTER_LOCK)
        try:
            raw = os.pread(self._fd, 8, 0)
            ticket = int.from_bytes(raw.ljust(8, b"\x00"), "little")
            os.pwrite(self._fd, ((ticket + 1) % (1 << 63)).to_bytes(8, "little"), 0)
            slot = SLOT_BASE + ticket % SLOTS
            self._slot = slot if self._fcntl(_F_OFD_SETLK, fcntl.F_WRLCK, slot) else None
        finally:
            self._fcntl(_F_OFD_SETLK, fcntl.F_UNLCK, _COUNTER_LOCK)
        return ticket

    def _wait_for(self, slot: int, deadline: float) -> bool:
        delay, spins = _POLL_MIN, 0
        while not self._fcntl(_F_OFD_SETLK, fcntl.F_RDLCK, slot):
            if time.monotonic() > deadline:
                return False
            if spins < _SPINS:  # a hand-over is usually microseconds away
                spins += 1
                os.sched_yield()
                continue
            time.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
        self._fcntl(_F_OFD_SETLK, fcntl.F_UNLCK, slot)
        return True

    def acquire(self, deadline: float) -> bool:
        """Wait for our turn, at most until ``deadline`` (a ``time.monotonic()`` value).

        Returns:
            True when acquired, False on timeout.
        """
        if not self._threads.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False
        try:
            ticket = self._take_ticket()
            previous = SLOT_BASE + (ticket - 1) % SLOTS
            if ticket > 0 and not self._wait_for(previous, deadline):
                self._release_slot()
                self._threads.release()
                return False
        except OSError:
            logger.exception("lock_queue_unusable lock=%s fallback=sqlite_lock", self.path)
            self._release_slot()
            return True
        try:
            os.pwrite(self._fd, self._pid_now().to_bytes(4, "little"), _HOLDER_OFFSET)
        except OSError:
            pass  # only the holder's name in a waiter's error is lost
        return True

    @staticmethod
    def _pid_now() -> int:
        return os.getpid()

    def holder(self) -> Optional[int]:
        """The pid of the process that last took its turn (the holder, while
        the lock is held), or None when unknown."""
        try:
            raw = os.pread(self._fd, 4, _HOLDER_OFFSET)
        except OSError:
            return None
        pid = int.from_bytes(raw.ljust(4, b"\x00"), "little")
        return pid or None

    def _release_slot(self) -> None:
        if self._slot is not None:
            self._fcntl(_F_OFD_SETLK, fcntl.F_UNLCK, self._slot)
            self._slot = None

    def release(self) -> None:
        """Let the next ticket pass."""
        self._release_slot()
        self._threads.release()

    def close(self) -> None:
        """Close the lock file (releasing any lock this handle holds)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        _OPEN_LOCKS.discard(self)


class ThreadLock(TicketLock):
    """No queue between processes: only the threads of this handle take turns."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._threads = threading.Lock()
        self._slot = None
        self._fd = -1
        self._pid = os.getpid()

    def acquire(self, deadline: float) -> bool:
        """Take the in-process lock, at most until ``deadline``."""
        return self._threads.acquire(timeout=max(0.0, deadline - time.monotonic()))

    def holder(self) -> Optional[int]:
        """Unknown: no queue file."""
        return None


def describe_holder(pid: Optional[int]) -> str:
    """``"pid 123 (stopped)"``-like words on a lock holder, for error messages."""
    if pid is None:
        return "another process"
    if pid == os.getpid():
        return f"pid {pid} (this process)"
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return f"pid {pid} (no longer running)"
    words = {"T": "stopped", "t": "stopped by a debugger", "D": "in uninterruptible sleep", "Z": "exited"}
    return f"pid {pid} ({words.get(state, 'running')})"
