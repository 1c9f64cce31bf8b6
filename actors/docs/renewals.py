"""How the doc processor keeps its documents' leases, and its lease fence.

Principle: a document's job runs only while this node surely holds the
document. Each lease is renewed in batches of
:data:`~fdblayer.docs.leases.RENEW_BATCH` a transaction, oldest first, and
counts as renewed when its batch began (never later than the store renewed
it); the node's lease fence (:mod:`actors.scheduler.fence`) is the oldest
renewal plus :data:`FENCE_SHARE` of the owner timeout, moved as each batch
commits. A document released (lost to another node, replaced, done) has
its scheduler job removed, and until the scheduler confirms the removal the
fence does not move: that job must not run again under a renewed fence.

:class:`LeaseKeeping` is a part of :class:`~actors.docs.processor.DocProcessor`
(a mixin); it holds no state of its own.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import fdblayer
from fdblayer import docs
from fdblayer.docs import leases as doc_leases

from actors.scheduler.fence import LeaseFence
from actors.scheduler.host import KILL_GRACE
from actors.scheduler.job import STOP_GRACE
from actors.scheduler.protocol import MAX_IDS, RemoveJobs, Reschedule

log = logging.getLogger(__name__)

#: Share of the owner timeout a document job may run past its lease's last
#: renewal (the node's lease fence): another node may take it at the whole.
FENCE_SHARE = 0.8
#: Seconds a call to the scheduler may take.
CALL_TIMEOUT = 10.0
#: Seconds before a RemoveJob the scheduler did not answer is sent again.
REMOVE_RETRY = 1.0
#: Seconds after this node's scheduler confirmed the removal of a replaced
#: (or deleted) document's job before any node may run the document again:
#: the old run stops meanwhile (``STOP_GRACE`` to return, ``KILL_GRACE``
#: more to be killed, a second of margin). Until that confirmation the
#: document waits for the owner timeout plus this: by then the node's lease
#: fence has stopped the run even if the removal never comes.
REPLACED_AFTER = STOP_GRACE + KILL_GRACE + 1.0
#: ``Owned.added_to`` of a document taken back from a predecessor: added to
#: the scheduler by it (see :meth:`DocProcessor._take_back`).
TAKEN_BACK = "taken_back"
#: ``Owned.added_to`` of a document whose AddJob failed without an answer
#: (timed out): the scheduler may still have added it, so releasing the
#: document removes its job.
MAYBE_ADDED = "maybe_added"
#: Share of the lease period within which the lease timer leaves a lease
#: renewed meanwhile (by the tick) for its next round.
FRESH_SHARE = 0.25


@dataclass
class Owned:
    """A document this node holds: its lease, the scheduler spec, what its
    row holds as this node last wrote it (from the start, the checkpoint
    it was taken with), and when (``time.monotonic()``) its lease was last
    renewed."""

    lease: docs.Lease
    spec: dict
    added_to: str | None = None
    errors: int = 0
    written: dict = field(default_factory=dict)
    renewed_at: float = field(default_factory=time.monotonic)
    added_at: float | None = None  # wall time of the last AddJob of its spec


class LeaseKeeping:
    """The doc processor's lease renewal, releases and fence (see the module)."""

    db: Any
    timeout: float
    store_timeout: float
    tick_every: float
    fence: LeaseFence
    owned: dict[str, Owned]
    sched: Any
    counters: dict[str, int]
    renew_ms: float
    _removing: set[str]
    _replaced: dict[str, str]
    _adding: str | None
    _reschedule_owed: bool
    _bring_forward_tx: Any
    call_async: Any
    start_timer: Any

    def _renew(self) -> None:
        """Renew the leases now, on the lease timer: never behind a tick.

        The tick (adding jobs to the scheduler, reading their states) can
        take longer than the owner timeout when many jobs start at once;
        renewals run between its steps, so a live node never loses a
        document to its own activity monitor. A lease renewed less than
        :data:`FRESH_SHARE` of a period ago (by the tick, or just accepted)
        is left for the next round: each lease is renewed about once a period.
        """
        self._renew_all({}, set(), older_than=time.monotonic() - FRESH_SHARE * self.tick_every)

    def _renew_all(self, states: dict, done: set, older_than: float = math.inf) -> None:
        """Renew every lease (recording ``states``), a batch a transaction,
        each batch kept (and the fence moved) as soon as it commits: with
        thousands of documents on a loaded machine a whole round can take
        seconds, and the fence must follow each lease's own renewal, not
        wait for the round's last. Only leases renewed before ``older_than``
        (``time.monotonic()``) are. If the store cannot be written, stop the
        documents whose lease may run out before it can."""
        held = sorted((o for o in self.owned.values() if o.renewed_at < older_than), key=lambda o: o.renewed_at)
        leases = [o.lease for o in held]  # the oldest first: the fence follows the oldest
        if not leases:
            return
        t0 = time.perf_counter()
        for start in range(0, len(leases), doc_leases.RENEW_BATCH):
            batch = leases[start : start + doc_leases.RENEW_BATCH]
            asked_at = time.monotonic()  # a lease renewed by this batch holds from no later than now
            try:
                now = time.time()
                not_before = math.ceil(now + self.timeout + REPLACED_AFTER)  # brought forward once removed
                outcomes = doc_leases.renew(
                    self.db, batch, states, done, now, timeout=self.store_timeout, not_before=not_before
                )
            except fdblayer.StoreError as exc:
                log.warning("doc_leases_unrenewed count=%d reason=%r", len(leases) - start, exc)
                self._give_up_old_leases()
                return
            finally:
                self.renew_ms = (time.perf_counter() - t0) * 1000
            self._apply(outcomes, states, asked_at)
        self.counters["renew_rounds"] += 1

    def _give_up_old_leases(self) -> None:
        """Stop the jobs of leases unrenewed for half the owner timeout: they
        must not run on once another node may have taken the document."""
        now = time.monotonic()
        gone = []
        for jid, o in list(self.owned.items()):
            age = now - o.renewed_at
            if age < self.timeout / 2.0:
                continue
            del self.owned[jid]
            self.counters["given_up"] += 1
            log.warning("doc_lease_given_up doc=%s/%s unrenewed_for=%.1f", o.lease.db_name, o.lease.doc_id, age)
            if o.added_to is not None:
                gone.append(o.spec["id"])
        self._remove_jobs(gone)

    def _apply(self, outcomes: dict, states: dict, asked_at: float) -> None:
        """Keep the renewed leases (as renewed when the call began:
        ``asked_at``, so a slow or paused call never stretches the fence);
        forget (and stop) the documents lost or done. A document released
        while the tick's AddJob of it is in flight holds the fence until its
        job is removed: the tick removes it once the add is answered."""
        now = asked_at
        gone: list[str] = []
        no_run: list[str] = []
        for jid, (outcome, lease) in outcomes.items():
            o = self.owned.get(jid)
            if o is None:
                continue
            if outcome == doc_leases.KEPT:
                o.lease = lease
                o.renewed_at = now
                o.written.update(states.get(jid, {}))
                self.counters["renewed"] += 1
                continue
            del self.owned[jid]
            if outcome == doc_leases.LOST:
                self.counters["lost"] += 1
            log.info("doc_released doc=%s/%s outcome=%s", o.lease.db_name, o.lease.doc_id, outcome)
            if jid == self._adding:  # its AddJob is in flight: removed once answered (see _observe)
                self._removing.add(o.spec["id"])  # the fence waits for that removal
                if outcome == doc_leases.CHANGED:
                    self._replaced[o.spec["id"]] = jid
            elif outcome == doc_leases.CHANGED and o.added_to is None:
                no_run.append(jid)  # never added here: due at once
            elif outcome != doc_leases.DONE and o.added_to is not None:
                gone.append(o.spec["id"])
                if outcome == doc_leases.CHANGED:
                    self._replaced[o.spec["id"]] = jid
        self._bring_forward(no_run, int(time.time()))
        self._remove_jobs(gone)
        self._move_fence()

    def _remove_jobs(self, job_ids: list[str]) -> None:
        """Remove the jobs of documents this node gave up, in one call; until
        the scheduler confirms it, the fence does not move: such a job must
        not run again under a renewed fence (the scheduler would restart it
        if it was pending, fenced or rotated out)."""
        if not job_ids:
            return
        if self.sched is None:  # none added by this incarnation: _remove_stale's, due at their fallback time
            for job_id in job_ids:
                self._replaced.pop(job_id, None)
            return
        self._removing.update(job_ids)
        for i in range(0, len(job_ids), MAX_IDS):
            chunk = list(job_ids[i : i + MAX_IDS])
            self.call_async(self.sched, RemoveJobs(chunk), functools.partial(self._jobs_removed, chunk), CALL_TIMEOUT)

    def _jobs_removed(self, job_ids: list[str], _value: Any, error: Exception | None) -> None:
        if error is not None:
            log.warning("doc_job_unremoved jobs=%d reason=%r: retried, the lease fence waits", len(job_ids), error)
            self.start_timer(REMOVE_RETRY, functools.partial(self._retry_removal, job_ids), real=True)
            return
        self._removing.difference_update(job_ids)
        replaced = [self._replaced.pop(j) for j in job_ids if j in self._replaced]
        self._bring_forward(replaced, math.ceil(time.time() + REPLACED_AFTER))
        if not self._removing:
            self._move_fence()

    def _bring_forward(self, job_ids: list[str], due: int) -> None:
        """Make replaced documents' queue jobs due at ``due`` (epoch seconds)
        rather than at their fallback time; a store error leaves them there."""
        if not job_ids:
            return
        try:
            self._bring_forward_tx(self.db, job_ids, due)
        except fdblayer.StoreError as exc:
            log.warning("doc_bring_forward_failed count=%d reason=%r", len(job_ids), exc)

    def _retry_removal(self, job_ids: list[str]) -> None:
        mine = {o.spec["id"] for o in self.owned.values()}
        again = [j for j in job_ids if j not in mine]  # a document this node holds again keeps its job
        self._removing.difference_update(j for j in job_ids if j in mine)
        if again:
            self._remove_jobs(again)
        elif not self._removing:
            self._move_fence()

    def _move_fence(self) -> None:
        """Document jobs may run until the oldest renewal plus FENCE_SHARE of
        the owner timeout: past it another node may hold the document. A
        fence that had expired and holds again asks the scheduler for a
        reschedule: the jobs it stopped run again now, not at the next
        interval."""
        if not self.owned or self._removing:
            return
        now = time.monotonic()
        expired = self.fence.deadline() <= now
        deadline = min(o.renewed_at for o in self.owned.values()) + FENCE_SHARE * self.timeout
        self.fence.set(deadline)
        if expired and deadline > now:
            log.info("doc_fence_restored leases=%d", len(self.owned))
            self._reschedule_owed = True
        if self._reschedule_owed and deadline > now and self.sched is not None:
            self._reschedule_owed = False  # the jobs it left pending run now, not at the next interval
            self.call_async(self.sched, Reschedule(), self._answered, CALL_TIMEOUT)

    @staticmethod
    def _answered(_value: Any, error: Exception | None) -> None:
        """A scheduler call whose answer only matters if it failed (logged)."""
        if error is not None:
            log.warning("doc_scheduler_call_failed reason=%r", error)
