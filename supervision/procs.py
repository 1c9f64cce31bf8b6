"""Facts about OS processes, read from /proc, and a process's tie to its parent.

A pid alone names no process for long: once a process is gone its number
is given to the next one. So a process recorded for later (in a runtime
file, by a supervisor) is recorded with its start time (``/proc/<pid>/stat``
field 22, clock ticks since boot, with the boot's id), and signalled only
through a pidfd opened while that start time still matches
(:func:`signal_process`): the signal cannot reach a process that took the
number meanwhile.
"""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import math
import os
import select
import signal
from typing import Iterable, NamedTuple

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
#: Signals of a fault in native code (a segfault...): a handler cannot
#: return from one (the faulting instruction runs again), so the Python
#: handler Thespian sets for every signal spins the process for ever, on a
#: CPU, instead of letting it die.
FAULT_SIGNALS = tuple(getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL") if hasattr(signal, n))
_fault_fd: tuple[int, int] = (0, -1)  # (pid, the stderr copy faulthandler writes to in that process)


def die_on_faults() -> None:
    """In an actor's process (its main thread, after Thespian set its
    handlers): a fault in native code kills the process, as it would
    without them, so its supervisor sees it die; first the Python
    traceback of every thread goes to stderr (``faulthandler``), through a
    copy of the descriptor that code closing fd 2 cannot take away."""
    global _fault_fd
    faulthandler.disable()  # enabled by the process this one was forked from: it would not install itself again
    for sig in FAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    try:
        if _fault_fd[0] != os.getpid():  # a fork's copy may be closed (fork hygiene) or reused: never touched
            _fault_fd = (os.getpid(), os.dup(2))  # not inherited by exec'd programs (O_CLOEXEC)
        faulthandler.enable(file=_fault_fd[1], all_threads=True)
    except (OSError, ValueError, RuntimeError) as exc:  # no stderr: the fault still kills, untold
        log.debug("faulthandler_unavailable error=%r", exc)


class ProcStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` this package reads."""

    state: str
    ppid: int
    pgid: int
    sid: int
    start: int  # field 22, starttime: clock ticks after boot


def proc_stat(pid: int | None) -> ProcStat | None:
    """A process's state, parent, group, session and start time; None once it is gone."""
    if not pid or pid < 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return ProcStat(fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` is a live (not zombie) process."""
    if not pid:
        return True
    st = proc_stat(pid)
    return st is not None and st.state not in ("Z", "X")


def start_time(pid: int | None) -> int | None:
    """The start time of live (not zombie) process ``pid``; None if there is none."""
    st = proc_stat(pid)
    return st.start if st is not None and st.state not in ("Z", "X") else None


def boot_id() -> str:
    """This boot's id: start times compare only within one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def same_process(pid: int | None, start: int | None) -> bool:
    """True if ``pid`` is alive and is the process that had start time ``start``."""
    return bool(pid) and start is not None and start_time(pid) == start


def open_process(pid: int | None, start: int | None) -> int | None:
    """A pidfd of the live process ``pid`` whose start time is ``start``, or None.

    The pidfd names that one process for as long as it is open: once the
    process exits, signals through it fail instead of reaching whoever gets
    the number next. So the start time, checked after opening it, holds for
    every later use of the descriptor.
    """
    if not pid or start is None:
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    if start_time(pid) != start:
        os.close(fd)
        return None
    return fd


def signal_process(pid: int | None, start: int | None, sig: int) -> bool:
    """Send ``sig`` to ``pid`` only if it is the process that started at ``start``.

    Returns:
        True if the signal was sent; False if that process is gone (the
        number may belong to another process now: it is left alone).
    """
    fd = open_process(pid, start)
    if fd is None:
        return False
    try:
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def held_file(pid: int, dev: int, ino: int) -> str | None:
    """``/proc/<pid>/fd/<n>`` of a descriptor by which process ``pid`` holds
    file (``dev``, ``ino``) open (deleted or not); None if it holds none."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for name in names:
        path = f"/proc/{pid}/fd/{name}"
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_ino == ino and st.st_dev == dev:
            return path
    return None


def holds_file(pid: int, dev: int, ino: int) -> bool:
    """True if process ``pid`` has file (``dev``, ``ino``) open (deleted or not)."""
    return held_file(pid, dev, ino) is not None


def file_holders(dev: int, ino: int, among: Iterable[int] | None = None) -> set[int]:
    """Live processes (of those this one may inspect) holding file (``dev``, ``ino``) open.

    ``among`` limits the search to those pids (default: every process).
    """
    if among is None:
        among = (int(name) for name in os.listdir("/proc") if name.isdigit())
    return {pid for pid in among if holds_file(pid, dev, ino) and pid_alive(pid)}


def group_members(pgid: int) -> set[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st.pgid == pgid and st.state not in ("Z", "X"):
                out.add(int(name))
    return out


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
        log.warning("pdeathsig_unavailable pid=%s", os.getpid())
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
        if getattr(finalizer, "_callback", None) is util.close_fds:  # type: ignore[attr-defined]  # private: not in typeshed
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


def readable(fds: Iterable[int], timeout: float | None = None) -> list[int]:
    """The descriptors among ``fds`` (pidfds, a signal pipe) readable or hung
    up within ``timeout`` seconds (None: until one is). ``poll``, not
    ``select``: the process may hold more than 1,024 descriptors (a caller's
    sockets), and ``select`` refuses one numbered 1,024 or more."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return [fd for fd, _ in poller.poll(ms)]
