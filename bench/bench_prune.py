"""Benchmark: what pruning costs a drain (issue 29, item 1).

Principle: the same drain twice, with retention off (``--keep-finished 0
--keep-failed 0``: kept for ever) and with a tiny one (``--keep-finished
S``, S well below the drain's length, so that the host prunes all along
the drain, full batches of 500 one after the other), alternating the two
modes over several rounds on fresh stores. Each round enqueues ``--jobs``
no-op jobs with no host running (1,000 per transaction), starts ``otpjobs
worker --concurrency N bench=peer_tasks:noop``, and polls the type's
``succeeded`` event counter every 20 ms (pruning lowers the job count,
never that counter). The rate is jobs over the time from the first job
finished to the last (the host's start-up left out); the figures printed
are the medians of the rounds (with the jobs already pruned when the drain
ended, and how long the idle host then took to prune the rest) and the
median of each round's ratio (the two drains of a round run
back to back, so a machine's changing load weighs less on it).

Usage::

    .venv/bin/python bench/bench_prune.py [--jobs 50000] [--workers 4] [--rounds 3]
        [--keep 0.5] [--durability NORMAL]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]

import worker_peers as wp  # noqa: E402

import fdblayer  # noqa: E402
from actors import jobs  # noqa: E402
from fdblayer.jobs import counts, overview  # noqa: E402
from fdblayer.jobs.keys import DEFAULT_LAYOUT  # noqa: E402
from supervision.system import stop_node  # noqa: E402

JOB_TYPE = "bench"


def drain(jobs_count: int, workers: int, keep: float, durability: str) -> dict:
    """One drain on a fresh store; ``keep`` 0: no pruning."""
    with tempfile.TemporaryDirectory(prefix="bench-prune-") as directory:
        url = f"sqlite:///{directory}/store.db?synchronous={durability}"
        db = fdblayer.open(url)
        try:
            jobs.set_type_timeout(db, JOB_TYPE, 30)
            for start in range(0, jobs_count, 1000):
                tr = db.create_transaction()
                for n in range(start, min(jobs_count, start + 1000)):
                    jobs.enqueue(tr, JOB_TYPE, id=f"j{n:08d}")
                tr.commit()
            port = wp.free_port()
            log = open(Path(directory) / "host.log", "w")
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "actors",
                    "worker",
                    "--store",
                    url,
                    "--concurrency",
                    str(workers),
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                    "--keep-finished",
                    str(keep),
                    "--keep-failed",
                    str(keep),
                    f"{JOB_TYPE}=peer_tasks:noop",
                ],
                env=wp.child_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(BENCH)])),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                first = end = None
                deadline = time.perf_counter() + 600
                while time.perf_counter() < deadline:
                    done = counts.read_events(db, DEFAULT_LAYOUT, JOB_TYPE)["succeeded"]
                    left = _jobs(db)  # read after done: what was pruned by then
                    now = time.perf_counter()
                    if done and first is None:
                        first = (now, done)
                    if done >= jobs_count:
                        end = now
                        break
                    if proc.poll() is not None:
                        raise RuntimeError(f"the host exited {proc.returncode}: {wp.log_tail(log.name)}")
                    time.sleep(0.02)
                if end is None:
                    raise RuntimeError("the drain did not end in 600 s")
                cleared = None
                while keep and time.perf_counter() < deadline:  # the idle host clears what is left
                    if _jobs(db) == 0:
                        cleared = time.perf_counter() - end
                        break
                    time.sleep(0.02)
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                stop_node(port)
                log.close()
        finally:
            db.close()
    seconds = end - first[0]
    return {
        "rate": (jobs_count - first[1]) / seconds if seconds > 0 else float("inf"),
        "seconds": seconds,
        "pruned": jobs_count - left,
        "cleared": cleared,
    }


def _jobs(db) -> int:
    """The type's jobs, from its counters (a few keys; counted from the rows on the first read)."""
    return int(overview.type_counts(db, DEFAULT_LAYOUT, JOB_TYPE, time.time())["jobs"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=float, default=0.5, help="--keep-finished of the pruning drain (seconds)")
    parser.add_argument("--durability", choices=["FULL", "NORMAL"], default="NORMAL")
    args = parser.parse_args()
    results: dict = {"off": [], "on": []}
    for round_ in range(args.rounds):
        for mode, keep in (("off", 0.0), ("on", args.keep)) if round_ % 2 == 0 else (("on", args.keep), ("off", 0.0)):
            got = drain(args.jobs, args.workers, keep, args.durability)
            results[mode].append(got)
            after = "" if got["cleared"] is None else f", the rest {got['cleared']:.2f} s after"
            print(
                f"round {round_ + 1} pruning {mode:3}: {got['rate']:9.0f} jobs/s over {got['seconds']:.2f} s, "
                f"{got['pruned']} pruned by the end{after}",
                flush=True,
            )
    off = statistics.median(r["rate"] for r in results["off"])
    on = statistics.median(r["rate"] for r in results["on"])
    pruned = statistics.median(r["pruned"] for r in results["on"])
    cleared = statistics.median(r["cleared"] for r in results["on"])
    print(
        f"\ndrain of {args.jobs} no-op jobs, {args.workers} workers, SQLite synchronous={args.durability}, "
        f"median of {args.rounds}:"
    )
    print(f"  without pruning:        {off:9.0f} jobs/s")
    print(
        f"  with pruning beside it: {on:9.0f} jobs/s (keep {args.keep:g} s; {pruned:.0f} jobs pruned by the end, "
        f"the rest {cleared:.2f} s after it on the idle host)"
    )
    ratios = [a["rate"] / b["rate"] for a, b in zip(results["on"], results["off"], strict=True)]
    print(f"  ratio with / without:   {on / off:9.3f} (median of the rounds' ratios: {statistics.median(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
