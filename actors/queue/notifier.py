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

Flow control: a subscriber that confirms what it reads (the client
library's inbox does, :class:`EventsRead`) has at most :data:`WINDOW`
events in flight; later ones wait here, the latest per subscription. A
subscriber stopped or frozen (SIGSTOP, a debugger) therefore holds a few of
Thespian's 20 in-flight sends, never all of them, so the other subscribers
keep getting their events at once; after :data:`STALLED_AFTER` seconds
with a full window its subscriptions are dropped (``subscriber_dropped``).
A :class:`~actors.settings.config.CouchJobsChanged` call is passed on to the type
monitor (holdoff and timeout) and answered once it applied it;
:class:`~actors.settings.config.GetCouchJobsInUse` answers what the type monitor
runs with.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import fdblayer
from fdblayer.jobs import activity, model
from fdblayer.jobs.codec import decode_data
from fdblayer.jobs.exceptions import CorruptValue
from fdblayer.jobs.job import JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import NOREPLY, ChildSpec, GenServer, Request, Restart, Supervisor

from actors.settings.config import CouchJobsChanged, GetCouchJobsInUse
from actors.queue.protocol import EventsRead, JobEvent, SubscriberGone, Subscribe, Unsubscribe
from actors.queue.type_monitor import TypeMonitor, TypeUpdated, type_monitor_settings

log = logging.getLogger(__name__)

GET_JOBS_RANGE_RATIO = 0.5
NOT_FOUND = "not_found"
#: Events a confirming subscriber may have unread before the next ones wait.
WINDOW = 4
#: Seconds a subscriber may leave its window full before its subscriptions are dropped.
STALLED_AFTER = 30.0
#: Seconds between checks for stalled subscribers (while one has a full window).
STALL_CHECK = 5.0


@dataclass
class Outbox:
    """What a confirming subscriber has unread, and what waits for it."""

    addr: Any
    unread: int = 0
    held: dict = field(default_factory=dict)  # ref -> the latest JobEvent not sent yet
    refs: set = field(default_factory=set)
    full_since: float | None = None


class Notifier(GenServer):
    """Holds one type's subscriptions and notifies them of state changes."""

    def init(self, args: Any) -> None:
        self.type = args["type"]
        self.db = fdblayer.open(args["store"])
        self.subs: dict[str, dict[str, list]] = {}  # job id -> ref -> [subscriber, state, seq]
        self.refs: dict[str, str] = {}  # ref -> job id
        self.threads: dict[str, Any] = {}  # ref -> its subscribing thread (a process's inbox shares one address)
        self.outboxes: dict[str, Outbox] = {}  # str(subscriber address) -> its outbox, for confirming ones
        self.stall_timer: Any = None
        vs = activity.get_activity_vs(self.db, DEFAULT_LAYOUT, self.type)
        self.type_monitor = self.spawn_link(
            TypeMonitor,
            {
                "type": self.type,
                "vs": vs,
                "store": args["store"],
                "generation": args.get("generation", 0),
                **type_monitor_settings(args["couch_jobs"]),
            },
        )

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, Subscribe):
            self.reply(from_, self._subscribe(msg))
            self._catch_up(msg.job_id)
            return NOREPLY
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
        elif isinstance(msg, EventsRead):
            self._events_read(msg)
        else:
            super().handle_info(msg)

    def terminate(self, reason: Any) -> None:
        self.db.close()

    def format_status(self) -> dict:
        return {
            "type": self.type,
            "subscriptions": len(self.refs),
            "held_events": sum(len(box.held) for box in self.outboxes.values()),
        }

    # ------------------------------------------------------ subscriptions
    def _subscribe(self, msg: Subscribe) -> str:
        refs = self.subs.setdefault(msg.job_id, {})
        for ref, sub in refs.items():
            if sub[0] == msg.subscriber and self.threads.get(ref) == msg.thread:
                refs[ref] = [msg.subscriber, msg.state, msg.seq]
                return ref
        ref = uuid.uuid4().hex
        refs[ref] = [msg.subscriber, msg.state, msg.seq]
        self.refs[ref] = msg.job_id
        if msg.thread is not None:
            self.threads[ref] = msg.thread
        if msg.confirms:
            key = str(msg.subscriber)
            self.outboxes.setdefault(key, Outbox(msg.subscriber)).refs.add(ref)
        return ref

    def _catch_up(self, job_id: str) -> None:
        """Tell a new subscription what changed since its client read the
        job: a change committed in between may have reached this notifier
        before the subscription did (then no later update of the type would
        report it). One read of the job; a store error leaves it to the
        type's next update."""
        try:
            self._notify_jobs(self._read_jobs([job_id], 0.0))
        except fdblayer.StoreError as exc:
            log.warning("subscription_catch_up_failed type=%r job=%r error=%r", self.type, job_id, exc)

    def _unsubscribe(self, ref: str, drop_held: bool = True) -> None:
        job_id = self.refs.pop(ref, None)
        self.threads.pop(ref, None)
        if job_id is None:
            return
        refs = self.subs.get(job_id, {})
        sub = refs.pop(ref, None)
        if not refs:
            self.subs.pop(job_id, None)
        box = self.outboxes.get(str(sub[0])) if sub is not None else None
        if box is not None:
            box.refs.discard(ref)
            if drop_held:
                box.held.pop(ref, None)
            if not box.refs and not box.held:
                del self.outboxes[str(box.addr)]

    # ------------------------------------------------------ flow control
    def _deliver(self, subscriber: Any, event: JobEvent) -> None:
        """Send ``event`` now, or hold it (the latest per subscription) while
        its confirming subscriber has a full window."""
        box = self.outboxes.get(str(subscriber))
        if box is None:
            self.send(subscriber, event)
        elif box.unread < WINDOW and not box.held:
            self._send_counted(box, event)
        else:
            box.held.pop(event.ref, None)
            box.held[event.ref] = event  # moved to the end: events leave in the order of their latest change
            self._arm_stall_check()

    def _send_counted(self, box: Outbox, event: JobEvent) -> None:
        box.unread += 1
        if box.unread >= WINDOW and box.full_since is None:
            box.full_since = time.monotonic()
            self._arm_stall_check()
        self.send(box.addr, event)

    def _events_read(self, msg: EventsRead) -> None:
        box = self.outboxes.get(str(msg.subscriber))
        if box is None:
            return
        box.unread = max(0, box.unread - max(0, int(msg.count)))
        if box.unread < WINDOW:
            box.full_since = None
        while box.held and box.unread < WINDOW:
            ref = next(iter(box.held))
            self._send_counted(box, box.held.pop(ref))
        if not box.refs and not box.held:
            del self.outboxes[str(box.addr)]

    def _arm_stall_check(self) -> None:
        if self.stall_timer is None:
            self.stall_timer = self.start_timer(STALL_CHECK, self._check_stalled)

    def _check_stalled(self) -> None:
        self.stall_timer = None
        now = time.monotonic()
        for key, box in list(self.outboxes.items()):
            if box.full_since is not None and now - box.full_since >= STALLED_AFTER:
                log.warning(
                    "subscriber_dropped type=%r subscriber=%s subscriptions=%d held=%d reason=stopped_reading",
                    self.type,
                    box.addr,
                    len(box.refs),
                    len(box.held),
                )
                for ref in list(box.refs):
                    self._unsubscribe(ref)
                self.outboxes.pop(key, None)
        if any(box.full_since is not None or box.held for box in self.outboxes.values()):
            self._arm_stall_check()

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
        return {job_id: (vs, JobState.RUNNING.value, data) for job_id, data in updated.items() if job_id in self.subs}

    def _read_jobs(self, job_ids: list[str], ratio: float) -> dict[str, tuple]:
        if ratio >= GET_JOBS_RANGE_RATIO:
            wanted = set(job_ids)
            found = model.get_jobs(self.db, DEFAULT_LAYOUT, self.type, wanted.__contains__)
        else:
            found = {
                k: v
                for k, v in model.get_job_states(self.db, DEFAULT_LAYOUT, self.type, job_ids).items()
                if v is not None
            }
        result = {}
        for job_id in job_ids:
            if job_id in found:
                seq, state, data = found[job_id]
                result[job_id] = (seq, JobState(state).value, _decoded(data))
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
                self._deliver(subscriber, JobEvent(ref, self.type, job_id, state, data, self.myAddress))
                if ends:
                    self._unsubscribe(ref, drop_held=False)  # a held last event still goes out
                else:
                    self.subs[job_id][ref] = [subscriber, state, vs]


def _decoded(data: bytes) -> Any:
    """A job's data for an event; corrupt data reads as None (logged by the store layer's readers)."""
    try:
        return decode_data(data)
    except CorruptValue:
        return None


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
        return flags, [ChildSpec("notifier", Notifier, None, restart=Restart.TEMPORARY, shutdown="brutal_kill")]
