"""A pool's worker: runs one sync handler call at a time, in a thread of its
process, and many ``async def`` handlers at once on an event loop beside it.

Principle: the handler runs in a thread so the actor's message loop stays
free: a :class:`~actors.workers.protocol.StopJob` reaches the handler at
once (``ctx.stopping``) and a shutdown is answered while a handler still
runs. The dispatcher hands a worker a few jobs at once (they run one after
the other, with no message between them), on the worker's command pipe
(:mod:`actors.workers.commands`), as it sends every other command. Every run handed to a worker
is answered exactly once on its report channel
(:mod:`actors.workers.channel`): ended, or released unstarted when the
dispatcher takes it back (:class:`TakeBack`, a drain's :class:`Release`).
A run's start is written *before* its handler is called and its end
right after, so a worker that dies (SIGKILL, OOM, ``os._exit``) leaves
behind exactly which run it was in. A run whose start cannot be written
(the dispatcher died: nobody reads the channel) is never called, nor is
any run queued behind it: a run nobody knows started would count no
attempt, and the dispatcher's successor hands its job on.

An ``async def`` handler (the dispatcher says so in its run: ``is_async``)
is awaited on the worker's event loop, in a thread of its own started with
the first one: up to the batch's ``async_limit`` run at once, each
recorded (``START``) before its coroutine is created and ended (``END``)
when it returns or raises, while the handler thread goes on with sync runs.
``ctx.stopping`` reaches them as it reaches a sync handler (and wakes
``await ctx.stopped()``); a run past its time limit and the grace is
cancelled (``StopJob(cancel=True)``), the other async runs of the worker
going on.

A process forked inside a handler is not a worker: when the call returns
(or raises, or calls ``sys.exit``) in a process other than the worker's,
that process exits at once, before it could run a queued job or report.
"""

from __future__ import annotations

import collections
import inspect
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Optional

import fdblayer
from fdblayer.jobs.codec import decode_data
from supervision import GenServer

from actors.workers.channel import Writer
from actors.workers.journal import JournalWriter
from actors.handlers import JobContext, resolve
from actors.workers.context import describe_error, encode_result, pool_context
from actors.workers.commands import CommandReader
from actors.workers.protocol import Release, RunJobs, StopJob, TakeBack, UsePipe

if TYPE_CHECKING:
    import asyncio

__all__ = ["Worker"]

log = logging.getLogger(__name__)


