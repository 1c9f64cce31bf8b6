"""Job hosts: many running scheduler jobs as threads of a few processes.

Principle: a running job costs a thread, not a process. A host is one actor
(one process) running any number of jobs, each in a thread of its own with
the same :class:`~actors.handlers.JobContext` a process job gets, and
each still its own supervised entity: the host tells the scheduler how each
job ended (``JobExited`` with the job's own reason: ``normal``, the
handler's exception, ``shutdown``), and the scheduler monitors the host, so
a host that dies (SIGKILL, OOM) ends each of its jobs with the host's
reason. The host's message loop never runs a handler: it is free to start
and stop jobs at any moment, and stops run in parallel.

Stopping a job (``StopHosted``): its ``stopping`` flag is set and its code
gets ``STOP_GRACE`` seconds to return; then :class:`JobStopping` is raised
inside its thread (between two Python bytecodes, so a loop of sleeps or
computation ends); a job that is still running ``KILL_GRACE`` seconds later
(blocked in native code) cannot be ended inside its process, so the host
exits with ``("job_would_not_stop", id)`` and its supervisor starts a fresh
one: the scheduler hears of that job's end (and its siblings') only once
its code no longer runs. Handlers that may block in native code without a
timeout belong in a process of their own (``"isolation": "process"``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from supervision import ChildSpec, GenServer, Strategy, Supervisor, SupFlags
from supervision.messages import Cast, Failure
from supervision.reasons import portable
from supervision.waker import Waker

from actors.scheduler.core import JobSpec
from actors.scheduler.fence import LeaseFence
from actors.scheduler.model import InvalidJobSpec
from actors.scheduler.protocol import DEFAULT_HOSTS, HOST_NAME, CountRunning
from actors.names import REPLICATE_HANDLER
from actors.handlers import JobContext, JobStopping, StopSignal, resolve
from actors.scheduler.job import PUBLISH_INTERVAL, STOP_GRACE, HandlerExit, JobProgress, exit_reason, scheduler_context

log = logging.getLogger(__name__)

#: Seconds between JobStopping raised in a thread and the host giving up on it.
KILL_GRACE = 1.0
#: Seconds a host remembers a run that ended normally, for a scheduler
#: restarted meanwhile: longer than the doc processor takes to notice a
#: completion (its tick, at most 2 s) and to re-add its jobs.
COMPLETED_MEMORY = 60.0
HOST_START = "actors.scheduler.host:JobHost"


# --------------------------------------------------------------- messages


@dataclass(frozen=True)
class HostedJob:
    """A hosted job's "pid": its host's address, id and run ref (unique per run)."""

    host: Any
    job_id: Any
    ref: str

    def __str__(self) -> str:
        return f"<{self.host}/{self.ref[:8]}>"


@dataclass(frozen=True)
class StartHosted:
    """Scheduler to host (call): run a job now; answers the host's pid."""

    ref: str
    spec: dict
    checkpoint: Any
    scheduler: Any


@dataclass(frozen=True)
class StopHosted:
    """Scheduler to host (cast): stop the run ``ref``; its ``JobExited`` tells
    when its code has ended."""

    ref: str


@dataclass(frozen=True)
class JobExited:
    """Host to scheduler (cast): the run ``ref`` of ``job_id`` ended with ``reason``."""

    job_id: Any
    ref: str
    reason: Any


@dataclass(frozen=True)
class ListHosted:
    """Scheduler to host (call), when adopting: each running job's details
    (``stopping``: told to stop, its code still ending), and ``{"completed":
    job id, "at": wall time}`` for each run that ended normally in the last
    ``COMPLETED_MEMORY`` seconds (its predecessor may have died before it
    heard); report to ``scheduler`` from now on."""

    scheduler: Any


# ------------------------------------------------------------------- host


