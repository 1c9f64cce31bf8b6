"""Subscriptions across a node's restart: a client process that subscribed
before its node restarted (on the same port) subscribes again afterwards
(README: "wait with a timeout, then subscribe again, which returns the
job's current state") and must get the later events.

Also: several subscribers (threads of one process and a second process) on one
job that finishes: each gets ``finished``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from actors import jobs
from actors.jobs import JobState

from .jobs_fixtures import ROOT, QueueNode, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

T = ("probe-restart", 1)

CLIENT = r"""
import json, sys, time
import fdblayer
from actors import jobs
url, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
db = fdblayer.open(url)
T = ("probe-restart", 1)
subs = []
for i in range(n):
    sub, state, _ = jobs.subscribe(db, T, "shared", node=port)
    subs.append(sub)
print(json.dumps({"subscribed": len(subs), "state": str(state)}), flush=True)
ev = jobs.wait(subs, "finished", timeout=30)
print(json.dumps({"event": None if ev is None else [ev[1], str(ev[2])]}), flush=True)
"""


def test_resubscribe_after_node_restart_same_port(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    import fdblayer

    db = fdblayer.open(url)
    jobs.set_type_timeout(db, T, 60)
    port = free_port()
    node = QueueNode(url, port=port)
    try:
        node.wait_tree_up(n_types=1)
        jobs.add(db, T, "before", {})
        sub, state, _ = jobs.subscribe(db, T, "before", node=port)
        assert state is JobState.PENDING
        job, _ = jobs.accept(db, T, timeout=5)
        assert jobs.wait(sub, "running", timeout=10) is not None
    finally:
        node.stop()
    node = QueueNode(url, port=port)
    try:
        node.wait_tree_up(n_types=1)
        # the old subscription is gone: wait times out, then subscribe again
        assert jobs.wait(sub, timeout=1) is None
        errors = []
        deadline = time.monotonic() + 15
        sub2 = None
        while time.monotonic() < deadline:  # as README says: subscribe again (retried for 15 s)
            try:
                sub2, state, _ = jobs.subscribe(db, T, "before", node=port)
                break
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc)[:120])
                time.sleep(1)
        assert sub2 is not None, f"subscribe fails for 15 s after the node restarted: {errors[:2]} x{len(errors)}"
        assert state is JobState.RUNNING
        jobs.finish(db, job, {"ok": 1})
        ev = jobs.wait(sub2, "finished", timeout=15)
        assert ev is not None, "no finished event after re-subscribing on the restarted node"
        jobs.add(db, T, "after", {})
        sub3, state, _ = jobs.subscribe(db, T, "after", node=port)
        job, _ = jobs.accept(db, T, timeout=5)
        jobs.finish(db, job, {"ok": 2})
        assert jobs.wait(sub3, "finished", timeout=15) is not None
    finally:
        node.stop()
        db.close()


def test_many_subscribers_one_job(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    import fdblayer

    db = fdblayer.open(url)
    jobs.set_type_timeout(db, T, 60)
    node = QueueNode(url)
    procs = []
    try:
        node.wait_tree_up(n_types=1)
        jobs.add(db, T, "shared", {})
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        for _ in range(4):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", CLIENT, url, str(node.port), "3"],
                    env=env,
                    cwd=str(ROOT),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        # many unrelated subscriptions in this process too (a full flow-control window)
        others = []
        for i in range(12):
            jobs.add(db, T, f"other-{i}", {})
            others.append(jobs.subscribe(db, T, f"other-{i}", node=node.port)[0])
        mine, _, _ = jobs.subscribe(db, T, "shared", node=node.port)
        for p in procs:
            line = json.loads(p.stdout.readline())
            assert line.get("subscribed") == 3, line
        # churn the other jobs (events this process never waits for), then finish the shared one
        for _ in range(13):
            j, _ = jobs.accept(db, T, timeout=5)
            if j.id != "shared":
                j = jobs.update(db, j, {"x": 1})
                jobs.finish(db, j)
            else:
                shared = j
        time.sleep(0.2)
        jobs.finish(db, shared, {"final": True})
        ev = jobs.wait(mine, "finished", timeout=20)
        assert ev is not None and ev[3] == {"final": True}
        for p in procs:
            out = json.loads(p.stdout.readline())
            assert out["event"] == ["shared", "finished"], (out, p.stderr.read()[-500:] if p.poll() else "")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        node.stop()
        db.close()
