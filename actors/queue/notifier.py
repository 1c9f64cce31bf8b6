"""Per-type notifiers: tell subscribers when their jobs change state.

One :class:`Notifier` runs per job type with a timeout (started by the jobs
server under :class:`NotifierSup`), with a linked
:class:`~actors.queue.type_monitor.TypeMonitor`. On each ``TypeUpdated`` it reads
the jobs active since that stamp (a range read), then the other subscribed
jobs, by one range read or one read each depending on their share (the
seed's 0.5 ratio), and sends each subscriber a :class:`JobEvent` for a new
state. Running jobs are reported again on every update, even though the
state stays ``running``. A finished or removed job's subscriptions end with
that event. A subscriber that is gone is unsubscribed (its undelivered event
comes back to the node as a dead letter, which tells the notifier).
A :class:`~actors.node.config.CouchJobsChanged` call is passed on to the type
monitor (holdoff and timeout) and answered once it applied it;
:class:`~actors.node.config.GetCouchJobsInUse` answers what the type monitor
runs with.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import fdblayer
from fdblayer.jobs import activity, model
from fdblayer.jobs.codec import decode_data
from fdblayer.jobs.job import JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import NOREPLY, ChildSpec, GenServer, Request, Supervisor

from actors.node.config import CouchJobsChanged, GetCouchJobsInUse
from actors.queue.protocol import JobEvent, SubscriberGone, Subscribe, Unsubscribe
from actors.queue.type_monitor import TypeMonitor, TypeUpdated, type_monitor_settings

log = logging.getLogger(__name__)

GET_JOBS_RANGE_RATIO = 0.5
NOT_FOUND = "not_found"


class Notifier(GenServer):
    """Holds one type's subscriptions and notifies them of state changes."""

    def init(self, args: Any) -> None:
        self.type = args["type"]
        self.db = fdblayer.open(args["store"])
        self.subs: dict[str, dict[str, list]] = {}  # job id -> ref -> [subscriber, state, seq]
        self.refs: dict[str, str] = {}  # ref -> job id
        vs = activity.get_activity_vs(self.db, DEFAULT_LAYOUT, self.type)
        self.type_monitor = self.spawn_link(TypeMonitor, {
            "type": self.type, "vs": vs, "store": args["store"], "generation": args.get("generation", 0),
            **type_monitor_settings(args["couch_jobs"])})

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, Subscribe):
            return self._subscribe(msg)
        if isinstance(msg, Unsubscribe):
            self._unsubscribe(msg.ref)
            return "ok"
        if isinstance(msg, (CouchJobsChanged, GetCouchJobsInUse)):
            self.run_task(self._ask_type_monitor(msg), lambda answer: self.reply(from_, answer))
            return NOREPLY
        return super().handle_call(msg, from_)

    def _ask_type_monitor(self, msg: Any):
        """Pass a settings call on to the linked type monitor (if it fails,
        the link ends this notifier too)."""
        return (yield Request(self.type_monitor, msg, 10.0))

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, TypeUpdated):
            self._notify_subscribers(msg.vs)
        elif isinstance(msg, SubscriberGone):
            self._unsubscribe(msg.ref)
        else:
            super().handle_info(msg)

    def terminate(self, reason: Any) -> None:
        self.db.close()

    def format_status(self) -> dict:
        return {"type": self.type, "subscriptions": len(self.refs)}

    # ------------------------------------------------------ subscriptions
    def _subscribe(self, msg: Subscribe) -> str:
        refs = self.subs.setdefault(msg.job_id, {})
        for ref, sub in refs.items():
            if sub[0] == msg.subscriber:
                refs[ref] = [msg.subscriber, msg.state, msg.seq]
                return ref
        ref = uuid.uuid4().hex
        refs[ref] = [msg.subscriber, msg.state, msg.seq]
        self.refs[ref] = msg.job_id
        return ref

    def _unsubscribe(self, ref: str) -> None:
        job_id = self.refs.pop(ref, None)
        if job_id is None:
            return
        refs = self.subs.get(job_id, {})
        refs.pop(ref, None)
        if not refs:
            self.subs.pop(job_id, None)

    # -------------------------------------------------------- notifying
    def _notify_subscribers(self, active_vs: Any) -> None:
        if not self.subs:
            return
        active = self._active_since(active_vs)
        self._notify_jobs(active)
        inactive_ids = [job_id for job_id in self.subs if job_id not in active]
        if inactive_ids:
            ratio = len(inactive_ids) / len(self.subs)
            self._notify_jobs(self._read_jobs(inactive_ids, ratio))

    def _active_since(self, vs: Any) -> dict[str, tuple]:
        if vs is None:
            return {}
        updated = activity.get_active_since(self.db, DEFAULT_LAYOUT, self.type, vs)
        return {job_id: (vs, JobState.RUNNING.value, data) for job_id, data in updated.items()
                if job_id in self.subs}

    def _read_jobs(self, job_ids: list[str], ratio: float) -> dict[str, tuple]:
        if ratio >= GET_JOBS_RANGE_RATIO:
            wanted = set(job_ids)
            found = model.get_jobs(self.db, DEFAULT_LAYOUT, self.type, wanted.__contains__)
        else:
            found = {k: v for k, v in model.get_job_states(self.db, DEFAULT_LAYOUT, self.type, job_ids).items()
                     if v is not None}
        result = {}
        for job_id in job_ids:
            if job_id in found:
                seq, state, data = found[job_id]
                result[job_id] = (seq, JobState(state).value, decode_data(data))
            else:
                result[job_id] = (None, NOT_FOUND, NOT_FOUND)
        return result

    def _notify_jobs(self, jobs: dict[str, tuple]) -> None:
        for job_id, (vs, state, data) in jobs.items():
            ends = state in (JobState.FINISHED.value, NOT_FOUND)
            for ref, (subscriber, old_state, old_seq) in list(self.subs.get(job_id, {}).items()):
                if state == JobState.RUNNING.value and old_state == state:
                    if not _newer(vs, old_seq):
                        continue
                elif old_state == state:
                    continue
                self.send(subscriber, JobEvent(ref, self.type, job_id, state, data, self.myAddress))
                if ends:
                    self._unsubscribe(ref)
                else:
                    self.subs[job_id][ref] = [subscriber, state, vs]


def _newer(vs: Any, old: Any) -> bool:
    """True if stamp ``vs`` is later than ``old`` (anything beats a non-stamp)."""
    try:
        return old is None or vs > old
    except TypeError:
        return True


class NotifierSup(Supervisor):
    """simple_one_for_one over notifiers (temporary, 10 restarts in 3 s)."""

    def children(self, args: Any) -> tuple:
        flags = {"strategy": "simple_one_for_one", "intensity": 10, "period": 3}
        return flags, [ChildSpec("notifier", Notifier, None, restart="temporary", shutdown="brutal_kill")]
