"""A worker host's dispatcher: claims due jobs in batches and hands them to its pool.

Principle: the store has one writer at a time (SQLite) or conflicts between
hosts (FoundationDB, PostgreSQL), so a host never lets each worker poll.
One actor, the dispatcher, ends every finished attempt and claims the next
jobs for every idle worker in one transaction; renews the lease of every
job it holds in one transaction per interval; and waits on the store (a
pending watch per type, a timer at the next scheduled time), never on a
polling loop.

It knows what each worker does, exactly: a worker writes a record on its
report channel (:mod:`actors.workers.channel`) before each handler call
and after it, and the records outlive the worker; it tells each worker
what to run and what to stop on a pipe of their own, in order
(:mod:`actors.workers.commands`). So a worker that dies
(SIGKILL, OOM, ``os._exit``) fails the attempt of the one run it was in
(retried at once, or failed for good when its attempts are used up), the
runs it ended keep their outcomes, and the runs it never started go to
other workers, their attempt not counted. A run queued behind a handler
that turned out long is taken back and handed to a worker that is free,
so a due job never waits behind another while a worker idles.

It is also the host's lifeline: every type timeout it re-enqueues the
jobs of its types whose lease expired (a host or dispatcher that died
without a node on the store), in one serializable transaction, so of two
hosts doing it at once one does. A restarted dispatcher takes back what
its predecessor in the same host held. A job whose lock is lost
(removed, or re-enqueued elsewhere) is told to stop, and its late outcome
is discarded: nothing is finished twice.

A handler steers its job (:mod:`actors.workers.control`): ``Retry`` sets
the delay, ``Snooze`` puts it back uncounted, ``Cancel`` fails it for
good. A run past its time limit (the job's own, its handler's declared
``timeout``, or the host's ``job_timeout``) sees ``ctx.stopping``; past
the limit and the grace its worker is stopped, and the attempt fails as
``JobTimeout``.

An ``async def`` handler's runs do not hold a worker's handler thread:
each worker awaits up to ``async_concurrency`` of them at once on its
event loop, beside its sync runs. So the dispatcher counts a worker's
async runs apart (its ``async_held``, the started ones in ``inflight``):
it hands a worker async runs while it holds fewer than that, whatever
its sync run does (only a sync run makes a worker "stuck"), claims for
async types that room, and when a worker dies blames each of its started
runs, sync or async, as one attempt. An async run past its time limit and
the grace is cancelled; only if that does not end it its worker is stopped.

Decisions and effects are apart: what to claim for each type, which
buffered job goes to which worker, which worker is stuck, which starts to
write, what a run past its limit gets and how an attempt ends are pure
functions of :mod:`actors.workers.planner` (given each worker's load and
``now``); this actor gathers their inputs and performs their answers.
Its other concepts are its mixins: the pool (:mod:`~actors.workers.pool`),
leases and the lifeline (:mod:`~actors.workers.leases`), the heartbeat
(:mod:`~actors.workers.heartbeat`), retention
(:mod:`~actors.workers.pruning`), cron ticks (:mod:`~actors.workers.ticks`),
a type's wake-ups (:mod:`~actors.workers.wakeups`), the drain
(:mod:`~actors.workers.drain`), an attempt's end
(:mod:`~actors.workers.attempts`).

How it waits. One style: callbacks, run in the actor's one loop, never
blocked on another actor; each source of wake-ups calls them its way:

- calls to the pool's supervisor: ``call_async`` with a callback; a
  sequence of calls (the start-up: find the pool, clear it, start each
  worker) is a chain of small named steps, each answer's callback making
  the next call;
- pacing (renewals, the lifeline, prunes, beats, cron ticks, a type's due
  time, the run watch, retries after a store error, the drain's grace):
  ``start_timer`` callbacks;
- what workers write and their processes' ends: ``watch_fd`` on each
  report channel and pidfd;
- the store's watch thread: it only sets a flag and writes the waker pipe
  (:class:`supervision.waker.Waker`), the one way another thread reaches
  the actor;
- a step: a byte on its own stepper pipe (``_kick``), read in a later turn
  of its loop, so that what the turn that asked for it took in (the
  records of every channel it read, the messages it handled) joins it in
  one transaction. (It was a Thespian message to itself, which opened a
  TCP connection to the actor's own port every time.)

args: ``{"store", "host", "concurrency", "async_concurrency", "types":
{type: {"handler", "max_attempts"}}, "max_attempts", "backoff": [base,
cap], "job_timeout", "grace", "keep_finished", "keep_failed", "pool"}``.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import Any, Optional

import fdblayer
from fdblayer.jobs import activity, hosts, work
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import Down, GenServer
from supervision.addrmap import AddrMap
from supervision.runtime import runtime_dir
from supervision.waker import Waker

from supervision.procs import pid_alive
from supervision.reasons import is_normal

from actors.workers import channel, journal
from actors.workers.control import handler_options
from actors.handlers import is_async, resolve
from actors.workers.protocol import Drain, GetStatus, RunJob, RunJobs, TakeBack
from actors.workers.attempts import AttemptEnds
from actors.workers.drain import Draining
from actors.workers.stepping import Flight, Stepping
from actors.workers.pool import PoolKeeping
from actors.workers.runs import (
    DEFAULT_BACKOFF,
    Running,
    Slot,
    TypeSlot,
    short,
    worker_default,
)
from actors.workers import planner
from actors.workers.planner import prefetch_for, run_mean
from actors.workers.heartbeat import Heartbeat
from actors.workers.leases import HostLeases
from actors.workers.pruning import Pruning, retention_of
from actors.workers.ticks import SCHEDULE_CHECK, PeriodicTicks
from actors.workers.wakeups import TypeWakeups

__all__ = ["Dispatcher"]

log = logging.getLogger("otpjobs.workers")


def _died(reason: Any) -> str:
    """A ``WorkerDied`` error's message. The process's own end (its pidfd:
    ``exited``) and the supervisor's notice (no goodbye: ``killed``) race,
    and neither knows whether a signal, a fault or an exit ended it: both
    read the same, not as a plain exit."""
    if reason in ("exited", "killed"):
        return (
            "the worker process running the job ended before the job did "
            "(killed, crashed or exited: the host's log holds its last lines)"
        )
    return f"the worker running the job stopped before the job ended: {reason!r}"


#: While handlers run, the dispatcher looks at them this often (seconds): a run
#: longer than the planner's STUCK_AFTER (or twice the mean run) holds no queued
#: job (they are taken back for free workers), and a start older than its
#: MARK_AFTER is written to the store (the job shows as running, and its attempt
#: counts if its host dies). The ends read meanwhile are written with them
#: (:meth:`Dispatcher._ends_can_wait`).
WATCH_RUNS = 0.02


class Dispatcher(
    AttemptEnds,
    PoolKeeping,
    HostLeases,
    Pruning,
    Heartbeat,
    PeriodicTicks,
    TypeWakeups,
    Draining,
    Stepping,
    GenServer,
):
    """The dispatcher of one worker host (see the module docstring)."""

    def init(self, args: Any) -> Any:
        self.store = args["store"]
        self.db = fdblayer.open(self.store)
        self.host = args.get("host") or f"{os.uname().nodename}:{os.getpid()}"
        self.host_key = journal.host_key(self.host)
        self.concurrency = int(args["concurrency"])
        self.backoff = tuple(args.get("backoff") or DEFAULT_BACKOFF)
        self.pool_name = args["pool"]
        default_max = int(args.get("max_attempts") or worker_default("max_attempts"))
        self.grace = float(args.get("grace") or worker_default("grace"))
        self.keep = retention_of(args)  # seconds finished and failed jobs are kept, by outcome (None: for ever)
        self.types: dict[Any, TypeSlot] = {}
        for job_type, spec in args["types"].items():
            timeout = activity.get_type_timeout(self.db, DEFAULT_LAYOUT, job_type) or worker_default("type_timeout")
            declared = handler_options(resolve(spec["handler"]))  # imported before the fork: no cost
            self.types[job_type] = TypeSlot(
                spec["handler"],
                int(spec.get("max_attempts") or declared.get("max_attempts") or default_max),
                float(timeout),
                declared.get("timeout") or args.get("job_timeout") or None,
                tuple(declared.get("backoff") or self.backoff),
            )
        for spec_slot in self.types.values():
            spec_slot.is_async = is_async(resolve(spec_slot.handler))
        self.any_async = any(t.is_async for t in self.types.values())
        self.async_limit = max(1, int(args.get("async_concurrency") or worker_default("async_concurrency")))
        self.order = list(self.types)
        self.pool: Any = None
        self.rundir = runtime_dir()
        channel.clear_stale(self.rundir)
        self.slots = AddrMap()  # worker address -> Slot (addresses do not hash)
        self.gone = AddrMap()  # addresses of workers seen dead: never adopted again
        self.slot_count = 0
        self.buffer: collections.deque = collections.deque()  # claimed, waiting for a worker
        self.outcomes: list = []
        self.building: list = []
        self.to_mark: dict = {}  # token -> Running started, its start not yet written
        self.tokens = 0
        self.run_seconds: Optional[float] = None  # a moving average of handler run times (None: not measured)
        self.prefetch = 1  # until measured, one job a worker: assume slow
        self.flush_queued = False
        self.flight: Optional[Flight] = None  # the step whose commit is in flight
        self.watching_runs = False
        self.draining = False
        self.drain_from: Any = None
        self.drain_timer: Optional[int] = None
        self.workers_stopping = 0  # at the end of the grace: workers asked to stop, not yet gone
        self.superseded: dict = {}  # (type, id) -> a run told to stop because its job was claimed again
        self.stats = collections.Counter()
        self.waker = Waker(self, self._watch_fired)
        self.stepper = Waker(self, self._step_due)
        self.renew_interval = planner.renew_interval(s.timeout for s in self.types.values())
        self.renew_timer: Optional[int] = None
        self.renewed_at = time.monotonic()
        self.trimmed_at = float("-inf")  # when claimed jobs were last put back for a shrunk prefetch
        self._start_pool()
        return None

    def _recover(self) -> None:
        """Take back what a predecessor in this host held (its workers are
        stopped before this one's start): never started, the attempt is
        given back; started, it counts."""
        for job_type in self.types:
            ids = work.requeue_held_by(self.db, DEFAULT_LAYOUT, job_type, self.host)
            if ids:
                self.stats["recovered"] += len(ids)
                log.warning(
                    "jobs_recovered host=%s type=%s count=%d jobs=%s",
                    self.host,
                    job_type,
                    len(ids),
                    short(",".join(ids)),
                )

    # ---------------------------------------------------------------- the pool
    def _pool_cleared(self) -> None:
        # The first worker's start is asked for first: its process forks while
        # the store work below runs. Its answer, and with it the first claim,
        # is read only after this method returns.
        ended = journal.collect(self.rundir, self.host_key, pid_alive)  # before this one's workers exist
        self._clear_journals()
        self._resume_drain()
        self._start_workers(self.concurrency)
        self._end_from_journal(ended)  # what the predecessor's handlers did, it had not written
        self._recover()  # only now: no worker of a predecessor still runs a handler
        self.renew_timer = self.start_timer(self.renew_interval, self._renew, real=True)
        self._watch_controls(list(self.types))  # and reads the schedules
        for job_type in self.types:
            self._lifeline(job_type)
        self.start_timer(SCHEDULE_CHECK, self._check_schedules, real=True)
        self._prune()
        self._beat()

    def _clear_journals(self) -> None:
        """Remove the journals of workers that are gone (this host's once
        their ends are written, other hosts' long after), every GONE_AFTER."""
        journal.clear_old(self.rundir, self.host_key, pid_alive)
        self.start_timer(journal.GONE_AFTER, self._clear_journals, real=True)

    def _pool_started(self, started: int) -> None:
        log.info("workers_up host=%s concurrency=%d types=%s", self.host, started, ",".join(map(str, self.order)))

    def _held(self) -> list:
        """Every job handed to a worker and not ended."""
        return [r for _, slot in self.slots.items() for r in slot.runs.values()]

    def _held_ids(self) -> set:
        """The ids of every job this host holds: buffered, handed to a worker,
        or ended with its outcome not yet written (waiting for a step, in the
        step being built or in the one in flight): a retried step must never
        put those back."""
        ended = self.outcomes + self.building + (self.flight.outcomes if self.flight is not None else [])
        return (
            {r.claimed.job.id for r in self.buffer}
            | {r.claimed.job.id for r in self._held()}
            | {o.job.id for o in ended}
        )

    # ---------------------------------------------------------------- messages
    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, Down):
            self._worker_down(msg)
        else:
            super().handle_info(msg)

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, GetStatus):
            return self._status()
        if isinstance(msg, Drain):
            return self._drain(msg, from_)
        return super().handle_call(msg, from_)

    # ---------------------------------------------------------------- what workers report
    def _read_channel(self, slot: Slot) -> None:
        """Take in what a worker wrote on its channel since the last read."""
        ended = released = False
        for record in slot.channel.read():
            if record.kind == channel.START:
                self._run_started(slot, record.token, record.value)
            elif record.kind == channel.END:
                ended = self._run_ended(slot, record.token, *record.value) or ended
            elif record.kind == channel.RELEASED:
                released = True
                self._runs_released(slot, record.value, asked=record.token == 0)
            elif record.kind == channel.HELLO:  # it has both pipes open: their names can go
                self._watch_process(slot, record.token)
                if slot.commands is not None:
                    slot.commands.unlink()
        if ended and self.run_seconds is not None:
            self.prefetch = prefetch_for(self.run_seconds)
            if len(self.buffer) * self.run_seconds >= planner.TRIM_WORK:  # a backlog of slow runs held here
                self._trim_buffer()
        if ended or released:
            self._hand_out(idle_only=not released)  # an idle worker need not wait for the step
            if released or not self._ends_can_wait():
                self._kick()
            self._check_drained()

    def _trim_buffer(self) -> None:
        """Handlers run longer than measured when the jobs were claimed: put
        back the buffered sync jobs beyond what the workers want soon, as
        :func:`planner.to_trim` says, the worst priority and latest claimed
        first. Held here, they would wait for this host's workers while other
        hosts could run them, and a more urgent job added meanwhile would
        wait behind them all."""
        if self.flight is not None or self.draining:
            return  # the next end tries again, with a settled count
        now = time.monotonic()
        excess = planner.to_trim(-self._wants()[False], self.concurrency, self.run_seconds, now - self.trimmed_at)
        if not excess:
            return
        self.trimmed_at = now
        held = [r for r in self.buffer if not r.lost and not self.types[r.claimed.job.type].is_async]
        # the buffer's order is not kept by runs handed back to it: pick by priority, then the latest claimed
        extra = sorted(held, key=lambda r: (r.claimed.priority, r.token))[-excess:]
        tokens = {r.token for r in extra}
        self.buffer = collections.deque(r for r in self.buffer if r.token not in tokens)
        log.info("jobs_released host=%s count=%d reason=prefetch_shrank", self.host, len(extra))
        self._release([r.claimed.job for r in extra])

    def _ends_can_wait(self) -> bool:
        """True when the step after an end may wait for the run watch's next
        look (within WATCH_RUNS): handlers still run here, the host is not
        draining, and no claim is wanted or none is urgent (every worker
        still holds a sync run; no async type is served). Then one step
        writes the ends and refills of about WATCH_RUNS of runs with the
        starts it marks, not one step an end."""
        if not self.watching_runs or self.draining:
            return False
        if not self._claims_wanted():
            return True
        return not self.any_async and all(slot.runs for _, slot in self.slots.items())

    def _claims_wanted(self) -> bool:
        """True when a step now would claim for some type (:func:`planner.claims`)."""
        return bool(planner.claims(self.order, self.types, self._wants()))

    def _run_started(self, slot: Slot, token: int, wall: float) -> None:
        running = slot.runs.get(token)
        if running is None:
            return
        running.started, running.seen = wall, time.monotonic()
        if running.is_async:
            slot.inflight[token] = running
        else:
            slot.current = running
        self.to_mark[token] = running
        if not self.watching_runs:
            self.watching_runs = True
            self.start_timer(WATCH_RUNS, self._watch_runs, real=True)

    def _run_ended(self, slot: Slot, token: int, seconds: float, result: Any, error: Any) -> bool:
        running = slot.runs.pop(token, None)
        if running is None:
            return False
        running.late = False  # ended before its worker was stopped: its outcome counts
        if running.is_async:
            slot.inflight.pop(token, None)
            slot.async_held -= 1
        elif slot.current is running:
            slot.current = None
        self.to_mark.pop(token, None)
        seconds = max(0.0, seconds)
        if not running.is_async:  # an async run holds no handler thread: it says nothing of prefetch
            self.run_seconds = run_mean(self.run_seconds, seconds)
        self._end_attempt(running, error, result, seconds=seconds)
        return True

    def _runs_released(self, slot: Slot, tokens: tuple, asked: bool = True) -> None:
        """A worker gave back runs it had not started (``asked``: as told to;
        else too late to start them): to other workers, or back to the queue
        (uncounted) when the host drains, their type is paused or the job is
        lost."""
        if asked:
            slot.owes_release = max(0, slot.owes_release - 1)
        popped = [r for r in (slot.runs.pop(t, None) for t in tokens) if r is not None]
        slot.async_held -= sum(1 for r in popped if r.is_async)
        back = [r for r in popped if not r.lost]
        for running in back:
            running.worker = None
        held: list = []
        kept: list = []
        for running in back:
            to_queue = self.draining or self.types[running.claimed.job.type].paused
            (held if to_queue else kept).append(running)
        self._release([r.claimed.job for r in held])
        self._back_in_line(kept)

    def _back_in_line(self, runs: list) -> None:
        """Put runs handed back unstarted first in the buffer (they were
        claimed first), the buffer kept in priority order (lower first)."""
        self.buffer.extendleft(reversed(runs))
        if any(r.claimed.priority for r in self.buffer):
            self.buffer = collections.deque(sorted(self.buffer, key=lambda r: r.claimed.priority))

    def _give_back_type(self, job_type: Any) -> None:
        """A paused type starts nothing more here: its claimed jobs go back to
        the queue (uncounted), those queued in workers once they hand them back."""
        self._settle()  # the step in flight first (see actors.workers.stepping)
        mine = [r for r in self.buffer if r.claimed.job.type == job_type]
        self.buffer = collections.deque(r for r in self.buffer if r.claimed.job.type != job_type)
        self._release([r.claimed.job for r in mine if not r.lost])
        for _, slot in self.slots.items():
            queued = [r for r in slot.runs.values() if r.started is None and r.claimed.job.type == job_type]
            if queued and not slot.owes_release:
                slot.owes_release += 1
                self._tell(slot, TakeBack())

    def _watch_runs(self) -> None:
        """Every WATCH_RUNS while handlers run: hold runs to their time
        limits, take queued runs back from workers whose handler runs long,
        write starts that are not brief (the planner's :func:`~planner.watch`)."""
        plan = planner.watch(
            [slot.load() for _, slot in self.slots.items()],
            (r.seen for r in self.to_mark.values()),
            time.monotonic(),
            self.run_seconds,
            self.draining,
        )
        take_back = dict(plan.take_back)
        for _, slot in self.slots.items():
            for running in ([slot.current] if slot.current else []) + list(slot.inflight.values()):
                self._check_limit(slot, running)
            queued = take_back.get(slot.n)
            if queued:
                slot.owes_release += 1
                self.stats["taken_back"] += queued
                self._tell(slot, TakeBack())
        if plan.write_starts or self.outcomes or self._claims_wanted():
            self._kick()
        self.watching_runs = plan.busy
        if plan.busy:
            self.start_timer(WATCH_RUNS, self._watch_runs, real=True)

    def _worker_down(self, down: Down) -> None:
        slot = self.slots.get(down.addr)
        if slot is None:
            return
        self.slots.pop(down.addr)  # first: nothing is handed to it while its records are read
        self.unwatch_fd(slot.channel.fd)
        if slot.pidfd is not None:
            self.unwatch_fd(slot.pidfd)
            os.close(slot.pidfd)
            slot.pidfd = None
        self._read_channel(slot)  # everything it wrote before it died
        slot.channel.close()
        if slot.commands is not None:
            slot.commands.close()
        # the sync one, the async ones; a run late at a drain's end goes back with the others (_give_back_late)
        started = [r for r in slot.runs.values() if r.started is not None and not r.late]
        unstarted = [r for r in slot.runs.values() if r.started is None and not r.lost and not r.late]
        if slot.killing:  # this host killed it for a run past its limit: the others are bystanders
            bystanders = [r for r in started if not r.killing and not r.timed_out and not r.lost]
            started = [r for r in started if r not in bystanders]
            self._give_back_bystanders(bystanders)
        for r in unstarted:
            r.worker = None
        if unstarted:  # queued in the dead worker, never started: to another worker, uncounted
            if self.draining:
                self._release([r.claimed.job for r in unstarted])
            else:
                self._back_in_line(unstarted)
        for running in started:  # each its own attempt
            self.to_mark.pop(running.token, None)
            log.warning(
                "worker_died host=%s type=%s job=%s attempt=%d reason=%r",
                self.host,
                running.claimed.job.type,
                running.claimed.job.id,
                running.claimed.attempt,
                down.reason,
            )
            error = {
                "type": "WorkerDied",
                "message": _died(down.reason),
                "traceback": "",
            }  # (JobTimeout when the dispatcher stopped it past its time limit)
            self._end_attempt(running, error, None, retry_now=True)
        self._kick()
        if not self.draining:
            self._find_replacements(40)
        self._check_drained()

    # ---------------------------------------------------------------- the step (see actors.workers.stepping)
    def _limits(self) -> planner.Limits:
        return planner.Limits(self.concurrency, self.prefetch, self.async_limit, self.run_seconds, self.any_async)

    def _starts_due(self) -> list:
        """Starts to write in this step, taken off ``to_mark``: those older
        than MARK_AFTER (a brief run's start is written with its end)."""
        marks = ((token, r.seen, r.lost) for token, r in self.to_mark.items())
        return [self.to_mark.pop(token) for token in planner.starts_due(marks, time.monotonic())]

    def _claimed(self, job_type: Any, limit: int, result: work.ClaimResult, now: float) -> None:
        slot = self.types[job_type]
        rechecking, slot.rechecking = slot.rechecking, False
        self._pause_seen(job_type, result.paused)
        if result.paused:
            slot.maybe_work = False
            self._arm_watch(job_type, slot, result.watch)  # a resume bumps it
            return
        if result.claimed:
            self._supersede(job_type, {c.job.id for c in result.claimed})
            if rechecking:
                log.info("jobs_found_without_wakeup host=%s type=%s count=%d", self.host, job_type, len(result.claimed))
        for claimed in result.claimed:
            self.tokens += 1
            self.buffer.append(Running(claimed, self.tokens))
        if any(c.priority for c in result.claimed):  # lower first; stable: claim order within a priority
            self.buffer = collections.deque(sorted(self.buffer, key=lambda r: r.claimed.priority))
        for job_id in result.exhausted:
            self.stats["failed"] += 1
            log.error(
                "job_failed host=%s type=%s job=%s reason=attempts_used_up_by_dead_workers", self.host, job_type, job_id
            )
        if result.watch is None:
            slot.maybe_work = True
            return
        slot.maybe_work = False
        self._arm_watch(job_type, slot, result.watch)
        if result.next_due is not None:
            self._arm_due(job_type, slot, result.next_due, now)

    def _hand_out(self, idle_only: bool = False) -> None:
        """Give buffered jobs to workers as :func:`planner.hand_out` says, one
        message per worker: the least loaded that are low (or, with
        ``idle_only``, empty) and not stuck for sync jobs, those with async
        room for async jobs. Lost jobs it passes over leave the buffer. A job
        whose superseded run still runs here waits: one host never runs two
        runs of a job at once."""
        if not self.buffer or self.draining:
            return
        if time.monotonic() - self.renewed_at > 2 * self.renew_interval:
            self._renew_now()  # overdue (the host was frozen, or busy): lost jobs out of the buffer first
            if not self.buffer:
                return
        if self.superseded:  # forget the superseded runs that have ended
            live = {r.token for r in self._held()}
            self.superseded = {key: r for key, r in self.superseded.items() if r.token in live}
        ending = self.superseded
        waiting = [r for r in self.buffer if (r.claimed.job.type, r.claimed.job.id) in ending] if ending else []
        if waiting:
            self.buffer = collections.deque(r for r in self.buffer if r not in waiting)
            try:
                self._hand_out_buffer(idle_only)
            finally:
                self.buffer.extendleft(reversed(waiting))
            return
        self._hand_out_buffer(idle_only)

    def _hand_out_buffer(self, idle_only: bool) -> None:
        """:meth:`_hand_out` of what the buffer holds."""
        if not self.buffer:
            return
        slots = {slot.n: slot for _, slot in self.slots.items() if not slot.killing}
        plan = planner.hand_out(
            (None if r.lost else self.types[r.claimed.job.type].is_async for r in self.buffer),
            [slot.load() for slot in slots.values()],
            self._limits(),
            time.monotonic(),
            idle_only,
        )
        taken = [self.buffer.popleft() for _ in range(plan.taken)]
        self.buffer.extendleft(taken[position] for position in reversed(plan.kept))
        batches: dict = {}
        now = time.time()
        for position, n in plan.to:
            running, slot = taken[position], slots[n]
            c = running.claimed
            spec = self.types[c.job.type]
            kind = spec.is_async
            running.worker, running.is_async = slot.addr, kind
            slot.runs[running.token] = running
            if kind:
                slot.async_held += 1
            start_by = now + (spec.lease_timeout or spec.timeout) / 2  # its lease holds that long unrenewed
            batches.setdefault(n, (slot, []))[1].append(
                RunJob(running.token, c.job, c.data, c.attempt, c.max_attempts, spec.handler, kind, start_by)
            )
        for slot, runs in batches.values():
            self.stats["run_msgs"] += 1
            self._tell(slot, RunJobs(tuple(runs), self.store, str(slot.channel.path), self.async_limit))

    def terminate(self, reason: Any) -> None:
        self._settle()  # the step in flight first (see actors.workers.stepping)
        self._complete_now("stop")
        try:
            hosts.forget(self.db, DEFAULT_LAYOUT, self.host)  # a clean stop: no stale beat left behind
        except Exception as exc:  # noqa: BLE001 - readers age it out anyway
            log.warning("forget_failed host=%s error=%r", self.host, exc)
        for _, slot in self.slots.items():  # the pool need not tell a gone dispatcher of its workers' ends
            self.demonitor(slot.ref)
            self.unwatch_fd(slot.channel.fd)
            slot.channel.close()
            if slot.commands is not None:
                slot.commands.close()
        for slot in self.types.values():
            for watch in (slot.watch, *slot.control_watches):
                if watch is not None:
                    watch.cancel()
        if self.draining and is_normal(reason):  # the host stops, every end written: no successor will read them
            journal.remove_host(self.rundir, self.host_key)
        self.waker.close()
        self.stepper.close()
