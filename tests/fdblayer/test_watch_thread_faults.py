"""The watch thread when something goes wrong under it: descriptors past
1,024, a read refused as busy, its loop raising. A waiter must neither be
woken early (a cancelled watch read as a timeout), nor spin, nor miss the
change it waits for. Real store files and real commits; the faults are
injected where no real trigger can be arranged on demand.
"""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import fdblayer
from tests.fdblayer.watching import arm
from fdblayer import jobs

ROOT = Path(__file__).resolve().parents[2]
WAIT = 10.0

#: Run in a child process: it opens 1,100 descriptors first (a server's
#: sockets), so the hub's pipe and inotify descriptors are numbered past 1,024.
_MANY_DESCRIPTORS = textwrap.dedent(
    """
    import os, resource, sys, threading, time
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    import fdblayer
    from fdblayer import jobs
    db = fdblayer.open("sqlite:///" + sys.argv[1] + "/s.db")
    jobs.set_type_timeout(db, "t", 30)
    started = time.monotonic()
    try:
        jobs.accept(db, "t", timeout=0.5)
        print("accepted from an empty queue")
    except jobs.NotFound:
        print("waited %.3f" % (time.monotonic() - started))
    assert db.hub()._wake_r >= 1024, db.hub()._wake_r
    got = []
    waiter = threading.Thread(target=lambda: got.append(jobs.accept(db, "t", timeout=5)))
    waiter.start()
    time.sleep(0.2)
    jobs.add(db, "t", "j", {})
    waiter.join()
    print("accepted", got[0][0].id)
    db.close()
    """
)


def test_the_watch_thread_works_with_descriptors_past_1024(tmp_path):
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1200:
        pytest.skip("the hard limit on open files is under 1,200: no descriptor past 1,024 can be opened")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", _MANY_DESCRIPTORS, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("\n")
    waited = float(lines[0].split()[1])
    assert waited >= 0.45, f"accept(timeout=0.5) gave up after {waited:.3f} s"
    assert lines[1] == "accepted j"
    assert "store_watch" not in out.stderr


class _BusyOnce:
    """A connection whose next read of values fails as SQLite's busy does."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn, self.armed = conn, True

    def execute(self, sql: str, *args):
        if self.armed and sql.startswith("SELECT k, v"):
            self.armed = False
            raise sqlite3.OperationalError("database is locked")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self.conn, name)


def test_a_read_refused_as_busy_is_tried_again(tmp_path):
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db")
    try:
        jobs.set_type_timeout(db, "t", 30)
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(jobs.accept(db, "t", timeout=WAIT)))
        waiter.start()
        hub = db.hub()
        reader = hub._read_values.__self__
        deadline = time.monotonic() + WAIT
        while reader._version is None and time.monotonic() < deadline:  # the registration's own read is done
            time.sleep(0.005)
        reader._conn = _BusyOnce(reader._conn)
        added = time.monotonic()
        jobs.add(db, "t", "j", {})
        waiter.join(WAIT + 1)
        assert got and got[0][0].id == "j"
        assert time.monotonic() - added < 2.0  # a backoff late at most, not the accept's timeout
        assert not reader._conn.armed  # the busy read did happen
    finally:
        db.close()


def test_a_loop_that_raises_keeps_its_watches_and_serves_them(tmp_path):
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db")
    try:
        watch = arm(db, b"\x01k")
        hub = db.hub()
        wait = hub._wait
        turns = []

        def failing_once(notifier, recheck_at):
            turns.append(time.monotonic())
            if len(turns) == 1:
                raise RuntimeError("a bug in the loop")
            return wait(notifier, recheck_at)

        hub._wait = failing_once  # called at the top of every turn of the loop
        hub.wake()
        deadline = time.monotonic() + WAIT
        while len(turns) < 2 and time.monotonic() < deadline:  # failed, then turning again
            time.sleep(0.005)
        assert len(turns) >= 2
        assert not watch.is_ready()  # neither cancelled nor fired
        db.set(b"\x01k", b"changed")
        assert watch.wait(WAIT)
        assert not watch.cancelled()
    finally:
        db.close()
