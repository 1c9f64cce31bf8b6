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


_fork_hygiene_installed = False


def _close_siblings_sentinels() -> None:
    """In a child just forked by :mod:`multiprocessing`: close the pipes its
    parent keeps for each of its other children (two per child, held by the
    parent's ``Popen`` finalizers). Thespian closes its sockets in a new
    actor but not these, so without this the k-th child of a supervisor
    holds 2k descriptors it never uses, and descriptors grow with the
    square of the children. The finalizers themselves are dropped by
    multiprocessing right after, so nothing closes these twice."""
    from multiprocessing import util

    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):
        if getattr(finalizer, "_callback", None) is util.close_fds:
            for fd in finalizer._args or ():
                try:
                    os.close(fd)
                except OSError:
                    pass


def install_fork_hygiene() -> None:
    """Make every process forked from this one (and from them) drop its
    siblings' descriptors (:func:`_close_siblings_sentinels`). Idempotent;
    the hook is inherited through fork."""
    global _fork_hygiene_installed
    if not _fork_hygiene_installed:
        os.register_at_fork(after_in_child=_close_siblings_sentinels)
        _fork_hygiene_installed = True
