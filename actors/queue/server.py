"""The jobs server: one activity monitor and one notifier per job type.

:class:`JobsServer` reads the store's job types (those with a timeout) at
start and every ``type_check_period`` (+ jitter), starts an activity monitor
and a notifier for each new type and stops those of types whose timeout was
cleared. At start it first stops every monitor and notifier left by a
previous incarnation, and answers that it started before its first check
(a store of hundreds of types takes longer to serve than a start may).
It monitors what it started and crashes when one dies unexpectedly (the
seed's dead_notifier_restarts_jobs_server), so its supervisor
(rest_for_one) starts it again with a fresh set. Calls:
``GetNotifierServer(type)`` (checks the types once more before answering
``NotFound``) and ``ForceCheckTypes()``. One type check runs at a time;
requests arriving meanwhile are answered after the next check.

Run-time ``[couch_jobs]`` settings: at start the server asks the node's
settings keeper (:class:`~actors.settings.keeper.ConfigServer`) for the
current values (and to be told of every change), so a restarted server
and the per-type actors it starts run with the latest values, not the
node's start-time ones. A
:class:`~actors.settings.config.CouchJobsChanged` call re-arms the type check timer
with the new period and is passed on to every activity monitor and
notifier; it is answered once they all applied it.
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass
from typing import Any, Callable

import fdblayer
from fdblayer.jobs import activity
from fdblayer.jobs.exceptions import NotFound
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import DEFER_START, NOREPLY, Down, GenServer, Request
from supervision.messages import Failure, WhereIs
from supervision.supervisor import StartChild, TerminateChild, WhichChildren

from actors.settings.config import CONFIG_SERVER, CouchJobsChanged, GetCouchJobs, GetCouchJobsInUse
from actors.settings.schema import couch_jobs_settings
from actors.names import ACTIVITY_MONITOR_SUP, NOTIFIER_SUP
from actors.queue.protocol import ForceCheckTypes, GetNotifierServer
from actors.settings.keeper import fan_out

log = logging.getLogger(__name__)


class _Timer(enum.Enum):
    """The server's own timer message."""

    CHECK_TYPES = "check_types"


CHECK_TYPES = _Timer.CHECK_TYPES

#: Registered name of the settings keeper the server asks for ``[couch_jobs]``: the
#: node's (:class:`actors.settings.keeper.ConfigServer`, registered as ``config.CONFIG_SERVER``).
JOBS_CONFIG = CONFIG_SERVER
#: Seconds a per-type actor has to apply new settings.
APPLY_TIMEOUT = 10.0
#: The [couch_jobs] keys the server itself uses.
OWN_KEYS = ("type_check_period_msec", "type_check_max_jitter_msec")


@dataclass
class _TypeActors:
    monitor: Any
    monitor_ref: str
    notifier: Any
    notifier_ref: str


