"""A writer stopped while it holds the SQLite write lock (SIGSTOP inside a
transaction: a debugger, a swapped-out process) must not hold up anyone who
only opens or reads the store, and a writer that gives up must say who holds
the lock. Real processes: the stalled writer is a child stopped for real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fdblayer
from fdblayer.exceptions import LockTimeout
from fdblayer.backends.sqlite_backend import SqliteDatabase

ROOT = Path(__file__).resolve().parents[2]

STALLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {root!r})
import fdblayer
db = fdblayer.open({url!r})
tr = db.create_transaction()
tr.set(b"stalled", b"1")
tr.get(b"stalled")
tr.set(b"stalled2", b"1")
tr._flush()  # the write lock is taken by now
print("holding", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
tr.commit()
"""


@pytest.fixture
def stalled(tmp_path):
    """A store set up with one row, and a child process stopped while it holds the write lock."""
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    db = fdblayer.open(url)
    db.set(b"k", b"v")
    db.close()
    child = subprocess.Popen(
        [sys.executable, "-c", STALLED_WRITER.format(root=str(ROOT), url=url)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "holding"
        _wait_stopped(child.pid)
        yield url, path, child.pid
    finally:
        child.kill()
        child.wait(10)
        child.stdout.close()


def _put(db, key, value):
    tr = db.create_transaction()
    tr.set(key, value)
    tr.commit()


def _wait_stopped(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"T":
                return
        time.sleep(0.01)
    raise AssertionError("the writer did not stop")


def test_opening_and_reading_do_not_wait_for_a_stalled_writer(stalled):
    url, _, _ = stalled
    started = time.monotonic()
    db = fdblayer.open(url)
    try:
        tr = db.create_transaction()
        assert tr.get(b"k") == b"v"
        assert tr.get(b"stalled") is None, "the stalled writer's rows are not committed"
        tr.cancel()
    finally:
        db.close()
    assert time.monotonic() - started < 2.0, "opening an existing store takes no write lock"


def test_a_new_process_lists_jobs_under_a_stalled_writer(stalled):
    url, _, _ = stalled
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "actors", "jobs", "list", "--store", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < 10.0


def test_a_writer_that_gives_up_names_the_stalled_holder(stalled):
    _, path, pid = stalled
    db = SqliteDatabase(str(path), lock_timeout=0.5)
    try:
        tr = db.create_transaction()
        with pytest.raises(LockTimeout) as info:
            tr.set(b"x", b"y")  # the first write takes the write lock
            tr.commit()
    finally:
        db.close()
    message = str(info.value)
    assert f"held by pid {pid} (stopped)" in message, message
    assert "concurrent commit" not in message


def test_the_store_works_again_once_the_stalled_writer_is_gone(stalled):
    url, path, pid = stalled
    os.kill(pid, signal.SIGKILL)
    db = SqliteDatabase(str(path), lock_timeout=5)
    try:
        _put(db, b"after", b"1")
        tr = db.create_transaction()
        assert tr.get(b"after") == b"1" and tr.get(b"stalled") is None, "the killed writer's rows rolled back"
    finally:
        db.close()
