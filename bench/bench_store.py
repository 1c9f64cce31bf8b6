"""Benchmark: the jobs data model on the SQLite backend against raw sqlite3.

Principle: the figure that matters is the ratio to raw SQLite doing the
equivalent transactions on the same disk at the same ``synchronous``
setting (absolute numbers depend on the disk's fsync cost). For each of
FULL and NORMAL it prints, per second:

* add: ``api.add`` one job per transaction, against ``BEGIN; INSERT;
  COMMIT``;
* 100 adds per transaction (jobs/s), against 100 INSERTs per transaction;
* the add + accept + finish cycle (cycles/s, three transactions), against
  INSERT, then ``BEGIN IMMEDIATE; SELECT`` a pending row ``; UPDATE`` it to
  running, then ``UPDATE`` it to finished.

Raw sqlite3 gets the same job data as ours, a dict, and serialises it per
job (``json.dumps``; ours msgpack-encodes it), and its accept reads and
decodes the data it hands out, as ours does: both sides do the work a queue
must do per job, so the ratio measures the store, not a head start given to
one side.

It also prints the wake-up latency of a store watch across processes:
another process waits on a watch, this one commits a write to the key; the
latency runs from the start of the committing transaction to the waiter's
wake-up (both read the system-wide ``CLOCK_MONOTONIC``).

Each throughput figure is the median of ``--repeat`` runs, ours and raw
interleaved so that both see the same disk weather. The default run
takes well under a minute. Not a test: it prints and exits 0.

Usage::

    .venv/bin/python bench/bench_store.py [--adds N] [--batches N]
        [--cycles N] [--wakeups N] [--repeat N] [--profile add|batch|cycle]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fdb.tuple  # noqa: E402

import fdblayer  # noqa: E402
from fdblayer.jobs import api  # noqa: E402

JOB_TYPE = "bench"
DATA = {"url": "http://example.com/doc", "n": 1}
SYNC_MODES = ("FULL", "NORMAL")

RAW_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, state INTEGER NOT NULL, "
    "lock TEXT, data BLOB NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, id)",
)


# ---------------------------------------------------------------- ours


def open_ours(directory: str, sync: str) -> fdblayer.Database:
    path = os.path.join(directory, f"ours-{sync}-{uuid.uuid4().hex[:8]}.db")
    db = fdblayer.open(f"sqlite:///{path}?synchronous={sync}")
    api.set_type_timeout(db, JOB_TYPE, 60)
    return db


def ours_add(db: fdblayer.Database, n: int) -> float:
    prefix = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    for i in range(n):
        api.add(db, JOB_TYPE, f"{prefix}-{i:07d}", DATA)
    return n / (time.perf_counter() - start)


def ours_batch(db: fdblayer.Database, batches: int) -> float:
    prefix = uuid.uuid4().hex[:8]

    @fdblayer.transactional
    def add_100(tr: fdblayer.Transaction, batch: int) -> None:
        for i in range(100):
            api.add(tr, JOB_TYPE, f"{prefix}-{batch:05d}-{i:03d}", DATA)

    start = time.perf_counter()
    for batch in range(batches):
        add_100(db, batch)
    return batches * 100 / (time.perf_counter() - start)


def ours_cycle(db: fdblayer.Database, n: int) -> float:
    job_type = f"cycle-{uuid.uuid4().hex[:8]}"
    api.set_type_timeout(db, job_type, 60)
    start = time.perf_counter()
    for i in range(n):
        api.add(db, job_type, f"c-{i:07d}", DATA)
        job, _ = api.accept(db, job_type, timeout=0)
        api.finish(db, job, DATA)
    return n / (time.perf_counter() - start)


# ---------------------------------------------------------------- raw sqlite3


def open_raw(directory: str, sync: str) -> sqlite3.Connection:
    path = os.path.join(directory, f"raw-{sync}-{uuid.uuid4().hex[:8]}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    for statement in RAW_SCHEMA:
        conn.execute(statement)
    return conn


def raw_add(conn: sqlite3.Connection, n: int) -> float:
    prefix = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO jobs (id, state, data) VALUES (?, 0, ?)",
            (f"{prefix}-{i:07d}", json.dumps(DATA).encode()),
        )
        conn.execute("COMMIT")
    return n / (time.perf_counter() - start)


def raw_batch(conn: sqlite3.Connection, batches: int) -> float:
    prefix = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    for batch in range(batches):
        conn.execute("BEGIN")
        for i in range(100):
            conn.execute(
                "INSERT INTO jobs (id, state, data) VALUES (?, 0, ?)",
                (f"{prefix}-{batch:05d}-{i:03d}", json.dumps(DATA).encode()),
            )
        conn.execute("COMMIT")
    return batches * 100 / (time.perf_counter() - start)


def raw_cycle(conn: sqlite3.Connection, n: int) -> float:
    conn.execute("DELETE FROM jobs")
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO jobs (id, state, data) VALUES (?, 0, ?)",
            (f"c-{i:07d}", json.dumps(DATA).encode()),
        )
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        job_id, raw = conn.execute("SELECT id, data FROM jobs WHERE state = 0 LIMIT 1").fetchone()
        json.loads(raw)
        conn.execute(
            "UPDATE jobs SET state = 1, lock = ? WHERE id = ?", (uuid.uuid4().hex, job_id)
        )
        conn.execute("COMMIT")
        conn.execute("BEGIN")
        conn.execute(
            "UPDATE jobs SET state = 2, lock = NULL, data = ? WHERE id = ?",
            (json.dumps(DATA).encode(), job_id),
        )
        conn.execute("COMMIT")
    return n / (time.perf_counter() - start)


# ---------------------------------------------------------------- watch latency

WAITER = """
import sys, time
import fdblayer
db = fdblayer.open(sys.argv[1])
key = bytes.fromhex(sys.argv[2])
rounds = int(sys.argv[3])

