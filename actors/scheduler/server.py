"""The scheduler actor (couch_replicator_scheduler): fair slots for many jobs.

Principle: this actor only turns messages into steps of the pure policy
(:class:`~actors.scheduler.core.Scheduling` over the job table in its
state) and carries out the starts and stops the policy asks for, without
ever blocking: job actors are started through ``scheduler_sup`` with
asynchronous calls, and a job counts as running from the moment its start
is requested.

* ``AddJob(spec)`` (``InvalidJobSpec`` for a job that could never run, see
  :func:`~actors.scheduler.job.check_runnable`) / ``RemoveJob(id)`` /
  ``Reschedule()`` (also on a timer every ``interval`` ms of the actor's
  clock);
* views: ``Jobs()``, ``GetJob(id)``, ``JobSummary(id)``, ``HealthThreshold()``,
  ``GetStats()``, ``GetSettings()``, ``JobAddress(id)``; a removed job stays
  in ``Jobs()`` (and ``GetStats()["ending"]`` counts it) until its code no
  longer runs (:mod:`actors.scheduler.runners`);
* settings (max_jobs, max_churn, interval, max_history, health_threshold):
  at start it reads the current ``[replicator]`` values from the node's
  settings keeper (:class:`actors.settings.keeper.ConfigServer`) and is
  called with every change (``ReplicatorChanged``, the seed's config
  listener), so a scheduler restarted after a crash or a SIGKILL runs with
  the values changed at run time, not with its start args (which are the
  settings only in a tree without the keeper). A keeper restarted after a
  crash hands it its values the same way;
* ``SetSetting(key, value)``: validated here, then set through the keeper
  (in the running node only, never in the config file) or, in a tree
  without one, here alone; answers the new value;
* a job's ``Down``: ``normal`` completes it, anything else (an exception,
  ``killed`` for a SIGKILLed process) is a crash;
* on start it adopts the jobs already running under ``scheduler_sup``
  (it was restarted): they are monitored and kept, not started twice.

A call's arguments are checked before anything changes: a bad one is
answered with a :class:`~actors.scheduler.core.SchedulerError`
(``InvalidJobSpec``, ``InvalidSetting``, ``InvalidRequest``), an id no
job can have (job ids are non-empty str) is a job that is not there; the
scheduler never exits on a caller's mistake. Any other exception is a bug
in its own state, and it crashes (its supervisor restarts it).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

from supervision import DEFER_START, NOREPLY, GenServer, NoProc, Request, SupervisionError
from supervision.messages import Cast, Down, Failure, WhereIs
from supervision.reports import report
from supervision.supervisor import WhichChildren

from actors.settings.config import (
    CONFIG_SERVER,
    RUNTIME_KEYS,
    ConfigError,
    GetConfig,
    ReplicatorChanged,
    SetConfig,
    parse_runtime_value,
)
from actors import names
from actors.settings.schema import seconds
from actors.scheduler.core import (
    Event,
    EventType,
    InvalidRequest,
    InvalidSetting,
    JobRow,
    JobNotFound,
    JobSpec,
    SchedulerError,
    Scheduling,
    Settings,
    apply_settings,
    is_showable_time,
    reason_text,
)
from actors.scheduler.fence import LeaseFence
from actors.scheduler.host import HostedJob, JobExited
from actors.scheduler.job import GetDetails, JobProgress, RunJob, check_runnable
from actors.scheduler.runners import Runners, Starting
from actors.scheduler.protocol import (
    ALREADY_COMPLETED,
    DEFAULT_HOSTS,
    HOST_NAME,
    MAX_IDS,
    AddJob,
    RemoveJob,
    RemoveJobs,
    Reschedule,
    Jobs,
    JobsPage,
    GetJob,
    JobSummary,
    JobStates,
    JobAddress,
    HealthThreshold,
    GetStats,
    GetSettings,
    SetSetting,
    LoadJobs,
)

log = logging.getLogger(__name__)

ADOPT_TIMEOUT = 5.0
#: Seconds to wait for the settings keeper (a change waits for this scheduler to apply it).
KEEPER_TIMEOUT = 20.0
#: The [replicator] keys the scheduler runs with.
SETTING_KEYS = RUNTIME_KEYS["replicator"]


@dataclass(frozen=True)
class _Tick:
    """The interval timer's message."""

    generation: int