class Worker(GenServer):
    """args: None (everything comes with each run)."""

    def init(self, args: Any) -> None:
        self.pid = os.getpid()
        self.db: Any = None
        self.db_url: Optional[str] = None
        self.cv = threading.Condition()
        self.queue: collections.deque = collections.deque()
        self.current: Optional[tuple] = None  # (run, ctx) of the running sync handler
        self.writer: Optional[Writer] = None
        self.thread: Optional[threading.Thread] = None
        self.async_queue: collections.deque = collections.deque()  # async runs waiting for room
        self.async_runs: dict = {}  # token -> _AsyncRun: async handlers started, not ended
        self.async_limit = 100
        self.loop: Optional[asyncio.AbstractEventLoop] = None  # started with the first async run
        self.commands: Optional[CommandReader] = None  # the dispatcher's pipe (UsePipe)
        self.journal: Optional[JournalWriter] = None  # ended runs, for a dispatcher's successor (UsePipe)
        self.released: set = set()  # tokens of running runs a drain's Release told to stop

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, UsePipe):
            if msg.journal_dir and self.journal is None:
                self.journal = JournalWriter(msg.journal_dir, msg.host_key)
            self._use_pipe(msg.path)
        else:
            super().handle_info(msg)

    def _use_pipe(self, path: str) -> None:
        """Read the dispatcher's commands from the pipe at ``path`` from now on.

        A pipe whose name is gone was removed by its dispatcher on its way
        out (a host stopped while it adopted this worker): logged, and the
        worker waits for its successor's pipe (a successor restarts the
        pool's workers anyway). Any other unopenable pipe crashes this
        worker: the dispatcher replaces it."""
        if self.commands is not None:
            self._close_commands()
        try:
            self.commands = CommandReader(path)
        except FileNotFoundError:
            log.info("worker_pipe_gone pid=%s path=%s reason=dispatcher_stopped", self.pid, path)
            return
        self.watch_fd(self.commands.fd, self._read_commands)

    def _read_commands(self) -> None:
        """Act on every command the pipe holds, in the order they were sent."""
        commands = self.commands
        assert commands is not None
        for msg in commands.read():
            self._command(msg)
        if commands.ended and commands is self.commands:  # the dispatcher is gone: its successor stops us
            self._close_commands()

    def _close_commands(self) -> None:
        assert self.commands is not None
        self.unwatch_fd(self.commands.fd)
        self.commands.close()
        self.commands = None

    def _command(self, msg: Any) -> None:
        if isinstance(msg, RunJobs):
            self._take(msg)
        elif isinstance(msg, StopJob):
            self._stop_job(msg.token, msg.cancel)
        elif isinstance(msg, TakeBack):
            self._give_back(stop_current=False)
        elif isinstance(msg, Release):
            self._give_back(stop_current=True)
        else:
            log.warning("command_unknown type=%s", type(msg).__name__)

    def _take(self, batch: RunJobs) -> None:
        with self.cv:
            if self.writer is None or self.writer.broken or self.writer.path != batch.channel:
                if self.writer is not None:
                    self.writer.close()
                self.writer = Writer(batch.channel)
                if self.writer.broken:  # no run may start unrecorded: exit, the dispatcher hands them on
                    raise RuntimeError(f"report channel {batch.channel} cannot be opened")
                self.writer.hello()
            self.db_url = batch.store
            self.async_limit = max(1, batch.async_limit)
            for run in batch.runs:
                (self.async_queue if run.is_async else self.queue).append(run)
            self.cv.notify()
            start_async = bool(self.async_queue)
        if start_async:
            self._event_loop().call_soon_threadsafe(self._start_async)
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="handler", daemon=True)
            self.thread.start()

    def _stop_job(self, token: int, cancel: bool = False) -> None:
        """The job of ``token`` is no longer ours: its running handler sees
        ``ctx.stopping`` (an async one is cancelled too with ``cancel``); if
        it has not started, it never will (RELEASED)."""
        with self.cv:
            current = self.current
            entry = self.async_runs.get(token)
            for queue in (self.queue, self.async_queue):
                queued = [run for run in queue if run.token == token]
                if queued:
                    queue.remove(queued[0])
                    if self.writer is not None:
                        self.writer.released((token,))
        if current is not None and current[0].token == token:
            current[1].request_stop()
        if entry is not None:
            entry.ctx.request_stop()
            if cancel and self.loop is not None:
                self.loop.call_soon_threadsafe(self._cancel, entry)

    def _give_back(self, stop_current: bool) -> None:
        """Hand back every queued run not yet started (one RELEASED record,
        perhaps empty: the dispatcher waits for it); with ``stop_current``
        the running handlers (sync and async) see ``ctx.stopping`` too."""
        with self.cv:
            dropped = tuple(run.token for run in self.queue) + tuple(run.token for run in self.async_queue)
            self.queue.clear()
            self.async_queue.clear()
            running = self._running_contexts()
            if stop_current:
                self.released.update(self._running_tokens())
            if self.writer is not None:
                self.writer.released(dropped)
        if stop_current:
            for ctx in running:
                ctx.request_stop()

    def _too_late(self, run: Any, writer: Writer, wall: float) -> bool:
        """Whether ``run`` is past its ``start_by`` (this process was frozen,
        or waited that long): then its lease may have run out and another
        host may run it, so it is handed back unstarted (the dispatcher
        renews, and drops it if it is lost)."""
        if not run.start_by or wall <= run.start_by:
            return False
        with self.cv:
            if self.current is not None and self.current[0] is run:
                self.current = None
        writer.released((run.token,), late=True)
        log.info("run_not_started token=%s reason=start_by_passed late=%.3fs", run.token, wall - run.start_by)
        return True

    def _unrecorded(self, run: Any, writer: Writer) -> None:
        """The start of ``run`` could not be recorded on ``writer``: it never
        runs. When ``writer`` is still this worker's channel, its reader (the
        dispatcher) is gone, and so is every run queued here: none starts
        (the successor stops this worker and hands their jobs on, their
        attempts uncounted, as it must for runs it cannot know started)."""
        with self.cv:
            if self.current is not None and self.current[0] is run:
                self.current = None
            self.async_runs.pop(run.token, None)
            dropped = 1
            if self.writer is writer:
                dropped += len(self.queue) + len(self.async_queue)
                self.queue.clear()
                self.async_queue.clear()
        log.warning("runs_dropped reason=channel_closed channel=%s runs=%d", writer.path, dropped)

    def _running_tokens(self) -> list:
        """The tokens of every run whose handler runs now (under ``cv``)."""
        return ([self.current[0].token] if self.current is not None else []) + list(self.async_runs)

    def _running_contexts(self) -> list:
        """The contexts of every handler running now (under ``cv``)."""
        return ([self.current[1]] if self.current is not None else []) + [
            entry.ctx for entry in self.async_runs.values()
        ]

    def _store(self) -> Any:
        """This process's store handle, opened on first use (never before the fork)."""
        with self.cv:
            if self.db is None:
                self.db = fdblayer.open(self.db_url)
            return self.db

    def _loop(self) -> None:
        """The handler thread: run queued jobs one at a time, recording each start and end."""
        while True:
            with self.cv:
                while not self.queue:
                    self.cv.wait()
                run = self.queue.popleft()
                ctx = pool_context(run.job, {}, run.attempt, run.max_attempts, self._store)
                self.current = (run, ctx)
                writer = self.writer
            assert writer is not None  # set before any run is queued
            wall = time.time()
            if self._too_late(run, writer, wall):
                continue
            if not writer.start(run.token, wall):  # before the call: a death from here on is this run's
                self._unrecorded(run, writer)
                continue
            started = time.monotonic()
            result, error = self._call(run, ctx)
            seconds = time.monotonic() - started
            with self.cv:
                self.current = None
            self._ended(writer, run, wall, seconds, result, error)

    def _ended(self, writer: Writer, run: Any, wall: float, seconds: float, result: Any, error: Any) -> None:
        """Record the end of ``run``: on the channel (its dispatcher reads it
        at once), then in the journal (for the successor of a dispatcher
        that dies before writing it), saying whether a drain had told it to
        stop (the successor then puts its job back uncounted)."""
        writer.end(run.token, seconds, result, error)
        released = run.token in self.released  # a set's test and discard need no lock (the GIL)
        if released:
            self.released.discard(run.token)
        if self.journal is not None:
            self.journal.ended(run, wall, seconds, result, error, released)

    def _call(self, run: Any, ctx: JobContext) -> tuple:
        """``(encoded result, None)`` or ``(None, error)``; in a process forked
        by the handler, never returns."""
        try:
            ctx.data = decode_data(run.data)
            value = resolve(run.handler)(ctx)
            if inspect.isawaitable(value):  # a sync callable that returned a coroutine: await it here
                import asyncio

                value = asyncio.run_coroutine_threadsafe(_awaited(value), self._event_loop()).result()
            if os.getpid() != self.pid:
                os._exit(0)
            return encode_result(value), None
        except BaseException as exc:  # noqa: BLE001 - everything a handler raises fails its attempt
            if os.getpid() != self.pid:
                os._exit(1 if not isinstance(exc, SystemExit) else _exit_code(exc))
            return None, describe_error(exc)

    # ---------------------------------------------------------------- async handlers
    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop of async handlers, running in its own thread (started on
        first use: asyncio is imported then, not at a sync worker's start)."""
        import asyncio

        with self.cv:
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self._run_loop, args=(self.loop,), name="async-handlers", daemon=True).start()
            return self.loop

    def _run_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the async handlers' loop for the worker's life. Nothing of the
        worker stops it, so a stop is a handler's (``loop.stop()``): the loop
        runs on, or its queued and running neighbours would wait for ever. A
        loop that cannot run (a handler closed it) ends the worker, whose
        supervisor restarts it (its runs end as ``WorkerDied``)."""
        told = False
        while True:
            try:
                loop.run_forever()
            except BaseException as exc:  # noqa: BLE001 - a closed or broken loop: no async run can go on here
                log.error("async_loop_failed pid=%d error=%r: the worker exits", self.pid, exc)
                os._exit(70)
            if not told:
                told = True
                log.warning("async_loop_stopped pid=%d by=a_handler action=resumed", self.pid)

    def _start_async(self) -> None:
        """In the loop's thread: start queued async runs while there is room,
        each recorded before its coroutine exists."""
        while True:
            with self.cv:
                if not self.async_queue or len(self.async_runs) >= self.async_limit:
                    return
                run = self.async_queue.popleft()
                entry = _AsyncRun(run, pool_context(run.job, {}, run.attempt, run.max_attempts, self._store))
                self.async_runs[run.token] = entry
                writer, loop = self.writer, self.loop
            assert writer is not None and loop is not None  # set before any async run is queued; this is its thread
            entry.wall = time.time()
            if self._too_late(run, writer, entry.wall):
                with self.cv:
                    self.async_runs.pop(run.token, None)
                continue
            if not writer.start(run.token, entry.wall):  # before the call: a death from here on is this run's
                self._unrecorded(run, writer)
                return
            entry.task = loop.create_task(self._run_async(entry, writer))

    async def _run_async(self, entry: "_AsyncRun", writer: Writer) -> None:
        """One async run: await its handler, then record its end and make room."""
        run, ctx = entry.run, entry.ctx
        entry.running = True
        started = time.monotonic()
        try:
            if entry.cancel_asked:
                import asyncio  # loaded: this is a coroutine on its loop

                raise asyncio.CancelledError("cancelled past its time limit")
            ctx.data = decode_data(run.data)
            value = resolve(run.handler)(ctx)
            if inspect.isawaitable(value):
                value = await value
            if os.getpid() != self.pid:
                os._exit(0)
            result, error = encode_result(value), None
        except BaseException as exc:  # noqa: BLE001 - everything a handler raises fails its attempt
            if os.getpid() != self.pid:
                os._exit(1 if not isinstance(exc, SystemExit) else _exit_code(exc))
            result, error = None, describe_error(exc)
        seconds = time.monotonic() - started
        entry.ended = True
        with self.cv:
            self.async_runs.pop(run.token, None)
        self._ended(writer, run, entry.wall, seconds, result, error)
        self._start_async()

    def _cancel(self, entry: "_AsyncRun") -> None:
        """In the loop's thread: cancel an async run (past its time limit and the grace)."""
        if entry.ended:
            return
        entry.cancel_asked = True
        if entry.running and entry.task is not None:  # not yet running: it cancels itself at its start
            entry.task.cancel("past its time limit and the grace")

    def terminate(self, reason: Any) -> None:
        with self.cv:
            running = self._running_contexts()
        for ctx in running:
            ctx.request_stop()


class _AsyncRun:
    """An async run started on the worker's event loop."""

    __slots__ = ("run", "ctx", "task", "running", "ended", "cancel_asked", "wall")

    def __init__(self, run: Any, ctx: JobContext) -> None:
        self.run = run
        self.ctx = ctx
        self.task: Optional[asyncio.Task] = None
        self.running = False
        self.ended = False
        self.cancel_asked = False
        self.wall = 0.0  #: when its start was recorded (epoch s)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    return code if isinstance(code, int) and 0 <= code < 256 else (0 if code is None else 1)
