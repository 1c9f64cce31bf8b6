"""The PostgreSQL server stopped abruptly (``immediate``: what a crash does to
its clients) and started again while a node and a worker host run on it.

Asserted: during the outage a store call fails with the named error within
its bound (it never hangs); the node keeps serving what needs no store
(``/_up``) and neither process exits; once the server is back everything
recovers by itself: every job, added before or after the outage, finishes;
nothing committed before the outage is lost; no job ever ran twice at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

import fdblayer
from actors import jobs
from fdblayer.jobs.job import JobState
from fdblayer.exceptions import RetryLimitExceeded, ServerGone
from tests.procs import free_port, kill_groups, wait_until
from tests.workers.hosts import Host, write_handlers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def server(durable_pg_server):
    """A durable server of this test's own (see ``tests/conftest.py``)."""
    return durable_pg_server


def http_up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_up", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def overlapping_runs(run_log) -> list:
    """Jobs whose handler runs overlapped in time (a job run twice at once)."""
    events = [json.loads(line) for line in run_log.read_text().splitlines() if line.strip()]
    open_runs: dict = {}
    overlaps = []
    for e in events:  # one log, appended in order by every worker
        key = e["id"]
        if e["event"] == "start":
            if open_runs.get(key):
                overlaps.append(key)
            open_runs[key] = open_runs.get(key, 0) + 1
        elif e["event"] == "end":
            open_runs[key] = open_runs.get(key, 1) - 1
    return overlaps


def test_a_server_crash_is_survived_by_the_node_and_the_workers(server, tmp_path):
    url = server.url(prefix="faults")
    write_handlers(tmp_path)
    db = fdblayer.open(url)
    jobs.set_type_timeout(db, "sleepy", 5)
    http_port, node_port = free_port(), free_port()
    env = dict(
        os.environ, PYTHONPATH=ROOT, OTPJOBS_RUNTIME_DIR=str(tmp_path), THESPLOG_FILE=str(tmp_path / "thespian.log")
    )
    node_log = open(tmp_path / "node.log", "w")
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actors",
            "node",
            "start",
            "--store",
            url,
            "--port",
            str(node_port),
            "--http-port",
            str(http_port),
        ],
        cwd=tmp_path,
        env=env,
        stdout=node_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    run_log = tmp_path / "runs.jsonl"
    host = Host(
        tmp_path, url, ["sleepy=handlers_mod:sleepy"], concurrency=2, run_log=run_log, extra=["--max-attempts", "20"]
    )
    try:
        wait_until(lambda: http_up(http_port), 60, "the node's HTTP API")
        host.wait_up()
        before = [jobs.enqueue(db, "sleepy", {"s": 0.05}) for _ in range(40)]
        wait_until(lambda: jobs.get_job_state(db, "sleepy", before[5]) is JobState.FINISHED, 60, "some jobs to finish")

        server.kill("immediate")
        started = time.monotonic()
        tr = db.create_transaction()
        with pytest.raises(ServerGone):
            tr.get(b"anything")
        with pytest.raises(RetryLimitExceeded) as caught:
            fdblayer.transactional(timeout=1.0)(lambda tr: tr.get(b"x"))(db)
        assert isinstance(caught.value.last_error, ServerGone)
        assert time.monotonic() - started < 10, "store calls fail within their bounds"
        time.sleep(2)  # the node and the workers meet the outage
        assert http_up(http_port), "the node serves what needs no store"
        assert node.poll() is None and host.proc.poll() is None, "nobody exited"

        server.launch()
        after = [jobs.enqueue(db, "sleepy", {"s": 0.05}) for _ in range(20)]
        for job_id in before + after:
            try:
                assert jobs.result(db, "sleepy", job_id, timeout=90) == "slept"
            except TimeoutError:
                pytest.fail(
                    f"job {job_id} not done (host exit code {host.proc.poll()}, node's {node.poll()});"
                    f" the host's log ends with:\n{host.log()[-6000:]}"
                )
        assert node.poll() is None and host.proc.poll() is None
        assert overlapping_runs(run_log) == [], "no job ran twice at once"
    finally:
        host.close()
        runtime = tmp_path / f"node-{node_port}.json"
        pgid = json.loads(runtime.read_text()).get("pgid") if runtime.exists() else None
        subprocess.run(
            [sys.executable, "-m", "actors", "node", "stop", "--port", str(node_port)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=60,
        )
        kill_groups([node], [node.pid] + ([pgid] if pgid else []), "node")
        node_log.close()
        db.close()
