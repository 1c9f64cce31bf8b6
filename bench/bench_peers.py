"""Benchmark: our queue side by side with its peers, printed as ratios.

Principle: absolute numbers depend on the disk's fsync cost and on what
else the machine runs, so each figure is printed as the ratio of ours to a
peer measured in the same run, at the same durability, with ours and the
peer's runs interleaved (``--repeat`` rounds, median of each) so that both
see the same disk weather. Ours is ``fdblayer.open("sqlite:///<abs
path>?synchronous=FULL|NORMAL")`` driven through ``fdblayer.jobs.api``
(what ``actors.jobs`` re-exports), as in ``bench_store.py``. Both sides
get the same job data, a small dict, and serialise it per job (ours with
msgpack inside ``api.add``; Huey's storage with pickle, as Huey does;
raw sqlite3 with ``json.dumps``), and both decode what a worker takes.

Rows (ops per second; ratio = ours / peer; target from issue 8):

1. Huey 3.5 ``huey.storage.SqliteStorage`` (the storage layer alone, so
   Huey is spared its Task and pickle-of-a-message costs), ``--tasks``
   tasks enqueued then dequeued. FULL is Huey's ``fsync=True``; NORMAL is
   a subclass that sets ``PRAGMA synchronous=NORMAL`` (Huey offers only
   OFF or FULL).

   * our add + accept + finish cycle (3 transactions) against Huey's
     enqueue + dequeue pair (2 transactions), target >= 0.7x. Huey's
     dequeue DELETEs the task: there is no lease and no running state, so
     a Huey worker that crashes after dequeue loses its task, where ours
     stays running under a lease that the activity monitor re-enqueues.
   * our 100 adds in one transaction (jobs/s; a loop of ``api.add`` in one
     ``@fdblayer.transactional`` function, and ``api.add_many`` when the
     API has it) against Huey's enqueue rate, target >= 3x.

2. RQ on a loopback ``redis-server`` that this script starts on a free
   port of 127.0.0.1 and stops by PID: once with no persistence (``save
   ""``, no AOF; compared with our NORMAL, though a Redis crash then loses
   every job where NORMAL loses none) and once with ``appendonly yes,
   appendfsync always`` (compared with our FULL). RQ enqueues ``--tasks``
   jobs, then a ``SimpleWorker`` in burst mode runs ``--rq-work`` of them;
   its "enqueue + work" rate is 1 / (1/enqueue rate + 1/work rate), the
   rate at which jobs are both enqueued and worked.

   * our add (1 per transaction) against RQ's enqueue (no target);
   * our add + accept + finish cycle against RQ's enqueue + work rate,
     target >= 3x.

   A missing ``redis-server`` or ``rq`` prints the row as "not available:
   <reason>" and the run goes on.

3. Raw sqlite3 doing the equivalent transactions, the "same rows" baseline
   of ``bench_store.py`` (its functions: plain tables holding what ours
   holds for the same guarantees: the job with its pending and activity
   indexes, the per-type counter waiters watch, the commit sequence): add
   (1 per transaction), 100 adds per transaction, the add + accept + finish
   cycle, target >= 0.5x each (issue 4). The "minimal rows" baseline (one
   job row and one state index: no watch, no lease, no re-enqueue) is
   printed beside it for information: it is what those guarantees cost.

4. The node's end-to-end job latency: a real node (``python -m actors node
   start`` on a FULL store, default ``[couch_jobs]`` settings, so the
   notifier's 50 ms holdoff applies), a worker process blocked in
   ``accept`` and this process subscribed to the job through the node.
   The latency runs from the start of ``add`` to ``wait()`` returning the
   finished event: add -> the worker accepts -> the worker finishes ->
   the subscriber is told. A job must exist to be subscribed to, so each
   job is first added with a far-future schedule, subscribed to, and the
   measured ``add`` reschedules it to now; the worker accepts with
   ``no_schedule=True`` (only jobs due at time 0 qualify), so it cannot
   take a job before its subscription exists. The node, its actors and
   the worker are stopped at the end and checked gone.

The default run took 105-190 s on this project's 2-CPU machine while other
test suites ran (load 3.4-4.6; an idle machine should need about a
minute); RQ's rows are most of it, and ``--tasks 2000`` roughly halves the
Huey and RQ parts. Not a test: it prints and exits 0.

Usage (the peers come with ``pip install -e '.[bench]'``, the Redis server
with ``apt-get install --no-install-recommends redis-server``)::

    .venv/bin/python bench/bench_peers.py [--tasks N] [--adds N] [--batches N]
        [--cycles N] [--rq-work N] [--latency-jobs N] [--repeat N]
        [--only huey,rq,raw,latency] [--profile cycle|batch|add]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import inspect
import json
import os
import pickle
import pstats
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from importlib import metadata
from typing import Any, Callable, Optional

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, ROOT)
sys.path.insert(0, BENCH)

import fdblayer  # noqa: E402
from fdblayer.jobs import api  # noqa: E402

from bench_store import (  # noqa: E402 - ours and raw driven exactly as bench_store drives them
    open_ours,
    open_raw,
    ours_add,
    ours_add_many,
    ours_batch,
    ours_cycle,
    RAW_SAME_SCHEMA,
    raw_add,
    raw_batch,
    raw_cycle,
    raw_same_add,
    raw_same_batch,
    raw_same_cycle,
)

JOB_TYPE = "bench"
DATA = {"url": "http://example.com/doc", "n": 1}
SYNC_MODES = ("FULL", "NORMAL")

# ---------------------------------------------------------------- results table

ROWS: list[tuple] = []  # (section, name, sync, ours, peer, target) or (section, name, sync, reason)
NOTES: list[str] = []


def record(section: str, name: str, sync: str, ours: float, peer: float, target: Optional[float]) -> None:
    ROWS.append((section, name, sync, ours, peer, target))


def unavailable(section: str, name: str, sync: str, reason: str) -> None:
    ROWS.append((section, name, sync, reason))


def print_table() -> None:
    header = f"{'row':<50}{'sync':<8}{'ours/s':>10}{'peer/s':>10}{'ratio':>8}{'target':>9}  result"
    passed = missed = 0
    order = {section: n for n, section in enumerate(dict.fromkeys(row[0] for row in ROWS))}
    seen: set[str] = set()
    for row in sorted(ROWS, key=lambda row: order[row[0]]):  # stable: FULL rows before NORMAL rows
        if row[0] not in seen:
            seen.add(row[0])
            print(f"-- {row[0]}")
            print(header)
        if len(row) == 4:
            print(f"{row[1]:<50}{row[2]:<8}not available: {row[3]}")
            continue
        _, name, sync, ours, peer, target = row
        ratio = ours / peer
        if target is None:
            verdict, shown = "info", "-"
        else:
            ok = ratio >= target
            passed, missed = passed + ok, missed + (not ok)
            verdict, shown = ("PASS" if ok else "MISS"), f">={target:.2f}"
        print(f"{name:<50}{sync:<8}{ours:>10,.0f}{peer:>10,.0f}{ratio:>8.2f}{shown:>9}  {verdict}")
    print(f"targets: {passed} PASS, {missed} MISS")


# ---------------------------------------------------------------- driver helpers


def paired(repeat: int, *runs: Callable[[], Any]) -> tuple:
    """Medians of ``repeat`` interleaved runs of each (a run may return a tuple of figures)."""
    results: list[list[Any]] = [[] for _ in runs]
    for _ in range(repeat):
        for result, run in zip(results, runs, strict=True):
            result.append(run())
    medians = []
    for result in results:
        if isinstance(result[0], tuple):
            medians.append(tuple(statistics.median(r[i] for r in result) for i in range(len(result[0]))))
        else:
            medians.append(statistics.median(result))
    return tuple(medians)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def code_version() -> str:
    """The commit the benchmark runs, and whether the store/actor code differs from it."""
    try:
        head = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", "fdblayer", "actors", "supervision"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    changed = [line for line in dirty if line.strip()]
    return head + (f" + {len(changed)} uncommitted file(s) under fdblayer/actors/supervision" if changed else "")


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


# ---------------------------------------------------------------- ours


def add_many_problem() -> Optional[str]:
    """Why ``api.add_many(tx, type, [(job_id, data), ...])`` cannot be benchmarked, or None."""
    add_many = getattr(api, "add_many", None)
    if add_many is None:
        return "fdblayer.jobs.api has no add_many"
    try:
        inspect.signature(add_many).bind(None, JOB_TYPE, [])
    except TypeError as exc:
        return f"add_many{inspect.signature(add_many)} does not take (tx, type, [(id, data), ...]): {exc}"
    return None


# ---------------------------------------------------------------- Huey


def open_huey(directory: str, sync: str) -> Any:
    from huey.storage import SqliteStorage

    class NormalSqliteStorage(SqliteStorage):
        """Huey's storage at synchronous=NORMAL (its fsync= offers only OFF or FULL)."""

        def _create_connection(self):
            conn = super()._create_connection()
            conn.execute("pragma synchronous=1")
            return conn

    path = os.path.join(directory, f"huey-{sync}-{uuid.uuid4().hex[:8]}.db")
    if sync == "FULL":
        storage = SqliteStorage(name="bench", filename=path, fsync=True)
    else:
        storage = NormalSqliteStorage(name="bench", filename=path)
    (level,) = storage.conn.execute("pragma synchronous").fetchone()
    if level != {"FULL": 2, "NORMAL": 1}[sync]:
        raise RuntimeError(f"huey storage runs synchronous={level}, wanted {sync}")
    return storage


