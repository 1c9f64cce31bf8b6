"""A worker host's dispatcher: claims due jobs in batches and hands them to its pool.

Principle: the store has one writer at a time (SQLite) or conflicts between
hosts (FoundationDB), so a host never lets each worker poll. One actor, the
dispatcher, ends every finished attempt and claims the next jobs for every
idle worker in one transaction; renews the lease of every job it holds in
one transaction per interval; and waits on the store (a pending watch per
type, a timer at the next scheduled time), never on a polling loop.

It monitors its workers: a worker that dies holding a job (SIGKILL, OOM,
an exception escaping the runner) is restarted by the pool's supervisor,
and its job is ended at once as a failed attempt (retried after a backoff
or failed for good), not after the type's activity timeout. A job whose
lock is lost (removed, or re-enqueued elsewhere) is told to stop, and its
late outcome is discarded: nothing is finished twice.

args: ``{"store", "host", "concurrency", "types": {type: {"handler",
"max_attempts"}}, "max_attempts", "backoff": [base, cap], "pool"}``.
"""
from __future__ import annotations

import collections
import heapq
import logging
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import fdblayer
from fdblayer.interface import Transaction, transactional
from fdblayer.jobs import activity, hosts, work
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import NOREPLY, Down, GenServer, Request
from supervision.messages import WhereIs
from supervision.supervisor import StartChild, TerminateChild, WhichChildren
from supervision.addrmap import AddrMap
from supervision.waker import Waker

from actors.workers.protocol import Drain, GetStatus, JobsDone, Release, Released, RunJob, RunJobs, StopJob
from actors.workers.schedule import next_tick, previous_tick

__all__ = ["Dispatcher", "retry_delay"]

log = logging.getLogger("otpjobs.workers")

#: Seconds between reads of the types' periodic schedules.
SCHEDULE_CHECK = 10.0
#: Longest and shortest pause between two lease renewals.
MAX_RENEW_INTERVAL = 5.0
MIN_RENEW_INTERVAL = 0.05
CALL_TIMEOUT = 10.0
#: Jobs a worker holds at most: one running, the rest next in its own queue, so that
#: a job's end and the next start need no message. How many it holds follows the
#: handlers' measured run time: enough for about PREFETCH_SECONDS of work, so quick
#: jobs go in batches and a long job never holds others back (then it is 1).
MAX_PREFETCH = 128
PREFETCH_SECONDS = 0.1
#: Handlers that run this long (seconds, moving mean) get one job per worker at a time.
LONG_RUN = 0.5
#: Seconds before a step that failed on a store error runs again.
STEP_RETRY = 0.5


def prefetch_for(run_seconds: float) -> int:
    """Jobs a worker holds, for handlers that take ``run_seconds`` (a moving
    mean): about :data:`PREFETCH_SECONDS` of work, at least two (one runs,
    the next waits in the worker, so the worker never waits for a message)
    unless jobs are long (:data:`LONG_RUN`), then one (a long job never
    waits behind another in one worker while others could take it)."""
    if run_seconds >= LONG_RUN:
        return 1
    return max(2, min(MAX_PREFETCH, int(PREFETCH_SECONDS / max(run_seconds, 1e-6))))


