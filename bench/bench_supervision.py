"""Supervision benchmark: restart latency and simple_one_for_one start rate.

Prints, in one run on a real node (multiprocTCPBase, 127.0.0.1):

* crash-to-restarted latency: a call makes the worker raise; measured from
  sending the call to the restarted worker answering (p50/p99, N restarts);
* SIGKILL-to-restarted latency: os.kill(pid, SIGKILL) to the new worker
  answering (p50/p99, N restarts);
* time to start 100 children under a simple_one_for_one supervisor.

Targets (issue 3): crash p50 < 50 ms, SIGKILL p50 < 500 ms.
Run: .venv/bin/python bench/bench_supervision.py [--restarts N] [--port P]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from supervision import CallFailed, ChildSpec, start_node  # noqa: E402

WORKER = "tests.supervision.fixtures:Worker"
SUP = "tests.supervision.fixtures:Sup"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def wait_new_pid(client, child_id: str, old_pid: int, deadline_s: float = 10.0) -> int:
    """Poll the supervisor until the child runs in a new process (it answered
    its start handshake, so it is up and serving)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for info in client.which_children(client.node, timeout=2.0):
            if info.id == child_id and info.pid not in (None, old_pid):
                return info.pid
    raise RuntimeError(f"{child_id} was not restarted within {deadline_s}s")


def bench_restarts(client, n: int, kill: bool) -> list[float]:
    out = []
    pid = client.call("bench_worker", "pid")
    for _ in range(n):
        t0 = time.perf_counter()
        if kill:
            os.kill(pid, signal.SIGKILL)
        else:
            try:
                client.call("bench_worker", "crash")
            except CallFailed:
                pass
        pid = wait_new_pid(client, "bench_worker", pid)
        out.append((time.perf_counter() - t0) * 1000)
    assert client.call("bench_worker", "ping") == "pong"
    return out


def bench_simple_start(client, n: int) -> float:
    sup = client.start_child(
        client.node,
        ChildSpec(
            "bench_simple",
            SUP,
            {
                "id": "bench_simple",
                "flags": {"strategy": "simple_one_for_one", "intensity": 10, "period": 3},
                "specs": [ChildSpec("w", WORKER, None, restart="temporary")],
            },
            type="supervisor",
        ),
    )
    t0 = time.perf_counter()
    for i in range(n):
        client.start_child(sup, {"id": f"w{i}"})
    elapsed = time.perf_counter() - t0
    assert client.count_children(sup)["active"] == n
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=60)
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    port = args.port or free_port()
    flags = {"strategy": "one_for_one", "intensity": 10 * args.restarts, "period": 1}
    node = start_node(
        port,
        flags,
        [ChildSpec("bench_worker", WORKER, {"id": "bench"}, name="bench_worker")],
        level=40,
        log_stream="ext://sys.stderr",
    )
    try:
        client = node.client()
        crash = bench_restarts(client, args.restarts, kill=False)
        killed = bench_restarts(client, args.restarts, kill=True)
        start_s = bench_simple_start(client, args.children)
    finally:
        node.stop()
    print(f"supervision benchmark (Thespian multiprocTCPBase, 127.0.0.1, {os.cpu_count()} CPUs)")
    print(f"{'measure':40s} {'p50':>9s} {'p99':>9s} {'n':>5s}  target")
    print(
        f"{'crash -> restarted (ms)':40s} {statistics.median(crash):9.1f} {pct(crash, 0.99):9.1f} "
        f"{len(crash):5d}  p50 < 50"
    )
    print(
        f"{'SIGKILL -> restarted (ms)':40s} {statistics.median(killed):9.1f} {pct(killed, 0.99):9.1f} "
        f"{len(killed):5d}  p50 < 500"
    )
    print(
        f"start {args.children} children, simple_one_for_one: {start_s * 1000:.0f} ms "
        f"({start_s * 1000 / args.children:.1f} ms each)"
    )


if __name__ == "__main__":
    main()