@dataclass
class _Run:
    """One job running in a thread of the host."""

    ref: str
    spec: JobSpec
    scheduler: Any
    events: "queue.Queue[tuple]"
    stop: StopSignal
    checkpoint: Any
    started_at: float
    thread: threading.Thread | None = None
    outcome: Any = None
    done: bool = False
    stats: dict = field(default_factory=dict)
    dirty: bool = False
    new_checkpoint: bool = False
    stop_asked: bool = False


class JobHost(GenServer):
    """Runs scheduler jobs as threads. args: ``{"index": i (for logs), "fence": the node's lease fence file}``."""

    def init(self, args: Any) -> None:
        self.index = (args or {}).get("index", 0)
        self.fence = LeaseFence((args or {}).get("fence"))
        self.runs: dict[str, _Run] = {}
        self.completed: dict[str, tuple[float, float]] = {}  # job id -> (monotonic, wall) its run ended normally
        self.waker = Waker(self, self._reap)
        self.publish_timer: Any = None

    def format_status(self) -> dict:
        return {"host": self.index, "jobs": len(self.runs)}

    # ------------------------------------------------------------ messages
    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, StartHosted):
            try:
                self._start(msg)
            except InvalidJobSpec as exc:  # refused, not a crash of the host and its other jobs
                return Failure(exc)
            return os.getpid()
        if isinstance(msg, CountRunning):
            return sum(1 for run in self.runs.values() if run.thread is not None and run.thread.is_alive())
        if isinstance(msg, ListHosted):
            self._forget_completed()
            completed = [{"completed": job_id, "at": at[1]} for job_id, at in self.completed.items()]
            return [self._details(run, msg.scheduler) for run in self.runs.values()] + completed
        return super().handle_call(msg, from_)

    def handle_cast(self, msg: Any) -> None:
        if isinstance(msg, StopHosted):
            self._stop(msg.ref)
            return
        super().handle_cast(msg)

    def terminate(self, reason: Any) -> None:
        for run in self.runs.values():
            run.stop.set()
        deadline = time.monotonic() + STOP_GRACE
        for run in list(self.runs.values()):
            if run.thread is not None:
                run.thread.join(max(0.0, deadline - time.monotonic()))
        self._reap()

    # --------------------------------------------------------------- runs
    def _start(self, msg: StartHosted) -> None:
        spec = JobSpec.from_dict(msg.spec)
        run = _Run(msg.ref, spec, msg.scheduler, queue.Queue(), StopSignal(), msg.checkpoint, time.time())
        ctx = scheduler_context(spec, msg.checkpoint, run.events, run.stop, self.fence)
        run.thread = threading.Thread(target=self._work, args=(run, ctx), name=f"job-{spec.id}", daemon=True)
        self.runs[run.ref] = run
        run.thread.start()
        self._arm_publish()

    def _work(self, run: _Run, ctx: JobContext) -> None:
        """The job's thread: run the handler, keep how it ended, wake the host."""
        path = run.spec.handler or REPLICATE_HANDLER
        try:
            try:
                resolve(path)(ctx)
                run.outcome = "normal"
            except JobStopping:
                run.outcome = "shutdown" if run.stop.is_set() else "normal"
            except Exception as exc:  # noqa: BLE001 - the handler's crash is the job's exit reason
                log.error("job_handler_crashed job=%r handler=%s reason=%r", run.spec.id, path, exc)
                run.outcome = portable(exc)
            except BaseException as exc:  # noqa: BLE001 - SystemExit and friends end the job too
                run.outcome = HandlerExit(repr(exc))
        except JobStopping:  # raised by the host just as the handler returned
            run.outcome = "shutdown"
        finally:
            run.outcome = exit_reason(run.outcome, ctx, run.stop)
            run.done = True
            self.waker.wake()

    def _stop(self, ref: str) -> None:
        run = self.runs.get(ref)
        if run is None or run.stop_asked:
            return
        run.stop_asked = True
        run.stop.set()
        self.start_timer(STOP_GRACE, lambda: self._force_stop(ref), real=True)

    def _force_stop(self, ref: str) -> None:
        """The grace is over: raise JobStopping inside the job's thread."""
        run = self.runs.get(ref)
        if run is None or run.done or run.thread is None:
            return
        log.warning("job_stop_forced job=%r host=%s", run.spec.id, self.index)
        _raise_in_thread(run.thread, JobStopping)
        self.start_timer(KILL_GRACE, lambda: self._give_up(ref), real=True)

    def _give_up(self, ref: str) -> None:
        """A job that outlived JobStopping cannot end inside this process: the
        host exits (and is restarted) so that its code no longer runs."""
        run = self.runs.get(ref)
        if run is None or run.done:
            return
        log.error("job_would_not_stop job=%r host=%s jobs_on_host=%d", run.spec.id, self.index, len(self.runs))
        self.stop(("job_would_not_stop", run.spec.id))

    def _forget_completed(self) -> None:
        """Drop the completions older than COMPLETED_MEMORY (the oldest come
        first): the memory stays as small as a minute of completions."""
        since = time.monotonic() - COMPLETED_MEMORY
        while self.completed:
            job_id, at = next(iter(self.completed.items()))
            if at[0] > since:
                return
            del self.completed[job_id]

    def _reap(self) -> None:
        """Tell each finished job's scheduler how it ended; forget it."""
        for ref, run in list(self.runs.items()):
            if not run.done:
                continue
            del self.runs[ref]
            if run.outcome == "normal" and not run.stop_asked:
                self.completed.pop(run.spec.id, None)  # oldest first: a later end goes last
                self.completed[run.spec.id] = (time.monotonic(), time.time())
                self._forget_completed()
            self._drain(run)
            self._publish(run)
            self.send(run.scheduler, Cast(JobExited(run.spec.id, ref, run.outcome)))

    # ----------------------------------------------------------- progress
    def _arm_publish(self) -> None:
        if self.publish_timer is None and self.runs:
            self.publish_timer = self.start_timer(PUBLISH_INTERVAL, self._publish_all, real=True)

    def _publish_all(self) -> None:
        self.publish_timer = None
        for run in self.runs.values():
            self._drain(run)
            self._publish(run)
        self._arm_publish()

    @staticmethod
    def _drain(run: _Run) -> None:
        while True:
            try:
                kind, value = run.events.get_nowait()
            except queue.Empty:
                return
            if kind == "checkpoint":
                run.checkpoint, run.new_checkpoint, run.dirty = value, True, True
            elif kind == "report":
                run.stats.update(value)
                run.dirty = True

    def _publish(self, run: _Run) -> None:
        if not run.dirty or run.scheduler is None:
            return
        handle = HostedJob(self.myAddress, run.spec.id, run.ref)
        self.send(
            run.scheduler, Cast(JobProgress(run.spec.id, handle, dict(run.stats), run.checkpoint, run.new_checkpoint))
        )
        run.dirty = run.new_checkpoint = False

    def _details(self, run: _Run, scheduler: Any) -> dict:
        run.scheduler = scheduler
        self._drain(run)
        return {
            "ref": run.ref,
            "spec": run.spec.to_dict(),
            "stats": dict(run.stats),
            "checkpoint": run.checkpoint,
            "started_at": run.started_at,
            "stopping": run.stop_asked,
        }


def _raise_in_thread(thread: threading.Thread, exc_type: type) -> None:
    """Raise ``exc_type`` in ``thread`` at its next Python bytecode."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


# ------------------------------------------------------------- supervisor


class JobHostSup(Supervisor):
    """one_for_one over the node's job hosts. args: ``{"hosts": n, "name": name format, "fence": path}``."""

    def children(self, args: Any) -> tuple:
        count = (args or {}).get("hosts", DEFAULT_HOSTS)
        name = (args or {}).get("name", HOST_NAME)
        fence = (args or {}).get("fence")
        flags = SupFlags(Strategy.ONE_FOR_ONE, intensity=10, period=10)
        return flags, [
            ChildSpec(
                f"host{i}", HOST_START, {"index": i, "fence": fence}, shutdown=STOP_GRACE + 1.0, name=name.format(i)
            )
            for i in range(count)
        ]
