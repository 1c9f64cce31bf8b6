"""A pool's worker: runs one handler call at a time, in a thread of its process.

Principle: the handler runs in a thread so the actor's message loop stays
free: a :class:`~actors.workers.protocol.StopJob` reaches the handler at
once (``ctx.stopping``) and a shutdown is answered while a handler still
runs. Whatever the handler does, the worker answers each run with exactly
one :class:`~actors.workers.protocol.JobDone`; if the whole process dies
(SIGKILL, OOM, ``os._exit``) its supervisor restarts it and the dispatcher,
which monitors it, re-enqueues the job at once.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Optional

import fdblayer
from fdblayer.jobs.codec import decode_data
from supervision import GenServer
from supervision.waker import Waker

from actors.workers.context import JobContext, describe_error, encode_result
from actors.workers.handlers import resolve
from actors.workers.protocol import JobDone, RunJob, StopJob

__all__ = ["Worker"]

log = logging.getLogger(__name__)


class Worker(GenServer):
    """args: None (everything comes with each RunJob)."""

    def init(self, args: Any) -> None:
        self.waker: Optional[Waker] = None
        self.db: Any = None
        self.db_url: Optional[str] = None
        self.lock = threading.Lock()
        self.current: Optional[tuple[RunJob, JobContext]] = None
        self.done: Optional[JobDone] = None

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, RunJob):
            self._start(msg)
        elif isinstance(msg, StopJob):
            current = self.current
            if current is not None and current[0].token == msg.token:
                current[1]._stop.set()  # noqa: SLF001 - the context belongs to this worker
        else:
            super().handle_info(msg)

    def _store(self) -> Any:
        """This process's store handle, opened on first use (never before the fork)."""
        with self.lock:
            if self.db is None:
                self.db = fdblayer.open(self.db_url)
            return self.db

    def _start(self, run: RunJob) -> None:
        if self.current is not None:  # the dispatcher never does this; answer rather than lose the job
            self.send(run.reply_to, JobDone(run.token, self.myAddress, None, {
                "type": "WorkerBusy", "message": "the worker was already running a job", "traceback": ""}))
            return
        if self.waker is None:
            self.waker = Waker(self, self._finished)
        self.db_url = run.store
        ctx = JobContext(run.job, {}, run.attempt, run.max_attempts, self._store)
        self.current = (run, ctx)
        threading.Thread(target=self._call, args=(run, ctx), name=f"job-{run.job.id}", daemon=True).start()

    def _call(self, run: RunJob, ctx: JobContext) -> None:
        """The handler thread: call, encode, hand the outcome to the actor."""
        try:
            ctx.data = decode_data(run.data)
            value = resolve(run.handler)(ctx)
            done = JobDone(run.token, self.myAddress, encode_result(value), None)
        except BaseException as exc:  # noqa: BLE001 - everything a handler raises fails its attempt
            done = JobDone(run.token, self.myAddress, None, describe_error(exc))
        self.done = done
        self.waker.wake()

    def _finished(self) -> None:
        done, self.done = self.done, None
        if done is None or self.current is None:
            return
        run = self.current[0]
        self.current = None
        self.send(run.reply_to, done)

    def terminate(self, reason: Any) -> None:
        if self.current is not None:
            self.current[1]._stop.set()  # noqa: SLF001
        if self.waker is not None:
            self.waker.close()
