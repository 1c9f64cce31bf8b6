"""Raw store figures of the SQLite backend, side by side with plain sqlite3.

Prints, at synchronous FULL and NORMAL: single-set transactions/s and
100-set transactions (rows/s) through fdblayer and through raw sqlite3 on the
same disk (the ratio is the figure); the split of commits between 4 processes
doing read-modify-write on one key, with the fair write queue and without it;
the cross-process watch wake-up latency (p50/p99).

Usage: ``python bench/bench_store_raw.py [--seconds 2] [--dir /tmp]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import statistics
import tempfile
import time
from typing import Callable, List

import fdblayer
from fdblayer.backends.sqlite_backend import SqliteDatabase


def rate(action: Callable[[int], None], seconds: float) -> float:
    """Calls per second of ``action(i)`` over about ``seconds``."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        action(count)
        count += 1
    return count / (time.perf_counter() - start)


def raw_connection(path: str, sync: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
    return conn


def throughput(directory: str, sync: str, seconds: float) -> None:
    raw = raw_connection(os.path.join(directory, f"raw-{sync}.db"), sync)
    db = SqliteDatabase(os.path.join(directory, f"layer-{sync}.db"), sync)
    value = b"x" * 40

    def raw_one(i: int) -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (b"k%d" % i, value))
        raw.execute("COMMIT")

    def raw_hundred(i: int) -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", [(b"b%d-%d" % (i, j), value) for j in range(100)])
        raw.execute("COMMIT")

    @fdblayer.transactional
    def layer_one(tr, i: int) -> None:
        tr[b"k%d" % i] = value

    @fdblayer.transactional
    def layer_hundred(tr, i: int) -> None:
        for j in range(100):
            tr[b"b%d-%d" % (i, j)] = value

    r1, l1 = rate(raw_one, seconds), rate(lambda i: layer_one(db, i), seconds)
    r100, l100 = rate(raw_hundred, seconds) * 100, rate(lambda i: layer_hundred(db, i), seconds) * 100
    print(f"{sync:6}  1 set/txn: raw {r1:8.0f}/s  fdblayer {l1:8.0f}/s  ratio {l1 / r1:.2f}")
    print(f"{sync:6}  100 sets/txn: raw {r100:8.0f} rows/s  fdblayer {l100:8.0f} rows/s  ratio {l100 / r100:.2f}")
    raw.close()
    db.close()


def _contender(path: str, fair: bool, blind: bool, seconds: float, ready, go, out) -> None:
    db = SqliteDatabase(path, "NORMAL", fair=fair)

    @fdblayer.transactional
    def increment(tr) -> None:
        if blind:  # takes the write lock at once: where SQLite's lock is unfair
            tr.add(b"blind", (1).to_bytes(8, "little"))
            tr.add(b"counter-n", (1).to_bytes(8, "little"))
            return
        value = tr.get(b"counter")
        tr[b"counter"] = str(int(value or b"0") + 1).encode()

    ready.put(os.getpid())
    go.wait(60)  # every contender is up before any starts (slow starts on a loaded machine)
    count, stop_at = 0, time.monotonic() + seconds
    while time.monotonic() < stop_at:
        increment(db)
        count += 1
    db.close()
    out.put(count)


def fairness(directory: str, fair: bool, seconds: float, blind: bool = False) -> None:
    path = os.path.join(directory, f"fair-{fair}-{blind}.db")
    SqliteDatabase(path).close()
    ctx = multiprocessing.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_contender, args=(path, fair, blind, seconds, ready, go, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    go.set()
    counts = sorted((out.get(timeout=seconds + 60) for _ in procs), reverse=True)
    for p in procs:
        p.join(30)
    with SqliteDatabase(path) as db:
        raw = db.get(b"counter-n") if blind else db.get(b"counter")
        total = int.from_bytes(raw, "little") if blind else int(raw)
    assert total == sum(counts), (total, counts)
    label = "fair queue" if fair else "backoff only"
    kind = "blind add " if blind else "RMW one key"
    print(
        f"4 processes {kind} ({label:12}): split {counts}  total {total / seconds:.0f} txn/s  "
        f"min/max {counts[-1] / counts[0]:.2f}"
    )


def _watcher(path: str, rounds: int, ready, out) -> None:
    db = SqliteDatabase(path)
    latencies: List[float] = []
    for _ in range(rounds):
        tr = db.create_transaction()
        before = tr.get(b"ping")
        watch = tr.watch(b"ping")
        tr.commit()
        ready.put(before)
        if not watch.wait(10):
            break
        latencies.append(time.monotonic() - float(db.get(b"ping").decode()))
    db.close()
    out.put(latencies)


def wakeup(directory: str, rounds: int) -> None:
    path = os.path.join(directory, "watch.db")
    writer = SqliteDatabase(path)
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_watcher, args=(path, rounds, ready, out))
    proc.start()
    for _ in range(rounds):
        ready.get(timeout=30)
        time.sleep(0.002)  # let the watcher go back to sleep, as a real waiter would be
        writer.set(b"ping", repr(time.monotonic()).encode())
    latencies = sorted(out.get(timeout=30))
    proc.join(30)
    writer.close()
    ms = [x * 1000 for x in latencies]
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"watch wake-up across processes ({len(ms)} rounds, FULL): "
        f"p50 {statistics.median(ms):.2f} ms  p99 {p99:.2f} ms  max {ms[-1]:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--dir", default=None, help="directory for the store files (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for sync in ("FULL", "NORMAL"):
            throughput(directory, sync, args.seconds)
        for blind in (False, True):
            fairness(directory, True, args.seconds * 2, blind)
            fairness(directory, False, args.seconds * 2, blind)
        wakeup(directory, args.rounds)


if __name__ == "__main__":
    main()
