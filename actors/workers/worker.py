"""A pool's worker: runs one handler call at a time, in a thread of its process.

Principle: the handler runs in a thread so the actor's message loop stays
free: a :class:`~actors.workers.protocol.StopJob` reaches the handler at
once (``ctx.stopping``) and a shutdown is answered while a handler still
runs. The dispatcher hands a worker a few jobs at once (they run one after
the other, with no message between them). Every run handed to a worker
is answered exactly once on its report channel
(:mod:`actors.workers.channel`): ended, or released unstarted when the
dispatcher takes it back (:class:`TakeBack`, a drain's :class:`Release`).
A run's start is written *before* its handler is called and its end
right after, so a worker that dies (SIGKILL, OOM, ``os._exit``) leaves
behind exactly which run it was in.

A process forked inside a handler is not a worker: when the call returns
(or raises, or calls ``sys.exit``) in a process other than the worker's,
that process exits at once, before it could run a queued job or report.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Optional

import fdblayer
from fdblayer.jobs.codec import decode_data
from supervision import GenServer

from actors.workers.channel import Writer
from actors.workers.context import JobContext, describe_error, encode_result
from actors.workers.handlers import resolve
from actors.workers.protocol import Release, RunJobs, StopJob, TakeBack

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
        self.current: Optional[tuple] = None  # (run, ctx) of the running handler
        self.writer: Optional[Writer] = None
        self.thread: Optional[threading.Thread] = None

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, RunJobs):
            self._take(msg)
        elif isinstance(msg, StopJob):
            self._stop_job(msg.token)
        elif isinstance(msg, TakeBack):
            self._give_back(stop_current=False)
        elif isinstance(msg, Release):
            self._give_back(stop_current=True)
        else:
            super().handle_info(msg)

    def _take(self, batch: RunJobs) -> None:
        with self.cv:
            if self.writer is None or self.writer.path != batch.channel:
                if self.writer is not None:
                    self.writer.close()
                self.writer = Writer(batch.channel)
                if self.writer.broken:  # no run may start unrecorded: exit, the dispatcher hands them on
                    raise RuntimeError(f"report channel {batch.channel} cannot be opened")
                self.writer.hello()
            self.db_url = batch.store
            self.queue.extend(batch.runs)
            self.cv.notify()
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="handler", daemon=True)
            self.thread.start()

    def _stop_job(self, token: int) -> None:
        """The job of ``token`` is no longer ours: its running handler sees
        ``ctx.stopping``; if it has not started, it never will (RELEASED)."""
        with self.cv:
            current = self.current
            queued = [run for run in self.queue if run.token == token]
            if queued:
                self.queue.remove(queued[0])
                if self.writer is not None:
                    self.writer.released((token,))
        if current is not None and current[0].token == token:
            current[1]._stop.set()  # noqa: SLF001 - the context belongs to this worker

    def _give_back(self, stop_current: bool) -> None:
        """Hand back every queued run not yet started (one RELEASED record,
        perhaps empty: the dispatcher waits for it); with ``stop_current``
        the running handler sees ``ctx.stopping`` too."""
        with self.cv:
            dropped = tuple(run.token for run in self.queue)
            self.queue.clear()
            current = self.current
            if self.writer is not None:
                self.writer.released(dropped)
        if stop_current and current is not None:
            current[1]._stop.set()  # noqa: SLF001

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
                ctx = JobContext(run.job, {}, run.attempt, run.max_attempts, self._store)
                self.current = (run, ctx)
                writer = self.writer
            writer.start(run.token, time.time())  # before the call: a death from here on is this run's
            started = time.monotonic()
            result, error = self._call(run, ctx)
            seconds = time.monotonic() - started
            with self.cv:
                self.current = None
            writer.end(run.token, seconds, result, error)

    def _call(self, run: Any, ctx: JobContext) -> tuple:
        """``(encoded result, None)`` or ``(None, error)``; in a process forked
        by the handler, never returns."""
        try:
            ctx.data = decode_data(run.data)
            value = resolve(run.handler)(ctx)
            if os.getpid() != self.pid:
                os._exit(0)
            return encode_result(value), None
        except BaseException as exc:  # noqa: BLE001 - everything a handler raises fails its attempt
            if os.getpid() != self.pid:
                os._exit(1 if not isinstance(exc, SystemExit) else _exit_code(exc))
            return None, describe_error(exc)

    def terminate(self, reason: Any) -> None:
        with self.cv:
            current = self.current
        if current is not None:
            current[1]._stop.set()  # noqa: SLF001


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    return code if isinstance(code, int) and 0 <= code < 256 else (0 if code is None else 1)
