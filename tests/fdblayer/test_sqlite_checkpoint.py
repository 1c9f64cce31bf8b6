"""The SQLite store checkpoints its WAL on a thread, not on the committing call.

Real store files; the threshold is lowered so that a few commits trip it.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time

import pytest

import fdblayer
from fdblayer.backends import sqlite_backend

WAIT = 10.0


def _checkpoint_threads(path: str) -> list:
    name = f"checkpoint {os.path.basename(path)}"
    return [t for t in threading.enumerate() if t.name == name]


def _write_rows(db, count: int, prefix: bytes = b"row") -> None:
    for i in range(count):
        db.set(prefix + b"%05d" % i, b"x" * 200)


def _until(predicate, timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def low_threshold(monkeypatch):
    monkeypatch.setattr(sqlite_backend, "CHECKPOINT_ROWS", 20)


@pytest.mark.parametrize("synchronous, backstop", [("NORMAL", 8000), ("FULL", 1000)])
def test_connections_leave_checkpoints_to_the_thread_up_to_the_backstop(tmp_path, synchronous, backstop):
    """At NORMAL commits would only checkpoint far above SQLite's default; at
    FULL at its default, which bounds a new WAL's growth (its fsyncs cost more)."""
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db?synchronous={synchronous}")
    try:
        conn = db.checkout()
        (pages,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone()
        db.checkin(conn, sqlite_backend.ForkEpoch.value)
        assert pages == sqlite_backend.BACKSTOP_CHECKPOINT_PAGES[synchronous] == backstop
    finally:
        db.close()


def test_the_thread_copies_the_wal_into_the_database_file(tmp_path, low_threshold):
    """Past the threshold, the WAL's pages reach the main file with no one asking."""
    path = f"{tmp_path}/s.db"
    db = fdblayer.open(f"sqlite:///{path}")
    try:
        _write_rows(db, 5)
        size_before = os.path.getsize(path)
        _write_rows(db, 60, b"more")  # 65 rows: past the threshold of 20, three times
        assert _until(lambda: os.path.getsize(path) > size_before)
        check = sqlite3.connect(path)
        try:
            (count,) = check.execute("SELECT count(*) FROM kv").fetchone()
        finally:
            check.close()
        assert count == 65
    finally:
        db.close()


def test_close_stops_the_thread(tmp_path, low_threshold):
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db")
    _write_rows(db, 30)
    assert len(_checkpoint_threads(db.path)) == 1
    db.close()
    assert _checkpoint_threads(db.path) == []


def test_an_unclosed_store_is_freed_and_its_thread_ends(tmp_path, low_threshold):
    """The thread holds the store weakly: dropping the last reference ends both."""
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db")
    path = db.path
    _write_rows(db, 30)
    assert len(_checkpoint_threads(path)) == 1
    del db
    gc.collect()
    assert _until(lambda: _checkpoint_threads(path) == [])


def test_no_thread_for_a_store_that_only_reads(tmp_path):
    path = f"{tmp_path}/s.db"
    writer = fdblayer.open(f"sqlite:///{path}")
    writer.set(b"k", b"v")
    writer.close()
    reader = fdblayer.open(f"sqlite:///{path}")
    try:
        assert reader.get(b"k") == b"v"
        assert _checkpoint_threads(path) == []
    finally:
        reader.close()


def test_a_failing_checkpoint_is_logged_once_and_loses_nothing(tmp_path, low_threshold, caplog):
    """A checkpoint that cannot run (here: its connection is refused) is a
    warning once per run of failures, not once per attempt, and every
    commit is still there."""
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db")
    try:
        attempts = []

        def connect_refused():
            attempts.append(1)
            raise sqlite_backend.StoreUnavailable("refused for the test")

        _write_rows(db, 1)  # the thread exists; its connection is made at its first run
        original = db.connect
        db.connect = connect_refused
        try:
            for round_ in range(3):  # three wake-ups, each waited for: three failed attempts
                _write_rows(db, 20, b"r%d-" % round_)
                assert _until(lambda: len(attempts) > round_)
        finally:
            db.connect = original
        assert caplog.text.count("store_checkpoint_failed ") == 1
        assert len(db.get_range(b"", b"\xff")) == 61
    finally:
        db.close()


def test_fork_waits_for_a_background_thread_inside_sqlite(tmp_path):
    """A fork while the checkpoint (or watch) thread is inside SQLite waits for
    it to leave: the child never inherits a SQLite mutex held by a thread it
    does not have. The child then uses the store normally."""
    path = f"{tmp_path}/s.db"
    db = fdblayer.open(f"sqlite:///{path}")
    db.set(b"k", b"parent")
    inside, leave = threading.Event(), threading.Event()

    def background_thread_in_sqlite():
        with sqlite_backend._FORK_GUARD:
            inside.set()
            leave.wait(WAIT)

    thread = threading.Thread(target=background_thread_in_sqlite)
    thread.start()
    assert inside.wait(WAIT)
    threading.Timer(0.3, leave.set).start()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: a fresh handle on the same file works
        code = 1
        try:
            child = fdblayer.open(f"sqlite:///{path}")
            child.set(b"k", b"child")
            child.close()
            code = 0
        finally:
            os._exit(code)
    waited = time.monotonic() - started
    _, status = os.waitpid(pid, 0)
    thread.join()
    try:
        assert waited >= 0.25  # fork waited for the thread to leave SQLite
        assert os.waitstatus_to_exitcode(status) == 0
        assert db.get(b"k") == b"child"
    finally:
        db.close()
