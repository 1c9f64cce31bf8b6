"""A paused type starts no job on any host: running ones finish, claimed
ones go back to the queue, enqueues and ticks go on; resumed, it runs all.
Real hosts, a ledger of handler starts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from actors import jobs
from fdblayer.jobs import overview
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from tests.workers.hosts import ROOT, wait_for

WORK = """
import json, os, time

def work(ctx):
    with open(os.environ["PAUSE_LOG"], "a") as f:
        f.write(json.dumps({"id": ctx.id, "t": time.time()}) + "\\n")
    time.sleep(ctx.data.get("s", 0))
    return ctx.id
"""


@pytest.fixture
def started(workdir, monkeypatch):
    (workdir / "pause_mod.py").write_text(textwrap.dedent(WORK))
    path = workdir / "pause.log"
    monkeypatch.setenv("PAUSE_LOG", str(path))
    return lambda: [json.loads(line)["id"] for line in path.read_text().splitlines()] if path.exists() else []


def _paused(db, job_type: str) -> bool:
    return next(t["paused"] for t in overview.types_overview(db, DEFAULT_LAYOUT, time.time()) if t["type"] == job_type)


@pytest.mark.slow
def test_a_paused_type_starts_nothing_and_runs_everything_once_resumed(hosts, db, started):
    hosts(["pz=pause_mod:work"], concurrency=2)
    long_id = jobs.enqueue(db, "pz", {"s": 2.0})
    wait_for(lambda: long_id in started(), 30, "the long job to start")
    assert jobs.pause(db, "pz") is False and jobs.pause(db, "pz") is True and _paused(db, "pz")
    quick = [jobs.enqueue(db, "pz", {}) for _ in range(10)]
    assert jobs.result(db, "pz", long_id, timeout=30) == long_id, "a running job finishes"
    time.sleep(1.5)
    assert started() == [long_id], "nothing started while paused"
    assert all(jobs.status(db, "pz", i).state == "pending" for i in quick)
    assert jobs.resume(db, "pz") is True and not _paused(db, "pz")
    assert [jobs.result(db, "pz", i, timeout=30) for i in quick] == quick
    assert sorted(started()) == sorted([long_id] + quick), "each ran once"


@pytest.mark.slow
def test_jobs_a_host_holds_go_back_when_their_type_is_paused(hosts, db, started):
    hosts(["pz=pause_mod:work"], concurrency=1)
    ids = [jobs.enqueue(db, "pz", {"s": 0.05}) for _ in range(200)]
    wait_for(lambda: len(started()) >= 5, 30, "the pool to take jobs in batches")
    jobs.pause(db, "pz")
    time.sleep(1.0)
    settled = len(started())
    time.sleep(1.5)
    assert len(started()) == settled < len(ids), "no job started once the pause was seen"
    states = [jobs.status(db, "pz", i).state for i in ids]
    assert states.count("pending") == len(ids) - settled and "claimed" not in states and "running" not in states
    jobs.resume(db, "pz")
    wait_for(lambda: all(jobs.status(db, "pz", i).state == "finished" for i in ids), 60, "every job to finish")
    assert sorted(started()) == sorted(ids), "each ran exactly once"


@pytest.mark.slow
def test_a_pause_takes_back_the_claimed_jobs_of_a_host_that_claims_nothing_more(hosts, db, started, workdir):
    """A host whose workers are busy with long runs claims nothing, yet the
    jobs it holds claimed must not start when those runs end: the pause is
    seen at once, not at the host's next claim."""
    ids = [jobs.enqueue(db, "pl", {"s": 2.0}) for _ in range(8)]
    hosts(["pl=pause_mod:work"], concurrency=2)
    wait_for(lambda: len(started()) >= 2, 30, "two runs to start")
    wait_for(lambda: any(jobs.status(db, "pl", i).state == "claimed" for i in ids), 30, "the host to hold claimed jobs")
    jobs.pause(db, "pl")
    paused_at = time.time()
    time.sleep(3.0)  # past the end of the runs under way
    log = [json.loads(line) for line in (workdir / "pause.log").read_text().splitlines()]
    late = [(r["id"], round(r["t"] - paused_at, 2)) for r in log if r["t"] > paused_at + 0.5]
    assert not late, f"started after the pause: {late}"
    states = [jobs.status(db, "pl", i).state for i in ids]
    assert "claimed" not in states and states.count("pending") == len(ids) - len(log)
    jobs.resume(db, "pl")
    wait_for(lambda: all(jobs.status(db, "pl", i).state == "finished" for i in ids), 60, "every job to finish")
    assert sorted(started()) == sorted(ids), "each ran exactly once"
    assert {jobs.status(db, "pl", i).attempt for i in ids} == {1}, "a job given back keeps its attempt"


@pytest.mark.slow
def test_pause_and_resume_from_the_command_line(db, store_url):
    jobs.set_type_timeout(db, "cli-pz", 30)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "actors", "jobs", *args, "--store", store_url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = cli("pause", "cli-pz")
    assert out.returncode == 0 and "is now paused" in out.stdout and _paused(db, "cli-pz")
    assert "already paused" in cli("pause", "cli-pz").stdout
    assert cli("resume", "cli-pz").returncode == 0 and not _paused(db, "cli-pz")
    unknown = cli("pause", "no-such-type")
    assert unknown.returncode == 1 and "no job type 'no-such-type'" in unknown.stderr


def test_pausing_an_unknown_type_is_an_error_that_changes_nothing(db):
    with pytest.raises(jobs.NotFound):
        jobs.pause(db, "never-declared")
    assert jobs.get_type_timeout(db, "never-declared") is None
    for bad in (None, 1.5, {"a": 1}):
        with pytest.raises(jobs.InvalidArgument):
            jobs.pause(db, bad)


@pytest.mark.slow
def test_a_priority_0_job_overtakes_queued_priority_5_jobs_on_a_busy_host(hosts, db, started):
    hosts(["pz=pause_mod:work"], concurrency=1)
    blocker = jobs.enqueue(db, "pz", {"s": 1.5})
    wait_for(lambda: blocker in started(), 30, "the worker to be busy")
    low = [jobs.enqueue(db, "pz", {"s": 0.02}, priority=5, id=f"low-{n:02}") for n in range(30)]
    urgent = jobs.enqueue(db, "pz", {}, priority=0)
    assert jobs.result(db, "pz", urgent, timeout=30) == urgent
    wait_for(lambda: len(started()) == 32, 30, "every job to start")
    order = started()
    assert order.index(urgent) <= 3, f"the urgent job started {order.index(urgent)}th of the queued ones"
    assert [i for i in order if i in low] == low, "equal priorities in due order (then by id)"