@fdblayer.transactional
def arm(tr):
    tr.get(key)
    return tr.watch(key)

for _ in range(rounds):
    watch = arm(db)
    print("armed", flush=True)
    if not watch.wait(10):
        print("timeout", flush=True)
        break
    print(repr(time.monotonic()), flush=True)
db.close()
"""


def watch_latency(directory: str, sync: str, rounds: int) -> list[float]:
    """Wake-up latencies (seconds) of a watch in another process."""
    path = os.path.join(directory, f"watch-{sync}-{uuid.uuid4().hex[:8]}.db")
    url = f"sqlite:///{path}?synchronous={sync}"
    db = fdblayer.open(url)
    key = fdb.tuple.pack(("bench", "watch"))
    db.set(key, b"0")
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER, url, key.hex(), str(rounds)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    latencies = []
    try:
        for i in range(rounds):
            line = proc.stdout.readline().strip()
            if line != "armed":
                raise RuntimeError(f"waiter said {line!r}")
            started = time.monotonic()
            db.set(key, str(i + 1).encode())
            line = proc.stdout.readline().strip()
            if line in ("", "timeout"):
                raise RuntimeError("waiter was not woken")
            latencies.append(float(line) - started)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        db.close()
    return latencies


# ---------------------------------------------------------------- driver


def paired(repeat: int, ours: Callable[[], float], raw: Callable[[], float]) -> tuple[float, float]:
    """Medians of ``repeat`` runs of each, interleaved so both see the same disk weather."""
    results: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        results[0].append(ours())
        results[1].append(raw())
    return statistics.median(results[0]), statistics.median(results[1])


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(directory: str, sync: str, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    db = open_ours(directory, sync)
    conn = open_raw(directory, sync)
    try:
        ours_add(db, 50)  # warm up: connections, schema, caches
        raw_add(conn, 50)
        figures = {
            "add (1 per txn)": paired(
                args.repeat, lambda: ours_add(db, args.adds), lambda: raw_add(conn, args.adds)
            ),
            "add (100 per txn), jobs/s": paired(
                args.repeat,
                lambda: ours_batch(db, args.batches),
                lambda: raw_batch(conn, args.batches),
            ),
            "add+accept+finish cycle": paired(
                args.repeat,
                lambda: ours_cycle(db, args.cycles),
                lambda: raw_cycle(conn, args.cycles),
            ),
        }
    finally:
        db.close()
        conn.close()
    return figures


def profile(directory: str, what: str, args: argparse.Namespace) -> None:
    db = open_ours(directory, "NORMAL")
    ours_add(db, 50)
    run = {
        "add": lambda: ours_add(db, args.adds),
        "batch": lambda: ours_batch(db, args.batches),
        "cycle": lambda: ours_cycle(db, args.cycles),
    }[what]
    profiler = cProfile.Profile()
    profiler.runcall(run)
    db.close()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adds", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--wakeups", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", choices=("add", "batch", "cycle"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_store-", dir=os.environ.get("BENCH_DIR")) as directory:
        if args.profile:
            profile(directory, args.profile, args)
            return
        print(f"store directory: {directory} (sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]})")
        print(f"medians of {args.repeat} runs; ops per second; ratio = ours / raw (target >= 0.50)")
        results = {sync: measure(directory, sync, args) for sync in SYNC_MODES}
        header = f"{'operation':<28}" + "".join(
            f"{sync + ' ours':>12}{sync + ' raw':>12}{'ratio':>7}" for sync in SYNC_MODES
        )
        print(header)
        for name in results[SYNC_MODES[0]]:
            row = f"{name:<28}"
            for sync in SYNC_MODES:
                ours, raw = results[sync][name]
                row += f"{ours:>12,.0f}{raw:>12,.0f}{ours / raw:>7.2f}"
            print(row)
        print(f"watch wake-up across processes ({args.wakeups} commits), ms:")
        for sync in SYNC_MODES:
            lat = watch_latency(directory, sync, args.wakeups)
            print(
                f"  {sync:<7} p50 {percentile(lat, 0.5) * 1000:6.2f}  "
                f"p99 {percentile(lat, 0.99) * 1000:6.2f}  max {max(lat) * 1000:6.2f}"
            )


if __name__ == "__main__":
    main()
