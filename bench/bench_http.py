"""HTTP monitoring benchmark: ``_scheduler/jobs`` and ``_scheduler/docs`` on a real node.

Prints, in one run (issue 7's Benchmark section):

* latency p50/p99 of ``GET /_scheduler/jobs?limit=100&skip=<random>`` and
  ``GET /_scheduler/docs?limit=100&skip=<random>`` with 10,000 scheduler
  jobs and 10,000 documents, one client on one keep-alive connection;
* requests per second from 4 concurrent clients (threads, each its own
  keep-alive connection) for a few seconds per endpoint.

Target: p50 under 50 ms for a page of 100 out of 10,000.

Setup: a real node (``actors.node.root.root_children``: queue, scheduler, doc
processor, HTTP listener) started in this process on a temporary SQLite
store, with ``[replicator] max_jobs`` 5 so nearly every job stays pending
and only 5 job actors run. The scheduler's table is seeded in one
``LoadJobs`` call (10,000 continuous jobs running the ``idle`` fixture,
the first 5 started). The documents are written with ``fdblayer.docs.put``,
500 per store transaction, before the node starts, and then taken (accepted
through the queue, 500 per transaction) by a phantom peer node that never
renews them, with ``doc_owner_timeout`` one hour so they are not handed back
during the run: ``_scheduler/docs`` lists every document of the store
whoever owns it, and this node's doc processor stays idle instead of
adopting 10,000 documents into its own scheduler (which would make the job
table 20,000 and load the node while it is measured).

The node is stopped in a ``finally`` and on SIGTERM; the run fails if any
process of the node's process group (from its runtime file) survives.

Run: .venv/bin/python bench/bench_http.py [--jobs N] [--docs N] [--requests N] [--seconds S]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FIXTURES = "tests.actors.scheduler_fixtures"
PAGE = 100
TARGET_P50_MS = 50.0
MAX_JOBS = 5
DOCS_PER_TX = 500
PHANTOM_NODE = "otpjobs-phantom@bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            pids.append(int(entry.name))
    return pids


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(143)  # so the node is stopped in a finally, not orphaned


# ------------------------------------------------------------------ seeding


def seed_docs(url: str, n: int) -> tuple[float, float]:
    """Put ``n`` documents (DOCS_PER_TX per transaction) and let a phantom
    peer take them all from the queue; returns the seconds of each part."""
    import fdblayer
    from fdblayer import docs
    from fdblayer.docs import leases as doc_leases
    from fdblayer.interface import transactional

    @transactional
    def put_batch(tr, first: int, count: int, now: float) -> None:
        for i in range(first, first + count):
            body = (
                {"handler": f"{FIXTURES}:idle", "continuous": True}
                if i % 2
                else {
                    "source": f"http://127.0.0.1:5984/src-{i}",
                    "target": f"http://127.0.0.1:5984/tgt-{i}",
                    "continuous": True,
                }
            )
            docs.put(tr, docs.REPLICATOR_DB, f"doc-{i:05d}", body, now=now)

    @transactional
    def take_batch(tr, count: int, now: float) -> int:
        taken = 0
        for _ in range(count):
            found, watch = doc_leases.accept(tr, PHANTOM_NODE, now)
            if watch is not None:
                watch.cancel()
                break
            taken += found is not None
        return taken

    t0 = time.perf_counter()
    db = fdblayer.open(url)
    try:
        for first in range(0, n, DOCS_PER_TX):
            put_batch(db, first, min(DOCS_PER_TX, n - first), time.time())
        put_s = time.perf_counter() - t0
        taken = 0
        while taken < n:
            got = take_batch(db, DOCS_PER_TX, time.time())
            if not got:
                raise RuntimeError(f"the phantom peer took only {taken}/{n} documents")
            taken += got
        total, _ = docs.list_docs(db, limit=0)
        if total != n:
            raise RuntimeError(f"{total} documents in the store, expected {n}")
    finally:
        db.close()
    return put_s, time.perf_counter() - t0 - put_s


def seed_jobs(client, n: int) -> float:
    """Replace the scheduler's table with ``n`` continuous idle jobs (the
    first MAX_JOBS started) in one LoadJobs call; returns the seconds."""
    from actors.scheduler.client import SchedulerClient

    s = SchedulerClient(client, timeout=120)
    now = time.time()
    rows = []
    for i in range(n):
        spec = {"id": f"job-{i:05d}", "handler": f"{FIXTURES}:idle", "continuous": True, "start_time": now - n + i}
        running = i < MAX_JOBS
        history = (
            [("started", now - 1, None), ("added", now - n + i, None)] if running else [("added", now - n + i, None)]
        )
        rows.append({"spec": spec, "history": history, "running": running})
    t0 = time.perf_counter()
    loaded = s.load_jobs(rows)
    if loaded != n:
        raise RuntimeError(f"LoadJobs answered {loaded}, expected {n}")
    deadline = time.monotonic() + 60
    while True:
        up = sum(1 for j in s.jobs() if j["pid"] not in (None, "<starting>"))
        if up >= MAX_JOBS:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {up}/{MAX_JOBS} job actors started")
        time.sleep(0.1)
    return time.perf_counter() - t0


# ------------------------------------------------------------------ measuring


def get(conn: http.client.HTTPConnection, path: str) -> bytes:
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
    return body


def page_path(endpoint: str, total: int, rng: random.Random) -> str:
    return f"/_scheduler/{endpoint}?limit={PAGE}&skip={rng.randrange(0, max(1, total - PAGE + 1))}"


def check_page(endpoint: str, body: bytes, total: int) -> None:
    data = json.loads(body)
    if data.get("total_rows") != total or len(data.get(endpoint, ())) != min(PAGE, total):
        raise RuntimeError(
            f"/_scheduler/{endpoint}: total_rows {data.get('total_rows')}, "
            f"{len(data.get(endpoint, ()))} rows (expected {total} and {min(PAGE, total)})"
        )


def latency(port: int, endpoint: str, total: int, requests: int, budget: float) -> list[float]:
    """Milliseconds per request, one keep-alive connection, random skips;
    stops early (fewer than ``requests``) once ``budget`` seconds are spent."""
    rng = random.Random(7)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for _ in range(5):  # warm-up: connection, store handle, imports
            check_page(endpoint, get(conn, page_path(endpoint, total, rng)), total)
        times, bodies = [], []
        deadline = time.monotonic() + budget
        for _ in range(requests):
            if time.monotonic() > deadline:
                break
            path = page_path(endpoint, total, rng)
            t0 = time.perf_counter()
            body = get(conn, path)
            times.append((time.perf_counter() - t0) * 1000)
            bodies.append(body)
        for body in bodies[:: max(1, len(bodies) // 20)]:  # validated outside the timed part
            check_page(endpoint, body, total)
        return times
    finally:
        conn.close()


def throughput(port: int, endpoint: str, total: int, clients: int, seconds: float) -> tuple[float, float]:
    """(requests/s, p50 ms under load) from ``clients`` threads for ``seconds``."""
    stop = threading.Event()
    counts = [0] * clients
    times: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(clients + 1)

    def worker(k: int) -> None:
        rng = random.Random(100 + k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            get(conn, page_path(endpoint, total, rng))
            barrier.wait()
            while not stop.is_set():
                t0 = time.perf_counter()
                get(conn, page_path(endpoint, total, rng))
                times[k].append((time.perf_counter() - t0) * 1000)
                counts[k] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            stop.set()
            try:
                barrier.abort()
            except threading.BrokenBarrierError:
                pass
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait(timeout=120)
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]!r}")
    all_times = [x for ts in times for x in ts]
    return sum(counts) / elapsed, statistics.median(all_times) if all_times else float("nan")


# ------------------------------------------------------------------ main


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="scheduler jobs (default 10,000)")
    parser.add_argument("--docs", type=int, default=10_000, help="documents (default 10,000)")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per endpoint (>= 200)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients for requests/s")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of load per endpoint")
    parser.add_argument(
        "--budget",
        type=float,
        default=30.0,
        help="most seconds of latency sampling per endpoint (fewer requests if slower)",
    )
    args = parser.parse_args()

    import logging

    import supervision
    import supervision.system
    from actors.settings import config as config_mod
    from actors.http import server as http_server
    from actors.node import root as node_mod

    started = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="bench-http-")
    store = f"sqlite:///{tmp.name}/store.db"  # tmp.name is absolute: sqlite:////abs/...
    admin_port = free_port()
    config = config_mod.load(
        None,
        {
            ("node", "store"): store,
            ("node", "port"): admin_port,
            ("node", "http_port"): 0,
            ("node", "log_level"): "warning",
            ("replicator", "max_jobs"): MAX_JOBS,
            ("replicator", "doc_owner_timeout"): 3600,
        },
    )
    node = None
    pgid = None
    results: list[tuple[str, list[float], float, float]] = []
    try:
        put_s, take_s = seed_docs(store, args.docs)
        t0 = time.perf_counter()
        node = supervision.start_node(
            admin_port, node_mod.ROOT_FLAGS, node_mod.root_children(config), level=logging.WARNING
        )
        node_s = time.perf_counter() - t0
        runtime = json.loads(supervision.system._runtime_file(admin_port).read_text())
        pgid = runtime["pgid"]
        client = node.client()
        http_port = client.call(http_server.HTTP_SERVER_NAME, http_server.GetHttpInfo(), 10)["port"]
        jobs_s = seed_jobs(client, args.jobs)
        print(
            f"setup: {args.docs} docs put in {put_s:.1f} s and taken by the phantom peer in {take_s:.1f} s "
            f"({DOCS_PER_TX} per transaction), "
            f"node up in {node_s:.1f} s, {args.jobs} jobs loaded (LoadJobs, {MAX_JOBS} running) "
            f"in {jobs_s:.1f} s; HTTP on 127.0.0.1:{http_port}",
            flush=True,
        )
        for endpoint, total in (("jobs", args.jobs), ("docs", args.docs)):
            times = latency(http_port, endpoint, total, args.requests, args.budget)
            rps, p50_loaded = throughput(http_port, endpoint, total, args.clients, args.seconds)
            results.append((endpoint, times, rps, p50_loaded))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not cut the stop short
        if node is not None or supervision.system._runtime_file(admin_port).exists():
            if pgid is None:
                info = supervision.system._read_runtime(admin_port) or {}
                pgid = info.get("pgid")
            supervision.stop_node(admin_port, timeout=30)
            deadline = time.monotonic() + 10
            while pgid and group_pids(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
        tmp.cleanup()
        left = group_pids(pgid) if pgid else []
        if left:  # said here too, in case a SIGTERM or an error is on its way out
            print(f"node processes survived the stop: {left} (process group {pgid})", file=sys.stderr)
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    assert not left, f"node processes survived the stop: {left}"

    load1, load5, _ = os.getloadavg()
    print()
    print(
        f"GET /_scheduler/{{jobs,docs}}?limit={PAGE}&skip=<random>; {args.jobs} jobs, {args.docs} docs; "
        f"max_jobs {MAX_JOBS}"
    )
    head = (
        f"{'endpoint':<18}{'n':>5}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{f'req/s ({args.clients} cl)':>17}{'p50 loaded':>12}  target p50 < {TARGET_P50_MS:.0f} ms"
    )
    print(head)
    print("-" * len(head))
    for endpoint, times, rps, p50_loaded in results:
        p50 = statistics.median(times)
        met = p50 < TARGET_P50_MS
        print(
            f"{'/_scheduler/' + endpoint:<18}{len(times):>5}{p50:>9.1f}{pct(times, 99):>9.1f}"
            f"{max(times):>9.1f}{rps:>17.1f}{p50_loaded:>12.1f}  {'met' if met else 'MISSED'}"
            + ("" if len(times) >= args.requests else f" (sampling stopped at the {args.budget:.0f} s budget)")
        )
    print()
    missed = [f"/_scheduler/{e}" for e, times, _, _ in results if statistics.median(times) >= TARGET_P50_MS]
    print(
        f"target p50 < {TARGET_P50_MS:.0f} ms for a page of {PAGE} out of 10,000: "
        + ("met on both endpoints" if not missed else f"MISSED on {', '.join(missed)}")
    )
    print(
        f"run time {time.perf_counter() - started:.1f} s; {os.cpu_count()} CPUs; "
        f"load average {load1:.2f} (1 min), {load5:.2f} (5 min); node stopped, "
        f"process group {pgid} empty"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
