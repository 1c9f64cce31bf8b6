"""What only the PostgreSQL backend has: its tables, prefixes, schema
version, long keys in a btree, and what its errors show (real server)."""

from __future__ import annotations

import random
import re

import psycopg
import pytest

import fdblayer
from fdblayer.exceptions import ConflictError, InvalidStoreURL, KeyTooLarge, ServerGone, StoreUnavailable
from fdblayer.backends.postgres_backend import KEY_PREFIX_BYTES, SCHEMA_VERSION


def test_two_prefixes_in_one_database_are_two_stores(pg_server):
    a = fdblayer.open(pg_server.url(prefix="store_a"))
    b = fdblayer.open(pg_server.url(prefix="store_b"))
    try:
        a.set(b"k", b"in a")
        assert b.get(b"k") is None and a.get(b"k") == b"in a"
        b.drop()
        with psycopg.connect(pg_server.conninfo()) as conn:
            assert conn.execute("SELECT to_regclass('store_b_kv')").fetchone()[0] is None
            assert conn.execute("SELECT to_regclass('store_a_kv')").fetchone()[0] is not None
    finally:
        a.drop()
        a.close()
        b.close()


def test_a_store_of_another_schema_version_is_refused_naming_both(pg_server, pg_url):
    fdblayer.open(pg_url).close()
    prefix = fdblayer.parse_store_url(pg_url).params["prefix"]
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
        conn.execute(f"UPDATE \"{prefix}_meta\" SET value = 99 WHERE name = 'schema_version'")
    with pytest.raises(StoreUnavailable) as caught:
        fdblayer.open(pg_url)
    assert "version 99" in str(caught.value) and f"version {SCHEMA_VERSION}" in str(caught.value)


@pytest.mark.parametrize("oldest_reader", [SCHEMA_VERSION, SCHEMA_VERSION + 1])
def test_a_later_store_is_used_only_when_it_says_this_version_may(pg_server, pg_url, oldest_reader):
    """A rolling upgrade (found by a review): a later version's store kept
    older programs working, but each refused it at its next open, so an old
    host whose dispatcher restarted crash-looped until its supervisor gave
    up. A later store that declares it still readable by this version
    (``oldest_reader``) is opened; one that does not is refused as before."""
    db = fdblayer.open(pg_url)
    db.set(b"k", b"before")
    db.close()
    prefix = fdblayer.parse_store_url(pg_url).params["prefix"]
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
        conn.execute(f"UPDATE \"{prefix}_meta\" SET value = {SCHEMA_VERSION + 1} WHERE name = 'schema_version'")
        conn.execute(f"INSERT INTO \"{prefix}_meta\" VALUES ('oldest_reader', {oldest_reader})")
    if oldest_reader > SCHEMA_VERSION:
        with pytest.raises(StoreUnavailable, match=f"version {SCHEMA_VERSION + 1}"):
            fdblayer.open(pg_url)
        return
    db = fdblayer.open(pg_url)
    try:
        assert db.get(b"k") == b"before"
        db.set(b"k", b"after")
        assert db.get(b"k") == b"after"
    finally:
        db.close()
    with psycopg.connect(pg_server.conninfo()) as conn:
        row = conn.execute(f"SELECT value FROM \"{prefix}_meta\" WHERE name = 'schema_version'").fetchone()
    assert row[0] == SCHEMA_VERSION + 1, "the later store is used as it is, never downgraded"


def _set_back(pg_server, prefix: str, version: int) -> None:
    """Make a current store look as a program of ``version`` left it: its
    number, and without version 3's commit function (the one whose
    notification names the keys) and general add."""
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
        conn.execute(f"UPDATE \"{prefix}_meta\" SET value = {version} WHERE name = 'schema_version'")
        conn.execute(f'DROP FUNCTION "{prefix}_add_bytes"(bytea, bytea)')
        conn.execute(
            f'DROP FUNCTION "{prefix}_commit"(bigint, {", ".join(["bytea[]"] * 10)}, int[], '
            "bytea[], bytea[], bytea[], int[], bytea[], bytea[], text)"
        )


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_an_older_store_is_upgraded_when_opened_and_keeps_its_data(pg_server, pg_url, version):
    """A store made by version 1 (its commit function without the checked
    guesses), 2 (without the fast add), 3 (versions counted from 0 again
    after a crash) or 4 (its conflict check comparing every pair of ranges)
    gets this version's functions when this version opens it; its data
    stay, guesses are checked, adds take the fast path, versions start from
    the server's start time from then on, and the conflict check joins."""
    db = fdblayer.open(pg_url)
    db.set(b"kept", b"v")
    db.set(b"n", (2**32 - 1).to_bytes(8, "little"))
    db.close()
    prefix = fdblayer.parse_store_url(pg_url).params["prefix"]
    _set_back(pg_server, prefix, version)
    db = fdblayer.open(pg_url)
    try:
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
            row = conn.execute(f"SELECT value FROM \"{prefix}_meta\" WHERE name = 'schema_version'").fetchone()
        assert row[0] == SCHEMA_VERSION == 5
        assert db.get(b"kept") == b"v"
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
            bodies = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", (f"{prefix}_commit",)).fetchall()
        assert len(bodies) == 1 and "JOIN r ON w.b = r.b" in bodies[0][0]
        tr = db.create_transaction()
        assert tr.expect_many([b"kept"], [b"wrong"]) == [b"wrong"]
        tr.set(b"out", b"x")
        with pytest.raises(ConflictError):
            tr.commit()
        db.set(b"out", b"y")
        assert db.get(b"out") == b"y"
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
            version, start = conn.execute(
                f"SELECT value, (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint "
                f"FROM \"{prefix}_meta\" WHERE name = 'commit_version'"
            ).fetchone()
        assert version >= start
        tr = db.create_transaction()
        tr.add(b"n", (1).to_bytes(8, "little"))
        tr.add(b"w", b"\x01\x02\x03")
        tr.commit()
        tr = db.create_transaction()
        tr.add(b"w", b"\xff\x00\x00")  # another width than 8: the general function
        tr.commit()
        assert db.get(b"n") == (2**32).to_bytes(8, "little")
        assert db.get(b"w") == b"\x00\x03\x03"
        db.drop()  # every function goes, the older commit function too
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
            left = conn.execute("SELECT proname FROM pg_proc WHERE starts_with(proname, %s)", (prefix,)).fetchall()
        assert left == []
    finally:
        db.close()


