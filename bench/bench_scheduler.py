"""Scheduler benchmark: reschedule cost against table size, and job actor start rate.

Prints, in one run:

* reschedule time over 1,000 / 10,000 / 50,000 jobs (the pure policy on a
  table in steady state: max_jobs=500 continuous jobs running, the rest
  pending, max_churn=20 rotated per reschedule; starts and stops go to a
  no-op runner, as the seed's tests mock scheduler_sup), median of N runs,
  and the growth ratio per 10x more jobs (n log n would be ~11.5x);
* running jobs on a real node, as threads of the job hosts (100 and 500)
  and as a process each (100): time until all run, total PSS and open
  descriptors of the node's processes while they run, time until every
  job's code has stopped.

* 10,000 documents over two real nodes (``python -m actors node start``,
  max_jobs 500 each, the seed's 30 s owner timeout) on one store: time
  until every document is owned, lease renewals per second, the last
  renewal round's duration, and leases lost by a live node (must be 0).

Targets: reschedule over 10,000 jobs under 50 ms, growing no worse than
n log n (issue 6); 500 running jobs within 1 GB of PSS, all running within
10 s; no lease lost with 10,000 documents over two nodes (issue 16).
Run: .venv/bin/python bench/bench_scheduler.py [--runs N] [--process-500]
     [--docs N] [--docs-store sqlite|postgres]
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

from actors.scheduler.core import Event, EventType, JobRow, JobSpec, JobTable, Scheduling, Settings  # noqa: E402


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        return self.now


class _Runner:
    def __init__(self) -> None:
        self.pids = itertools.count(1)

    def start(self, job: JobRow):
        return next(self.pids), None

    def stop(self, job: JobRow) -> None:
        pass


def build(n: int, clock: _Clock) -> Scheduling:
    table = JobTable()
    runner = _Runner()
    for i in range(n):
        started = clock.now - n + i
        spec = JobSpec(f"job-{i:06d}", handler="m:f", continuous=True, db_name="db")
        if i < 500:
            history = [Event(EventType.STARTED, started), Event(EventType.ADDED, 0.0)]
            table.put(JobRow(spec.id, spec, history, pid=next(runner.pids)))
        else:
            history = [
                Event(EventType.STOPPED, started + 0.5),
                Event(EventType.STARTED, started),
                Event(EventType.ADDED, 0.0),
            ]
            table.put(JobRow(spec.id, spec, history))
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


def _pss_and_fds(pgid: int) -> tuple[float, int, int]:
    """(total PSS in MB, open descriptors, processes) of a node's process group."""
    from tests.procs import group_pids, open_fds, pss_mb

    pids = group_pids(pgid)
    return pss_mb(pids), open_fds(pids), len(pids)


def bench_running(n: int, isolation: str) -> dict:
    """Start ``n`` checkpointing jobs (max_jobs=n): time to all running, memory
    and descriptors while they run, then time to stop them all."""
    from actors.settings.config import Config
    from actors.scheduler.client import SchedulerClient
    from actors.scheduler.sup import scheduler_children
    from supervision import start_node

    config = Config()
    config.set("replicator", "max_jobs", n)
    node = start_node(free_port(), None, scheduler_children(config, clock="manual"), level=30)
    try:
        s = SchedulerClient(node.client(), timeout=60)
        t0 = time.perf_counter()
        for i in range(n):
            s.add_job(
                {
                    "id": f"b{i}",
                    "handler": "tests.actors.scheduler_fixtures:checkpointing",
                    "continuous": True,
                    "db_name": "db",
                    "isolation": isolation,
                }
            )
        s.reschedule()  # the last job added fills the table: the seed starts it at the next reschedule
        _wait(lambda: sum(1 for j in s.jobs() if j["pid"] not in (None, "<starting>")) == n, f"{n} running")
        started = time.perf_counter() - t0
        time.sleep(2.0)  # a couple of checkpoints each
        pss, fds, procs = _pss_and_fds(node.pgid)
        t0 = time.perf_counter()
        s.load_jobs([])
        _wait(lambda: s.live_jobs() == 0, "all stopped")
        stopped = time.perf_counter() - t0
        return {"start_s": started, "pss_mb": pss, "fds": fds, "procs": procs, "stop_s": stopped}
    finally:
        node.stop()


def _start_doc_node(url: str, workdir: Path, name: str, max_jobs: int):
    """A node started as a user would, with the doc processor; returns (proc, port)."""
    import subprocess

    port = free_port()
    cfg = workdir / f"{name}.ini"
    cfg.write_text(f"[replicator]\nmax_jobs = {max_jobs}\nhandlers = tests.actors.scheduler_fixtures\n")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), OTPJOBS_RUNTIME_DIR=str(workdir))
    with open(workdir / f"{name}.log", "w") as log:  # the node keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors",
                "node",
                "start",
                "--store",
                url,
                "--port",
                str(port),
                "--config",
                str(cfg),
                "--log-level",
                "warning",
                "--http-port",
                "0",
            ],
            cwd=str(root),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, port


