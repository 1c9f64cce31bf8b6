"""Crashes on a real node: SIGKILL of each actor of the queue tree, of a worker
holding a job, and of the whole node.

The tree is ``couch_jobs_sup`` (rest_for_one): store check (ignored),
activity monitor sup, notifier sup, jobs server. A killed child restarts
with every later sibling; a killed notifier or activity monitor takes the
jobs server down (it monitors them), which restarts with fresh per-type
actors. After each kill the queue must keep working: add, subscribe,
accept, events, finish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from actors import jobs
from actors.jobs import Job, JobState
from actors.names import ACTIVITY_MONITOR_SUP, NOTIFIER_SUP

from .jobs_fixtures import (
    FAST_COUCH_JOBS,
    ROOT,
    free_port,
    QueueNode,
    group_pids,
    kill_worker,
    pid_alive,
    read_line,
    spawn_worker,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

T = ("kill", 1)
TIMEOUT = 30  # long: no re-enqueue while a kill test holds a job


@pytest.fixture(scope="module")
def qnode(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('faults')}/store.db"
    jobs.set_type_timeout(__import__("fdblayer").open(url), T, TIMEOUT)
    node = QueueNode(url)
    try:
        yield node
    finally:
        node.stop()


def queue_works(q: QueueNode, job_id: str) -> None:
    """add -> subscribe -> accept -> running event -> finish -> finished event."""
    jobs.add(q.db, T, job_id, {"n": 1})
    sub, state, _ = wait_until(lambda: jobs.subscribe(q.db, T, job_id, node=q.port), 20, "a subscription to succeed")
    assert state == JobState.PENDING
    job, data = jobs.accept(q.db, T, timeout=10)
    assert (job.id, data) == (job_id, {"n": 1})
    assert jobs.wait(sub, timeout=10) == (T, job_id, JobState.RUNNING, {"n": 1})
    jobs.finish(q.db, job, {"n": 2})
    assert jobs.wait(sub, JobState.FINISHED, timeout=10) == (T, job_id, JobState.FINISHED, {"n": 2})


# which tree pids must change when the key is killed (rest_for_one)
RESTARTED = {
    "server": {"server"},
    "notifier": {"server"},
    "activity_monitor": {"server"},
    "am_sup": {"am_sup", "notifier_sup", "server"},
    "notifier_sup": {"notifier_sup", "server"},
    "jobs_sup": {"jobs_sup", "am_sup", "notifier_sup", "server"},
}


@pytest.mark.parametrize("victim", list(RESTARTED))
def test_sigkill_of_a_tree_actor(qnode, victim):
    q = qnode
    q.restart_app()  # a fresh couch_jobs_sup: its restart intensity starts afresh
    before = q.wait_tree_up(n_types=1)
    monitors, notifiers = q.kid_pids(ACTIVITY_MONITOR_SUP), q.kid_pids(NOTIFIER_SUP)
    pid = {"notifier": notifiers[0], "activity_monitor": monitors[0]}.get(victim) or before[victim]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), 10, f"{victim} to die")

    def restarted():
        pids = q.wait_tree_up(n_types=1)
        return pids if all(pids[k] != before[k] for k in RESTARTED[victim]) else None

    after = wait_until(restarted, 40, f"the tree to restart after {victim} was killed", step=0.1)
    for key in before:
        if key in RESTARTED[victim]:
            assert after[key] != before[key], key
        else:
            assert after[key] == before[key], f"{key} should not restart when {victim} is killed"
    # a new jobs server starts fresh per-type actors, stopping any stale ones
    assert set(q.kid_pids(ACTIVITY_MONITOR_SUP)).isdisjoint(monitors)
    assert set(q.kid_pids(NOTIFIER_SUP)).isdisjoint(notifiers)
    for pid_ in monitors + notifiers:
        wait_until(lambda: not pid_alive(pid_), 10, "stale per-type actors to be gone")
    queue_works(q, f"after-{victim}")


def test_worker_killed_holding_a_job_is_reenqueued(qnode):
    q = qnode
    t, timeout = "worker-kill", 1.0
    jobs.set_type_timeout(q.db, t, timeout)
    q.force_check_types()
    jobs.add(q.db, t, "held", {"x": 1})
    holder = spawn_worker("hold", q.store_url, t)
    other = None
    try:
        assert "ready" in read_line(holder)
        held = read_line(holder)
        assert held["id"] == "held"
        # Only now the second worker: started together, it could take the job first.
        other = spawn_worker("accept", q.store_url, t, "--timeout", "30")
        sub, state, _ = jobs.subscribe(q.db, t, "held", node=q.port)
        assert state == JobState.RUNNING
        assert "ready" in read_line(other)
        killed_at = time.time()
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(10)

        assert jobs.wait(sub, JobState.PENDING, timeout=30) is not None
        got = read_line(other, 30)
        assert got["id"] == "held" and got["data"] == {"x": 1}
        assert got["lock"] != held["lock"]
        assert got["t"] - killed_at >= timeout * 0.9
        with pytest.raises(jobs.Halt):
            jobs.update(q.db, Job(t, "held", held["lock"]))
        # the new holder is silent too (it exited), so the job may be re-enqueued once more
        assert jobs.get_job_state(q.db, t, "held") in (JobState.RUNNING, JobState.PENDING)
    finally:
        kill_worker(holder)
        if other is not None:
            kill_worker(other)
        jobs.clear_type_timeout(q.db, t)


def start_cli_node(url: str, port: int, tmp_path, log_name: str):
    """``python -m actors node start`` in its own session; returns (proc, runtime info)."""
    cfg = tmp_path / "node.ini"
    cfg.write_text("[couch_jobs]\n" + "".join(f"{k} = {v}\n" for k, v in FAST_COUCH_JOBS.items()))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OTPJOBS_RUNTIME_DIR=str(tmp_path))
    log = open(tmp_path / log_name, "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actors",
            "node",
            "start",
            "--store",
            url,
            "--port",
            str(port),
            "--config",
            str(cfg),
            "--log-level",
            "warning",
            "--http-port",
            "0",
        ],
        cwd=str(ROOT),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    runtime = tmp_path / f"node-{port}.json"

    def started():
        if proc.poll() is not None:
            raise AssertionError(f"node exited {proc.returncode}: {(tmp_path / log_name).read_text()[-3000:]}")
        if not runtime.exists():
            return None
        info = json.loads(runtime.read_text())
        return info if "pgid" in info and info.get("owner") == proc.pid else None

    return proc, wait_until(started, 60, "the node to start", step=0.05)


def test_node_sigkilled_and_started_again_loses_no_job(tmp_path):
    """The node (CLI process and its whole actor process group) dies at once
    while workers run; a new node on the same store re-enqueues the job a
    killed worker held; every job added ends finished and in the ledger."""
    import fdblayer

    url = f"sqlite:///{tmp_path}/store.db"
    t, n = "ledger", 80
    port = free_port()
    db = fdblayer.open(url)
    ledger = tmp_path / "ledger.txt"
    workers: list = []
    nodes: list = []
    try:
        jobs.set_type_timeout(db, t, 1.0)
        proc_a, info_a = start_cli_node(url, port, tmp_path, "node-a.log")
        nodes.append(proc_a)
        ids = [f"j{i:03d}" for i in range(n)]
        for job_id in ids[: n // 2]:
            jobs.add(db, t, job_id, {"i": job_id})
        holder = spawn_worker("hold", url, t)
        workers.append(holder)
        read_line(holder)
        held = read_line(holder)["id"]
        for _ in range(2):
            workers.append(spawn_worker("loop", url, t, "--ledger", str(ledger), "--idle", "60"))
        wait_until(lambda: ledger.exists() and len(ledger.read_text().split()) >= 5, 30, "workers to finish jobs")

        # the whole node dies at once, while workers run; the producer goes on adding
        os.killpg(proc_a.pid, signal.SIGKILL)
        os.killpg(info_a["pgid"], signal.SIGKILL)
        proc_a.wait(10)
        wait_until(lambda: not group_pids(info_a["pgid"]), 10, "every process of the node to be gone")
        kill_worker(holder)  # its job must come back through the next node's activity monitor
        for job_id in ids[n // 2 :]:
            jobs.add(db, t, job_id, {"i": job_id})

        proc_b, info_b = start_cli_node(url, port, tmp_path, "node-b.log")
        nodes.append(proc_b)
        assert info_b["pgid"] != info_a["pgid"]

        def all_finished():
            states = {info.id: info.state for info in jobs.get_jobs(db, t)}
            return all(states.get(i) == JobState.FINISHED for i in ids)

        wait_until(all_finished, 60, "every job to be finished", step=0.1)
        infos = {info.id: info for info in jobs.get_jobs(db, t)}
        assert sorted(infos) == ids
        assert all("by" in info.data for info in infos.values())  # each finished by a worker
        done = ledger.read_text().split()
        assert set(done) == set(ids), f"missing from the ledger: {set(ids) - set(done)}"
        assert held in done

        proc_b.send_signal(signal.SIGTERM)
        assert proc_b.wait(30) == 0
        wait_until(lambda: not group_pids(info_b["pgid"]), 15, "no process of node B left")
    finally:
        for w in workers:
            kill_worker(w)
        for proc in nodes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        db.close()


def test_a_lengthened_timeout_does_not_re_enqueue_a_job_early(tmp_path):
    """The node's activity monitor waits 3 s between checks; the type's
    timeout goes to 60 s 2 s after the worker's last update: the worker,
    silent 10 s more, still holds its job (the check under the old timeout
    sees the change and re-enqueues nothing)."""
    import fdblayer

    url = f"sqlite:///{tmp_path}/store.db"
    db = fdblayer.open(url)
    job_type = "lengthened"
    jobs.set_type_timeout(db, job_type, 3)
    node = QueueNode(url)
    try:
        node.wait_tree_up(n_types=1)
        time.sleep(4)  # the monitor has read its stamp under the 3 s timeout
        jobs.add(db, job_type, "long", {})
        job, _ = jobs.accept(db, job_type, timeout=10)
        job = jobs.update(db, job, {"step": 1})
        time.sleep(2.0)
        jobs.set_type_timeout(db, job_type, 60)
        time.sleep(10.0)
        job = jobs.update(db, job, {"step": 2})  # raises Halt if it was re-enqueued
        jobs.finish(db, job)
    finally:
        node.stop()
        db.close()
