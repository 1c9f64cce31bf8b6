"""The systems and scenarios of ``bench_postgres_peers.py``: ours and the PostgreSQL-native peers.

Principle: as ``worker_peers.py`` does for Huey, RQ and Celery, each system
runs with its own worker command, on its own tables, and the driver polls
that system's own count of completed jobs every 20 ms (never adding work
per job). Every run (a "cell" of the table, for one system) gets a fresh
database on the one throwaway server, created before and dropped after.
The worker processes are started and stopped by ``worker_peers``' process
helpers (a session each; SIGTERM, then SIGKILL of what is left, and a check
that nothing of the session survives). The systems:

* ``ours``: ``python -m actors worker --store postgresql://... --concurrency
  N --port P bench=<handler>``, one such host per ``hosts``; the no-op and
  10 ms handlers are ``peer_tasks.noop`` and ``peer_tasks.sleep10``, the
  SQLite benchmark's; enqueue ``actors.jobs.enqueue`` (one transaction),
  bulk ``actors.jobs.add_many`` (one transaction, the type's timeout set
  first as a host sets it). Completion: ``bench_workers.OursPeer.done``
  (enqueued - pending - running, from the store); verified by the work
  records (every job succeeded exactly once).
* ``procrastinate``: ``procrastinate --app peer_pg_procrastinate.app
  --log-level warning worker --concurrency N`` (N async jobs at once in one
  process); enqueue ``task.defer()``, bulk ``task.batch_defer(...)``,
  synchronous, through ``App.replace_connector(SyncPsycopgConnector)``.
  Completion: ``procrastinate_jobs`` rows with status ``succeeded``.
* ``pgqueuer``: ``pgq run peer_pg_pgqueuer:factory --log-level WARNING
  --batch-size N`` with the entrypoints' ``concurrency_limit`` N, or
  (``limit=0``) its defaults: no limit, ``--batch-size`` 10. The batch size
  goes with the limit because pgqueuer frees a limited job's slot only when
  its completion log is flushed, which happens every ``batch size``
  completions or 0.1 s: a limit of N with the default batch of 10 drains at
  about 10 x N jobs/s (measured here: 9 jobs/s with 1, 38 with 4; with
  ``--batch-size N``, 188 and 799). Enqueue ``Queries.enqueue(name,
  payload)``, bulk the same call with lists, on one asyncpg connection.
  Completion: ``pgqueuer_log`` rows with status ``successful``.
* ``oban``: ``oban start --dsn URL --queues default:N --log-level WARNING``;
  enqueue ``Worker.enqueue()``, bulk ``Oban.enqueue_many(...)`` through a
  client-mode ``Oban`` on a psycopg pool. Completion: ``oban_jobs`` rows in
  state ``completed``.

The asynchronous producers (pgqueuer, oban) run each call to completion on
an event loop the driver keeps for the run, one call after the other.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _p in (str(BENCH), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import psycopg  # noqa: E402

import bench_workers as bw  # noqa: E402
import peer_pg_tasks  # noqa: E402
import worker_peers as wp  # noqa: E402

#: The job type (ours) every cell uses; each cell has a database of its own.
JOB_TYPE = bw.JOB_TYPE

#: Our handler per benchmark handler name.
OURS_HANDLERS = {"noop": "peer_tasks:noop", "sleep10": "peer_tasks:sleep10", "started": "peer_pg_tasks:started"}

#: Environment variable naming the database for the peers' worker processes.
ENV_URL = "PEER_PG_URL"

_SEQ = itertools.count(1)


class PgPeer(wp.Peer):
    """One system's run on a fresh database of ``server``.

    Subclasses implement ``enqueue`` (one job, one transaction),
    ``enqueue_bulk(n)`` (n jobs, one call), ``enqueue_started(path)`` (a job
    of the stamping handler), ``start_workers``, ``done`` and ``verify``."""

    name = ""
    #: The worker command and producer calls, in words (``settings()``).
    SETTINGS = ""
    #: Modules and commands the system needs (``worker_peers.require``).
    modules: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()

    def __init__(
        self, server: Any, workers: int = 1, handler: str = "noop", hosts: int = 1, limit: Optional[int] = None
    ) -> None:
        if handler not in OURS_HANDLERS:
            raise ValueError(f"handler must be one of {tuple(OURS_HANDLERS)}, not {handler!r}")
        wp.require(self.modules, self.commands, False)
        self.server, self.workers, self.handler, self.hosts = server, workers, handler, hosts
        self.limit = workers if limit is None else limit
        self.durability = "FULL"  # worker_peers' field; the server runs with fsync on
        self.dir = tempfile.mkdtemp(prefix=f"pg-peers-{self.name}-")
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []
        self.redis = None
        self.conn: Optional[psycopg.Connection] = None
        self.dbname = f"{self.name}_{next(_SEQ)}"
        self.url = ""
        try:
            server.create_database(self.dbname)
            self.url = server.url(self.dbname)
            self.conn = psycopg.connect(self.url, autocommit=True)
            self.setup()
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- what subclasses give

    def enqueue_bulk(self, n: int) -> None:
        """Enqueue ``n`` no-op jobs in one call (one transaction), as the system offers."""
        raise NotImplementedError

    def enqueue_started(self, path: str) -> None:
        """Enqueue one job of the stamping handler, its start time to be written to ``path``."""
        raise NotImplementedError

    # ---------------------------------------------------------------- shared

    def settings(self) -> str:
        return self.SETTINGS

    def count(self, sql: str) -> int:
        """The integer a ``SELECT count(*) ...`` on this run's database returns."""
        assert self.conn is not None
        return self.conn.execute(sql).fetchone()[0]

    def env(self, **extra: str) -> dict[str, str]:
        """The worker command's environment: bench/ and the repository on its path, the database."""
        return wp.child_env(PYTHONPATH=os.pathsep.join([str(BENCH), str(ROOT)]), **{ENV_URL: self.url}, **extra)

    def close(self) -> None:
        """Stop the workers (``worker_peers``), close the storage, drop the database."""
        try:
            super().close()
        finally:
            self.drop_database()

    def drop_database(self) -> None:
        """Close this process's connection and drop the run's database (if it was made)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.url:
            with psycopg.connect(self.server.conninfo(), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
            self.url = ""


class AsyncPgPeer(PgPeer):
    """A peer whose producer API is asynchronous: calls run on an event loop of the run."""

    loop: Optional[asyncio.AbstractEventLoop] = None

    def run(self, coro: Any) -> Any:
        """Run ``coro`` to completion on this run's event loop."""
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        return self.loop.run_until_complete(coro)

    def close_storage(self) -> None:
        try:
            self.close_async()
        finally:
            if self.loop is not None:
                self.loop.close()
                self.loop = None

    def close_async(self) -> None:
        """Close the producer's connections (on the loop)."""