def bench_docs(n: int, store: str, max_jobs: int = 500) -> dict:
    """``n`` documents over two nodes: time until all are owned, renewals per
    second over a quiet minute, leases lost (the doc processors' counters)."""
    import tempfile

    import fdblayer
    from actors import docs
    from actors.docs.processor import DOC_PROCESSOR_NAME, DocStats
    from supervision import connect
    from tests.procs import group_pids

    workdir = Path(tempfile.mkdtemp(prefix="bench-docs-"))
    server = None
    if store == "postgres":
        from fdblayer.backends.postgres_server import TemporaryServer

        server = TemporaryServer()
        server.start()
        url = server.url(prefix="benchdocs")
    else:
        url = f"sqlite:///{workdir}/store.db"
    db = fdblayer.open(url)
    nodes = [_start_doc_node(url, workdir, name, max_jobs) for name in ("a", "b")]
    try:
        clients: list = []
        for _, port in nodes:
            _wait(lambda: _answers(lambda: connect(port)), f"the node on port {port}", 60)
            clients.append(connect(port))

        def stats() -> list[dict]:
            return [c.call(DOC_PROCESSOR_NAME, DocStats(), 30) for c in clients]

        _wait(lambda: _answers(stats), "both doc processors", 60)
        body = {"handler": "tests.actors.scheduler_fixtures:checkpointing", "continuous": True}

        @fdblayer.transactional
        def put_many(tr, ids):
            for doc_id in ids:
                docs.put(tr, "_replicator", doc_id, body)

        t0 = time.perf_counter()
        for i in range(0, n, 500):
            put_many(db, [f"doc{j:05d}" for j in range(i, min(n, i + 500))])
        added = time.perf_counter() - t0

        def all_owned() -> bool:
            try:
                return sum(s["owned"] for s in stats()) == n
            except Exception:  # noqa: BLE001 - a processor busy accepting answers late: ask again
                return False

        _wait(all_owned, f"{n} documents owned", 900)
        owned = time.perf_counter() - t0
        first = stats()
        t1 = time.perf_counter()
        time.sleep(60)
        last = stats()
        span = time.perf_counter() - t1
        renewed = sum(b["renewed"] - a["renewed"] for a, b in zip(first, last, strict=True))
        return {
            "added_s": added,
            "owned_s": owned,
            "renewals_per_s": renewed / span,
            "renew_ms": max(s["renew_ms"] for s in last),
            "lost": sum(s["lost"] + s["given_up"] for s in last),
            "split": [s["owned"] for s in last],
        }
    finally:
        for proc, _ in nodes:
            proc.terminate()
        for proc, _ in nodes:
            try:
                proc.wait(60)
            except Exception:  # noqa: BLE001 - a stuck node is killed with its group
                os.killpg(proc.pid, signal.SIGKILL)
            _wait(lambda: not group_pids(proc.pid), "the node's processes gone", 30)
        db.close()
        if server is not None:
            server.stop()


def _answers(call) -> bool:
    try:
        call()
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def _wait(predicate, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(143)  # so the node is stopped in a finally, not orphaned


def main() -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--process-500", action="store_true", help="also run 500 jobs of a process each (needs some GB of memory)"
    )
    parser.add_argument("--docs", type=int, default=10_000, help="documents over two nodes (0: skip)")
    parser.add_argument("--docs-store", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"reschedule (pure policy; 500 running, the rest pending, max_churn 20); "
        f"load average {load:.1f} on {os.cpu_count()} CPUs:"
    )
    previous = None
    for n in (1_000, 10_000, 50_000):
        cpu, wall = bench_reschedule(n, args.runs)
        growth = "" if previous is None else f"  x{cpu / previous[1]:.1f} for x{n // previous[0]} jobs"
        print(f"  {n:>6} jobs: {cpu:7.2f} ms CPU, {wall:7.2f} ms wall (medians of {args.runs}){growth}")
        previous = (n, cpu)
    print("running jobs on a real node (a handler that waits and checkpoints each second):")
    figures = {}
    for isolation, n in [("thread", 100), ("thread", 500), ("process", 100)] + (
        [("process", 500)] if args.process_500 else []
    ):
        f = figures[(isolation, n)] = bench_running(n, isolation)
        print(
            f"  {n:>4} jobs, isolation {isolation:7}: all running in {f['start_s']:6.2f} s, "
            f"PSS {f['pss_mb']:7.1f} MB in {f['procs']:3} processes, {f['fds']:6} descriptors, "
            f"all stopped in {f['stop_s']:5.2f} s"
        )
    t, p = figures[("thread", 100)], figures[("process", 100)]
    print(
        f"  thread/process at 100 jobs: start x{p['start_s'] / t['start_s']:.1f} faster, "
        f"PSS x{p['pss_mb'] / t['pss_mb']:.1f} smaller, descriptors x{p['fds'] / t['fds']:.1f} fewer"
    )
    if args.docs:
        d = bench_docs(args.docs, args.docs_store)
        print(f"{args.docs} documents over two nodes on {args.docs_store} (max_jobs 500 each, owner timeout 30 s):")
        print(
            f"  added in {d['added_s']:.1f} s, all owned {d['owned_s']:.1f} s after the first put "
            f"(split {d['split'][0]}/{d['split'][1]}); {d['renewals_per_s']:.0f} lease renewals/s over a "
            f"minute, last round {d['renew_ms']:.0f} ms; leases lost by a live node: {d['lost']} (target 0)"
        )


if __name__ == "__main__":
    main()
