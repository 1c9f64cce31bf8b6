"""The root of the ``actors`` package's errors, and how they travel.

Principle: an error raised by an actor is answered to its caller in
another process (inside a call's ``Failure``), so every error pickles the
same way: its class, its message and its attributes, rebuilt without
calling its ``__init__`` (whose signature is the error's own business).
Subsystem roots (:class:`actors.scheduler.model.SchedulerError`, ...)
derive from :class:`ActorsError`; an error that is also a ``ValueError``
(a bad value from a user) says so by deriving from both.

The queue's errors (``actors.jobs.NotFound``, ``InvalidArgument`` ...) are
:mod:`fdblayer.jobs.exceptions`' own, with their own root, as the store
layer raises them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ActorsError"]


class ActorsError(Exception):
    """Root of the errors of :mod:`actors`; pickles with its attributes."""

    def __reduce__(self) -> tuple:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[Exception], args: tuple, fields: dict) -> Any:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(fields)
    return error
