"""Queue benchmark on a real node and real worker processes (prints figures; not a test).

    python bench/bench_queue.py [--jobs N] [--samples N] [--holdoff-ms N]

1. add / accept / finish throughput with 1, 2 and 4 worker processes: the
   workers block in accept, then a producer process adds N jobs; each worker
   loops accept -> finish. jobs/s = N / (time from the first add to the
   last finish).
2. accept wake-up latency: a worker process blocked in ``accept`` on an
   empty queue; time from the add's commit (in this process) to accept
   returning in the worker (wall clock, same machine). Target p50 < 20 ms.
3. subscription notify latency: this process subscribes to a job through
   the node, accepts it, and times from the accept's commit to ``wait()``
   returning the running event. Target p50 < holdoff + 30 ms.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# ------------------------------------------------------------ worker processes (spawned)


def throughput_worker(url: str, job_type: str, ready, stop, done) -> None:
    import fdblayer
    from actors import jobs

    db = fdblayer.open(url)
    ready.release()
    while not stop.is_set():
        try:
            job, _ = jobs.accept(db, job_type, timeout=0.2)
        except jobs.NotFound:
            continue
        jobs.finish(db, job)
        with done.get_lock():
            done.value += 1
    db.close()


def producer(url: str, job_type: str, n: int, go) -> None:
    import fdblayer
    from actors import jobs

    db = fdblayer.open(url)
    go.wait()
    for i in range(n):
        jobs.add(db, job_type, f"j{i}", {"i": i})
    db.close()


def wakeup_worker(url: str, job_type: str, samples: int, ready, out) -> None:
    import fdblayer
    from actors import jobs

    db = fdblayer.open(url)
    for _ in range(samples):
        ready.release()
        job, _ = jobs.accept(db, job_type, timeout=30)
        out.put(time.time())
        jobs.finish(db, job)
    db.close()


# ------------------------------------------------------------ the runs


def run_throughput(ctx, url: str, workers: int, n: int) -> float:
    import fdblayer
    from actors import jobs

    job_type = f"tp{workers}"
    db = fdblayer.open(url)
    jobs.set_type_timeout(db, job_type, 60)
    ready, stop, go, done = ctx.Semaphore(0), ctx.Event(), ctx.Event(), ctx.Value("i", 0)
    procs = [ctx.Process(target=throughput_worker, args=(url, job_type, ready, stop, done)) for _ in range(workers)]
    prod = ctx.Process(target=producer, args=(url, job_type, n, go))
    for p in procs + [prod]:
        p.start()
    for _ in procs:
        ready.acquire()
    time.sleep(0.3)  # let every worker reach its blocking accept
    start = time.monotonic()
    go.set()
    while done.value < n:
        time.sleep(0.002)
    elapsed = time.monotonic() - start
    stop.set()
    for p in procs + [prod]:
        p.join(10)
    db.close()
    return n / elapsed


def run_wakeup(ctx, url: str, samples: int) -> list[float]:
    import fdblayer
    from actors import jobs

    job_type = "wakeup"
    db = fdblayer.open(url)
    jobs.set_type_timeout(db, job_type, 60)
    ready, out = ctx.Semaphore(0), ctx.Queue()
    proc = ctx.Process(target=wakeup_worker, args=(url, job_type, samples, ready, out))
    proc.start()
    latencies = []
    for i in range(samples):
        ready.acquire()
        time.sleep(0.01)  # the worker is now blocked on the pending watch
        jobs.add(db, job_type, f"w{i}", {})
        committed = time.time()
        latencies.append(out.get(timeout=30) - committed)
    proc.join(10)
    db.close()
    return latencies


def run_notify(url: str, port: int, samples: int) -> list[float]:
    import fdblayer
    from actors import jobs

    job_type = "notify"
    db = fdblayer.open(url)
    latencies = []
    for i in range(samples):
        job_id = f"n{i}"
        jobs.add(db, job_type, job_id, {})
        sub, state, _ = jobs.subscribe(db, job_type, job_id, node=port)
        assert state == jobs.JobState.PENDING
        job, _ = jobs.accept(db, job_type, timeout=5)
        committed = time.monotonic()
        event = jobs.wait(sub, timeout=10)
        latencies.append(time.monotonic() - committed)
        assert event is not None and event[2] == jobs.JobState.RUNNING, event
        jobs.finish(db, job)
        assert jobs.wait(sub, jobs.JobState.FINISHED, timeout=10) is not None
    db.close()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs per throughput run")
    parser.add_argument("--samples", type=int, default=100, help="latency samples (>= 100)")
    parser.add_argument("--holdoff-ms", type=int, default=50, help="type_monitor_holdoff_msec")
    opts = parser.parse_args()

    import fdblayer
    from actors import jobs
    from actors.settings.config import load
    from actors.queue.protocol import ForceCheckTypes
    from actors.names import JOBS_SERVER
    from actors.node.root import ROOT_FLAGS, root_children
    from supervision import start_node

    ctx = mp.get_context("spawn")  # no store handle or actor system may cross a fork
    tmp = tempfile.mkdtemp(prefix="bench_queue_")
    url = f"sqlite:///{tmp}/store.db"
    db = fdblayer.open(url)
    jobs.set_type_timeout(db, "notify", 60)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The node's HTTP process connects to the node on ("node", "port"); port 0
    # lets the system pick the HTTP port (the default 5984 may be taken).
    config = load(
        None,
        {
            ("node", "store"): url,
            ("node", "port"): port,
            ("node", "http_port"): 0,
            ("couch_jobs", "type_monitor_holdoff_msec"): opts.holdoff_ms,
            ("couch_jobs", "activity_monitor_max_jitter_msec"): 100,
        },
    )
    t0 = time.monotonic()
    node = start_node(port, ROOT_FLAGS, root_children(config), level=30)
    print(
        f"bench_queue: store {url}, node on port {port}, cpus {os.cpu_count()}, "
        f"load {os.getloadavg()[0]:.1f}, holdoff {opts.holdoff_ms} ms"
    )
    try:
        node.client().call(JOBS_SERVER, ForceCheckTypes(), 30)
        for workers in (1, 2, 4):
            rate = run_throughput(ctx, url, workers, opts.jobs)
            print(f"throughput  add/accept/finish  {workers} worker(s)  {opts.jobs} jobs  {rate:8.0f} jobs/s")
        wake = [x * 1000 for x in run_wakeup(ctx, url, opts.samples)]
        p50, p99 = statistics.median(wake), pct(wake, 99)
        print(
            f"accept wake-up after add    n={len(wake)}  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
            f"  (target p50 < 20 ms: {'ok' if p50 < 20 else 'MISSED'})"
        )
        note = [x * 1000 for x in run_notify(url, port, opts.samples)]
        p50, p99 = statistics.median(note), pct(note, 99)
        target = opts.holdoff_ms + 30
        print(
            f"subscription notify         n={len(note)}  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
            f"  (target p50 < holdoff + 30 = {target} ms: {'ok' if p50 < target else 'MISSED'})"
        )
    finally:
        db.close()
        node.stop()
    print(f"total {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
