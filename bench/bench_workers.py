"""Benchmark: our worker hosts side by side with Huey, RQ and Celery workers.

Principle: every system runs the same plain functions (``peer_tasks``:
``noop``, ``sleep10``, ``cpu5``) with its own workers started from its own
command line, and the driver polls each one's own count of completed jobs
every 20 ms (see ``worker_peers.py`` for the peers' settings). Ours is
``otpjobs worker --store sqlite:///...?synchronous=FULL|NORMAL
--concurrency N bench=peer_tasks:<handler>`` (one worker process per
concurrency slot, a dispatcher claiming and finishing in batches); jobs
are enqueued with ``actors.jobs.enqueue``, one transaction each, as a
user's producer does. Ours keeps a lease per running job, re-enqueues a
dead worker's job at once, and a job is finished at most once; Huey
deletes a task when it dequeues it, so a worker that dies loses it.

Also measured on ours alone (an idle pool of 4, NORMAL):

* add -> handler started, p50/p95 over ``--latency`` jobs enqueued one at
  a time (the handler returns ``time.time()`` at its start);
* SIGKILL of a worker mid-job -> the job running again on another worker,
  p50/p95 over ``--kills`` jobs (the handler writes its pid and start time,
  the driver kills that pid, the second attempt returns its start time).

Ratios printed: ours / peer for each (scenario, durability, handler,
workers) cell, and the scaling of the 10 ms handler from 1 to 16 workers.
Targets (issue 13): no-op drain with 4 workers >= 2x Huey and >= 5x RQ at
the same durability and >= Celery; sleep10 x16 >= 10x sleep10 x1; add ->
started p50 < 5 ms; SIGKILL -> running again p50 < 1 s.

Usage (peers: ``pip install -e '.[bench]'`` and Debian's redis-server)::

    .venv/bin/python bench/bench_workers.py [--jobs 10000] [--workers 1,4,16]
        [--handlers noop,sleep10,cpu5] [--peers ours,huey,rq,celery]
        [--scenarios drain,stream] [--durability FULL,NORMAL]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]

import worker_peers as wp  # noqa: E402

import fdblayer  # noqa: E402
from actors import jobs  # noqa: E402
from fdblayer.interface import transactional  # noqa: E402
from fdblayer.jobs import counts, overview, pending, work  # noqa: E402
from fdblayer.jobs.keys import DEFAULT_LAYOUT  # noqa: E402
from fdblayer.jobs.work_record import SUCCEEDED, WorkRecord  # noqa: E402
from supervision.system import stop_node  # noqa: E402

JOB_TYPE = "bench"


class OursPeer(wp.Peer):
    """Our worker host as one more peer of ``worker_peers``."""

    name = "ours"

    def setup(self) -> None:
        sync = "FULL" if self.durability == "FULL" else "NORMAL"
        self.url = f"sqlite:///{self.dir}/store.db?synchronous={sync}"
        self.db = fdblayer.open(self.url)
        jobs.set_type_timeout(self.db, JOB_TYPE, 30)
        self.keep_counts()
        self.port = wp.free_port()
        self.enqueued = 0

    def keep_counts(self) -> None:
        """Mark the type's counters exact (it has no job yet), for :meth:`done`."""
        transactional(lambda tr: overview.type_counts(tr, DEFAULT_LAYOUT, JOB_TYPE, time.time()))(self.db)

    def settings(self) -> str:
        return (
            f"SQLite WAL synchronous={self.durability}; otpjobs worker --concurrency {self.workers}: "
            "a lease per running job, batched claim/finish/renew"
        )

    def pool(self) -> str:
        return "processes (one handler thread each)"

    def enqueue(self) -> None:
        jobs.enqueue(self.db, JOB_TYPE)
        self.enqueued += 1

    def start_workers(self, burst: bool) -> None:
        env = wp.child_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(BENCH)]))
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
                str(self.port),
                "--log-level",
                "warning",
                f"{JOB_TYPE}=peer_tasks:{self.handler}",
            ],
            env,
        )

    def ready(self) -> bool:
        from supervision.system import port_open

        return port_open(self.port) and self._idle_once()

    def _idle_once(self) -> bool:
        return True

    def done(self) -> int:
        """Jobs of this run no longer pending or running: from the type's
        counters (a few keys), as the peers count with one SQL statement; the
        rows themselves only on a store whose counters are not kept yet. (It
        read the pending range, up to the whole queue every poll: a third of
        a CPU at 5,000 jobs on PostgreSQL, taken from the hosts it measures.)"""
        tr = self.db.create_transaction()
        try:
            stored = counts.stored(tr, DEFAULT_LAYOUT, JOB_TYPE)
            if stored is not None:
                return self.enqueued - stored["pending"] - stored["running"]
            waiting = pending.pending_count(tr, DEFAULT_LAYOUT, JOB_TYPE)
            running = len(tr.snapshot.get_range_startswith(DEFAULT_LAYOUT.activity_prefix(JOB_TYPE)))
        finally:
            tr.cancel()
        return self.enqueued - waiting - running

    def check_workers(self, burst: bool) -> bool:
        codes = [p.poll() for p in self.procs]
        if any(c is not None for c in codes):
            raise RuntimeError(f"ours: the worker host exited {codes}:\n{self.logs_tail()}")
        return False

    def verify(self, total: int) -> None:
        prefix = DEFAULT_LAYOUT.work_prefix(JOB_TYPE)
        tr = self.db.create_transaction()
        try:
            ok = sum(1 for _, raw in tr.get_range_startswith(prefix) if WorkRecord.unpack(raw).outcome == SUCCEEDED)
        finally:
            tr.cancel()
        if ok != total:
            raise RuntimeError(f"ours: {ok} of {total} jobs succeeded")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        stop_node(self.port)
        super().close()

    def close_storage(self) -> None:
        self.db.close()


