"""The doc processor: a node adopts permanent jobs (documents) through the queue.

Principle: ownership is the queue's, slots are the scheduler's. One
:class:`DocProcessor` per node accepts queue jobs of the reserved type
:data:`~fdblayer.docs.DOCS_TYPE` (each one a document of
:mod:`fdblayer.docs`), hands each accepted document to the node's scheduler
(``AddJob``) and keeps its queue jobs alive by updating each of them on a
lease timer of its own (a third of the type's activity timeout, at most
2 s; a few transactions for all of them, see :func:`fdblayer.docs.leases.renew`),
which never waits for the tick: a tick that adds hundreds of jobs to the
scheduler runs longer than the timeout, and renewals run between its
steps. The tick's own renewal records each document's state as the scheduler
reports it (``JobStates``: each owned job's summary and stats as
``info``) and notices what changed under it:

* the document was replaced (or deleted): its queue job is finished (so
  it is pending again, and whoever accepts it runs the new revision) and
  the scheduler job removed; the queue job is due only once the old run
  has surely stopped: :data:`REPLACED_AFTER` after the scheduler confirmed
  the removal, or the owner timeout later if it never does;
* the document was deleted, or another node took the queue job (this one
  was silent too long): the scheduler job is removed;
* a one-shot job completed: ``completed``, the queue job is finished; a
  spec the scheduler refuses: ``failed``, finished too.

It never blocks its message loop: an accept is one transaction that takes
a pending document or arms the pending watch, whose callback writes to a
pipe the actor watches (as :mod:`actors.queue.type_monitor` does). When a node is
SIGKILLed its queue jobs go silent; the activity monitor of a surviving
node re-enqueues them after the timeout, which fires the other nodes'
watches. On a clean stop the processor hands its documents back at once.
On start it removes document jobs a previous incarnation left in the local
scheduler (it owns none of them any more). A scheduler that is restarting
(a call answered ``noproc`` or timed out) is not a crash: the processor
waits for the next tick, and adds its jobs to the new scheduler.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import fdblayer
from fdblayer import docs
from fdblayer.docs import leases as doc_leases
from fdblayer.jobs import activity
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import DEFER_START, CallFailed, CallTimeout, ChildSpec, GenServer, NoProc, Request
from supervision.messages import WhereIs
from supervision.waker import Waker

from actors.settings.config import node_name
from actors.names import JOBS_SERVER
from actors.scheduler.protocol import (
    ALREADY_COMPLETED,
    DEFAULT_HOSTS,
    MAX_IDS,
    AddJob,
    Jobs,
    JobStates,
    RemoveJob,
    RemoveJobs,
    Reschedule,
)
from actors.scheduler.core import InvalidJobSpec, reason_text
from actors.names import SCHEDULER as SCHEDULER_NAME
from actors.scheduler.fence import LeaseFence
from actors.scheduler.host import KILL_GRACE
from actors.scheduler.job import STOP_GRACE
from actors import names

log = logging.getLogger(__name__)

DOC_PROCESSOR_NAME = names.DOC_PROCESSOR


class _Timer(enum.Enum):
    """The processor's own timer messages: its tick, its lease renewal, the
    next round of accepts."""

    TICK = "doc_processor_tick"
    RENEW = "doc_processor_renew"
    ACCEPT = "doc_processor_accept"


TICK, RENEW, ACCEPT = _Timer.TICK, _Timer.RENEW, _Timer.ACCEPT
#: Share of the owner timeout a document job may run past its lease's last
#: renewal (the node's lease fence): another node may take it at the whole.
FENCE_SHARE = 0.8
CALL_TIMEOUT = 10.0
#: Accepts per round before the actor lets other messages in.
ACCEPT_BATCH = 200
MAX_TICK = 2.0
#: Seconds before a RemoveJob the scheduler did not answer is sent again.
REMOVE_RETRY = 1.0
#: Seconds after a clean stop before another node may take this node's
#: documents: the node's scheduler tree stops after the processor; its job
#: hosts stop one after another, each giving its runs ``STOP_GRACE`` to
#: return and ``KILL_GRACE`` more to be killed (a second of margin on top).
#: Until then a document may run here still.
HAND_BACK_AFTER = DEFAULT_HOSTS * (STOP_GRACE + KILL_GRACE) + 1.0
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
#: What a call to a scheduler that is restarting raises.
SCHEDULER_DOWN = (NoProc, CallTimeout, CallFailed)


@dataclass(frozen=True)
class DocStats:
    """Call: the processor's counters since it started, as a dict: ``owned``
    (documents held now), ``accepted``, ``renewed`` (leases renewed),
    ``renew_rounds``, ``renew_ms`` (the last round's duration), ``lost``
    (leases found taken by another node, or gone with their document), ``given_up`` (stopped
    because the store could not be written in time)."""


@dataclass
class Owned:
    """A document this node holds: its lease, the scheduler spec, what was
    last written, and when (``time.monotonic()``) its lease was last renewed."""

    lease: docs.Lease
    spec: dict
    added_to: str | None = None
    errors: int = 0
    written: dict = field(default_factory=dict)
    renewed_at: float = field(default_factory=time.monotonic)
    added_at: float | None = None  # wall time of the last AddJob of its spec


def scheduler_spec(doc: docs.Doc, now: float) -> dict:
    """The scheduler job of a document; its id is derived from (db, doc id)."""
    body = doc.body
    continuous = bool(body.get("continuous", False))
    digest = hashlib.md5(f"{doc.db_name}\x00{doc.doc_id}".encode()).hexdigest()

    def url(value: Any) -> Any:
        return value.get("url") if isinstance(value, dict) else value

    return {
        "id": digest + ("+continuous" if continuous else ""),
        "handler": body.get("handler"),
        "source": url(body.get("source")),
        "target": url(body.get("target")),
        "continuous": continuous,
        "options": body.get("options") or {},
        "db_name": doc.db_name,
        "doc_id": doc.doc_id,
        "user": None,
        "start_time": doc.start_time if doc.start_time is not None else now,
        "isolation": body.get("isolation"),
    }


class DocProcessor(GenServer):
    """args: ``{"store", "timeout" (s), "node_name", "scheduler" (registered name)}``."""

    def init(self, args: Any) -> Any:
        self.db = fdblayer.open(args["store"])
        self.timeout = max(1.0, float(args.get("timeout") or docs.DEFAULT_OWNER_TIMEOUT))
        self.node_name = args["node_name"]
        self.scheduler_name = args.get("scheduler", SCHEDULER_NAME)
        self.tick_every = min(self.timeout / 3.0, MAX_TICK)
        # Store calls give up within a third of the owner timeout: an
        # unreachable store must be known while the leases still hold.
        self.store_timeout = self.timeout / 3.0
        self.fence = LeaseFence(args.get("fence"))
        self._accept_one = fdblayer.transactional(doc_leases.accept.__wrapped__, timeout=self.store_timeout)
        self._bring_forward_tx = fdblayer.transactional(
            doc_leases.bring_forward.__wrapped__, timeout=self.store_timeout
        )
        self.owned: dict[str, Owned] = {}
        self.sched: Any = None
        self.watch: Any = None
        self._ticking = False
        self._tick_again = False
        self._stale = True  # a previous incarnation's jobs may be in the scheduler
        self._timer: int | None = None
        self._renew_timer: int | None = None
        self.waker = Waker(self, self._accept_more)
        self._removing: set[str] = set()  # jobs of documents given up, not yet confirmed removed
        self._replaced: dict[str, str] = {}  # scheduler job id -> queue job id of a replaced document
        self._adding: str | None = None  # the queue job whose AddJob is in flight
        self._reschedule_owed = False  # the fence held again before the scheduler was known
        self.counters = dict.fromkeys(("accepted", "renewed", "renew_rounds", "lost", "given_up"), 0)
        self.renew_ms = 0.0
        activity.set_type_timeout(self.db, DEFAULT_LAYOUT, docs.DOCS_TYPE, self.timeout)
        self.run_task(self._setup(), lambda _: self._setup_done())
        return DEFER_START

    def format_status(self) -> dict:
        return {"node": self.node_name, "owned": len(self.owned), "timeout": self.timeout}

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, DocStats):
            return dict(self.counters, owned=len(self.owned), renew_ms=self.renew_ms)
        return super().handle_call(msg, from_)

    # ------------------------------------------------------------ start
    def _setup(self):
        self._take_back()
        yield from self._remove_stale()
        server = yield Request(self.node, WhereIs(JOBS_SERVER))
        if server is not None:  # start the type's activity monitor now, not at the next type check
            from actors.queue.protocol import ForceCheckTypes

            try:
                yield Request(server, ForceCheckTypes(), CALL_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - the periodic type check will do it
                log.warning("doc_type_check_failed reason=%r", exc)

    def _take_back(self) -> None:
        """Take back the documents a previous incarnation of this node's
        processor held (their leases still name this node) and renew them at
        once: their jobs run on in the scheduler (:meth:`_remove_stale`
        keeps them). A store error leaves them to their leases' expiry."""
        try:
            held = doc_leases.held_by_node(self.db, self.node_name)
        except fdblayer.StoreError as exc:
            log.warning("doc_take_back_failed reason=%r", exc)
            return
        unrenewed = time.monotonic() - self.timeout  # as old as may be: given up unless the renewal below holds
        for lease, doc in held:
            # added by the predecessor, no earlier than the document's last
            # state change: re-added as such unless the scheduler still runs it
            spec = scheduler_spec(doc, time.time())
            self.owned[lease.job.id] = Owned(lease, spec, TAKEN_BACK, renewed_at=unrenewed, added_at=doc.last_updated)
        if held:
            self._renew_all({}, set())
            log.info("docs_taken_back count=%d of=%d", len(self.owned), len(held))

    def _remove_stale(self):
        """Remove the document jobs a previous incarnation left in the scheduler
        that are not ours any more (those of documents taken back run on).
        While the scheduler restarts this is left for a later tick: the
        processor does not fail (and cost its supervisor a restart) because
        its neighbour is restarting."""
        try:
            sched = yield Request(self.node, WhereIs(self.scheduler_name))
            if sched is None:
                return
            mine = {o.spec["id"]: o for o in self.owned.values()}
            kept = []
            for job in (yield Request(sched, Jobs(), CALL_TIMEOUT)):
                if job.get("database") is None:
                    continue
                if job["id"] in mine:
                    kept.append(job["id"])
                else:
                    yield Request(sched, RemoveJob(job["id"]), CALL_TIMEOUT)
            for chunk in range(0, len(kept), MAX_IDS):  # in the table, not a removed run still ending
                ids = kept[chunk : chunk + MAX_IDS]
                answers = yield Request(sched, JobStates(ids), CALL_TIMEOUT)
                for job_id in ids:
                    if answers.get(job_id) is not None:
                        mine[job_id].added_to = str(sched)
        except SCHEDULER_DOWN as exc:
            log.warning("doc_scheduler_unavailable step=remove_stale reason=%r", exc)
            return
        self._stale = False

    def _setup_done(self) -> None:
        self.start_complete()
        self._accept_more()
        self._arm_tick()
        self._arm_renew()

    # ---------------------------------------------------------- accepts
    def _accept_more(self) -> None:
        accepted = 0
        while accepted < ACCEPT_BATCH:
            asked_at = time.monotonic()  # the lease holds from no later than this
            try:
                found, watch = self._accept_one(self.db, self.node_name, time.time())
            except fdblayer.StoreError as exc:  # the next tick's safety net tries again
                log.warning("doc_accept_failed reason=%r", exc)
                break
            if found is not None:
                lease, doc = found
                self.owned[lease.job.id] = Owned(lease, scheduler_spec(doc, time.time()), renewed_at=asked_at)
                self.counters["accepted"] += 1
                log.info("doc_accepted doc=%s/%s rev=%s", lease.db_name, lease.doc_id, lease.rev)
                accepted += 1
            elif watch is not None:
                self._arm_watch(watch)
                break
        else:
            self.send_after(0, ACCEPT)
        if accepted:
            self._move_fence()  # a fresh lease: its job must not start past an old fence
            self._request_tick()

    def _arm_watch(self, watch: Any) -> None:
        old, self.watch = self.watch, watch
        if old is not None:
            old.cancel()
        watch.on_ready(self._signal)

    def _signal(self, watch: Any = None) -> None:
        """Watch callback (the store's watcher thread): wake the actor.

        A watch replaced by ``_arm_watch`` resolves as cancelled: that is no
        news, and waking on it would make every accept cancel, wake and
        accept again (a busy loop)."""
        if watch is not None and watch is not self.watch and watch.cancelled():
            return
        self.waker.wake()

    # ------------------------------------------------------------ ticks
    def handle_info(self, msg: Any) -> None:
        if msg == RENEW:
            self._arm_renew()  # from the round's start: a slow round must not stretch the next one's wait
            self._renew()
        elif msg == TICK:
            self._timer = None
            self._request_tick()
        elif msg == ACCEPT:
            self._accept_more()
        else:
            super().handle_info(msg)

    # ------------------------------------------------------------ leases
    def _arm_renew(self) -> None:
        self.cancel_timer(self._renew_timer)
        self._renew_timer = self.send_after(self.tick_every, RENEW)

    def _renew(self) -> None:
        """Renew the leases now, on the lease timer: never behind a tick.

        The tick (adding jobs to the scheduler, reading their states) can
        take longer than the owner timeout when many jobs start at once;
        renewals run between its steps, so a live node never loses a
        document to its own activity monitor. A lease the tick renewed
        less than half a period ago is left for the next round.
        """
        self._renew_all({}, set(), older_than=time.monotonic() - self.tick_every / 2)

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
        forget (and stop) the documents lost or done."""
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

    def _arm_tick(self) -> None:
        self.cancel_timer(self._timer)
        self._timer = self.send_after(self.tick_every, TICK)

    def _request_tick(self) -> None:
        if self._ticking:
            self._tick_again = True
            return
        self._ticking = True
        self.run_task(self._observe(), self._tick_done)

    def _observe(self):
        """Add what is not in the scheduler yet; read every owned job's state."""
        states: dict[str, dict] = {}
        done: set[str] = set()
        if self._stale:
            yield from self._remove_stale()
        try:
            sched = yield Request(self.node, WhereIs(self.scheduler_name))
        except SCHEDULER_DOWN as exc:  # the node's registry is busy: the next tick looks again
            log.warning("doc_scheduler_unavailable step=find reason=%r", exc)
            return states, done
        if sched is None:
            return states, done
        self.sched = sched
        here = str(sched)
        for jid, o in list(self.owned.items()):
            if o.added_to == here or self.owned.get(jid) is not o:  # added, or released by a renewal meanwhile
                continue
            try:
                asked = time.time()
                self._adding = jid
                try:
                    answer = yield Request(sched, self._add_again(o) if o.added_to else AddJob(o.spec), CALL_TIMEOUT)
                finally:
                    self._adding = None
                    if self.owned.get(jid) is not o:  # released while the add was in flight: undo it
                        self._remove_jobs([o.spec["id"]])
                if self.owned.get(jid) is not o:
                    continue
                o.added_to, o.added_at = here, asked
                if answer == ALREADY_COMPLETED:  # it ended normally while the scheduler restarted
                    states[jid] = self._doc_state(None, None)
                    done.add(jid)
                    continue
                states[jid] = {"id": o.spec["id"], "start_time": o.spec["start_time"]}
            except InvalidJobSpec as exc:
                states[jid] = {"state": docs.DocState.FAILED.value, "info": {"error": str(exc)}, "id": None}
                done.add(jid)
            except Exception as exc:  # noqa: BLE001 - scheduler busy or restarting: retry next tick
                o.errors += 1
                states[jid] = {
                    "state": docs.DocState.ERROR.value,
                    "error_count": o.errors,
                    "info": {"error": reason_text(exc)},
                }
        added = {o.spec["id"]: jid for jid, o in self.owned.items() if o.added_to == here and jid not in done}
        ids = list(added)
        for chunk in range(0, len(ids), MAX_IDS):
            try:  # the owned jobs' states and stats only, in one call (not every job's dict)
                answers = yield Request(sched, JobStates(ids[chunk : chunk + MAX_IDS]), CALL_TIMEOUT)
            except SCHEDULER_DOWN as exc:  # it restarts: the next tick adds the jobs to the new one
                log.warning("doc_scheduler_unavailable step=job_states reason=%r", exc)
                break
            for job_id, answer in answers.items():
                jid = added[job_id]
                held = self.owned.get(jid)
                if held is None:
                    continue
                summary, info = answer if answer is not None else (None, None)
                new = self._doc_state(summary, info)
                if new.get("state") in docs.TERMINAL:
                    done.add(jid)
                if any(held.written.get(k) != v for k, v in new.items()):
                    states[jid] = dict(states.get(jid, {}), **new)
        return states, done

    @staticmethod
    def _add_again(o: Owned) -> AddJob:
        """The AddJob of a document re-added to a restarted scheduler: a
        crashing one keeps backing off for its count of crashes."""
        crashing = o.written.get("state") == "crashing"
        crashes = o.written.get("error_count") if crashing else 0
        reason = (o.written.get("info") or {}).get("error") if crashing else None
        crashes = crashes if type(crashes) is int and crashes > 0 else 0
        return AddJob(o.spec, again=True, added_at=o.added_at, crashes=crashes, crash_reason=reason)

    @staticmethod
    def _doc_state(summary: dict | None, stats: Any) -> dict:
        if summary is None:  # a permanent job leaves the table only when it completes
            return {"state": docs.DocState.COMPLETED.value, "info": stats or None, "id": None, "error_count": 0}
        state = summary["state"]
        if state == "crashing":
            return {"state": state, "error_count": summary["error_count"], "info": {"error": summary["info"]}}
        return {
            "state": state,
            "error_count": summary["error_count"],
            "info": (stats or {}) if state == "running" else None,
        }

    def _tick_done(self, result: tuple) -> None:
        states, done = result
        self._renew_all(states, done)
        self._ticking = False
        if self._tick_again:
            self._tick_again = False
            self._request_tick()
        else:
            self._accept_more()  # a safety net under the watch
            self._arm_tick()

    @staticmethod
    def _answered(_value: Any, error: Exception | None) -> None:
        """A scheduler call whose answer only matters if it failed (logged)."""
        if error is not None:
            log.warning("doc_scheduler_call_failed reason=%r", error)

    # ------------------------------------------------------------- stop
    def terminate(self, reason: Any) -> None:
        if self.watch is not None:
            self.watch.cancel()
        self.waker.close()
        if self.owned:
            try:
                not_before = math.ceil(time.time() + HAND_BACK_AFTER)
                doc_leases.release(self.db, [o.lease for o in self.owned.values()], not_before)
            except Exception:  # noqa: BLE001 - they come back after the timeout anyway
                log.exception("doc_release_failed count=%d", len(self.owned))
        self.db.close()


def doc_children(config: Any, *, fence: str | None = None) -> list[ChildSpec]:
    """The doc processor as a node root child (after the scheduler tree).

    Reads ``[node] store``, ``[node] port`` (the node's name in documents)
    and ``[replicator] doc_owner_timeout`` (seconds, default 30).
    """
    args = {
        "store": config.node.store,
        "timeout": config.replicator.doc_owner_timeout or docs.DEFAULT_OWNER_TIMEOUT,
        "node_name": node_name(config),
        "scheduler": SCHEDULER_NAME,
        "fence": fence,
    }
    return [ChildSpec("doc_processor", DocProcessor, args, name=DOC_PROCESSOR_NAME, shutdown=10.0)]


__all__ = ["DocProcessor", "DocStats", "doc_children", "scheduler_spec", "DOC_PROCESSOR_NAME"]