# ---------------------------------------------------------------- ours


class Ours(PgPeer, bw.OursPeer):
    """Our worker hosts: ``hosts`` x ``python -m actors worker --concurrency N`` on the run's database."""

    name = "ours"

    def setup(self) -> None:
        import fdblayer
        from actors import jobs

        self.db = fdblayer.open(self.url)
        jobs.set_type_timeout(self.db, JOB_TYPE, 30)
        self.keep_counts()
        self.ports = [wp.free_port() for _ in range(self.hosts)]
        self.port = self.ports[0]
        self.enqueued = 0

    SETTINGS = (
        "python -m actors worker --store postgresql://... --concurrency N --port P "
        "bench=peer_tasks:noop (peer_tasks:sleep10, and 4 such hosts, in the hosts cell); "
        "actors.jobs.enqueue, actors.jobs.add_many"
    )

    def enqueue_bulk(self, n: int) -> None:
        from actors import jobs

        jobs.add_many(self.db, JOB_TYPE, {uuid.uuid4().hex: {} for _ in range(n)})
        self.enqueued += n

    def enqueue_started(self, path: str) -> None:
        from actors import jobs

        jobs.enqueue(self.db, JOB_TYPE, {"path": path})
        self.enqueued += 1

    def start_workers(self, burst: bool) -> None:
        for port in self.ports:
            self.spawn(
                [
                    sys.executable,
                    "-m",
                    "actors",
                    "worker",
                    "--store",
                    self.url,
                    "--concurrency",
                    str(self.workers),
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                    f"{JOB_TYPE}={OURS_HANDLERS[self.handler]}",
                ],
                self.env(),
            )

    def close(self) -> None:
        """SIGTERM to every host, their nodes stopped by port, then as every peer."""
        try:
            for proc in self.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            for proc in self.procs:
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            from supervision.system import stop_node

            for port in getattr(self, "ports", []):
                stop_node(port)
            wp.Peer.close(self)
        finally:
            self.drop_database()

    def close_storage(self) -> None:
        if getattr(self, "db", None) is not None:
            self.db.close()
            self.db = None