@pytest.mark.parametrize("prefix", ["", "1abc", "a;b", "a b", "x" * 41, 'a"b'])
def test_a_bad_prefix_is_refused(prefix):
    with pytest.raises(InvalidStoreURL) as caught:
        fdblayer.parse_store_url(f"postgresql://u@h/db?prefix={prefix}")
    assert "prefix" in str(caught.value)


def test_libpq_parameters_pass_through_and_prefix_does_not():
    parsed = fdblayer.parse_store_url("postgres://u:p@h:5/db?sslmode=disable&prefix=x")
    assert parsed.scheme == "postgresql" and parsed.params == {"prefix": "x", "flush": "commit"}
    assert "sslmode=disable" in parsed.path and "prefix" not in parsed.path
    with pytest.raises(InvalidStoreURL):
        fdblayer.parse_store_url("postgresql://h/db?prefix=a&prefix=b")


def test_long_keys_sharing_the_indexed_prefix_keep_memcmp_order(db):
    """Keys longer than PostgreSQL's index prefix, differing only after it,
    sort as memcmp does (on every backend: it is the interface's order)."""
    head = b"\x01" * KEY_PREFIX_BYTES
    rng = random.Random(7)
    keys = {
        head,
        head + b"\x00",
        head + b"a",
        head + b"a" * 3000,
        head + b"b",
        head[:-1] + b"\x02",
        head + b"\xfe" * 8000,
    }
    keys |= {head + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(40)}
    keys.add(b"\x01" * 10_000)

    @fdblayer.transactional
    def put(tr):
        for k in keys:
            tr.set(k, k[-8:])

    put(db)
    ordered = sorted(keys)
    assert [kv.key for kv in db.get_range(b"\x01", b"\x02")] == ordered
    assert [kv.key for kv in db.get_range(b"\x01", b"\x02", reverse=True)] == ordered[::-1]
    assert [kv.key for kv in db.get_range(b"\x01", b"\x02", limit=5)] == ordered[:5]
    assert [kv.key for kv in db.get_range(b"\x01", b"\x02", limit=5, reverse=True)] == ordered[::-1][:5]
    middle = ordered[20]
    assert [kv.key for kv in db.get_range(middle, b"\x02")] == ordered[20:]
    assert all(db.get(k) == k[-8:] for k in keys)
    with pytest.raises(KeyTooLarge):
        db.set(b"\x01" * 10_001, b"x")
    assert len(db.get_range(b"\x01", b"\x02")) == len(keys), "nothing written by the refused set"


def test_an_unreachable_server_is_server_gone_without_the_password():
    with pytest.raises(ServerGone) as caught:
        fdblayer.open("postgresql://user:sekret-pw@127.0.0.1:1/db")
    assert "sekret-pw" not in str(caught.value) and "***" in str(caught.value)


def test_a_limited_range_read_stops_at_its_limit_whatever_the_statistics(pg_url):
    """A range read in key order with a LIMIT (a claim's due jobs) reads the
    index in order and stops there, on a table of many rows that was never
    analysed (a queue's rows churn faster than autovacuum analyses them):
    the store's connections never read a whole range to sort it."""
    db = fdblayer.open(pg_url)
    try:
        for start in range(0, 20_000, 2_000):
            tr = db.create_transaction()
            for i in range(start, start + 2_000):
                tr.set(b"q/%08d" % i, b"")
            tr.commit()
        conn = db.connect()
        try:
            conn.execute(f'ALTER TABLE "{db.prefix}_kv" SET (autovacuum_enabled = false)')
            plan = "\n".join(
                row[0]
                for row in conn.execute(
                    "EXPLAIN (ANALYZE, FORMAT TEXT) " + db.sql.range_asc, (b"q/", b"q0", b"q/", b"q0", 50)
                ).fetchall()
            )
        finally:
            conn.close()
        scanned = [int(m) for m in re.findall(r"Index Scan using \S+_kv_key .*?actual time=\S+ rows=(\d+)", plan)]
        assert scanned and max(scanned) <= 51, plan
        assert [k for k, _ in db.get_range(b"q/", b"q0", limit=3)] == [b"q/00000000", b"q/00000001", b"q/00000002"]
    finally:
        db.close()
