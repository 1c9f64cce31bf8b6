"""A pool's worker: runs one handler call at a time, in a thread of its process.

Principle: the handler runs in a thread so the actor's message loop stays
free: a :class:`~actors.workers.protocol.StopJob` reaches the handler at
once (``ctx.stopping``) and a shutdown is answered while a handler still
runs. The dispatcher hands a worker a few jobs at once (they run one
after the other, with no message between them) and the worker reports
the runs that ended since its last report in one message; every run
handed to it is answered exactly once, as ended (:class:`JobsDone`) or,
when the dispatcher asks for them back before they start, as released
(:class:`Released`). If the whole process dies (SIGKILL, OOM,
``os._exit``) its supervisor restarts it and the dispatcher, which
monitors it, re-enqueues its jobs at once.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Optional

import fdblayer
from fdblayer.jobs.codec import decode_data
from supervision import GenServer
from supervision.waker import Waker

from actors.workers.context import JobContext, describe_error, encode_result
from actors.workers.handlers import resolve
from actors.workers.protocol import JobDone, JobsDone, Release, Released, RunJobs, StopJob

__all__ = ["Worker"]

log = logging.getLogger(__name__)

#: A worker with more jobs queued reports ended runs once this many ended, and
#: while it has work, every REPORT_DELAY seconds (so a quick run's outcome
#: never waits for a long run after it); an idle worker reports at once.
REPORT_BATCH = 48
REPORT_DELAY = 0.05
#: Report at once when this few jobs are left queued: the refill is on its
#: way while the last one runs, so a worker seldom waits for work.
REPORT_LOW = 1


class Worker(GenServer):
    """args: None (everything comes with each run)."""

    def init(self, args: Any) -> None:
        self.waker: Optional[Waker] = None
        self.db: Any = None
        self.db_url: Optional[str] = None
        self.cv = threading.Condition()
        self.queue: collections.deque = collections.deque()
        self.ended: list = []
        self.current: Optional[tuple] = None  # (run, ctx) of the running handler
        self.reply_to: Any = None
        self.thread: Optional[threading.Thread] = None
        self.tick: Optional[int] = None  # the report timer, armed while there is work

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, RunJobs):
            self._take(msg)
        elif isinstance(msg, StopJob):
            with self.cv:
                current = self.current
            if current is not None and current[0].token == msg.token:
                current[1]._stop.set()  # noqa: SLF001 - the context belongs to this worker
        elif isinstance(msg, Release):
            self._release()
        else:
            super().handle_info(msg)

    def _take(self, batch: RunJobs) -> None:
        if self.waker is None:
            self.waker = Waker(self, self._report)
            self.thread = threading.Thread(target=self._loop, name="handler", daemon=True)
            self.thread.start()
        with self.cv:
            self.reply_to, self.db_url = batch.reply_to, batch.store
            self.queue.extend(batch.runs)
            self.cv.notify()
        if self.tick is None:
            self.tick = self.start_timer(REPORT_DELAY, self._tick, real=True)

    def _tick(self) -> None:
        """Report what ended since the last report; again later while there is work."""
        self.tick = None
        self._report()
        with self.cv:
            busy = bool(self.queue) or self.current is not None
        if busy:
            self.tick = self.start_timer(REPORT_DELAY, self._tick, real=True)

    def _release(self) -> None:
        with self.cv:
            dropped = tuple(run.token for run in self.queue)
            self.queue.clear()
            current = self.current
        if current is not None:
            current[1]._stop.set()  # noqa: SLF001
        if self.reply_to is not None:
            self.send(self.reply_to, Released(self.myAddress, dropped))

    def _store(self) -> Any:
        """This process's store handle, opened on first use (never before the fork)."""
        with self.cv:
            if self.db is None:
                self.db = fdblayer.open(self.db_url)
            return self.db

    def _loop(self) -> None:
        """The handler thread: run queued jobs one at a time, hand each outcome to the actor."""
        while True:
            with self.cv:
                while not self.queue:
                    self.cv.wait()
                run = self.queue.popleft()
                ctx = JobContext(run.job, {}, run.attempt, run.max_attempts, self._store)
                self.current = (run, ctx)
            done = self._call(run, ctx)
            with self.cv:
                self.current = None
                self.ended.append(done)
                # Report at once when about to run dry; else quick runs share one report (or the tick's).
                report = len(self.queue) <= REPORT_LOW or len(self.ended) >= REPORT_BATCH
            if report:
                self.waker.wake()

    def _call(self, run: Any, ctx: JobContext) -> JobDone:
        started = time.monotonic()
        try:
            ctx.data = decode_data(run.data)
            value = resolve(run.handler)(ctx)
            return JobDone(run.token, encode_result(value), None, time.monotonic() - started)
        except BaseException as exc:  # noqa: BLE001 - everything a handler raises fails its attempt
            return JobDone(run.token, None, describe_error(exc), time.monotonic() - started)

    def _report(self) -> None:
        with self.cv:
            ended, self.ended = self.ended, []
        if ended and self.reply_to is not None:
            self.send(self.reply_to, JobsDone(self.myAddress, tuple(ended)))

    def terminate(self, reason: Any) -> None:
        with self.cv:
            current = self.current
        if current is not None:
            current[1]._stop.set()  # noqa: SLF001
        if self.waker is not None:
            self.waker.close()
