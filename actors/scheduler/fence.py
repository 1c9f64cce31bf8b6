"""A node's lease fence: until when its document jobs may run without news.

Principle: a document's job must stop before another node may take the
document, even when nothing in its node can tell it to (the node paused by
SIGSTOP, its doc processor stuck, the store unreachable). The doc processor
writes a deadline, on the monotonic clock (system-wide on Linux, and it
keeps counting while a process is stopped), after each renewal: the oldest
renewal of its leases plus most of the owner timeout. A document job's
context (:class:`~actors.handlers.JobContext`) reads it at each
``stopping``/``wait``/``check``: past the deadline the job is stopping, as
it would be on a stop, and it ends with reason ``lease_expired``.

The deadline is 8 bytes in a small file of the node's runtime directory
(private to the user, see :mod:`supervision.runtime`), shared by memory
map: a read is a memory access, not a message. The file is created with
``O_EXCL`` and opened with ``O_NOFOLLOW``, and must be a regular file of
the user's: a symlink planted in its place is never followed. No file (a
tree without a doc processor, or before it started) means no deadline.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
import time
from pathlib import Path

from supervision.runtime import open_private

from actors.scheduler.model import LEASE_EXPIRED

__all__ = ["LeaseFence", "fence_path", "LEASE_EXPIRED"]

_FORMAT = "d"
_SIZE = struct.calcsize(_FORMAT)


def fence_path(port: int) -> str:
    """The fence file of the node on admin ``port``."""
    from supervision.runtime import runtime_dir

    return str(Path(runtime_dir()) / f"fence-{port}")


class LeaseFence:
    """The deadline in ``path``: written by the doc processor, read by jobs."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._map: mmap.mmap | None = None

    def _mapped(self, create: bool) -> mmap.mmap | None:
        if self._map is None and self.path is not None:
            fd = open_private(self.path) if create else self._open_existing()
            if fd is None:
                return None
            try:
                if os.fstat(fd).st_size < _SIZE:
                    os.ftruncate(fd, _SIZE)
                    os.pwrite(fd, struct.pack(_FORMAT, math.inf), 0)
                self._map = mmap.mmap(fd, _SIZE)
            finally:
                os.close(fd)
        return self._map

    def _open_existing(self) -> int | None:
        """The fence file if it exists and is a regular file of this user's."""
        assert self.path is not None  # _mapped checks it
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:  # missing, or a symlink: no deadline to read
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            return None
        return fd

    def set(self, deadline: float) -> None:
        """Jobs may run until ``deadline`` (``time.monotonic()`` seconds; inf: no limit)."""
        mapped = self._mapped(create=True)
        if mapped is not None:
            struct.pack_into(_FORMAT, mapped, 0, deadline)

    def deadline(self) -> float:
        """The current deadline (inf when there is none)."""
        mapped = self._mapped(create=False)
        if mapped is None:
            return math.inf
        value = struct.unpack_from(_FORMAT, mapped, 0)[0]
        return value if value == value else math.inf  # NaN (a torn file): no deadline

    def left(self) -> float:
        """Seconds until the deadline (<= 0: expired)."""
        return self.deadline() - time.monotonic()
