"""Several machines on one PostgreSQL queue: worker hosts in separate working
directories (sharing nothing but the server's address), real processes, real
SIGKILLs, and the command line against the same store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fdblayer
from actors import jobs
from fdblayer.jobs import hosts
from fdblayer.jobs.job import JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from tests.workers.hosts import Host, write_handlers

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def machines(tmp_path, pg_url):
    """Two working directories ("machines"), each with its handler module and
    run log; hosts started through ``start`` are stopped at the end."""
    dirs = []
    for name in ("m1", "m2"):
        directory = tmp_path / name
        directory.mkdir()
        write_handlers(directory)
        dirs.append(directory)
    started: list[Host] = []

    def start(directory, assignments, **kw):
        host = Host(directory, pg_url, assignments, run_log=directory / "runs.jsonl", name=f"host{len(started)}", **kw)
        started.append(host)
        return host.wait_up()

    yield dirs, start
    for host in started:
        host.close()


@pytest.fixture
def db(pg_url):
    handle = fdblayer.open(pg_url)
    yield handle
    handle.close()


def runs(directory) -> list:
    path = directory / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_four_workers_on_two_machines_run_each_job_exactly_once(machines, db):
    dirs, start = machines
    start(dirs[0], ["sleepy=handlers_mod:sleepy"], concurrency=2)
    start(dirs[1], ["sleepy=handlers_mod:sleepy"], concurrency=2)
    ids = [jobs.enqueue(db, "sleepy", {"s": 0.01}) for _ in range(200)]
    assert all(jobs.result(db, "sleepy", i, timeout=90) == "slept" for i in ids)
    starts = [r for d in dirs for r in runs(d) if r["event"] == "start"]
    assert sorted(r["id"] for r in starts) == sorted(ids), "each job started once, on one machine"
    assert all(runs(d) for d in dirs), "both machines' workers took jobs"
    assert len({r["pid"] for r in starts}) >= 3


def test_jobs_survive_sigkilled_workers_on_either_machine(machines, db):
    dirs, start = machines
    jobs.set_type_timeout(db, "sum", 60)
    hosts = [start(d, ["sum=handlers_mod:add"], concurrency=2, extra=["--max-attempts", "10"]) for d in dirs]
    ids = [jobs.enqueue(db, "sum", {"a": n, "b": 0}) for n in range(300)]
    kills = 0
    deadline = time.time() + 30
    while time.time() < deadline and kills < 6:
        pids = hosts[kills % 2].worker_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            kills += 1
        time.sleep(0.1)
    assert kills == 6
    assert [jobs.result(db, "sum", i, timeout=90) for i in ids] == list(range(300))
    assert all(jobs.status(db, "sum", i).state is JobState.FINISHED for i in ids)
    ends = [r["id"] for d in dirs for r in runs(d) if r["event"] == "end"]
    assert sorted(set(ends)) == sorted(ids)


def test_the_command_line_works_on_the_postgres_store(pg_url, db, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "actors", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    typed = cli("types", "set-timeout", "--store", pg_url, "cli", "30")
    assert typed.returncode == 0, typed.stderr
    added = cli("jobs", "add", "--store", pg_url, "cli", "j1", '{"x": 1}')
    assert added.returncode == 0, added.stderr
    assert jobs.get_job_state(db, "cli", "j1") is JobState.PENDING
    listed = cli("jobs", "list", "--store", pg_url, "cli")
    assert listed.returncode == 0 and "j1" in listed.stdout, listed.stdout + listed.stderr
    removed = cli("jobs", "remove", "--store", pg_url, "cli", "j1")
    assert removed.returncode == 0, removed.stderr
    with pytest.raises(jobs.NotFound):
        jobs.get_job(db, "cli", "j1")


def test_a_host_building_steps_while_others_commit_runs_each_job_once(machines, db):
    """Stepping on PostgreSQL (``actors.workers.stepping``): with many jobs
    due, a step is built while the last one's commit is in flight (the
    host's published counts say how many were); every job still runs once,
    at its first attempt, and succeeds."""
    dirs, start = machines
    ids = [f"j{n:05d}" for n in range(3000)]
    jobs.set_type_timeout(db, "noop", 30)
    jobs.add_many(db, "noop", {i: {} for i in ids})
    host = start(dirs[0], ["noop=handlers_mod:noop"], concurrency=4)
    assert all(jobs.result(db, "noop", i, timeout=120) is None for i in ids)
    statuses = [jobs.status(db, "noop", i) for i in ids]
    assert {(s.state, s.outcome, s.attempt) for s in statuses} == {(JobState.FINISHED, "succeeded", 1)}

    def counts() -> dict:
        listed = hosts.list_hosts(db, DEFAULT_LAYOUT, time.time())
        return listed[0].get("counts", {}) if listed else {}

    deadline = time.time() + 3 * hosts.BEAT
    while counts().get("succeeded", 0) < len(ids) and time.time() < deadline:
        time.sleep(0.2)
    done = counts()
    assert done.get("succeeded") == len(ids)
    assert done.get("overlapped", 0) > 0, done
    assert host.terminate() == 0
