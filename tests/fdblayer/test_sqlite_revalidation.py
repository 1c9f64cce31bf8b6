"""A SQLite transaction whose snapshot went stale conflicts only when
something it read changed (``fdblayer.backends.sqlite_locking``).

SQLite refuses to upgrade a read snapshot to the write lock once anyone
committed since. The transaction then takes the lock as a write does and
runs its recorded reads again: the same answers, and it commits under the
lock; one answer different, ``ConflictError`` and nothing written. These
tests commit between a transaction's reads and its writes with a second
handle (and, for the serializability check, with other processes).
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time

import pytest

import fdblayer
from fdblayer import KeySelector
from fdblayer.backends import sqlite_locking
from fdblayer.backends.sqlite_backend import SqliteDatabase
from fdblayer.exceptions import ConflictError, InvalidTransactionState, LockTimeout
from fdblayer.interface import transactional

WAIT = 30.0  # seconds: deadline of every wait on a thread or process


@pytest.fixture
def store(tmp_path):
    db = SqliteDatabase(str(tmp_path / "reval.db"), "NORMAL")
    yield db
    db.close()


@pytest.fixture
def other(store):
    """A second handle on the same file: its commits make ``store``'s snapshots stale."""
    db = SqliteDatabase(store.path, "NORMAL")
    yield db
    db.close()


class TestAStaleSnapshotWhoseReadsHold:
    def test_point_reads_of_unchanged_keys_commit(self, store, other):
        store.set(b"a", b"1")
        tr = store.create_transaction()
        assert tr.get_many([b"a", b"missing"]) == [b"1", None]
        other.set(b"b", b"theirs")  # after the snapshot, another key
        tr.set(b"out", b"mine")
        tr.commit()
        assert store.get(b"out") == b"mine" and store.get(b"b") == b"theirs"

    def test_a_range_read_unchanged_within_its_limit_commits(self, store, other):
        for i in range(5):
            store.set(b"r%d" % i, b"v")
        tr = store.create_transaction()
        assert [kv.key for kv in tr.get_range(b"r", b"s", limit=2)] == [b"r0", b"r1"]
        other.set(b"r3x", b"new")  # in the range, past what the limited read returned
        tr.set(b"out", b"mine")
        tr.commit()
        assert store.get(b"out") == b"mine"

    def test_a_value_written_back_as_it_was_is_no_conflict(self, store, other):
        """By value, not by version: what the transaction saw is the store's
        state at its commit, so committing there is serializable."""
        store.set(b"a", b"1")
        tr = store.create_transaction()
        assert tr.get(b"a") == b"1"
        other.set(b"a", b"2")
        other.set(b"a", b"1")
        tr.set(b"out", b"x")
        tr.commit()
        assert store.get(b"out") == b"x"

    def test_a_watch_of_a_key_changed_since_the_stale_snapshot_fires(self, store, other):
        """A worker host's claim reads the queue on its snapshot (empty),
        an enqueue commits (the queue's watch key bumped), the claim writes
        (revalidated when it reads over its own writes: nothing it read with
        a conflict changed) and watches the key: the watch must fire, or the enqueued job waits for the
        next enqueue (a stream's last jobs stayed pending for good). It
        compared with the key's value at commit, which already had the
        enqueue's bump."""
        store.set(b"bump", b"\x00")
        store.set(b"queue/a", b"")
        tr = store.create_transaction()
        assert [kv.key for kv in tr.snapshot.get_range(b"queue/", b"queue0")] == [b"queue/a"]
        other.set(b"queue/job", b"")
        other.set(b"bump", b"\x01")  # after the snapshot: the enqueue's wake-up
        tr.clear(b"queue/a")  # the claim takes the job it saw
        tr.snapshot.get_range(b"queue/", b"queue0")  # a read over its own write: the write lock, revalidated
        watch = tr.watch(b"bump")
        tr.commit()
        assert watch.wait(timeout=WAIT)

    def test_a_watch_of_a_snapshot_that_held_fires_only_on_a_change(self, store, other):
        store.set(b"bump", b"\x00")
        tr = store.create_transaction()
        assert tr.get(b"bump") == b"\x00"
        tr.set(b"out", b"mine")
        watch = tr.watch(b"bump")
        tr.commit()
        assert not watch.wait(timeout=0.3)
        other.set(b"bump", b"\x01")
        assert watch.wait(timeout=WAIT)

    def test_a_versionstamped_write_after_a_stale_snapshot_gets_a_later_version(self, store, other):
        tr0 = other.create_transaction()
        tr0.set_versionstamped_value(b"first", b"\x00" * 10 + b"\x00\x00\x00\x00")
        stamp0 = tr0.get_versionstamp()
        tr0.commit()
        tr = store.create_transaction()
        assert tr.get(b"a") is None
        tr1 = other.create_transaction()
        tr1.set_versionstamped_value(b"second", b"\x00" * 10 + b"\x00\x00\x00\x00")
        stamp1 = tr1.get_versionstamp()
        tr1.commit()
        tr.set_versionstamped_value(b"third", b"\x00" * 10 + b"\x00\x00\x00\x00")
        stamp = tr.get_versionstamp()
        tr.commit()
        assert stamp0.wait() < stamp1.wait() < stamp.wait()
        assert store.get(b"third") == stamp.wait()

    def test_a_range_read_after_writes_elsewhere_keeps_the_snapshot(self, store, other):
        """Writes outside a range need not reach SQLite for the read: the
        transaction holds no lock until its commit (another handle writes
        meanwhile without waiting), and its read sees its writes inside."""
        store.set(b"r1", b"v")
        tr = store.create_transaction()
        assert tr.get(b"done") is None  # a read first: the writes then wait for the commit
        tr.set(b"done", b"1")  # outside the range read below
        assert [kv.key for kv in tr.get_range(b"r", b"s")] == [b"r1"]
        other.set(b"elsewhere", b"x")  # would wait for the lock if tr held it
        tr.set(b"r2", b"mine")  # inside: the next read of the range flushes
        assert [kv.key for kv in tr.get_range(b"r", b"s")] == [b"r1", b"r2"]
        tr.commit()
        assert store.get(b"done") == b"1" and store.get(b"r2") == b"mine"

    def test_snapshot_reads_add_no_conflict(self, store, other):
        """As on FoundationDB: what ``tr.snapshot`` read (a key, a range)
        may change before the commit (a claim reads the queue this way, and
        conflicts only on the job it takes)."""
        store.set(b"q1", b"v")
        tr = store.create_transaction()
        assert tr.snapshot.get(b"a") is None
        assert tr.snapshot.get_many([b"b", b"q1"]) == [None, b"v"]
        assert len(tr.snapshot.get_range(b"q", b"r")) == 1
        other.set(b"a", b"1")
        other.set(b"q0", b"new")
        tr.set(b"out", b"mine")
        tr.commit()
        assert store.get(b"out") == b"mine"

    def test_the_upgrade_waits_for_a_lock_held_elsewhere(self, store):
        """SQLite refuses the upgrade at once while another connection holds
        the lock; the transaction waits for it, checks its reads, commits."""
        tr = store.create_transaction()
        assert tr.get(b"a") is None
        raw = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT INTO kv (k, v) VALUES (?, ?)", (b"b", b"raw"))
        releaser = threading.Timer(0.1, raw.execute, args=("COMMIT",))
        releaser.start()
        try:
            tr.set(b"out", b"mine")
            tr.commit()
        finally:
            releaser.join(WAIT)
            raw.close()
        assert store.get(b"out") == b"mine" and store.get(b"b") == b"raw"


