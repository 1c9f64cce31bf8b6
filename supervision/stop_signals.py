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
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Iterator

__all__ = ["STOP_SIGNALS", "ignore_stop_signals", "forking_node"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _left_to_owner(signum: int, frame: Any) -> None:
    """A stop signal in a node's process: the owner stops the node."""


def ignore_stop_signals() -> None:
    """Make this process (one of a node's, in its main thread) leave SIGTERM
    and SIGINT to the node's owner; replaces Thespian's handlers, which end
    an actor on SIGTERM."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _left_to_owner)


@contextlib.contextmanager
def forking_node() -> Iterator[None]:
    """Around the owner's start of a node's first process (Thespian's admin,
    which forks the logger): the processes forked meanwhile are born leaving
    stop signals to the owner. A stop signal the owner itself gets meanwhile
    is raised again in it on the way out, where its own handling applies.
    Outside the main thread (where handlers cannot be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()
    received: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() == owner:  # in a forked process: left to the owner
            received.append(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        for signum in received:
            os.kill(owner, signum)