# ---------------------------------------------------------------- procrastinate


class Procrastinate(PgPeer):
    """procrastinate: ``procrastinate worker --concurrency N``; a synchronous producer."""

    name = "procrastinate"
    modules = ("procrastinate",)
    commands = ("procrastinate",)

    def setup(self) -> None:
        from procrastinate import SyncPsycopgConnector

        import peer_pg_procrastinate as m

        self.tasks = m
        self._swap = m.app.replace_connector(SyncPsycopgConnector(conninfo=self.url))
        self.app = self._swap.__enter__()
        self.app.open()
        self.app.schema_manager.apply_schema()

    SETTINGS = (
        "procrastinate --app peer_pg_procrastinate.app worker --concurrency N (async tasks); "
        "task.defer, task.batch_defer through SyncPsycopgConnector"
    )

    def enqueue(self) -> None:
        self.tasks.noop.defer()

    def enqueue_bulk(self, n: int) -> None:
        self.tasks.noop.batch_defer(*({} for _ in range(n)))

    def enqueue_started(self, path: str) -> None:
        self.tasks.started.defer(path=path)

    def start_workers(self, burst: bool) -> None:
        self.spawn(
            [
                wp.command("procrastinate"),
                "--app",
                "peer_pg_procrastinate.app",
                "--log-level",
                "warning",
                "worker",
                "--concurrency",
                str(self.workers),
            ],
            self.env(),
        )

    def done(self) -> int:
        return self.count("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")

    def failed(self) -> int:
        return self.count("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('failed', 'aborted')")

    def verify(self, total: int) -> None:
        done, left = self.done(), self.count("SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'")
        if done != total or left:
            raise RuntimeError(f"procrastinate: {done} succeeded (wanted {total}), {left} in another status")

    def close_storage(self) -> None:
        if getattr(self, "_swap", None) is not None:
            try:
                self.app.close()
            finally:
                self._swap.__exit__(None, None, None)
                self._swap = None


# ---------------------------------------------------------------- pgqueuer


class Pgqueuer(AsyncPgPeer):
    """pgqueuer: ``pgq run peer_pg_pgqueuer:factory``, concurrency_limit N (0: its default)."""

    name = "pgqueuer"
    modules = ("pgqueuer", "asyncpg")
    commands = ("pgq",)

    def setup(self) -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        self.aconn = self.run(asyncpg.connect(self.url))
        self.queries = Queries(AsyncpgDriver(self.aconn))
        self.run(self.queries.install())

    SETTINGS = (
        "pgq run peer_pg_pgqueuer:factory --batch-size N (asyncpg; async entrypoints with "
        "concurrency_limit N), or its defaults (no limit, batches of 10); Queries.enqueue, scalar or lists"
    )

    def enqueue(self) -> None:
        self.run(self.queries.enqueue("noop", None))

    def enqueue_bulk(self, n: int) -> None:
        self.run(self.queries.enqueue(["noop"] * n, [None] * n, [0] * n))

    def enqueue_started(self, path: str) -> None:
        self.run(self.queries.enqueue("started", path.encode()))

    def start_workers(self, burst: bool) -> None:
        import peer_pg_pgqueuer

        batch = ["--batch-size", str(self.limit)] if self.limit else []  # 0: its defaults, batches of 10
        self.spawn(
            [wp.command("pgq"), "run", "peer_pg_pgqueuer:factory", "--log-level", "WARNING", *batch],
            self.env(**{peer_pg_pgqueuer.ENV_LIMIT: str(self.limit)}),
        )

    def done(self) -> int:
        return self.count("SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")

    def failed(self) -> int:
        return self.count("SELECT count(*) FROM pgqueuer_log WHERE status IN ('exception', 'failed')")

    def verify(self, total: int) -> None:
        done, left = self.done(), self.count("SELECT count(*) FROM pgqueuer")
        if done != total or left:
            raise RuntimeError(f"pgqueuer: {done} successful (wanted {total}), {left} still in the queue")

    def close_async(self) -> None:
        if getattr(self, "aconn", None) is not None:
            self.run(self.aconn.close())
            self.aconn = None


