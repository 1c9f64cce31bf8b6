"""Benchmark: ``async def`` handlers, many awaiting at once in one worker.

Principle: a backlog of jobs whose handler awaits ``asyncio.sleep(S)`` is
enqueued first (one transaction per 5,000 jobs) with its type paused, then
``otpjobs worker --concurrency W --async-concurrency C`` starts on it;
once its workers are up the type is resumed, and the driver polls the
type's ``succeeded`` counter every 20 ms: jobs/s from the resume to the
last job's end (claims, hand-outs, starts and ends all included). The
bound is ``W * C / S`` jobs/s (every slot always awaiting); with a sync
``time.sleep(S)`` handler (``--sync``) it is ``W / S``. A SQLite store,
``synchronous=NORMAL``.

Measured (2 CPUs, loaded; issue 29, item 5): 1,000 jobs of 0.1 s on one
worker with ``--async-concurrency 100``: 1.2 s, about 820 jobs/s (bound
1,000); 5,000 jobs: about 890 jobs/s; ``--async-concurrency 1000``: about
5,300 jobs/s (bound 10,000); 4 workers x 100: about 3,300 jobs/s (bound
4,000); the sync handler on one worker: 10 jobs/s.

Usage::

    .venv/bin/python bench/bench_async.py [--jobs 1000] [--sleep 0.1] [--workers 1]
        [--async-concurrency 100,10] [--sync]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fdblayer  # noqa: E402
from actors import jobs  # noqa: E402
from fdblayer.jobs import counts  # noqa: E402
from fdblayer.jobs.keys import DEFAULT_LAYOUT  # noqa: E402

TASKS = """
import asyncio, time

async def nap(ctx):
    await asyncio.sleep(ctx.data["s"])

def nap_sync(ctx):
    time.sleep(ctx.data["s"])
"""


def _enqueue(db, job_type: str, count: int, seconds: float, chunk: int = 5000) -> None:
    @fdblayer.transactional
    def add(tr, n: int) -> None:
        for _ in range(n):
            jobs.enqueue(tr, job_type, {"s": seconds})

    for start in range(0, count, chunk):
        add(db, min(chunk, count - start))


def run_one(workdir: Path, handler: str, count: int, seconds: float, workers: int, limit: int) -> dict:
    store = f"sqlite:///{workdir}/bench-{handler}-{limit}.db?synchronous=NORMAL"
    db = fdblayer.open(store)
    job_type = f"{handler}{limit}"
    _enqueue(db, job_type, 1, seconds)  # the type exists (its timeout set), then is paused: nothing starts
    jobs.pause(db, job_type)
    _enqueue(db, job_type, count - 1, seconds)
    log_path = workdir / f"{job_type}.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT), THESPLOG_FILE=str(workdir / "thespian.log"))
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors",
                "worker",
                "--store",
                store,
                "--concurrency",
                str(workers),
                "--async-concurrency",
                str(limit),
                "--log-level",
                "info",
                f"{job_type}=bench_async_tasks:{handler}",
            ],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while "workers_up" not in log_path.read_text() and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(0.2)  # the last worker adopted
        jobs.resume(db, job_type)
        started = time.monotonic()
        while True:
            done = counts.read_events(db, DEFAULT_LAYOUT, job_type)["succeeded"]
            if done >= count or proc.poll() is not None:
                break
            time.sleep(0.02)
        took = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        db.close()
    if done < count:
        raise SystemExit(f"the host stopped early:\n{log_path.read_text()[-3000:]}")
    return {
        "handler": handler,
        "jobs": count,
        "sleep": seconds,
        "workers": workers,
        "async_concurrency": limit,
        "seconds": took,
        "jobs_per_s": count / took,
        "bound": workers * (limit if handler == "nap" else 1) / seconds if seconds > 0 else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--sleep", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--async-concurrency", type=lambda s: [int(n) for n in s.split(",")], default=[100])
    parser.add_argument("--sync", action="store_true", help="also the same backlog with a sync handler")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        workdir = Path(tmp)
        (workdir / "bench_async_tasks.py").write_text(textwrap.dedent(TASKS))
        rows = [run_one(workdir, "nap", args.jobs, args.sleep, args.workers, c) for c in args.async_concurrency]
        if args.sync:
            count = args.jobs if args.sleep <= 0 else min(args.jobs, int(20 * args.workers / args.sleep))
            rows.append(run_one(workdir, "nap_sync", count, args.sleep, args.workers, 1))  # about 20 s at most
    print(
        f"{'handler':<9} {'jobs':>6} {'sleep':>6} {'workers':>7} {'async_c':>7} {'seconds':>8} "
        f"{'jobs/s':>8} {'bound':>8}"
    )
    for r in rows:
        bound = "-" if r["bound"] is None else f"{r['bound']:.0f}"
        print(
            f"{r['handler']:<9} {r['jobs']:>6} {r['sleep']:>6g} {r['workers']:>7} {r['async_concurrency']:>7} "
            f"{r['seconds']:>8.2f} {r['jobs_per_s']:>8.0f} {bound:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
