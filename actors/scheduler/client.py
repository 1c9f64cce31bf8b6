"""The scheduler's client: calls to a node's scheduler from a plain process."""

from __future__ import annotations

from typing import Any

from actors import names
from actors.scheduler.protocol import (
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
    CountRunning,
    DEFAULT_HOSTS,
)

__all__ = ["SchedulerClient"]


class SchedulerClient:
    """Convenience calls to a node's scheduler from a plain process.

    Args:
        client: a :class:`supervision.Client` of the node.
        name: the scheduler's registered name.
    """

    def __init__(self, client: Any, name: str = names.SCHEDULER, timeout: float = 10.0) -> None:
        self.client = client
        self.name = name
        self.timeout = timeout

    def call(self, msg: Any) -> Any:
        return self.client.call(self.name, msg, self.timeout)

    def add_job(self, spec: dict) -> Any:
        return self.call(AddJob(spec))

    def remove_job(self, job_id: Any) -> bool:
        return self.call(RemoveJob(job_id))

    def reschedule(self) -> None:
        self.call(Reschedule())

    def jobs(self) -> list[dict]:
        return self.call(Jobs())

    def jobs_page(self, limit: int, skip: int) -> tuple[int, list[dict]]:
        """``(total, jobs)`` of one page in id order (cheap with many jobs)."""
        return self.call(JobsPage(limit, skip))

    def job(self, job_id: Any) -> dict:
        return self.call(GetJob(job_id))

    def job_summary(self, job_id: Any) -> dict | None:
        return self.call(JobSummary(job_id))

    def remove_jobs(self, job_ids: list) -> int:
        """Remove each job of ``job_ids`` in one call; how many there were."""
        return self.call(RemoveJobs(job_ids))

    def job_states(self, job_ids: list) -> dict:
        """``{id: (job_summary, stats) or None}`` for each of ``job_ids`` in one call."""
        return self.call(JobStates(job_ids))

    def load_jobs(self, rows: list) -> int:
        return self.call(LoadJobs(rows))

    def job_address(self, job_id: Any) -> Any:
        return self.call(JobAddress(job_id))

    def health_threshold(self) -> int:
        return self.call(HealthThreshold())

    def stats(self) -> dict:
        return self.call(GetStats())

    def settings(self) -> dict:
        return self.call(GetSettings())

    def set_setting(self, key: str, value: Any) -> Any:
        return self.call(SetSetting(key, value))

    def live_jobs(self, hosts: int = DEFAULT_HOSTS, sup_name: str = names.SCHEDULER_SUP) -> int:
        """How many jobs' code runs now: job processes under ``sup_name`` and
        job threads of the ``hosts`` job hosts (a stopped job counts until
        its code has ended)."""
        processes = sum(1 for child in self.client.which_children(sup_name) if child.addr is not None)
        return processes + sum(
            self.client.call(f"{self.name}.host.{i}", CountRunning(), self.timeout) for i in range(hosts)
        )
