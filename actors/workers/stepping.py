"""A worker host's step: one transaction writes the starts and ends its
workers reported and claims their next jobs; where commits are sent
apart (PostgreSQL), the next step is built while the last one's commit is
in flight.

Principle: a step is a chain, the dispatcher's Python (what the step
reads, what it writes) then the server's commit, and each waited for the
other. Now a step's commit is sent (:class:`fdblayer.pipelined.Pipelined`)
and the actor goes on: its loop takes in what the workers report, and
the next step is built, reads included, while the server commits; only
then does the dispatcher wait for the answer, hand out the jobs it
claimed, and send the next commit. So at most one step is in flight, and
steps commit in the order they were built.

What keeps two steps apart: a step built while another is in flight
reads the store as it was before that commit, so it writes nothing for
the jobs the other one touches (their starts and ends wait for the next
step), claims none of the pending keys the other took (``work.step``'s
``skip``; should the other fail, its types are claimed again after this
one, since no watch fires for jobs still pending), and asks for fewer
jobs by what the other asked for. Anything
else they share is caught by the store as a conflict, and the later step
runs again. A step's jobs reach the workers only once its commit is
answered; every other use of the store by the dispatcher (renewals, the
lifeline, a drain, a prune, the stop) first waits for the step in flight
(:meth:`Stepping._settle`), so it sees the dispatcher as after a step
done at once. Where commits are not sent apart (SQLite, FoundationDB) a
step is answered as it is sent, and settled at once.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from fdblayer.jobs import work
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from fdblayer.pipelined import Pipelined

from actors.workers import planner
from actors.workers.runs import STEP_RETRY
from actors.workers.state import DispatcherState

__all__ = ["Stepping", "Flight"]

log = logging.getLogger("otpjobs.workers")

#: A step of fewer jobs (ends, starts and claims) is waited for at once:
#: its commit is short, and the next one seldom waits to be built (one
#: claimed for an idle worker: a turn of the actor's loop more cost it
#: ~1 ms of its pickup, measured).
PIPELINE_MIN = 8


@dataclass
class Flight:
    """A step whose commit is in flight: what it was built from, and (read
    only when the next step is built beside it) what that one keeps away
    from."""

    step: Pipelined[Any]
    claims: list
    starts: list  #: the Running records whose starts it writes
    outcomes: list
    now: float
    wants: dict  #: what it asked for, by kind (the next step asks for less)
    built_ms: float
    #: the types whose claims passed over the keys of a step that then
    #: failed (those jobs are still pending): they may have work after it
    recheck: tuple = ()
    fd: Optional[int] = None
    sent_at: float = field(default_factory=time.perf_counter)

    @functools.cached_property
    def busy(self) -> frozenset:
        """The ids of the jobs whose rows it writes (their starts and ends)."""
        return frozenset(o.job.id for o in self.outcomes) | frozenset(r.claimed.job.id for r in self.starts)

    @functools.cached_property
    def taken(self) -> frozenset:
        """The pending keys its claims took (as first built)."""
        tentative = self.step.tentative
        return frozenset(k for r in tentative[1] for k in r.keys) if tentative is not None else frozenset()


class Stepping(DispatcherState):
    """The steps of a dispatcher."""

    def _kick(self) -> None:
        """Ask for one step, after what is ready to be read (the channels
        and messages its loop has yet to take in: their outcomes join it)."""
        if not self.flush_queued:
            self.flush_queued = True
            self.stepper.wake()

    def _step_due(self) -> None:
        """The stepper's callback: the step :meth:`_kick` asked for."""
        self.flush_queued = False
        self._flush()

    def _wants(self) -> dict:
        """``{False: sync want, True: async want}``: jobs to claim
        (:func:`planner.wants`), less what the step in flight asked for."""
        buffered_async = sum(1 for r in self.buffer if self.types[r.claimed.job.type].is_async) if self.any_async else 0
        wants = planner.wants(
            [slot.load() for _, slot in self.slots.items() if not slot.killing],
            len(self.buffer) - buffered_async,
            buffered_async,
            self._limits(),
            time.monotonic(),
            active=not self.draining and self.pool is not None,
        )
        if self.flight is not None:
            wants = {kind: want - self.flight.wants.get(kind, 0) for kind, want in wants.items()}
        return wants

    def _flush(self) -> None:
        """Build a step from what waits (ends, starts, claims wanted); then
        settle the step in flight, if any, and send this one."""
        flight = self.flight
        wants = self._wants()
        claims = planner.claims(self.order, self.types, wants)
        starts = self._starts_due()
        outcomes, self.outcomes = self.outcomes, []
        if flight is not None:
            starts, outcomes = self._keep_apart(flight.busy, starts, outcomes)
        if not claims and not outcomes and not starts:
            return
        now = time.time()
        t0 = time.perf_counter()
        try:
            step: Pipelined[Any] = Pipelined(
                work.step,
                self.db,
                DEFAULT_LAYOUT,
                outcomes,
                [(r.claimed.job, r.started) for r in starts],
                claims,
                now,
                self.host,
                self._held_ids,
                flight.taken if flight is not None else (),
            )
        except Exception as exc:  # noqa: BLE001 - a store error (disk full, busy) delays the step
            self._step_failed(outcomes, starts, exc)
            return
        built_ms = (time.perf_counter() - t0) * 1000
        recheck: tuple = ()
        if flight is not None:
            self.stats["overlapped"] += 1  # built while the server committed the last one
            self.building = outcomes  # held: a retry of the step in flight must not put these back
            try:
                if not self._settle():
                    recheck = tuple(job_type for job_type, _, _ in flight.claims)
            finally:
                self.building = []
        step.send()
        self.flight = Flight(step, claims, starts, outcomes, now, wants, built_ms, recheck)
        fd = step.fileno()
        if fd is None or self._small(step, len(outcomes) + len(starts)):
            self._settle()
            return
        self.flight.fd = fd
        self.watch_fd(fd, self._settle)

    @staticmethod
    def _small(step: Pipelined[Any], written: int) -> bool:
        """Whether a step of ``written`` ends and starts claims so few jobs
        besides that it is waited for at once (:data:`PIPELINE_MIN`)."""
        tentative = step.tentative
        claimed = sum(len(r.claimed) for r in tentative[1]) if tentative is not None else 0
        return written + claimed < PIPELINE_MIN

    def _keep_apart(self, busy: frozenset, starts: list, outcomes: list) -> tuple[list, list]:
        """The starts and outcomes a step built beside the one in flight
        may write: those of jobs the flight writes wait for the next step."""
        later_starts = [r for r in starts if r.claimed.job.id in busy]
        later = [o for o in outcomes if o.job.id in busy]
        if not later_starts and not later:
            return starts, outcomes
        for running in later_starts:
            self.to_mark.setdefault(running.token, running)
        self.outcomes = later + self.outcomes
        return [r for r in starts if r.claimed.job.id not in busy], [o for o in outcomes if o.job.id not in busy]

    def _settle(self) -> bool:
        """Wait for the step in flight (none: nothing to do), then take in
        what it did: the jobs it claimed are handed out. False when it
        failed (nothing of it was written)."""
        flight, self.flight = self.flight, None
        if flight is None:
            return True
        if flight.fd is not None:
            self.unwatch_fd(flight.fd)
        try:
            lost, results = flight.step.wait()
        except Exception as exc:  # noqa: BLE001 - a store error (disk full, busy) delays the step
            self._step_failed(flight.outcomes, flight.starts, exc)
            return False
        self.stats["steps"] += 1
        self.stats["step_ms"] += flight.built_ms + (time.perf_counter() - flight.sent_at) * 1000
        for job in lost:
            log.info("job_outcome_discarded host=%s type=%s job=%s reason=lock_lost", self.host, job.type, job.id)
        for (job_type, limit, _), result in zip(flight.claims, results, strict=True):
            self._claimed(job_type, limit, result, flight.now)
        for job_type in flight.recheck:  # what it passed over is pending still: no watch fires for it
            self.types[job_type].maybe_work = True
        self.order = self.order[1:] + self.order[:1]  # the next step asks another type first
        self._hand_out()
        if planner.step_again(bool(self.outcomes), self.types, self._wants()):
            self._kick()
        return True

    def _step_failed(self, outcomes: list, starts: list, exc: BaseException) -> None:
        """Nothing of a step was written: its outcomes and starts wait for a
        step shortly after."""
        self.outcomes = outcomes + self.outcomes
        for r in starts:
            self.to_mark.setdefault(r.token, r)
        log.warning("step_failed host=%s error=%r (retrying in %.1fs)", self.host, exc, STEP_RETRY)
        self.start_timer(STEP_RETRY, self._kick, real=True)

    def _claimed(self, job_type: Any, limit: int, result: work.ClaimResult, now: float) -> None:
        raise NotImplementedError

    def _limits(self) -> planner.Limits:
        raise NotImplementedError

    def _starts_due(self) -> list:
        raise NotImplementedError

    def _held_ids(self) -> set:
        raise NotImplementedError