# ---------------------------------------------------------------- oban


class ObanPeer(AsyncPgPeer):
    """oban-py: ``oban start --queues default:N``; a client-mode Oban as the producer."""

    name = "oban"
    modules = ("oban",)
    commands = ("oban",)

    def setup(self) -> None:
        from oban import Oban
        from oban.schema import install
        from psycopg_pool import AsyncConnectionPool

        import peer_pg_oban

        self.workers_mod = peer_pg_oban
        self.pool = AsyncConnectionPool(conninfo=self.url, min_size=1, max_size=2, open=False)
        self.run(self.pool.open())
        self.run(self.pool.wait())
        self.run(install(self.pool))
        self.oban = Oban(pool=self.pool)  # no queues: client mode, registered as "Oban"

    SETTINGS = "oban start --dsn URL --queues default:N (async workers); Worker.enqueue, Oban.enqueue_many"

    def enqueue(self) -> None:
        self.run(self.workers_mod.Noop.enqueue())

    def enqueue_bulk(self, n: int) -> None:
        self.run(self.oban.enqueue_many([self.workers_mod.Noop.new() for _ in range(n)]))

    def enqueue_started(self, path: str) -> None:
        self.run(self.workers_mod.Started.enqueue({"path": path}))

    def start_workers(self, burst: bool) -> None:
        self.spawn(
            [
                wp.command("oban"),
                "start",
                "--dsn",
                self.url,
                "--queues",
                f"default:{self.workers}",
                "--log-level",
                "WARNING",
            ],
            self.env(),
        )

    def done(self) -> int:
        return self.count("SELECT count(*) FROM oban_jobs WHERE state = 'completed'")

    def failed(self) -> int:
        return self.count("SELECT count(*) FROM oban_jobs WHERE state IN ('retryable', 'discarded', 'cancelled')")

    def verify(self, total: int) -> None:
        done, left = self.done(), self.count("SELECT count(*) FROM oban_jobs WHERE state <> 'completed'")
        if done != total or left:
            raise RuntimeError(f"oban: {done} completed (wanted {total}), {left} in another state")

    def close_async(self) -> None:
        if getattr(self, "pool", None) is not None:
            self.run(self.pool.close())
            self.pool = None


SYSTEMS: dict[str, type] = {"ours": Ours, "procrastinate": Procrastinate, "pgqueuer": Pgqueuer, "oban": ObanPeer}


# ---------------------------------------------------------------- scenarios


def wait_done(peer: PgPeer, base: int, jobs: int, start: float, burst: bool = False) -> tuple[float, float, int]:
    """Poll ``peer.done()`` every 20 ms until ``base + jobs``.

    Returns (end, first, done at first): perf_counter times of the poll that
    saw them all and of the first poll that saw more than ``base`` done, and
    how many that first poll saw (beyond ``base``)."""
    first, at_first = None, 0
    deadline = start + 60 + 0.1 * jobs
    while True:
        count = peer.done()
        now = time.perf_counter()
        if first is None and count > base:
            first, at_first = now, count - base
        if count >= base + jobs:
            return now, first, at_first
        peer.check_workers(burst)
        if now > deadline:
            raise TimeoutError(
                f"{peer.name}: {count - base}/{jobs} done after {now - start:.0f} s:\n{peer.logs_tail()}"
            )
        time.sleep(wp.POLL_SECONDS)


def enqueue_one(cls: type, server: Any, jobs: int, warm: int = 50) -> dict[str, float]:
    """``jobs`` no-op jobs enqueued one per call (one transaction each), no worker running."""
    with cls(server) as peer:
        for _ in range(warm):  # connections and prepared statements made
            peer.enqueue()
        t = time.perf_counter()
        for _ in range(jobs):
            peer.enqueue()
        seconds = time.perf_counter() - t
    return {"jobs_per_s": jobs / seconds, "ms_each": 1000 * seconds / jobs}