# ------------------------------------------------------------------- actor


class Scheduler(GenServer):
    """The scheduler. args: ``{"settings": {...}, "sup_name": "scheduler_sup"}``."""

    def init(self, args: Any) -> Any:
        args = args or {}
        settings = apply_settings(Settings(), args.get("settings") or {})
        host_names = args.get("host_names") or [HOST_NAME.format(i) for i in range(DEFAULT_HOSTS)]
        self.runners = Runners(self, host_names)  # the core's runner, with what only this runner has
        self.fence_path = args.get("fence")  # the node's lease fence, handed to process jobs
        fence = LeaseFence(self.fence_path)
        self.core = Scheduling(self.runners, self.clock, settings, fenced=lambda: fence.left() <= 0)
        self.sup_name = args.get("sup_name", names.SCHEDULER_SUP)
        self.node_name = args.get("node_name")
        self.sup: Any = None
        self.has_keeper = False
        self.config_generation = 0
        self.adopted: set = set()
        self.completed_before: dict = {}  # id -> when (wall) the hosts saw a run of it complete, maybe unreported
        self._adopting: set = set()
        self._tick_generation = 0
        self._timer: int | None = None
        self.last_reschedule_ms = 0.0
        self.call_async(self.node, WhereIs(CONFIG_SERVER), self._keeper_found, ADOPT_TIMEOUT)
        return DEFER_START

    def format_status(self) -> dict:
        return {
            "settings": vars(self.core.settings).copy(),
            "config_generation": self.config_generation,
            "running_jobs": self.core.table.running_count(),
            "pending_jobs": self.core.table.pending_count(),
        }

    # -------------------------------------------------------- settings
    def _keeper_found(self, addr: Any, error: Exception | None) -> None:
        if error is not None:
            self.start_failed(f"cannot look up the settings keeper: {error!r}")
            return
        if addr is None:  # a tree without the keeper: the start args are the settings
            self._settings_known()
            return
        self.has_keeper = True
        self.call_async(addr, GetConfig("replicator", self.myAddress), self._settings_read, KEEPER_TIMEOUT)

    def _settings_read(self, answer: Any, error: Exception | None) -> None:
        if error is not None:
            self.start_failed(f"the settings keeper did not answer: {error!r}")
            return
        generation, values = answer
        self._apply_settings(values, generation)
        self._settings_known()

    def _settings_known(self) -> None:
        self._arm_timer()
        self.call_async(self.node, WhereIs(self.sup_name), self._sup_found, ADOPT_TIMEOUT)

    def _apply_settings(self, values: dict, generation: int | None) -> None:
        """Run with ``values`` from now on (each validated again; a bad one is logged and skipped)."""
        before = self.core.settings
        wanted = {key: value for key, value in values.items() if key in SETTING_KEYS}
        self.core.settings = apply_settings(
            before,
            wanted,
            on_error=lambda exc: report(
                "scheduler_setting_refused", logging.ERROR, key=exc.key, value=exc.value, reason=str(exc)
            ),
        )
        if generation is not None:
            self.config_generation = generation
        changed = {
            key: getattr(self.core.settings, key)
            for key in SETTING_KEYS
            if getattr(self.core.settings, key) != getattr(before, key)
        }
        if changed:
            report("scheduler_settings_applied", generation=self.config_generation, **changed)
        if "interval" in changed and self._timer is not None:
            self._arm_timer()  # the next reschedule is one new interval from now

    def _validated(self, key: str, value: Any) -> Any:
        """A new value of ``key`` as the keeper and the core would accept it.

        Raises:
            InvalidSetting: unknown key, or a bad value.
        """
        try:
            parsed = parse_runtime_value("replicator", key, value)
        except ConfigError as exc:
            raise InvalidSetting(key, value, exc.why) from None
        self.core.settings.with_setting(key, parsed)
        return parsed

    def _set_setting(self, msg: SetSetting, from_: Any) -> Any:
        value = self._validated(msg.key, msg.value)
        if not self.has_keeper:
            self._apply_settings({msg.key: value}, None)
            return getattr(self.core.settings, msg.key)
        self.run_task(self._set_through_keeper(msg.key, value), lambda answer: self.reply(from_, answer))
        return NOREPLY

    def _set_through_keeper(self, key: str, value: Any):
        """The keeper (looked up again: it may have been restarted) sets the value
        and calls back with ReplicatorChanged before it answers."""
        try:
            keeper = yield Request(self.node, WhereIs(CONFIG_SERVER))
            if keeper is None:
                raise NoProc(CONFIG_SERVER)
            yield Request(keeper, SetConfig("replicator", key, value, persist=False), KEEPER_TIMEOUT)
        except SupervisionError as exc:  # NoProc, CallTimeout, CallFailed
            return Failure(exc)
        except ConfigError as exc:  # refused there although valid here: tell the caller, run on
            return Failure(InvalidSetting(key, value, exc.why))
        return getattr(self.core.settings, key)

    # -------------------------------------------------------- adoption
    def _sup_found(self, addr: Any, error: Exception | None) -> None:
        if addr is None:
            self.start_failed(f"{self.sup_name} is not running ({error or 'not registered'})")
            return
        self.sup = addr
        self.call_async(addr, WhichChildren(), self._children_listed, ADOPT_TIMEOUT)

    def _children_listed(self, children: Any, error: Exception | None) -> None:
        if error is not None:
            self.start_failed(f"cannot list {self.sup_name}'s children: {error!r}")
            return
        addrs = [c.addr for c in children if c.addr is not None]
        self._adopting = set(range(len(addrs))) | {("host", i) for i in range(len(self.runners.hosts.names))}
        self.runners.hosts.find_hosts(lambda index, addr: self.runners.hosts.adopt(index, addr, self._adopt_hosted))
        if not self._adopting:
            self.start_complete()
            return
        for i, addr in enumerate(addrs):
            self.call_async(addr, GetDetails(self.myAddress), functools.partial(self._adopt, i, addr), ADOPT_TIMEOUT)

    def _adopt(self, index: int, addr: Any, details: Any, error: Exception | None) -> None:
        if details is not None:
            spec = JobSpec.from_dict(details["spec"])
            started = details["started_at"]
            history = [Event(EventType.STARTED, started), Event(EventType.ADDED, spec.start_time or started)]
            ref = self.monitor(addr)
            self.core.table.put(
                JobRow(spec.id, spec, history, addr, ref, dict(details["stats"]), details["checkpoint"])
            )
            self.adopted.add(spec.id)
            if not details["running"]:
                self.send(addr, Cast(RunJob(self.myAddress)))
            log.info("job_adopted job=%r pid=%s", spec.id, addr)
        else:
            log.warning("job_adopt_failed pid=%s reason=%r", addr, error)
        self._adopted_one(index)

    def _adopt_hosted(self, index: int, addr: Any, details: Any, error: Exception | None) -> None:
        """Host ``index`` listed the jobs it runs: they are this scheduler's
        now; a run told to stop is ending (a job of its id waits for it)."""
        for entry in details or []:
            if "completed" in entry:  # a run that ended normally while no scheduler heard it
                job_id, at = entry["completed"], entry.get("at", 0.0)
                self.completed_before[job_id] = max(at, self.completed_before.get(job_id, at))
                continue
            spec = JobSpec.from_dict(entry["spec"])
            handle = HostedJob(addr, spec.id, entry["ref"])
            started = entry["started_at"]
            history = [Event(EventType.STARTED, started), Event(EventType.ADDED, spec.start_time or started)]
            row = JobRow(spec.id, spec, history, handle, entry["ref"], dict(entry["stats"]), entry["checkpoint"])
            if entry.get("stopping"):
                self.runners.ending_began(row)
                continue
            self.core.table.put(row)
            self.runners.hosts.adopted(index)
            self.adopted.add(spec.id)
        if error is not None:
            log.warning("job_host_list_failed host=%s reason=%r", addr, error)
        elif details:
            log.info("jobs_adopted host=%s count=%d", addr, len(details))
        self._adopted_one(("host", index))

    def _adopted_one(self, key: Any) -> None:
        """One adoption answered; the start completes with the last."""
        if key not in self._adopting:
            return  # a host found again later (restarted): nothing to complete
        self._adopting.discard(key)
        if not self._adopting:
            self.start_complete()

    # ----------------------------------------------------------- calls
    def handle_call(self, msg: Any, from_: Any) -> Any:
        try:
            if isinstance(msg, SetSetting):
                return self._set_setting(msg, from_)
            return self._answer(msg)
        except SchedulerError as exc:
            return Failure(exc)
        finally:
            self.runners.pump()

    def _answer(self, msg: Any) -> Any:
        core = self.core
        if isinstance(msg, AddJob):
            spec = JobSpec.from_dict(msg.spec, now=self.clock.time())
            self._check_add(msg)
            completed_at = self.completed_before.pop(spec.id, None)
            if msg.again and completed_at is not None and completed_at >= (msg.added_at or 0.0):
                if spec.id not in self.core.table:
                    return ALREADY_COMPLETED  # the run of the caller's add ended normally
            check_runnable(spec)  # here, where the jobs' processes fork from: their path, their files
            return self._add_job(spec, msg.crashes, msg.crash_reason, msg.checkpoint)
        if isinstance(msg, RemoveJob):
            if self._job(msg.job_id) is None:
                return False
            self.adopted.discard(msg.job_id)
            return core.remove_job(msg.job_id)
        if isinstance(msg, RemoveJobs):
            return self._remove_jobs(msg.job_ids)
        if isinstance(msg, Reschedule):
            self._reschedule()
            return "ok"
        if isinstance(msg, LoadJobs):
            return self._load_jobs(msg.rows)
        if isinstance(msg, Jobs):
            return core.jobs(self._node_name(), extra=self.runners.ending_jobs())
        if isinstance(msg, JobsPage):
            return core.jobs_page(msg.limit, msg.skip, self._node_name(), extra=self.runners.ending_jobs())
        if isinstance(msg, GetJob):
            job = self._job(msg.job_id) or self._ending(msg.job_id)
            if job is None:
                raise JobNotFound(msg.job_id)
            return core.job_json(job, self._node_name())
        if isinstance(msg, JobSummary):
            return None if self._job(msg.job_id) is None else core.job_summary(msg.job_id)
        if isinstance(msg, JobStates):
            return self._job_states(msg.job_ids, msg.checkpoints is True)
        if isinstance(msg, JobAddress):
            job = self._job(msg.job_id)
            if job is None or isinstance(job.pid, Starting):
                return None
            return job.pid.host if isinstance(job.pid, HostedJob) else job.pid
        if isinstance(msg, HealthThreshold):
            return core.settings.health_threshold
        if isinstance(msg, GetStats):
            return dict(core.stats(), last_reschedule_ms=self.last_reschedule_ms, ending=len(self.runners.ending))
        if isinstance(msg, GetSettings):
            return vars(core.settings).copy()
        if isinstance(msg, ReplicatorChanged):
            if (
                not isinstance(msg.values, dict)
                or isinstance(msg.generation, bool)
                or not isinstance(msg.generation, int)
            ):
                raise InvalidRequest("ReplicatorChanged", msg, "values must be a dict, generation an int")
            self.has_keeper = True  # also when a keeper restarted after ours hands us its values
            if msg.newer_than(self.config_generation):
                self._apply_settings(msg.values, msg.generation)
            return "ok"
        # The seed ignores a call it does not know (its caller times out); this
        # one answers the caller an error at once, and never exits for it.
        log.warning("scheduler_unknown_call message=%.200r", msg)
        raise InvalidRequest("call", type(msg).__name__, "not a scheduler call")

    def _job(self, job_id: Any) -> JobRow | None:
        """The row of ``job_id``; None for an id no job can have (not a str: it
        may not even be hashable)."""
        return self.core.table.get(job_id) if isinstance(job_id, str) else None

    @staticmethod
    def _check_add(msg: AddJob) -> None:
        """AddJob's arguments besides the spec, or InvalidRequest (nothing changed)."""
        if type(msg.again) is not bool:
            raise InvalidRequest("again", msg.again, "must be a bool")
        if msg.added_at is not None and (type(msg.added_at) not in (int, float) or msg.added_at != msg.added_at):
            raise InvalidRequest("added_at", msg.added_at, "must be None or a number of seconds")
        if type(msg.crashes) is not int or msg.crashes < 0:
            raise InvalidRequest("crashes", msg.crashes, "must be an int >= 0")

    def _ending(self, job_id: Any) -> JobRow | None:
        """The row of a removed job whose run is still ending (the job lists
        show it until it has ended), or None."""
        return next((job for job in self.runners.ending_jobs() if job.id == job_id), None)

    def _add_job(self, spec: JobSpec, crashes: int = 0, reason: Any = None, checkpoint: Any = None) -> Any:
        existing = self.core.table.get(spec.id)
        if (
            spec.id in self.adopted
            and existing is not None
            and existing.pid is not None
            and existing.spec.to_dict() == dict(spec.to_dict(), start_time=existing.spec.start_time)
        ):
            # Re-added after a scheduler restart: the job already runs here.
            self.adopted.discard(spec.id)
            self.core.table.update(existing, spec=spec)
            return spec.id
        self.adopted.discard(spec.id)
        self.core.add_job(spec, crashes, reason, checkpoint)
        return spec.id

    def _load_jobs(self, rows: list) -> int:
        if not isinstance(rows, (list, tuple)):
            raise InvalidRequest("rows", rows, "must be a list")
        loaded = [self._load_row(i, row) for i, row in enumerate(rows)]  # all checked before any change
        core = self.core
        for job in list(core.table):
            core.stop_job(job)
            core.table.delete(job.id)
        self.adopted.clear()
        for spec, history, running in loaded:
            job = core.table.put(JobRow(spec.id, spec, history))
            if running:
                core.start_job(job)
                started = core.table.get(spec.id)
                assert started is not None  # a failed start keeps the row (crashed)
                core.table.update(started, history=history)
        return len(core.table)

    @staticmethod
    def _load_row(index: int, row: Any) -> tuple[JobSpec, list, bool]:
        """``(spec, history, running)`` of one LoadJobs row.

        Raises:
            InvalidJobSpec: a bad spec.
            InvalidRequest: a row that is not ``{"spec", "history", "running"?}``,
                or a history entry that is not ``(type, when, reason)`` with a
                known type and a time the clock can show.
        """
        name = f"rows[{index}]"
        if not isinstance(row, dict) or "spec" not in row or not isinstance(row.get("history"), (list, tuple)):
            raise InvalidRequest(name, row, 'must be {"spec": dict, "history": list, "running": bool}')
        spec = JobSpec.from_dict(row["spec"])
        history = []
        for entry in row["history"]:
            try:
                kind, when, reason = entry
                event = Event(EventType(kind), when, reason)
            except (TypeError, ValueError):
                raise InvalidRequest(f"{name}.history", entry, "must be (type, when, reason)") from None
            if isinstance(when, bool) or not isinstance(when, (int, float)) or not is_showable_time(when):
                raise InvalidRequest(f"{name}.history", entry, "when must be epoch seconds the clock can show")
            history.append(event)
        return spec, history, bool(row.get("running"))

    def _node_name(self) -> str:
        return self.node_name or (str(self.node) if self.node is not None else "local")

    # ----------------------------------------------------- casts / info
    def handle_cast(self, msg: Any) -> None:
        self._handle_cast(msg)
        self.runners.pump()  # a job's end may have queued a process job's start

    def _handle_cast(self, msg: Any) -> None:
        if isinstance(msg, JobProgress):
            self._progress(msg)
            return
        if isinstance(msg, JobExited):
            self._hosted_exited(msg)
            return
        log.warning("scheduler_unknown_cast message=%.200r", msg)  # ignored, as in the seed

    def _progress(self, msg: JobProgress) -> None:
        if not isinstance(msg.stats, dict) or not all(isinstance(key, str) for key in msg.stats):
            log.warning("job_progress_ignored job=%r reason=not_str_keyed_dict stats=%.200r", msg.job_id, msg.stats)
            return
        job = self._job(msg.job_id)
        if job is None or (job.pid is not None and job.pid != msg.addr):
            return  # a job gone, or an older instance's last words
        changes: dict = {"stats": dict(job.stats, **msg.stats)}
        if msg.has_checkpoint:
            changes["checkpoint"] = msg.checkpoint
        self.core.table.update(job, **changes)

    @staticmethod
    def _check_ids(job_ids: Any) -> list:
        """``job_ids`` if it is a list of at most MAX_IDS str ids, else InvalidRequest."""
        if not isinstance(job_ids, list) or len(job_ids) > MAX_IDS or not all(isinstance(i, str) for i in job_ids):
            raise InvalidRequest("job_ids", job_ids, f"must be a list of at most {MAX_IDS} str ids")
        return job_ids

    def _remove_jobs(self, job_ids: Any) -> int:
        removed = 0
        for job_id in self._check_ids(job_ids):
            self.adopted.discard(job_id)
            removed += self.core.remove_job(job_id)
        return removed

    def _job_states(self, job_ids: Any, checkpoints: bool = False) -> dict:
        out: dict = {}
        for job_id in self._check_ids(job_ids):
            job = self._job(job_id)
            if job is None:
                out[job_id] = None
                continue
            state = (self.core.job_summary(job.id), dict(job.stats))
            out[job_id] = (*state, job.checkpoint) if checkpoints else state
        return out

    def _hosted_exited(self, msg: JobExited) -> None:
        """A hosted job's own end (the seed's DOWN for its process)."""
        self.runners.ended(msg.ref)  # if it was a stopped run, its code has now ended
        job = self.core.table.by_monitor(msg.ref)
        if job is None or not isinstance(job.pid, HostedJob) or job.pid.ref != msg.ref:
            return  # stopped meanwhile, or not this run
        self.runners.hosts.released(job.pid)
        self.adopted.discard(job.id)
        self.core.job_exited(job, msg.reason)

    def handle_info(self, msg: Any) -> None:
        self._handle_info(msg)
        self.runners.pump()

    def _handle_info(self, msg: Any) -> None:
        if isinstance(msg, _Tick):
            if msg.generation == self._tick_generation:
                self._reschedule()
                self._arm_timer()
            return
        if isinstance(msg, Down):
            if self.runners.hosts.host_down(msg.ref, msg.reason):
                return
            job = self.core.table.by_monitor(msg.ref)
            if job is not None:
                self.adopted.discard(job.id)
                self.core.job_exited(job, msg.reason)
            return
        log.warning("scheduler_unknown_info message=%.200r", msg)  # ignored, as in the seed

    # ------------------------------------------------------- internals
    def _reschedule(self) -> None:
        t0 = time.perf_counter()
        self.core.reschedule()
        self.last_reschedule_ms = (time.perf_counter() - t0) * 1000

    def _arm_timer(self) -> None:
        self.cancel_timer(self._timer)
        self._tick_generation += 1
        interval = seconds("replicator", "interval", self.core.settings.interval)
        assert interval is not None  # its schema allows no infinity
        self._timer = self.send_after(interval, _Tick(self._tick_generation))

    def job_start_answered(self, token: Starting, addr: Any, error: Exception | None) -> None:
        """scheduler_sup answered a StartChild for ``token``'s job."""
        self.runners.actors.answered()
        job = self.core.table.get(token.job_id)
        if job is not None and job.pid != token:
            job = None  # not the run this start was for
        if error is not None:
            if job is not None:
                log.warning("job_start_failed job=%r reason=%s", token.job_id, reason_text(error))
                self.core.update_state_crashed(job, reason_text(error))
            self.runners.ended(token)
            return
        if job is None:
            self.runners.actors.terminate(addr, token)
            return
        ref = self.monitor(addr)
        self.core.table.update(job, pid=addr, monitor=ref)
        self.send(addr, Cast(RunJob(self.myAddress)))


__all__ = [
    "AddJob",
    "RemoveJob",
    "Reschedule",
    "Jobs",
    "GetJob",
    "JobSummary",
    "JobAddress",
    "HealthThreshold",
    "GetStats",
    "GetSettings",
    "SetSetting",
    "LoadJobs",
    "Scheduler",
    "InvalidSetting",
    "InvalidRequest",
]
