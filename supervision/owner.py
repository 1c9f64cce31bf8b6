"""Stop signals belong to a node's owner.

Principle: a node is stopped by the process that started it, its owner (a
foreground command), which stops the tree in order (and may first let the
node finish its work). A stop signal sent to every process of the node at
once, as systemd's default ``KillMode=control-group`` does on ``systemctl
stop`` or ``kill -TERM 0`` in a script, must not stop each process on its
own: Thespian ends an actor on SIGTERM, so each actor would exit as the
signal reached it and its supervisor would restart it, or lose it, in the
middle of the owner's orderly stop. So every process of a node (the admin,
the logger and each actor) takes SIGTERM and SIGINT and does nothing with
them; the owner got the same signal and stops them all. SIGKILL still ends
any of them at once, and the owner's death still ends the node.

The handler is a Python function, not ``SIG_IGN``: ``exec`` resets a
handled signal to its default and keeps an ignored one ignored, so a
program a job starts from a node's process gets SIGTERM as usual.

The node also dies with its owner (``die_with_owner``). The node
supervisor watches the owner once it has started; before that, from the
fork of the admin until then, the admin watches it (:func:`forking_node`
with an owner): a starter killed in between (SIGKILL, a crash) would
otherwise leave the admin and the logger running, holding the node's port,
until the next start on that port cleared them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, Optional

from .procs import group_members, open_process, readable

__all__ = [
    "STOP_SIGNALS",
    "OWNER_DOWN_GRACE",
    "ignore_stop_signals",
    "forking_node",
    "finishing_stop",
    "catching_stops",
    "StopCatcher",
    "kill_node_group",
    "freeze_node_group",
]

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: Seconds the admin's watch waits after the owner's death before it kills
#: the node: the node supervisor, if up, kills it sooner and logs why.
OWNER_DOWN_GRACE = 1.0

#: The owner ``(pid, start time)`` a forking admin is to watch: set by
#: :func:`forking_node`, taken by the first process forked meanwhile that is
#: not the owner's own child (Thespian forks an intermediate process, which
#: forks the admin).
_armed: Optional[tuple[int, Optional[int]]] = None


def _left_to_owner(signum: int, frame: Any) -> None:
    """A stop signal in a node's process: the owner stops the node."""


def ignore_stop_signals() -> None:
    """Make this process (one of a node's, in its main thread) leave SIGTERM
    and SIGINT to the node's owner; replaces Thespian's handlers, which end
    an actor on SIGTERM."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _left_to_owner)


@contextlib.contextmanager
def forking_node(owner: Optional[tuple[int, Optional[int]]] = None) -> Iterator[None]:
    """Around the owner's start of a node's first process (Thespian's admin,
    which forks the logger): the processes forked meanwhile are born leaving
    stop signals to the owner, and with ``owner`` (this process's ``(pid,
    start time)``, for a node that dies with it) the admin kills the node
    :data:`OWNER_DOWN_GRACE` after the owner's death. A stop signal the
    owner itself gets meanwhile is raised again in it on the way out, where
    its own handling applies. Outside the main thread (where handlers cannot
    be set) no handler changes."""
    global _armed
    me = os.getpid()
    received: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() == me:  # in a forked process: left to the owner
            received.append(signum)

    with _stop_signals_to(handler):
        _armed = owner
        try:
            yield
        finally:
            _armed = None
    for signum in received:
        os.kill(me, signum)


@contextlib.contextmanager
def _stop_signals_to(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """SIGTERM and SIGINT go to ``handler`` inside the block, then back to
    what they were; outside the main thread (where handlers cannot be set)
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class StopCatcher:
    """The stop signals the owner caught: their names in ``received``, in
    order, and a byte on the pipe :attr:`fd` for each (to wait on)."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)

    def on_signal(self, signum: int, frame: Any) -> None:
        self.received.append(signal.Signals(signum).name)
        os.write(self._write_fd, b"x")

    def close(self) -> None:
        os.close(self.fd)
        os.close(self._write_fd)


@contextlib.contextmanager
def catching_stops() -> Iterator[StopCatcher]:
    """In the owner's main thread, from before it starts its node until it
    has stopped it: SIGTERM and SIGINT are caught, not fatal, so a stop
    that comes while the node starts is acted on once it is up (before,
    it killed the owner, and the node with it, leaving a job just started
    to its lease)."""
    catcher = StopCatcher()
    try:
        with _stop_signals_to(catcher.on_signal):
            yield catcher
    finally:
        catcher.close()


@contextlib.contextmanager
def finishing_stop() -> Iterator[None]:
    """In the owner, around its stop of the node (a drain, then the stop):
    a further SIGTERM or SIGINT is logged (``stop_signal_ignored``) and
    ignored, so the stop in progress finishes; a second Ctrl-C would
    otherwise end the owner, and the node with it, in the middle of the
    drain, its running jobs left to their leases. SIGKILL still ends it."""

    def handler(signum: int, frame: Any) -> None:
        log.warning("stop_signal_ignored signal=%s reason=stop_in_progress", signal.Signals(signum).name)

    with _stop_signals_to(handler):
        yield


def _after_fork() -> None:
    """In every forked child: the admin of a node being started (see
    :data:`_armed`) starts watching the owner."""
    global _armed
    owner = _armed
    if owner is None or os.getppid() == owner[0]:
        return  # nothing armed, or Thespian's intermediate process (the admin is its child)
    _armed = None  # the admin's own children are watched by their parents
    threading.Thread(target=_die_with, args=owner, name="owner-watch", daemon=True).start()


def _die_with(pid: int, start: Optional[int]) -> None:
    """Wait for the owner's death (a pidfd turns readable), then kill the node."""
    fd = open_process(pid, start)
    if fd is not None:
        readable([fd])
    time.sleep(OWNER_DOWN_GRACE)
    kill_node_group()


#: The processes :func:`freeze_node_group` leaves running (their command
#: line starts so): Thespian's admin and logger, through which a last report
#: reaches the log.
KEEP_RUNNING = (b"MultiProcAdmin ", b"logger ")


def freeze_node_group() -> int:
    """SIGSTOP every other process of the node this process belongs to (its
    session's process group, as :func:`kill_node_group` finds it) but those
    of :data:`KEEP_RUNNING`: the node's work stops at once (no message sent,
    no job handed out or started) while a last report still reaches the
    log; :func:`kill_node_group` follows. Returns how many were stopped."""
    pgid = os.getpgid(0)
    if pgid != os.getsid(0) or pgid <= 1:
        return 0
    stopped = 0
    for pid in group_members(pgid) - {os.getpid()}:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read(64)
        except OSError:
            continue  # gone meanwhile
        if title.startswith(KEEP_RUNNING):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)  # the session is the node's alone: no stranger can be in it
            stopped += 1
    return stopped


def kill_node_group() -> None:
    """SIGKILL every process of the node this process belongs to: its process
    group, the session the admin created (a group can only be joined from its
    own session, so no process but the node's is in it while this one is);
    in a process not in such a session, this process only."""
    pgid = os.getpgid(0)
    if pgid == os.getsid(0) and pgid > 1:
        os.killpg(pgid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


os.register_at_fork(after_in_child=_after_fork)
