"""The worst values, written straight into the store, must not put a node
into a crash loop: every actor that reads a stored value survives a bad
one (logs it, bounds it or skips it) and the rest of the node keeps serving.

The values go in below the public API (which refuses them), as an older
version, another client or a damaged file could leave them. A real node is
started from the command line on that store, with a worker pool.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import fdb.tuple
import pytest

import fdblayer
from actors import jobs
from fdblayer import docs
from fdblayer.jobs import activity, schedules
from fdblayer.jobs import hosts as beats
from fdblayer.jobs.exceptions import CorruptValue, InvalidArgument
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
from tests.procs import free_port, group_pids, wait_until

ROOT = Path(__file__).resolve().parents[2]

HANDLERS = "def echo(ctx):\n    return ctx.data\n"

#: Type timeouts no reader can use as they are.
BAD_TIMEOUTS = {
    "t_huge": fdb.tuple.pack((1e12,)),
    "t_inf": fdb.tuple.pack((math.inf,)),
    "t_nan": fdb.tuple.pack((math.nan,)),
    "t_neg": fdb.tuple.pack((-5.0,)),
    "t_zero": fdb.tuple.pack((0,)),
    "t_bigint": fdb.tuple.pack((10**30,)),
    "t_str": fdb.tuple.pack(("soon",)),
    "t_two": fdb.tuple.pack((1, 2)),
    "t_garbage": b"\xff\x00junk",
    "t_empty": b"",
}
GARBAGE = [b"", b"\xff", b"\x00\x01\x02", b"\xc1" * 40, os.urandom(64)]


def poison(db) -> None:
    """Write the worst values into every family of keys the node reads."""
    tr = db.create_transaction()
    for job_type, raw in BAD_TIMEOUTS.items():
        tr.set(L.activity_timeout_key(job_type), raw)
    tr.commit()
    jobs.set_type_timeout(db, "good", 30)
    jobs.set_type_timeout(db, "echo", 30)
    tr = db.create_transaction()
    for n, raw in enumerate(GARBAGE):
        job_id = f"bad{n}"
        for job_type in ("good", "echo", "t_huge", "t_garbage"):
            tr.set(L.data_key(job_type, job_id), raw)
            tr.set(L.pending_key(job_type, 0, job_id), b"")
            tr.set(L.work_key(job_type, job_id), raw)
            tr.set(L.activity_prefix(job_type) + raw, raw)  # an activity entry that is not a versionstamp
            tr.set(L.pending_prefix(job_type) + raw, raw)  # a pending key that does not unpack
            tr.set(L.data_prefix(job_type) + raw, raw)
        tr.set(L.schedule_key("echo"), raw)
        tr.set(L.watches_pending_key("echo"), raw)
        tr.set(L.watches_activity_key("echo"), raw)
        tr.set(L.count_key("good", f"bad{n}"), raw)  # a counter no reader knows
        tr.set(docs.model._key(docs.REPLICATOR_DB, job_id), raw)  # noqa: SLF001 - below the API on purpose
    for name, raw in (("fresh", b"\xff" * 3), ("jobs", b"\x00" * 7), ("pending", b"\xff" * 8), ("counted", b"1")):
        tr.set(L.count_key("echo", name), raw)  # counters cut short or below zero
    tr.set(L.count_key("good", "fresh"), b"\xff" * 7 + b"\x7f")  # the largest count there is
    tr.commit()
    schedules.set_schedule(db, L, "good", "not a cron expression", b"", int(time.time()))


@pytest.fixture
def node(tmp_path):
    store = f"sqlite:///{tmp_path / 'store.db'}"
    db = fdblayer.open(store)
    poison(db)
    (tmp_path / "handlers_mod.py").write_text(HANDLERS)
    http_port = free_port()
    (tmp_path / "node.ini").write_text(
        f"[node]\nport = {free_port()}\nhttp_port = {http_port}\nstore = {store}\n"
        "[workers]\necho = handlers_mod:echo\ngood = handlers_mod:echo\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors", "node", "start", "--config", str(tmp_path / "node.ini")],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=open(tmp_path / "node.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        yield db, proc, http_port, tmp_path / "node.log"
    finally:
        pids = group_pids(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        for pid in pids | group_pids(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(10)
        db.close()


def _up(port: int, path: str = "/_up") -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


def test_the_public_api_refuses_a_timeout_no_reader_could_use(tmp_path):
    db = fdblayer.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        for bad in (1e12, math.inf, 10**30, 2e8):
            with pytest.raises(InvalidArgument, match="at most"):
                jobs.set_type_timeout(db, "t", bad)
        assert activity.get_type_timeout(db, L, "t") is None, "nothing was written"
        jobs.set_type_timeout(db, "t", 1e8)
        assert activity.get_type_timeout(db, L, "t") == 1e8
    finally:
        db.close()


def skipped_as_logged() -> list[str]:
    """The log lines that show the node read each family of poisoned values
    and skipped it (as the readers log them; each once per process)."""
    served = ("echo", "good")
    return (
        [f"job_type_started type={job_type!r}" for job_type in BAD_TIMEOUTS]  # a type actor, bad timeout or not
        + [
            f"job_not_pending job='bad{n}' type={job_type!r} state=missing_or_unreadable"
            for job_type in served
            for n in range(len(GARBAGE))
        ]  # the pool skipped each bad pending job
        + [f"document 'bad{n}' in '_replicator' is unreadable" for n in range(len(GARBAGE))]
        + ["schedule_unreadable type='echo'"]
    )


@pytest.mark.slow
def test_the_worst_stored_values_do_not_stop_a_node(node):
    db, proc, http_port, log = node
    wait_until(lambda: _up(http_port) or proc.poll() is not None, 60, "the node's HTTP API")
    assert proc.poll() is None, log.read_text()[-3000:]
    # A good job of each served type runs past the bad rows in its queue (and "good"'s bad schedule).
    for job_type in ("echo", "good"):
        job_id = jobs.enqueue(db, job_type, {"n": job_type})
        assert jobs.result(db, job_type, job_id, timeout=30) == {"n": job_type}, job_type
    with pytest.raises(CorruptValue):
        jobs.status(db, "echo", "bad1")  # asked for by name: a clear error, not a crash
    for path in ("/_up", "/_scheduler/docs", "/_scheduler/jobs", "/_jobs", "/_jobs/echo", "/_node/_local/_prometheus"):
        assert _up(http_port, path), path
    # Every bad value the node read was logged and skipped (by other processes: polled).
    wait_until(
        lambda: all(line in log.read_text() for line in skipped_as_logged()),
        30,
        "every family of bad values logged as skipped",
    )
    text = log.read_text()
    assert text.count("stored_value_skipped what=type_timeout") >= len(BAD_TIMEOUTS), text[-3000:]
    assert text.count("stored_value_skipped what=job ") >= 2 * len(GARBAGE), text[-3000:]
    # No restart loop builds up: the pool's periodic work goes on past the reads
    # (a heartbeat newer than them, BEAT apart), the node still answers, and
    # nothing of it crashed, exited or went down.
    read_at = time.time()
    wait_until(
        lambda: any(h["last_beat"] > read_at for h in beats.list_hosts(db, L, time.time())),
        3 * beats.BEAT + 30,
        "a heartbeat of the node's pool after the bad values were read",
    )
    assert proc.poll() is None, log.read_text()[-3000:]
    assert _up(http_port), "the node still answers"
    text = log.read_text()
    assert " crash " not in text and "child_exited" not in text and "node_down" not in text, text[-3000:]
