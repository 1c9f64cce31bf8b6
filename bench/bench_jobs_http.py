"""HTTP benchmark of the queue's views: ``/_jobs`` and ``/_jobs/{type}`` on a real node.

Prints p50/p99 latency of, one client on one keep-alive connection:

* ``GET /_jobs`` (every type with its counts);
* ``GET /_jobs/{type}?limit=100&skip=<random>`` (a page of all jobs);
* ``GET /_jobs/{type}?state=pending&limit=100`` and ``?state=running``;
* ``GET /_utils/``, the status page (its queue part: every type's counts,
  running jobs, latest failures, next delayed jobs);

with ``--jobs`` queue jobs (100,000) over ``--types`` types (20), a tenth
of them running (claimed as a worker pool does) and a few failed. The
ratio printed beside each is against the same read straight on the store
in this process (``fdblayer.jobs.overview``), so what HTTP, JSON and the
node add is visible. Target (issue 15): p50 under 50 ms.

Setup: the jobs are written with ``add_many`` (1,000 per transaction) and
claimed with ``work.claim`` before the node starts; the node is ``otpjobs
node start`` on that store (``[replicator] max_jobs = 0``), stopped with
SIGTERM in a ``finally``.

Run: .venv/bin/python bench/bench_jobs_http.py [--jobs N] [--types N] [--requests N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fdblayer  # noqa: E402
from fdblayer.jobs import api, overview, work  # noqa: E402
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def seed(db, jobs: int, types: int) -> float:
    started = time.monotonic()
    per_type = jobs // types
    for t in range(types):
        job_type = f"type{t:02d}"
        api.set_type_timeout(db, job_type, 3600)
        for first in range(0, per_type, 1000):
            api.add_many(
                db,
                job_type,
                [
                    (f"j{n:06d}", {"n": n, "to": f"user{n}@example.com"})
                    for n in range(first, min(per_type, first + 1000))
                ],
            )
        claimed = work.claim(db, L, job_type, time.time(), per_type // 10, "bench-host", 3).claimed
        fails = [work.Outcome(c.job, "fail", None, {"type": "E", "message": "x", "traceback": ""}) for c in claimed[:5]]
        work.complete(db, L, fails, time.time())
    return time.monotonic() - started


def timed(conn: http.client.HTTPConnection, path: str) -> float:
    t = time.perf_counter()
    conn.request("GET", path)
    reply = conn.getresponse()
    body = reply.read()
    elapsed = time.perf_counter() - t
    assert reply.status == 200, (path, reply.status, body[:200])
    if not path.startswith("/_utils/"):
        json.loads(body)
    return elapsed


def direct(fn, requests: int) -> list[float]:
    out = []
    for _ in range(requests):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--types", type=int, default=20)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="bench-jobs-http-"))
    store = f"sqlite:///{work_dir}/store.db?synchronous=NORMAL"
    db = fdblayer.open(store)
    seconds = seed(db, args.jobs, args.types)
    print(
        f"seeded {args.jobs:,} jobs over {args.types} types in {seconds:.1f} s "
        f"({args.jobs // args.types // 10:,} running and 5 failed per type); {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    http_port = free_port()
    (work_dir / "node.ini").write_text(
        f"[node]\nport = {free_port()}\nhttp_port = {http_port}\nstore = {store}\n[replicator]\nmax_jobs = 0\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    node = subprocess.Popen(
        [sys.executable, "-m", "actors", "node", "start", "--config", str(work_dir / "node.ini")],
        cwd=work_dir,
        env=env,
        stdout=open(work_dir / "node.log", "w"),
        stderr=subprocess.STDOUT,
    )
    rng = random.Random(1)
    per_type = args.jobs // args.types
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
                timed(conn, "/_up")
                break
            except OSError:
                if time.monotonic() > deadline or node.poll() is not None:
                    raise SystemExit("the node did not come up: see " + str(work_dir / "node.log")) from None
                time.sleep(0.2)
        now = time.time
        cases = [
            ("GET /_jobs", lambda: "/_jobs", lambda: overview.types_overview(db, L, now())),
            (
                "GET /_jobs/{type}?limit=100&skip=rand",
                lambda: f"/_jobs/type{rng.randrange(args.types):02d}?limit=100&skip={rng.randrange(per_type)}",
                lambda: overview.list_jobs(
                    db, L, f"type{rng.randrange(args.types):02d}", None, 100, rng.randrange(per_type), now()
                ),
            ),
            (
                "GET /_jobs/{type}?state=pending&limit=100",
                lambda: f"/_jobs/type{rng.randrange(args.types):02d}?state=pending&limit=100",
                lambda: overview.list_jobs(db, L, f"type{rng.randrange(args.types):02d}", "pending", 100, 0, now()),
            ),
            (
                "GET /_jobs/{type}?state=running&limit=100",
                lambda: f"/_jobs/type{rng.randrange(args.types):02d}?state=running&limit=100",
                lambda: overview.list_jobs(db, L, f"type{rng.randrange(args.types):02d}", "running", 100, 0, now()),
            ),
            ("GET /_utils/ (the status page)", lambda: "/_utils/", lambda: overview.queue_status(db, L, now())),
        ]
        print(f"{'request':46} {'p50 ms':>8} {'p99 ms':>8} {'store p50':>10} {'http/store':>11}")
        for name, path, read in cases:
            for _ in range(10):  # warm up
                timed(conn, path())
            http_times = [timed(conn, path()) for _ in range(args.requests)]
            store_times = direct(read, args.requests)
            p50, p99, s50 = pct(http_times, 0.5) * 1000, pct(http_times, 0.99) * 1000, pct(store_times, 0.5) * 1000
            print(
                f"{name:46} {p50:8.1f} {p99:8.1f} {s50:10.1f} {p50 / s50:10.1f}x"
                f"{'' if p50 < 50 else '   (target p50 < 50 ms missed)'}"
            )
        conn.close()
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            node.kill()
        db.close()
    print(f"target (issue 15): p50 < 50 ms with 100,000 jobs over 20 types; this run: {args.jobs:,} over {args.types}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
