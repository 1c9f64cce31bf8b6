"""Scheduler benchmark: reschedule cost against table size, and job actor start rate.

Prints, in one run:

* reschedule time over 1,000 / 10,000 / 50,000 jobs (the pure policy on a
  table in steady state: max_jobs=500 continuous jobs running, the rest
  pending, max_churn=20 rotated per reschedule; starts and stops go to a
  no-op runner, as the seed's tests mock scheduler_sup), median of N runs,
  and the growth ratio per 10x more jobs (n log n would be ~11.5x);
* the time to start 200 job actors on a real node (add 200 continuous jobs
  with max_jobs=200, until all 200 report they run).

Target (issue 6): reschedule over 10,000 jobs under 50 ms, growing no
worse than n log n.
Run: .venv/bin/python bench/bench_scheduler.py [--runs N] [--actors N]
"""
from __future__ import annotations

import argparse
import itertools
import os
import signal
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.scheduler.core import Event, EventType, Job, JobSpec, JobTable, Scheduling, Settings  # noqa: E402


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        return self.now


class _Runner:
    def __init__(self) -> None:
        self.pids = itertools.count(1)

    def start(self, job: Job):
        return next(self.pids), None

    def stop(self, job: Job) -> None:
        pass


def build(n: int, clock: _Clock) -> Scheduling:
    table = JobTable()
    runner = _Runner()
    for i in range(n):
        started = clock.now - n + i
        spec = JobSpec(f"job-{i:06d}", handler="m:f", continuous=True, db_name="db")
        if i < 500:
            history = [Event(EventType.STARTED, started), Event(EventType.ADDED, 0.0)]
            table.put(Job(spec.id, spec, history, pid=next(runner.pids)))
        else:
            history = [Event(EventType.STOPPED, started + 0.5), Event(EventType.STARTED, started),
                       Event(EventType.ADDED, 0.0)]
            table.put(Job(spec.id, spec, history))
    return Scheduling(runner, clock, Settings(max_jobs=500, max_churn=20), table)


def bench_reschedule(n: int, runs: int) -> tuple[float, float]:
    """Median (CPU ms, wall ms) of one reschedule over ``n`` jobs."""
    clock = _Clock()
    sched = build(n, clock)
    cpu, wall = [], []
    for _ in range(runs):
        clock.now += 60
        c0, t0 = time.process_time(), time.perf_counter()
        sched.reschedule()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        assert sched.table.running_count() == min(n, 500)
    return statistics.median(cpu), statistics.median(wall)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_actor_starts(n: int) -> float:
    from actors.node.config import Config
    from actors.scheduler.client import SchedulerClient
    from actors.scheduler.sup import scheduler_children
    from supervision import start_node

    config = Config()
    config.set("replicator", "max_jobs", n + 1)
    node = start_node(free_port(), None, scheduler_children(config, clock="manual"), level=30)
    try:
        s = SchedulerClient(node.client(), timeout=60)
        t0 = time.perf_counter()
        for i in range(n):
            s.add_job({"id": f"b{i}", "handler": "tests.actors.scheduler_fixtures:idle", "continuous": True})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            up = sum(1 for j in s.jobs() if j["pid"] not in (None, "<starting>"))
            if up == n:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"only {up}/{n} job actors started")
        return time.perf_counter() - t0
    finally:
        node.stop()


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(143)  # so the node is stopped in a finally, not orphaned


def main() -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--actors", type=int, default=200)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"reschedule (pure policy; 500 running, the rest pending, max_churn 20); "
          f"load average {load:.1f} on {os.cpu_count()} CPUs:")
    previous = None
    for n in (1_000, 10_000, 50_000):
        cpu, wall = bench_reschedule(n, args.runs)
        growth = "" if previous is None else f"  x{cpu / previous[1]:.1f} for x{n // previous[0]} jobs"
        print(f"  {n:>6} jobs: {cpu:7.2f} ms CPU, {wall:7.2f} ms wall (medians of {args.runs}){growth}")
        previous = (n, cpu)
    seconds = bench_actor_starts(args.actors)
    print(f"start {args.actors} job actors on a real node: {seconds:.2f} s "
          f"({seconds / args.actors * 1000:.1f} ms per job)")


if __name__ == "__main__":
    main()