def run_one(peer: str, scenario: str, handler: str, workers: int, jobs_count: int, durability: str) -> dict:
    """One cell: ours through worker_peers' own drain/stream drivers, a peer through its runner."""
    if peer == "ours":
        driver = wp.run_drain if scenario == "drain" else wp.run_stream
        return driver(OursPeer, handler, workers, jobs_count, durability)
    return wp._run(peer, scenario, handler, workers, jobs_count, durability)  # noqa: SLF001


def _pct(values: list, q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def latency(samples: int) -> dict[str, float]:
    """add -> handler started on an idle pool of 4 (NORMAL), in ms."""
    (BENCH / "_bench_latency.py").write_text(
        "import time, os\n"
        "def started(ctx):\n    return time.time()\n"
        "def killable(ctx):\n"
        "    t = time.time()\n"
        "    if ctx.attempt == 1:\n"
        "        open(ctx.data['pidfile'], 'w').write(str(os.getpid()))\n"
        "        time.sleep(60)\n"
        "    return t\n"
    )
    with OursPeer("noop", 4, "NORMAL") as peer:
        jobs.set_type_timeout(peer.db, "lat", 30)
        jobs.set_type_timeout(peer.db, "kill", 30)
        env = wp.child_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(BENCH)]))
        peer.spawn(
            [
                sys.executable,
                "-m",
                "actors",
                "worker",
                "--store",
                peer.url,
                "--concurrency",
                "4",
                "--port",
                str(peer.port),
                "--log-level",
                "warning",
                "lat=_bench_latency:started",
                "kill=_bench_latency:killable",
            ],
            env,
        )
        wp.poll(lambda: peer.procs[0].poll() is not None or _warm(peer.db), 60, "our host to run a job")
        lat = []
        for _ in range(samples):
            t = time.time()
            job_id = jobs.enqueue(peer.db, "lat")
            lat.append((jobs.result(peer.db, "lat", job_id, timeout=30) - t) * 1000)
            time.sleep(0.02)
        out = {"add_to_start_p50_ms": statistics.median(lat), "add_to_start_p95_ms": _pct(lat, 0.95)}
        out.update(kill_latency(peer, max(3, samples // 10)))
        return out


def _warm(db: Any) -> bool:
    job_id = jobs.enqueue(db, "lat")
    try:
        jobs.result(db, "lat", job_id, timeout=2)
        return True
    except TimeoutError:
        return False


def kill_latency(peer: OursPeer, samples: int) -> dict[str, float]:
    """SIGKILL of the worker running a job -> the job running again, in ms."""
    gaps = []
    for n in range(samples):
        pidfile = Path(peer.dir) / f"pid{n}"
        job_id = jobs.enqueue(peer.db, "kill", {"pidfile": str(pidfile)})
        wp.poll(lambda: pidfile.exists() and pidfile.read_text(), 30, "the job to start")
        time.sleep(0.05)
        killed = time.time()
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        again = jobs.result(peer.db, "kill", job_id, timeout=30)
        gaps.append((again - killed) * 1000)
        time.sleep(0.2)  # the pool restarts the worker
    return {"kill_to_rerun_p50_ms": statistics.median(gaps), "kill_to_rerun_max_ms": max(gaps)}


def store_ceiling(durability: str, count: int, batch: int = 32) -> dict[str, float]:
    """The store's part alone: ``count`` jobs (added first) claimed and ended
    ``batch`` at a time by the dispatcher's own step transaction, in this
    process, with no actor, message or handler: the most one dispatcher can
    drain. Returns jobs/s and microseconds per job."""
    import tempfile

    step = work.step  # the transaction a dispatcher's step runs

    with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as tmp:
        db = fdblayer.open(f"sqlite:///{tmp}/store.db?synchronous={durability}")
        jobs.set_type_timeout(db, JOB_TYPE, 30)
        _enqueue_many(db, count)
        outcomes: list = []
        done = 0
        t = time.perf_counter()
        while True:
            _, (claimed,) = step(db, DEFAULT_LAYOUT, outcomes, [], [(JOB_TYPE, batch, 3)], time.time(), "ceiling")
            done += len(outcomes)
            if not claimed.claimed:
                break
            outcomes = [work.Outcome(c.job, "ok", None, seconds=0.0) for c in claimed.claimed]
        seconds = time.perf_counter() - t
        db.close()
    return {"jobs_per_s": done / seconds, "us_per_job": 1e6 * seconds / done}


def _enqueue_many(db: Any, count: int, chunk: int = 5000) -> None:
    from fdblayer.interface import transactional

    @transactional
    def add(tr: Any, n: int) -> None:
        for _ in range(n):
            jobs.enqueue(tr, JOB_TYPE)

    for start in range(0, count, chunk):
        add(db, min(chunk, count - start))


def ratios(rows: list[dict]) -> None:
    """Ours / each peer, cell by cell, and ours' scaling of sleep10."""
    ours = {
        (r["scenario"], r["durability"], r["handler"], r["workers"]): r["jobs_per_s"]
        for r in rows
        if r["peer"] == "ours" and "jobs_per_s" in r
    }
    print("\nratios (ours / peer, same scenario, durability, handler and workers):")
    for r in rows:
        if r["peer"] == "ours" or "jobs_per_s" not in r:
            continue
        key = (r["scenario"], r["durability"], r["handler"], r["workers"])
        if key in ours:
            print(
                f"  {r['peer']:<7} {key[0]:<7} {key[1]:<6} {key[2]:<8} x{key[3]:<3} {ours[key] / r['jobs_per_s']:6.2f}x"
            )
    for scenario in ("drain", "stream"):
        for dur in ("FULL", "NORMAL"):
            one, many = ours.get((scenario, dur, "sleep10", 1)), ours.get((scenario, dur, "sleep10", 16))
            if one and many:
                print(f"  ours sleep10 x16 / x1 ({scenario}, {dur}): {many / one:.1f}x (target >= 10x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--workers", type=lambda s: [int(w) for w in s.split(",")], default=[1, 4, 16])
    parser.add_argument("--handlers", type=lambda s: wp.csv(s, wp.HANDLERS), default=list(wp.HANDLERS))
    parser.add_argument(
        "--peers", type=lambda s: wp.csv(s, ("ours",) + tuple(wp.PEERS)), default=["ours"] + list(wp.PEERS)
    )
    parser.add_argument("--scenarios", type=lambda s: wp.csv(s, wp.SCENARIOS), default=list(wp.SCENARIOS))
    parser.add_argument("--durability", type=lambda s: wp.csv(s, wp.DURABILITIES), default=list(wp.DURABILITIES))
    parser.add_argument("--latency", type=int, default=100, help="add -> started samples (0: skip)")
    args = parser.parse_args()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in wp.versions().items()))
    print(wp.compile_ours())
    print(f"{args.jobs:,} jobs per run; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}\n")
    rows: list[dict] = []
    unavailable: dict[str, str] = {}
    for durability in args.durability:
        for scenario in args.scenarios:
            for handler in args.handlers:
                for workers in args.workers:
                    for peer in args.peers:  # ours and the peers back to back: the same disk weather
                        if peer in unavailable:
                            continue
                        t = time.monotonic()
                        try:
                            row = run_one(peer, scenario, handler, workers, args.jobs, durability)
                        except wp.PeerUnavailable as exc:
                            unavailable[peer] = exc.reason
                            continue
                        except Exception as exc:  # one broken run is reported (its logs' tail too), the rest go on
                            print(f"  {peer} {scenario} {durability} failed: {exc}", file=sys.stderr, flush=True)
                            row = dict(
                                peer=peer,
                                scenario=scenario,
                                handler=handler,
                                workers=workers,
                                jobs=args.jobs,
                                durability=durability,
                                error=f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                            )
                        rows.append(row)
                        print(
                            f"  {peer} {scenario} {durability} {handler} x{workers}: "
                            f"{row.get('jobs_per_s', 0):,.0f} jobs/s ({time.monotonic() - t:.1f} s)",
                            file=sys.stderr,
                            flush=True,
                        )
    wp.print_table(rows)
    for peer, reason in unavailable.items():
        print(f"{peer}: not available: {reason}")
    ratios(rows)
    if "ours" in args.peers:
        print("\nthe store alone (the dispatcher's step transaction in a loop, batches of 32, no actors):")
        for durability in args.durability:
            ceiling = store_ceiling(durability, args.jobs)
            print(
                f"  {durability:<6} {ceiling['jobs_per_s']:9,.0f} jobs/s, {ceiling['us_per_job']:.1f} us a job "
                "(claim + finish: 5 rows written, 2 cleared, 4 read a job)"
            )
    if args.latency:
        lat = latency(args.latency)
        print("\nours, idle pool of 4 (NORMAL): " + ", ".join(f"{k} {v:.1f}" for k, v in lat.items()))
        print("targets: add -> started p50 < 5 ms; SIGKILL -> running again p50 < 1000 ms")
    left = wp.survivors()
    print("no worker or redis process survives" if not left else f"SURVIVING processes: {left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
