"""How the scheduler starts and stops running jobs, without ever blocking.

Principle: the scheduler's policy (:mod:`actors.scheduler.core`) sees one
runner with ``start(job) -> (pid, monitor)`` and ``stop(job)``; this module
gives it two and picks by the job's ``isolation``:

* :class:`HostRunner` (``"thread"``, the default): the job runs in a thread
  of one of the node's job hosts (:mod:`actors.scheduler.host`), the least
  loaded live one. Its "pid" is a :class:`HostedJob` and its monitor the
  run's ref, set at once, so the host's ``JobExited`` for it is matched
  however early it comes. The scheduler monitors each host: a host that
  dies ends every job it ran with the host's reason.
* :class:`ActorRunner` (``"process"``): the job is an actor process of its
  own under ``scheduler_sup`` (one ``StartChild`` each, a few in flight).

A stopped run is *ending* until its code no longer runs (its host's
``JobExited``, its process's ``TerminateChild`` answer, or its host's
death): the scheduler still lists it, and a job of the same id (a document
re-added, rotated back in) waits for it before it starts (its pid is a
:class:`Waiting`), so one node never runs two copies of a job at once.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from supervision.messages import Cast, WhereIs
from supervision.supervisor import StartChild, TerminateChild

from actors.scheduler.core import JobRow, JobStartError, reason_text
from actors.scheduler.host import HostedJob, ListHosted, StartHosted, StopHosted

if TYPE_CHECKING:
    from actors.scheduler.server import Scheduler

log = logging.getLogger(__name__)

#: Seconds to wait for a job's start before counting a crash.
START_TIMEOUT = 30.0
#: StartChild calls outstanding at once (scheduler_sup serves them in turn).
MAX_STARTS_IN_FLIGHT = 4
#: Seconds between looks for a host that is down (its supervisor restarts it).
HOST_RETRY = 0.5


@dataclass(frozen=True)
class Starting:
    """The pid of a process job whose actor start is under way."""

    job_id: Any
    token: int

    def __str__(self) -> str:
        return "<starting>"


@dataclass(frozen=True)
class Waiting(Starting):
    """The pid of a job whose start waits for a stopped run of the same id to end."""


class Runners:
    """The scheduler's runner: each job to the runner of its isolation, and
    the ledger of stopped runs whose code has not ended yet."""

    def __init__(self, scheduler: "Scheduler", host_names: list[str]) -> None:
        self.scheduler = scheduler
        self.actors = ActorRunner(scheduler, self)
        self.hosts = HostRunner(scheduler, self, host_names)
        # run key (its monitor ref, or its Starting token) -> the job's row when stopped
        self.ending: dict[Any, JobRow] = {}
        self._ending_ids: collections.Counter = collections.Counter()  # job id -> its runs in ``ending``
        self.tokens = itertools.count(1)

    def _for(self, job: JobRow) -> "ActorRunner | HostRunner":
        return self.actors if job.spec.isolation == "process" else self.hosts

    def start(self, job: JobRow) -> tuple[Any, Any]:
        if self._ending_ids[job.id]:
            return Waiting(job.id, next(self.tokens)), None
        return self._for(job).start(job)

    def stop(self, job: JobRow) -> None:
        if isinstance(job.pid, Waiting):
            return  # it never started
        if isinstance(job.pid, HostedJob):
            self.hosts.stop(job)
        else:
            self.actors.stop(job)

    def pump(self) -> None:
        self.actors.pump()

    # ------------------------------------------------------------ ending
    def ending_began(self, job: JobRow) -> Any:
        """The run of ``job`` was told to stop; its code may still run.
        Returns the run's key for :meth:`ended`."""
        key = job.monitor if job.monitor is not None else job.pid
        if key not in self.ending:
            self._ending_ids[job.id] += 1
        self.ending[key] = job
        return key

    def ended(self, key: Any) -> None:
        """The run ``key`` no longer runs: a job of its id waiting for it starts."""
        job = self.ending.pop(key, None)
        if job is None:
            return
        self._ending_ids[job.id] -= 1
        if not self._ending_ids[job.id]:
            del self._ending_ids[job.id]
        core = self.scheduler.core
        waiting = core.table.get(job.id)
        if waiting is None or not isinstance(waiting.pid, Waiting):
            return
        if self._ending_ids[job.id]:
            return  # another stopped run of the id still ends
        if core.held_back(waiting):
            core.update_state_stopped(waiting)  # pending: started once the fence holds again
            return
        try:
            pid, monitor = self._for(waiting).start(waiting)
        except JobStartError as exc:
            log.warning("job_start_failed job=%r reason=%s", waiting.id, reason_text(exc.reason))
            core.update_state_crashed(waiting, exc.reason)
            return
        core.table.update(waiting, pid=pid, monitor=monitor)
        self.pump()  # a process job's start is queued: send it now (this may run in a call's callback)

    def ending_jobs(self) -> list[JobRow]:
        """Rows of stopped runs still ending whose id is no longer in the table."""
        table = self.scheduler.core.table
        seen: dict[Any, JobRow] = {}
        for job in self.ending.values():
            if table.get(job.id) is None:
                seen.setdefault(job.id, job)
        return list(seen.values())