def huey_run(storage: Any, n: int) -> tuple[float, float, float]:
    """(enqueue/s, dequeue/s, enqueue+dequeue pairs/s) for ``n`` tasks."""
    start = time.perf_counter()
    for _ in range(n):
        storage.enqueue(pickle.dumps(DATA))
    enqueued = time.perf_counter()
    for _ in range(n):
        data = storage.dequeue()
        if data is None:
            raise RuntimeError("huey lost a task")
        pickle.loads(data)
    done = time.perf_counter()
    if storage.dequeue() is not None:
        raise RuntimeError("huey queue not empty")
    return n / (enqueued - start), n / (done - enqueued), n / (done - start)


def bench_huey_and_raw(directory: str, args: argparse.Namespace, want: set[str]) -> None:
    huey_problem = None
    if "huey" in want and importlib.util.find_spec("huey") is None:
        huey_problem = "huey is not installed (pip install -e '.[bench]')"
    for sync in SYNC_MODES:
        db = open_ours(directory, sync)
        conn = open_raw(directory, sync)
        same = open_raw(directory, sync, RAW_SAME_SCHEMA)
        storage = open_huey(directory, sync) if "huey" in want and huey_problem is None else None
        try:
            ours_add(db, 50)  # warm up: connections, schema, caches
            raw_add(conn, 50)
            raw_same_add(same, 50)
            if storage is not None:
                huey_run(storage, 50)
            many = add_many_problem()
            runs: dict[str, Callable[[], Any]] = {
                "add": lambda: ours_add(db, args.adds),
                "raw add": lambda: raw_add(conn, args.adds),
                "same add": lambda: raw_same_add(same, args.adds),
                "batch": lambda: ours_batch(db, args.batches),
            }
            if many is None:
                runs["add_many"] = lambda: ours_add_many(db, args.batches)
            runs["raw batch"] = lambda: raw_batch(conn, args.batches)
            runs["same batch"] = lambda: raw_same_batch(same, args.batches)
            runs["cycle"] = lambda: ours_cycle(db, args.cycles)
            runs["raw cycle"] = lambda: raw_cycle(conn, args.cycles)
            runs["same cycle"] = lambda: raw_same_cycle(same, args.cycles)
            if storage is not None:
                runs["huey"] = lambda: huey_run(storage, args.tasks)
            if "raw" not in want:
                for name in ("raw add", "raw batch", "raw cycle", "same add", "same batch", "same cycle"):
                    runs.pop(name)
            figures = dict(zip(runs, paired(args.repeat, *runs.values()), strict=True))
        finally:
            db.close()
            conn.close()
            same.close()
            if storage is not None:
                storage.conn.close()

        if "huey" in want:
            section = f"Huey {version('huey')} SqliteStorage, {args.tasks:,} tasks (storage layer, pickled dict)"
            if huey_problem:
                unavailable(section, "add+accept+finish vs enqueue+dequeue pair", sync, huey_problem)
            else:
                enq, deq, pair = figures["huey"]
                record(section, "add+accept+finish cycle vs enqueue+dequeue", sync, figures["cycle"], pair, 0.7)
                record(section, "100 adds/txn (api.add loop) vs enqueue, jobs/s", sync, figures["batch"], enq, 3.0)
                if many is None:
                    record(
                        section, "100 adds/txn (api.add_many) vs enqueue, jobs/s", sync, figures["add_many"], enq, 3.0
                    )
                else:
                    unavailable(section, "100 adds/txn (api.add_many) vs enqueue", sync, many)
                record(section, "add (1/txn) vs enqueue", sync, figures["add"], enq, None)
                NOTES.append(
                    f"Huey {sync}: enqueue {enq:,.0f}/s, dequeue {deq:,.0f}/s, enqueue+dequeue pairs {pair:,.0f}/s"
                )
        if "raw" in want:
            for section, prefix, target in (
                ("raw sqlite3, same rows (the equivalent transactions; target of issue 4)", "same", 0.5),
                ("raw sqlite3, minimal rows (job row + one index: no watch, lease or re-enqueue)", "raw", None),
            ):
                record(section, "add (1/txn)", sync, figures["add"], figures[f"{prefix} add"], target)
                record(
                    section,
                    "100 adds/txn (api.add loop), jobs/s",
                    sync,
                    figures["batch"],
                    figures[f"{prefix} batch"],
                    target,
                )
                if many is None:
                    record(
                        section,
                        "100 adds/txn (api.add_many), jobs/s",
                        sync,
                        figures["add_many"],
                        figures[f"{prefix} batch"],
                        target,
                    )
                record(section, "add+accept+finish cycle", sync, figures["cycle"], figures[f"{prefix} cycle"], target)


