"""A worker host's retention: finished and failed jobs pruned past their keep time, in bounded batches.

Principle: the host removes its types' finished and failed jobs past
their retention (``keep_finished``, ``keep_failed``) one batch per type
and outcome at a time, on a timer in the dispatcher's loop, so that a
backlog goes in bounded transactions between claims and finishes and
yields to the queue's work. A store error delays a prune and is logged;
it never stops the host. A mixin of the dispatcher, whose state it reads.
"""

from __future__ import annotations

import logging
import time

from fdblayer.jobs.keys import DEFAULT_LAYOUT

from actors.workers.state import DispatcherState

__all__ = ["Pruning", "retention_of", "PRUNE_EVERY", "PRUNE_MIN", "PRUNE_AGAIN", "PRUNE_SHARE"]

log = logging.getLogger("otpjobs.workers")

#: Seconds between two prunes of a host's types at most and at least; on a
#: busy host, while a backlog lasts (a batch was full), at least
#: PRUNE_AGAIN and as much as keeps pruning to PRUNE_SHARE of the
#: dispatcher's time.
PRUNE_EVERY = 60.0
PRUNE_MIN = 1.0
PRUNE_AGAIN = 0.2
PRUNE_SHARE = 0.02


def retention_of(args: dict) -> dict:
    """Seconds finished jobs are kept, by outcome, from the host's
    ``keep_finished`` and ``keep_failed`` (absent or 0: None, for ever)."""
    from fdblayer.jobs.work_record import FAILED, SUCCEEDED

    return {
        SUCCEEDED: float(args.get("keep_finished") or 0) or None,
        FAILED: float(args.get("keep_failed") or 0) or None,
    }


class Pruning(DispatcherState):
    """The retention timer of a dispatcher."""

    def _prune(self) -> None:
        """Remove the served types' finished and failed jobs past their
        retention (``keep_finished``, ``keep_failed``): one batch per type
        and outcome, then again every :data:`PRUNE_EVERY` seconds (a
        quarter of the shortest retention if less, at least
        :data:`PRUNE_MIN`); after a full batch (a backlog) again soon: at
        once on an idle host, else taking at most :data:`PRUNE_SHARE` of
        the dispatcher's time, so that a backlog goes in bounded
        transactions with claims and finishes between them and yields to
        the queue's work."""
        self._settle()  # the step in flight first (see actors.workers.stepping)
        from fdblayer.jobs import retention

        if all(seconds is None for seconds in self.keep.values()):
            return
        more, began = False, time.monotonic()
        for job_type in [] if self.draining else self.order:
            try:
                removed, full = retention.prune_type(
                    self.db, DEFAULT_LAYOUT, job_type, self.keep, time.time(), max_batches=1
                )
            except Exception as exc:  # noqa: BLE001 - a store hiccup delays the prune, never stops the host
                log.warning("prune_failed host=%s type=%s error=%r", self.host, job_type, exc)
                continue
            more = more or full
            if removed:
                self.stats["pruned"] += removed
                log.info("jobs_pruned host=%s type=%s count=%d", self.host, job_type, removed)
        shortest = min(seconds for seconds in self.keep.values() if seconds is not None)
        took = time.monotonic() - began
        busy = bool(self.buffer) or bool(self._held()) or any(s.maybe_work for s in self.types.values())
        if not more:
            wait = max(PRUNE_MIN, min(PRUNE_EVERY, shortest / 4))
        elif busy:
            wait = max(PRUNE_AGAIN, took / PRUNE_SHARE)
        else:
            wait = 0.0  # an idle host clears a backlog at once, a batch at a time (messages between)
        self.start_timer(wait, self._prune, real=True)
