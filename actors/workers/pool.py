"""A worker host's pool as its dispatcher keeps it: adopting workers, seeing them die, time limits.

Principle: the dispatcher adopts every worker the pool starts (a report
channel each, :mod:`actors.workers.channel`, and a command pipe,
:mod:`actors.workers.commands`) and sees each one die twice
over: by the supervisor's notice and by a pidfd of its process, since
Thespian's notice can be lost on a loaded machine and a death unseen would
hold its jobs for ever. A run past its time limit is told to stop; past
the grace too, its worker is stopped and replaced. A mixin of the
dispatcher, whose state it reads.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional

from supervision import Down
from supervision.messages import WhereIs
from supervision.supervisor import StartChild, TerminateChild, WhichChildren

from actors.workers.channel import Channel
from actors.workers.commands import CommandPipe
from actors.workers.protocol import StopJob, UsePipe
from actors.workers.state import DispatcherState
from actors.workers.planner import LimitAction, limit_action
from actors.workers.runs import CALL_TIMEOUT, Running, Slot

__all__ = ["PoolKeeping"]

log = logging.getLogger("otpjobs.workers")


class PoolKeeping(DispatcherState):
    """Workers adopted, watched and replaced; runs held to their time limits."""

    def _start_pool(self) -> None:
        """Find the pool, clear what a previous dispatcher left there, start
        the workers: one call after another, each answer's callback making
        the next (a failed call crashes this actor: its supervisor restarts it)."""
        self.call_async(self.node, WhereIs(self.pool_name), self._pool_found, CALL_TIMEOUT)

    def _pool_found(self, pool: Any, error: Exception | None) -> None:
        if error is not None:
            raise error
        if pool is None:
            raise RuntimeError(f"worker pool {self.pool_name!r} is not running")
        self.pool = pool
        self.call_async(pool, WhichChildren(), self._pool_listed, CALL_TIMEOUT)

    def _pool_listed(self, children: Any, error: Exception | None) -> None:
        if error is not None:
            raise error
        self._clear_pool([child.addr for child in children if child.addr is not None])

    def _clear_pool(self, left: list) -> None:
        """Stop a predecessor's workers one by one, then start this host's."""
        if not left:
            self._pool_cleared()
            return

        def stopped(_result: Any, error: Exception | None) -> None:
            if error is not None:
                raise error
            self._clear_pool(left[1:])

        self.call_async(self.pool, TerminateChild(left[0]), stopped, CALL_TIMEOUT)

    def _start_workers(self, left: int) -> None:
        """Start the workers one by one; each gets jobs as soon as it is up, not once all are."""
        if not left:
            self._pool_started(len(self.slots))
            return

        def started(addr: Any, error: Exception | None) -> None:
            if error is not None:
                raise error
            self._adopt(addr)
            self._start_workers(left - 1)

        self.call_async(self.pool, StartChild(None), started, CALL_TIMEOUT)

    def _adopt(self, addr: Any) -> None:
        """Take in a worker the pool started (once): watch its channel, hand
        it the buffered jobs no worker had room for, and ask for a step (the
        host has room to claim for)."""
        if addr is None or addr in self.slots:
            return
        self.slot_count += 1
        n = self.slot_count
        commands = CommandPipe(self.rundir, f"cmd{n}")
        slot = Slot(addr, self.monitor(addr), Channel(self.rundir, str(n)), n, commands=commands)
        self.slots[addr] = slot
        self.watch_fd(slot.channel.fd, lambda: self._read_channel(slot))
        # the one message: every command goes on the pipe
        self.send(addr, UsePipe(str(commands.path), str(self.rundir), self.host_key))
        self._hand_out()
        self._kick()

    def _tell(self, slot: Slot, msg: Any) -> None:
        """Send the worker of ``slot`` a command on its pipe. A worker whose
        pipe stays full (it reads nothing: stopped, or its actor wedged) is
        stopped and replaced, its runs ended as any dead worker's."""
        commands = slot.commands
        if commands is None or commands.closed:
            return  # given up on already: its replacement is on its way
        if commands.send(msg):
            return
        log.warning("worker_unresponsive host=%s worker=%d reason=command_not_written", self.host, slot.n)
        commands.close()
        self.call_async(self.pool, TerminateChild(slot.addr), lambda _r, _e: self._add_worker(), CALL_TIMEOUT)

    def _watch_process(self, slot: Slot, pid: int) -> None:
        """Watch the worker's process itself: Thespian's notice of a child's
        exit can be lost on a loaded machine, and a worker whose death goes
        unseen would hold its jobs (their leases renewed) for ever."""
        if slot.pidfd is not None or self.slots.get(slot.addr) is not slot:
            return
        try:
            slot.pidfd = os.pidfd_open(pid)
        except OSError:  # already gone
            self.start_timer(0.0, lambda: self._process_gone(slot), real=True)
            return
        self.watch_fd(slot.pidfd, lambda: self._process_gone(slot))

    def _process_gone(self, slot: Slot) -> None:
        """The worker's process ended: end its runs now, whether or not the
        supervisor's notice (a Down) ever comes; it is never adopted again."""
        if self.slots.get(slot.addr) is not slot:
            return
        self.gone[slot.addr] = True
        self._worker_down(Down(slot.ref, slot.addr, "exited"))

    def _find_replacements(self, tries: int) -> None:
        """Adopt the workers the pool restarted (it does so within milliseconds);
        start one more when the pool did not (it missed a worker's exit)."""

        def listed(children: Any, error: Exception | None) -> None:
            if error is None:
                for child in children:
                    if child.addr is not None and child.addr not in self.gone:
                        self._adopt(child.addr)
            if len(self.slots) < self.concurrency and not self.draining:
                if tries > 0:
                    self.start_timer(0.05, lambda: self._find_replacements(tries - 1), real=True)
                else:
                    self._add_worker()
            self._hand_out()
            self._kick()

        self.call_async(self.pool, WhichChildren(), listed, CALL_TIMEOUT)

    def _add_worker(self) -> None:
        """Start one more worker in the pool (one was stopped, not restarted) and adopt it."""

        def started(addr: Any, error: Exception | None) -> None:
            if error is None:
                self._adopt(addr)

        if not self.draining:
            self.call_async(self.pool, StartChild(None), started, CALL_TIMEOUT)

    def _limit(self, running: Running) -> Optional[float]:
        """The time limit of a run: the job's own, else its type's."""
        return running.claimed.time_limit or self.types[running.claimed.job.type].time_limit

    def _check_limit(self, slot: Slot, running: Running) -> None:
        """Past its limit a run is told to stop; past the grace too, its worker
        is stopped (an async run is first cancelled): :func:`planner.limit_action`."""
        limit = self._limit(running)
        action = limit_action(
            running.started,
            limit,
            time.time(),
            self.grace,
            running.is_async,
            running.timed_out,
            running.cancelled,
            running.killing,
        )
        if action is LimitAction.STOP:
            running.timed_out = True
            log.warning(
                "job_timed_out host=%s type=%s job=%s attempt=%d limit=%gs grace=%gs",
                self.host,
                running.claimed.job.type,
                running.claimed.job.id,
                running.claimed.attempt,
                limit,
                self.grace,
            )
            self._tell(slot, StopJob(running.token))
        elif action is LimitAction.CANCEL:
            running.cancelled = True  # the worker's other async runs go on
            log.warning(
                "async_run_cancelled host=%s type=%s job=%s reason=time_limit",
                self.host,
                running.claimed.job.type,
                running.claimed.job.id,
            )
            self._tell(slot, StopJob(running.token, cancel=True))
        elif action is LimitAction.KILL:
            running.killing = slot.killing = True
            log.warning(
                "job_killed host=%s type=%s job=%s reason=time_limit",
                self.host,
                running.claimed.job.type,
                running.claimed.job.id,
            )
            self.call_async(self.pool, TerminateChild(slot.addr), lambda _r, _e: self._add_worker(), CALL_TIMEOUT)

    def _give_back_bystanders(self, runs: list[Running]) -> None:
        """Put back in the queue, uncounted, the runs a worker held beside the
        one it was killed for (past its time limit and the grace): the host's
        kill, not their failure."""
        for running in runs:
            self.to_mark.pop(running.token, None)
        self._put_back([r.claimed.job for r in runs], "worker_killed_for_another_run")