# ---------------------------------------------------------------- RQ on a loopback redis-server


def noop(i: int) -> int:
    """The RQ job: does nothing (so the figure is RQ's own cost)."""
    return i


#: RQ refuses functions of ``__main__``; the worker imports this file as ``bench_peers`` (bench/ is on sys.path).
RQ_FUNC = "bench_peers.noop"


class RedisServer:
    """A ``redis-server`` on 127.0.0.1 with its own directory; ``stop`` ends it by PID."""

    def __init__(self, directory: str, aof_always: bool) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=directory)
        self.port = free_port()
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if aof_always else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--dir",
                self.dir,
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
                "--logfile",
                os.path.join(self.dir, "redis.log"),
                *persistence,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            self.client = self._connect()
        except BaseException:
            self.stop()
            raise

    def _connect(self) -> Any:
        import redis

        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited {self.proc.returncode}: {self.proc.stderr.read()!r}")
            try:
                client = redis.Redis(host="127.0.0.1", port=self.port)
                client.ping()
                return client
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


def rq_run(conn: Any, enqueues: int, works: int) -> tuple[float, float, float]:
    """(enqueue/s, work/s, enqueue+work jobs/s): ``enqueues`` jobs enqueued, then the
    first ``works`` of them run by a burst ``SimpleWorker``; enqueue+work is
    1 / (1/enqueue + 1/work), the rate of jobs both enqueued and worked."""
    from rq import Queue, SimpleWorker

    queue = Queue(f"bench-{uuid.uuid4().hex[:8]}", connection=conn)
    start = time.perf_counter()
    jobs = [queue.enqueue(RQ_FUNC, i) for i in range(enqueues)]
    enqueued = time.perf_counter()
    SimpleWorker([queue], connection=conn).work(burst=True, max_jobs=works, logging_level="WARNING")
    done = time.perf_counter()
    for job in (jobs[0], jobs[works - 1]):
        job.refresh()
        if job.get_status() != "finished":
            raise RuntimeError(f"rq job {job.id} is {job.get_status()}")
    conn.flushdb()
    enqueue, work = enqueues / (enqueued - start), works / (done - enqueued)
    return enqueue, work, 1 / (1 / enqueue + 1 / work)


