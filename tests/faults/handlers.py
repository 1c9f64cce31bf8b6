"""Scheduler job handlers of the fault tests (imported by the node's job actors)."""

from __future__ import annotations

import os
from typing import Any


def tracked(ctx: Any) -> None:
    """A continuous job that appends ``start <job id> <pid>`` to ``options["log"]``,
    then idles until stopped (the handler runs in the job actor's process)."""
    with open(ctx.options["log"], "a") as f:
        f.write(f"start {ctx.job_id} {os.getpid()}\n")
    while not ctx.wait(3600):
        pass


def running_jobs(log_path: str, pids: set[int]) -> dict[int, str]:
    """Which job each of ``pids`` runs, from the last ``start`` line of each pid."""
    out: dict[int, str] = {}
    try:
        lines = open(log_path).read().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "start" and int(parts[2]) in pids:
            out[int(parts[2])] = parts[1]
    return out
