"""The doc processor: a node adopts permanent jobs (documents) through the queue.

Principle: ownership is the queue's, slots are the scheduler's. One
:class:`DocProcessor` per node accepts queue jobs of the reserved type
:data:`~fdblayer.docs.DOCS_TYPE` (each one a document of
:mod:`fdblayer.docs`), hands each accepted document to the node's scheduler
(``AddJob``) and keeps its queue jobs alive by updating each of them on a
lease timer of its own (a third of the type's activity timeout, at most
2 s; a transaction a batch, see :mod:`actors.docs.renewals`),
which never waits for the tick: a tick that adds hundreds of jobs to the
scheduler runs longer than the timeout, and renewals run between its
steps. The tick's own renewal records each document's state as the scheduler
reports it (``JobStates``: each owned job's summary, its stats as
``info`` and its handler's last checkpoint, which the document's next run,
here or on another node, resumes from) and notices what changed under it:

* the document was replaced (or deleted): its queue job is finished (so
  it is pending again, and whoever accepts it runs the new revision) and
  the scheduler job removed; the queue job is due only once the old run
  has surely stopped: :data:`~actors.docs.renewals.REPLACED_AFTER` after the scheduler confirmed
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
import hashlib
import logging
import math
import time
from dataclasses import dataclass
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
)
from actors.scheduler.core import InvalidJobSpec, reason_text
from actors.names import SCHEDULER as SCHEDULER_NAME
from actors.docs.renewals import CALL_TIMEOUT, MAYBE_ADDED, TAKEN_BACK, LeaseKeeping, Owned
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
#: Accepts per round before the actor lets other messages in.
ACCEPT_BATCH = 200
MAX_TICK = 2.0
#: Seconds after a clean stop before another node may take this node's
#: documents: the node's scheduler tree stops after the processor; its job
#: hosts stop one after another, each giving its runs ``STOP_GRACE`` to
#: return and ``KILL_GRACE`` more to be killed (a second of margin on top).
#: Until then a document may run here still.
HAND_BACK_AFTER = DEFAULT_HOSTS * (STOP_GRACE + KILL_GRACE) + 1.0
#: What a call to a scheduler that is restarting raises.
SCHEDULER_DOWN = (NoProc, CallTimeout, CallFailed)


@dataclass(frozen=True)
class DocStats:
    """Call: the processor's counters since it started, as a dict: ``owned``
    (documents held now), ``accepted``, ``renewed`` (leases renewed),
    ``renew_rounds`` (rounds that renewed every lease they tried), ``renew_ms``
    (the last round's duration, up to its failure if it failed), ``lost``
    (leases found taken by another node, or gone with their document), ``given_up`` (stopped
    because the store could not be written in time)."""


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


class DocProcessor(LeaseKeeping, GenServer):
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
            self.owned[lease.job.id] = Owned(
                lease,
                spec,
                TAKEN_BACK,
                written={"checkpoint": doc.checkpoint},
                renewed_at=unrenewed,
                added_at=doc.last_updated,
            )
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
                spec, written = scheduler_spec(doc, time.time()), {"checkpoint": doc.checkpoint}
                self.owned[lease.job.id] = Owned(lease, spec, written=written, renewed_at=asked_at)
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
                    answer = yield Request(sched, self._add_request(o), CALL_TIMEOUT)
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
                if o.added_to is None and isinstance(exc, (CallTimeout, CallFailed)):
                    o.added_to = MAYBE_ADDED  # it may still be added: a release removes it
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
                answers = yield Request(sched, JobStates(ids[chunk : chunk + MAX_IDS], True), CALL_TIMEOUT)
            except SCHEDULER_DOWN as exc:  # it restarts: the next tick adds the jobs to the new one
                log.warning("doc_scheduler_unavailable step=job_states reason=%r", exc)
                break
            for job_id, answer in answers.items():
                jid = added[job_id]
                held = self.owned.get(jid)
                if held is None:
                    continue
                summary, info, checkpoint = answer if answer is not None else (None, None, None)
                new = self._doc_state(summary, info)
                if summary is not None and checkpoint is not None:
                    new["checkpoint"] = checkpoint  # kept in the store: a run elsewhere or later resumes there
                if new.get("state") in docs.TERMINAL:
                    done.add(jid)
                if any(held.written.get(k) != v for k, v in new.items()):
                    states[jid] = dict(states.get(jid, {}), **new)
        return states, done

    @classmethod
    def _add_request(cls, o: Owned) -> AddJob:
        """The AddJob of a document not added to this scheduler yet: a
        plain one, or :meth:`_add_again` for one its predecessor ran."""
        if o.added_to not in (None, MAYBE_ADDED):
            return cls._add_again(o)
        return AddJob(o.spec, checkpoint=o.written.get("checkpoint"))

    @staticmethod
    def _add_again(o: Owned) -> AddJob:
        """The AddJob of a document re-added to a restarted scheduler: a
        crashing one keeps backing off for its count of crashes."""
        crashing = o.written.get("state") == "crashing"
        crashes = o.written.get("error_count") if crashing else 0
        reason = (o.written.get("info") or {}).get("error") if crashing else None
        crashes = crashes if type(crashes) is int and crashes > 0 else 0
        return AddJob(
            o.spec,
            again=True,
            added_at=o.added_at,
            crashes=crashes,
            crash_reason=reason,
            checkpoint=o.written.get("checkpoint"),
        )

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
