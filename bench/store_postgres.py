"""The PostgreSQL part of ``bench_store.py``: ours against raw psycopg on one server.

Principle: both sides run on the same server, over the same loopback TCP,
with psycopg 3 (binary transfer), rounds interleaved; the figure is the
ratio ours / raw (target >= 0.5x). Raw psycopg does the equivalent
transaction the idiomatic way (a psycopg transaction: ``BEGIN``, the
statements, ``COMMIT``) on a plain ``kv(k bytea PRIMARY KEY, v bytea)``:

* get: one key read in a transaction (``REPEATABLE READ``);
* set: one key written (an upsert);
* read-modify-write: read two keys, write both, ``SERIALIZABLE``, retried
  on serialization failures, as ours retries conflicts;
* range 100: the first 100 rows of a prefix, in key order;
* job cycle: add, accept, finish, three transactions, against two raw
  queues: "same rows" keeps what ours keeps (the job row, its pending or
  activity index row, the pending counter waiters watch with a NOTIFY, the
  type's activity stamp, a sequence number per transition, the lock
  checked at finish: the equivalent transactions), "bare queue" is the
  usual PostgreSQL queue (a ``jobs`` table, ``INSERT``, ``UPDATE ... WHERE
  id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1)``, ``UPDATE``), as
  River, Oban and procrastinate do it, for information.

Then, on ours alone: the queue drained by ``otpjobs worker`` pools of 1, 4
and 16 workers (no-op handler), and the wake-up latency of an ``accept``
blocked in another process when a job is added (target p50 < 20 ms).

With no URL the bench starts its own durable server (``fsync`` on, the
server's defaults otherwise) from Debian's binaries and removes it after.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Callable, List, Optional

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path[:0] = [ROOT, BENCH]

import psycopg  # noqa: E402

import fdblayer  # noqa: E402
from fdblayer.jobs import api  # noqa: E402
from fdblayer.backends.postgres_server import TemporaryServer  # noqa: E402

JOB_TYPE = "bench"
DATA = {"url": "http://example.com/doc", "n": 1}


# ---------------------------------------------------------------- ours


def ours_ops(db: fdblayer.Database, n: int) -> dict:
    """ops/s of each operation on our store."""
    prefix = uuid.uuid4().hex[:8].encode()
    for i in range(100):
        db.set(prefix + b"/r/%03d" % i, b"v" * 100)
    db.set(prefix + b"/a", b"0")
    db.set(prefix + b"/b", b"0")
    out = {}
    out["get"] = _rate(n, lambda i: db.get(prefix + b"/a"))
    out["set"] = _rate(n, lambda i: db.set(prefix + b"/s%d" % (i % 50), b"v" * 100))

    @fdblayer.transactional
    def rmw(tr):
        a, b = tr.get(prefix + b"/a"), tr.get(prefix + b"/b")
        tr.set(prefix + b"/a", b"%d" % (int(a) + 1))
        tr.set(prefix + b"/b", b"%d" % (int(b) + 1))

    out["read-modify-write"] = _rate(n, lambda i: rmw(db))
    out["range 100"] = _rate(n, lambda i: db.get_range(prefix + b"/r/", prefix + b"/r0", limit=100))
    job_type = f"cycle-{uuid.uuid4().hex[:8]}"
    api.set_type_timeout(db, job_type, 60)

    def cycle(i: int) -> None:
        api.add(db, job_type, f"c-{i:07d}", DATA)
        job, _ = api.accept(db, job_type, timeout=0)
        api.finish(db, job, DATA)

    out["job cycle"] = _rate(n // 2, cycle)
    return out


#: Raw rows compared with each of ours (the job cycle against two raw queues).
RAW_OF = {"job cycle": ("job cycle, same rows", "job cycle, bare queue")}


# ---------------------------------------------------------------- raw psycopg

RAW_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS raw_kv (k bytea PRIMARY KEY, v bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS raw_jobs (id text PRIMARY KEY, type text NOT NULL, "
    "state text NOT NULL, scheduled bigint NOT NULL, data jsonb, lock text, updated double precision)",
    "CREATE INDEX IF NOT EXISTS raw_jobs_pending ON raw_jobs (type, scheduled, id) WHERE state = 'pending'",
    # "same rows": what ours keeps per job, in plain tables (see raw_same_cycle)
    "CREATE TABLE IF NOT EXISTS same_types (type text PRIMARY KEY, timeout double precision, "
    "activity bigint NOT NULL DEFAULT 0, pending bigint NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS same_jobs (type text, id text, state text NOT NULL, seq bigint, "
    "lock text, data jsonb, PRIMARY KEY (type, id))",
    "CREATE TABLE IF NOT EXISTS same_pending (type text, scheduled bigint, id text, PRIMARY KEY (type, scheduled, id))",
    "CREATE TABLE IF NOT EXISTS same_activity (type text, seq bigint, id text, PRIMARY KEY (type, seq))",
    "CREATE SEQUENCE IF NOT EXISTS same_seq",
)


def raw_ops(conninfo: str, n: int) -> dict:
    """ops/s of the equivalent transactions in raw psycopg."""
    conn = psycopg.connect(conninfo)
    with conn.transaction():
        for statement in RAW_SCHEMA:
            conn.execute(statement)
    prefix = uuid.uuid4().hex[:8].encode()
    upsert = "INSERT INTO raw_kv VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
    with conn.transaction():
        for i in range(100):
            conn.execute(upsert, (prefix + b"/r/%03d" % i, b"v" * 100))
        conn.execute(upsert, (prefix + b"/a", b"0"))
        conn.execute(upsert, (prefix + b"/b", b"0"))
    out = {}
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

    def get(i: int) -> None:
        with conn.transaction():
            conn.execute("SELECT v FROM raw_kv WHERE k = %s", (prefix + b"/a",), binary=True).fetchone()

    out["get"] = _rate(n, get)

    def put(i: int) -> None:
        with conn.transaction():
            conn.execute(upsert, (prefix + b"/s%d" % (i % 50), b"v" * 100))

    out["set"] = _rate(n, put)
    conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE

    def rmw(i: int) -> None:
        while True:
            try:
                with conn.transaction():
                    a = conn.execute("SELECT v FROM raw_kv WHERE k = %s", (prefix + b"/a",), binary=True).fetchone()[0]
                    b = conn.execute("SELECT v FROM raw_kv WHERE k = %s", (prefix + b"/b",), binary=True).fetchone()[0]
                    conn.execute(upsert, (prefix + b"/a", b"%d" % (int(a) + 1)))
                    conn.execute(upsert, (prefix + b"/b", b"%d" % (int(b) + 1)))
                return
            except psycopg.errors.SerializationFailure:
                continue

    out["read-modify-write"] = _rate(n, rmw)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

    def scan(i: int) -> None:
        with conn.transaction():
            conn.execute(
                "SELECT k, v FROM raw_kv WHERE k >= %s AND k < %s ORDER BY k LIMIT 100",
                (prefix + b"/r/", prefix + b"/r0"),
                binary=True,
            ).fetchall()

    out["range 100"] = _rate(n, scan)
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    job_type = f"cycle-{uuid.uuid4().hex[:8]}"

    def cycle(i: int) -> None:
        with conn.transaction():
            conn.execute(
                "INSERT INTO raw_jobs VALUES (%s, %s, 'pending', 0, %s, NULL, %s)",
                (f"{job_type}-{i:07d}", job_type, psycopg.types.json.Jsonb(DATA), time.time()),
            )
            conn.execute("SELECT pg_notify('raw_jobs', %s)", (job_type,))
        lock = uuid.uuid4().hex
        with conn.transaction():
            row = conn.execute(
                "UPDATE raw_jobs SET state = 'running', lock = %s, updated = %s WHERE id = ("
                "SELECT id FROM raw_jobs WHERE type = %s AND state = 'pending' AND scheduled <= %s "
                "ORDER BY scheduled, id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, data",
                (lock, time.time(), job_type, int(time.time())),
            ).fetchone()
        with conn.transaction():
            conn.execute(
                "UPDATE raw_jobs SET state = 'finished', data = %s, updated = %s WHERE id = %s AND lock = %s",
                (psycopg.types.json.Jsonb(DATA), time.time(), row[0], lock),
            )

    out["job cycle, bare queue"] = _rate(n // 2, cycle)
    out["job cycle, same rows"] = _rate(n // 2, lambda i: raw_same_cycle(conn, job_type, i))
    conn.close()
    return out


def raw_same_cycle(conn: psycopg.Connection, job_type: str, i: int) -> None:
    """add, accept, finish keeping what ours keeps: the job row, its pending
    or activity index row, the pending counter that waiters watch (and a
    NOTIFY for them), the type's activity stamp, a commit sequence number
    per transition, the lock checked at finish."""
    job_id = f"{job_type}-{i:07d}"
    data = psycopg.types.json.Jsonb(DATA)
    with conn.transaction():
        if conn.execute("SELECT timeout FROM same_types WHERE type = %s", (job_type,)).fetchone() is None:
            conn.execute("INSERT INTO same_types (type, timeout) VALUES (%s, 60)", (job_type,))
        conn.execute("INSERT INTO same_jobs VALUES (%s, %s, 'pending', NULL, NULL, %s)", (job_type, job_id, data))
        conn.execute("INSERT INTO same_pending VALUES (%s, 0, %s)", (job_type, job_id))
        conn.execute("UPDATE same_types SET pending = pending + 1 WHERE type = %s", (job_type,))
        conn.execute("SELECT pg_notify('same_pending', %s)", (job_type,))
    lock = uuid.uuid4().hex
    with conn.transaction():
        picked = conn.execute(
            "DELETE FROM same_pending WHERE (type, scheduled, id) = (SELECT type, scheduled, id "
            "FROM same_pending WHERE type = %s AND scheduled <= %s ORDER BY scheduled, id "
            "FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id",
            (job_type, int(time.time())),
        ).fetchone()
        seq = conn.execute("SELECT nextval('same_seq')").fetchone()[0]
        conn.execute(
            "UPDATE same_jobs SET state = 'running', seq = %s, lock = %s WHERE type = %s AND id = %s RETURNING data",
            (seq, lock, job_type, picked[0]),
        ).fetchone()
        conn.execute("INSERT INTO same_activity VALUES (%s, %s, %s)", (job_type, seq, picked[0]))
        conn.execute("UPDATE same_types SET pending = pending - 1, activity = %s WHERE type = %s", (seq, job_type))
    with conn.transaction():
        row = conn.execute(
            "SELECT lock, seq FROM same_jobs WHERE type = %s AND id = %s FOR UPDATE", (job_type, picked[0])
        ).fetchone()
        assert row[0] == lock
        conn.execute("DELETE FROM same_activity WHERE type = %s AND seq = %s", (job_type, row[1]))
        conn.execute(
            "UPDATE same_jobs SET state = 'finished', lock = NULL, data = %s, "
            "seq = nextval('same_seq') WHERE type = %s AND id = %s",
            (data, job_type, picked[0]),
        )


def _rate(n: int, op: Callable[[int], object]) -> float:
    for i in range(min(50, n)):
        op(i)
    start = time.perf_counter()
    for i in range(n):
        op(i + 50)
    return n / (time.perf_counter() - start)


# ---------------------------------------------------------------- accept latency

WAITER = r"""
import sys, time
import fdblayer
from fdblayer.jobs import api
db = fdblayer.open(sys.argv[1])
for _ in range(int(sys.argv[3])):
    print("ready", flush=True)
    job, _ = api.accept(db, sys.argv[2], timeout=10)
    print(repr(time.monotonic()), flush=True)
    api.finish(db, job)
