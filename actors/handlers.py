"""Job handlers named ``package.module:callable``, found as ``rq worker`` finds them:
the one handler runtime of worker pools and of the scheduler's jobs: one
resolver (:func:`resolve`), one context type (:class:`JobContext`), one
stop path (:class:`StopSignal`, :class:`JobStopping`).

Principle: a handler that cannot be used is found out before anything
starts, with one line saying why (:class:`HandlerError`), never as a crash
loop of workers.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from fdblayer.jobs.exceptions import Halt, InvalidArgument

from actors.errors import ActorsError

if TYPE_CHECKING:
    import asyncio

    from actors.scheduler.model import JobSpec

__all__ = [
    "HandlerError",
    "resolve",
    "is_async",
    "parse_assignments",
    "add_cwd_to_path",
    "StopSignal",
    "JobStopping",
    "ContextPartMissing",
    "QueuedRun",
    "ScheduledJob",
    "JobContext",
    "FENCE_RECHECK",
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
        import asyncio  # loaded by then (a coroutine runs); not at import: 36 ms of a sync worker's start

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


class JobStopping(BaseException):
    """Raised by :meth:`JobContext.check` inside a handler whose job is being
    stopped (and by a job host inside a thread that ignored its stop).

    A BaseException so that a handler's ``except Exception`` cannot swallow a stop.
    """


class ContextPartMissing(ActorsError):
    """A handler used a part of its context that its runner does not give:
    ``progress`` in a scheduler job, ``checkpoint``/``report`` in a worker
    pool's run."""


#: Longest a fenced wait sleeps before it reads the fence again (it may move).
FENCE_RECHECK = 1.0

_Part = TypeVar("_Part")


@dataclass(frozen=True)
class QueuedRun:
    """What a worker pool's run adds to its context.

    Attributes:
        attempt: 1 on the first run, 2 on the first retry, ...
        max_attempts: the attempts the job may take.
        write_progress: merges fields into the job's progress record in the
            store and returns the whole record (raises ``Halt`` when the
            job is no longer this worker's).
    """

    attempt: int
    max_attempts: int
    write_progress: Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ScheduledJob:
    """What a scheduler job adds to its context.

    Attributes:
        spec: the job's spec (its options, continuous, source, target).
        events: the runner's queue: ``("checkpoint", state)`` and
            ``("report", stats)`` are put on it, in call order.
        last_checkpoint: what the job's last run checkpointed (None at first).
    """

    spec: "JobSpec"
    events: "queue.Queue[tuple[str, Any]]"
    last_checkpoint: Any = None


