"""Which side of an ``os.fork()`` a handle is on, cheaply.

Store handles record :attr:`ForkEpoch.value` when they take a connection; a
different value later means the handle crossed a fork, and its connections
(the parent's) must not be used. Shared by the SQLite and PostgreSQL
backends.
"""

from __future__ import annotations

import os

__all__ = ["ForkEpoch"]


class ForkEpoch:
    """How many ``os.fork()`` calls made this process: a cheap per-call fork check.

    Handles record the value when they take a connection; a different value
    later means the handle crossed a fork (``os.getpid()`` is a system call,
    too dear for every read and write).
    """

    value = 0

    @classmethod
    def after_fork_in_child(cls) -> None:
        cls.value += 1


os.register_at_fork(after_in_child=ForkEpoch.after_fork_in_child)