class JobsServer(GenServer):
    """Starts and stops per-type activity monitors and notifiers."""

    def init(self, args: Any) -> Any:
        self.args = args
        self.db = fdblayer.open(args["store"])
        self.cfg: dict = dict(args["couch_jobs"])
        self.generation = 0
        self._check_timer: int | None = None
        self.types: dict[Any, _TypeActors] = {}
        self.sups: dict[str, Any] = {}
        self._checking = False
        self._waiters: list[Callable[[], None]] = []
        self.run_task(self._setup(), lambda _: self._setup_done())
        return DEFER_START

    @property
    def period(self) -> float:
        return couch_jobs_settings(self.cfg).type_check_period

    @property
    def max_jitter(self) -> float:
        return couch_jobs_settings(self.cfg).type_check_max_jitter

    def _setup(self):
        keeper = yield Request(self.node, WhereIs(JOBS_CONFIG))
        if keeper is not None:  # absent in a tree built without it: the start args are the settings
            self.generation, values = yield Request(keeper, GetCouchJobs(self.myAddress))
            self.cfg.update(values)
        for name in (ACTIVITY_MONITOR_SUP, NOTIFIER_SUP):
            sup = yield Request(self.node, WhereIs(name))
            if sup is None:
                raise RuntimeError(f"{name} is not running")
            self.sups[name] = sup
            for child in (yield Request(sup, WhichChildren())):
                if child.addr is not None:
                    yield Request(sup, TerminateChild(child.addr), 30.0)

    def _setup_done(self) -> None:
        """Started, then the first type check: a store of many types (two
        processes each) must not hold the node's start past its supervisor's
        start timeout, which would fail the node at every start."""
        self.start_complete()
        self._request_check(self._schedule_check)

    # ------------------------------------------------------------ calls
    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, ForceCheckTypes):
            self._request_check(lambda: self.reply(from_, "ok"))
            return NOREPLY
        if isinstance(msg, GetNotifierServer):
            if msg.type in self.types:
                return self.types[msg.type].notifier
            self._request_check(lambda: self.reply(from_, self._notifier_or_failure(msg.type)))
            return NOREPLY
        if isinstance(msg, CouchJobsChanged):
            return self._apply_config(msg, from_)
        if isinstance(msg, GetCouchJobsInUse):
            return {key: self.cfg[key] for key in OWN_KEYS}
        return super().handle_call(msg, from_)

    def _apply_config(self, msg: CouchJobsChanged, from_: Any) -> Any:
        if not msg.newer_than(self.generation):
            return "ok"  # older than what we run with
        before = {key: self.cfg[key] for key in OWN_KEYS}
        self.cfg.update(msg.values)
        self.generation = msg.generation
        if before != {key: self.cfg[key] for key in OWN_KEYS} and self._check_timer is not None:
            self._schedule_check()  # the next check is one new period from now
        targets = [a for actors in self.types.values() for a in (actors.monitor, actors.notifier)]
        change = CouchJobsChanged(dict(self.cfg), self.generation)
        fan_out(self, targets, change, APPLY_TIMEOUT, lambda: self.reply(from_, "ok"))
        return NOREPLY

    def _notifier_or_failure(self, job_type: Any) -> Any:
        actors = self.types.get(job_type)
        if actors is None:
            return Failure(NotFound(f"job type {job_type!r} has no activity timeout", job_type=job_type))
        return actors.notifier

    def handle_info(self, msg: Any) -> None:
        if msg == CHECK_TYPES:
            self._check_timer = None
            self._request_check(self._schedule_check)
        elif isinstance(msg, Down) and self._owns(msg.ref):
            log.error("jobs_server_child_exited addr=%s reason=%r", msg.addr, msg.reason)
            raise RuntimeError(f"unexpected_process_exit {msg.addr} {msg.reason!r}")
        else:
            super().handle_info(msg)

    def _owns(self, ref: str) -> bool:
        return any(ref in (a.monitor_ref, a.notifier_ref) for a in self.types.values())

    def terminate(self, reason: Any) -> None:
        self.db.close()

    def format_status(self) -> dict:
        return {"types": list(self.types), "generation": self.generation}

    # ------------------------------------------------------ type checks
    def _schedule_check(self) -> None:
        """Arm the one type check timer (replacing an armed one)."""
        self.cancel_timer(self._check_timer)
        jitter = max(self.period / 2, self.max_jitter)
        self._check_timer = self.send_after(self.period + random.uniform(0, max(jitter, 0.001)), CHECK_TYPES)

    def _request_check(self, when_done: Callable[[], None]) -> None:
        self._waiters.append(when_done)
        if not self._checking:
            self._run_check()

    def _run_check(self) -> None:
        self._checking = True
        waiters, self._waiters = self._waiters, []
        self.run_task(self._check_types(), lambda _: self._check_done(waiters))

    def _check_done(self, waiters: list[Callable[[], None]]) -> None:
        self._checking = False
        for done in waiters:
            done()
        if self._waiters:
            self._run_check()

    def _check_types(self):
        store_types = activity.get_types(self.db, DEFAULT_LAYOUT)
        for job_type in [t for t in store_types if t not in self.types]:
            yield from self._start_type(job_type)
        for job_type in [t for t in self.types if t not in store_types]:
            yield from self._stop_type(job_type)

    def _child_args(self, job_type: Any) -> dict:
        return {
            "type": job_type,
            "store": self.args["store"],
            "couch_jobs": dict(self.cfg),
            "generation": self.generation,
        }

    def _start_type(self, job_type: Any):
        generation = self.generation
        monitor = yield Request(self.sups[ACTIVITY_MONITOR_SUP], StartChild(self._child_args(job_type)), 30.0)
        monitor_ref = self.monitor(monitor)
        notifier = yield Request(self.sups[NOTIFIER_SUP], StartChild(self._child_args(job_type)), 30.0)
        self.types[job_type] = _TypeActors(monitor, monitor_ref, notifier, self.monitor(notifier))
        log.info("job_type_started type=%r", job_type)
        if self.generation != generation:  # settings changed while they started
            fan_out(
                self,
                [monitor, notifier],
                CouchJobsChanged(dict(self.cfg), self.generation),
                APPLY_TIMEOUT,
                lambda: None,
            )

    def _stop_type(self, job_type: Any):
        actors = self.types.pop(job_type)
        self.demonitor(actors.monitor_ref)
        yield Request(self.sups[ACTIVITY_MONITOR_SUP], TerminateChild(actors.monitor), 30.0)
        self.demonitor(actors.notifier_ref)
        yield Request(self.sups[NOTIFIER_SUP], TerminateChild(actors.notifier), 30.0)
        log.info("job_type_stopped type=%r", job_type)
