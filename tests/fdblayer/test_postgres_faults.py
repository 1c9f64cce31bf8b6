"""The PostgreSQL server going away under a store handle (real server,
stopped ``immediate`` as a crash would, then started again)."""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg
import pytest

import fdblayer
from fdblayer.exceptions import RetryLimitExceeded, ServerGone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def server(durable_pg_server):
    """A durable server of this test's own (see ``tests/conftest.py``)."""
    return durable_pg_server


def test_calls_fail_fast_while_the_server_is_down_and_the_handle_recovers(server):
    db = fdblayer.open(server.url(prefix="f"))
    try:
        for i in range(50):
            db.set(b"k%02d" % i, b"v%d" % i)
        server.kill("immediate")
        started = time.monotonic()
        with pytest.raises(ServerGone):
            db.create_transaction().get(b"k00")
        with pytest.raises(RetryLimitExceeded) as caught:
            fdblayer.transactional(timeout=1.0)(lambda tr: tr.set(b"x", b"y"))(db)
        assert isinstance(caught.value.last_error, ServerGone)
        assert time.monotonic() - started < 8
        server.launch()
        assert [kv.value for kv in db.get_range(b"k", b"l")] == [b"v%d" % i for i in range(50)], (
            "every commit before the crash is there, read through the same handle"
        )
        db.set(b"x", b"after")
        assert db.get(b"x") == b"after"
    finally:
        db.close()


def test_a_watch_armed_before_a_restart_fires_for_a_change_after_it(server):
    url = server.url(prefix="w")
    db = fdblayer.open(url)
    try:
        db.set(b"watched", b"0")
        tr = db.create_transaction()
        tr.get(b"watched")
        watch = tr.watch(b"watched")
        tr.commit()
        server.kill("immediate")
        time.sleep(0.5)
        server.launch()
        assert not watch.is_ready(), "a restart alone is no change"
        subprocess.run(
            [sys.executable, "-c", f"import fdblayer; fdblayer.open({url!r}).set(b'watched', b'1')"],
            check=True,
            timeout=60,
        )
        assert watch.wait(10), "the listener reconnected and the change was seen"
    finally:
        db.close()


def test_a_commit_in_another_process_wakes_a_watch_here(server):
    url = server.url(prefix="x")
    db = fdblayer.open(url)
    try:
        tr = db.create_transaction()
        watch = tr.watch(b"k")
        tr.commit()
        time.sleep(0.2)
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", f"import fdblayer; fdblayer.open({url!r}).set(b'k', b'1')"], check=True, timeout=60
        )
        assert watch.wait(5)
        assert time.monotonic() - started < 5
    finally:
        db.close()


def test_a_watch_fires_when_its_listener_and_reader_lose_their_backends_as_the_key_changes(server):
    """The backends of a handle's listener and of its watch reader are
    terminated, and the watched key changes before the listener has
    reconnected: its notification is missed, the read after the reconnection
    finds its connection dead. The hub must read again (on a new connection)
    rather than wait for a next commit that may never come."""
    url = server.url(prefix="r")
    db, other = fdblayer.open(url), fdblayer.open(url)
    admin = psycopg.connect(server.conninfo(), autocommit=True)
    try:
        db.set(b"watched", b"0")
        other.set(b"unrelated", b"0")  # its connection is made
        tr = db.create_transaction()
        tr.get(b"watched")
        watch = tr.watch(b"watched")
        tr.commit()
        time.sleep(0.3)  # the hub's first read of the watched key is done
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND (query LIKE 'LISTEN%%' OR query LIKE '%%UNION ALL SELECT k, v, NULL%%')"
        ).fetchall()
        other.set(b"watched", b"1")
        assert len(killed) >= 2, "the listener's backend and the reader's"
        assert watch.wait(5), "the change was seen once the hub read again"
    finally:
        admin.close()
        db.close()
        other.close()
