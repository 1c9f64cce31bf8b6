"""Benchmark: how far commits on one PostgreSQL server grow with the clients
committing at once, and what caps them (issue 28, deliverable 1).

Principle: N processes (1, 2, 4, 8) each commit small transactions on keys
of their own for ``--seconds``, on one throwaway durable server (``fsync``
on, the server's defaults otherwise); the figure is commits per second,
all processes together. Five kinds of transaction, side by side:

* ``raw``: psycopg, an ``INSERT`` of 5 rows a transaction: what the disk
  and PostgreSQL's group commit allow (flushes of concurrent commits are
  shared);
* ``raw+notify``: the same with a ``pg_notify``: PostgreSQL serialises the
  commits of transactions that notified (a database-wide lock, taken at
  commit and held through the WAL flush);
* ``raw+counter``: the same with an ``UPDATE`` of one shared row (its lock
  is held through the flush): what our ``commit_version`` is;
* ``ours``: fdblayer, 4 sets and an atomic add (a blind write): the
  commit function, with its order lock and its ``NOTIFY``;
* ``ours rmw``: fdblayer, one read, then the same writes (a conflict check).

Then ``ours`` again on a second server with ``synchronous_commit=off``: no
commit waits for its flush, so neither lock is held through one. That is
the most that taking both locks off the flush could give on this machine.

Usage::

    .venv/bin/python bench/bench_pg_commits.py [--seconds 3] [--procs 1,2,4,8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from typing import Any, Callable, Dict, List

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(BENCH)]

import psycopg  # noqa: E402

import fdblayer  # noqa: E402
from fdblayer.backends.postgres_server import TemporaryServer  # noqa: E402

INSERT = "INSERT INTO bench_rows SELECT %s, x FROM generate_series(1, 5) AS x"
ONE = (1).to_bytes(8, "little")


def _raw(extra: str) -> Callable[[str, int, float], int]:
    """A raw psycopg loop: the insert, then ``extra`` in the same transaction."""

    def loop(conninfo: str, index: int, seconds: float) -> int:
        conn = psycopg.connect(conninfo, autocommit=True)
        count, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            with conn.pipeline():  # one implicit transaction: both statements, one round trip
                conn.execute(INSERT, (f"{index}-{count}",))
                if extra:
                    conn.execute(extra)
            count += 1
        conn.close()
        return count

    return loop


def _ours(read: bool) -> Callable[[str, int, float], int]:
    """An fdblayer loop: 4 sets and an add on this process's keys (a read first with ``read``)."""

    def loop(url: str, index: int, seconds: float) -> int:
        db = fdblayer.open(url)
        count, end = 0, time.monotonic() + seconds

        @fdblayer.transactional
        def commit(tr: Any, n: int) -> None:
            if read:
                tr.get(b"r/%d/%d" % (index, n))
            for j in range(4):
                tr.set(b"w/%d/%d/%d" % (index, n, j), b"x" * 60)
            tr.add(b"c/%d" % index, ONE)

        while time.monotonic() < end:
            commit(db, count)
            count += 1
        db.close()
        return count

    return loop


KINDS: Dict[str, Callable[[str, int, float], int]] = {
    "raw": _raw(""),
    "raw+notify": _raw("SELECT pg_notify('bench', 'x')"),
    "raw+counter": _raw("UPDATE bench_counter SET n = n + 1"),
    "ours": _ours(read=False),
    "ours rmw": _ours(read=True),
}


def _child(kind: str, target: str, index: int, seconds: float, out: Any) -> None:
    out.put(KINDS[kind](target, index, seconds))


def rate(kind: str, target: str, procs: int, seconds: float) -> float:
    """Commits per second of ``procs`` processes running ``kind`` at once."""
    out: Any = multiprocessing.Queue()
    children = [multiprocessing.Process(target=_child, args=(kind, target, i, seconds, out)) for i in range(procs)]
    for child in children:
        child.start()
    total = 0
    for _ in children:
        total += out.get(timeout=seconds + 60)
    for child in children:
        child.join()
    return total / seconds


def _prepare(server: TemporaryServer) -> None:
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_rows (a text, b int)")
        conn.execute("CREATE TABLE bench_counter (n bigint)")
        conn.execute("INSERT INTO bench_counter VALUES (0)")


def table(server: TemporaryServer, kinds: List[str], procs: List[int], seconds: float, label: str) -> None:
    """Print one row of commits/s per kind, a column per process count."""
    for kind in kinds:
        target = server.url(prefix="bench") if kind.startswith("ours") else server.conninfo()
        cells = [rate(kind, target, n, seconds) for n in procs]
        grow = cells[-1] / cells[0] if cells[0] else 0.0
        print(
            f"{label + kind:<26}" + "".join(f"{c:>10,.0f}" for c in cells) + f"{grow:>9.2f}x",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--procs", default="1,2,4,8")
    args = parser.parse_args()
    procs = [int(n) for n in args.procs.split(",")]
    print(f"commits/s, one durable PostgreSQL server, {os.cpu_count()} CPUs, {args.seconds:g} s a cell")
    print(f"{'':<26}" + "".join(f"{str(n) + ' procs':>10}" for n in procs) + f"{'last/1':>10}")
    with TemporaryServer(durable=True) as server:
        _prepare(server)
        table(server, list(KINDS), procs, args.seconds, "")
    with TemporaryServer(durable=True, settings={"synchronous_commit": "off"}) as server:
        table(server, ["ours"], procs, args.seconds, "no flush wait: ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
