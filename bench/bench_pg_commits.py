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
* ``raw+counter apart``: the same transaction ended without waiting for
  its flush (``synchronous_commit`` off for it alone: the row lock goes at
  once), then, in the same pipeline, a one-record transaction committed
  with the session's setting (``pg_logical_emit_message``), which returns
  once the WAL up to it, so the first commit, is flushed: the writer is
  still answered only once its commit is durable, and concurrent flushes
  share an fsync;
* ``ours``: fdblayer, 4 sets and an atomic add (a blind write): the
  commit function, with its order lock and its ``NOTIFY``;
* ``ours rmw``: fdblayer, one read, then the same writes (a conflict check);
* ``ours apart``, ``ours rmw apart``: the same on a store opened with
  ``flush=apart`` (the technique of ``raw+counter apart``, in the store).

Then ``ours`` again on a second server with ``synchronous_commit=off``: no
commit waits for its flush, so neither lock is held through one. That is
the most that taking both locks off the flush could give on this machine.

``--fsync-delay-us N`` makes the servers' disk slow, as a network disk is:
a preloaded library (built with ``gcc``) sleeps N microseconds in each
``fsync`` and ``fdatasync`` of the server's processes.

Usage::

    .venv/bin/python bench/bench_pg_commits.py [--seconds 3] [--procs 1,2,4,8] [--fsync-delay-us 2000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(BENCH)]

import psycopg  # noqa: E402

import fdblayer  # noqa: E402
from fdblayer.backends.postgres_server import TemporaryServer  # noqa: E402

INSERT = "INSERT INTO bench_rows SELECT %s, x FROM generate_series(1, 5) AS x"
ONE = (1).to_bytes(8, "little")


def _raw(extra: str, apart: bool = False) -> Callable[[str, int, float], int]:
    """A raw psycopg loop: the insert, then ``extra`` in the same
    transaction (with ``apart``, ended unflushed, then flushed by another)."""

    def loop(conninfo: str, index: int, seconds: float) -> int:
        conn = psycopg.connect(conninfo, autocommit=True)
        count, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            with conn.pipeline():  # one implicit transaction until COMMIT or the end: one round trip
                conn.execute(INSERT, (f"{index}-{count}",))
                if extra:
                    conn.execute(extra)
                if apart:
                    conn.execute("SELECT set_config('synchronous_commit', 'off', true)")
                    conn.execute("COMMIT")
                    conn.execute("SELECT pg_logical_emit_message(true, 'bench', '')")
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
    "raw+counter apart": _raw("UPDATE bench_counter SET n = n + 1", apart=True),
    "ours": _ours(read=False),
    "ours rmw": _ours(read=True),
    "ours apart": _ours(read=False),
    "ours rmw apart": _ours(read=True),
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
        if kind.startswith("ours") and kind.endswith("apart"):
            target += "&flush=apart"
        cells = [rate(kind, target, n, seconds) for n in procs]
        grow = cells[-1] / cells[0] if cells[0] else 0.0
        print(
            f"{label + kind:<26}" + "".join(f"{c:>10,.0f}" for c in cells) + f"{grow:>9.2f}x",
            flush=True,
        )


SLOW_SYNC = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
static void pause_(void) { const char *s = getenv("BENCH_FSYNC_DELAY_US"); usleep(s ? atoi(s) : 0); }
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "fsync");
    pause_();
    return real(fd);
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "fdatasync");
    pause_();
    return real(fd);
}
"""


def slow_disk(delay_us: int, directory: str) -> None:
    """Make every process started from now on (the servers) sleep ``delay_us`` in each fsync."""
    source, library = os.path.join(directory, "slow_sync.c"), os.path.join(directory, "slow_sync.so")
    with open(source, "w") as f:
        f.write(SLOW_SYNC)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", library, source, "-ldl"], check=True)
    os.chmod(directory, 0o755)  # the server runs as a user of its own
    os.chmod(library, 0o755)
    os.environ["LD_PRELOAD"] = library
    os.environ["BENCH_FSYNC_DELAY_US"] = str(delay_us)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--procs", default="1,2,4,8")
    parser.add_argument("--fsync-delay-us", type=int, default=0)
    args = parser.parse_args()
    procs = [int(n) for n in args.procs.split(",")]
    disk = "this machine's disk"
    if args.fsync_delay_us:
        slow_disk(args.fsync_delay_us, tempfile.mkdtemp(prefix="bench-slow-sync-"))
        disk = f"this machine's disk and {args.fsync_delay_us} us more a fsync"
    print(f"commits/s, one durable PostgreSQL server, {os.cpu_count()} CPUs, {disk}, {args.seconds:g} s a cell")
    print(f"{'':<26}" + "".join(f"{str(n) + ' procs':>10}" for n in procs) + f"{'last/1':>10}")
    with TemporaryServer(durable=True) as server:
        _prepare(server)
        table(server, list(KINDS), procs, args.seconds, "")
    with TemporaryServer(durable=True, settings={"synchronous_commit": "off"}) as server:
        table(server, ["ours"], procs, args.seconds, "no flush wait: ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
