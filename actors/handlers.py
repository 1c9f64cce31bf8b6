"""Job handlers named ``package.module:callable``, found as ``rq worker`` finds them:
the one resolver of worker pools' handlers and of the scheduler's jobs.

Principle: a handler that cannot be used is found out before anything
starts, with one line saying why (:class:`HandlerError`), never as a crash
loop of workers.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from typing import Any, Callable

from fdblayer.jobs.exceptions import InvalidArgument

__all__ = ["HandlerError", "resolve", "is_async", "parse_assignments", "add_cwd_to_path"]


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
