"""Value types of the jobs layer: job states, the job handle, job records.

Principle: what crosses the API is small, immutable and picklable. The job
handle a worker gets from ``accept`` is a frozen dataclass carrying only the
job's identity and its lock (the seed's ``#{job => true, jlock => ...}``
map); everything else is read from the store when needed.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from fdblayer.jobs.keys import JobType

__all__ = ["JobState", "Job", "JobInfo", "job_state"]


class JobState(str, enum.Enum):
    """The state of a job, as in the RFC's transition diagram.

    ``pending -> running -> finished``, with ``running -> pending`` when a
    job is resubmitted or re-enqueued for inactivity, and ``finished ->
    pending`` when a finished job is added again.
    """

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    #: Only in the worker pools' views (``jobs.status``, ``/_jobs``): a running
    #: job a host claimed whose handler has not started. The queue's own calls
    #: (``get_job_state``) say ``running``.
    CLAIMED = "claimed"

    def __str__(self) -> str:
        return self.value


def job_state(lock: str | None, seq: Any) -> JobState:
    """Return the state that a DATA row's ``lock`` and ``seq`` encode.

    A lock means running; no lock and no seq means finished; no lock and a
    seq (0) means pending. This is the seed's ``job_state/2``.
    """
    if lock is not None:
        return JobState.RUNNING
    if seq is None:
        return JobState.FINISHED
    return JobState.PENDING


@dataclass(frozen=True)
class Job:
    """A handle on a job a worker accepted.

    It proves ownership: ``update`` and ``finish`` check that ``lock`` is
    still the job's lock in the store, and raise ``Halt`` if it is not.

    Attributes:
        type: The job type.
        id: The job id.
        lock: The lock taken by ``accept`` (a random hex string).
        scheduled_time: The scheduled time last seen in the store, if known.
        resubmit: Whether the job is flagged to be re-enqueued when it
            finishes, as last seen by ``update`` or ``resubmit``.
    """

    type: JobType
    id: str
    lock: str
    scheduled_time: int | None = None
    resubmit: bool = False

    def replace(self, **changes: Any) -> "Job":
        """Return a copy of the handle with some fields changed."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class JobInfo:
    """A snapshot of one job's record, for inspection and tests.

    Attributes:
        type: The job type.
        id: The job id.
        state: The job state.
        data: The decoded job data (None if it is corrupt: reported).
        scheduled_time: The scheduled time (seconds since the epoch, 0: now).
        resubmit: Whether a running job will be re-enqueued on finish.
        seq: 0 (pending), None (finished) or the running versionstamp.
        lock: The running job's lock, else None.
    """

    type: JobType
    id: str
    state: JobState
    data: dict[str, Any] | None
    scheduled_time: int
    resubmit: bool
    seq: Any
    lock: str | None
