"""Job handlers named ``package.module:callable``, found as ``rq worker`` finds them:
the one resolver of worker pools' handlers and of the scheduler's jobs, and
what every handler's context has (:class:`HandlerContext`: the stop signal).

Principle: a handler that cannot be used is found out before anything
starts, with one line saying why (:class:`HandlerError`), never as a crash
loop of workers.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import os
import sys
import threading
from typing import Any, Callable, Optional

from fdblayer.jobs.exceptions import InvalidArgument

__all__ = [
    "HandlerError",
    "resolve",
    "is_async",
    "parse_assignments",
    "add_cwd_to_path",
    "StopSignal",
    "HandlerContext",
]


class HandlerError(InvalidArgument):
    """A handler path is malformed, its module cannot be imported, or it
    names nothing callable."""


def add_cwd_to_path() -> None:
    """Put the current directory first on ``sys.path`` (as ``rq worker`` does)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


_cache: dict[str, Callable[..., Any]] = {}


def resolve(path: str) -> Callable[..., Any]:
    """The callable named by ``path`` (``package.module:callable``, attributes
    dotted after the colon), imported once per process.

    Raises:
        HandlerError: the path is malformed, the import fails, or the named
            object is missing or not callable.
    """
    found = _cache.get(path)
    if found is not None:
        return found
    if not isinstance(path, str) or path.count(":") != 1:
        raise HandlerError(f"handler must be 'package.module:callable', not {path!r}")
    module_name, attr = path.split(":")
    if not module_name or not attr:
        raise HandlerError(f"handler must be 'package.module:callable', not {path!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise HandlerError(
            f"handler {path!r}: no module named {exc.name!r} (on sys.path or in {os.getcwd()})"
        ) from None
    except BaseException as exc:  # noqa: BLE001 - any import-time failure is the handler's
        raise HandlerError(f"handler {path!r}: importing {module_name} raised {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HandlerError(f"handler {path!r}: {module_name} has no attribute {attr!r}") from None
    if not callable(obj):
        raise HandlerError(f"handler {path!r} is a {type(obj).__name__}, not a callable")
    _cache[path] = obj
    return obj


def is_async(fn: Any) -> bool:
    """True for an ``async def`` handler (also through ``functools.partial``,
    or an object whose ``__call__`` is ``async def``): its worker awaits it
    on an event loop, beside other async runs."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the method itself, to test for a coroutine
    return not inspect.isfunction(fn) and not inspect.ismethod(fn) and inspect.iscoroutinefunction(call)


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``["TYPE=package.module:callable", ...]`` as ``{type: path}``.

    Raises:
        HandlerError: an item is not ``TYPE=path`` or a type is given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        job_type, sep, path = item.partition("=")
        job_type, path = job_type.strip(), path.strip()
        if not sep or not job_type or not path:
            raise HandlerError(f"expected TYPE=package.module:callable, not {item!r}")
        if job_type in out:
            raise HandlerError(f"job type {job_type!r} is given twice")
        out[job_type] = path
    return out


class StopSignal:
    """A handler's stop request, shared by the thread that asks and the
    handler (threads or an event loop). An ``threading.Event`` that also
    wakes coroutines awaiting :meth:`wait_async`; set once, never cleared."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._wakers: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []

    def set(self) -> None:
        """Ask to stop (any thread), waking every waiter."""
        self._event.set()
        with self._lock:
            wakers = list(self._wakers)
        for loop, wake in wakers:
            try:
                loop.call_soon_threadsafe(wake)
            except RuntimeError:  # its loop is closed: nobody waits any more
                pass

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until asked to stop or ``timeout``; True if asked."""
        return self._event.wait(timeout)

    async def wait_async(self, timeout: Optional[float] = None) -> bool:
        """:meth:`wait` without blocking the running event loop."""
        if self._event.is_set():
            return True
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(True)

        entry = (loop, wake)
        with self._lock:
            self._wakers.append(entry)
        try:
            if not self._event.is_set():  # set before we were listed: no wake will come
                await asyncio.wait((woken,), timeout=timeout)
        finally:
            with self._lock:
                if entry in self._wakers:
                    self._wakers.remove(entry)
        return self._event.is_set()


class HandlerContext:
    """What the context of every handler has, a worker pool's job or a
    scheduler's: :attr:`stopping`, and waits that end when it turns true
    (:meth:`wait_stopping`, ``await`` :meth:`stopped`). Thread-safe."""

    def __init__(self, stop: Optional[StopSignal] = None) -> None:
        self._stop = StopSignal() if stop is None else stop

    @property
    def stopping(self) -> bool:
        """True once the work is no longer wanted: finish quickly."""
        return self._stop.is_set()

    def wait_stopping(self, timeout: Optional[float] = None) -> bool:
        """Sleep until :attr:`stopping` or ``timeout``; True if stopping.
        (Blocks its thread: from an ``async def`` handler, ``await``
        :meth:`stopped` instead.)"""
        return self._stop.wait(timeout)

    async def stopped(self, timeout: Optional[float] = None) -> bool:
        """The awaitable :meth:`wait_stopping`: True if stopping."""
        return await self._stop.wait_async(timeout)

    def request_stop(self) -> None:
        """Make :attr:`stopping` true and wake every waiter (any thread)."""
        self._stop.set()