class JobContext:
    """The one argument of every handler: a worker pool's run or a scheduler job. Thread-safe.

    Every context has ``id`` (also ``job_id``), ``type``, :attr:`stopping`,
    and waits that end when it turns true: :meth:`wait_stopping` (also
    :meth:`wait`), ``await`` :meth:`stopped`; :meth:`check` raises
    :class:`JobStopping` once it is. A lease fence (a document job's) makes
    it stopping when the fence runs out, as a stop would.

    A worker pool's run (:class:`QueuedRun`) adds ``data`` (the job's
    input), ``attempt``, ``max_attempts``, :meth:`progress` and
    :meth:`progress_async`. A scheduler job (:class:`ScheduledJob`) adds
    ``options``, ``continuous``, ``source``, ``target``, ``spec``,
    ``last_checkpoint``, :meth:`checkpoint` and :meth:`report`. The other
    side's fields keep neutral values (``{}``, None, 1); its methods raise
    :class:`ContextPartMissing`.
    """

    def __init__(
        self,
        job_id: Any,
        job_type: Any = None,
        *,
        stop: Optional[StopSignal] = None,
        fence: Optional[Callable[[], float]] = None,
        queued: Optional[QueuedRun] = None,
        scheduled: Optional[ScheduledJob] = None,
    ) -> None:
        """Args:
        job_id, job_type: the job's id and type (a scheduler job has no type: None).
        stop: the signal the runner sets to stop the handler (a fresh one by default).
        fence: seconds left before the job must stop whatever else happens
            (``<= 0``: expired); None for no fence.
        queued, scheduled: the part of the side that runs the job.
        """
        self._stop = StopSignal() if stop is None else stop
        self._fence = fence
        self._fence_expired = False  # latched: a stop once told is never taken back
        self._queued = queued
        self._scheduled = scheduled
        self.id = self.job_id = job_id
        self.type = job_type
        self.data: dict[str, Any] = {}
        self.attempt = queued.attempt if queued is not None else 1
        self.max_attempts = queued.max_attempts if queued is not None else None
        spec = scheduled.spec if scheduled is not None else None
        self.spec = spec
        self.options: dict[str, Any] = dict(spec.options) if spec is not None else {}
        self.continuous = spec.continuous if spec is not None else False
        self.source = spec.source if spec is not None else None
        self.target = spec.target if spec is not None else None
        self.last_checkpoint = scheduled.last_checkpoint if scheduled is not None else None

    # ------------------------------------------------------------ stopping
    @property
    def stopping(self) -> bool:
        """True once the work is no longer wanted (the job was stopped,
        rotated out, removed or taken over, or its host is shutting down),
        or its lease fence has run out: checkpoint, and return quickly.
        What a pool's handler returns then is discarded unless the job is
        still its worker's."""
        return self._stop.is_set() or self.fenced

    @property
    def fenced(self) -> bool:
        """True once the lease fence has run out: another node may run this
        job. It stays true when the fence moves on later (the leases renewed
        after all): the handler may have begun to stop, and its exit is a
        stop (``lease_expired``), never a completion."""
        if not self._fence_expired and self._fence is not None and self._fence() <= 0:
            self._fence_expired = True
        return self._fence_expired

    def wait_stopping(self, timeout: Optional[float] = None) -> bool:
        """Sleep until :attr:`stopping` or ``timeout`` (None: no limit); True
        if stopping. (Blocks its thread: from an ``async def`` handler,
        ``await`` :meth:`stopped` instead.)"""
        end = _deadline(timeout)
        while not self.stopping:
            if time.monotonic() >= end:
                return False
            self._stop.wait(self._pause(end))
        return True

    def wait(self, seconds: float) -> bool:
        """:meth:`wait_stopping` for ``seconds``: True (early) if stopping."""
        return self.wait_stopping(seconds)

    async def stopped(self, timeout: Optional[float] = None) -> bool:
        """The awaitable :meth:`wait_stopping`: True if stopping."""
        end = _deadline(timeout)
        while not self.stopping:
            if time.monotonic() >= end:
                return False
            await self._stop.wait_async(self._pause(end))
        return True

    def _pause(self, end: float) -> Optional[float]:
        """How long a wait ending at ``end`` may sleep before it looks again
        (at the fence's deadline, and every :data:`FENCE_RECHECK` seconds
        while there is a fence, as it may move); None: until the stop."""
        left = max(0.0, end - time.monotonic())
        if self._fence is not None:
            left = min(left, max(0.0, self._fence()), FENCE_RECHECK)
        return None if left == float("inf") else left

    def check(self) -> None:
        """Raise :class:`JobStopping` if :attr:`stopping`."""
        if self.stopping:
            raise JobStopping()

    def request_stop(self) -> None:
        """Make :attr:`stopping` true and wake every waiter (any thread)."""
        self._stop.set()

    # --------------------------------------------------- a pool's run
    def progress(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` (JSON values) into the job's progress record and
        return the whole record. One store transaction per call: report at
        the pace a person watches, not per item.

        Raises:
            EncodingError: a value is not JSON-compatible, or the record
                would be too large (nothing is written).
            Halt: the job is no longer this worker's (``stopping`` is then true).
            ContextPartMissing: a scheduler job (use :meth:`report`).
        """
        write = self._part(self._queued, "progress", "a scheduler job reports with ctx.report").write_progress
        try:
            return write(fields)
        except Halt:
            self.request_stop()
            raise

    async def progress_async(self, **fields: Any) -> dict[str, Any]:
        """:meth:`progress` for ``async def`` handlers: its store transaction
        runs in a thread (``asyncio.to_thread``), so the event loop and the
        other async jobs of the worker go on meanwhile. Raises as
        :meth:`progress`."""
        import asyncio  # loaded by then, as in wait_async

        return await asyncio.to_thread(self.progress, **fields)

    # --------------------------------------------------- a scheduler job
    def checkpoint(self, state: Any) -> None:
        """Record the job's progress; a restarted job gets it as ``last_checkpoint``.

        Raises:
            ContextPartMissing: a worker pool's run (use :meth:`progress`).
        """
        events = self._part(self._scheduled, "checkpoint", "a pool's run reports with ctx.progress").events
        self.last_checkpoint = state
        events.put(("checkpoint", state))

    def report(self, **stats: Any) -> None:
        """Publish stats (merged into the job's ``info``, e.g. docs_read=10).

        Raises:
            ContextPartMissing: a worker pool's run (use :meth:`progress`).
        """
        self._part(self._scheduled, "report", "a pool's run reports with ctx.progress").events.put(("report", stats))

    def _part(self, part: Optional[_Part], call: str, instead: str) -> _Part:
        if part is None:
            raise ContextPartMissing(f"ctx.{call} is not available to this handler: {instead}")
        return part

    def __repr__(self) -> str:
        return f"JobContext(type={self.type!r}, id={self.id!r}, attempt={self.attempt})"


def _deadline(timeout: Optional[float]) -> float:
    return float("inf") if timeout is None else time.monotonic() + timeout
