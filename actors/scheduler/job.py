"""One running scheduler job: an actor in its own process (couch_replicator_scheduler_job).

Principle: the job actor is a thin, always-responsive shell around the
job's work. The work — a handler given as ``package.module:callable``, or
the built-in ``replicate`` kind — runs in a thread of the actor's process
and talks to the actor only through a queue; the actor's message loop
stays free to answer a stop at once.

Lifecycle:

* started (temporary child of ``scheduler_sup``) with the job's spec, the
  scheduler's address and the job's last checkpoint. Its start never fails
  (a bad handler is a crash of the running job, so its reason reaches the
  scheduler's history);
* the work begins on :class:`RunJob`, which the scheduler sends right after
  it monitors the job, so a job cannot finish unseen;
* the handler returns: the actor exits ``normal`` (the scheduler drops a
  completed one-shot job); it raises: the actor exits with that exception
  (a crash);
* stopped by the scheduler (``shutdown``): the handler is told to stop, is
  waited for (it checkpoints), and its last checkpoint and stats go to the
  scheduler before the actor exits.

What a handler gets: the one handler context
(:class:`actors.handlers.JobContext`, re-exported here, built by
:func:`scheduler_context`): ``job_id``, ``options``, ``continuous``,
``source``/``target``, ``last_checkpoint``, ``checkpoint(state)``,
``report(**stats)``, ``stopping``, ``wait(seconds)`` (sleeps, returns True
early when the job is stopping), ``wait_stopping``, ``await stopped()``
and ``check()`` (raises :class:`JobStopping`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any

from supervision import GenServer
from supervision.messages import Cast

from actors.errors import ActorsError
from actors.handlers import JobContext, JobStopping, ScheduledJob, StopSignal, resolve
from actors.names import REPLICATE_HANDLER
from actors.scheduler.core import JobSpec
from actors.scheduler.fence import LEASE_EXPIRED, LeaseFence
from actors.scheduler.model import InvalidJobSpec
from actors.scheduler.replicate import missing_source

log = logging.getLogger(__name__)

#: Seconds terminate waits for the handler to stop (the sup kills at 5 s).
STOP_GRACE = 4.0
POLL_MIN, POLL_MAX = 0.01, 0.25
#: Seconds between progress messages to the scheduler (the seed's task
#: status update frequency); a stop sends the last progress at once.
PUBLISH_INTERVAL = 1.0
#: Seconds a started job waits for RunJob before it leaves (its start was given up).
RUN_DEADLINE = 90.0

_UNSET = object()


# --------------------------------------------------------------- messages


@dataclass(frozen=True)
class RunJob:
    """Scheduler to job (cast): begin the work (the scheduler now monitors you)."""

    scheduler: Any


@dataclass(frozen=True)
class GetDetails:
    """Scheduler to job (call), when adopting it: answer the spec, stats and
    checkpoint; report to ``scheduler`` from now on."""

    scheduler: Any


@dataclass(frozen=True)
class JobProgress:
    """Job to scheduler (cast): new stats and/or a new checkpoint."""

    job_id: Any
    addr: Any
    stats: dict
    checkpoint: Any = None
    has_checkpoint: bool = False


# ---------------------------------------------------------------- context


def scheduler_context(
    spec: JobSpec,
    last_checkpoint: Any,
    events: "queue.Queue[tuple[str, Any]]",
    stop: StopSignal,
    fence: LeaseFence | None = None,
) -> JobContext:
    """The context of a run of ``spec`` (its :class:`~actors.handlers.ScheduledJob`
    part): checkpoints and stats go on ``events``; ``stop`` stops it, and
    so does ``fence`` running out when the job is a document's (only a
    document's job holds a lease)."""
    fenced_by = fence.left if fence is not None and spec.db_name is not None else None
    return JobContext(spec.id, stop=stop, fence=fenced_by, scheduled=ScheduledJob(spec, events, last_checkpoint))


def exit_reason(reason: Any, ctx: JobContext, stop: StopSignal) -> Any:
    """The reason a job whose handler ended with ``reason`` exits with:
    ``lease_expired`` instead of ``normal`` or ``shutdown`` when it returned
    because its fence ran out, not because ``stop`` asked it to (its
    document may be another node's: not done)."""
    if reason in ("normal", "shutdown") and ctx.fenced and not stop.is_set():
        return LEASE_EXPIRED
    return reason


