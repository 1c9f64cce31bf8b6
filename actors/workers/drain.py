"""A worker host's drain: claim nothing more, give back what has not started, wait out the grace.

Principle: on SIGTERM or Ctrl-C (a :class:`~actors.workers.protocol.Drain`
call) the dispatcher claims no more jobs, puts the ones it holds that have
not started back in the queue at once (their attempt not counted), tells
running handlers to stop and gives them the grace, then stops the workers
whose handlers still run and, once they are gone, puts those jobs back too
and answers. A run the drain stopped (its handler let ``JobStopping`` out)
goes back uncounted as well: the host's stop, not the job's failure. A
store error leaves the jobs to the lifeline: their leases run out and they
come back. A mixin of the dispatcher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Optional

from fdblayer.jobs.keys import DEFAULT_LAYOUT

from supervision import NOREPLY
from supervision.supervisor import TerminateChild

from fdblayer.jobs import hosts, work

from actors.workers.protocol import Drain, Release
from actors.workers.runs import CALL_TIMEOUT, Slot
from actors.workers.state import DispatcherState

__all__ = ["Draining"]

log = logging.getLogger("otpjobs.workers")


class Draining(DispatcherState):
    """The drain of a dispatcher."""

    def _release(self, jobs: list) -> None:
        """Put held jobs back in the queue, uncounted; a store error leaves
        them to the lifeline (their leases expire)."""
        if not jobs:
            return
        try:
            self.stats["released"] += work.release(self.db, DEFAULT_LAYOUT, jobs)
        except Exception as exc:  # noqa: BLE001 - nothing is lost: the lease runs out and they come back
            log.warning("release_failed host=%s count=%d error=%r", self.host, len(jobs), exc)

    def _stopped_by_drain(self, running: Any, error: Optional[dict]) -> bool:
        """Whether a run ended by the stop the drain asked for (its handler
        let ``JobStopping`` out of ``ctx.check()``): the host's stop, not the
        job's failure. A run past its time limit was stopped for that."""
        return self.draining and error is not None and bool(error.get("stopped")) and not running.timed_out

    def _put_back(self, jobs: list, reason: str, level: int = logging.INFO) -> None:
        """Put held jobs back in the queue, uncounted, each logged
        (``job_released reason=...``): stopped by this host (a drain, its
        grace, a kill meant for another run), not failed."""
        for job in jobs:
            log.log(level, "job_released host=%s type=%s job=%s reason=%s", self.host, job.type, job.id, reason)
        self._release(jobs)

    def _drain(self, msg: Drain, from_: Any) -> Any:
        self._settle()  # the step in flight first (see actors.workers.stepping)
        self.draining = True
        self._publish_draining()
        waiting = [r.claimed.job for r in self.buffer if not r.lost]
        self.buffer.clear()
        before = self.stats["released"]
        self._release(waiting)
        for _, slot in self.slots.items():
            if slot.runs:
                slot.owes_release += 1
                self._tell(slot, Release())
        log.info(
            "workers_draining host=%s held=%d released=%d grace=%.1fs",
            self.host,
            len(self._held()),
            self.stats["released"] - before,
            msg.grace,
        )
        self.drain_from = from_
        if not self._busy():
            self._drained()
            return NOREPLY
        self.drain_timer = self.start_timer(max(0.0, msg.grace), self._grace_over, real=True)
        return NOREPLY

    def _publish_draining(self) -> None:
        """Say in the store that this host drains (its status row), so that a
        dispatcher restarted meanwhile in this host drains too."""
        try:
            hosts.beat(self.db, DEFAULT_LAYOUT, self.host, self._status(), time.time())
        except Exception as exc:  # noqa: BLE001 - a store hiccup: a restarted dispatcher would claim again
            log.warning("beat_failed host=%s error=%r", self.host, exc)

    def _resume_drain(self) -> None:
        """A dispatcher restarted while its host drained (its predecessor's
        status row says so; the host's name is its command's own) drains
        too: it claims nothing more."""
        try:
            info = hosts.read(self.db, DEFAULT_LAYOUT, self.host)
        except Exception as exc:  # noqa: BLE001 - unknown: serve as usual
            log.warning("drain_check_failed host=%s error=%r", self.host, exc)
            return
        if info is not None and info.get("draining"):
            self.draining = True
            log.warning("drain_resumed host=%s reason=restarted_while_draining", self.host)

    def _busy(self) -> bool:
        return self.workers_stopping > 0 or any(slot.runs or slot.owes_release for _, slot in self.slots.items())

    def _grace_over(self) -> None:
        """The grace is over: stop the workers still running handlers (their
        supervisor kills them, ``brutal_kill``, and answers once they are
        dead), then put the jobs still late back in the queue. In this
        order, no late handler still runs when its job can be claimed again;
        a run whose end is read before its worker is gone keeps its outcome
        (its job is not run again). A worker whose stop fails may still run
        its handlers: their jobs are not released but left to the lifeline
        (their leases are no longer renewed)."""
        self._settle()  # the step in flight first (see actors.workers.stepping)
        self.drain_timer = None
        for _, slot in list(self.slots.items()):  # runs that ended while this actor was busy are not late
            self._read_channel(slot)
        if self.drain_from is None:  # they had all ended: answered already
            return
        late = [r for r in self._held() if not r.lost]
        for running in late:
            running.late = True
        doomed = [slot for _, slot in self.slots.items() if slot.runs]
        self.workers_stopping = len(doomed)  # busy until they are gone

        def stopped_for(slot: Slot) -> Callable[[Any, Optional[Exception]], None]:
            runs = list(slot.runs.values())

            def stopped(_answer: Any, error: Optional[Exception]) -> None:
                if error is not None:  # perhaps still running them: not released for another host to run
                    self._leave_held(runs, error)
                elif self.slots.get(slot.addr) is slot:  # gone, its death not yet seen: what it wrote
                    self._read_channel(slot)  # before it died is all there is
                self.workers_stopping -= 1
                if self.workers_stopping == 0:
                    self._give_back_late(late)

            return stopped

        for slot in doomed:
            self.call_async(self.pool, TerminateChild(slot.addr), stopped_for(slot), CALL_TIMEOUT)
        if not doomed:
            self._give_back_late(late)

    def _leave_held(self, runs: list, error: Exception) -> None:
        """The stop of the worker of ``runs`` failed: it may still run them,
        so their jobs are not released but left to the lifeline (their
        leases are no longer renewed), each logged."""
        for running in runs:
            if running.late:
                running.late, running.lost = False, True
                job = running.claimed.job
                log.warning(
                    "job_left_held host=%s type=%s job=%s reason=worker_stop_failed error=%r",
                    self.host,
                    job.type,
                    job.id,
                    error,
                )

    def _give_back_late(self, late: list) -> None:
        """Put the runs still late back in the queue, uncounted, and answer."""
        self._put_back([r.claimed.job for r in late if r.late], "grace_over", logging.WARNING)
        for _, slot in self.slots.items():
            slot.runs.clear()
            slot.current = None
            slot.inflight.clear()
            slot.async_held = 0
            slot.owes_release = 0
        self._drained()

    def _check_drained(self) -> None:
        if self.drain_from is not None and not self._busy():
            self._drained()

    def _complete_now(self, during: str) -> None:
        """Write the outcomes not yet written, outside a step (the host
        ``during`` a drain or a stop: their jobs must not run again); on a
        store error the jobs come back when their leases run out."""
        self._settle()  # the step in flight first (see actors.workers.stepping)
        if not self.outcomes:
            return
        outcomes, self.outcomes = self.outcomes, []
        try:
            lost = work.complete(self.db, DEFAULT_LAYOUT, outcomes, time.time())
        except Exception as exc:  # noqa: BLE001 - the jobs come back when their leases run out
            log.warning("complete_failed host=%s during=%s count=%d error=%r", self.host, during, len(outcomes), exc)
            return
        for job in lost:
            log.info("job_outcome_discarded host=%s type=%s job=%s reason=lock_lost", self.host, job.type, job.id)

    def _drained(self) -> None:
        if self.drain_from is None:
            return
        self._complete_now("drain")
        if self.drain_timer is not None:
            self.cancel_timer(self.drain_timer)
            self.drain_timer = None
        self.reply(self.drain_from, {"finished": self.stats["succeeded"] + self.stats["failed"], **self.stats})
        self.drain_from = None
