"""Benchmark: ours on PostgreSQL beside procrastinate, pgqueuer and oban-py, each with its own worker command.

Principle: one throwaway PostgreSQL server (Debian's binaries, started by
``fdblayer.backends.postgres_server.TemporaryServer`` with ``fsync`` on and the
server's defaults otherwise, as ``store_postgres.py`` starts it), a fresh
database for every cell and system (created before, dropped after), every
system run as its users run it: its own worker command, its own producer
API, its own tables, and the driver polling that system's own count of
completed jobs every 20 ms, as ``bench_workers.py`` / ``worker_peers.py``
do for the SQLite benchmark (see ``pg_peers.py`` for each system's
commands, calls and counts). The systems of a cell run back to back, so
they share the machine's weather. Ours is ``python -m actors worker
--store postgresql://... --concurrency N bench=peer_tasks:noop``, enqueuing
with ``actors.jobs.enqueue`` and ``actors.jobs.add_many``; the peers are
procrastinate 3.10, pgqueuer 1.6 and oban-py 0.7 (``pg_peers.py``). The
peers' handlers are ``async def`` (their frameworks run on asyncio; a
synchronous one would run in a thread), ours a plain function.

Cells (``--jobs`` no-op jobs, 5,000 by default):

* drain, 1 worker / 4 workers: the jobs are enqueued in bulk with no worker
  running, then the worker command is started with 1 (4) workers
  (procrastinate ``--concurrency``, pgqueuer the entrypoint's
  ``concurrency_limit`` with ``--batch-size`` N, oban ``--queues
  default:N``, ours ``--concurrency``); jobs/s = jobs / seconds from just
  before the command starts to the poll that sees them all done, so it
  includes the start; "after the first" is the rate from the first poll
  that sees a job done to the end. With 4 workers pgqueuer also runs with
  its defaults (no limit, batches of 10), as its users who set no limit
  run it; that counts as a peer too.
* one enqueue per transaction: the jobs enqueued one call each, as a web
  request enqueues (after 50 untimed ones), no worker running: jobs/s and
  milliseconds a call.
* bulk enqueue: the jobs in one call (one transaction) into an empty
  queue; the figure is the range over the three bulk enqueues of the run
  (this cell's and the two drains' fills), the ratio on their medians.
* add -> handler started: an idle worker command of ``--latency-workers``
  (4) workers, warmed up by one job; then ``--latency`` (50) jobs one at a
  time, 50 ms apart: the time the handler stamps as its first statement
  (``peer_pg_tasks.stamp``, to a file) minus the time just before the
  enqueue call; p50 (p95) in ms.
* worker start -> first job done: the drains' time from just before the
  worker command starts to the first poll that sees a job done (20 ms
  resolution), seconds, for 1 and for 4 workers; the ratio on their mean.
* hosts (ours only): a 10 ms sleeping handler (``peer_tasks.sleep10``), 4
  hosts of ``--concurrency 4`` on one database against 1 host of 4: the
  hosts started and warmed up (2 jobs a worker run and waited for), then the
  jobs added with one ``add_many``; jobs/s from its return to the poll that
  sees them all done; the ratio 4 hosts / 1 host.

The table gives each cell for each system and "ours / best peer": a rate
ratio (above 1: ours is ahead), or for the two times how many times slower
or faster ours is; then the targets of issue 28 (drain with 4 workers >=
1.5x; one enqueue per transaction >= 1.0x; bulk >= 0.5x pgqueuer's and above
every other peer; add -> started and start -> first job at most the best
peer's; 4 hosts >= 3x 1 host). At the end every worker process and the
server are stopped, and every process that inherited this run's marker
variable is looked for: "no worker process survives" or the survivors.

Usage (oban-py 0.7 needs Python 3.12 or newer: run everything, ours too,
under one 3.12 virtual environment; Debian's ``postgresql`` package for
the server)::

    ~/.pyenv/versions/3.12.1/bin/python -m venv /work/venv312
    /work/venv312/bin/pip install -e . -r bench/requirements-postgres-peers.txt
    /work/venv312/bin/python bench/bench_postgres_peers.py [--jobs 5000]
        [--latency 50] [--latency-workers 4]
        [--systems ours,procrastinate,pgqueuer,oban] [--no-hosts]

A full run takes about 5 minutes on the project's 2-CPU machine. A system
whose package or command is missing is reported as not available and left
out; a run that fails is reported in its cell and the others go on.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]

import psycopg  # noqa: E402

import pg_peers as pp  # noqa: E402
import worker_peers as wp  # noqa: E402
from fdblayer.backends.postgres_server import TemporaryServer  # noqa: E402

PEERS = ("procrastinate", "pgqueuer", "oban")
SYSTEMS = ("ours",) + PEERS

#: The variable every process of the run inherits (the server's too), to find survivors by.
MARK = "BENCH_POSTGRES_PEERS_RUN"

#: The pgqueuer run with its defaults (4-worker drain), reported beside pgqueuer's.
PGQ_DEFAULTS = "pgqueuer defaults"


# ---------------------------------------------------------------- running the cells


class Runs:
    """The figures of the run: {cell: {system: dict}}, and the systems found unavailable."""

    def __init__(self, systems: list[str]) -> None:
        self.systems = systems
        self.cells: dict[str, dict[str, dict]] = {}
        self.unavailable: dict[str, str] = {}

    def run(self, cell: str, system: str, fn: Callable[[], dict]) -> None:
        """Run one cell of one system (unless the system is unavailable), keep its figures."""
        if system.split()[0] in self.unavailable:
            return
        try:
            self.cells.setdefault(cell, {})[system] = pp.run_guarded(f"{cell} {system}", fn)
        except wp.PeerUnavailable as exc:
            self.unavailable[system.split()[0]] = exc.reason
            print(f"  {system}: not available: {exc.reason}", file=sys.stderr, flush=True)

    def get(self, cell: str, system: str) -> Optional[dict]:
        """The figures of a run that succeeded, else None."""
        row = self.cells.get(cell, {}).get(system)
        return None if row is None or "error" in row else row


def run_all(server: TemporaryServer, args: argparse.Namespace) -> Runs:
    """Every cell for every system, systems back to back within a cell."""
    runs = Runs(args.systems)
    n = args.jobs
    for system in args.systems:
        runs.run("enqueue", system, lambda: pp.enqueue_one(pp.SYSTEMS[system], server, n))
    for system in args.systems:
        runs.run("bulk", system, lambda: pp.enqueue_bulk(pp.SYSTEMS[system], server, n))
    for workers in (1, 4):
        for system in args.systems:
            runs.run(f"drain{workers}", system, lambda: pp.drain(pp.SYSTEMS[system], server, n, workers))
        if workers == 4 and "pgqueuer" in args.systems:
            runs.run("drain4", PGQ_DEFAULTS, lambda: pp.drain(pp.Pgqueuer, server, n, 4, limit=0))
    for system in args.systems:
        runs.run("latency", system, lambda: pp.latency(pp.SYSTEMS[system], server, args.latency, args.latency_workers))
    if args.hosts and "ours" in args.systems:
        for hosts in (1, 4):
            runs.run(f"hosts{hosts}", "ours", lambda: pp.hosts_rate(server, n, hosts))
    return runs


# ---------------------------------------------------------------- the table


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _rate_ratio(ours: Optional[float], peers: dict[str, float]) -> tuple[Optional[float], str]:
    """(ours / best peer, the ratio's text naming the best peer) for a rate (higher is better)."""
    if ours is None or not peers:
        return None, "-"
    best = max(peers, key=peers.get)
    ratio = ours / peers[best]
    return ratio, f"{ratio:.2f}x ({best})"


def _time_ratio(ours: Optional[float], peers: dict[str, float]) -> tuple[Optional[float], str]:
    """(ours / best peer, text) for a time (lower is better): "1.6x slower" or "1.3x faster"."""
    if ours is None or not peers:
        return None, "-"
    best = min(peers, key=peers.get)
    ratio = ours / peers[best]
    words = f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"
    return ratio, f"{words} ({best})"


def _met(ok: Optional[bool]) -> str:
    return "-" if ok is None else ("met" if ok else "**missed**")


def table(runs: Runs) -> list[list[str]]:
    """The rows: cell, each system, ours / best peer, target."""
    systems = [s for s in SYSTEMS if s in runs.systems]
    peers = [s for s in systems if s != "ours"]
    rows = []

    def cell_text(cell: str, system: str, fmt: Callable[[dict], str]) -> str:
        if system.split()[0] in runs.unavailable and system not in runs.cells.get(cell, {}):
            return "n/a"
        row = runs.cells.get(cell, {}).get(system)
        if row is None:
            return "-"
        return f"failed ({row['error']})" if "error" in row else fmt(row)

    def value(cell: str, system: str, key: str) -> Optional[float]:
        row = runs.get(cell, system)
        return None if row is None else row[key]

    def peer_values(cell: str, key: str, extra: tuple[str, ...] = ()) -> dict[str, float]:
        out = {}
        for p in list(peers) + list(extra):
            v = value(cell, p, key)
            if v is not None:
                out[p] = v
        return out

    drain_fmt = lambda r: f"{_n(r['jobs_per_s'])} ({_n(r['after_first_per_s'])} after the first)"  # noqa: E731
    # drain, 1 worker
    ratio, text = _rate_ratio(value("drain1", "ours", "jobs_per_s"), peer_values("drain1", "jobs_per_s"))
    rows.append(["drain, 1 worker (jobs/s)"] + [cell_text("drain1", s, drain_fmt) for s in systems] + [text, "-"])
    # drain, 4 workers (pgqueuer also with its defaults)
    cols = []
    for s in systems:
        txt = cell_text("drain4", s, drain_fmt)
        if s == "pgqueuer" and PGQ_DEFAULTS in runs.cells.get("drain4", {}):
            txt += "; " + cell_text("drain4", PGQ_DEFAULTS, drain_fmt) + " with its defaults"
        cols.append(txt)
    ratio, text = _rate_ratio(
        value("drain4", "ours", "jobs_per_s"), peer_values("drain4", "jobs_per_s", (PGQ_DEFAULTS,))
    )
    rows.append(
        ["drain, 4 workers (jobs/s)"]
        + cols
        + [text, "target >= 1.5x: " + _met(None if ratio is None else ratio >= 1.5)]
    )
    # one enqueue per transaction
    ratio, text = _rate_ratio(value("enqueue", "ours", "jobs_per_s"), peer_values("enqueue", "jobs_per_s"))
    rows.append(
        ["one enqueue per transaction (jobs/s)"]
        + [cell_text("enqueue", s, lambda r: f"{_n(r['jobs_per_s'])} ({r['ms_each']:.2f} ms each)") for s in systems]
        + [text, "target >= 1.0x: " + _met(None if ratio is None else ratio >= 1.0)]
    )
    # bulk: this cell's and the drains' fills
    bulks: dict[str, list[float]] = {}
    for s in systems:
        got = [
            v
            for v in (
                value("bulk", s, "jobs_per_s"),
                value("drain1", s, "bulk_per_s"),
                value("drain4", s, "bulk_per_s"),
            )
            if v is not None
        ]
        if got:
            bulks[s] = got

    def bulk_fmt(s: str) -> str:
        if s not in bulks:
            return cell_text("bulk", s, lambda r: "")
        lo, hi = min(bulks[s]), max(bulks[s])
        return f"{_n(lo)}-{_n(hi)}" if len(bulks[s]) > 1 else _n(lo)

    medians = {s: statistics.median(v) for s, v in bulks.items()}
    ratio, text = _rate_ratio(medians.get("ours"), {p: medians[p] for p in peers if p in medians})
    target = None
    if "ours" in medians and "pgqueuer" in medians:
        others = [medians[p] for p in peers if p in medians and p != "pgqueuer"]
        target = medians["ours"] >= 0.5 * medians["pgqueuer"] and all(medians["ours"] > o for o in others)
        if not text.endswith("(pgqueuer)"):
            text += f"; {medians['ours'] / medians['pgqueuer']:.2f}x pgqueuer's"
    rows.append(
        [f"bulk enqueue, one call (jobs/s, range of {max(map(len, bulks.values()), default=0)})"]
        + [bulk_fmt(s) for s in systems]
        + [text, ">= 0.5x pgqueuer, above the others: " + _met(target)]
    )
    # add -> handler started
    ratio, text = _time_ratio(value("latency", "ours", "p50_ms"), peer_values("latency", "p50_ms"))
    rows.append(
        ["add -> handler started, idle workers, p50 (p95) ms"]
        + [cell_text("latency", s, lambda r: f"{r['p50_ms']:.1f} ({r['p95_ms']:.1f})") for s in systems]
        + [text, "target <= best peer: " + _met(None if ratio is None else ratio <= 1.0)]
    )
    # worker start -> first job done
    firsts: dict[str, list[float]] = {}
    for s in list(systems) + [PGQ_DEFAULTS]:
        got = [v for v in (value("drain1", s, "first_done_s"), value("drain4", s, "first_done_s")) if v is not None]
        if got:
            firsts.setdefault(s.split()[0], []).extend(got)

    def first_fmt(s: str) -> str:
        if s not in firsts:
            return cell_text("drain1", s, lambda r: "")
        lo, hi = min(firsts[s]), max(firsts[s])
        return f"{lo:.2f}-{hi:.2f}" if hi - lo >= 0.005 else f"{lo:.2f}"

    means = {s: statistics.mean(v) for s, v in firsts.items()}
    ratio, text = _time_ratio(means.get("ours"), {p: means[p] for p in peers if p in means})
    rows.append(
        ["worker start -> first job done (s)"]
        + [first_fmt(s) for s in systems]
        + [text, "target <= best peer: " + _met(None if ratio is None else ratio <= 1.0)]
    )
    # hosts, ours only
    one, four = value("hosts1", "ours", "jobs_per_s"), value("hosts4", "ours", "jobs_per_s")
    if "hosts1" in runs.cells or "hosts4" in runs.cells:
        if one is not None and four is not None:
            ours_txt, ratio_txt = f"{_n(four)} vs {_n(one)}", f"{four / one:.2f}x (4 hosts / 1 host)"
            target = four / one >= 3.0
        else:
            ours_txt = "; ".join(cell_text(c, "ours", lambda r: _n(r["jobs_per_s"])) for c in ("hosts4", "hosts1"))
            ratio_txt, target = "-", None
        rows.append(
            ["4 hosts of 4 vs 1 host of 4, 10 ms handler (jobs/s)", ours_txt]
            + ["-"] * len(peers)
            + [ratio_txt, "target >= 3x: " + _met(target)]
        )
    return rows


def print_table(runs: Runs) -> None:
    """The table, markdown style, then the settings."""
    systems = [s for s in SYSTEMS if s in runs.systems]
    head = ["cell"] + systems + ["ours / best peer", "issue 28 target"]
    print("| " + " | ".join(head) + " |")
    print("| " + " | ".join("---" for _ in head) + " |")
    for row in table(runs):
        print("| " + " | ".join(row) + " |")
    for system, reason in runs.unavailable.items():
        print(f"\n{system}: not available: {reason}")


# ---------------------------------------------------------------- survivors


def marked_processes(mark: str) -> list[tuple[int, str]]:
    """(pid, command) of every live process but this one whose environment holds ``MARK=mark``."""
    needle = f"{MARK}={mark}".encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            stat = wp.proc_stat(int(name))
        except OSError:
            continue
        if stat is not None and stat[0] not in ("Z", "X"):
            out.append((int(name), cmd[:120]))
    return out


def versions(server: TemporaryServer) -> str:
    """The systems' versions, the server's and Python's."""
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
        fsync = conn.execute("SHOW fsync").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    names = ("procrastinate", "pgqueuer", "oban", "asyncpg", "psycopg")
    return (
        ", ".join(f"{n} {wp.version(n)}" for n in names)
        + f", python {platform.python_version()}; PostgreSQL {pg} (fsync {fsync}, synchronous_commit {sync})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per cell (default 5000)")
    parser.add_argument("--latency", type=int, default=50, help="add -> started samples (default 50)")
    parser.add_argument("--latency-workers", type=int, default=4, help="workers of the idle command (default 4)")
    parser.add_argument("--systems", type=lambda s: wp.csv(s, SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--no-hosts", dest="hosts", action="store_false", help="skip the 4 hosts / 1 host cell")
    args = parser.parse_args()

    mark = uuid.uuid4().hex
    os.environ[MARK] = mark
    started = time.monotonic()
    server = TemporaryServer(durable=True).start()
    try:
        print(f"server: a throwaway PostgreSQL at 127.0.0.1:{server.port}; {versions(server)}")
        print(wp.compile_ours())
        print(
            f"{args.jobs:,} no-op jobs a cell, a fresh database for each cell and system; "
            f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n",
            flush=True,
        )
        runs = run_all(server, args)
    finally:
        server.stop()
    print()
    print_table(runs)
    print()
    for system in (s for s in SYSTEMS if s in args.systems and s not in runs.unavailable):
        print(f"{system}: {pp.SYSTEMS[system].SETTINGS}")
    print(f"\n{time.monotonic() - started:.0f} s, load now {os.getloadavg()[0]:.1f}")
    sessions = wp.survivors()
    left = marked_processes(mark)
    if sessions or left:
        print(f"SURVIVING processes: sessions {sessions}; {left}")
        return 1
    print("no worker process survives (nor the server)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