class ActorRunner:
    """Starts and stops job actors under scheduler_sup, without blocking.

    scheduler_sup starts children one at a time, so at most
    ``MAX_STARTS_IN_FLIGHT`` StartChild calls are outstanding and the rest
    wait here: a call's timeout then measures one start, not a queue.
    """

    def __init__(self, scheduler: "Scheduler", runners: Runners) -> None:
        self.scheduler = scheduler
        self.runners = runners
        self.tokens = itertools.count(1)
        self.queue: collections.deque = collections.deque()
        self.in_flight = 0

    def start(self, job: JobRow) -> tuple[Any, Any]:
        """Queue the start; the scheduler pumps the queue after each step
        (once the table says the job is starting)."""
        token = Starting(job.id, next(self.tokens))
        self.queue.append(token)
        return token, None

    def pump(self) -> None:
        s = self.scheduler
        while self.queue and self.in_flight < MAX_STARTS_IN_FLIGHT:
            token = self.queue.popleft()
            job = s.core.table.get(token.job_id)
            if job is None or job.pid != token:
                continue  # stopped or removed before its turn
            if s.core.held_back(job):
                s.core.update_state_stopped(job)  # pending: started once the fence holds again
                continue
            args = {
                "spec": job.spec.to_dict(),
                "scheduler": s.myAddress,
                "checkpoint": job.checkpoint,
                "fence": s.fence_path,
            }
            self.in_flight += 1
            s.call_async(s.sup, StartChild(args), functools.partial(s.job_start_answered, token), START_TIMEOUT)

    def answered(self) -> None:
        self.in_flight -= 1
        self.pump()

    def stop(self, job: JobRow) -> None:
        s = self.scheduler
        if job.monitor is not None:
            s.demonitor(job.monitor)
        key = self.runners.ending_began(job)
        if isinstance(job.pid, Starting):
            return  # its start answer finds it no longer wanted and stops it
        self.terminate(job.pid, key)

    def terminate(self, addr: Any, key: Any) -> None:
        """Stop the job actor at ``addr``; the run ``key`` has ended once scheduler_sup answers."""
        s = self.scheduler
        s.call_async(s.sup, TerminateChild(addr), functools.partial(self._terminated, key), START_TIMEOUT)

    def _terminated(self, key: Any, _value: Any, error: Exception | None) -> None:
        if error is not None:
            log.debug("job_terminate_failed run=%s reason=%r", key, error)
        self.runners.ended(key)


