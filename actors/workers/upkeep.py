"""A worker host's upkeep in the store: leases, the lifeline, retention, heartbeats.

Principle: what keeps a host's jobs safe and its store tidy runs on timers
in the dispatcher's loop (a mixin of :class:`~actors.workers.dispatcher.Dispatcher`,
whose state it reads): it renews every held job's lease in one transaction
per interval, re-enqueues the jobs of its types whose lease expired (a
host or dispatcher that died: the activity monitor's serializable check,
so of two hosts exactly one does it), prunes finished jobs past their
retention in bounded batches, and publishes the host's status. A store
error delays one of them and is logged; it never stops the host.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import time
from typing import Any

from fdblayer.jobs.keys import DEFAULT_LAYOUT

from fdblayer.jobs import activity, hosts, work

from actors.workers.protocol import StopJob
from actors.workers.state import DispatcherState
from actors.workers.runs import STEP_RETRY, short

__all__ = ["HostUpkeep", "retention_of", "MAX_RENEW_INTERVAL", "MIN_RENEW_INTERVAL", "LIFELINE_JITTER"]

log = logging.getLogger("otpjobs.workers")

#: Longest and shortest pause between two lease renewals.
MAX_RENEW_INTERVAL = 5.0
MIN_RENEW_INTERVAL = 0.05
#: A type's lifeline check runs every type timeout, times 1 to 1 + this.
LIFELINE_JITTER = 0.1
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


class HostUpkeep(DispatcherState):
    """Leases, lifeline, retention and heartbeat timers of a dispatcher."""

    def _renew(self) -> None:
        held = [r for r in self._held() + list(self.buffer) if not r.lost]
        try:
            if held:
                lost_jobs = work.renew(self.db, DEFAULT_LAYOUT, [r.claimed.job for r in held])
                self._lost({(j.type, j.id, j.lock) for j in lost_jobs}, held)
        except Exception as exc:  # noqa: BLE001 - a lease has four renewals of slack: try again soon
            log.warning("renew_failed host=%s held=%d error=%r", self.host, len(held), exc)
            self.start_timer(min(self.renew_interval, STEP_RETRY), self._renew, real=True)
            return
        self.start_timer(self.renew_interval, self._renew, real=True)

    def _lost(self, lost: set, held: list) -> None:
        for running in held:
            j = running.claimed.job
            if (j.type, j.id, j.lock) in lost:
                running.lost = True
                log.info("job_lost host=%s type=%s job=%s (removed or re-enqueued)", self.host, j.type, j.id)
                if running.worker is not None:
                    self.send(running.worker, StopJob(running.token))
        self.buffer = collections.deque(r for r in self.buffer if not r.lost)

    def _lifeline(self, job_type: Any) -> None:
        """Re-enqueue the type's jobs whose lease expired (their host or
        dispatcher died): the activity monitor's check, run by every host."""
        slot = self.types[job_type]
        try:
            slot.lifeline_vs, ids = activity.check_inactive(self.db, DEFAULT_LAYOUT, job_type, slot.lifeline_vs)
            slot.timeout = activity.get_type_timeout(self.db, DEFAULT_LAYOUT, job_type) or slot.timeout
        except Exception as exc:  # noqa: BLE001 - a store hiccup delays the check, never stops the host
            log.warning("lifeline_failed host=%s type=%s error=%r", self.host, job_type, exc)
            ids = []
        if ids:
            self.stats["reenqueued"] += len(ids)
            log.warning(
                "jobs_reenqueued host=%s type=%s reason=lease_expired count=%d jobs=%s",
                self.host,
                job_type,
                len(ids),
                short(",".join(ids)),
            )
        self.start_timer(
            slot.timeout * (1 + random.random() * LIFELINE_JITTER), lambda: self._lifeline(job_type), real=True
        )

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

    def _beat(self) -> None:
        """Publish this host's status in the store (``GET /_workers``)."""
        if not self.draining:
            try:
                hosts.beat(self.db, DEFAULT_LAYOUT, self.host, self._status(), time.time())
            except Exception as exc:  # noqa: BLE001 - a store hiccup skips a beat, never stops the host
                log.warning("beat_failed host=%s error=%r", self.host, exc)
            self.start_timer(hosts.BEAT, self._beat, real=True)

    # ---------------------------------------------------------------- status
    def _status(self) -> dict:
        now = time.time()
        running = [
            r
            for _, slot in self.slots.items()
            for r in ([slot.current] if slot.current else []) + list(slot.inflight.values())
        ]
        return {
            "host": self.host,
            "pid": os.getpid(),
            "concurrency": self.concurrency,
            "types": [str(t) for t in self.order],
            "workers": len(self.slots),
            "busy": len(running),
            "buffered": len(self.buffer),
            "claimed": len(self.buffer) + sum(len(slot.runs) for _, slot in self.slots.items()) - len(running),
            "draining": self.draining,
            "counts": dict(self.stats),
            "running": [
                {
                    "type": r.claimed.job.type,
                    "id": r.claimed.job.id,
                    "attempt": r.claimed.attempt,
                    "for": round(now - (r.started or now), 3),
                }
                for r in running
            ],
        }

    def format_status(self) -> dict:
        return {"host": self.host, "held": len(self._held()), "buffered": len(self.buffer)}
