"""The scheduler's requests: what a client may ask of a node's scheduler.

Plain frozen dataclasses, pickled across processes; the scheduler actor
(:mod:`actors.scheduler.server`) answers them and
:class:`actors.scheduler.client.SchedulerClient` sends them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from actors.names import SCHEDULER_HOST

__all__ = [
    "AddJob",
    "RemoveJob",
    "RemoveJobs",
    "Reschedule",
    "Jobs",
    "JobsPage",
    "GetJob",
    "JobSummary",
    "JobStates",
    "JobAddress",
    "HealthThreshold",
    "GetStats",
    "GetSettings",
    "SetSetting",
    "LoadJobs",
    "CountRunning",
    "HOST_NAME",
    "DEFAULT_HOSTS",
    "MAX_IDS",
]

#: Registered name of job host ``i`` of the scheduler named "scheduler" (a
#: scheduler named N has hosts "N.host.i").
HOST_NAME = SCHEDULER_HOST
#: Job hosts per node (each runs any number of jobs).
DEFAULT_HOSTS = 4


@dataclass(frozen=True)
class AddJob:
    """Add (or replace) a job; answers its id. ``spec`` is a JobSpec dict.

    ``again``: the caller added this job to this scheduler's predecessor (it
    restarts), at wall time ``added_at``. A job whose run ended normally on
    one of the node's job hosts since (a completed one-shot job) is then
    not run again: the answer is :data:`ALREADY_COMPLETED`. ``crashes``: the job was crashing under the
    predecessor, that many times in a row (``crash_reason`` the last): it
    is added backing off for that count, not started at once.
    ``checkpoint``: what its handler last checkpointed (a document's, kept
    in the store): its first run here resumes from it."""

    spec: dict
    again: bool = False
    added_at: Optional[float] = None
    crashes: int = 0
    crash_reason: Any = None
    checkpoint: Any = None


#: The answer to ``AddJob(again=True)`` for a job that completed meanwhile.
ALREADY_COMPLETED = "already_completed"


@dataclass(frozen=True)
class RemoveJob:
    """Stop and forget a job; answers True if there was one."""

    job_id: Any


#: Most job ids one ``RemoveJobs`` or ``JobStates`` call may carry.
MAX_IDS = 10_000


@dataclass(frozen=True)
class RemoveJobs:
    """Stop and forget each job of ``job_ids`` (a list of at most
    :data:`MAX_IDS` str ids) in one call; answers how many there were."""

    job_ids: list


@dataclass(frozen=True)
class Reschedule:
    """Run one reschedule now (tests, ops)."""


@dataclass(frozen=True)
class Jobs:
    """All jobs as JSON-compatible dicts."""


@dataclass(frozen=True)
class JobsPage:
    """``(total, jobs)``: one page of jobs as dicts, in id order; InvalidRequest
    unless ``limit`` and ``skip`` are ints >= 0."""

    limit: int
    skip: int


@dataclass(frozen=True)
class JobStates:
    """For each id of ``job_ids`` (a list of at most :data:`MAX_IDS` str ids),
    ``(JobSummary's answer, the job's reported stats)`` (with
    ``checkpoints``, a third item: its handler's last checkpoint), or None
    if the job is not in the table: one call where a caller owns many jobs."""

    job_ids: list
    checkpoints: bool = False


@dataclass(frozen=True)
class GetJob:
    """One job as a dict; raises JobNotFound."""

    job_id: Any


@dataclass(frozen=True)
class JobSummary:
    """The seed's job_summary (None if the job is gone)."""

    job_id: Any


@dataclass(frozen=True)
class JobAddress:
    """The address of a job's actor (None unless it runs)."""

    job_id: Any


@dataclass(frozen=True)
class HealthThreshold:
    """The health threshold in seconds."""


@dataclass(frozen=True)
class GetStats:
    """The seed's counters and gauges."""


@dataclass(frozen=True)
class GetSettings:
    """The current settings as a dict."""


@dataclass(frozen=True)
class SetSetting:
    """Change a setting at run time (through the node's settings keeper, if it
    runs one); answers the new value or raises InvalidSetting."""

    key: str
    value: Any


@dataclass(frozen=True)
class LoadJobs:
    """Replace the whole table with ``rows`` (stopping every current job).

    Each row: ``{"spec": dict, "history": [(type, when, reason), ...] newest
    first, "running": bool}``; running rows get a real job actor, then keep
    the given history. Tests drive the seed's reschedule cases through the
    real actor this way. Every row is checked first: a bad one changes
    nothing (InvalidJobSpec, InvalidRequest).
    """

    rows: list


@dataclass(frozen=True)
class CountRunning:
    """To a job host (call): how many of its jobs' code still runs (threads alive)."""