class HostRunner:
    """Runs jobs as threads of the node's job hosts (registered ``host_names``)."""

    def __init__(self, scheduler: "Scheduler", runners: Runners, host_names: list[str]) -> None:
        self.scheduler = scheduler
        self.runners = runners
        self.names = list(host_names)
        self.addrs: list[Any] = [None] * len(self.names)
        self.monitors: dict[str, int] = {}  # monitor ref -> host index
        self.load: list[int] = [0] * len(self.names)
        self.gone: list[Any] = [None] * len(self.names)  # each host's last dead address

    # ------------------------------------------------------------ hosts
    def find_hosts(self, on_found: Any) -> None:
        """Look every host up (then monitor it); ``on_found(index, addr)`` after each answer."""
        for index in range(len(self.names)):
            self._look_up(index, on_found)

    def _look_up(self, index: int, on_found: Any = None) -> None:
        s = self.scheduler
        s.call_async(s.node, WhereIs(self.names[index]), functools.partial(self._found, index, on_found), START_TIMEOUT)

    def _found(self, index: int, on_found: Any, addr: Any, error: Exception | None) -> None:
        s = self.scheduler
        if addr is None or addr == self.gone[index]:  # not (yet) restarted
            s.start_timer(HOST_RETRY, functools.partial(self._look_up, index, on_found), real=True)
            return
        self.addrs[index] = addr
        self.monitors[s.monitor(addr)] = index
        if on_found is not None:
            on_found(index, addr)

    def host_down(self, ref: str, reason: Any) -> bool:
        """A host's monitor fired: end each of its jobs with the host's
        reason and look for its successor. False if ``ref`` is not a host's."""
        index = self.monitors.pop(ref, None)
        if index is None:
            return False
        s = self.scheduler
        addr = self.addrs[index]
        self.addrs[index], self.gone[index] = None, addr  # no new job goes there until its successor is found
        self.load[index] = 0
        log.warning("job_host_down host=%s reason=%s", self.names[index], reason_text(reason))
        for key, job in list(self.runners.ending.items()):
            if isinstance(job.pid, HostedJob) and job.pid.host == addr:
                self.runners.ended(key)  # its code ended with its host
        for job in [j for j in s.core.table.running_jobs() if isinstance(j.pid, HostedJob) and j.pid.host == addr]:
            s.core.job_exited(job, reason)  # its code ended with its host, for the host's reason
        self._look_up(index)
        return True

    def adopt(self, index: int, addr: Any, on_listed: Any) -> None:
        """Ask host ``index`` for the jobs it runs; ``on_listed(index, addr, details, error)``."""
        s = self.scheduler
        s.call_async(addr, ListHosted(s.myAddress), functools.partial(on_listed, index, addr), START_TIMEOUT)

    def adopted(self, index: int) -> None:
        self.load[index] += 1

    # ------------------------------------------------------------- jobs
    def start(self, job: JobRow) -> tuple[Any, Any]:
        live = [i for i, addr in enumerate(self.addrs) if addr is not None]
        if not live:
            raise JobStartError("no job host is running")
        index = min(live, key=lambda i: self.load[i])
        s = self.scheduler
        ref = uuid.uuid4().hex
        handle = HostedJob(self.addrs[index], job.id, ref)
        self.load[index] += 1
        msg = StartHosted(ref, job.spec.to_dict(), job.checkpoint, s.myAddress)
        s.call_async(handle.host, msg, functools.partial(self._start_answered, handle), START_TIMEOUT)
        return handle, ref

    def _start_answered(self, handle: HostedJob, _pid: Any, error: Exception | None) -> None:
        if error is None:
            return
        s = self.scheduler
        job = s.core.table.get(handle.job_id)
        if job is not None and job.pid == handle:
            log.warning("job_start_failed job=%r host=%s reason=%s", handle.job_id, handle.host, reason_text(error))
            self.released(handle)
            s.core.update_state_crashed(job, reason_text(error))

    def stop(self, job: JobRow) -> None:
        handle = job.pid
        self.released(handle)
        self.runners.ending_began(job)
        self.scheduler.send(handle.host, Cast(StopHosted(handle.ref)))

    def released(self, handle: HostedJob) -> None:
        """A job of ``handle.host`` ended or was stopped: one less on it."""
        for index, addr in enumerate(self.addrs):
            if addr == handle.host and self.load[index] > 0:
                self.load[index] -= 1