def check_runnable(spec: JobSpec) -> None:
    """Raise :class:`InvalidJobSpec` for a well-formed job that could never run.

    Its module must be found on the node's path (found, not imported: only
    the packages above it are, as finding it needs), and a replication's
    SQLite source must exist. A handler's attribute is only looked up when
    the job runs.
    """
    if spec.handler and spec.handler != REPLICATE_HANDLER:
        module_name = spec.handler.partition(":")[0]
        try:
            found = importlib.util.find_spec(module_name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise InvalidJobSpec("handler", spec.handler, f"no module named {module_name!r} on the node's path")
    elif spec.source is not None:
        why = missing_source(spec.source)
        if why:
            raise InvalidJobSpec("source", spec.source, why)


class HandlerExit(ActorsError):
    """A handler ended by raising something that is not an Exception."""


# ------------------------------------------------------------------ actor


class SchedulerJob(GenServer):
    """A running job. args: ``{"spec": dict, "scheduler": addr, "checkpoint": state}``."""

    def init(self, args: Any) -> None:
        self.spec = JobSpec.from_dict(args["spec"])
        self.scheduler = args.get("scheduler")
        self.last_checkpoint = args.get("checkpoint")
        self.fence = LeaseFence(args.get("fence"))
        self.has_new_checkpoint = False
        self.stats: dict = {}
        self.stats_dirty = False
        self.started_at = self.clock.time()
        self.events: "queue.Queue[tuple]" = queue.Queue()
        self.stop_event = StopSignal()
        self.thread: threading.Thread | None = None
        self.adopted = False
        self.outcome: Any = _UNSET
        self.poll_delay = POLL_MIN
        self.last_publish = float("-inf")
        self.start_timer(RUN_DEADLINE, self._never_run, real=True)

    def _never_run(self) -> None:
        if self.thread is None and not self.adopted:
            # The scheduler gave up on this start (its call timed out): nobody
            # tracks this actor, so it leaves instead of holding a process.
            log.warning("job_never_run job=%r: exiting", self.spec.id)
            self.stop("normal")

    def format_status(self) -> dict:
        return {"job": self.spec.id, "kind": self.spec.kind, "running": self.thread is not None}

    # ------------------------------------------------------------ messages
    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, GetDetails):
            self.scheduler = msg.scheduler
            self.adopted = True
            self._drain()
            return {
                "spec": self.spec.to_dict(),
                "stats": dict(self.stats),
                "checkpoint": self.last_checkpoint,
                "started_at": self.started_at,
                "pid": os.getpid(),
                "running": self.thread is not None,
            }
        return super().handle_call(msg, from_)

    def handle_cast(self, msg: Any) -> None:
        if isinstance(msg, RunJob):
            self.scheduler = msg.scheduler
            self._run()
            return
        super().handle_cast(msg)

    def terminate(self, reason: Any) -> None:
        self.stop_event.set()
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(STOP_GRACE)
            if self.thread.is_alive():
                log.warning("job_stop_overdue job=%r grace=%.1f", self.spec.id, STOP_GRACE)
        self._drain()
        self._publish()

    # ------------------------------------------------------------- work
    def _run(self) -> None:
        if self.thread is not None:
            return
        ctx = scheduler_context(self.spec, self.last_checkpoint, self.events, self.stop_event, self.fence)
        path = self.spec.handler or REPLICATE_HANDLER
        self.thread = threading.Thread(target=self._work, args=(path, ctx), name=f"job-{self.spec.id}", daemon=True)
        self.thread.start()
        self.start_timer(POLL_MIN, self._poll, real=True)

    def _work(self, path: str, ctx: JobContext) -> None:
        try:
            handler = resolve(path)
            handler(ctx)
            self.outcome = exit_reason("normal", ctx, self.stop_event)
        except JobStopping:
            self.outcome = exit_reason("shutdown", ctx, self.stop_event)
        except Exception as exc:  # noqa: BLE001 - the handler's crash is the job's exit reason
            log.error("job_handler_crashed job=%r handler=%s reason=%r", self.spec.id, path, exc)
            self.outcome = exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit and friends end the job too
            self.outcome = HandlerExit(repr(exc))
        finally:
            self.events.put(("done", None))

    def _poll(self) -> None:
        self._drain()
        now = self.clock.monotonic()
        if now - self.last_publish >= PUBLISH_INTERVAL:
            self._publish()
        if self.outcome is not _UNSET and not (self.thread and self.thread.is_alive()):
            outcome = self.outcome
            if outcome == "shutdown" and not self.stop_event.is_set():
                outcome = "normal"
            self.stop(outcome)
            return
        self.poll_delay = min(POLL_MAX, self.poll_delay * 2)
        self.start_timer(self.poll_delay, self._poll, real=True)

    def _drain(self) -> bool:
        seen = False
        while True:
            try:
                kind, value = self.events.get_nowait()
            except queue.Empty:
                return seen
            seen = True
            if kind == "checkpoint":
                self.last_checkpoint = value
                self.has_new_checkpoint = True
                self.stats_dirty = True
            elif kind == "report":
                self.stats.update(value)
                self.stats_dirty = True

    def _publish(self) -> None:
        if not self.stats_dirty or self.scheduler is None:
            return
        self.send(
            self.scheduler,
            Cast(
                JobProgress(
                    self.spec.id, self.myAddress, dict(self.stats), self.last_checkpoint, self.has_new_checkpoint
                )
            ),
        )
        self.stats_dirty = False
        self.has_new_checkpoint = False
        self.last_publish = self.clock.monotonic()
