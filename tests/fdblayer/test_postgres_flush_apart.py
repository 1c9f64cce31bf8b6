"""``flush=apart`` on PostgreSQL: a commit's transaction ends without
waiting for its WAL flush (its locks released at once) and the same round
trip then waits for the flush. What a caller relies on: a commit it was
told of survives a server crash; a flush that fails after the commit is
``CommitUnknownResult`` (the commit is there, but not known durable); a
user who may not flush that way is told at open. The contract and jobs
model suites run on this mode too (``postgres-apart`` in ``conftest.py``).
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

import fdblayer
from fdblayer.backends.postgres_backend import PostgresDatabase
from fdblayer.backends.postgres_server import TemporaryServer
from fdblayer.exceptions import CommitUnknownResult, ConflictError, InvalidStoreURL, StoreError, StoreUnavailable


def test_the_flush_parameter_is_ours_and_checked():
    parsed = fdblayer.parse_store_url("postgresql://u@h:5/db?flush=apart&sslmode=disable")
    assert parsed.params == {"prefix": "otpjobs", "flush": "apart"}
    assert "flush" not in parsed.path and "sslmode=disable" in parsed.path
    assert fdblayer.parse_store_url("postgresql://u@h/db").params["flush"] == "commit"
    for bad in ("flush=later", "flush=apart&flush=commit", "flush="):
        with pytest.raises(InvalidStoreURL) as caught:
            fdblayer.parse_store_url(f"postgresql://u@h/db?{bad}")
        assert "flush" in str(caught.value)
    with pytest.raises(InvalidStoreURL) as caught:
        PostgresDatabase("postgresql://u@127.0.0.1:1/db", flush="aprt")  # refused before any connection
    assert "aprt" in str(caught.value)


@pytest.fixture
def server(durable_pg_server):
    """A durable server of this test's own (see ``tests/conftest.py``)."""
    return durable_pg_server


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_commit_answered_survives_a_server_crash(server):
    """Four threads commit as fast as they can; the server is killed as a
    crash would (no shutdown, WAL buffers lost); every commit a thread was
    answered for is there after the restart."""
    url = server.url(prefix="crash") + "&flush=apart"
    db = fdblayer.open(url)
    answered: list[list[int]] = [[] for _ in range(4)]
    stop = threading.Event()

    def writer(index: int) -> None:
        n = 0
        while not stop.is_set():
            tr = db.create_transaction()
            tr.set(b"w/%d/%06d" % (index, n), b"x" * 100)
            tr.add(b"count/%d" % index, (1).to_bytes(8, "little"))
            try:
                tr.commit()
            except StoreError:
                return  # the server is gone: this commit's outcome is unknown
            answered[index].append(n)
            n += 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not all(len(a) > 20 for a in answered) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # then kill it while every thread commits
    seen = _version(server, "crash")
    server.kill("immediate")
    stop.set()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive(), "a committer hung on the dead server"
    db.close()
    assert all(len(a) > 20 for a in answered), [len(a) for a in answered]
    server.launch()
    db = fdblayer.open(url)
    try:
        db.set(b"after", b"1")
        assert _version(server, "crash") > seen, "no version seen before the crash is issued again"
        for index, numbers in enumerate(answered):
            stored = {kv.key for kv in db.get_range(b"w/%d/" % index, b"w/%d0" % index)}
            lost = [n for n in numbers if b"w/%d/%06d" % (index, n) not in stored]
            assert not lost, f"writer {index}: {len(lost)} answered commits lost, first {lost[:5]}"
            count = int.from_bytes(db.get(b"count/%d" % index) or b"", "little")
            assert count >= len(numbers), "the counter's adds answered are all there"
    finally:
        db.close()


def _version(server: TemporaryServer, prefix: str) -> int:
    """The store's last commit version, as other clients see it now."""
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        row = conn.execute(f"SELECT value FROM \"{prefix}_meta\" WHERE name = 'commit_version'").fetchone()
    return int(row[0])


def test_versions_start_at_the_servers_start_time(pg_server, pg_url):
    """The first commit of a server's life numbers from its start in
    microseconds: a version a crash took back (shown to readers with
    ``flush=apart``) is never issued again in the next life."""
    db = fdblayer.open(pg_url)
    try:
        db.set(b"k", b"v")
        prefix = fdblayer.parse_store_url(pg_url).params["prefix"]
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
            (start,) = conn.execute(
                "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint"
            ).fetchone()
        version = _version(pg_server, prefix)
        assert start <= version < start + 1000, (start, version)
    finally:
        db.close()


def _revoke_emit(conn: psycopg.Connection) -> None:
    """Take ``EXECUTE`` on every form of ``pg_logical_emit_message`` from every role."""
    forms = conn.execute("SELECT oid::regprocedure::text FROM pg_proc WHERE proname = 'pg_logical_emit_message'")
    for (form,) in forms.fetchall():
        conn.execute(f"REVOKE EXECUTE ON FUNCTION {form} FROM PUBLIC")


def _user(server: TemporaryServer, name: str) -> str:
    """A store URL of a new login role that owns nothing special (no superuser)."""
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {name}")
    return f"postgresql://{name}@127.0.0.1:{server.port}/postgres?prefix={name}&flush=apart"


@pytest.mark.slow
def test_a_user_who_may_not_flush_apart_is_told_at_open(server):
    url = _user(server, "plain")
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        _revoke_emit(conn)
    with pytest.raises(StoreUnavailable) as caught:
        fdblayer.open(url)
    assert "flush=apart" in str(caught.value) and "pg_logical_emit_message" in str(caught.value)
    fdblayer.open(url.replace("&flush=apart", "")).close()  # the default flush needs nothing more


@pytest.mark.slow
def test_a_flush_that_fails_after_the_commit_is_an_unknown_result_and_the_commit_is_there(server):
    url = _user(server, "revoked")
    db = fdblayer.open(url)
    try:
        db.set(b"before", b"1")
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            _revoke_emit(conn)
        tr = db.create_transaction()
        tr.set(b"after", b"2")
        with pytest.raises(CommitUnknownResult) as caught:
            tr.commit()
        assert "not known to be durable" in str(caught.value)
        assert db.get(b"after") == b"2", "the commit itself went through"
    finally:
        db.close()


def test_conflicts_in_a_row_leave_the_connection_usable(pg_server):
    """A commit that conflicts aborts its pipeline before the ``COMMIT`` and
    the flush run; psycopg counts them sent all the same, and the fifth time
    would have prepared them (a ``Parse`` the server never ran), leaving
    every later commit on the connection failing with "prepared statement
    does not exist" (found by ``test_jobs_processes`` on ``postgres-apart``).
    Ten conflicts in a row on one connection, then commits that succeed."""
    url = pg_server.url(prefix="conflicts") + "&flush=apart"
    db, other = fdblayer.open(url), fdblayer.open(url)
    try:
        db.set(b"k", b"0")
        for n in range(10):
            tr = db.create_transaction()
            assert tr.get(b"k") == b"%d" % n
            other.set(b"k", b"%d" % (n + 1))  # after the read: the commit below conflicts
            tr.set(b"out", b"x")
            with pytest.raises(ConflictError):
                tr.commit()
        for n in range(10):
            db.set(b"after/%d" % n, b"y")
        assert db.get(b"after/9") == b"y" and db.get(b"out") is None
    finally:
        db.close()
        other.close()
