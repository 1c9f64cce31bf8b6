"""The arrays the PostgreSQL backend encodes itself reach the server as
the lists they were: elements, NULLs, empty bytes, empty arrays, long
ones (a real server reads them back)."""

from __future__ import annotations

import os

import pytest

import fdblayer
from fdblayer.backends.postgres_arrays import ByteaArray, Int4Array


@pytest.fixture
def conn(pg_url):
    db = fdblayer.open(pg_url)
    connection = db.connect()
    yield connection
    connection.close()
    db.close()


@pytest.mark.parametrize(
    "items",
    [[], [b""], [b"a", None, b"\x00\xff" * 600], [None], [os.urandom(n % 40) for n in range(3000)]],
    ids=["empty", "empty-bytes", "mixed", "null", "long"],
)
def test_a_bytea_array_reads_back_as_sent(conn, items):
    (back,) = conn.execute("SELECT %b::bytea[]", (ByteaArray(items),), binary=True).fetchone()
    assert back == items
    (count,) = conn.execute("SELECT cardinality(%b::bytea[])", (ByteaArray(items),)).fetchone()
    assert count == len(items)


@pytest.mark.parametrize("items", [[], [0], [1, -1, 2**31 - 1, -(2**31)], list(range(2000))])
def test_an_int4_array_reads_back_as_sent(conn, items):
    (back,) = conn.execute("SELECT %b::int[]", (Int4Array(items),), binary=True).fetchone()
    assert back == items
