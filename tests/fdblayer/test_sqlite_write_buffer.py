"""The SQLite transaction's write buffer, read cache and buffered atomic adds.

Writes wait in memory until commit (or until a range read, key-selector read
or range clear needs SQLite to see them); point reads are answered from the
transaction's own view; an ``add`` to an unread key runs at commit as one
upsert through the ``fdb_add`` SQL function. These tests check that the
buffer is invisible: every read sees the transaction's writes, conflicts
still happen at the first write, and a transaction crossing ``os.fork()``
is refused (the per-call check counts forks instead of calling getpid).
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading

import pytest

import fdblayer
from fdblayer import KeySelector
from fdblayer.exceptions import ConflictError, InvalidTransactionState
from fdblayer.interface import add_little_endian
from fdblayer.backends.sqlite_backend import SqliteDatabase

WAIT = 30.0  # seconds: deadline of every wait on a thread or process


def _le(n: int, size: int = 8) -> bytes:
    return n.to_bytes(size, "little")


def _raw_value(path: str, key: bytes):
    """The committed value of ``key``, read with plain sqlite3 (no layer cache)."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


@pytest.fixture
def store(tmp_path):
    db = SqliteDatabase(str(tmp_path / "buffer.db"), "NORMAL")
    yield db
    db.close()


class TestReadYourBufferedWrites:
    def test_point_reads_see_sets_and_clears_before_commit(self, store):
        store.set(b"old", b"1")
        tr = store.create_transaction()
        tr[b"new"] = b"2"
        del tr[b"old"]
        assert tr[b"new"] == b"2" and tr[b"old"] is None
        assert _raw_value(store.path, b"new") is None  # still only in memory
        tr.commit()
        assert store.get(b"new") == b"2" and store.get(b"old") is None

    def test_range_and_selector_reads_see_buffered_writes(self, store):
        store.set(b"b", b"old")
        tr = store.create_transaction()
        tr[b"a"] = b"1"
        tr[b"c"] = b"3"
        del tr[b"b"]
        assert tr.get_range(b"", b"\xff") == [(b"a", b"1"), (b"c", b"3")]
        assert tr.get_key(KeySelector.first_greater_than(b"a")) == b"c"
        tr[b"d"] = b"4"  # buffered again after the flush
        assert tr.get_range(b"c", b"\xff", reverse=True) == [(b"d", b"4"), (b"c", b"3")]
        tr.commit()
        assert [kv.key for kv in store.get_range(b"", b"\xff")] == [b"a", b"c", b"d"]

    def test_clear_range_removes_buffered_and_cached_keys(self, store):
        store.set(b"k1", b"stored")
        tr = store.create_transaction()
        assert tr[b"k1"] == b"stored"  # now cached
        tr[b"k2"] = b"buffered"
        tr.add(b"k3", _le(1))  # a buffered add
        tr.clear_range(b"k", b"l")
        assert tr[b"k1"] is None and tr[b"k2"] is None and tr[b"k3"] is None
        tr[b"k4"] = b"after"
        tr.commit()
        assert store.get_range(b"k", b"l") == [(b"k4", b"after")]

    def test_cancel_discards_the_buffer(self, store):
        tr = store.create_transaction()
        tr[b"gone"] = b"1"
        tr.add(b"n", _le(5))
        tr.cancel()
        assert store.get(b"gone") is None and store.get(b"n") is None


