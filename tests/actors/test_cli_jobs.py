"""The ``otpjobs jobs`` commands a new user hits first (no node needed:
they read and write the store): ``stats`` and the bounds of ``watch
--timeout``; and ``accept`` on an undeclared type fails at once."""

from __future__ import annotations

import argparse
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


def cli(*args: str, timeout: float = 60, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "actors", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


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
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors", "jobs", "watch", "t", "j", "--timeout", "1e12", "--store", url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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


@pytest.mark.parametrize(
    "command",
    [
        ["jobs", "list"],
        ["jobs", "stats"],
        ["types", "list"],
        ["docs", "list"],
        ["jobs", "watch", "t", "j", "--timeout", "1"],
    ],
)
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
    out = subprocess.run(
        [sys.executable, "-m", "actors", "jobs", "add", "t", "s", "-", "--delay", "60", "--store", url],
        cwd=ROOT,
        input='{"from": "stdin"}',
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert jobs.get_job_data(db, "t", "f") == {"from": "file"} and jobs.get_job_data(db, "t", "s") == {"from": "stdin"}
    assert jobs.get_job(db, "t", "s").scheduled_time >= time.time() + 59
    bad = cli("jobs", "add", "t", "x", "@/nonexistent/data.json", "--store", url)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


TRACEBACK = (
    'Traceback (most recent call last):\n  File "/app/tasks.py", line 3, in charge\n'
    '    raise ValueError("nope")\nValueError: nope\n'
)


@pytest.mark.slow
def test_result_and_retry_of_a_pool_job(store):
    from actors.workers.context import encode_result
    from fdblayer.jobs import work
    from fdblayer.jobs.keys import DEFAULT_LAYOUT as L

    url, db = store
    jobs.set_type_timeout(db, "p", 30)
    jobs.enqueue(db, "p", {"n": 1}, id="ok", max_attempts=1)
    jobs.enqueue(db, "p", {"n": 2}, id="bad", max_attempts=1)
    claimed = {c.job.id: c for c in work.claim(db, L, "p", time.time(), 5, "h", 3).claimed}
    work.complete(
        db,
        L,
        [
            work.Outcome(claimed["ok"].job, "ok", encode_result(7)),
            work.Outcome(
                claimed["bad"].job, "fail", None, {"type": "ValueError", "message": "nope", "traceback": TRACEBACK}
            ),
        ],
        time.time(),
    )
    ok = cli("jobs", "result", "p", "ok", "--timeout", "5", "--store", url)
    assert ok.returncode == 0 and json.loads(ok.stdout) == 7
    bad = cli("jobs", "result", "p", "bad", "--timeout", "5", "--store", url)
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"] == "ValueError"
    assert json.loads(bad.stdout)["traceback"] == TRACEBACK, "the traceback is among the JSON fields"
    assert TRACEBACK.rstrip() in bad.stderr, "and printed as Python prints it"
    assert "failed after 1 attempt(s): ValueError: nope" in bad.stderr
    shown = cli("jobs", "show", "p", "bad", "--store", url)
    assert shown.returncode == 0 and json.loads(shown.stdout)["outcome"] == "failed"
    assert [(e["attempt"], e["type"], e["message"]) for e in json.loads(shown.stdout)["errors"]] == [
        (1, "ValueError", "nope")
    ], "every failed attempt's error"
    assert json.loads(cli("jobs", "show", "p", "ok", "--store", url).stdout)["result"] == 7
    missing = cli("jobs", "show", "p", "nope", "--store", url)
    assert missing.returncode == 1 and "no job 'nope'" in missing.stderr
    assert cli("jobs", "retry", "p", "bad", "--store", url).returncode == 0
    assert jobs.get_job_state(db, "p", "bad").value == "pending" and jobs.status(db, "p", "bad").attempt == 0
    again = cli("jobs", "retry", "p", "bad", "--store", url)
    assert again.returncode == 1 and "only a finished job" in again.stderr


def test_add_on_a_fresh_store_declares_the_type_with_the_default_timeout(store):
    url, db = store
    out = cli("jobs", "add", "neverdeclared", "j1", '{"to": "ann"}', "--store", url)
    assert out.returncode == 0, out.stderr
    assert jobs.get_type_timeout(db, "neverdeclared") == 30.0
    assert jobs.get_job_data(db, "neverdeclared", "j1") == {"to": "ann"}
    jobs.set_type_timeout(db, "neverdeclared", 9)
    assert cli("jobs", "add", "neverdeclared", "j2", "--store", url).returncode == 0
    assert jobs.get_type_timeout(db, "neverdeclared") == 9.0, "a type's own timeout is kept"
    out = cli("jobs", "add", "other", "j", "[1, 2]", "--store", url)
    assert out.returncode == 2 and "JSON object" in out.stderr and jobs.get_type_timeout(db, "other") is None


@pytest.mark.slow
def test_schedules_are_listed_from_the_store_and_removed(store):
    url, db = store
    assert cli("jobs", "schedules", "--store", url).stdout == ""
    jobs.set_type_timeout(db, "report", 30)
    jobs.schedule(db, "report", "*/5 * * * *", {"kind": "daily"})
    before = time.time()
    out = cli("jobs", "schedules", "--store", url)
    assert out.returncode == 0, out.stderr
    [line] = [json.loads(x) for x in out.stdout.splitlines()]
    assert line["type"] == "report" and line["cron"] == "*/5 * * * *" and line["data"] == {"kind": "daily"}
    assert before - 5 <= line["last_tick"] <= time.time(), "a new schedule's ticks so far count as done"
    assert line["next_tick"] % 300 == 0 and 0 < line["next_tick"] - before <= 300
    assert line["next_tick_utc"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(line["next_tick"]))
    out = cli("jobs", "unschedule", "report", "--store", url)
    assert out.returncode == 0 and "unscheduled report" in out.stdout, out.stderr
    assert cli("jobs", "schedules", "--store", url).stdout == "" and jobs.schedules(db) == []
    again = cli("jobs", "unschedule", "report", "--store", url)
    assert again.returncode == 1 and "has no periodic schedule" in again.stderr
    assert jobs.get_type_timeout(db, "report") == 30, "the type stays"


@pytest.mark.parametrize(
    "args, says",
    [
        (["worker", "x=handlers:f", "--grace", "-1"], "argument --grace: must be a finite number of seconds >= 0"),
        (["worker", "x=handlers:f", "--grace", "nan"], "argument --grace: must be a finite number of seconds >= 0"),
        (["worker", "x=handlers:f", "--timeout", "-3"], "argument --timeout: must be a number of seconds > 0"),
        (["worker", "x=handlers:f", "--timeout", "0"], "argument --timeout: must be a number of seconds > 0"),
        (["jobs", "add", "t", "j", "--delay", "-1"], "argument --delay: must be a finite number of seconds >= 0"),
        (["jobs", "add", "t", "j", "--scheduled-time", "-5"], "argument --scheduled-time: must be whole seconds"),
        (["jobs", "result", "t", "j", "--timeout", "-1"], "argument --timeout: must be a finite number of seconds"),
        (["types", "set-timeout", "t", "-5"], "argument seconds: must be a number of seconds > 0"),
        (["types", "set-timeout", "t", "inf"], "argument seconds: must be a number of seconds > 0"),
    ],
)
def test_durations_refuse_negatives_before_anything_is_opened(tmp_path, args, says):
    (tmp_path / "handlers.py").write_text("def f(ctx):\n    return 1\n")
    out = cli(*args, cwd=tmp_path, timeout=30)
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["handlers.py"], "no store file was created"


@pytest.fixture
def busy_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


REFUSED = {
    "worker with a missing handler": (["worker", "x=no_such_module:f"], "no module named 'no_such_module'"),
    "worker with a handler that is not there": (["worker", "x=handlers:nope"], "has no attribute 'nope'"),
    "worker with a bad cron": (["worker", "x=handlers:f", "--cron", "x=not a cron"], "not a cron schedule"),
    "worker with a bad [periodic] cron": (["worker", "--config", "periodic.ini"], "not a cron schedule"),
    "worker with concurrency 0": (["worker", "x=handlers:f", "-c", "0"], "concurrency must be from 1"),
    "node with a bad config": (["node", "start", "--config", "bad.ini"], "[node] http_port = 'abc'"),
    "node on a busy HTTP port": (["node", "start", "--http-port", "{busy}"], "is not available"),
    "node with a missing handler": (
        ["node", "start", "--workers", "x=no_such_module:f"],
        "no module named 'no_such_module'",
    ),
    "worker on the documents' reserved type": (["worker", "_replicator_docs=handlers:f"], "is reserved"),
    "node with a bad [periodic] cron": (
        ["node", "start", "--config", "periodic.ini", "--workers", "x=handlers:f"],
        "not a cron schedule",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_command_creates_no_store_files(tmp_path, busy_port, case):
    from tests.procs import free_port

    args, says = REFUSED[case]
    (tmp_path / "handlers.py").write_text("def f(ctx):\n    return 1\n")
    (tmp_path / "bad.ini").write_text("[node]\nhttp_port = abc\n")
    (tmp_path / "periodic.ini").write_text("[workers]\nx = handlers:f\n[periodic]\nx = bad cron\n")
    files = sorted(p.name for p in tmp_path.iterdir())
    args = [a.format(busy=busy_port) for a in args]
    if args[0] == "node":
        args += ["--port", str(free_port())]
    out = cli(*args, cwd=tmp_path, timeout=60)
    status = 1 if case == "node on a busy HTTP port" else 2  # a failure, not bad input
    assert out.returncode == status and says in out.stderr, (out.returncode, out.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == files, "no otpjobs.db, .db-lock or .db-notify"


def _verbs() -> list:
    """``group cmd`` of every command of the parser (``worker`` has none)."""
    from actors.cli_parser import build_parser

    groups = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    verbs = []
    for group, sub in groups.choices.items():
        cmds = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        verbs += [f"{group} {cmd}" for cmd in cmds[0].choices] if cmds else [group]
    return verbs


def test_help_lists_every_group():
    out = cli("--help")
    assert out.returncode == 0
    for group in ("node", "worker", "workers", "jobs", "types", "docs"):
        assert group in out.stdout.split("positional arguments:")[0], group
    assert "jobs schedules" in _verbs() and "jobs unschedule" in _verbs() and "workers list" in _verbs()


def test_the_readme_cli_block_lists_every_verb():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Running a node", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    listed = {" ".join(line.split()[1:3]) for line in block.splitlines() if line.startswith("otpjobs ")}
    listed |= {line.split()[1] for line in block.splitlines() if line.startswith("otpjobs ")}
    missing = [verb for verb in _verbs() if verb not in listed]
    assert not missing, f"the README's CLI block lacks {missing}"


def test_the_readme_says_how_to_run_the_command_and_what_files_the_store_makes():
    readme = (ROOT / "README.md").read_text()
    assert ". .venv/bin/activate" in readme and "prefix" in readme
    assert "*.db-lock" in readme and "*.db-notify" in readme and ".gitignore" in readme
    assert "*.db-lock" in (ROOT / ".gitignore").read_text() and "*.db-notify" in (ROOT / ".gitignore").read_text()


def test_job_data_from_a_file_that_cannot_be_read_is_a_clear_error(store, tmp_path):
    """Found by a review: ``@DIR`` printed an IsADirectoryError traceback."""
    url, db = store
    jobs.set_type_timeout(db, "mail", 30)
    latin = tmp_path / "latin1.json"
    latin.write_bytes(b'{"name": "\xe9"}')  # not UTF-8
    for spec in (f"@{tmp_path}", f"@{latin}"):
        out = cli("jobs", "add", "mail", "m1", spec, "--store", url)
        assert out.returncode == 2, out
        assert "job data file" in out.stderr and "Traceback" not in out.stderr
    with pytest.raises(jobs.NotFound):
        jobs.get_job_state(db, "mail", "m1")


@pytest.mark.parametrize("port", ["0", "-1", "65536", "99999"])
def test_a_worker_port_out_of_range_is_refused(store, port):
    """Found by a review: --port 99999 started on 99999 mod 65536, -1 and
    65536 ended in tracebacks."""
    url, _ = store
    out = cli("worker", "--store", url, "--port", port, "mail=json:dumps", timeout=30)
    assert out.returncode == 2, out
    assert "--port must be a TCP port" in out.stderr and "Traceback" not in out.stderr


def test_stored_values_with_bytes_and_infinities_print_as_json(store):
    """Found by a review (session 30, left then; reproduced): msgpack keeps
    bytes keys and values, so a work record, a heartbeat or a document
    another writer left with them made ``jobs show``, ``jobs list``,
    ``workers list`` and ``docs get`` print a traceback; an ``inf`` came out
    as ``Infinity``, which is not JSON. They print the nearest JSON, as the
    HTTP views do."""
    import msgpack

    from fdblayer.docs import model as docs_model
    from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
    from fdblayer.jobs.keys import HOSTS, pack_element

    url, db = store
    jobs.set_type_timeout(db, "odd", 30)
    job_id = jobs.enqueue(db, "odd", {"x": 1})
    record = {"a": 1, "o": "succeeded", "p": {b"k": b"\xff", "ok": 1}, "e": {b"type": b"X"}, "f": 1.0}
    db.set(L.work_key("odd", job_id), msgpack.packb(record, use_bin_type=True))
    beat = {"b": time.time(), "i": {"host": "h1", b"odd": b"\xfe", "load": float("inf")}}
    db.set(L.subspace(HOSTS) + pack_element("h1"), msgpack.packb(beat, use_bin_type=True))
    doc = {"rev": "1-a", "body": {b"k": b"\xff", "n": float("inf")}, "state": "pending", "error_count": 0}
    db.set(docs_model._key("_replicator", "d1"), msgpack.packb(doc, use_bin_type=True))
    for args in (
        ("jobs", "show", "odd", job_id),
        ("jobs", "list", "odd"),
        ("workers", "list"),
        ("docs", "get", "d1"),
        ("docs", "list"),
    ):
        out = cli(*args, "--store", url)
        assert out.returncode == 0, (args, out.stderr[-400:])
        assert "Traceback" not in out.stderr, args
        text = out.stdout
        lines = [text] if args[1] == "show" else text.splitlines()
        for line in lines:
            json.loads(line, parse_constant=lambda c: pytest.fail(f"{args}: {c} is not JSON"))
    shown = json.loads(cli("jobs", "show", "odd", job_id, "--store", url).stdout)
    assert shown["progress"] == {"k": "\\xff", "ok": 1}
    [host] = [json.loads(x) for x in cli("workers", "list", "--store", url).stdout.splitlines()]
    assert host["odd"] == "\\xfe" and host["load"] is None