def retry_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number ``attempt`` (1 after the first failure):
    ``base * 2**(attempt-1)``, at most ``cap``, times a jitter in [0.5, 1)."""
    exp = min(cap, base * (2 ** min(attempt - 1, 60)))
    return exp * (0.5 + (rng or random).random() / 2)


@dataclass
class Running:
    """A job handed to a worker (or waiting for one, ``worker`` None)."""

    claimed: work.Claimed
    token: int
    worker: Any = None
    started: float = 0.0
    lost: bool = False


@dataclass
class TypeSlot:
    """What the dispatcher knows of one served type."""

    handler: str
    max_attempts: int
    timeout: float = 30.0
    maybe_work: bool = True
    watch: Any = None
    due_at: Optional[float] = None
    due_timer: Optional[int] = None
    schedule: Optional[str] = None
    tick_timer: Optional[int] = None
    tick_at: Optional[float] = None
    fired: bool = field(default=False)


@transactional
def _step(tr: Transaction, outcomes: list, claims: list, now: float, worker: str) -> tuple[list, list]:
    """End ``outcomes`` and claim for ``claims`` = ``[(type, limit, default_max)]``,
    one transaction. Returns ``(lost jobs, [ClaimResult per claim])``."""
    lost = work.complete(tr, DEFAULT_LAYOUT, outcomes, now) if outcomes else []
    results = [work.claim(tr, DEFAULT_LAYOUT, t, now, limit, worker, default_max)
               for t, limit, default_max in claims]
    return lost, results


class Dispatcher(GenServer):
    """The dispatcher of one worker host (see the module docstring)."""

    def init(self, args: Any) -> Any:
        self.store = args["store"]
        self.db = fdblayer.open(self.store)
        self.host = args.get("host") or f"{os.uname().nodename}:{os.getpid()}"
        self.concurrency = int(args["concurrency"])
        self.backoff = tuple(args.get("backoff") or (1.0, 3600.0))
        self.pool_name = args["pool"]
        default_max = int(args.get("max_attempts") or 3)
        self.types: dict[Any, TypeSlot] = {}
        for job_type, spec in args["types"].items():
            timeout = activity.get_type_timeout(self.db, DEFAULT_LAYOUT, job_type) or 30.0
            self.types[job_type] = TypeSlot(spec["handler"], int(spec.get("max_attempts") or default_max),
                                            float(timeout))
        self.order = list(self.types)
        self.pool: Any = None
        self.workers = AddrMap()  # worker address -> monitor ref (addresses do not hash)
        self.inflight = AddrMap()  # worker address -> its Running jobs, in the order it runs them
        self.buffer: collections.deque = collections.deque()  # claimed, waiting for a worker
        self.outcomes: list = []
        self.tokens = 0
        self.run_seconds: Optional[float] = None  # a moving average of handler run times (None: not measured)
        self.prefetch = 1  # until measured, one job a worker: assume slow
        self.flush_queued = False
        self.draining = False
        self.drain_from: Any = None
        self.drain_timer: Optional[int] = None
        self.stats = collections.Counter()
        self.waker = Waker(self, self._watch_fired)
        self.renew_interval = max(MIN_RENEW_INTERVAL,
                                  min([MAX_RENEW_INTERVAL] + [s.timeout / 4 for s in self.types.values()]))
        self.run_task(self._start_pool(), self._pool_started)
        return None

    # ---------------------------------------------------------------- the pool
    def _start_pool(self):
        """Find the pool, clear what a previous dispatcher left there, start the workers."""
        pool = yield Request(self.node, WhereIs(self.pool_name))
        if pool is None:
            raise RuntimeError(f"worker pool {self.pool_name!r} is not running")
        self.pool = pool
        for child in (yield Request(pool, WhichChildren(), CALL_TIMEOUT)):
            if child.addr is not None:
                yield Request(pool, TerminateChild(child.addr), CALL_TIMEOUT)
        self.start_timer(self.renew_interval, self._renew, real=True)
        self._check_schedules()
        self._beat()
        for _ in range(self.concurrency):  # each worker gets jobs as soon as it is up, not once all are
            self._adopt((yield Request(pool, StartChild(None), CALL_TIMEOUT)))
            self._kick()
        return len(self.workers)

    def _pool_started(self, started: int) -> None:
        log.info("workers_up host=%s concurrency=%d types=%s", self.host, started, ",".join(map(str, self.order)))

    def _running(self) -> list:
        return [running for _, runs in self.inflight.items() for running in runs]

    def _adopt(self, addr: Any) -> None:
        if addr is None or addr in self.workers:
            return
        self.workers[addr] = self.monitor(addr)
        self.inflight[addr] = []

    def _find_replacements(self, tries: int) -> None:
        """Adopt the workers the pool restarted (it does so within milliseconds)."""
        def listed(children: Any, error: Exception | None) -> None:
            if error is None:
                for child in children:
                    self._adopt(child.addr)
            if len(self.workers) < self.concurrency and tries > 0:
                self.start_timer(0.05, lambda: self._find_replacements(tries - 1), real=True)
            self._hand_out()
        self.call_async(self.pool, WhichChildren(), listed, CALL_TIMEOUT)

    # ---------------------------------------------------------------- messages
    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, JobsDone):
            self._jobs_done(msg)
        elif isinstance(msg, Released):
            self._released(msg)
        elif isinstance(msg, Down):
            self._worker_down(msg)
        elif isinstance(msg, _Flush):
            self.flush_queued = False
            self._flush()
        else:
            super().handle_info(msg)

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, GetStatus):
            return self._status()
        if isinstance(msg, Drain):
            return self._drain(msg, from_)
        return super().handle_call(msg, from_)

    def _jobs_done(self, msg: JobsDone) -> None:
        runs = self.inflight.get(msg.worker)
        if runs is None:
            return
        self.stats["done_msgs"] += 1
        by_token = {r.token: r for r in runs}
        for done in msg.done:
            running = by_token.pop(done.token, None)
            if running is not None:
                seconds = max(0.0, done.seconds)
                self.run_seconds = seconds if self.run_seconds is None else 0.8 * self.run_seconds + 0.2 * seconds
                self._end_attempt(running, done.error, done.result, seconds=done.seconds)
        if self.run_seconds is not None:
            self.prefetch = prefetch_for(self.run_seconds)
        self.inflight[msg.worker] = [r for r in runs if r.token in by_token]
        self._hand_out(idle_only=True)  # an idle worker need not wait for the step; others get it whole
        self._kick()
        self._check_drained()

    def _released(self, msg: Released) -> None:
        """A worker gave back jobs it had not started (a drain): back to the queue, uncounted."""
        runs = self.inflight.get(msg.worker) or []
        dropped = set(msg.tokens)
        back = [r for r in runs if r.token in dropped and not r.lost]
        self.inflight[msg.worker] = [r for r in runs if r.token not in dropped]
        if back:
            self.stats["released"] += work.release(self.db, DEFAULT_LAYOUT, [r.claimed.job for r in back])
        self._check_drained()

    def _worker_down(self, down: Down) -> None:
        if self.workers.pop(down.addr, None) is None:
            return
        runs = self.inflight.pop(down.addr, None) or []
        unstarted = [r for r in runs[1:] if not r.lost]
        if unstarted:  # queued in the dead worker, never started: back in the queue, uncounted
            self.stats["released"] += work.release(self.db, DEFAULT_LAYOUT, [r.claimed.job for r in unstarted])
        running = runs[0] if runs else None
        if running is not None:
            log.warning("worker_died host=%s type=%s job=%s attempt=%d reason=%r", self.host,
                        running.claimed.job.type, running.claimed.job.id, running.claimed.attempt, down.reason)
            error = {"type": "WorkerDied", "message": f"the worker running the job exited: {down.reason!r}",
                     "traceback": ""}
            self._end_attempt(running, error, None, retry_now=True)
            self._kick()
        if not self.draining:
            self._find_replacements(40)
        self._check_drained()

    def _end_attempt(self, running: Running, error: Optional[dict], result: Optional[bytes],
                     retry_now: bool = False, seconds: float = -1.0) -> None:
        claimed = running.claimed
        job = claimed.job
        if running.lost:
            log.info("job_outcome_discarded host=%s type=%s job=%s reason=lock_lost", self.host, job.type, job.id)
            return
        if error is None:
            self.stats["succeeded"] += 1
            self.outcomes.append(work.Outcome(job, "ok", result, seconds=seconds))
            return
        if claimed.attempt < claimed.max_attempts:
            delay = 0.0 if retry_now else retry_delay(claimed.attempt, *self.backoff)
            retry_at = math.ceil(time.time() + delay) if delay > 0 else 0
            self.stats["retried"] += 1
            log.warning("job_retry host=%s type=%s job=%s attempt=%d/%d in=%.1fs error=%s: %s", self.host,
                        job.type, job.id, claimed.attempt, claimed.max_attempts, delay, error.get("type"),
                        _short(error.get("message")))
            self.outcomes.append(work.Outcome(job, "retry", None, error, retry_at, seconds))
            return
        self.stats["failed"] += 1
        log.error("job_failed host=%s type=%s job=%s attempts=%d error=%s: %s", self.host, job.type, job.id,
                  claimed.attempt, error.get("type"), _short(error.get("message")))
        self.outcomes.append(work.Outcome(job, "fail", None, error, seconds=seconds))

    # ---------------------------------------------------------------- the step
    def _kick(self) -> None:
        """Ask for one step, after the messages already queued (their outcomes join it)."""
        if not self.flush_queued:
            self.flush_queued = True
            self.send(self.myAddress, _Flush())

    def _want(self) -> int:
        if self.draining or self.pool is None:
            return 0
        below = self._refill_below()
        room = sum(self.prefetch - len(runs) for _, runs in self.inflight.items() if len(runs) <= below)
        return room + self.concurrency - len(self.buffer)

    def _flush(self) -> None:
        want = self._want()
        claims = []
        if want > 0:
            for job_type in self.order:
                slot = self.types[job_type]
                if slot.maybe_work:
                    claims.append((job_type, want, slot.max_attempts))
        if not claims and not self.outcomes:
            return
        outcomes, self.outcomes = self.outcomes, []
        now = time.time()
        try:
            t0 = time.perf_counter()
            lost, results = _step(self.db, outcomes, claims, now, self.host)
            self.stats["steps"] += 1
            self.stats["step_ms"] += (time.perf_counter() - t0) * 1000
        except Exception as exc:  # noqa: BLE001 - a store error (disk full, busy) delays the step
            self.outcomes = outcomes + self.outcomes  # nothing was written: try again shortly
            log.warning("step_failed host=%s error=%r (retrying in %.1fs)", self.host, exc, STEP_RETRY)
            self.start_timer(STEP_RETRY, self._kick, real=True)
            return
        for job in lost:
            log.info("job_outcome_discarded host=%s type=%s job=%s reason=lock_lost", self.host, job.type, job.id)
        for (job_type, limit, _), result in zip(claims, results):
            self._claimed(job_type, limit, result, now)
        self.order = self.order[1:] + self.order[:1]  # the next step asks another type first
        self._hand_out()
        if self.outcomes or (self._want() > 0 and any(s.maybe_work for s in self.types.values())):
            self._kick()

    def _claimed(self, job_type: Any, limit: int, result: work.ClaimResult, now: float) -> None:
        slot = self.types[job_type]
        for claimed in result.claimed:
            self.tokens += 1
            self.buffer.append(Running(claimed, self.tokens))
        for job_id in result.exhausted:
            self.stats["failed"] += 1
            log.error("job_failed host=%s type=%s job=%s reason=attempts_used_up_by_dead_workers",
                      self.host, job_type, job_id)
        if result.watch is None:
            slot.maybe_work = True
            return
        slot.maybe_work = False
        self._arm_watch(job_type, slot, result.watch)
        if result.next_due is not None:
            self._arm_due(job_type, slot, result.next_due, now)

    def _arm_watch(self, job_type: Any, slot: TypeSlot, watch: Any) -> None:
        if slot.watch is not None:
            slot.watch.cancel()
        slot.watch = watch

        def fired(_w: Any, job_type: Any = job_type) -> None:  # the store's watch thread
            self.types[job_type].fired = True
            self.waker.wake()
        watch.on_ready(fired)

    def _watch_fired(self) -> None:
        for slot in self.types.values():
            if slot.fired:
                slot.fired = False
                slot.maybe_work = True
        if self.flush_queued or self.outcomes:
            self._kick()  # a step is on its way, or outcomes wait for the messages queued behind them
        else:
            self._flush()  # new work on an idle host: claim it now, not one message later

    def _arm_due(self, job_type: Any, slot: TypeSlot, due: int, now: float) -> None:
        if slot.due_at is not None and slot.due_at <= due:
            return
        if slot.due_timer is not None:
            self.cancel_timer(slot.due_timer)
        slot.due_at = due

        def on_due(slot: TypeSlot = slot) -> None:
            slot.due_at = slot.due_timer = None
            slot.maybe_work = True
            self._kick()
        slot.due_timer = self.start_timer(max(0.0, due - time.time()) + 0.001, on_due, real=True)

    def _refill_below(self) -> int:
        """A worker holding more than this many jobs gets none until it has
        run some: refills come half a prefetch at a time, in one message."""
        return self.prefetch // 2

    def _hand_out(self, idle_only: bool = False) -> None:
        """Give buffered jobs to the least loaded workers that are low (or,
        with ``idle_only``, empty), one message per worker."""
        if not self.buffer or self.draining:
            return
        below = 0 if idle_only else self._refill_below()
        heap = [(len(runs), n, addr) for n, (addr, runs) in enumerate(self.inflight.items()) if len(runs) <= below]
        heapq.heapify(heap)
        batches: dict = {}
        now = time.time()
        while self.buffer and heap and heap[0][0] < self.prefetch:
            load, n, addr = heapq.heappop(heap)
            running = self.buffer.popleft()
            running.worker, running.started = addr, now
            self.inflight[addr].append(running)
            c = running.claimed
            batches.setdefault(n, (addr, []))[1].append(
                RunJob(running.token, c.job, c.data, c.attempt, c.max_attempts, self.types[c.job.type].handler))
            heapq.heappush(heap, (load + 1, n, addr))
        for addr, runs in batches.values():
            self.stats["run_msgs"] += 1
            self.send(addr, RunJobs(tuple(runs), self.store, self.myAddress))

    # ---------------------------------------------------------------- leases
    def _renew(self) -> None:
        held = self._running() + list(self.buffer)
        held = [r for r in held if not r.lost]
        if held:
            lost = {(j.type, j.id, j.lock) for j in work.renew(self.db, DEFAULT_LAYOUT, [r.claimed.job for r in held])}
            for running in held:
                j = running.claimed.job
                if (j.type, j.id, j.lock) in lost:
                    running.lost = True
                    log.info("job_lost host=%s type=%s job=%s (removed or re-enqueued)", self.host, j.type, j.id)
                    if running.worker is not None:
                        self.send(running.worker, StopJob(running.token))
            self.buffer = collections.deque(r for r in self.buffer if not r.lost)
        self.start_timer(self.renew_interval, self._renew, real=True)

    # ---------------------------------------------------------------- heartbeat
    def _beat(self) -> None:
        """Publish this host's status in the store (``GET /_workers``)."""
        if not self.draining:
            try:
                hosts.beat(self.db, DEFAULT_LAYOUT, self.host, self._status(), time.time())
            except Exception as exc:  # noqa: BLE001 - a store hiccup skips a beat, never stops the host
                log.warning("beat_failed host=%s error=%r", self.host, exc)
            self.start_timer(hosts.BEAT, self._beat, real=True)

    # ---------------------------------------------------------------- periodic jobs
    def _check_schedules(self) -> None:
        try:
            schedules = work.get_schedules(self.db, DEFAULT_LAYOUT)
        except Exception as exc:  # noqa: BLE001 - a store hiccup delays ticks, never stops the host
            log.warning("schedules_unreadable host=%s error=%r", self.host, exc)
            schedules = {}
        now = time.time()
        for job_type, slot in self.types.items():
            schedule = schedules.get(job_type)
            cron = schedule.cron if schedule is not None else None
            if cron != slot.schedule and slot.tick_timer is not None:
                self.cancel_timer(slot.tick_timer)
                slot.tick_timer = slot.tick_at = None
            slot.schedule = cron
            if cron is None:
                continue
            missed = previous_tick(cron, now)
            if missed is not None and (schedule.last is None or schedule.last < missed):
                self._fire(job_type, missed)
            if slot.tick_timer is None:
                self._arm_tick(job_type, slot, now)
        self.start_timer(SCHEDULE_CHECK, self._check_schedules, real=True)

    def _arm_tick(self, job_type: Any, slot: TypeSlot, now: float) -> None:
        tick = next_tick(slot.schedule, now)
        if tick is None:
            return
        slot.tick_at = tick

        def on_tick(job_type: Any = job_type, slot: TypeSlot = slot, tick: int = tick) -> None:
            slot.tick_timer = slot.tick_at = None
            if slot.schedule is not None:
                self._fire(job_type, tick)
                self._arm_tick(job_type, slot, max(time.time(), tick))
        slot.tick_timer = self.start_timer(max(0.0, tick - now) + 0.001, on_tick, real=True)

    def _fire(self, job_type: Any, tick: int) -> None:
        job_id = f"tick-{tick}"
        try:
            added = work.fire_tick(self.db, DEFAULT_LAYOUT, job_type, tick, job_id)
        except Exception as exc:  # noqa: BLE001 - a store hiccup skips a tick, never stops the host
            log.warning("tick_failed host=%s type=%s tick=%d error=%r", self.host, job_type, tick, exc)
            return
        if added:
            log.info("tick_enqueued host=%s type=%s job=%s", self.host, job_type, job_id)

    # ---------------------------------------------------------------- shutdown
    def _drain(self, msg: Drain, from_: Any) -> Any:
        self.draining = True
        waiting = [r.claimed.job for r in self.buffer]
        self.buffer.clear()
        released = work.release(self.db, DEFAULT_LAYOUT, waiting) if waiting else 0
        for addr, runs in self.inflight.items():
            if runs:
                self.send(addr, Release())
        log.info("workers_draining host=%s held=%d released=%d grace=%.1fs", self.host, len(self._running()),
                 released, msg.grace)
        self.stats["released"] += released
        self.drain_from = from_
        if not self._running():
            self._drained()
            return NOREPLY
        self.drain_timer = self.start_timer(max(0.0, msg.grace), self._grace_over, real=True)
        return NOREPLY

    def _grace_over(self) -> None:
        self.drain_timer = None
        late = [r for r in self._running() if not r.lost]
        released = work.release(self.db, DEFAULT_LAYOUT, [r.claimed.job for r in late]) if late else 0
        for running in late:
            log.warning("job_released host=%s type=%s job=%s reason=grace_over", self.host,
                        running.claimed.job.type, running.claimed.job.id)
            running.lost = True
        self.stats["released"] += released
        for addr, _ in self.inflight.items():
            self.inflight[addr] = []
        self._drained()

    def _check_drained(self) -> None:
        if self.drain_from is not None and not self._running():
            self._drained()

    def _drained(self) -> None:
        if self.drain_from is None:
            return
        if self.outcomes:
            outcomes, self.outcomes = self.outcomes, []
            lost = work.complete(self.db, DEFAULT_LAYOUT, outcomes, time.time())
            for job in lost:
                log.info("job_outcome_discarded host=%s type=%s job=%s reason=lock_lost", self.host, job.type,
                         job.id)
        if self.drain_timer is not None:
            self.cancel_timer(self.drain_timer)
            self.drain_timer = None
        self.reply(self.drain_from, {"finished": self.stats["succeeded"] + self.stats["failed"],
                                     **self.stats})
        self.drain_from = None

    def terminate(self, reason: Any) -> None:
        try:
            hosts.forget(self.db, DEFAULT_LAYOUT, self.host)  # a clean stop: no stale beat left behind
        except Exception as exc:  # noqa: BLE001 - readers age it out anyway
            log.warning("forget_failed host=%s error=%r", self.host, exc)
        for _, ref in self.workers.items():  # the pool need not tell a gone dispatcher of its workers' ends
            self.demonitor(ref)
        for slot in self.types.values():
            if slot.watch is not None:
                slot.watch.cancel()
        self.waker.close()

    # ---------------------------------------------------------------- status
    def _status(self) -> dict:
        now = time.time()
        return {
            "host": self.host, "pid": os.getpid(), "concurrency": self.concurrency,
            "types": [str(t) for t in self.order], "workers": len(self.workers),
            "busy": sum(1 for _, runs in self.inflight.items() if runs),
            "buffered": len(self.buffer), "draining": self.draining, "counts": dict(self.stats),
            "running": [{"type": r.claimed.job.type, "id": r.claimed.job.id, "attempt": r.claimed.attempt,
                         "for": round(now - r.started, 3)} for _, runs in self.inflight.items() for r in runs[:1]],
        }

    def format_status(self) -> dict:
        return {"host": self.host, "held": len(self._running()), "buffered": len(self.buffer)}


@dataclass(frozen=True)
class _Flush:
    """The dispatcher's message to itself: run one step."""


def _short(text: Any, limit: int = 200) -> str:
    text = str(text).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