class TestBufferedAdds:
    @pytest.mark.parametrize(
        "start, params",
        [
            (None, [_le(1)]),
            (_le(7), [_le(1), _le(2)]),
            (b"\xff\xff", [b"\x01\x00"]),  # wraps
            (_le(300, 2), [b"\x01"]),  # truncated to the param's size
            (b"\x05", [_le(1, 4), b"\x01"]),  # padded, then truncated
            (b"abc", [b""]),  # an empty param empties the value
        ],
    )
    def test_unread_adds_match_little_endian_semantics(self, store, start, params):
        if start is not None:
            store.set(b"n", start)
        tr = store.create_transaction()
        for param in params:
            tr.add(b"n", param)
        tr.commit()
        expected = start
        for param in params:
            expected = add_little_endian(expected, param)
        assert store.get(b"n") == expected

    def test_a_read_folds_the_buffered_adds(self, store):
        store.set(b"n", _le(10))
        tr = store.create_transaction()
        tr.add(b"n", _le(1))
        tr.add(b"n", _le(2))
        assert tr[b"n"] == _le(13)
        tr.add(b"n", _le(4))  # now a known key: added in memory
        assert tr[b"n"] == _le(17)
        tr.commit()
        assert store.get(b"n") == _le(17)

    def test_a_set_overrides_earlier_adds_and_later_adds_apply_to_it(self, store):
        store.set(b"n", _le(10))
        tr = store.create_transaction()
        tr.add(b"n", _le(1))
        tr[b"n"] = _le(100)
        tr.add(b"n", _le(1))
        tr.commit()
        assert store.get(b"n") == _le(101)

    def test_concurrent_blind_adds_lose_nothing(self, store):
        def worker() -> None:
            for _ in range(100):

                @fdblayer.transactional
                def bump(tr) -> None:
                    tr.add(b"counter", _le(1))

                bump(store)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert store.get(b"counter") == _le(400)


class TestConflictsAndCache:
    def test_a_stale_read_write_conflicts_at_commit(self, store, tmp_path):
        other = SqliteDatabase(store.path, "NORMAL")
        try:
            tr = store.create_transaction()
            assert tr[b"job"] is None
            other.set(b"job", b"taken")
            tr[b"job"] = b"mine"  # buffered: takes no lock while the body runs
            with pytest.raises(ConflictError):
                tr.commit()
        finally:
            other.close()
        assert store.get(b"job") == b"taken"

    def test_a_reading_transaction_holds_no_lock_before_commit(self, store):
        other = SqliteDatabase(store.path, "NORMAL")
        try:
            tr = store.create_transaction()
            assert tr[b"a"] is None
            tr[b"a"] = b"1"
            other.set(b"b", b"2")  # would wait for the lock if tr held it
            tr.commit()  # the snapshot is stale, but what it read ("a" absent) still holds
        finally:
            other.close()
        assert store.get(b"a") == b"1" and store.get(b"b") == b"2"

    def test_repeated_reads_come_from_the_snapshot(self, store):
        store.set(b"k", b"1")
        other = SqliteDatabase(store.path, "NORMAL")
        try:
            tr = store.create_transaction()
            assert tr[b"k"] == b"1"
            other.set(b"k", b"2")
            assert tr[b"k"] == b"1"  # the snapshot (and the cache) agree
            tr.commit()  # read-only: commits
        finally:
            other.close()
        assert store.get(b"k") == b"2"


def _use_inherited_transaction(tr, queue) -> None:
    try:
        tr.get(b"k")
    except InvalidTransactionState as exc:
        queue.put(f"refused: {exc}")
    else:
        queue.put("used")


def test_a_started_transaction_is_refused_after_fork(store):
    store.set(b"k", b"1")
    tr = store.create_transaction()
    tr.get(b"k")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_use_inherited_transaction, args=(tr, queue))
    child.start()
    try:
        assert queue.get(timeout=WAIT).startswith("refused")
        child.join(WAIT)
    finally:
        if child.is_alive():
            child.kill()
            child.join(WAIT)
    assert tr.get(b"k") == b"1"  # still usable in the parent
    tr.commit()


def test_many_same_width_adds_fold_into_one_upsert(store):
    """100 adds to one unread key run as one statement at commit, with the same sum."""
    store.set(b"n", _le(2**64 - 50))  # the folded sum wraps as the separate adds would
    tr = store.create_transaction()
    for _ in range(100):
        tr.add(b"n", _le(1))
    statements = []
    conn = tr._conn
    conn.set_trace_callback(statements.append)
    tr.commit()
    conn.set_trace_callback(None)
    upserts = [sql for sql in statements if "fdb_add" in sql]
    assert len(upserts) == 1
    assert store.get(b"n") == _le(50)
