"""How a worker host's attempt ends: the outcome its next step writes, and its event.

Principle: what an attempt's end means is the planner's
(:func:`~actors.workers.planner.attempt_end`: succeeded, snoozed, retried
at a time, or failed for good, given the handler's error, the attempt and
the type's backoff); this part applies it. It queues the outcome in
``outcomes`` for the dispatcher's next step (nothing is written here),
counts it and logs the attempts that did not succeed. A run whose lock
was lost has nothing to say, and a run the host's drain stopped goes back
to the queue uncounted. A mixin of the dispatcher.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from fdblayer.jobs import work

from actors.workers import planner
from actors.workers.planner import End
from actors.workers.runs import Running, short
from actors.workers.state import DispatcherState

__all__ = ["AttemptEnds"]

log = logging.getLogger("otpjobs.workers")


class AttemptEnds(DispatcherState):
    """The end of each attempt a dispatcher's workers ran."""

    def _end_attempt(
        self,
        running: Running,
        error: Optional[dict],
        result: Optional[bytes],
        retry_now: bool = False,
        seconds: float = -1.0,
    ) -> None:
        """Queue the attempt's outcome for the next step, as
        :func:`planner.attempt_end` decides (a lost run's is discarded)."""
        claimed = running.claimed
        job = claimed.job
        if running.lost:
            log.info("job_outcome_discarded host=%s type=%s job=%s reason=lock_lost", self.host, job.type, job.id)
            return
        if self._stopped_by_drain(running, error):
            self._put_back([running], "stopped_by_drain")
            return
        if error is not None and running.timed_out:
            error = dict(
                error,
                type="JobTimeout",
                message=f"ran past its time limit of {self._limit(running):g}s "
                f"({error.get('type')}: {short(error.get('message'), 300)})",
            )
            retry_now = False
        end = planner.attempt_end(
            error, claimed.attempt, claimed.max_attempts, self.types[job.type].backoff, time.time(), retry_now
        )
        started = running.started
        if end.kind is End.OK:
            self.stats["succeeded"] += 1
            self.outcomes.append(work.Outcome(job, work.OutcomeKind.OK, result, seconds=seconds, started=started))
            return
        assert error is not None
        self._log_end(claimed, end, error)
        if end.kind is End.SNOOZE:
            self.stats["snoozed"] += 1
            outcome = work.Outcome(job, work.OutcomeKind.SNOOZE, None, None, end.retry_at, seconds, started)
        elif end.kind is End.RETRY:
            self.stats["retried"] += 1
            outcome = work.Outcome(job, work.OutcomeKind.RETRY, None, error, end.retry_at, seconds, started)
        else:
            self.stats["failed"] += 1
            outcome = work.Outcome(job, work.OutcomeKind.FAIL, None, error, seconds=seconds, started=started)
        self.outcomes.append(outcome)

    def _log_end(self, claimed: work.Claimed, end: planner.AttemptEnd, error: dict) -> None:
        """The event of an attempt that did not succeed: snoozed, retried or failed."""
        job = claimed.job
        if end.kind is End.SNOOZE:
            log.info(
                "job_snoozed host=%s type=%s job=%s attempt=%d in=%.1fs",
                self.host,
                job.type,
                job.id,
                claimed.attempt,
                end.delay,
            )
        elif end.kind is End.RETRY:
            log.warning(
                "job_retry host=%s type=%s job=%s attempt=%d/%d in=%.1fs error=%s: %s",
                self.host,
                job.type,
                job.id,
                claimed.attempt,
                claimed.max_attempts,
                end.delay,
                error.get("type"),
                short(error.get("message")),
            )
        else:
            log.error(
                "job_failed host=%s type=%s job=%s attempts=%d error=%s: %s",
                self.host,
                job.type,
                job.id,
                claimed.attempt,
                error.get("type"),
                short(error.get("message")),
            )