db.close()
"""


def accept_latency(url: str, rounds: int) -> List[float]:
    """Seconds from the start of an add to the return of an accept blocked in another process."""
    db = fdblayer.open(url)
    job_type = f"wake-{uuid.uuid4().hex[:8]}"
    api.set_type_timeout(db, job_type, 60)
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER, url, job_type, str(rounds)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    latencies = []
    try:
        for i in range(rounds):
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("the waiter did not start")
            time.sleep(0.05)  # it is blocked in accept by now
            started = time.monotonic()
            api.add(db, job_type, f"w{i}", DATA)
            line = proc.stdout.readline().strip()
            if not line:
                raise RuntimeError("the waiter was not woken")
            latencies.append(float(line) - started)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        db.close()
    return latencies


# ---------------------------------------------------------------- worker pools


def pool_drains(base_url: str, workers: List[int], jobs: int) -> List[dict]:
    """Drain figures of ``otpjobs worker`` pools on this server (no-op handler)."""
    import bench_workers as bw
    import worker_peers as wp

    class PostgresPeer(bw.OursPeer):
        def setup(self) -> None:
            self.url = _with_prefix(base_url, f"drain{uuid.uuid4().hex[:8]}")
            self.db = fdblayer.open(self.url)
            api.set_type_timeout(self.db, bw.JOB_TYPE, 30)
            self.port = wp.free_port()
            self.enqueued = 0

        def settings(self) -> str:
            return f"PostgreSQL; otpjobs worker --concurrency {self.workers}"

        def close_storage(self) -> None:
            self.db.drop()
            self.db.close()

    return [wp.run_drain(PostgresPeer, "noop", w, jobs, "FULL") for w in workers]


def _with_prefix(url: str, prefix: str) -> str:
    return url + ("&" if "?" in url else "?") + f"prefix={prefix}"


# ---------------------------------------------------------------- driver


def run(url: Optional[str], ops: int, repeat: int, workers: List[int], drain_jobs: int, wakeups: int) -> None:
    """Print every table; start a server when ``url`` is None."""
    server = None
    if url is None:
        server = TemporaryServer(durable=True).start()
        url = server.url()
        print(f"server: a throwaway PostgreSQL (fsync on) at 127.0.0.1:{server.port}")
    try:
        _run(url, ops, repeat, workers, drain_jobs, wakeups)
    finally:
        if server is not None:
            server.stop()


def _run(url: str, ops: int, repeat: int, workers: List[int], drain_jobs: int, wakeups: int) -> None:
    conninfo = fdblayer.parse_store_url(url).path
    store_url = _with_prefix(url, f"bench{uuid.uuid4().hex[:8]}")
    db = fdblayer.open(store_url)
    rounds_ours, rounds_raw = [], []
    try:
        for _ in range(repeat):
            rounds_ours.append(ours_ops(db, ops))
            rounds_raw.append(raw_ops(conninfo, ops))
    finally:
        db.drop()
        db.close()
    print(f"\nPostgreSQL: ours vs raw psycopg, ops/s (median of {repeat} interleaved rounds of {ops})")
    print(f"{'operation':<34}{'ours':>8}{'raw':>8}{'ratio':>9}")
    for name in rounds_ours[0]:
        for raw_name in RAW_OF.get(name, (name,)):
            ours = statistics.median(r[name] for r in rounds_ours)
            raw = statistics.median(r[raw_name] for r in rounds_raw)
            ratio = statistics.median(o[name] / r[raw_name] for o, r in zip(rounds_ours, rounds_raw, strict=True))
            label = name if raw_name == name else f"{name} (raw: {raw_name.split(', ')[1]})"
            print(f"{label:<34}{ours:>8.0f}{raw:>8.0f}{ratio:>8.2f}x")
    if wakeups:
        lat = sorted(accept_latency(_with_prefix(url, f"wake{uuid.uuid4().hex[:8]}"), wakeups))
        p50, p95 = statistics.median(lat) * 1000, lat[int(0.95 * (len(lat) - 1))] * 1000
        print(
            f"\naccept wake-up across processes: p50 {p50:.2f} ms, p95 {p95:.2f} ms, "
            f"max {lat[-1] * 1000:.2f} ms ({len(lat)} rounds; target p50 < 20 ms)"
        )
    if workers:
        print(f"\nqueue drained by otpjobs worker pools (no-op handler, {drain_jobs} jobs):")
        for row in pool_drains(url, workers, drain_jobs):
            print(f"  x{row['workers']:<3} {row['jobs_per_s']:8.0f} jobs/s")
