"""Benchmark: the jobs data model on the SQLite backend against raw sqlite3.

Principle: the figure that matters is the ratio to raw SQLite doing the
equivalent transactions on the same disk at the same ``synchronous``
setting (absolute numbers depend on the disk's fsync cost). For each of
FULL and NORMAL it prints, per second:

* add: ``api.add`` one job per transaction, against ``BEGIN; INSERT;
  COMMIT``;
* 100 adds per transaction (jobs/s), against 100 INSERTs per transaction:
  ``api.add`` called 100 times in one transaction, and ``api.add_many`` of
  100 jobs (the bulk call, one transaction);
* the add + accept + finish cycle (cycles/s, three transactions), against
  INSERT, then ``BEGIN IMMEDIATE; SELECT`` a pending row ``; UPDATE`` it to
  running, then ``UPDATE`` it to finished.

Two raw baselines are printed. "Same rows" is the equivalent transaction
and the one the target (>= 0.5x) is judged against: it writes what ours
writes for the same guarantees, in plain tables: the add also checks the
type and bumps the per-type pending counter that waiters watch; accept and
finish also take a commit sequence number (our versionstamp), move the job
in an activity index and stamp the type's activity; finish checks the lock
first. "Minimal rows" writes only the job row and one state index: no
queue can watch or time out its jobs that way; it is printed for
information (the cost of those guarantees).

Raw sqlite3 gets the same job data as ours, a dict, and serialises it per
job (``json.dumps``; ours msgpack-encodes it), and its accept reads and
decodes the data it hands out, as ours does: both sides do the work a queue
must do per job, so the ratio measures the store, not a head start given to
one side.

A third table compares ours with our own statements replayed: every
statement (and its parameters) that our runs sent to SQLite is recorded
once, then run through raw sqlite3 on a fresh store file with nothing of
ours around it. The ratio is the share of our time that is SQLite's; the
rest is our Python (validation, encoding, keys, the transaction layer).

It also prints the wake-up latency of a store watch across processes:
another process waits on a watch, this one commits a write to the key; the
latency runs from the start of the committing transaction to the waiter's
wake-up (both read the system-wide ``CLOCK_MONOTONIC``).

Each throughput figure is the median of ``--repeat`` rounds, ours and raw
interleaved so that both see the same disk weather; each ratio is the
median of the rounds' ratios. The default run
takes well under a minute. Not a test: it prints and exits 0.

Usage::

    .venv/bin/python bench/bench_store.py [--adds N] [--batches N]
        [--cycles N] [--wakeups N] [--repeat N] [--profile add|batch|add_many|cycle]
    .venv/bin/python bench/bench_store.py --store postgresql[://user@host:port/db]
        [--ops N] [--repeat N] [--wakeups N] [--workers 1,4,16] [--drain-jobs N]

``--store postgresql...`` benches the PostgreSQL backend instead, against raw
psycopg on the same server (``store_postgres.py``).
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


def ours_add_many(db: fdblayer.Database, batches: int) -> float:
    prefix = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    for batch in range(batches):
        api.add_many(db, JOB_TYPE, {f"{prefix}-{batch:05d}-{i:03d}": DATA for i in range(100)})
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


def open_raw(directory: str, sync: str, schema: tuple[str, ...] = RAW_SCHEMA) -> sqlite3.Connection:
    path = os.path.join(directory, f"raw-{sync}-{uuid.uuid4().hex[:8]}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    for statement in schema:
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
        conn.execute("UPDATE jobs SET state = 1, lock = ? WHERE id = ?", (uuid.uuid4().hex, job_id))
        conn.execute("COMMIT")
        conn.execute("BEGIN")
        conn.execute(
            "UPDATE jobs SET state = 2, lock = NULL, data = ? WHERE id = ?",
            (json.dumps(DATA).encode(), job_id),
        )
        conn.execute("COMMIT")
    return n / (time.perf_counter() - start)


# ---------------------------------------------------------------- raw sqlite3, same rows

# The rows a couch_jobs-style queue must write, in plain tables: the job with
# its pending-queue index and its activity index (running jobs by commit
# sequence, for re-enqueueing silent ones), a per-type row holding the
# pending counter waiters watch and the last activity sequence, and the
# store-wide commit sequence (what our versionstamps are).
RAW_SAME_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs (type TEXT, id TEXT, state INTEGER NOT NULL, "
    "sched_time INTEGER NOT NULL, lock TEXT, seq INTEGER, data BLOB NOT NULL, "
    "PRIMARY KEY (type, id)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS jobs_pending ON jobs (type, state, sched_time, id)",
    "CREATE INDEX IF NOT EXISTS jobs_activity ON jobs (type, seq) WHERE seq IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS types (type TEXT PRIMARY KEY, timeout REAL NOT NULL, "
    "pending INTEGER NOT NULL DEFAULT 0, activity INTEGER) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO meta VALUES ('commit_version', 0)",
    f"INSERT OR IGNORE INTO types (type, timeout) VALUES ('{JOB_TYPE}', 60)",
)
SQL_SAME_BUMP = "UPDATE meta SET value = value + 1 WHERE name = 'commit_version' RETURNING value"


def _same_add_one(conn: sqlite3.Connection, job_id: str) -> None:
    """The body of an add: check the type, insert the job, bump the pending counter."""
    if conn.execute("SELECT timeout FROM types WHERE type = ?", (JOB_TYPE,)).fetchone() is None:
        raise RuntimeError("no type timeout")
    conn.execute(
        "INSERT INTO jobs (type, id, state, sched_time, data) VALUES (?, ?, 0, 0, ?)",
        (JOB_TYPE, job_id, json.dumps(DATA).encode()),
    )
    conn.execute("UPDATE types SET pending = pending + 1 WHERE type = ?", (JOB_TYPE,))


def raw_same_add(conn: sqlite3.Connection, n: int) -> float:
    prefix = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        _same_add_one(conn, f"{prefix}-{i:07d}")
        conn.execute("COMMIT")
    return n / (time.perf_counter() - start)


def raw_same_batch(conn: sqlite3.Connection, batches: int) -> float:
    prefix = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    for batch in range(batches):
        conn.execute("BEGIN")
        for i in range(100):
            _same_add_one(conn, f"{prefix}-{batch:05d}-{i:03d}")
        conn.execute("COMMIT")
    return batches * 100 / (time.perf_counter() - start)


def raw_same_cycle(conn: sqlite3.Connection, n: int) -> float:
    conn.execute("DELETE FROM jobs")
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        _same_add_one(conn, f"c-{i:07d}")
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        job_id, raw = conn.execute(
            "SELECT id, data FROM jobs WHERE type = ? AND state = 0 AND sched_time <= ? ORDER BY sched_time LIMIT 1",
            (JOB_TYPE, 2**62),
        ).fetchone()
        json.loads(raw)
        (seq,) = conn.execute(SQL_SAME_BUMP).fetchone()
        lock = uuid.uuid4().hex
        conn.execute(
            "UPDATE jobs SET state = 1, lock = ?, seq = ? WHERE type = ? AND id = ?",
            (lock, seq, JOB_TYPE, job_id),
        )
        conn.execute("UPDATE types SET activity = ? WHERE type = ?", (seq, JOB_TYPE))
        conn.execute("COMMIT")
        conn.execute("BEGIN")
        (held,) = conn.execute("SELECT lock FROM jobs WHERE type = ? AND id = ?", (JOB_TYPE, job_id)).fetchone()
        assert held == lock
        (seq,) = conn.execute(SQL_SAME_BUMP).fetchone()
        conn.execute(
            "UPDATE jobs SET state = 2, lock = NULL, seq = NULL, data = ? WHERE type = ? AND id = ?",
            (json.dumps(DATA).encode(), JOB_TYPE, job_id),
        )
        conn.execute("UPDATE types SET activity = ? WHERE type = ?", (seq, JOB_TYPE))
        conn.execute("COMMIT")
    return n / (time.perf_counter() - start)


# ---------------------------------------------------------------- our statements, replayed


class _Recorder:
    """A connection that records every statement it runs, with its parameters."""

    def __init__(self, conn: sqlite3.Connection, log: list) -> None:
        self._conn = conn
        self.log = log

    def execute(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        self.log.append((False, sql, tuple(params)))
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows) -> sqlite3.Cursor:
        rows = [tuple(row) for row in rows]
        self.log.append((True, sql, rows))
        return self._conn.executemany(sql, rows)

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


def record(run: Callable[[fdblayer.Database], object], sync: str, directory: str) -> tuple[list, list]:
    """``(setup, statements)``: what ``open_ours`` and then ``run(db)`` sent to SQLite."""
    log: list = []
    path = os.path.join(directory, f"rec-{sync}-{uuid.uuid4().hex[:8]}.db")
    db = fdblayer.open(f"sqlite:///{path}?synchronous={sync}")
    checkout = db.checkout
    db.checkout = lambda: _Recorder(checkout(), log)  # type: ignore[method-assign]
    db.checkin = lambda conn, epoch: None  # type: ignore[method-assign]  # recorders are not pooled
    try:
        api.set_type_timeout(db, JOB_TYPE, 60)
        setup = list(log)
        del log[:]
        run(db)
        return setup, list(log)
    finally:
        db.checkout = checkout  # type: ignore[method-assign]
        db.close()


def replay(recorded: tuple[list, list], ops: int, sync: str, directory: str) -> float:
    """Run recorded statements through raw sqlite3 on a fresh store file, ops/s.

    Nothing of ours runs but the loop over the statements, on a connection
    with SQLite's default automatic checkpoint (as the raw baselines have):
    the time our key layout costs SQLite itself.
    """
    setup, statements = recorded
    path = os.path.join(directory, f"replay-{sync}-{uuid.uuid4().hex[:8]}.db")
    db = fdblayer.open(f"sqlite:///{path}?synchronous={sync}")
    conn = db.connect()
    conn.execute("PRAGMA wal_autocheckpoint = 1000")
    try:
        for many, sql, params in setup:
            (conn.executemany if many else conn.execute)(sql, params).fetchall()
        start = time.perf_counter()
        for many, sql, params in statements:
            if many:
                conn.executemany(sql, params)
            else:
                conn.execute(sql, params).fetchall()
        return ops / (time.perf_counter() - start)
    finally:
        conn.close()
        db.close()


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


def paired(repeat: int, *runs: Callable[[], float]) -> tuple[list[float], ...]:
    """``repeat`` rounds of every run, each round running them back to back
    (so that all see the same disk weather): one list of figures per run."""
    results: list[list[float]] = [[] for _ in runs]
    for _ in range(repeat):
        for result, run in zip(results, runs, strict=True):
            result.append(run())
    return tuple(results)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(directory: str, sync: str, args: argparse.Namespace) -> dict[str, tuple[float, ...]]:
    """``{operation: (ours, raw minimal, raw same rows, ours replayed)}``, each a
    list of per-round figures in operations per second."""
    recorded = {
        "add": record(lambda rec: ours_add(rec, args.adds), sync, directory),
        "batch": record(lambda rec: ours_batch(rec, args.batches), sync, directory),
        "add_many": record(lambda rec: ours_add_many(rec, args.batches), sync, directory),
        "cycle": record(lambda rec: ours_cycle(rec, args.cycles), sync, directory),
    }
    db = open_ours(directory, sync)
    conn = open_raw(directory, sync)
    same = open_raw(directory, sync, RAW_SAME_SCHEMA)
    try:
        ours_add(db, 50)  # warm up: connections, schema, caches
        raw_add(conn, 50)
        raw_same_add(same, 50)
        figures = {
            "add (1 per txn)": paired(
                args.repeat,
                lambda: ours_add(db, args.adds),
                lambda: raw_add(conn, args.adds),
                lambda: raw_same_add(same, args.adds),
                lambda: replay(recorded["add"], args.adds, sync, directory),
            ),
            "add (100 per txn), jobs/s": paired(
                args.repeat,
                lambda: ours_batch(db, args.batches),
                lambda: raw_batch(conn, args.batches),
                lambda: raw_same_batch(same, args.batches),
                lambda: replay(recorded["batch"], args.batches * 100, sync, directory),
            ),
            "add_many (100 per txn), jobs/s": paired(
                args.repeat,
                lambda: ours_add_many(db, args.batches),
                lambda: raw_batch(conn, args.batches),
                lambda: raw_same_batch(same, args.batches),
                lambda: replay(recorded["add_many"], args.batches * 100, sync, directory),
            ),
            "add+accept+finish cycle": paired(
                args.repeat,
                lambda: ours_cycle(db, args.cycles),
                lambda: raw_cycle(conn, args.cycles),
                lambda: raw_same_cycle(same, args.cycles),
                lambda: replay(recorded["cycle"], args.cycles, sync, directory),
            ),
        }
    finally:
        db.close()
        conn.close()
        same.close()
    return figures


def profile(directory: str, what: str, args: argparse.Namespace) -> None:
    db = open_ours(directory, "NORMAL")
    ours_add(db, 50)
    run = {
        "add": lambda: ours_add(db, args.adds),
        "batch": lambda: ours_batch(db, args.batches),
        "add_many": lambda: ours_add_many(db, args.batches),
        "cycle": lambda: ours_cycle(db, args.cycles),
    }[what]
    profiler = cProfile.Profile()
    profiler.runcall(run)
    db.close()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)


def print_table(results: dict[str, dict[str, tuple[list[float], ...]]], column: int, title: str) -> None:
    """Print ours against the figures in ``column`` of ``results``, FULL and NORMAL:
    the medians of the rounds, and the median of the rounds' ratios (a round
    runs both back to back, so its ratio cancels the weather both saw)."""
    print(f"-- against {title}")
    print(f"{'operation':<28}" + "".join(f"{sync + ' ours':>12}{sync + ' raw':>12}{'ratio':>7}" for sync in SYNC_MODES))
    for name in results[SYNC_MODES[0]]:
        row = f"{name:<28}"
        for sync in SYNC_MODES:
            ours_rounds, raw_rounds = results[sync][name][0], results[sync][name][column]
            ratio = statistics.median(o / r for o, r in zip(ours_rounds, raw_rounds, strict=True))
            ours, raw = statistics.median(ours_rounds), statistics.median(raw_rounds)
            row += f"{ours:>12,.0f}{raw:>12,.0f}{ratio:>7.2f}"
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adds", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--wakeups", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", choices=("add", "batch", "add_many", "cycle"))
    parser.add_argument(
        "--store",
        metavar="postgresql[://...]",
        help="bench a PostgreSQL store against raw psycopg instead (see "
        "store_postgres.py); 'postgresql' alone starts a throwaway server",
    )
    parser.add_argument("--ops", type=int, default=1000, help="PostgreSQL: operations per round")
    parser.add_argument("--workers", default="1,4,16", help="PostgreSQL: pool sizes to drain with ('' skips)")
    parser.add_argument("--drain-jobs", type=int, default=3000, help="PostgreSQL: jobs per drain")
    args = parser.parse_args()
    if args.store:
        import store_postgres

        url = None if args.store in ("postgresql", "postgres") else args.store
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
        store_postgres.run(url, args.ops, args.repeat, workers, args.drain_jobs, args.wakeups)
        return

    with tempfile.TemporaryDirectory(prefix="bench_store-", dir=os.environ.get("BENCH_DIR")) as directory:
        if args.profile:
            profile(directory, args.profile, args)
            return
        print(f"store directory: {directory} (sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]})")
        print(f"medians of {args.repeat} rounds; ops per second; ratio = median of the rounds' ours / raw")
        results = {sync: measure(directory, sync, args) for sync in SYNC_MODES}
        print_table(
            results,
            2,
            "raw sqlite3, same rows (+ counter, activity index, commit seq): "
            "the equivalent transactions, target >= 0.50",
        )
        print_table(results, 1, "raw sqlite3, minimal rows (job row + one index), for information")
        print_table(
            results,
            3,
            "our own statements replayed through raw sqlite3 (no Python layer "
            "of ours): the share of the time that is Python",
        )
        print(f"watch wake-up across processes ({args.wakeups} commits), ms:")
        for sync in SYNC_MODES:
            lat = watch_latency(directory, sync, args.wakeups)
            print(
                f"  {sync:<7} p50 {percentile(lat, 0.5) * 1000:6.2f}  "
                f"p99 {percentile(lat, 0.99) * 1000:6.2f}  max {max(lat) * 1000:6.2f}"
            )


if __name__ == "__main__":
    main()
