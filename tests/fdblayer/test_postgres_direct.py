"""The PostgreSQL store's statements sent through libpq directly
(``postgres_direct``). What a caller relies on: the rows are what psycopg's
``fetchall`` gives; a failed statement raises psycopg's exception with the
number of statements that ran before it; a statement whose ``Parse`` never
ran is prepared again; other threads run while one waits on the server;
a parameter of a kind the store never sends is refused before anything is
sent."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

import fdblayer
from fdblayer.backends import postgres_direct as direct
from fdblayer.backends.postgres_arrays import ByteaArray, Int4Array


@pytest.fixture
def conn(pg_url):
    """A store connection (its schema made), outside any transaction."""
    db = fdblayer.open(pg_url)
    tr = db.create_transaction()
    tr.get(b"any")  # checks a connection out
    connection = tr._conn
    connection.execute("ROLLBACK")
    try:
        yield connection
    finally:
        tr.cancel()
        db.close()


def test_rows_are_those_psycopg_reads(conn):
    sql = "SELECT %s::bytea, %s::bigint, %s::text, cardinality(%b::bytea[]), %b::int[], NULL::bytea, 7::int"
    params = (b"\x00k", -(2**40), "naïve", ByteaArray([b"a", None, b""]), Int4Array([1, -2]))
    expected = conn.execute(sql, params, binary=True).fetchall()
    assert direct.run(conn, sql, params) == expected == [(b"\x00k", -(2**40), "naïve", 3, [1, -2], None, 7)]
    assert direct.run(conn, sql, (None, None, None, None, None)) == [(None, None, None, None, None, None, 7)]


def test_a_failed_statement_says_how_many_ran_before_it(conn):
    with pytest.raises(psycopg.errors.DivisionByZero) as caught:
        direct.run(conn, "SELECT (1 / %s::int)::text::bytea", (0,), before=("BEGIN",), after=("COMMIT",))
    assert caught.value.succeeded == 1  # the BEGIN
    # The BEGIN's block stays open, failed: whoever sent it rolls it back.
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK")
    with pytest.raises(psycopg.errors.UndefinedTable) as caught:
        direct.run(conn, "SELECT %s::bytea", (b"x",), before=("BEGIN",), after=("SELECT * FROM no_such_table",))
    assert caught.value.succeeded == 2  # the BEGIN and the statement
    # The BEGIN's block stays open, failed: whoever sent it rolls it back.
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK")
    assert direct.run(conn, "SELECT %s::bytea", (b"after",)) == [(b"after",)]


def test_a_first_read_that_fails_leaves_its_connection_usable(pg_server, pg_url):
    """A transaction's first read opens its snapshot (``BEGIN``) in the same
    round trip; when the read fails, the block is rolled back before the
    connection goes back to the pool, so the next transaction on it works."""
    prefix = pg_url.rsplit("prefix=", 1)[1]
    read = fdblayer.transactional(lambda tr: tr.get(b"k"))
    fdblayer.transactional(lambda tr: tr.set(b"k", b"v"))(fdblayer.open(pg_url))
    fresh = fdblayer.open(pg_url)  # its statements are prepared at their first use: after the rename
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as admin:
        admin.execute(f'ALTER TABLE "{prefix}_kv" RENAME TO "{prefix}_away"')
        try:
            with pytest.raises(fdblayer.StoreError):
                read(fresh)
        finally:
            admin.execute(f'ALTER TABLE "{prefix}_away" RENAME TO "{prefix}_kv"')
    try:
        assert read(fresh) == b"v"
    finally:
        fresh.close()


def test_a_statement_whose_prepare_never_ran_is_prepared_again(conn):
    """A pipeline that fails before the statement's ``Parse`` leaves it
    unprepared on the server: it must not be taken as prepared."""
    sql = "SELECT %s::bytea || 'tail'::bytea"
    with pytest.raises(psycopg.errors.UndefinedTable):
        direct.run(conn, sql, (b"x",), before=("SELECT * FROM no_such_table",))
    for _ in range(3):
        assert direct.run(conn, sql, (b"x",)) == [(b"xtail",)]


def test_other_threads_run_while_one_waits_on_the_server(conn):
    counted = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            counted[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        started = time.monotonic()
        direct.run(conn, "SELECT pg_sleep(%s::float8)::text::bytea", ("0.3",))
        waited = time.monotonic() - started
        before = counted[0]
        time.sleep(0.05)  # the spinner's pace with the GIL free, for scale
        pace = (counted[0] - before) / 0.05
    finally:
        stop.set()
        thread.join()
    assert waited >= 0.3
    # Holding the GIL through the wait let the spinner count about 2% of this (measured).
    assert before > 0.3 * pace * 0.3, (before, pace)


def test_a_parameter_of_another_kind_is_refused_before_anything_is_sent(conn):
    with pytest.raises(TypeError, match="float"):
        direct.run(conn, "SELECT %s::bytea", (1.5,))
    with pytest.raises(TypeError, match="list"):
        direct.run(conn, "SELECT %s::bytea", ([b"a"],))
    assert direct.run(conn, "SELECT %s::bytea", (b"ok",)) == [(b"ok",)]


def test_a_lone_reads_second_read_checks_what_its_first_read(pg_url):
    """A lone transaction (the handle's own ``get``/``get_range``) reads
    its first statement outside a snapshot; its second read fails only if
    a key the first read was written in between (``changed_since``)."""
    db, other = fdblayer.open(pg_url), fdblayer.open(pg_url)
    try:
        fdblayer.transactional(lambda tr: [tr.set(b"a%d" % i, b"x") for i in range(3)])(db)
        for touched, conflicts in ((b"elsewhere", False), (b"a1", True)):
            tr = db._transaction_class(db, lone=True)
            assert tr.get(b"a1") == b"x"
            fdblayer.transactional(lambda t, key=touched: t.set(key, b"y"))(other)
            if conflicts:
                with pytest.raises(fdblayer.ConflictError):
                    tr.get(b"a2")
            else:
                assert tr.get(b"a2") == b"x"
            tr.cancel()
    finally:
        db.close()
        other.close()