def bench_rq(directory: str, args: argparse.Namespace) -> None:
    problem = None
    missing = [name for name in ("rq", "redis") if importlib.util.find_spec(name) is None]
    if missing:
        problem = f"{' and '.join(missing)} not installed (pip install -e '.[bench]')"
    if problem is None and shutil.which("redis-server") is None:
        problem = "redis-server not installed (apt-get install --no-install-recommends redis-server)"
    for aof_always, sync in ((True, "FULL"), (False, "NORMAL")):
        label = "AOF appendfsync always" if aof_always else "no persistence"
        section = (
            f"RQ {version('rq')} + redis-py {version('redis')} on a loopback redis-server ({label}), ours at {sync}"
        )
        if problem is not None:
            unavailable(section, "add vs RQ enqueue", sync, problem)
            unavailable(section, "add+accept+finish cycle vs RQ enqueue+work", sync, problem)
            continue
        server = None
        db = None
        try:
            server = RedisServer(directory, aof_always)
            db = open_ours(directory, sync)
            ours_add(db, 50)
            rq_run(server.client, 50, 10)
            add, cycle, (enq, work, enq_work) = paired(
                args.repeat,
                lambda: ours_add(db, args.adds),
                lambda: ours_cycle(db, args.cycles),
                lambda: rq_run(server.client, args.tasks, args.rq_work),
            )
            record(section, f"add (1/txn) vs enqueue x{args.tasks:,}", sync, add, enq, None)
            record(section, f"add+accept+finish vs enqueue+work ({args.rq_work:,} worked)", sync, cycle, enq_work, 3.0)
            record(section, "add+accept+finish vs SimpleWorker work only", sync, cycle, work, None)
        except Exception as exc:  # a peer that cannot run is reported, not fatal
            unavailable(section, "RQ rows", sync, f"{type(exc).__name__}: {exc}")
        finally:
            if db is not None:
                db.close()
            if server is not None:
                server.stop()


