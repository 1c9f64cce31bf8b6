"""A worker host's leases: every held job's lease renewed, and the lifeline for dead hosts' jobs.

Principle: a job a host claimed is its own only while its lease holds, so
the dispatcher renews the lease of every job it holds (handed to a worker
or buffered) in one transaction per interval (the planner's
:func:`~actors.workers.planner.renew_interval` of the served types'
timeouts, which it watches: a lowered one quickens the renewals at once;
sooner again after a store error: :func:`~actors.workers.planner.renew_delay`). A job whose lock is
lost (removed, or re-enqueued elsewhere) is marked lost and its worker
told to stop; its late outcome is discarded. Every type timeout the host
also runs the lifeline: it re-enqueues the jobs of its types whose lease
expired (a host or dispatcher that died), with the activity monitor's
serializable check, so of two hosts exactly one does it, and looks for
pending work its watch may have missed. A store error
delays either and is logged; it never stops the host. A mixin of the
dispatcher, whose state it reads.
"""

from __future__ import annotations

import collections
import logging
import random
import time
from typing import Any

from fdblayer.jobs import activity, work
from fdblayer.jobs.keys import DEFAULT_LAYOUT

from actors.workers import planner
from actors.workers.planner import renew_delay
from actors.workers.protocol import StopJob
from actors.workers.runs import short
from actors.workers.state import DispatcherState

__all__ = ["HostLeases", "LIFELINE_JITTER"]

log = logging.getLogger("otpjobs.workers")

#: A type's lifeline check runs every type timeout, times 1 to 1 + this.
LIFELINE_JITTER = 0.1


class HostLeases(DispatcherState):
    """Lease renewals and the lifeline timers of a dispatcher."""

    def _renew(self) -> None:
        """Renew the lease of every job held and not lost, then arm the next renewal."""
        self.renewed_at = time.monotonic()
        self._settle()  # the step in flight first (see actors.workers.stepping)
        held = [r for r in self._held() + list(self.buffer) if not r.lost]
        try:
            if held:
                lost_jobs = work.renew(self.db, DEFAULT_LAYOUT, [r.claimed.job for r in held])
                self._lost({(j.type, j.id, j.lock) for j in lost_jobs}, held)
        except Exception as exc:  # noqa: BLE001 - a lease has four renewals of slack: try again soon
            log.warning("renew_failed host=%s held=%d error=%r", self.host, len(held), exc)
            self.renew_timer = self.start_timer(renew_delay(self.renew_interval, failed=True), self._renew, real=True)
            return
        self.renew_timer = self.start_timer(renew_delay(self.renew_interval, failed=False), self._renew, real=True)

    def _lease_timeouts_seen(self) -> None:
        """The served types' timeouts as last read (their watch fired, or at
        the start): renew at the pace of the shortest; a pace quicker than
        before renews now. A host checking with a lowered timeout must not
        find a lease this host renews at the old pace silent."""
        interval = planner.renew_interval(
            s.lease_timeout if s.lease_timeout is not None else s.timeout for s in self.types.values()
        )
        quicker, self.renew_interval = interval < self.renew_interval, interval
        if quicker and self.renew_timer is not None:
            log.info("lease_renewal_quicker host=%s interval=%.2fs", self.host, interval)
            self._renew_now()

    def _renew_now(self) -> None:
        """Renew now, not at the armed renewal's time."""
        if self.renew_timer is not None:
            self.cancel_timer(self.renew_timer)
        self._renew()

    def _lost(self, lost: set, held: list) -> None:
        """Mark the ``held`` runs whose ``(type, id, lock)`` is in ``lost``;
        tell their workers to stop, drop them from the buffer."""
        for running in held:
            j = running.claimed.job
            if (j.type, j.id, j.lock) in lost:
                running.lost = True
                log.info("job_lost host=%s type=%s job=%s (removed or re-enqueued)", self.host, j.type, j.id)
                slot = self.slots.get(running.worker) if running.worker is not None else None
                if slot is not None:
                    self._tell(slot, StopJob(running.token))
        self.buffer = collections.deque(r for r in self.buffer if not r.lost)

    def _supersede(self, job_type: Any, ids: set) -> None:
        """A job claimed again while this host holds it under its old lock
        (removed and added again, or re-enqueued): the old run is lost, told
        to stop, and the new one waits for its end (see :meth:`_hand_out`)."""
        old = [
            r for r in list(self.buffer) + self._held() if r.claimed.job.type == job_type and r.claimed.job.id in ids
        ]
        if old:
            self._lost({(r.claimed.job.type, r.claimed.job.id, r.claimed.job.lock) for r in old}, old)
            self.superseded.update(((job_type, r.claimed.job.id), r) for r in old if r.worker is not None)

    def _lifeline(self, job_type: Any) -> None:
        """Re-enqueue the type's jobs whose lease expired (their host or
        dispatcher died): the activity monitor's check, run by every host."""
        self._settle()  # the step in flight first (see actors.workers.stepping)
        slot = self.types[job_type]
        try:
            slot.lifeline_vs, ids = activity.check_inactive(
                self.db, DEFAULT_LAYOUT, job_type, slot.lifeline_vs, slot.timeout
            )
            slot.timeout = activity.get_type_timeout(self.db, DEFAULT_LAYOUT, job_type) or slot.timeout
        except Exception as exc:  # noqa: BLE001 - a store hiccup delays the check, never stops the host
            log.warning("lifeline_failed host=%s type=%s error=%r", self.host, job_type, exc)
            ids = []
        if not slot.maybe_work and not slot.paused:
            # Its pending watch is the host's one way to learn of new jobs:
            # a wake-up lost on its way (a notification missed while the
            # store's listener was away, a failed read) would strand them.
            # Looking once a type timeout bounds that to one timeout.
            slot.maybe_work = slot.rechecking = True
            self._kick()
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
