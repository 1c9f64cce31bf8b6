"""Facts about OS processes, read from /proc, and a process's tie to its parent."""
from __future__ import annotations

import ctypes
import logging
import os
import signal

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` is a live (not zombie) process."""
    if not pid:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in (b"Z", b"X")


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent process dies.

    ``parent_pid`` is the process this one was forked from: if it is not
    the parent any more (it died before the request took hold and this
    process was reparented), this process dies at once. Without it, a
    parent of pid 1 means the same.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        log.warning("PR_SET_PDEATHSIG unavailable: orphans may outlive a killed parent")
        return
    ppid = os.getppid()
    if ppid == 1 or (parent_pid is not None and ppid != parent_pid):
        os.kill(os.getpid(), signal.SIGKILL)