def enqueue_bulk(cls: type, server: Any, jobs: int) -> dict[str, float]:
    """``jobs`` no-op jobs enqueued in one call, no worker running."""
    with cls(server) as peer:
        t = time.perf_counter()
        peer.enqueue_bulk(jobs)
        seconds = time.perf_counter() - t
    return {"jobs_per_s": jobs / seconds}


def drain(cls: type, server: Any, jobs: int, workers: int, limit: Optional[int] = None) -> dict[str, float]:
    """``jobs`` no-op jobs enqueued in bulk with no worker running, then the worker command started;
    seconds from just before it is started to the poll that sees them all done."""
    with cls(server, workers=workers, limit=limit) as peer:
        t = time.perf_counter()
        peer.enqueue_bulk(jobs)
        bulk_rate = jobs / (time.perf_counter() - t)
        start = time.perf_counter()
        peer.start_workers(burst=False)
        end, first, at_first = wait_done(peer, 0, jobs, start)
        peer.verify(jobs)
    return {
        "jobs_per_s": jobs / (end - start),
        "first_done_s": first - start,
        "after_first_per_s": (jobs - at_first) / (end - first) if end > first else float("inf"),
        "bulk_per_s": bulk_rate,
    }


def latency(cls: type, server: Any, samples: int, workers: int, gap: float = 0.05) -> dict[str, float]:
    """add -> handler started on an idle worker command of ``workers``: the time the handler stamps
    minus the time just before the enqueue call, ``samples`` jobs one at a time, ``gap`` s apart."""
    with cls(server, workers=workers, handler="started") as peer:
        peer.start_workers(burst=False)
        warm = os.path.join(peer.dir, "warm")
        peer.enqueue_started(warm)
        wp.poll(
            lambda: peer.check_workers(False) or peer_pg_tasks.read_stamp(warm),
            120,
            f"{peer.name}'s first job to start",
        )
        lat = []
        for i in range(samples):
            path = os.path.join(peer.dir, f"lat{i}")
            time.sleep(gap)
            t = time.time()
            peer.enqueue_started(path)
            started = wp.poll(
                lambda: peer.check_workers(False) or peer_pg_tasks.read_stamp(path),
                30,
                f"{peer.name}'s job {i} to start",
            )
            lat.append((started - t) * 1000)
    lat.sort()
    return {"p50_ms": statistics.median(lat), "p95_ms": lat[min(len(lat) - 1, int(0.95 * len(lat)))], "max_ms": lat[-1]}


def hosts_rate(server: Any, jobs: int, hosts: int, workers: int = 4) -> dict[str, float]:
    """Ours, 10 ms sleeping handler: ``hosts`` hosts of ``workers`` started and warmed up (2 jobs
    a worker run and waited for), then ``jobs`` added with one ``add_many``; seconds from its
    return to the poll that sees them all done."""
    with Ours(server, workers=workers, handler="sleep10", hosts=hosts) as peer:
        peer.start_workers(burst=False)
        warm = 2 * workers * hosts
        for _ in range(warm):
            peer.enqueue()
        wait_done(peer, 0, warm, time.perf_counter())
        base = peer.done()
        peer.enqueue_bulk(jobs)
        start = time.perf_counter()
        end, first, at_first = wait_done(peer, base, jobs, start)
        peer.verify(base + jobs)
    return {"jobs_per_s": jobs / (end - start), "seconds": end - start}


def run_guarded(what: str, fn: Callable[[], dict]) -> dict:
    """``fn()``, or {"error": ...} when it raises (one broken run is reported, the rest go on)."""
    t = time.monotonic()
    try:
        out = fn()
    except wp.PeerUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001
        first = str(exc).splitlines()[0] if str(exc) else ""
        out = {"error": f"{type(exc).__name__}: {first}"[:200]}
        print(f"  {what}: FAILED {out['error']}", file=sys.stderr, flush=True)
        return out
    shown = ", ".join(f"{k} {v:,.1f}" for k, v in out.items())
    print(f"  {what}: {shown} ({time.monotonic() - t:.1f} s)", file=sys.stderr, flush=True)
    return out
