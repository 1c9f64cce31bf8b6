"""How a worker host's attempt ends: the outcome its next step writes, and its event.

Principle: what an attempt's end means is the planner's
(:func:`~actors.workers.planner.attempt_end`: succeeded, snoozed, retried
at a time, or failed for good, given the handler's error, the attempt and
the type's backoff); this part applies it. It queues the outcome in
``outcomes`` for the dispatcher's next step (nothing is written here),
counts it and logs the attempts that did not succeed. A run whose lock
was lost has nothing to say, and a run the host's drain stopped goes back
to the queue uncounted. The ends a predecessor read (or not) and never
wrote, the journal of its workers gives back to its successor
(:meth:`AttemptEnds._end_from_journal`). A mixin of the dispatcher.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from fdblayer.jobs import work
from fdblayer.jobs.job import Job
from fdblayer.jobs.keys import DEFAULT_LAYOUT

from actors.workers import planner
from actors.workers.journal import Ended
from actors.workers.planner import End
from actors.workers.runs import Running, short
from actors.workers.state import DispatcherState

__all__ = ["AttemptEnds"]

log = logging.getLogger("otpjobs.workers")

#: Outcomes a predecessor's journal gives back, written so many to a transaction.
_JOURNAL_BATCH = 200
_KIND_OF_END = {
    End.OK: work.OutcomeKind.OK,
    End.SNOOZE: work.OutcomeKind.SNOOZE,
    End.RETRY: work.OutcomeKind.RETRY,
    End.FAIL: work.OutcomeKind.FAIL,
}
#: The dispatcher's counter (``stats``) each end bumps.
_STAT_OF_END = {End.OK: "succeeded", End.SNOOZE: "snoozed", End.RETRY: "retried", End.FAIL: "failed"}


def _outcome(
    job: Job,
    end: planner.AttemptEnd,
    result: Optional[bytes],
    error: Optional[dict],
    seconds: float,
    started: Optional[float],
) -> work.Outcome:
    """The outcome a step writes for an attempt that ended as ``end``: the
    result kept only on success, the error only for a retry or a failure."""
    return work.Outcome(
        job,
        _KIND_OF_END[end.kind],
        result if end.kind is End.OK else None,
        None if end.kind in (End.OK, End.SNOOZE) else error,
        end.retry_at,
        seconds,
        started,
    )


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
            self._put_back([job], "stopped_by_drain")
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
        self.stats[_STAT_OF_END[end.kind]] += 1
        if end.kind is not End.OK:
            assert error is not None
            self._log_end(claimed, end, error)
        self.outcomes.append(_outcome(job, end, result, error, seconds, running.started))

    def _end_from_journal(self, ended: list[Ended]) -> None:
        """End, as their handlers did, the runs of a dead predecessor's
        workers that its journal holds: only those still held under their
        run's lock are written (the rest its predecessor had written, or
        their jobs moved on); a store error leaves them all to
        :meth:`_recover`, as without a journal. A run its host's drain had
        stopped (the handler let ``JobStopping`` out) goes back to the queue
        uncounted, as a live dispatcher puts it back."""
        now = time.time()
        outcomes = []
        stopped = []
        for e in ended:
            if (e.cut and e.error is None) or e.job[0] not in self.types:
                continue  # its result is not known, or not this host's type: taken back, as without a journal
            job = Job(*e.job)
            if e.released and e.error is not None and e.error.get("stopped"):
                stopped.append(job)  # the host's stop, not the job's failure (as _stopped_by_drain)
                continue
            end = planner.attempt_end(e.error, e.attempt, e.max_attempts, self.types[job.type].backoff, now)
            outcomes.append(_outcome(job, end, e.result, e.error, e.seconds, e.started))
        self._put_back(stopped, "stopped_by_drain")
        if not outcomes:
            return
        kept = 0
        try:
            for at in range(0, len(outcomes), _JOURNAL_BATCH):
                batch = outcomes[at : at + _JOURNAL_BATCH]
                kept += len(batch) - len(work.complete(self.db, DEFAULT_LAYOUT, batch, now))
        except Exception as exc:  # noqa: BLE001 - a store error: the take-back puts them back, as before journals
            log.warning("journal_not_applied host=%s error=%r", self.host, exc)
        log.warning("jobs_ended_from_journal host=%s count=%d read=%d", self.host, kept, len(outcomes))

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