# ---------------------------------------------------------------- end-to-end latency on a real node

WORKER = """
import json, sys, time
import fdblayer
from actors import jobs
db = fdblayer.open(sys.argv[1])
job_type, n = sys.argv[2], int(sys.argv[3])
print(json.dumps({"ready": True}), flush=True)
for _ in range(n):
    job, data = jobs.accept(db, job_type, timeout=60, no_schedule=True)
    accepted = time.monotonic()
    jobs.finish(db, job, {"done": data["i"]})
    print(json.dumps({"id": job.id, "accepted": accepted, "finished": time.monotonic()}), flush=True)
db.close()
"""


def proc_pgid(pid: int) -> Optional[tuple[str, int]]:
    """(state, pgid) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0].decode(), int(fields[2])


def group_pids(pgid: int) -> set[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_pgid(int(name))
            if st and st[1] == pgid and st[0] not in ("Z", "X"):
                out.add(int(name))
    return out


def processes_mentioning(text: str) -> set[int]:
    """PIDs whose command line contains ``text`` (a ``pgrep -f`` of our own run)."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.add(int(name))
            except OSError:
                pass
    return out


def read_json_line(proc: subprocess.Popen, timeout: float) -> dict:
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise RuntimeError(f"worker {proc.pid} printed nothing in {timeout} s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"worker {proc.pid} exited {proc.wait()}")
    return json.loads(line)


def node_latency(directory: str, n: int) -> None:
    section = "end-to-end on a real node (FULL store): add -> worker accept -> finish -> subscriber told"
    run_dir = os.path.join(directory, "run")
    log_path = os.path.join(directory, "node.log")
    url = f"sqlite:///{os.path.join(directory, 'node.db')}"
    port = free_port()
    env = dict(
        os.environ, OTPJOBS_RUNTIME_DIR=run_dir, THESPLOG_FILE=os.path.join(directory, "thespian.log"), PYTHONPATH=ROOT
    )
    job_type = "e2e"
    node = worker = None
    pgid = None
    db = None
    leftovers: set[int] = set()
    try:
        from actors import jobs

        with open(log_path, "ab") as log:
            node = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "actors",
                    "node",
                    "start",
                    "--port",
                    str(port),
                    "--store",
                    url,
                    "--http-port",
                    "0",
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 60
        while "node_up" not in open(log_path).read():
            if node.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node did not come up: {open(log_path).read()[-2000:]}")
            time.sleep(0.05)
        with open(os.path.join(run_dir, f"node-{port}.json")) as f:
            pgid = json.load(f)["pgid"]
        db = fdblayer.open(url)
        jobs.set_type_timeout(db, job_type, 60)
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, url, job_type, str(n + 5)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        read_json_line(worker, 30)
        later = int(time.time()) + 3600
        total, to_accept, to_finish, to_told = [], [], [], []
        for i in range(n + 5):  # the first 5 warm up the notifier and the worker
            job_id = f"e-{i:05d}"
            jobs.add(db, job_type, job_id, {"i": i}, scheduled_time=later)
            sub, state, _ = jobs.subscribe(db, job_type, job_id, node=port)
            if state is not jobs.JobState.PENDING:
                raise RuntimeError(f"{job_id} is {state} before its add")
            time.sleep(0.005)  # the worker is back on its pending watch
            started = time.monotonic()
            jobs.add(db, job_type, job_id, {"i": i})  # due now: the worker may take it
            event = jobs.wait(sub, jobs.JobState.FINISHED, timeout=30)
            told = time.monotonic()
            if event is None:
                raise RuntimeError(f"subscriber never told that {job_id} finished")
            line = read_json_line(worker, 30)
            if line["id"] != job_id:
                raise RuntimeError(f"worker finished {line['id']}, expected {job_id}")
            if i >= 5:
                total.append(told - started)
                to_accept.append(line["accepted"] - started)
                to_finish.append(line["finished"] - line["accepted"])
                to_told.append(told - line["finished"])
        worker.wait(30)
        ms = 1000
        NOTES.append(
            f"{section}, {n} jobs, ms: p50 {percentile(total, 0.5) * ms:.1f}  p99 {percentile(total, 0.99) * ms:.1f}"
            f"  max {max(total) * ms:.1f};  p50 of the steps: add->accepted {percentile(to_accept, 0.5) * ms:.1f},"
            f" accepted->finished {percentile(to_finish, 0.5) * ms:.1f},"
            f" finished->told {percentile(to_told, 0.5) * ms:.1f} (notifier holdoff 50 ms)"
        )
    except Exception as exc:
        NOTES.append(f"{section}: not available: {type(exc).__name__}: {exc}")
    finally:
        if db is not None:
            db.close()
        if worker is not None:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
            worker.stdout.close()
        if node is not None:
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
                try:
                    node.wait(30)
                except subprocess.TimeoutExpired:
                    node.kill()
                    node.wait()
            deadline = time.monotonic() + 15
            while pgid is not None and group_pids(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            leftovers = (group_pids(pgid) if pgid is not None else set()) | processes_mentioning(directory)
            for pid in leftovers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            NOTES.append(
                f"node stopped (exit {node.returncode}); processes left afterwards: "
                + (f"{sorted(leftovers)} (killed)" if leftovers else "none")
            )


# ---------------------------------------------------------------- main


def profile(directory: str, what: str, args: argparse.Namespace) -> None:
    db = open_ours(directory, "FULL")
    ours_add(db, 50)
    run = {
        "add": lambda: ours_add(db, args.adds),
        "batch": lambda: ours_batch(db, args.batches),
        "cycle": lambda: ours_cycle(db, args.cycles),
    }[what]
    profiler = cProfile.Profile()
    profiler.runcall(run)
    db.close()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000, help="Huey tasks and RQ enqueues per run")
    parser.add_argument("--adds", type=int, default=1000, help="our single-job adds per run")
    parser.add_argument("--batches", type=int, default=20, help="transactions of 100 adds per run")
    parser.add_argument("--cycles", type=int, default=600, help="our add+accept+finish cycles per run")
    parser.add_argument("--rq-work", type=int, default=300, help="RQ jobs worked (of the --tasks enqueued) per run")
    parser.add_argument("--latency-jobs", type=int, default=200, help="jobs timed end to end on the node")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="huey,rq,raw,latency", help="comma-separated subset")
    parser.add_argument("--profile", choices=("add", "batch", "cycle"))
    args = parser.parse_args()
    want = set(args.only.split(","))

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench_peers-", dir=os.environ.get("BENCH_DIR")) as directory:
        if args.profile:
            profile(directory, args.profile, args)
            return 0
        print(
            f"store directory: {directory} (sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
            f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})"
        )
        print(f"code: {code_version()}")
        print(f"medians of {args.repeat} interleaved runs; ops per second; ratio = ours / peer")
        if want & {"huey", "raw"}:
            bench_huey_and_raw(directory, args, want)
        if "rq" in want:
            bench_rq(directory, args)
        if "latency" in want:
            node_latency(directory, args.latency_jobs)
        print_table()
        if "huey" in want:
            print(
                "note: Huey's dequeue DELETEs the task (no lease, no running state): a Huey worker that crashes"
                " after dequeue loses it; ours keeps it running under a lease and re-enqueues it."
            )
        if "rq" in want:
            print(
                "note: the no-persistence Redis loses every job if redis-server dies; our NORMAL loses none"
                " on a process crash."
            )
        for note in NOTES:
            print(note)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
