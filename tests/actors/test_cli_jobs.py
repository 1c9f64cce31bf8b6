"""The ``otpjobs jobs`` commands a new user hits first (no node needed:
they read and write the store): ``stats`` and the bounds of ``watch
--timeout``; and ``accept`` on an undeclared type fails at once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fdblayer
from actors import jobs
from fdblayer.jobs.exceptions import NoTypeTimeout

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    db = fdblayer.open(url)
    yield url, db
    db.close()


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "actors", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_jobs_stats_prints_the_counts_of_each_type(store):
    url, db = store
    jobs.set_type_timeout(db, "mail", 30)
    for i in range(3):
        jobs.enqueue(db, "mail", {}, id=f"m{i}")
    jobs.enqueue(db, "mail", {}, id="later", delay=3600)
    jobs.accept(db, "mail", timeout=0)
    out = cli("jobs", "stats", "--store", url)
    assert out.returncode == 0, out.stderr
    [line] = [json.loads(x) for x in out.stdout.splitlines()]
    assert line["type"] == "mail" and (line["pending"], line["scheduled"], line["running"]) == (3, 1, 1)


@pytest.mark.parametrize("bad", ["nan", "-1", "inf"])
def test_watch_refuses_a_timeout_it_cannot_wait(store, bad):
    url, db = store
    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "j", {})
    started = time.monotonic()
    out = cli("jobs", "watch", "t", "j", "--timeout", bad, "--store", url, timeout=30)
    assert out.returncode == 2 and "--timeout must be finite and >= 0" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and time.monotonic() - started < 30


def test_watch_with_a_timeout_of_years_waits_and_prints(store):
    url, db = store
    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "j", {})
    proc = subprocess.Popen([sys.executable, "-m", "actors", "jobs", "watch", "t", "j", "--timeout", "1e12",
                             "--store", url], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(proc.stdout.readline())["state"] == "pending"
        job, _ = jobs.accept(db, "t", timeout=0)
        jobs.finish(db, job)
        assert proc.wait(30) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


def test_accept_on_a_type_with_no_timeout_fails_at_once(store):
    _, db = store
    started = time.monotonic()
    with pytest.raises(NoTypeTimeout, match="has no type timeout"):
        jobs.accept(db, "undeclared", timeout=30)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("command", [["jobs", "list"], ["jobs", "stats"], ["types", "list"], ["docs", "list"],
                                     ["jobs", "watch", "t", "j", "--timeout", "1"]])
def test_reading_a_store_that_does_not_exist_is_an_error_and_creates_nothing(tmp_path, command):
    missing = tmp_path / "typo" / "stroe.db"
    out = cli(*command, "--store", f"sqlite:///{missing}")
    assert out.returncode == 2 and f"no store at {missing}" in out.stderr, out.stderr
    assert not missing.exists() and not missing.parent.exists()


def test_types_from_the_command_line_are_strings_and_never_empty(store):
    url, db = store
    assert cli("types", "set-timeout", "123", "5", "--store", url).returncode == 0
    assert jobs.get_type_timeout(db, "123") == 5 and jobs.get_type_timeout(db, 123) is None
    out = cli("types", "set-timeout", "", "5", "--store", url)
    assert out.returncode == 2 and "non-empty" in out.stderr


def test_clearing_an_unknown_or_reserved_type_says_so(store):
    url, db = store
    out = cli("types", "clear-timeout", "ghost", "--store", url)
    assert out.returncode == 1 and "no job type 'ghost'" in out.stderr and "cleared" not in out.stdout
    jobs.set_type_timeout(db, "_replicator_docs", 30)
    out = cli("types", "clear-timeout", "_replicator_docs", "--store", url)
    assert out.returncode == 2 and "reserved" in out.stderr
    assert jobs.get_type_timeout(db, "_replicator_docs") == 30


def test_add_takes_data_from_a_file_or_stdin_and_a_delay(store, tmp_path):
    url, db = store
    jobs.set_type_timeout(db, "t", 30)
    (tmp_path / "data.json").write_text('{"from": "file"}')
    assert cli("jobs", "add", "t", "f", f"@{tmp_path / 'data.json'}", "--store", url).returncode == 0
    out = subprocess.run([sys.executable, "-m", "actors", "jobs", "add", "t", "s", "-", "--delay", "60", "--store", url],
                         cwd=ROOT, input='{"from": "stdin"}', capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert jobs.get_job_data(db, "t", "f") == {"from": "file"} and jobs.get_job_data(db, "t", "s") == {"from": "stdin"}
    assert jobs.get_job(db, "t", "s").scheduled_time >= time.time() + 59
    bad = cli("jobs", "add", "t", "x", "@/nonexistent/data.json", "--store", url)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


TRACEBACK = ('Traceback (most recent call last):\n  File "/app/tasks.py", line 3, in charge\n'
             '    raise ValueError("nope")\nValueError: nope\n')


def test_result_and_retry_of_a_pool_job(store):
    from actors.workers.context import encode_result
    from fdblayer.jobs import work
    from fdblayer.jobs.keys import DEFAULT_LAYOUT as L

    url, db = store
    jobs.set_type_timeout(db, "p", 30)
    jobs.enqueue(db, "p", {"n": 1}, id="ok", max_attempts=1)
    jobs.enqueue(db, "p", {"n": 2}, id="bad", max_attempts=1)
    claimed = {c.job.id: c for c in work.claim(db, L, "p", time.time(), 5, "h", 3).claimed}
    work.complete(db, L, [work.Outcome(claimed["ok"].job, "ok", encode_result(7)),
                          work.Outcome(claimed["bad"].job, "fail", None,
                                       {"type": "ValueError", "message": "nope", "traceback": TRACEBACK})],
                  time.time())
    ok = cli("jobs", "result", "p", "ok", "--timeout", "5", "--store", url)
    assert ok.returncode == 0 and json.loads(ok.stdout) == 7
    bad = cli("jobs", "result", "p", "bad", "--timeout", "5", "--store", url)
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"] == "ValueError"
    assert json.loads(bad.stdout)["traceback"] == TRACEBACK, "the traceback is among the JSON fields"
    assert TRACEBACK.rstrip() in bad.stderr, "and printed as Python prints it"
    assert "failed after 1 attempt(s): ValueError: nope" in bad.stderr
    assert cli("jobs", "retry", "p", "bad", "--store", url).returncode == 0
    assert jobs.get_job_state(db, "p", "bad").value == "pending" and jobs.status(db, "p", "bad").attempt == 0
    again = cli("jobs", "retry", "p", "bad", "--store", url)
    assert again.returncode == 1 and "only a finished job" in again.stderr
