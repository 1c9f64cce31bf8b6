"""Waking an actor from another thread (a store's watcher thread, say).

Principle: an actor must not block, and Thespian delivers nothing from a
foreign thread, so the thread writes a byte to a pipe the actor watches
with ``GenServer.watch_fd``; the actor drains the pipe and runs the
callback in its own loop. Wakes that arrive before the actor runs coalesce
into one call.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

__all__ = ["Waker"]


class Waker:
    """A pipe through which any thread wakes ``actor`` to run ``callback``.

    Args:
        actor: the GenServer to wake (its ``watch_fd`` is used).
        callback: runs inside the actor, once per batch of wakes.
    """

    def __init__(self, actor: Any, callback: Callable[[], None]) -> None:
        self._actor = actor
        self._callback = callback
        self._r, self._w = os.pipe()
        self._lock = threading.Lock()  # a wake never writes to a closed (perhaps reused) descriptor
        self._closed = False
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        actor.watch_fd(self._r, self._on_readable)

    def wake(self) -> None:
        """Ask for a call of the callback (from any thread; never blocks;
        nothing once closed)."""
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._w, b"x")
            except OSError:
                pass  # a wake-up is already pending

    def _on_readable(self) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        self._callback()

    def close(self) -> None:
        """Stop watching and close the pipe (the actor is exiting)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._actor.unwatch_fd(self._r)
            os.close(self._r)
            os.close(self._w)
