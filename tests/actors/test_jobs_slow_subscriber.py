"""A subscriber that stops reading (SIGSTOP, a debugger, a swapped-out
process) must not hold up a type's notifier: the other subscribers of the
same type still get their events at once. Real node, real stopped process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors import jobs

from .jobs_fixtures import QueueNode

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
T = "slowsub"
N = 40

SUBSCRIBER = """
import os, signal, sys
sys.path.insert(0, {root!r})
import fdblayer
from actors import jobs
db = fdblayer.open({url!r})
subs = [jobs.subscribe(db, {t!r}, f"j{{n}}", node={port})[0] for n in range({n})]
print("subscribed", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.fixture
def q(tmp_path):
    node = QueueNode(f"sqlite:///{tmp_path}/store.db")
    try:
        jobs.set_type_timeout(node.db, T, 30)
        yield node
    finally:
        node.stop()


@pytest.mark.slow
def test_a_stopped_subscriber_does_not_hold_up_the_others(q):
    for n in range(N):
        jobs.add(q.db, T, f"j{n}", {})
    child = subprocess.Popen(
        [sys.executable, "-c", SUBSCRIBER.format(root=str(ROOT), url=q.store_url, t=T, port=q.port, n=N)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "subscribed"
        for _ in range(N):  # every job the stopped process watches changes twice
            job, _ = jobs.accept(q.db, T)
            jobs.finish(q.db, job)
        worst = 0.0
        for k in range(3):
            jobs.add(q.db, T, f"mine{k}", {})
            sub, _, _ = jobs.subscribe(q.db, T, f"mine{k}", node=q.port)
            job, _ = jobs.accept(q.db, T)
            started = time.monotonic()
            event = jobs.wait(sub, "running", timeout=30)
            worst = max(worst, time.monotonic() - started)
            assert event is not None and event[1] == f"mine{k}"
            jobs.finish(q.db, job)
        assert worst < 2.0, f"the event came {worst:.2f}s late"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        child.stdout.close()