class TestAStaleSnapshotWhoseReadsChanged:
    def test_a_changed_point_read_conflicts_and_writes_nothing(self, store, other):
        store.set(b"a", b"1")
        tr = store.create_transaction()
        assert tr.get(b"a") == b"1"
        other.set(b"a", b"2")
        tr.set(b"out", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()
        assert store.get(b"out") is None
        with pytest.raises(ConflictError):
            tr.get(b"a")  # the failed transaction stays failed until reset

    def test_a_key_that_appeared_where_one_was_missing_conflicts(self, store, other):
        tr = store.create_transaction()
        assert tr.get(b"job") is None
        other.set(b"job", b"taken")
        tr.set(b"job", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()
        assert store.get(b"job") == b"taken"

    def test_a_row_inserted_inside_a_range_read_conflicts(self, store, other):
        store.set(b"r1", b"v")
        tr = store.create_transaction()
        assert len(tr.get_range(b"r", b"s")) == 1
        other.set(b"r0", b"new")
        tr.set(b"out", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()
        assert store.get(b"out") is None

    def test_a_key_read_for_real_after_a_snapshot_read_of_it_conflicts(self, store, other):
        """The second read is answered from the transaction's cache, yet
        it is a read for real: the key is checked again."""
        tr = store.create_transaction()
        assert tr.snapshot.get(b"a") is None
        assert tr.get(b"a") is None
        other.set(b"a", b"1")
        tr.set(b"out", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()

    def test_a_read_conflict_key_that_changed_conflicts(self, store, other):
        tr = store.create_transaction()
        tr.add_read_conflict_key(b"claimed")
        other.set(b"claimed", b"by them")
        tr.set(b"out", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()
        assert store.get(b"out") is None

    def test_a_read_conflict_key_after_reads_is_checked_on_the_stale_snapshot(self, store, other):
        """A single key's conflict is only noted; a refused upgrade reads it
        on the stale snapshot first, then again under the lock."""
        store.set(b"claimed", b"pending")
        tr = store.create_transaction()
        assert tr.snapshot.get_range(b"c", b"d")[0].value == b"pending"
        tr.add_read_conflict_key(b"claimed")
        tr.clear(b"claimed")
        other.set(b"claimed", b"taken elsewhere")
        tr.set(b"out", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()
        assert store.get(b"claimed") == b"taken elsewhere" and store.get(b"out") is None

    def test_a_read_conflict_key_left_alone_commits(self, store, other):
        tr = store.create_transaction()
        tr.add_read_conflict_key(b"claimed")
        other.set(b"elsewhere", b"x")
        tr.set(b"out", b"mine")
        tr.commit()
        assert store.get(b"out") == b"mine"

    def test_a_key_selector_whose_answer_moved_conflicts(self, store, other):
        store.set(b"k5", b"v")
        tr = store.create_transaction()
        assert tr.get_key(KeySelector.first_greater_than(b"k")) == b"k5"
        other.set(b"k3", b"v")
        tr.set(b"out", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()

    def test_a_changed_read_before_a_range_clear_conflicts(self, store, other):
        store.set(b"a", b"1")
        store.set(b"c1", b"v")
        tr = store.create_transaction()
        assert tr.get(b"a") == b"1"
        other.set(b"a", b"2")
        with pytest.raises(ConflictError):
            tr.clear_range(b"c", b"d")
        assert store.get(b"c1") == b"v"

    def test_past_the_recording_cap_any_commit_conflicts(self, store, other, monkeypatch):
        monkeypatch.setattr(sqlite_locking, "MAX_RECORDED_ROWS", 3)
        for i in range(5):
            store.set(b"r%d" % i, b"v")
        tr = store.create_transaction()
        assert len(tr.get_range(b"r", b"s")) == 5  # more rows than the cap: not recorded
        other.set(b"elsewhere", b"x")
        tr.set(b"out", b"mine")
        with pytest.raises(ConflictError):
            tr.commit()


def test_a_lock_never_released_ends_the_transaction_with_lock_timeout(tmp_path):
    store = SqliteDatabase(str(tmp_path / "timeout.db"), "NORMAL", lock_timeout=0.3)
    raw = sqlite3.connect(store.path, isolation_level=None)
    try:
        tr = store.create_transaction()
        assert tr.get(b"a") is None
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT INTO kv (k, v) VALUES (?, ?)", (b"b", b"raw"))
        tr.set(b"out", b"mine")
        started = time.monotonic()
        with pytest.raises(LockTimeout):
            tr.commit()
        assert time.monotonic() - started < WAIT
        with pytest.raises(LockTimeout):
            tr.get(b"a")  # failed for good
        raw.execute("ROLLBACK")
        assert store.get(b"out") is None
        tr.reset()
        tr.set(b"out", b"again")
        tr.commit()
        assert store.get(b"out") == b"again"
    finally:
        raw.close()
        store.close()


def test_a_transaction_committed_after_a_revalidation_is_closed(store, other):
    tr = store.create_transaction()
    assert tr.get(b"a") is None
    other.set(b"b", b"x")
    tr.set(b"out", b"mine")
    tr.commit()
    with pytest.raises(InvalidTransactionState):
        tr.get(b"a")


# ------------------------------------------------------------------ serializable under contention

COUNTERS = (b"count-a", b"count-b")
ROUNDS = 150


@transactional
def _increment(tr, key: bytes, noise: bytes) -> None:
    """Read a counter, write it back plus one (a lost update would show), and a key of one's own."""
    raw = tr.get(key)
    tr.set(key, str(int(raw or b"0") + 1).encode())
    tr.set(noise, raw or b"0")


def _worker(url: str, n: int) -> None:
    db = fdblayer.open(url)
    try:
        for i in range(ROUNDS):
            _increment(db, COUNTERS[i % 2], b"noise-%d-%d" % (n, i))
    finally:
        db.close()


def test_read_modify_writes_from_processes_lose_no_update(tmp_path):
    """4 processes increment two counters by reading and writing them back,
    each also writing keys of its own (the commits that make snapshots
    stale without a real conflict): every increment is counted."""
    url = f"sqlite:///{tmp_path}/rmw.db?synchronous=NORMAL"
    fdblayer.open(url).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(url, n)) for n in range(4)]
    for proc in procs:
        proc.start()
    try:
        for proc in procs:
            proc.join(WAIT * 4)
            assert proc.exitcode == 0
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(WAIT)
    db = fdblayer.open(url)
    try:
        total = sum(int(db.get(key) or b"0") for key in COUNTERS)
        assert total == 4 * ROUNDS
        assert db.get(COUNTERS[0]) == str(2 * ROUNDS).encode()
    finally:
        db.close()
